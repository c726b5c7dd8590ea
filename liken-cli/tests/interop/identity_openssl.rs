//! The identity read by OpenSSL: every CA verifies as a self-signed
//! ECDSA P-256 CA whose key is its own, every key is SEC1 as k3s writes
//! it and loads with `openssl ec`, the admin certificate verifies under
//! the client CA (and not under another), both tokens carry the server
//! CA's sha256, and secrets are 0600. An identity that OpenSSL made the
//! way k3s's Go code does (SEC1 keys) is adopted, gets an agent token of
//! its own, and signs a working admin certificate too.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;

use crate::support::{Scratch, deployment, fails, liken, mode, ok, output};

const CAS: [&str; 5] = [
    "server-ca",
    "client-ca",
    "request-header-ca",
    "etcd/peer-ca",
    "etcd/server-ca",
];

fn openssl(args: &[&str]) -> String {
    ok(Command::new("openssl").args(args))
}

fn tls(identity: &Path, stem: &str, ext: &str) -> String {
    identity
        .join(format!("server/tls/{stem}.{ext}"))
        .display()
        .to_string()
}

/// The admin certificate out of a kubeconfig, written to a file.
pub(crate) fn admin_cert(kubeconfig: &Path, into: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let data = doc["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .unwrap();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let path = into.join(format!(
        "{}.crt",
        kubeconfig.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, pem).unwrap();
    path
}

/// Whether OpenSSL finds the certificate at `cert` expiring within
/// `secs` seconds (`x509 -checkend`, which exits 1 when it does).
pub(crate) fn expires_within(cert: &Path, secs: u64) -> bool {
    let out = output(Command::new("openssl").args([
        "x509",
        "-noout",
        "-checkend",
        &secs.to_string(),
        "-in",
        cert.to_str().unwrap(),
    ]));
    !out.status.success()
}

/// OpenSSL's `notAfter=` line for the certificate at `cert`.
pub(crate) fn end_date(cert: &Path) -> String {
    openssl(&["x509", "-noout", "-enddate", "-in", cert.to_str().unwrap()])
}

