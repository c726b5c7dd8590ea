//! The token hash checked against Go: k3s hashes its server CA bundle
//! with Go's crypto/x509 (pkg/clientaccess/token.go, hashCA), so liken's
//! Rust port of that rule (`identity::cahash`) is run beside a small Go
//! program (`hashca/main.go`, standard library only) over bundles of
//! every shape the rule tells apart: one certificate, chains in any
//! order, chains that do not verify for each reason Go's `Verify` has,
//! cross-signed intermediates where the first chain decides, and other
//! key types. Every hash must agree.

use std::path::{Path, PathBuf};
use std::process::Command;

use liken_cli::identity::cahash;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, SignatureAlgorithm,
};
use time::{Duration, OffsetDateTime};

use crate::support::{Scratch, ok};

/// One certificate of a fixture, and what signs below it.
struct Cert {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A CA's parameters, valid a day back and a year ahead; `edit` changes
/// them.
fn params(cn: &str, edit: impl FnOnce(&mut CertificateParams)) -> CertificateParams {
    let now = OffsetDateTime::now_utc();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = now - Duration::days(1);
    p.not_after = now + Duration::days(365);
    p.use_authority_key_identifier_extension = true;
    p.key_identifier_method = KeyIdMethod::Sha256;
    edit(&mut p);
    p
}

fn key(alg: &'static SignatureAlgorithm) -> KeyPair {
    KeyPair::generate_for(alg).unwrap()
}

fn root_with(
    cn: &str,
    alg: &'static SignatureAlgorithm,
    edit: impl FnOnce(&mut CertificateParams),
) -> Cert {
    let k = key(alg);
    let p = params(cn, edit);
    let c = p.self_signed(&k).unwrap();
    Cert {
        pem: c.pem(),
        issuer: Issuer::new(p, k),
    }
}

fn root(cn: &str) -> Cert {
    root_with(cn, &rcgen::PKCS_ECDSA_P256_SHA256, |_| {})
}

/// `cn` signed by `by` with a key of its own.
fn signed(cn: &str, by: &Cert, edit: impl FnOnce(&mut CertificateParams)) -> Cert {
    signed_with_key(key(&rcgen::PKCS_ECDSA_P256_SHA256), cn, by, edit)
}

fn signed_with_key(
    k: KeyPair,
    cn: &str,
    by: &Cert,
    edit: impl FnOnce(&mut CertificateParams),
) -> Cert {
    let p = params(cn, edit);
    let c = p.signed_by(&k, &by.issuer).unwrap();
    Cert {
        pem: c.pem(),
        issuer: Issuer::new(p, k),
    }
}

fn bundle(certs: &[&Cert]) -> Vec<u8> {
    certs
        .iter()
        .map(|c| c.pem.as_str())
        .collect::<String>()
        .into_bytes()
}

/// Every fixture: (name, file bytes).
fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let r = root("root-ca");
    let other = root("other-root");
    let i = signed("intermediate-ca", &r, |_| {});
    let s = signed("server-ca", &i, |_| {});
    let direct = signed("server-ca", &r, |_| {});
    let not_ca = signed("not-a-ca", &r, |p| {
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    });
    let under_not_ca = signed("server-ca", &not_ca, |_| {});
    let no_cert_sign = signed("no-cert-sign", &r, |p| {
        p.key_usages = vec![KeyUsagePurpose::CrlSign];
    });
    let under_no_cert_sign = signed("server-ca", &no_cert_sign, |_| {});
    let client_only = signed("server-ca", &r, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    });
    let server_auth = signed("server-ca", &r, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    });
    let short = root_with("short-root", &rcgen::PKCS_ECDSA_P256_SHA256, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    });
    let short_i = signed("intermediate-ca", &short, |_| {});
    let short_s = signed("server-ca", &short_i, |_| {});
    let short_direct = signed("server-ca", &short, |_| {});
    let expired = signed("server-ca", &r, |p| {
        p.not_before = OffsetDateTime::now_utc() - Duration::days(30);
        p.not_after = OffsetDateTime::now_utc() - Duration::days(1);
    });
    let no_aki_root = root_with("plain-root", &rcgen::PKCS_ECDSA_P256_SHA256, |p| {
        p.use_authority_key_identifier_extension = false;
    });
    let under_plain = signed("server-ca", &no_aki_root, |_| {});
    // One intermediate key signed by two roots: two chains, and Go's
    // first one decides which root is hashed.
    let (r1, r2) = (root("root-one"), root("root-two"));
    let cross_key = key(&rcgen::PKCS_ECDSA_P256_SHA256);
    let cross_der = cross_key.serialize_der();
    let i_by_r1 = signed_with_key(cross_key, "cross-ca", &r1, |_| {});
    let i_by_r2 = signed_with_key(
        KeyPair::try_from(cross_der.as_slice()).unwrap(),
        "cross-ca",
        &r2,
        |_| {},
    );
    let under_cross = signed("server-ca", &i_by_r1, |_| {});
    // Other key types along the chain.
    let p384 = root_with("p384-root", &rcgen::PKCS_ECDSA_P384_SHA384, |_| {});
    let ed = root_with("ed25519-root", &rcgen::PKCS_ED25519, |_| {});
    let under_p384 = signed("server-ca", &p384, |_| {});
    let under_ed = signed("server-ca", &ed, |_| {});
    let key_block = "-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n";

    let mut with_key = bundle(&[&s, &i]);
    with_key.extend_from_slice(key_block.as_bytes());
    with_key.extend(bundle(&[&r]));
    let mut one_newline = bundle(&[&r]);
    one_newline.push(b'\n');
    vec![
        ("one certificate", bundle(&[&r])),
        ("one certificate and a newline", one_newline),
        ("server, intermediate, root", bundle(&[&s, &i, &r])),
        ("server, root, intermediate", bundle(&[&s, &r, &i])),
        ("directly under the root", bundle(&[&direct, &r])),
        ("another root", bundle(&[&s, &i, &other])),
        ("the intermediate missing", bundle(&[&s, &r])),
        ("two unrelated roots", bundle(&[&r, &other])),
        ("a root and itself", bundle(&[&r, &r])),
        (
            "an intermediate that is no CA",
            bundle(&[&under_not_ca, &not_ca, &r]),
        ),
        (
            "an intermediate without certSign",
            bundle(&[&under_no_cert_sign, &no_cert_sign, &r]),
        ),
        ("client authentication only", bundle(&[&client_only, &r])),
        ("server authentication", bundle(&[&server_auth, &r])),
        (
            "path length 0 with an intermediate",
            bundle(&[&short_s, &short_i, &short]),
        ),
        ("path length 0 directly", bundle(&[&short_direct, &short])),
        ("an expired first certificate", bundle(&[&expired, &r])),
        (
            "a root without key ids",
            bundle(&[&under_plain, &no_aki_root]),
        ),
        (
            "cross-signed, first root first",
            bundle(&[&under_cross, &i_by_r1, &i_by_r2, &r1, &r2]),
        ),
        (
            "cross-signed, second root first",
            bundle(&[&under_cross, &i_by_r2, &i_by_r1, &r2, &r1]),
        ),
        ("a P-384 root", bundle(&[&under_p384, &p384])),
        ("an Ed25519 root", bundle(&[&under_ed, &ed])),
        ("a key block among the certificates", with_key),
    ]
}

