//! The cluster identity: what makes every machine of one cluster trust
//! the others, laid out the way k3s lays out its own data directory.
//!
//! An identity directory mirrors the `server/` part of k3s's data dir
//! (`/var/lib/rancher/k3s/server`), so init copies it into place on a
//! leader's first boot and k3s finds its CAs instead of making new ones:
//!
//! ```text
//! <identity-dir>/server/tls/server-ca.crt, server-ca.key
//! <identity-dir>/server/tls/client-ca.crt, client-ca.key
//! <identity-dir>/server/tls/request-header-ca.crt, request-header-ca.key
//! <identity-dir>/server/tls/etcd/peer-ca.crt, etcd/peer-ca.key
//! <identity-dir>/server/tls/etcd/server-ca.crt, etcd/server-ca.key
//! <identity-dir>/server/tls/service.key    service-account signing key
//! <identity-dir>/server/token              K10<sha256 of server-ca.crt>::server:<secret>
//! ```
//!
//! k3s derives every leaf certificate (serving, kubelet, controller
//! clients) from these CAs on start, and derives `service.current.key`
//! from the first key in `service.key` on every start, so neither is part
//! of the identity. The token's hash lets a joining machine check the
//! server's CA before it sends the secret.
//!
//! Modules: [`mint`] creates an identity, [`adopt`] arranges one harvested
//! from a k3s server, [`kubeconfig`] derives an admin credential, and
//! [`keys`] reads the PEM files all of them share.

pub mod adopt;
pub mod keys;
pub mod kubeconfig;
pub mod mint;

use std::fmt;
use std::path::{Path, PathBuf};

/// One certificate authority of the identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ca {
    /// The path under `server/tls/` without extension (`etcd/peer-ca`).
    pub stem: &'static str,
    /// The common-name prefix k3s gives this CA (`k3s-server-ca`); the
    /// creation time follows it (`k3s-server-ca@1700000000`), as k3s does.
    pub common_name: &'static str,
}

/// The five CAs, in the order k3s creates them.
pub const CAS: [Ca; 5] = [
    Ca {
        stem: "client-ca",
        common_name: "k3s-client-ca",
    },
    Ca {
        stem: "server-ca",
        common_name: "k3s-server-ca",
    },
    Ca {
        stem: "request-header-ca",
        common_name: "k3s-request-header-ca",
    },
    Ca {
        stem: "etcd/server-ca",
        common_name: "etcd-server-ca",
    },
    Ca {
        stem: "etcd/peer-ca",
        common_name: "etcd-peer-ca",
    },
];

/// Where the TLS files live inside an identity.
pub const TLS_DIR: &str = "server/tls";
/// The service-account signing key.
pub const SERVICE_KEY: &str = "server/tls/service.key";
/// The join token.
pub const TOKEN: &str = "server/token";
/// The server CA's certificate, whose hash the token carries.
pub const SERVER_CA_CERT: &str = "server/tls/server-ca.crt";
/// The client CA, which signs admin credentials.
pub const CLIENT_CA_CERT: &str = "server/tls/client-ca.crt";
/// The client CA's key.
pub const CLIENT_CA_KEY: &str = "server/tls/client-ca.key";

/// One file of an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFile {
    /// The path relative to the identity directory.
    pub rel: String,
    /// Whether it is a secret (written 0600).
    pub private: bool,
}

/// Every file an identity holds, in a fixed order.
pub fn files() -> Vec<IdentityFile> {
    let mut out = Vec::new();
    for ca in CAS {
        out.push(IdentityFile {
            rel: format!("{TLS_DIR}/{}.crt", ca.stem),
            private: false,
        });
        out.push(IdentityFile {
            rel: format!("{TLS_DIR}/{}.key", ca.stem),
            private: true,
        });
    }
    out.push(IdentityFile {
        rel: SERVICE_KEY.to_owned(),
        private: true,
    });
    out.push(IdentityFile {
        rel: TOKEN.to_owned(),
        private: true,
    });
    out
}

