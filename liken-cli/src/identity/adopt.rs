//! `liken adopt`: an identity from files copied off a running k3s server.
//!
//! The harvest is a copy of the server's `/var/lib/rancher/k3s/server`
//! (or of `/var/lib/rancher/k3s`, which holds it as `server/`): its `tls/`
//! CAs, `tls/service.key`, `token` and, when the server has one,
//! `agent-token`. Every file is checked before anything is written: each
//! certificate parses, each key loads and belongs to its certificate, and
//! each token's CA hash names this server CA, computed by k3s's own rule
//! ([`super::cahash`]: the file's bytes for one certificate, the root's
//! DER for a chain). Every missing file and every bad one is reported in
//! one message, so one more copy from the server fixes them all.
//!
//! Files are copied byte for byte (k3s reads the SEC1 keys its own Go code
//! wrote), except a bare pre-secure token, which is written in the secure
//! `K10<hash>::<user>:<secret>` form.
//!
//! The agent token: k3s writes `server/agent-token` only for a server
//! started with `--agent-token`; otherwise the file is absent or a link to
//! `token` (k3s pkg/server/server.go, printTokens), and the agent user's
//! password is the server's own (pkg/daemons/control/deps/deps.go,
//! getNodePass). Handing that to followers would give every follower the
//! server token, so [`decide_agent_token`] mints a new agent token
//! instead, and `adopt` says so: leaders liken starts hand it to k3s with
//! `agent-token-file`, and servers liken does not run need the same flag
//! before liken followers can join them.

use std::path::{Path, PathBuf};

use super::{
    AGENT_TOKEN, FileKind, IdentityError, IdentityFile, SERVER_CA_CERT, TOKEN, TokenUser,
    decide_token, files, format_token, keys, random, token_secret,
};
use crate::{Io, args::Parsed};

/// Runs `liken adopt <harvest-dir> <identity-dir>`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [harvest, dir] = parsed.paths()?;
    let agent = adopt(&harvest, &dir)?;
    super::report(io.out, "adopted", &dir)?;
    if let AgentToken::Minted(why) = agent {
        let what = match why {
            Minted::Absent => {
                "the harvest has no server/agent-token (k3s writes one only when started with \
                 --agent-token; its agents join with the server token)"
            }
            Minted::SameAsServer => {
                "the harvest's server/agent-token is the server token itself (k3s links it to \
                 token when started without --agent-token)"
            }
        };
        writeln!(
            io.out,
            "{what}, so adopt minted a new agent token in {}: followers get only it, never the \
             server token. Leaders liken starts give it to k3s; before liken followers can join \
             servers that liken does not run, start those with --agent-token-file pointing at a \
             copy of it (agents that joined with the server token keep working).",
            dir.join(AGENT_TOKEN).display()
        )?;
    }
    Ok(())
}

/// Where the agent token of an adopted identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentToken {
    /// The harvest's own `server/agent-token`.
    Harvested,
    /// A new one, minted because the harvest had none of its own.
    Minted(Minted),
}

/// Why `adopt` minted the agent token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minted {
    /// The harvest has no `server/agent-token`.
    Absent,
    /// The harvest's agent token carries the server token's secret.
    SameAsServer,
}

