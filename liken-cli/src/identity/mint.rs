//! `liken mint`: a new cluster identity.
//!
//! Five self-signed ECDSA P-256 CAs (what k3s itself makes), a P-256
//! service-account signing key, a server token and an agent token, each
//! with a 128-bit secret in hex as k3s makes its own (pkg/util, Random(16)
//! in pkg/daemons/control/deps/deps.go getServerPass), all from the
//! system CSPRNG. Everything is made in memory first and written only
//! once it all exists, so a failure leaves nothing behind.
//!
//! Private keys are SEC1 (`EC PRIVATE KEY`), as k3s writes its own
//! (dynamiclistener's cert.EncodePrivateKeyPEM, called from
//! pkg/daemons/control/deps/deps.go): kube-apiserver reads
//! `--service-account-key-file` with client-go's keyutil.PublicKeysFromFile,
//! which takes EC keys only in that form, and k3s passes it `service.key`
//! (pkg/daemons/control/server.go, apiServer).
//!
//! The CAs live ten years, as k3s's own do. Their validity starts a day
//! in the past, so a machine whose clock is hours behind the
//! workstation's (a dead RTC battery, a timezone set on the hardware
//! clock) still accepts them at first boot.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use time::{Duration, OffsetDateTime};

use super::{
    AGENT_TOKEN, Ca, IdentityError, IdentityFile, SERVER_CA_CERT, SERVICE_KEY, TLS_DIR, TOKEN,
    TokenUser, files, format_token, keys, random,
};
use crate::{Io, args::Parsed};

/// How long a minted CA is valid.
pub const CA_LIFETIME: Duration = Duration::days(3650);
/// How far into the past validity starts (clock skew between machines).
pub const BACKDATE: Duration = Duration::days(1);

/// Runs `liken mint <identity-dir>`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [dir] = parsed.paths()?;
    mint(&dir)?;
    super::report(io.out, "minted", &dir)?;
    Ok(())
}

/// Mints an identity into `dir`.
pub fn mint(dir: &Path) -> Result<(), IdentityError> {
    // Refuse before spending the randomness, so the message comes at once.
    let found = super::existing(dir);
    if !found.is_empty() {
        return Err(IdentityError::Exists {
            dir: dir.to_owned(),
            found,
        });
    }
    let contents = generate(OffsetDateTime::now_utc())?;
    super::write_identity(dir, &contents)
}

/// Every file of a new identity, in [`files`] order.
pub fn generate(now: OffsetDateTime) -> Result<Vec<(IdentityFile, Vec<u8>)>, IdentityError> {
    let mut made: Vec<(String, Vec<u8>)> = Vec::new();
    for ca in super::CAS {
        let (cert, key) = self_signed_ca(ca, now)?;
        made.push((format!("{TLS_DIR}/{}.crt", ca.stem), cert.into_bytes()));
        made.push((format!("{TLS_DIR}/{}.key", ca.stem), key));
    }
    made.push((SERVICE_KEY.to_owned(), sec1(&new_key("service-account")?)?));
    let server_ca = lookup(&made, SERVER_CA_CERT).to_vec();
    for (rel, user) in [(TOKEN, TokenUser::Server), (AGENT_TOKEN, TokenUser::Node)] {
        let mut secret = [0u8; 16];
        random(&mut secret)?;
        let token = format_token(&server_ca, user, &keys::hex(&secret)).map_err(|why| {
            IdentityError::Encoding {
                what: rel.to_owned(),
                why,
            }
        })?;
        made.push((rel.to_owned(), format!("{token}\n").into_bytes()));
    }
    Ok(files()
        .into_iter()
        .map(|f| {
            let bytes = lookup(&made, &f.rel).to_vec();
            (f, bytes)
        })
        .collect())
}

/// The bytes made for `rel` (every file of [`files`] is made above).
fn lookup<'a>(made: &'a [(String, Vec<u8>)], rel: &str) -> &'a [u8] {
    made.iter()
        .find(|(r, _)| r == rel)
        .map(|(_, b)| b.as_slice())
        .unwrap_or_default()
}

/// A key as SEC1 PEM, the form k3s writes.
fn sec1(key: &KeyPair) -> Result<Vec<u8>, IdentityError> {
    keys::sec1_pem(key)
        .map(String::into_bytes)
        .map_err(|p| IdentityError::Encoding {
            what: "a private key".into(),
            why: p.0,
        })
}

fn new_key(what: &str) -> Result<KeyPair, IdentityError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
        IdentityError::Certificate {
            what: what.to_owned(),
            source,
        }
    })
}

/// A random positive 128-bit serial number.
pub(crate) fn serial() -> Result<SerialNumber, IdentityError> {
    let mut b = [0u8; 16];
    random(&mut b)?;
    b[0] &= 0x7f;
    b[0] |= 0x01; // never a leading zero byte, so the DER stays 16 bytes
    Ok(SerialNumber::from_slice(&b))
}

