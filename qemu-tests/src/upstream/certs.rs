//! The leaf certificates and kubeconfigs a k3s server makes at start
//! from the CAs liken-init seeded under `server/tls`.
//!
//! k3s keeps only its CAs and the service-account key as the cluster's
//! identity and derives every leaf from them when the server starts
//! (k3s-io/k3s pkg/daemons/control/deps/deps.go: `FillRuntimeCerts`
//! names the files, `genClientCerts`, `genServerCerts`,
//! `genRequestHeaderCerts` and `genETCDCerts` make them, `KubeConfig`
//! writes `server/cred/*.kubeconfig` from its template). This module
//! owns that list ([`leaves`]), the kubeconfig text ([`kubeconfig`])
//! and k3s.yaml's ([`k3s_yaml`]); [`generate`] writes them.
//!
//! The same names, subjects, organisations and key usages as k3s:
//!
//! | file below `server/tls` | subject | signed by | usage |
//! | --- | --- | --- | --- |
//! | client-admin | system:admin, O=system:masters | client CA | client |
//! | client-controller | system:kube-controller-manager | client CA | client |
//! | client-scheduler | system:kube-scheduler | client CA | client |
//! | client-kube-apiserver | kube-apiserver | client CA | client |
//! | client-kube-proxy | system:kube-proxy | client CA | client |
//! | client-k3s-controller | system:k3s-controller | client CA | client |
//! | serving-kube-apiserver | kube-apiserver, the API's names | server CA | server |
//! | client-auth-proxy | system:auth-proxy | request-header CA | client |
//! | etcd/server-client | etcd-server, localhost and the SANs | etcd server CA | server and client |
//! | etcd/client | etcd-client | etcd server CA | client |
//! | etcd/peer-server-client | etcd-peer, localhost and the SANs | etcd peer CA | server and client |
//!
//! plus the bare keys `client-kubelet.key` and `serving-kubelet.key`,
//! which k3s's supervisor signs each node's kubelet certificates with.
//! The launcher has no supervisor (its kubelets use Kubernetes' TLS
//! bootstrap, see `join`), so nothing signs with them; they are made
//! because k3s makes them, and a later supervisor would find them.
//!
//! One difference: k3s keeps a leaf until it nears expiry or its CA
//! changes (`createClientCertKey` with `regen`); the launcher makes
//! every leaf afresh at each start, which costs milliseconds and keeps
//! the SANs in step with the node's address without a rule for when to
//! renew. Keys are ECDSA P-256, as k3s's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::k3s_node::write_private;

/// Which of the seeded CAs signs a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ca {
    /// `client-ca`: every client of the API.
    Client,
    /// `server-ca`: the API's serving certificate.
    Server,
    /// `request-header-ca`: the authenticating proxy's client.
    RequestHeader,
    /// `etcd/server-ca`: etcd's serving and client certificates.
    EtcdServer,
    /// `etcd/peer-ca`: etcd's peer certificate.
    EtcdPeer,
}

impl Ca {
    /// The CA's stem below `server/tls`.
    pub fn stem(self) -> &'static str {
        match self {
            Ca::Client => "client-ca",
            Ca::Server => "server-ca",
            Ca::RequestHeader => "request-header-ca",
            Ca::EtcdServer => "etcd/server-ca",
            Ca::EtcdPeer => "etcd/peer-ca",
        }
    }
}

/// What a leaf is for (its extended key usages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// TLS client authentication.
    Client,
    /// TLS server authentication.
    Server,
    /// Both, as etcd's certificates are.
    Both,
}

/// One leaf certificate k3s makes at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// The path below `server/tls` without `.crt`/`.key`.
    pub stem: &'static str,
    /// The common name (the user, for a client).
    pub cn: &'static str,
    /// The organisations (the groups, for a client).
    pub orgs: &'static [&'static str],
    /// Who signs it.
    pub ca: Ca,
    /// What it is for.
    pub usage: Usage,
    /// DNS names and addresses (a serving certificate's).
    pub dns: Vec<String>,
    /// IP addresses.
    pub ips: Vec<IpAddr>,
}

/// The names the API's serving certificate carries besides the SANs
/// (deps.go, `genServerCerts`).
pub const API_DNS: [&str; 5] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
/// The `kubernetes` Service's address: the first of k3s's service CIDR
/// 10.43.0.0/16 (controlplane.ServiceIPRange).
pub const API_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 43, 0, 1);

