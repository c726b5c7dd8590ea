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
//! <identity-dir>/server/tls/service.key    service-account signing key (SEC1)
//! <identity-dir>/server/token              K10<CA hash>::server:<secret>
//! <identity-dir>/server/agent-token        K10<CA hash>::node:<secret>
//! ```
//!
//! k3s derives every leaf certificate (serving, kubelet, controller
//! clients) from these CAs on start, and derives `service.current.key`
//! from the first key in `service.key` on every start
//! (k3s pkg/daemons/control/deps/deps.go, genServiceAccount), so neither
//! is part of the identity.
//!
//! Two tokens, as k3s keeps them (pkg/server/server.go, printTokens):
//! `server/token` joins servers and `server/agent-token` joins agents.
//! The part after `::` is a user and password of k3s's supervisor
//! (pkg/daemons/control/deps/deps.go, genUsers and readTokens: the users
//! `server` and `node`); a server started with `agent-token-file` takes
//! the node password from it (pkg/passwd/passwd.go, EnsureUser, which
//! strips the `K10<hash>::node:` prefix). A follower therefore holds only
//! the agent token, which cannot join a server or read the datastore. The
//! hash in front lets a joining machine check the server's CA before it
//! sends the secret ([`cahash`]).
//!
//! Modules: [`mint`] creates an identity, [`adopt`] arranges one harvested
//! from a k3s server, [`kubeconfig`] derives an admin credential,
//! [`keys`] reads the PEM files all of them share, and [`cahash`] is
//! k3s's hash of the server CA that tokens carry.

pub mod adopt;
pub mod cahash;
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
/// The server token: joins servers (leaders).
pub const TOKEN: &str = "server/token";
/// The agent token: joins agents (followers); k3s's own name for it.
pub const AGENT_TOKEN: &str = "server/agent-token";
/// The server CA's certificate, whose hash the token carries.
pub const SERVER_CA_CERT: &str = "server/tls/server-ca.crt";
/// The client CA, which signs admin credentials.
pub const CLIENT_CA_CERT: &str = "server/tls/client-ca.crt";
/// The client CA's key.
pub const CLIENT_CA_KEY: &str = "server/tls/client-ca.key";

/// The supervisor user a token's credentials name (k3s
/// pkg/daemons/control/deps/deps.go, readTokens: `server:` and `node:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUser {
    /// The server token's user: may join servers and agents.
    Server,
    /// The agent token's user: may join agents only.
    Node,
}

impl TokenUser {
    /// The user name as the token spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenUser::Server => "server",
            TokenUser::Node => "node",
        }
    }
}

/// What an identity file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A CA certificate (public).
    Certificate,
    /// A private key.
    Key,
    /// A token for the given user.
    Token(TokenUser),
}

/// One file of an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFile {
    /// The path relative to the identity directory.
    pub rel: String,
    /// What the file holds.
    pub kind: FileKind,
    /// Whether it is a secret (written 0600): keys and tokens.
    pub private: bool,
}

impl IdentityFile {
    fn new(rel: String, kind: FileKind) -> IdentityFile {
        IdentityFile {
            rel,
            private: kind != FileKind::Certificate,
            kind,
        }
    }
}