/// The directories an identity holds, parents first.
pub const DIRS: [&str; 3] = ["server", "server/tls", "server/tls/etcd"];

/// Why an identity command failed.
#[derive(Debug)]
pub enum IdentityError {
    /// Files of an identity are already where a new one would go.
    Exists {
        /// The identity directory.
        dir: PathBuf,
        /// Each file that is already there.
        found: Vec<PathBuf>,
    },
    /// A harvest lacks files an identity needs.
    Missing {
        /// Where the files were looked for.
        harvest: PathBuf,
        /// Each missing file, relative to the harvest.
        missing: Vec<String>,
    },
    /// Files that are not what their names say.
    BadFiles(Vec<(PathBuf, String)>),
    /// Reading or writing a file failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// rcgen refused to build a certificate (a bug or a broken CA).
    Certificate {
        /// Which certificate.
        what: String,
        /// rcgen's reason.
        source: rcgen::Error,
    },
    /// The system's random source failed.
    Random,
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::Exists { dir, found } => {
                write!(f, "{} already holds an identity:", dir.display())?;
                for p in found {
                    write!(f, "\n  {} exists", p.display())?;
                }
                write!(
                    f,
                    "\nnothing was written. Use a new directory; to replace this cluster's \
                     identity (every machine must then get the new one), remove these files first"
                )
            }
            IdentityError::Missing { harvest, missing } => {
                write!(f, "{} lacks files an identity needs:", harvest.display())?;
                for m in missing {
                    write!(f, "\n  {m}")?;
                }
                write!(
                    f,
                    "\ncopy them from the k3s server's /var/lib/rancher/k3s/server \
                     (tls/ and token) and run adopt again"
                )
            }
            IdentityError::BadFiles(problems) => {
                write!(f, "these files cannot be used as they are:")?;
                for (path, problem) in problems {
                    write!(f, "\n  {}: {problem}", path.display())?;
                }
                write!(f, "\nnothing was written; replace them with good copies")
            }
            IdentityError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            IdentityError::Certificate { what, source } => {
                write!(f, "making the {what} certificate: {source}")
            }
            IdentityError::Random => write!(
                f,
                "the system's random number source failed; nothing was written, try again"
            ),
        }
    }
}

impl std::error::Error for IdentityError {}

/// Wraps an io::Error with its path.
pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Fills `buf` from the system CSPRNG (getrandom through ring).
pub(crate) fn random(buf: &mut [u8]) -> Result<(), IdentityError> {
    use ring::rand::SecureRandom;
    ring::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| IdentityError::Random)
}

/// The join token for a server CA certificate file's bytes and a secret:
/// k3s's secure format, whose hash a joining machine checks against the
/// CA the server presents.
pub fn join_token(server_ca_pem: &[u8], secret: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(server_ca_pem);
    format!("K10{}::server:{secret}", keys::hex(&hash))
}

/// Reads a token file and checks it against the server CA: returns the
/// token (trimmed) in the secure form. A bare secret (older k3s) is
/// turned into the secure form; a secure token whose hash names another
/// CA is refused.
pub fn decide_token(text: &str, server_ca_pem: &[u8]) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err("the token file must hold one token on one line".into());
    }
    let Some(rest) = token.strip_prefix("K10") else {
        return Ok(join_token(server_ca_pem, token));
    };
    let Some((hash, credentials)) = rest.split_once("::") else {
        return Err("the token starts with K10 but has no ::<user>:<secret> part".into());
    };
    let expected = &join_token(server_ca_pem, "")[3..67];
    if hash != expected {
        return Err(format!(
            "the token's CA hash is {hash}, but server-ca.crt hashes to {expected}: \
             the token and the CA come from different clusters"
        ));
    }
    if credentials
        .split_once(':')
        .is_none_or(|(_, s)| s.is_empty())
    {
        return Err("the token's credentials must read <user>:<secret>".into());
    }
    Ok(token.to_owned())
}

