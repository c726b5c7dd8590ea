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
    /// The client CA's private key, when the caller has it: then
    /// kube-controller-manager signs client certificates (the
    /// `kubernetes.io/kube-apiserver-client` and `…-client-kubelet`
    /// signers) with the client CA, as k3s configures it, so a kubelet's
    /// CertificateSigningRequest yields a certificate the apiserver
    /// trusts. `None` leaves one signer, `ca`, for everything.
    pub client_ca_key_pem: Option<String>,
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

/// A self-signed CA named `cn`, and the issuer that signs with it.
fn ca(cn: &str) -> Result<(Pair, Issuer<'static, KeyPair>), String> {
    let key = KeyPair::generate().map_err(err("the CA key"))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err("the CA"))?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).map_err(err("the CA"))?;
    let pair = Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    Ok((pair, Issuer::new(params, key)))
}

/// A serving certificate for `cn`, the DNS names and the IP addresses.
fn server(
    issuer: &Issuer<'_, KeyPair>,
    cn: &str,
    dns: &[&str],
    ips: &[IpAddr],
) -> Result<Pair, String> {
    let key = KeyPair::generate().map_err(err(cn))?;
    let names: Vec<String> = dns.iter().map(|d| (*d).to_owned()).collect();
    let mut p = CertificateParams::new(names).map_err(err(cn))?;
    p.subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, issuer).map_err(err(cn))?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A fresh CA named `<name> test CA` and a serving certificate it signed
/// for 127.0.0.1 and localhost: (the CA, the server's pair), for a test
/// web server such as [`crate::nginx::Nginx::start_https`]. Each call
/// mints another CA, so a second call is a CA the first server's
/// certificate does not chain to.
pub fn mint_serving(name: &str) -> Result<(Pair, Pair), String> {
    let (ca, issuer) = ca(&format!("{name} test CA"))?;
    let pair = server(
        &issuer,
        "127.0.0.1",
        &["localhost"],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
    )?;
    Ok((ca, pair))
}

impl Pki {
    /// Mints a fresh set.
    pub fn mint() -> Result<Pki, String> {
        let (ca_pair, issuer) = ca("liken-testenv-ca")?;
        let apiserver = server(
            &issuer,
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            &[
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ],
        )?;

        let sa = KeyPair::generate().map_err(err("the service-account key"))?;
        Ok(Pki {
            apiserver,
            admin: client(&issuer, "liken-testenv-admin", Some("system:masters"))?,
            controller_manager: client(&issuer, "system:kube-controller-manager", None)?,
            ca: ca_pair,
            sa_key_pem: sa.serialize_pem(),
            sa_pub_pem: sa.public_key_pem(),
            client_ca_pem: None,
            client_ca_key_pem: None,
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
        let (ca, server) = mint_serving("unit").unwrap();
        assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(server.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    }
}