#[test]
fn openssl_accepts_every_minted_chain() {
    let s = Scratch::new("openssl");
    let dep = s.path().join("home");
    deployment(&dep);
    let id = dep.join("identity");

    for stem in CAS {
        let crt = tls(&id, stem, "crt");
        let key = tls(&id, stem, "key");
        let verified = openssl(&["verify", "-CAfile", &crt, &crt]);
        assert_eq!(verified.trim(), format!("{crt}: OK"));
        let text = openssl(&["x509", "-in", &crt, "-noout", "-text"]);
        for want in [
            "Public Key Algorithm: id-ecPublicKey",
            "NIST CURVE: P-256",
            "Signature Algorithm: ecdsa-with-SHA256",
            "CA:TRUE",
            "Certificate Sign",
        ] {
            assert!(text.contains(want), "{stem}: {want} in\n{text}");
        }
        let from_cert = openssl(&["x509", "-in", &crt, "-noout", "-pubkey"]);
        let from_key = openssl(&["pkey", "-in", &key, "-pubout"]);
        assert_eq!(from_cert, from_key, "{stem}.key is the key of {stem}.crt");
        assert_sec1(Path::new(&key));
        assert_eq!(mode(Path::new(&key)), 0o600, "{key}");
        assert_eq!(mode(Path::new(&crt)), 0o644, "{crt}");
    }
    let service = openssl(&[
        "pkey",
        "-in",
        &tls(&id, "service", "key"),
        "-noout",
        "-text",
    ]);
    assert!(service.contains("NIST CURVE: P-256"), "{service}");
    assert_sec1(&id.join("server/tls/service.key"));
    assert_eq!(mode(&id.join("server/tls/service.key")), 0o600);
    assert_eq!(mode(&id.join("server/token")), 0o600);
    assert_eq!(mode(&id.join("server/agent-token")), 0o600);
    for d in ["", "server", "server/tls", "server/tls/etcd"] {
        assert_eq!(mode(&id.join(d)) & 0o077, 0, "{d} is private");
    }

    // Both tokens' hash is the server CA file's sha256 (one certificate:
    // k3s pkg/clientaccess/token.go hashCA hashes the file's bytes).
    let token = std::fs::read_to_string(id.join("server/token")).unwrap();
    let agent = std::fs::read_to_string(id.join("server/agent-token")).unwrap();
    let digest = openssl(&["dgst", "-sha256", "-r", &tls(&id, "server-ca", "crt")]);
    let hex = digest.split_whitespace().next().unwrap();
    assert!(token.starts_with(&format!("K10{hex}::server:")), "{token}");
    assert!(agent.starts_with(&format!("K10{hex}::node:")), "{agent}");

    // The admin credential verifies under the client CA only.
    let said = ok(liken([std::ffi::OsStr::new("kubeconfig"), dep.as_os_str()]));
    assert!(said.contains("identity/kubeconfig"), "{said}");
    assert!(said.contains("(in 30 days)"), "{said}");
    let kubeconfig = id.join("kubeconfig");
    assert_eq!(mode(&kubeconfig), 0o600);
    let admin = admin_cert(&kubeconfig, s.path());
    // 30 days by default, as OpenSSL reads the certificate's notAfter.
    assert!(end_date(&admin).starts_with("notAfter="));
    assert!(!expires_within(&admin, 29 * 86400), "{}", end_date(&admin));
    assert!(
        expires_within(&admin, 30 * 86400 + 120),
        "{}",
        end_date(&admin)
    );
    // -lifetime chooses another span, and says so.
    let said = ok(liken([
        std::ffi::OsStr::new("kubeconfig"),
        std::ffi::OsStr::new("-lifetime"),
        std::ffi::OsStr::new("2h"),
        dep.as_os_str(),
    ]));
    assert!(said.contains("(in 2 hours)"), "{said}");
    let short = admin_cert(&kubeconfig, s.path());
    assert!(
        !expires_within(&short, 2 * 3600 - 120),
        "{}",
        end_date(&short)
    );
    assert!(
        expires_within(&short, 2 * 3600 + 120),
        "{}",
        end_date(&short)
    );
    let err = fails(liken([
        std::ffi::OsStr::new("kubeconfig"),
        std::ffi::OsStr::new("-lifetime"),
        std::ffi::OsStr::new("2y"),
        dep.as_os_str(),
    ]));
    assert!(err.contains("(90m, 12h, 30d)"), "{err}");
    ok(liken([std::ffi::OsStr::new("kubeconfig"), dep.as_os_str()]));
    let admin = admin_cert(&kubeconfig, s.path());
    let admin = admin.to_str().unwrap();
    let verified = openssl(&["verify", "-CAfile", &tls(&id, "client-ca", "crt"), admin]);
    assert_eq!(verified.trim(), format!("{admin}: OK"));
    let wrong = output(Command::new("openssl").args([
        "verify",
        "-CAfile",
        &tls(&id, "server-ca", "crt"),
        admin,
    ]));
    assert!(
        !wrong.status.success(),
        "the server CA must not vouch for it"
    );
    let text = openssl(&["x509", "-in", admin, "-noout", "-text"]);
    for want in [
        "O = system:masters, CN = liken-admin",
        "TLS Web Client Authentication",
        "NIST CURVE: P-256",
        "CA:FALSE",
    ] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
    let again = fails(liken([std::ffi::OsStr::new("mint"), id.as_os_str()]));
    assert!(again.starts_with("liken: "), "{again}");
    assert!(again.contains("already holds an identity"), "{again}");
}

/// Asserts a key file is SEC1, the form k3s writes and kube-apiserver's
/// `--service-account-key-file` reader takes (client-go keyutil), and
/// that OpenSSL's EC tool loads it and derives its public key.
fn assert_sec1(key: &Path) {
    let text = std::fs::read_to_string(key).unwrap();
    assert!(
        text.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
        "{}: {text}",
        key.display()
    );
    let public = ok(Command::new("openssl")
        .args(["ec", "-in"])
        .arg(key)
        .arg("-pubout"));
    assert!(
        public.starts_with("-----BEGIN PUBLIC KEY-----\n"),
        "{public}"
    );
}

