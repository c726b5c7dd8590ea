//! The minted identity proven to be a working Kubernetes identity, on a
//! real kube-apiserver (liken-testenv) started the way k3s starts it
//! (k3s pkg/daemons/control/server.go, apiServer): a serving certificate
//! signed by server-ca, `--client-ca-file` client-ca,
//! `--requestheader-client-ca-file` request-header-ca with k3s's proxy
//! name and headers, and `service.key` itself as
//! `--service-account-key-file` and `--service-account-signing-key-file`
//! (k3s signs with `service.current.key`, the first key of `service.key`:
//! the same key). It serves; kubectl (testenv's, of the apiserver's
//! release), given only the kubeconfig `liken kubeconfig` wrote, lists
//! its namespaces as an admin; a client
//! certificate signed by client-ca is authenticated as its own user; a
//! proxy certificate from request-header-ca may name the user, one from
//! another CA may not; and a ServiceAccount token it issues is accepted
//! and verifies with the minted service key.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use liken_cli::identity::{keys, kubeconfig};
use liken_testenv::pki::{Pair, Pki};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::support::{Scratch, deployment, liken, ok, output};

pub(crate) fn read(identity: &Path, rel: &str) -> String {
    std::fs::read_to_string(identity.join(rel)).unwrap()
}

/// A certificate for `names` signed by the identity's CA `stem` (as k3s
/// makes its leaves from the CAs on start, pkg/daemons/control/deps).
fn signed_by(
    identity: &Path,
    stem: &str,
    names: Vec<String>,
    edit: impl FnOnce(&mut CertificateParams),
) -> Pair {
    let ca_key =
        keys::signing_key(read(identity, &format!("server/tls/{stem}.key")).as_bytes()).unwrap();
    let ca_der =
        keys::first_certificate(read(identity, &format!("server/tls/{stem}.crt")).as_bytes())
            .unwrap();
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(names).unwrap();
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.use_authority_key_identifier_extension = true;
    edit(&mut p);
    let cert = p.signed_by(&key, &issuer).unwrap();
    Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// The apiserver's serving certificate, which k3s makes from server-ca
/// (deps.go genServerCerts), for loopback.
pub(crate) fn serving_cert(identity: &Path) -> Pair {
    let names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    signed_by(
        identity,
        "server-ca",
        names.iter().map(|n| (*n).to_owned()).collect(),
        |p| {
            p.subject_alt_names
                .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
            p.distinguished_name
                .push(DnType::CommonName, "kube-apiserver");
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        },
    )
}

/// A client certificate for `cn` (and group `org`) signed by CA `stem`.
fn client_cert(identity: &Path, stem: &str, cn: &str, org: Option<&str>) -> Pair {
    signed_by(identity, stem, Vec::new(), |p| {
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    })
}

/// Writes a pair as `<name>.crt` and `<name>.key` in `dir`.
fn write_pair(dir: &Path, name: &str, pair: &Pair) -> (PathBuf, PathBuf) {
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&crt, &pair.cert_pem).unwrap();
    std::fs::write(&key, &pair.key_pem).unwrap();
    (crt, key)
}

