//! The minted identity proven to be a working Kubernetes identity: a real
//! kube-apiserver (liken-testenv) serves with a certificate from the
//! minted server CA, trusts client certificates from the minted client
//! CA and signs service-account tokens with the minted service key; Debian's
//! kubectl, given only the kubeconfig `liken kubeconfig` wrote, lists its
//! namespaces.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;

use base64::Engine;
use liken_cli::identity::{keys, kubeconfig};
use liken_testenv::pki::{Pair, Pki};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::support::{Scratch, deployment, liken, ok};

fn read(identity: &Path, rel: &str) -> String {
    std::fs::read_to_string(identity.join(rel)).unwrap()
}

/// What k3s makes from the server CA on start: the apiserver's serving
/// certificate. The test makes it the same way, for loopback.
fn serving_cert(identity: &Path) -> Pair {
    let ca_key = keys::signing_key(read(identity, "server/tls/server-ca.key").as_bytes()).unwrap();
    let ca_der =
        keys::first_certificate(read(identity, "server/tls/server-ca.crt").as_bytes()).unwrap();
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ])
    .unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    p.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &issuer).unwrap();
    Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

#[test]
fn kubectl_lists_namespaces_with_the_written_kubeconfig() {
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
    let sa = keys::signing_key(service_key.as_bytes()).unwrap();
    let pki = Pki {
        ca: Pair {
            cert_pem: read(&id, "server/tls/server-ca.crt"),
            key_pem: read(&id, "server/tls/server-ca.key"),
        },
        apiserver: serving_cert(&id),
        admin: admin.clone(),
        controller_manager: admin,
        sa_key_pem: service_key,
        sa_pub_pem: sa.public_key_pem(),
        client_ca_pem: Some(read(&id, "server/tls/client-ca.crt")),
    };
    let cp = liken_testenv::start_with_pki(liken_testenv::Options::default(), pki)
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"));

    ok(liken([
        std::ffi::OsStr::new("kubeconfig"),
        std::ffi::OsStr::new("-server"),
        std::ffi::OsStr::new(cp.server()),
        dep.as_os_str(),
    ]));
    let kubeconfig = id.join("kubeconfig");
    let namespaces = ok(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "namespaces", "-o", "name"])
        .env_remove("KUBECONFIG"));
    for ns in ["namespace/default", "namespace/kube-system"] {
        assert!(namespaces.lines().any(|l| l == ns), "{ns} in {namespaces}");
    }
    // The credential is an admin: it may do anything.
    let can = ok(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["auth", "can-i", "*", "*", "--all-namespaces"])
        .env_remove("KUBECONFIG"));
    assert_eq!(can.trim(), "yes");

    // Tokens the apiserver issues are signed with the minted service key.
    let token = cp.token_for("default", "liken-interop").unwrap();
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