/// The identity files already present in `dir`.
pub fn existing(dir: &Path) -> Vec<PathBuf> {
    files()
        .into_iter()
        .map(|f| dir.join(f.rel))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect()
}

/// Writes a whole identity into `dir`: directories 0700, keys and token
/// 0600, certificates 0644, each file created exclusively so nothing is
/// ever overwritten. If any write fails, the files written so far are
/// removed again, so a failed run leaves no half identity behind.
pub(crate) fn write_identity(
    dir: &Path,
    contents: &[(IdentityFile, Vec<u8>)],
) -> Result<(), IdentityError> {
    let found = existing(dir);
    if !found.is_empty() {
        return Err(IdentityError::Exists {
            dir: dir.to_owned(),
            found,
        });
    }
    for d in std::iter::once(dir.to_owned()).chain(DIRS.iter().map(|d| dir.join(d))) {
        crate::files::create_dirs(&d, crate::files::PRIVATE_DIR).map_err(io_at(&d))?;
    }
    let mut written = Vec::new();
    for (file, bytes) in contents {
        let path = dir.join(&file.rel);
        let mode = if file.private {
            crate::files::PRIVATE
        } else {
            crate::files::PUBLIC
        };
        if let Err(e) = crate::files::write_new(&path, bytes, mode) {
            for p in &written {
                let _ = std::fs::remove_file(p);
            }
            return Err(if e.kind() == std::io::ErrorKind::AlreadyExists {
                IdentityError::Exists {
                    dir: dir.to_owned(),
                    found: vec![path],
                }
            } else {
                IdentityError::Io { path, source: e }
            });
        }
        written.push(path);
    }
    for d in std::iter::once(dir.to_owned()).chain(DIRS.iter().map(|d| dir.join(d))) {
        std::fs::File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(io_at(&d))?;
    }
    Ok(())
}

/// Prints what an identity command wrote (paths only, never contents).
pub(crate) fn report(out: &mut dyn std::io::Write, verb: &str, dir: &Path) -> std::io::Result<()> {
    writeln!(out, "{verb} a cluster identity in {}:", dir.display())?;
    for f in files() {
        let note = if f.private { "  (private, 0600)" } else { "" };
        writeln!(out, "  {}{note}", f.rel)?;
    }
    writeln!(
        out,
        "The keys and the token are secrets: keep {} out of version control.",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_has_k3s_names_and_private_keys() {
        let f = files();
        assert_eq!(f.len(), 12);
        for want in [
            "server/tls/server-ca.crt",
            "server/tls/client-ca.key",
            "server/tls/request-header-ca.crt",
            "server/tls/etcd/peer-ca.key",
            "server/tls/etcd/server-ca.crt",
            "server/tls/service.key",
            "server/token",
        ] {
            assert!(f.iter().any(|x| x.rel == want), "{want}");
        }
        for x in &f {
            assert_eq!(
                x.private,
                x.rel.ends_with(".key") || x.rel.ends_with("token"),
                "{}",
                x.rel
            );
        }
    }

    #[test]
    fn tokens_carry_the_ca_hash() {
        let ca = b"-----BEGIN CERTIFICATE-----\n...\n";
        let t = join_token(ca, "abc");
        assert!(t.starts_with("K10") && t.ends_with("::server:abc"));
        assert_eq!(t.len(), 3 + 64 + "::server:abc".len());
        assert_eq!(decide_token(&format!("{t}\n"), ca), Ok(t.clone()));
        assert_eq!(decide_token("secret\n", ca), Ok(join_token(ca, "secret")));
        let other = join_token(b"another CA", "abc");
        assert!(
            decide_token(&other, ca)
                .unwrap_err()
                .contains("different clusters")
        );
        assert!(decide_token("", ca).is_err());
        assert!(decide_token("a b", ca).is_err());
        let no_secret = format!("{}::server:", &t[..67]);
        assert!(decide_token(&no_secret, ca).is_err());
    }
}