/// The SANs k3s adds to the ones config.yaml's `tls-san` names
/// (k3s-io/k3s pkg/cli/server/server.go: 127.0.0.1, ::1, localhost, the
/// hostname and the node's addresses), split into names and addresses.
pub fn decide_sans(node: &str, node_ip: &str, tls_san: &[String]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = vec!["localhost".to_owned(), node.to_owned()];
    let mut ips = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    for s in std::iter::once(node_ip).chain(tls_san.iter().map(String::as_str)) {
        match s.parse::<IpAddr>() {
            Ok(ip) => {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
            Err(_) if !s.is_empty() && !dns.iter().any(|d| d == s) => dns.push(s.to_owned()),
            Err(_) => {}
        }
    }
    (dns, ips)
}

/// Every leaf k3s makes at start, for these SANs (see the module docs).
pub fn leaves(dns: &[String], ips: &[IpAddr]) -> Vec<Leaf> {
    let client = |stem, cn, orgs, ca| Leaf {
        stem,
        cn,
        orgs,
        ca,
        usage: Usage::Client,
        dns: Vec::new(),
        ips: Vec::new(),
    };
    let mut api_dns: Vec<String> = API_DNS.iter().map(|s| (*s).to_owned()).collect();
    for d in dns {
        if !api_dns.contains(d) {
            api_dns.push(d.clone());
        }
    }
    let mut api_ips = vec![IpAddr::V4(API_SERVICE_IP)];
    api_ips.extend(ips.iter().copied());
    let mut etcd_dns = vec!["localhost".to_owned()];
    etcd_dns.extend(dns.iter().filter(|d| *d != "localhost").cloned());
    vec![
        client(
            "client-admin",
            "system:admin",
            &["system:masters"],
            Ca::Client,
        ),
        client(
            "client-controller",
            "system:kube-controller-manager",
            &[],
            Ca::Client,
        ),
        client("client-scheduler", "system:kube-scheduler", &[], Ca::Client),
        client("client-kube-apiserver", "kube-apiserver", &[], Ca::Client),
        client("client-kube-proxy", "system:kube-proxy", &[], Ca::Client),
        client(
            "client-k3s-controller",
            "system:k3s-controller",
            &[],
            Ca::Client,
        ),
        Leaf {
            stem: "serving-kube-apiserver",
            cn: "kube-apiserver",
            orgs: &[],
            ca: Ca::Server,
            usage: Usage::Server,
            dns: api_dns,
            ips: api_ips,
        },
        client(
            "client-auth-proxy",
            "system:auth-proxy",
            &[],
            Ca::RequestHeader,
        ),
        Leaf {
            stem: "etcd/server-client",
            cn: "etcd-server",
            orgs: &[],
            ca: Ca::EtcdServer,
            usage: Usage::Both,
            dns: etcd_dns.clone(),
            ips: ips.to_vec(),
        },
        client("etcd/client", "etcd-client", &[], Ca::EtcdServer),
        Leaf {
            stem: "etcd/peer-server-client",
            cn: "etcd-peer",
            orgs: &[],
            ca: Ca::EtcdPeer,
            usage: Usage::Both,
            dns: etcd_dns,
            ips: ips.to_vec(),
        },
    ]
}

/// The bare keys k3s makes for its supervisor to sign with.
pub const BARE_KEYS: [&str; 2] = ["client-kubelet.key", "serving-kubelet.key"];

/// How long a leaf is valid: k3s's one year.
pub const LIFETIME: Duration = Duration::days(365);

/// The kubeconfigs k3s writes below `server/cred` (`FillRuntimeCerts`),
/// each with the client leaf it uses.
pub const KUBECONFIGS: [(&str, &str); 4] = [
    ("admin.kubeconfig", "client-admin"),
    ("controller.kubeconfig", "client-controller"),
    ("scheduler.kubeconfig", "client-scheduler"),
    ("api-server.kubeconfig", "client-kube-apiserver"),
];

/// A kubeconfig in k3s's template (deps.go, `kubeconfigTemplate`): the
/// cluster `local`, the user `user`, the context `Default` in the
/// `default` namespace, files named rather than embedded.
pub fn kubeconfig(url: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    server: {url}\n    certificate-authority: \
         {}\n  name: local\ncontexts:\n- context:\n    cluster: local\n    namespace: default\n    \
         user: user\n  name: Default\ncurrent-context: Default\nkind: Config\npreferences: {{}}\n\
         users:\n- name: user\n  user:\n    client-certificate: {}\n    client-key: {}\n",
        ca.display(),
        cert.display(),
        key.display()
    )
}

/// /etc/rancher/k3s/k3s.yaml as k3s writes it from the admin
/// credential (k3s-io/k3s pkg/server/server.go `writeKubeConfig` through
/// pkg/clientaccess `WriteClientKubeConfig`): everything embedded, each
/// entry named `default`.
pub fn k3s_yaml(url: &str, server_ca: &[u8], cert: &[u8], key: &[u8]) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: \
         {url}\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  \
         name: default\ncurrent-context: default\nkind: Config\npreferences: {{}}\nusers:\n- name: \
         default\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(server_ca),
        b64(cert),
        b64(key)
    )
}

