//! `liken keygen -secureboot <dir>`: the fleet's own Secure Boot keys,
//! and reading their public halves back for `liken stick -secureboot`.
//!
//! keygen makes three RSA-2048 keys with self-signed X.509 certificates,
//! as sbctl and systemd's documentation do: PK (the platform key), KEK
//! (the key exchange key) and db (the key whose signatures boot). A
//! firmware checks a signature against the one certificate in the
//! variable above it, not along a chain, so nothing is gained by having
//! PK issue the others. For each it writes, beside one owner GUID for
//! the fleet (`GUID`):
//!
//! ```text
//! <name>.key   the private key, PEM, 0600 (created 0600 by liken; openssl writes it to a pipe)
//! <name>.crt   the certificate, PEM, 0644
//! <name>.esl   an EFI signature list holding the certificate
//! <name>.auth  the list as a time-based authenticated variable:
//!              PK.auth and KEK.auth signed by PK, db.auth by KEK
//! ```
//!
//! The structures are written in Rust ([`efi`]), and the two operations
//! that need RSA, making a key and a certificate and signing a PKCS#7,
//! are Debian's `openssl` (the crates liken may use have no RSA or
//! PKCS#7). Doing the lists in Rust rather than with efitools means one
//! Debian package (openssl, already on every workstation) instead of two
//! at run time, and the bytes are held to efitools' own
//! (`cert-to-efi-sig-list`, `sign-efi-sig-list`) by a test. Nothing
//! here ever prints a private key; the files are never overwritten, and
//! a run that fails removes what it made.
//!
//! The module takes plain values and answers with [`SecureBootError`],
//! so it imports nothing of the crate's command layer
//! (scripts/import-layers.py).

pub mod efi;

use std::ffi::OsStr;
use std::fmt;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use liken_api::Time;
use liken_disk::guid::Guid;
use liken_releases::files;
use sha2::{Digest, Sha256};

use efi::{EfiTime, Var};

/// The file that holds the fleet's owner GUID, as text.
pub const GUID_FILE: &str = "GUID";
/// How long the certificates are valid. UEFI firmware does not check a
/// Secure Boot certificate's dates (it has no trusted clock); the span
/// is for the tools that read them (sbverify, openssl).
pub const VALIDITY_DAYS: u32 = 3650;
/// The modulus the keys get: what firmware is required to support (UEFI
/// 2.10 §32.2.4, "RSA-2048"); some refuse larger.
pub const RSA_BITS: u32 = 2048;
/// The largest `.auth` file read back: one certificate and its signature.
const MAX_AUTH: u64 = 64 << 10;

