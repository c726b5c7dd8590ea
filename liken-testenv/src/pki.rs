//! The test control plane's certificates, minted fresh for each start.
//!
//! One CA signs everything: the apiserver's serving certificate (for
//! 127.0.0.1 and localhost, plus the in-cluster names so a token's
//! audience and a kubeconfig both work), the admin client certificate in
//! `system:masters`, and the controller-manager's client certificate. The
//! service-account key signs TokenRequest tokens. All keys are ECDSA
//! P-256, which kube-apiserver and rustls both accept. A test may bring
//! its own [`Pki`] instead (`start_with_pki`), for instance a whole
//! identity `liken mint` made, started the way k3s starts kube-apiserver
//! on it (separate client and request-header CAs, the service key file
//! itself as the verifying key).

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Pair {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

/// Everything minted for one control plane.
pub struct Pki {
    /// The CA certificate and key.
    pub ca: Pair,
    /// The apiserver's serving certificate.
    pub apiserver: Pair,
    /// The admin client (O=system:masters).
    pub admin: Pair,
    /// The controller-manager client (CN=system:kube-controller-manager).
    pub controller_manager: Pair,
    /// The service-account signing key (private; PKCS#8 or SEC1).
    pub sa_key_pem: String,
    /// What `--service-account-key-file` reads: the public half, or the
    /// private key file itself, as k3s passes `service.key`.
    pub sa_pub_pem: String,
    /// The CA the apiserver trusts for client certificates when it is not
    /// `ca`: a k3s identity (`liken mint`) keeps separate server and client
    /// CAs. `None` for the minted set, where one CA does both.
    pub client_ca_pem: Option<String>,
    /// The CA that signs authenticating proxies' client certificates
    /// (`--requestheader-client-ca-file`), trusted with k3s's proxy name
    /// and headers; `None` leaves the request-header authenticator off.
    pub request_header_ca_pem: Option<String>,
}

fn err(what: &str) -> impl Fn(rcgen::Error) -> String + '_ {
    move |e| format!("minting {what}: {e}")
}

fn client(issuer: &Issuer<'_, KeyPair>, cn: &str, org: Option<&str>) -> Result<Pair, String> {
    let key = KeyPair::generate().map_err(err(cn))?;
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(err(cn))?;
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, issuer).map_err(err(cn))?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl Pki {
    /// Mints a fresh set.
    pub fn mint() -> Result<Pki, String> {
        let ca_key = KeyPair::generate().map_err(err("the CA key"))?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err("the CA"))?;
        ca.distinguished_name
            .push(DnType::CommonName, "liken-testenv-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(err("the CA"))?;
        let ca_pair = Pair {
            cert_pem: ca_cert.pem(),
            key_pem: ca_key.serialize_pem(),
        };
        let issuer = Issuer::new(ca, ca_key);

        let api_key = KeyPair::generate().map_err(err("the apiserver key"))?;
        let mut api = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ])
        .map_err(err("the apiserver certificate"))?;
        api.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        api.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        api.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        api.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        api.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let api_cert = api
            .signed_by(&api_key, &issuer)
            .map_err(err("the apiserver certificate"))?;

        let sa = KeyPair::generate().map_err(err("the service-account key"))?;
        Ok(Pki {
            apiserver: Pair {
                cert_pem: api_cert.pem(),
                key_pem: api_key.serialize_pem(),
            },
            admin: client(&issuer, "liken-testenv-admin", Some("system:masters"))?,
            controller_manager: client(&issuer, "system:kube-controller-manager", None)?,
            ca: ca_pair,
            sa_key_pem: sa.serialize_pem(),
            sa_pub_pem: sa.public_key_pem(),
            client_ca_pem: None,
            request_header_ca_pem: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mints_pem() {
        let p = Pki::mint().unwrap();
        for pem in [&p.ca.cert_pem, &p.apiserver.cert_pem, &p.admin.cert_pem] {
            assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
        }
        assert!(p.sa_key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(p.sa_pub_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    }
}