/// Why a certificate could not be made.
#[derive(Debug)]
pub enum CertError {
    /// A seeded CA file is missing or unreadable.
    Read(PathBuf, std::io::Error),
    /// A seeded CA file does not hold what it should.
    Pem(PathBuf, String),
    /// rcgen refused to sign.
    Sign(&'static str, rcgen::Error),
    /// Writing a file failed.
    Write(String),
}

impl std::fmt::Display for CertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertError::Read(p, e) => write!(
                f,
                "reading {}: {e}; liken-init seeds the identity's CAs there on a leader's first \
                 boot (is this machine a leader of a deployment with an identity?)",
                p.display()
            ),
            CertError::Pem(p, why) => write!(
                f,
                "{} {why}; the identity is damaged: mint or adopt it again",
                p.display()
            ),
            CertError::Sign(what, e) => write!(f, "signing {what}: {e}"),
            CertError::Write(e) => write!(f, "{e}"),
        }
    }
}

fn issuer(tls: &Path, ca: Ca) -> Result<Issuer<'static, KeyPair>, CertError> {
    use liken_cli::identity::keys;
    let read = |ext: &str| {
        let p = tls.join(format!("{}.{ext}", ca.stem()));
        std::fs::read(&p)
            .map_err(|e| CertError::Read(p.clone(), e))
            .map(|b| (p, b))
    };
    let (kp, key) = read("key")?;
    let (cp, cert) = read("crt")?;
    let key = keys::signing_key(&key).map_err(|e| CertError::Pem(kp, e.0))?;
    let der = keys::first_certificate(&cert).map_err(|e| CertError::Pem(cp.clone(), e.0))?;
    Issuer::from_ca_cert_der(&der.into(), key).map_err(|e| CertError::Pem(cp, e.to_string()))
}