/// One CA: (certificate PEM, private key PEM in SEC1).
fn self_signed_ca(ca: Ca, now: OffsetDateTime) -> Result<(String, Vec<u8>), IdentityError> {
    let key = new_key(ca.stem)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("{}@{}", ca.common_name, now.unix_timestamp()),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - BACKDATE;
    params.not_after = now + CA_LIFETIME;
    params.serial_number = Some(serial()?);
    let cert = params
        .self_signed(&key)
        .map_err(|source| IdentityError::Certificate {
            what: ca.stem.to_owned(),
            source,
        })?;
    Ok((cert.pem(), sec1(&key)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn every_ca_is_a_p256_ca_named_as_k3s_names_it() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let contents = generate(now).unwrap();
        for (file, bytes) in &contents {
            if !file.rel.ends_with(".crt") {
                continue;
            }
            let der = keys::first_certificate(bytes).unwrap();
            let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
            assert!(cert.is_ca(), "{}", file.rel);
            let cn = cert.subject().iter_common_name().next().unwrap();
            assert!(
                cn.as_str().unwrap().ends_with("-ca@1800000000"),
                "{}",
                file.rel
            );
            assert_eq!(cert.subject(), cert.issuer());
            let alg = &cert.tbs_certificate.subject_pki.algorithm;
            assert_eq!(
                alg.parameters
                    .as_ref()
                    .unwrap()
                    .as_oid()
                    .unwrap()
                    .to_id_string(),
                "1.2.840.10045.3.1.7",
                "P-256"
            );
            let key_file = file.rel.replace(".crt", ".key");
            let key_bytes = &contents.iter().find(|(f, _)| f.rel == key_file).unwrap().1;
            let key = keys::signing_key(key_bytes).unwrap();
            assert!(keys::key_matches_certificate(&key, &der).unwrap());
        }
    }

    #[test]
    fn the_tokens_name_the_server_ca_and_secrets_differ() {
        use super::super::{decide_token, token_secret};
        let now = OffsetDateTime::now_utc();
        let a = generate(now).unwrap();
        let b = generate(now).unwrap();
        let get = |c: &[(IdentityFile, Vec<u8>)], rel: &str| {
            c.iter().find(|(f, _)| f.rel == rel).unwrap().1.clone()
        };
        let text =
            |c: &[(IdentityFile, Vec<u8>)], rel: &str| String::from_utf8(get(c, rel)).unwrap();
        let ca = get(&a, SERVER_CA_CERT);
        let server = text(&a, TOKEN);
        let agent = text(&a, AGENT_TOKEN);
        // k3s's form: K10<sha256 of the one-certificate file>::<user>:<hex>.
        use sha2::Digest;
        let hash = keys::hex(&sha2::Sha256::digest(&ca));
        assert!(
            server.starts_with(&format!("K10{hash}::server:")),
            "{server}"
        );
        assert!(agent.starts_with(&format!("K10{hash}::node:")), "{agent}");
        assert_eq!(
            decide_token(&server, &ca, TokenUser::Server).unwrap(),
            server.trim()
        );
        assert_eq!(
            decide_token(&agent, &ca, TokenUser::Node).unwrap(),
            agent.trim()
        );
        for t in [&server, &agent] {
            let secret = token_secret(t);
            assert_eq!(secret.len(), 32);
            assert!(secret.bytes().all(|c| c.is_ascii_hexdigit()), "{secret}");
        }
        assert_ne!(token_secret(&server), token_secret(&agent));
        assert_ne!(get(&a, TOKEN), get(&b, TOKEN));
        assert_ne!(get(&a, AGENT_TOKEN), get(&b, AGENT_TOKEN));
        assert_ne!(get(&a, SERVICE_KEY), get(&b, SERVICE_KEY));
    }

    #[test]
    fn keys_are_sec1_and_validity_starts_a_day_back() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        for (file, bytes) in generate(now).unwrap() {
            let text = String::from_utf8(bytes).unwrap();
            match file.kind {
                super::super::FileKind::Key => {
                    assert!(
                        text.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
                        "{}: {text}",
                        file.rel
                    );
                }
                super::super::FileKind::Certificate => {
                    let der = keys::first_certificate(text.as_bytes()).unwrap();
                    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
                    let from = cert.validity().not_before.timestamp();
                    assert_eq!(from, 1_800_000_000 - 86_400, "{}", file.rel);
                }
                super::super::FileKind::Token(_) => {}
            }
        }
    }

    #[test]
    fn mint_writes_private_files_0600_and_refuses_a_second_time() {
        let tmp = TestDir::new("mint");
        let dir = tmp.path().join("identity");
        mint(&dir).unwrap();
        for f in files() {
            let mode = std::fs::metadata(dir.join(&f.rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, if f.private { 0o600 } else { 0o644 }, "{}", f.rel);
        }
        for d in super::super::DIRS {
            let mode = std::fs::metadata(dir.join(d)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{d} is not private");
        }
        let before = std::fs::read(dir.join(super::super::TOKEN)).unwrap();
        let e = mint(&dir).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("server-ca.crt exists"), "{msg}");
        assert!(msg.contains("nothing was written"), "{msg}");
        assert_eq!(
            std::fs::read(dir.join(super::super::TOKEN)).unwrap(),
            before
        );
    }

    #[test]
    fn one_leftover_file_is_enough_to_refuse() {
        let tmp = TestDir::new("mint-leftover");
        std::fs::create_dir_all(tmp.path().join("server")).unwrap();
        std::fs::write(tmp.path().join("server/token"), "x").unwrap();
        let msg = mint(tmp.path()).unwrap_err().to_string();
        assert!(msg.contains("server/token exists"), "{msg}");
        assert!(!tmp.path().join("server/tls/server-ca.crt").exists());
    }
}