/// Who the apiserver says the caller is, from `kubectl auth whoami`.
fn whoami(cmd: &mut Command) -> (String, Vec<String>) {
    let json = ok(cmd
        .args(["auth", "whoami", "-o", "json"])
        .env_remove("KUBECONFIG"));
    let v: serde_yaml::Value = serde_yaml::from_str(&json).unwrap();
    let info = &v["status"]["userInfo"];
    let groups = info["groups"]
        .as_sequence()
        .map(|g| {
            g.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (
        info["username"].as_str().unwrap_or_default().to_owned(),
        groups,
    )
}

/// A SelfSubjectReview through curl with a proxy's certificate and the
/// request-header names: the username the apiserver took.
fn proxied_user(server: &str, ca: &Path, proxy: &(PathBuf, PathBuf)) -> String {
    let body = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
    let json = ok(Command::new("curl")
        .args(["-sS", "--fail-with-body", "--cacert"])
        .arg(ca)
        .arg("--cert")
        .arg(&proxy.0)
        .arg("--key")
        .arg(&proxy.1)
        .args([
            "-H",
            "Content-Type: application/json",
            "-H",
            "X-Remote-User: alice",
            "-H",
            "X-Remote-Group: liken-readers",
            "-d",
            body,
        ])
        .arg(format!(
            "{server}/apis/authentication.k8s.io/v1/selfsubjectreviews"
        )));
    let v: serde_yaml::Value = serde_yaml::from_str(&json).unwrap();
    v["status"]["userInfo"]["username"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn kube_apiserver_runs_on_a_whole_minted_identity_as_k3s_runs_it() {
    let s = Scratch::new("kubectl");
    let dep = s.path().join("home");
    deployment(&dep);
    let id = dep.join("identity");

    // The control plane's own client (it applies the CRDs) is an admin
    // under the minted client CA, made by the same code `kubeconfig` uses.
    let (admin_cert, admin_key) = kubeconfig::admin_credential(
        read(&id, "server/tls/client-ca.crt").as_bytes(),
        read(&id, "server/tls/client-ca.key").as_bytes(),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let admin = Pair {
        cert_pem: admin_cert,
        key_pem: admin_key,
    };
    let service_key = read(&id, "server/tls/service.key");
    assert!(
        service_key.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
        "{service_key}"
    );
    let pki = Pki {
        ca: Pair {
            cert_pem: read(&id, "server/tls/server-ca.crt"),
            key_pem: read(&id, "server/tls/server-ca.key"),
        },
        apiserver: serving_cert(&id),
        admin: admin.clone(),
        controller_manager: admin,
        // Both flags get the file itself, as k3s passes service.key.
        sa_key_pem: service_key.clone(),
        sa_pub_pem: service_key.clone(),
        client_ca_pem: Some(read(&id, "server/tls/client-ca.crt")),
        client_ca_key_pem: None,
        request_header_ca_pem: Some(read(&id, "server/tls/request-header-ca.crt")),
    };
    let cp = liken_testenv::start_with_pki(liken_testenv::Options::default(), pki)
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"));
    let server_ca = id.join("server/tls/server-ca.crt");

    ok(liken([
        std::ffi::OsStr::new("kubeconfig"),
        std::ffi::OsStr::new("-server"),
        std::ffi::OsStr::new(cp.server()),
        dep.as_os_str(),
    ]));
    let kubeconfig = id.join("kubeconfig");
    let kubectl = || {
        let mut c = Command::new(liken_testenv::kubectl_bin());
        c.arg("--kubeconfig")
            .arg(&kubeconfig)
            .env_remove("KUBECONFIG");
        c
    };
    let namespaces = ok(kubectl().args(["get", "namespaces", "-o", "name"]));
    for ns in ["namespace/default", "namespace/kube-system"] {
        assert!(namespaces.lines().any(|l| l == ns), "{ns} in {namespaces}");
    }
    // The credential is an admin: it may do anything.
    let can = ok(kubectl().args(["auth", "can-i", "*", "*", "--all-namespaces"]));
    assert_eq!(can.trim(), "yes");

    // Any client certificate from client-ca is its own user.
    let (crt, key) = write_pair(
        s.path(),
        "user",
        &client_cert(
            &id,
            "client-ca",
            "liken-interop-user",
            Some("liken-interop"),
        ),
    );
    let by_cert = || {
        let mut c = Command::new(liken_testenv::kubectl_bin());
        c.arg("--server")
            .arg(cp.server())
            .arg("--certificate-authority")
            .arg(&server_ca)
            .arg("--client-certificate")
            .arg(&crt)
            .arg("--client-key")
            .arg(&key);
        c
    };
    let (user, groups) = whoami(&mut by_cert());
    assert_eq!(user, "liken-interop-user");
    assert!(groups.iter().any(|g| g == "liken-interop"), "{groups:?}");
    // One from the server CA is not trusted for clients.
    let (crt2, key2) = write_pair(
        s.path(),
        "wrong",
        &client_cert(&id, "server-ca", "intruder", None),
    );
    let refused = output(
        Command::new(liken_testenv::kubectl_bin())
            .arg("--server")
            .arg(cp.server())
            .arg("--certificate-authority")
            .arg(&server_ca)
            .arg("--client-certificate")
            .arg(&crt2)
            .arg("--client-key")
            .arg(&key2)
            .args(["auth", "whoami"])
            .env_remove("KUBECONFIG"),
    );
    assert!(!refused.status.success(), "a server-ca client is refused");

    // request-header-ca vouches for k3s's proxy name (system:auth-proxy,
    // deps.go genRequestHeaderCerts), which may then name the user; the
    // same certificate from client-ca may not.
    let proxy = write_pair(
        s.path(),
        "proxy",
        &client_cert(&id, "request-header-ca", "system:auth-proxy", None),
    );
    assert_eq!(proxied_user(cp.server(), &server_ca, &proxy), "alice");
    let not_proxy = write_pair(
        s.path(),
        "not-proxy",
        &client_cert(&id, "client-ca", "system:auth-proxy", None),
    );
    assert_eq!(
        proxied_user(cp.server(), &server_ca, &not_proxy),
        "system:auth-proxy"
    );

    // A ServiceAccount token the apiserver issues is accepted by it, and
    // is signed with the minted service key.
    let token = cp.token_for("default", "liken-interop").unwrap();
    let (user, _) = whoami(
        Command::new(liken_testenv::kubectl_bin())
            .arg("--server")
            .arg(cp.server())
            .arg("--certificate-authority")
            .arg(&server_ca)
            .arg("--token")
            .arg(&token),
    );
    assert_eq!(user, "system:serviceaccount:default:liken-interop");
    let sa = keys::signing_key(service_key.as_bytes()).unwrap();
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(signature)
        .unwrap();
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_FIXED,
        sa.public_key_raw(),
    )
    .verify(signed.as_bytes(), &signature)
    .expect("the token verifies with the minted service key");
}