/// Why no keys were made, or read.
#[derive(Debug)]
pub enum SecureBootError {
    /// A program keygen needs is not on PATH.
    MissingTool {
        /// The program.
        tool: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// A program failed.
    Tool {
        /// What was being done.
        doing: String,
        /// Its standard error.
        stderr: String,
    },
    /// A file keygen would write exists.
    KeyExists(PathBuf),
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A file is not what it should be.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Writing the command's output failed.
    Output(std::io::Error),
}

impl fmt::Display for SecureBootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecureBootError::MissingTool { tool, package } => write!(
                f,
                "{tool} is not on PATH, and Secure Boot keys are made with it; install Debian's \
                 {package} package (apt-get install {package})"
            ),
            SecureBootError::Tool { doing, stderr } => {
                write!(f, "{doing} failed: {}", stderr.trim())
            }
            SecureBootError::KeyExists(p) => write!(
                f,
                "{} already exists; Secure Boot keys are made only into a directory without \
                 them (a machine that enrolled them trusts nothing else, so they are never \
                 overwritten)",
                p.display()
            ),
            SecureBootError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            SecureBootError::Format { path, why } => write!(
                f,
                "{} is not a key file `liken keygen -secureboot` wrote ({why}); give the \
                 directory it made",
                path.display()
            ),
            SecureBootError::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl std::error::Error for SecureBootError {}

impl From<std::io::Error> for SecureBootError {
    fn from(e: std::io::Error) -> SecureBootError {
        SecureBootError::Output(e)
    }
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> SecureBootError + '_ {
    move |source| SecureBootError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The programs keygen runs.
#[derive(Clone, Debug)]
pub struct Tools {
    /// openssl(1).
    pub openssl: PathBuf,
}

/// `name` in the directories of a PATH value.
fn find_on(path: &OsStr, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

impl Tools {
    /// Finds the programs on `path` (a PATH value).
    pub fn find(path: &OsStr) -> Result<Tools, SecureBootError> {
        let openssl = find_on(path, "openssl").ok_or(SecureBootError::MissingTool {
            tool: "openssl",
            package: "openssl",
        })?;
        Ok(Tools { openssl })
    }

    /// Finds them on this process's PATH.
    pub fn from_env() -> Result<Tools, SecureBootError> {
        Tools::find(&std::env::var_os("PATH").unwrap_or_default())
    }

    /// Runs openssl with `args`, `input` on its standard input; returns
    /// its standard output.
    fn openssl(
        &self,
        doing: &str,
        args: &[&OsStr],
        input: &[u8],
    ) -> Result<Vec<u8>, SecureBootError> {
        let failed = |stderr: String| SecureBootError::Tool {
            doing: format!("{doing} (openssl)"),
            stderr,
        };
        let mut child = Command::new(&self.openssl)
            .args(args)
            .env_remove("OPENSSL_CONF")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("cannot run {}: {e}", self.openssl.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            // Small inputs (a certificate list, ~1 KiB) fit the pipe, so
            // writing before reading cannot block.
            stdin
                .write_all(input)
                .map_err(|e| failed(format!("writing to it: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| failed(format!("waiting for it: {e}")))?;
        if !out.status.success() {
            return Err(failed(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out.stdout)
    }
}

/// The files keygen writes into `dir`, in the order it writes them.
pub fn key_files(dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![dir.join(GUID_FILE)];
    for var in Var::ALL {
        for ext in ["key", "crt", "esl", "auth"] {
            v.push(dir.join(format!("{}.{ext}", var.name())));
        }
    }
    v
}

/// One key keygen made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MadeKey {
    /// Which.
    pub var: Var,
    /// The certificate's subject CN.
    pub subject: String,
    /// SHA-256 of the certificate's DER, hex.
    pub fingerprint: String,
}

/// What keygen made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    /// The fleet's owner GUID.
    pub owner: Guid,
    /// The three keys.
    pub keys: Vec<MadeKey>,
    /// The .auth files' timestamp.
    pub time: EfiTime,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The DER inside a PEM certificate.
fn cert_der(pem_text: &[u8], path: &Path) -> Result<Vec<u8>, SecureBootError> {
    let p = pem::parse(pem_text).map_err(|e| SecureBootError::Format {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    if p.tag() != "CERTIFICATE" {
        return Err(SecureBootError::Format {
            path: path.to_owned(),
            why: format!("a PEM {} where a CERTIFICATE belongs", p.tag()),
        });
    }
    Ok(p.into_contents())
}

/// Files written so far; removed unless [`Written::keep`] is called, so
/// a failed run leaves nothing that would make the next one refuse.
struct Written(Vec<PathBuf>);

impl Written {
    fn new_file(&mut self, path: PathBuf, bytes: &[u8], mode: u32) -> Result<(), SecureBootError> {
        files::write_new(&path, bytes, mode).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SecureBootError::KeyExists(path.clone())
            } else {
                io_at(&path)(e)
            }
        })?;
        self.0.push(path);
        Ok(())
    }

    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Makes the fleet's Secure Boot keys in `dir` with `tools`, the
/// authenticated variables stamped `now`.
pub fn keygen(dir: &Path, tools: &Tools, now: Time) -> Result<Made, SecureBootError> {
    for p in key_files(dir) {
        if std::fs::symlink_metadata(&p).is_ok() {
            return Err(SecureBootError::KeyExists(p));
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(files::PRIVATE_DIR)
        .create(dir)
        .map_err(io_at(dir))?;
    let time = EfiTime::from_rfc3339(&now.to_string()).ok_or_else(|| SecureBootError::Tool {
        doing: "reading the clock".into(),
        stderr: format!("{now} is not a time an EFI variable can carry"),
    })?;
    let owner = Guid::random().map_err(io_at(Path::new("/dev/urandom")))?;
    let owner_text = owner.to_string().to_lowercase();
    let mut written = Written(Vec::new());
    written.new_file(
        dir.join(GUID_FILE),
        format!("{owner_text}\n").as_bytes(),
        files::PUBLIC,
    )?;
    let mut made = Vec::new();
    let mut lists = Vec::new();
    for var in Var::ALL {
        let name = var.name();
        let key = dir.join(format!("{name}.key"));
        let crt = dir.join(format!("{name}.crt"));
        let bits = format!("rsa_keygen_bits:{RSA_BITS}");
        let pem_key = tools.openssl(
            &format!("making the {name} key"),
            &[
                "genpkey".as_ref(),
                "-quiet".as_ref(),
                "-algorithm".as_ref(),
                "RSA".as_ref(),
                "-pkeyopt".as_ref(),
                bits.as_ref(),
            ],
            b"",
        )?;
        written.new_file(key.clone(), &pem_key, files::PRIVATE)?;
        let subject = format!("liken {name} {owner_text}");
        let subj = format!("/CN={subject}/");
        let days = VALIDITY_DAYS.to_string();
        let pem_crt = tools.openssl(
            &format!("making the {name} certificate"),
            &[
                "req".as_ref(),
                "-new".as_ref(),
                "-x509".as_ref(),
                "-key".as_ref(),
                key.as_os_str(),
                "-subj".as_ref(),
                subj.as_ref(),
                "-days".as_ref(),
                days.as_ref(),
                "-sha256".as_ref(),
            ],
            b"",
        )?;
        let der = cert_der(&pem_crt, &crt)?;
        written.new_file(crt.clone(), &pem_crt, files::PUBLIC)?;
        let list = efi::signature_list(owner, &der);
        written.new_file(dir.join(format!("{name}.esl")), &list, files::PUBLIC)?;
        made.push(MadeKey {
            var,
            subject,
            fingerprint: hex(&Sha256::digest(&der)),
        });
        lists.push((var, list));
    }
    for (var, list) in &lists {
        let signer = var.signer().name();
        let tbs = efi::to_be_signed(*var, time, list);
        let key = dir.join(format!("{signer}.key"));
        let crt = dir.join(format!("{signer}.crt"));
        let content_info = tools.openssl(
            &format!("signing {}.auth with the {signer} key", var.name()),
            &[
                "smime".as_ref(),
                "-sign".as_ref(),
                "-binary".as_ref(),
                "-noattr".as_ref(),
                "-md".as_ref(),
                "sha256".as_ref(),
                "-outform".as_ref(),
                "DER".as_ref(),
                "-signer".as_ref(),
                crt.as_os_str(),
                "-inkey".as_ref(),
                key.as_os_str(),
            ],
            &tbs,
        )?;
        let signed = efi::signed_data(&content_info).map_err(|e| SecureBootError::Tool {
            doing: format!("signing {}.auth (openssl smime)", var.name()),
            stderr: e.to_string(),
        })?;
        let auth = efi::authenticated(time, signed, list);
        written.new_file(
            dir.join(format!("{}.auth", var.name())),
            &auth,
            files::PUBLIC,
        )?;
    }
    files::sync_dir(dir).map_err(io_at(dir))?;
    written.keep();
    Ok(Made {
        owner,
        keys: made,
        time,
    })
}

/// `liken keygen -secureboot <dir>`.
pub fn keygen_command(dir: &Path, out: &mut dyn Write) -> Result<(), SecureBootError> {
    let tools = Tools::from_env()?;
    let made = keygen(dir, &tools, Time::from_system(std::time::SystemTime::now()))?;
    let d = dir.display();
    writeln!(
        out,
        "Secure Boot keys for the fleet in {d} (owner GUID {}, in {d}/{GUID_FILE}):",
        made.owner.to_string().to_lowercase()
    )?;
    for k in &made.keys {
        let signer = k.var.signer().name();
        writeln!(
            out,
            "  {name}: {d}/{name}.key (private, 0600), {d}/{name}.crt (CN {}, sha256 {}), \
             {d}/{name}.esl, {d}/{name}.auth (signed by {signer}, {})",
            k.subject,
            k.fingerprint,
            made.time,
            name = k.var.name(),
        )?;
    }
    writeln!(
        out,
        "Keep the .key files off machines, offline if you can: db.key signs what the \
         machines boot, KEK.key and PK.key change what they trust. Only the public halves \
         (.auth) go on install media: liken stick -secureboot {d} ... puts them where \
         systemd-boot enrols them on a machine in setup mode."
    )?;
    Ok(())
}

/// The public halves systemd-boot enrols, read back from a keygen
/// directory and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnrolKeys {
    /// The `.auth` files' names and bytes, in
    /// [`liken_api::bootloader::SECURE_BOOT_KEY_FILES`]'s order.
    pub files: Vec<(&'static str, Vec<u8>)>,
    /// The db certificate (DER), which signed boot images carry.
    pub db_cert: Vec<u8>,
    /// The owner GUID of the lists.
    pub owner: Guid,
}

fn read_small(path: &Path) -> Result<Vec<u8>, SecureBootError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_AUTH + 1).read_to_end(&mut bytes))
        .map_err(io_at(path))?;
    if bytes.len() as u64 > MAX_AUTH {
        return Err(SecureBootError::Format {
            path: path.to_owned(),
            why: format!("larger than {MAX_AUTH} bytes"),
        });
    }
    Ok(bytes)
}

/// Reads `dir`'s PK.auth, KEK.auth and db.auth: each one authenticated
/// signature list of one certificate, all of one owner. Nothing else of
/// `dir` is read, so no private key can come along.
pub fn read_enrol_keys(dir: &Path) -> Result<EnrolKeys, SecureBootError> {
    let mut files = Vec::new();
    let mut db_cert = Vec::new();
    let mut owner = None;
    for name in liken_api::bootloader::SECURE_BOOT_KEY_FILES {
        let path = dir.join(name);
        let bytes = read_small(&path)?;
        let auth = efi::parse_auth(&bytes).map_err(|e| SecureBootError::Format {
            path: path.clone(),
            why: e.to_string(),
        })?;
        if *owner.get_or_insert(auth.owner) != auth.owner {
            return Err(SecureBootError::Format {
                path: path.clone(),
                why: "its owner GUID is not the other files' (files of two keygen runs?)".into(),
            });
        }
        if name == "db.auth" {
            db_cert = auth.cert.to_vec();
        }
        files.push((name, bytes));
    }
    Ok(EnrolKeys {
        files,
        db_cert,
        owner: owner.unwrap_or(Guid::NIL),
    })
}

#[cfg(test)]
mod tests;