/// A harvest as a k3s server holds it, made by OpenSSL: SEC1 EC keys.
fn openssl_harvest(root: &Path) {
    let tls = root.join("server/tls");
    std::fs::create_dir_all(tls.join("etcd")).unwrap();
    for stem in CAS {
        let key = tls.join(format!("{stem}.key"));
        let crt = tls.join(format!("{stem}.crt"));
        openssl(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            key.to_str().unwrap(),
        ]);
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            key.to_str().unwrap(),
            "-subj",
            &format!("/CN=k3s-{}@1700000000", stem.replace('/', "-")),
            "-days",
            "3650",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out",
            crt.to_str().unwrap(),
        ]);
        assert!(
            std::fs::read_to_string(&key)
                .unwrap()
                .starts_with("-----BEGIN EC PRIVATE KEY-----")
        );
    }
    let service = tls.join("service.key");
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        service.to_str().unwrap(),
    ]);
    let digest = openssl(&[
        "dgst",
        "-sha256",
        "-r",
        tls.join("server-ca.crt").to_str().unwrap(),
    ]);
    let hex = digest.split_whitespace().next().unwrap();
    std::fs::write(
        root.join("server/token"),
        format!("K10{hex}::server:0123456789abcdef0123456789abcdef\n"),
    )
    .unwrap();
}

#[test]
fn an_openssl_made_harvest_is_adopted_and_signs_an_admin() {
    let s = Scratch::new("adopt-openssl");
    let harvest = s.path().join("k3s");
    openssl_harvest(&harvest);
    let dep = s.path().join("home");
    std::fs::create_dir_all(&dep).unwrap();
    let id = dep.join("identity");
    let said = ok(liken([
        std::ffi::OsStr::new("adopt"),
        harvest.as_os_str(),
        id.as_os_str(),
    ]));
    assert!(said.contains("adopted a cluster identity"), "{said}");
    // The harvest has no agent token (a server started without
    // --agent-token): adopt mints one and says so.
    assert!(
        said.contains("the harvest has no server/agent-token")
            && said.contains("minted a new agent token"),
        "{said}"
    );
    let agent = std::fs::read_to_string(id.join("server/agent-token")).unwrap();
    let token = std::fs::read_to_string(id.join("server/token")).unwrap();
    assert_eq!(agent[..67], token[..67], "the same CA hash");
    assert!(agent[67..].starts_with("::node:"), "{agent}");
    assert_eq!(mode(&id.join("server/agent-token")), 0o600);
    for stem in CAS {
        for ext in ["crt", "key"] {
            assert_eq!(
                std::fs::read(tls(&id, stem, ext)).unwrap(),
                std::fs::read(tls(&harvest, stem, ext)).unwrap()
            );
        }
        assert_eq!(mode(Path::new(&tls(&id, stem, "key"))), 0o600);
    }
    let said = ok(liken([
        std::ffi::OsStr::new("kubeconfig"),
        std::ffi::OsStr::new("-server"),
        std::ffi::OsStr::new("https://127.0.0.1:6443"),
        dep.as_os_str(),
    ]));
    assert!(said.contains("wrote"), "{said}");
    let admin = admin_cert(&id.join("kubeconfig"), s.path());
    let admin = admin.to_str().unwrap();
    let verified = openssl(&[
        "verify",
        "-CAfile",
        &tls(&harvest, "client-ca", "crt"),
        admin,
    ]);
    assert_eq!(verified.trim(), format!("{admin}: OK"));
}

#[test]
fn adopt_names_every_missing_file() {
    let s = Scratch::new("adopt-missing");
    let harvest = s.path().join("k3s");
    openssl_harvest(&harvest);
    std::fs::remove_file(harvest.join("server/tls/etcd/server-ca.key")).unwrap();
    std::fs::remove_file(harvest.join("server/token")).unwrap();
    let id = s.path().join("identity");
    let err = fails(liken([
        std::ffi::OsStr::new("adopt"),
        harvest.as_os_str(),
        id.as_os_str(),
    ]));
    assert!(err.starts_with("liken: "), "{err}");
    assert!(err.contains("  server/tls/etcd/server-ca.key\n"), "{err}");
    assert!(err.contains("  server/token\n"), "{err}");
    assert!(!id.exists(), "nothing written");
}