/// Builds the Go program into `dir` with the standard library only.
fn build_hashca(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/hashca");
    let bin = dir.join("hashca");
    ok(Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&bin)
        .arg(src.join("main.go"))
        .env("GOWORK", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("CGO_ENABLED", "0"));
    bin
}

#[test]
fn the_token_hash_agrees_with_go_crypto_x509() {
    let s = Scratch::new("hashca");
    let bin = build_hashca(s.path());
    let fixtures = fixtures();
    let mut paths = Vec::new();
    for (n, (_, bytes)) in fixtures.iter().enumerate() {
        let p = s.path().join(format!("{n}.crt"));
        std::fs::write(&p, bytes).unwrap();
        paths.push(p);
    }
    let go = ok(Command::new(&bin).args(&paths));
    let go: Vec<&str> = go.lines().collect();
    assert_eq!(go.len(), fixtures.len(), "{go:?}");
    let now = cahash::now();
    let mut by_root = 0;
    for ((name, bytes), go) in fixtures.iter().zip(go) {
        let ours = cahash::hash_ca(bytes, now).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ours, go, "{name}: liken and Go disagree");
        if ours != sha256_hex(bytes) {
            by_root += 1;
        }
    }
    // Both branches of the rule were exercised.
    assert!(by_root >= 8, "only {by_root} fixtures hashed a root");
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