/// The parameters of one leaf, valid from a day before `now` (as
/// liken-cli backdates its certificates, for machines whose clock lags).
pub fn params(leaf: &Leaf, now: OffsetDateTime) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in leaf.orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, leaf.cn);
    p.distinguished_name = dn;
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = match leaf.usage {
        Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
        Usage::Both => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    for d in &leaf.dns {
        if let Ok(name) = d.clone().try_into() {
            p.subject_alt_names.push(SanType::DnsName(name));
        }
    }
    p.subject_alt_names
        .extend(leaf.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - Duration::days(1);
    p.not_after = now + LIFETIME;
    p
}

/// Writes every leaf, the bare keys and the kubeconfigs for `url` below
/// `server` (`<data-dir>/server`); keys 0600, certificates 0644.
pub fn generate(server: &Path, leaves: &[Leaf], url: &str) -> Result<(), CertError> {
    let tls = server.join("tls");
    let now = OffsetDateTime::now_utc();
    let mut issuers: Vec<(Ca, Issuer<'static, KeyPair>)> = Vec::new();
    for leaf in leaves {
        if !issuers.iter().any(|(c, _)| *c == leaf.ca) {
            issuers.push((leaf.ca, issuer(&tls, leaf.ca)?));
        }
        let Some((_, by)) = issuers.iter().find(|(c, _)| *c == leaf.ca) else {
            continue;
        };
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| CertError::Sign(leaf.stem, e))?;
        let cert = params(leaf, now)
            .signed_by(&key, by)
            .map_err(|e| CertError::Sign(leaf.stem, e))?;
        write_private(
            &tls.join(format!("{}.key", leaf.stem)),
            key.serialize_pem().as_bytes(),
        )
        .map_err(CertError::Write)?;
        write_public(
            &tls.join(format!("{}.crt", leaf.stem)),
            cert.pem().as_bytes(),
        )?;
    }
    for k in BARE_KEYS {
        let path = tls.join(k);
        if !path.exists() {
            let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                .map_err(|e| CertError::Sign(k, e))?;
            write_private(&path, key.serialize_pem().as_bytes()).map_err(CertError::Write)?;
        }
    }
    for (file, stem) in KUBECONFIGS {
        let text = kubeconfig(
            url,
            &tls.join("server-ca.crt"),
            &tls.join(format!("{stem}.crt")),
            &tls.join(format!("{stem}.key")),
        );
        write_private(&server.join("cred").join(file), text.as_bytes())
            .map_err(CertError::Write)?;
    }
    Ok(())
}

/// Writes a certificate, readable by all, as k3s leaves them.
fn write_public(path: &Path, bytes: &[u8]) -> Result<(), CertError> {
    use std::os::unix::fs::PermissionsExt;
    write_private(path, bytes).map_err(CertError::Write)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| CertError::Write(format!("chmod {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_as_k3s_adds_them() {
        let (dns, ips) = decide_sans(
            "node-1",
            "10.0.2.15",
            &["10.0.2.15".into(), "api.example".into()],
        );
        assert_eq!(dns, ["localhost", "node-1", "api.example"]);
        assert_eq!(
            ips,
            [
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(10, 0, 2, 15)),
            ]
        );
    }

    /// The subjects, signers and usages of deps.go, pinned.
    #[test]
    fn the_leaves_are_k3s_s() {
        let (dns, ips) = decide_sans("node-1", "10.0.2.15", &[]);
        let l = leaves(&dns, &ips);
        let row = |stem: &str| {
            l.iter()
                .find(|x| x.stem == stem)
                .map(|x| (x.cn, x.orgs, x.ca, x.usage))
                .unwrap_or_else(|| panic!("{stem}"))
        };
        assert_eq!(
            row("client-admin"),
            (
                "system:admin",
                &["system:masters"][..],
                Ca::Client,
                Usage::Client
            )
        );
        assert_eq!(row("client-controller").0, "system:kube-controller-manager");
        assert_eq!(row("client-scheduler").0, "system:kube-scheduler");
        assert_eq!(row("client-kube-apiserver").0, "kube-apiserver");
        assert_eq!(row("client-kube-proxy").0, "system:kube-proxy");
        assert_eq!(
            row("client-auth-proxy"),
            (
                "system:auth-proxy",
                &[][..],
                Ca::RequestHeader,
                Usage::Client
            )
        );
        assert_eq!(
            row("serving-kube-apiserver"),
            ("kube-apiserver", &[][..], Ca::Server, Usage::Server)
        );
        assert_eq!(
            row("etcd/server-client"),
            ("etcd-server", &[][..], Ca::EtcdServer, Usage::Both)
        );
        assert_eq!(
            row("etcd/client"),
            ("etcd-client", &[][..], Ca::EtcdServer, Usage::Client)
        );
        assert_eq!(
            row("etcd/peer-server-client"),
            ("etcd-peer", &[][..], Ca::EtcdPeer, Usage::Both)
        );
        let api = l
            .iter()
            .find(|x| x.stem == "serving-kube-apiserver")
            .unwrap();
        for name in API_DNS {
            assert!(api.dns.iter().any(|d| d == name), "{name}");
        }
        assert!(api.ips.contains(&IpAddr::V4(API_SERVICE_IP)));
        assert!(api.ips.contains(&IpAddr::V4(Ipv4Addr::new(10, 0, 2, 15))));
    }

    #[test]
    fn kubeconfigs_in_k3s_s_template() {
        let k = kubeconfig(
            "https://127.0.0.1:6443",
            Path::new("/s/tls/server-ca.crt"),
            Path::new("/s/tls/client-admin.crt"),
            Path::new("/s/tls/client-admin.key"),
        );
        assert!(k.contains("    server: https://127.0.0.1:6443\n"));
        assert!(k.contains("current-context: Default\n"));
        assert!(k.contains("    client-key: /s/tls/client-admin.key\n"));
        let y = k3s_yaml("https://127.0.0.1:6443", b"ca", b"cert", b"key");
        assert!(y.contains("certificate-authority-data: Y2E=\n"));
        assert!(y.contains("current-context: default\n"));
    }

    /// Leaves signed by a `liken mint` identity's CAs chain to them.
    #[test]
    fn generates_leaves_from_a_minted_identity() {
        let dir = std::env::temp_dir().join(format!("upstream-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        liken_cli::identity::mint::mint(&dir).unwrap();
        let server = dir.join("server");
        let (dns, ips) = decide_sans("node-1", "10.0.2.15", &[]);
        generate(&server, &leaves(&dns, &ips), "https://127.0.0.1:6443").unwrap();
        for (stem, ca) in [
            ("client-admin", "client-ca"),
            ("serving-kube-apiserver", "server-ca"),
            ("etcd/peer-server-client", "etcd/peer-ca"),
        ] {
            let leaf = std::fs::read(server.join(format!("tls/{stem}.crt"))).unwrap();
            let ca = std::fs::read(server.join(format!("tls/{ca}.crt"))).unwrap();
            let leaf = liken_cli::identity::keys::first_certificate(&leaf).unwrap();
            let ca = liken_cli::identity::keys::first_certificate(&ca).unwrap();
            let (_, leaf) = x509_parser::parse_x509_certificate(&leaf).unwrap();
            let (_, ca) = x509_parser::parse_x509_certificate(&ca).unwrap();
            leaf.verify_signature(Some(ca.public_key()))
                .unwrap_or_else(|e| panic!("{stem}: {e}"));
        }
        assert!(server.join("cred/admin.kubeconfig").exists());
        assert!(server.join("tls/client-kubelet.key").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
