//! `liken adopt`: an identity from files copied off a running k3s server.
//!
//! The harvest is a copy of the server's `/var/lib/rancher/k3s/server`
//! (or of `/var/lib/rancher/k3s`, which holds it as `server/`): its `tls/`
//! CAs, `tls/service.key` and `token`. Every file is checked before
//! anything is written: each certificate parses, each key loads and
//! belongs to its certificate, and the token's CA hash names this
//! server CA. Every missing file and every bad one is reported in one
//! message, so one more copy from the server fixes them all.
//!
//! Files are copied byte for byte (k3s reads the SEC1 keys its own Go code
//! wrote), except a bare pre-secure token, which is written in the secure
//! `K10<hash>::server:<secret>` form.

use std::path::{Path, PathBuf};

use super::{IdentityError, IdentityFile, decide_token, files, keys};
use crate::{Io, args::Parsed};

/// Runs `liken adopt <harvest-dir> <identity-dir>`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [harvest, dir] = parsed.paths()?;
    adopt(&harvest, &dir)?;
    super::report(io.out, "adopted", &dir)?;
    Ok(())
}

/// Where the `server/` part of the harvest is: the harvest itself when it
/// holds `tls/` directly, else its `server/` subdirectory. Returns the
/// directory and the prefix that names files relative to the harvest in
/// messages.
pub fn decide_server_root(harvest: &Path) -> (PathBuf, &'static str) {
    if !harvest.join("server/tls").is_dir() && harvest.join("tls").is_dir() {
        (harvest.to_owned(), "")
    } else {
        (harvest.join("server"), "server/")
    }
}