/// Every file an identity holds, in a fixed order.
pub fn files() -> Vec<IdentityFile> {
    let mut out = Vec::new();
    for ca in CAS {
        out.push(IdentityFile::new(
            format!("{TLS_DIR}/{}.crt", ca.stem),
            FileKind::Certificate,
        ));
        out.push(IdentityFile::new(
            format!("{TLS_DIR}/{}.key", ca.stem),
            FileKind::Key,
        ));
    }
    out.push(IdentityFile::new(SERVICE_KEY.to_owned(), FileKind::Key));
    out.push(IdentityFile::new(
        TOKEN.to_owned(),
        FileKind::Token(TokenUser::Server),
    ));
    out.push(IdentityFile::new(
        AGENT_TOKEN.to_owned(),
        FileKind::Token(TokenUser::Node),
    ));
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
    /// A made file could not be encoded (a bug: what mint makes is
    /// always encodable).
    Encoding {
        /// Which file.
        what: String,
        /// Why.
        why: String,
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
            IdentityError::Encoding { what, why } => write!(
                f,
                "encoding {what}: {why}; nothing was written, please report this"
            ),
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

/// A token in k3s's secure form for a server CA file's bytes, a user and
/// a secret: `K10<CA hash>::<user>:<secret>` (k3s
/// pkg/clientaccess/token.go, FormatTokenBytes). A joining machine checks
/// the hash against the CA the server presents before it sends the
/// secret.
pub fn format_token(server_ca_pem: &[u8], user: TokenUser, secret: &str) -> Result<String, String> {
    let hash = cahash::hash_ca(server_ca_pem, cahash::now())?;
    Ok(format!("K10{hash}::{}:{secret}", user.as_str()))
}

/// A token file's text checked against the server CA, for the token's
/// user: returns the token in the secure form. A bare secret (older k3s)
/// is turned into the secure form; a secure token whose hash names
/// another CA, or whose credentials are not the expected user's, is
/// refused.
pub fn decide_token(text: &str, server_ca_pem: &[u8], user: TokenUser) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err("the token file must hold one token on one line".into());
    }
    let Some(rest) = token.strip_prefix("K10") else {
        return format_token(server_ca_pem, user, token);
    };
    let Some((hash, credentials)) = rest.split_once("::") else {
        return Err("the token starts with K10 but has no ::<user>:<secret> part".into());
    };
    let expected = cahash::hash_ca(server_ca_pem, cahash::now())?;
    if hash != expected {
        return Err(format!(
            "the token's CA hash is {hash}, but server-ca.crt hashes to {expected}: \
             the token and the CA come from different clusters"
        ));
    }
    match credentials.split_once(':') {
        Some((u, secret)) if u == user.as_str() && !secret.is_empty() => Ok(token.to_owned()),
        Some((u, secret)) if !secret.is_empty() => Err(format!(
            "the token is for the user {u:?}, but this file must hold the {:?} user's token",
            user.as_str()
        )),
        _ => Err(format!(
            "the token's credentials must read {}:<secret>",
            user.as_str()
        )),
    }
}

/// The secret part of a token (what follows `::<user>:`), or the whole
/// text of a bare token.
pub fn token_secret(token: &str) -> &str {
    let token = token.trim();
    match token.strip_prefix("K10").and_then(|r| r.split_once("::")) {
        Some((_, credentials)) => credentials
            .split_once(':')
            .map_or(credentials, |(_, secret)| secret),
        None => token,
    }
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
        "The keys and the tokens are secrets: keep {} out of version control.",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_has_k3s_names_and_private_keys() {
        let f = files();
        assert_eq!(f.len(), 13);
        for want in [
            "server/tls/server-ca.crt",
            "server/tls/client-ca.key",
            "server/tls/request-header-ca.crt",
            "server/tls/etcd/peer-ca.key",
            "server/tls/etcd/server-ca.crt",
            "server/tls/service.key",
            "server/token",
            "server/agent-token",
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
        let users: Vec<(&str, TokenUser)> = f
            .iter()
            .filter_map(|x| match x.kind {
                FileKind::Token(u) => Some((x.rel.as_str(), u)),
                _ => None,
            })
            .collect();
        assert_eq!(
            users,
            [
                ("server/token", TokenUser::Server),
                ("server/agent-token", TokenUser::Node)
            ]
        );
    }

    fn make_ca(name: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.self_signed(&key).unwrap().pem().into_bytes()
    }

    #[test]
    fn tokens_carry_the_ca_hash_and_their_user() {
        let ca = make_ca("k3s-server-ca");
        let t = format_token(&ca, TokenUser::Server, "abc").unwrap();
        assert!(t.starts_with("K10") && t.ends_with("::server:abc"));
        assert_eq!(t.len(), 3 + 64 + "::server:abc".len());
        let server = |text: &str| decide_token(text, &ca, TokenUser::Server);
        assert_eq!(server(&format!("{t}\n")), Ok(t.clone()));
        assert_eq!(
            server("secret\n"),
            format_token(&ca, TokenUser::Server, "secret")
        );
        let other = format_token(&make_ca("another"), TokenUser::Server, "abc").unwrap();
        assert!(server(&other).unwrap_err().contains("different clusters"));
        assert!(server("").is_err());
        assert!(server("a b").is_err());
        assert!(server(&format!("{}::server:", &t[..67])).is_err());

        // The agent token's user is node; the server token is not one.
        let a = format_token(&ca, TokenUser::Node, "def").unwrap();
        assert!(a.ends_with("::node:def"), "{a}");
        assert_eq!(decide_token(&a, &ca, TokenUser::Node), Ok(a.clone()));
        let e = decide_token(&t, &ca, TokenUser::Node).unwrap_err();
        assert!(e.contains("\"server\"") && e.contains("\"node\""), "{e}");
        assert_eq!(
            decide_token("def", &ca, TokenUser::Node),
            Ok(a.clone()),
            "a bare secret becomes the node user's token"
        );
        assert_eq!(token_secret(&a), "def");
        assert_eq!(token_secret("bare\n"), "bare");
        assert!(format_token(b"no certificate", TokenUser::Node, "x").is_err());
    }
}