/// Whether to keep the harvest's agent token: only when it exists and is
/// not the server token under another name (same secret).
pub fn decide_agent_token(agent: Option<&str>, server: &str) -> AgentToken {
    match agent {
        None => AgentToken::Minted(Minted::Absent),
        Some(a) if token_secret(a) == token_secret(server) => {
            AgentToken::Minted(Minted::SameAsServer)
        }
        Some(_) => AgentToken::Harvested,
    }
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

/// Adopts the harvest into the identity directory `dir`; says where the
/// agent token came from.
pub fn adopt(harvest: &Path, dir: &Path) -> Result<AgentToken, IdentityError> {
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
    let mut agent = None;
    for file in files() {
        let inside = file.rel.strip_prefix("server/").unwrap_or(&file.rel);
        let path = root.join(inside);
        match std::fs::read(&path) {
            Ok(bytes) if file.rel == AGENT_TOKEN => agent = Some((file, path, bytes)),
            Ok(bytes) => read.push((file, path, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if file.rel != AGENT_TOKEN {
                    missing.push(format!("{prefix}{inside}"));
                }
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
    let server_token = String::from_utf8_lossy(bytes_of(&read, TOKEN)).into_owned();
    let agent_text = agent
        .as_ref()
        .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned());
    let decision = decide_agent_token(agent_text.as_deref(), &server_token);
    match (decision, agent) {
        (AgentToken::Harvested, Some(a)) => read.push(a),
        _ => {
            let mut secret = [0u8; 16];
            random(&mut secret)?;
            let ca_path = root.join("tls/server-ca.crt");
            let ca = bytes_of(&read, SERVER_CA_CERT);
            let token = format_token(ca, TokenUser::Node, &keys::hex(&secret))
                .map_err(|why| IdentityError::BadFiles(vec![(ca_path.clone(), why)]))?;
            if let Some(file) = files().into_iter().find(|f| f.rel == AGENT_TOKEN) {
                read.push((file, ca_path, format!("{token}\n").into_bytes()));
            }
        }
    }
    let contents = check(&read)?;
    super::write_identity(dir, &contents)?;
    Ok(decision)
}

/// The bytes read for `rel`, or nothing.
fn bytes_of<'a>(read: &'a [(IdentityFile, PathBuf, Vec<u8>)], rel: &str) -> &'a [u8] {
    read.iter()
        .find(|(f, _, _)| f.rel == rel)
        .map(|(_, _, b)| b.as_slice())
        .unwrap_or_default()
}

/// Checks every file of an identity read from disk (`adopt`'s harvest,
/// `layer`'s input); returns what to write or pack, in the order read.
pub(crate) fn check(
    read: &[(IdentityFile, PathBuf, Vec<u8>)],
) -> Result<Vec<(IdentityFile, Vec<u8>)>, IdentityError> {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (file, path, bytes) in read {
        let mut bytes = bytes.clone();
        let problem = match file.kind {
            FileKind::Certificate => {
                let key = bytes_of(read, &file.rel.replace(".crt", ".key"));
                check_ca(&bytes, key)
            }
            FileKind::Key => keys::signing_key(&bytes).err().map(|p| p.0),
            FileKind::Token(user) => match decide_token(
                &String::from_utf8_lossy(&bytes),
                bytes_of(read, SERVER_CA_CERT),
                user,
            ) {
                Ok(token) => {
                    bytes = format!("{token}\n").into_bytes();
                    None
                }
                Err(p) => Some(p),
            },
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
        assert_eq!(adopt(&harvest, &dir).unwrap(), AgentToken::Harvested);
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
        std::fs::write(harvest.join("server/agent-token"), "n0de\n").unwrap();
        let dir = tmp.path().join("identity");
        adopt(&harvest, &dir).unwrap();
        let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
        let ca = std::fs::read(dir.join("server/tls/server-ca.crt")).unwrap();
        let want = |user, secret| format!("{}\n", format_token(&ca, user, secret).unwrap());
        assert_eq!(read("server/token"), want(TokenUser::Server, "s3cret"));
        assert_eq!(read("server/agent-token"), want(TokenUser::Node, "n0de"));
    }

    #[test]
    fn the_agent_token_is_kept_only_when_it_is_its_own() {
        let server = "K10aa::server:s3cret";
        for (agent, want) in [
            (None, AgentToken::Minted(Minted::Absent)),
            (
                Some("K10aa::server:s3cret\n"),
                AgentToken::Minted(Minted::SameAsServer),
            ),
            (
                Some("K10aa::node:s3cret"),
                AgentToken::Minted(Minted::SameAsServer),
            ),
            (Some("s3cret"), AgentToken::Minted(Minted::SameAsServer)),
            (Some("K10aa::node:other"), AgentToken::Harvested),
            (Some("other"), AgentToken::Harvested),
        ] {
            assert_eq!(decide_agent_token(agent, server), want, "{agent:?}");
        }
    }

    /// Asserts `dir` holds a new node token for its server CA, with a
    /// secret of its own.
    fn assert_minted_agent_token(dir: &Path) {
        let agent = std::fs::read_to_string(dir.join("server/agent-token")).unwrap();
        let server = std::fs::read_to_string(dir.join("server/token")).unwrap();
        let ca = std::fs::read(dir.join("server/tls/server-ca.crt")).unwrap();
        assert_eq!(
            decide_token(&agent, &ca, TokenUser::Node).unwrap(),
            agent.trim()
        );
        assert_eq!(token_secret(&agent).len(), 32);
        assert_ne!(token_secret(&agent), token_secret(&server));
        assert!(agent.ends_with('\n'));
    }

    #[test]
    fn without_an_agent_token_of_its_own_one_is_minted() {
        let tmp = TestDir::new("adopt-agent");
        // Absent, as a k3s server started without --agent-token leaves it
        // (older k3s).
        let harvest = harvest_from_mint(tmp.path());
        std::fs::remove_file(harvest.join("server/agent-token")).unwrap();
        let dir = tmp.path().join("absent");
        assert_eq!(
            adopt(&harvest, &dir).unwrap(),
            AgentToken::Minted(Minted::Absent)
        );
        assert_minted_agent_token(&dir);
        // A link to token, as newer k3s leaves it.
        std::os::unix::fs::symlink("token", harvest.join("server/agent-token")).unwrap();
        let dir = tmp.path().join("linked");
        assert_eq!(
            adopt(&harvest, &dir).unwrap(),
            AgentToken::Minted(Minted::SameAsServer)
        );
        assert_minted_agent_token(&dir);
        // The link copied as a file (cp -r without -P).
        std::fs::remove_file(harvest.join("server/agent-token")).unwrap();
        std::fs::copy(
            harvest.join("server/token"),
            harvest.join("server/agent-token"),
        )
        .unwrap();
        let dir = tmp.path().join("copied");
        assert_eq!(
            adopt(&harvest, &dir).unwrap(),
            AgentToken::Minted(Minted::SameAsServer)
        );
        assert_minted_agent_token(&dir);
    }

    #[test]
    fn a_foreign_agent_token_is_refused() {
        let tmp = TestDir::new("adopt-agent-foreign");
        let harvest = harvest_from_mint(tmp.path());
        let other = tmp.path().join("other");
        super::super::mint::mint(&other).unwrap();
        std::fs::copy(
            other.join("server/agent-token"),
            harvest.join("server/agent-token"),
        )
        .unwrap();
        let dir = tmp.path().join("identity");
        let msg = adopt(&harvest, &dir).unwrap_err().to_string();
        assert!(
            msg.contains("server/agent-token: the token's CA hash"),
            "{msg}"
        );
        assert!(!dir.exists());
    }

    /// k3s with a custom CA (contrib/util/generate-custom-ca-certs.sh):
    /// server-ca.crt holds the server CA, its intermediate and the root,
    /// and k3s's tokens carry the hash of the root's DER
    /// (pkg/clientaccess/token.go, hashCA).
    #[test]
    fn a_chained_server_ca_is_hashed_by_its_root() {
        use super::super::cahash::testca::{bundle, params, self_signed, signed};
        use sha2::Digest;
        let tmp = TestDir::new("adopt-chain");
        let harvest = harvest_from_mint(tmp.path());
        // Valid now, as k3s checks the chain at the current time.
        let mut p = params("k3s-root-ca", 0, 1);
        now_valid(&mut p);
        let r = self_signed(p);
        let i = signed("k3s-intermediate-ca", &r, now_valid);
        let s = signed("k3s-server-ca", &i, now_valid);
        let file = bundle(&[&s, &i, &r]);
        let tls = harvest.join("server/tls");
        std::fs::write(tls.join("server-ca.crt"), &file).unwrap();
        std::fs::write(tls.join("server-ca.key"), &s.key_pem).unwrap();
        let by_root = keys::hex(&sha2::Sha256::digest(&r.der));
        let by_bytes = keys::hex(&sha2::Sha256::digest(&file));
        assert_ne!(by_root, by_bytes);

        // The hash of the bytes, what adopt used to expect, is refused.
        std::fs::write(
            harvest.join("server/token"),
            format!("K10{by_bytes}::server:s3cret\n"),
        )
        .unwrap();
        std::fs::write(harvest.join("server/agent-token"), "n0de\n").unwrap();
        let msg = adopt(&harvest, &tmp.path().join("refused"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(&format!("hashes to {by_root}")), "{msg}");

        // k3s's own token is adopted, and a bare agent secret gets the
        // root's hash too.
        let token = format!("K10{by_root}::server:s3cret\n");
        std::fs::write(harvest.join("server/token"), &token).unwrap();
        let dir = tmp.path().join("identity");
        adopt(&harvest, &dir).unwrap();
        let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).unwrap();
        assert_eq!(read("server/token"), token);
        assert_eq!(
            read("server/agent-token"),
            format!("K10{by_root}::node:n0de\n")
        );
        assert_eq!(
            std::fs::read(dir.join("server/tls/server-ca.crt")).unwrap(),
            file
        );
    }

    /// Shifts a fixture's validity to around the present.
    fn now_valid(p: &mut rcgen::CertificateParams) {
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(365);
    }
}