/// Adopts the harvest into the identity directory `dir`.
pub fn adopt(harvest: &Path, dir: &Path) -> Result<(), IdentityError> {
    let found = super::existing(dir);
    if !found.is_empty() {
        return Err(IdentityError::Exists {
            dir: dir.to_owned(),
            found,
        });
    }
    let (root, prefix) = decide_server_root(harvest);
    let mut missing = Vec::new();
    let mut read: Vec<(IdentityFile, PathBuf, Vec<u8>)> = Vec::new();
    for file in files() {
        let inside = file.rel.strip_prefix("server/").unwrap_or(&file.rel);
        let path = root.join(inside);
        match std::fs::read(&path) {
            Ok(bytes) => read.push((file, path, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(format!("{prefix}{inside}"));
            }
            Err(source) => return Err(IdentityError::Io { path, source }),
        }
    }
    if !missing.is_empty() {
        return Err(IdentityError::Missing {
            harvest: harvest.to_owned(),
            missing,
        });
    }
    let contents = check(&read)?;
    super::write_identity(dir, &contents)
}

/// Checks every file of an identity read from disk (`adopt`'s harvest,
/// `layer`'s input); returns what to write or pack.
pub(crate) fn check(
    read: &[(IdentityFile, PathBuf, Vec<u8>)],
) -> Result<Vec<(IdentityFile, Vec<u8>)>, IdentityError> {
    let bytes_of = |rel: &str| {
        read.iter()
            .find(|(f, _, _)| f.rel == rel)
            .map(|(_, _, b)| b.as_slice())
            .unwrap_or_default()
    };
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (file, path, bytes) in read {
        let mut bytes = bytes.clone();
        let problem = if file.rel.ends_with(".crt") {
            let key = bytes_of(&file.rel.replace(".crt", ".key"));
            check_ca(&bytes, key)
        } else if file.rel.ends_with(".key") {
            keys::signing_key(&bytes).err().map(|p| p.0)
        } else {
            match decide_token(
                &String::from_utf8_lossy(&bytes),
                bytes_of(super::SERVER_CA_CERT),
            ) {
                Ok(token) => {
                    bytes = format!("{token}\n").into_bytes();
                    None
                }
                Err(p) => Some(p),
            }
        };
        match problem {
            Some(p) => problems.push((path.clone(), p)),
            None => out.push((file.clone(), bytes)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(IdentityError::BadFiles(problems))
    }
}

/// A CA certificate and its key: `None` when they belong together. A key
/// that does not load is reported on the key's own file.
fn check_ca(cert: &[u8], key: &[u8]) -> Option<String> {
    let der = match keys::first_certificate(cert) {
        Ok(d) => d,
        Err(p) => return Some(p.0),
    };
    match x509_parser::parse_x509_certificate(&der) {
        Ok((_, c)) if !c.is_ca() => {
            return Some("this certificate is not a CA (basicConstraints CA:FALSE)".into());
        }
        Ok(_) => {}
        Err(e) => return Some(format!("not an X.509 certificate: {e}")),
    }
    let key = keys::signing_key(key).ok()?;
    match keys::key_matches_certificate(&key, &der) {
        Ok(true) => None,
        Ok(false) => Some("the .key file beside it is the key of another certificate".into()),
        Err(p) => Some(p.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    /// A harvest laid out as k3s's data dir, from a fresh mint.
    fn harvest_from_mint(tmp: &Path) -> PathBuf {
        let minted = tmp.join("minted");
        super::super::mint::mint(&minted).unwrap();
        let harvest = tmp.join("harvest");
        std::fs::create_dir_all(harvest.join("server")).unwrap();
        std::fs::rename(minted.join("server"), harvest.join("server")).unwrap();
        harvest
    }

    #[test]
    fn adopt_copies_a_good_harvest_byte_for_byte() {
        let tmp = TestDir::new("adopt");
        let harvest = harvest_from_mint(tmp.path());
        let dir = tmp.path().join("identity");
        adopt(&harvest, &dir).unwrap();
        for f in files() {
            assert_eq!(
                std::fs::read(dir.join(&f.rel)).unwrap(),
                std::fs::read(harvest.join(&f.rel)).unwrap(),
                "{}",
                f.rel
            );
        }
        // The server directory itself works as the harvest too.
        let again = tmp.path().join("identity2");
        adopt(&harvest.join("server"), &again).unwrap();
        let e = adopt(&harvest, &dir).unwrap_err().to_string();
        assert!(e.contains("already holds an identity"), "{e}");
    }

    #[test]
    fn every_missing_file_is_named_at_once() {
        let tmp = TestDir::new("adopt-missing");
        let harvest = harvest_from_mint(tmp.path());
        std::fs::remove_file(harvest.join("server/tls/etcd/peer-ca.key")).unwrap();
        std::fs::remove_file(harvest.join("server/token")).unwrap();
        std::fs::remove_file(harvest.join("server/tls/service.key")).unwrap();
        let dir = tmp.path().join("identity");
        let msg = adopt(&harvest, &dir).unwrap_err().to_string();
        for want in [
            "server/tls/etcd/peer-ca.key",
            "server/token",
            "server/tls/service.key",
        ] {
            assert!(msg.contains(want), "{want} in {msg}");
        }
        assert!(!msg.contains("server-ca.crt"), "{msg}");
        assert!(!dir.exists(), "nothing is written");
    }

    #[test]
    fn a_key_from_another_ca_and_a_foreign_token_are_refused() {
        let tmp = TestDir::new("adopt-bad");
        let harvest = harvest_from_mint(tmp.path());
        let other = tmp.path().join("other");
        super::super::mint::mint(&other).unwrap();
        std::fs::copy(
            other.join("server/tls/client-ca.key"),
            harvest.join("server/tls/client-ca.key"),
        )
        .unwrap();
        std::fs::copy(other.join("server/token"), harvest.join("server/token")).unwrap();
        let dir = tmp.path().join("identity");
        let msg = adopt(&harvest, &dir).unwrap_err().to_string();
        assert!(
            msg.contains("client-ca.crt: the .key file beside it"),
            "{msg}"
        );
        assert!(msg.contains("different clusters"), "{msg}");
        assert!(!dir.exists());
    }

    #[test]
    fn a_bare_token_is_written_in_the_secure_form() {
        let tmp = TestDir::new("adopt-bare");
        let harvest = harvest_from_mint(tmp.path());
        std::fs::write(harvest.join("server/token"), "s3cret\n").unwrap();
        let dir = tmp.path().join("identity");
        adopt(&harvest, &dir).unwrap();
        let token = std::fs::read_to_string(dir.join("server/token")).unwrap();
        let ca = std::fs::read(dir.join("server/tls/server-ca.crt")).unwrap();
        assert_eq!(
            token,
            format!("{}\n", super::super::join_token(&ca, "s3cret"))
        );
    }
}
