//! How the node stand-in gets the credentials k3s would give its
//! kubelet, and a server's admin.
//!
//! k3s: a server makes its client certificates from the cluster's
//! client CA, which it holds (k3s-io/k3s pkg/daemons/control/deps/deps.go,
//! genClientCerts: `system:admin` in `system:masters` for
//! /etc/rancher/k3s/k3s.yaml), and signs its own kubelet's the same way;
//! an agent, which holds no CA key, presents its join token to the k3s
//! supervisor on the server and receives a kubelet client certificate
//! (`system:node:<name>` in `system:nodes`) signed by the client CA
//! (pkg/agent/config/config.go asks `/v1-k3s/client-kubelet.crt`;
//! pkg/server/router.go answers). Both are kept in the agent's data
//! directory with `agent/kubelet.kubeconfig`.
//!
//! Here a server does exactly that: it holds the CA (init seeds the
//! identity into `server/tls`), so it mints `system:node:<name>` and
//! `system:admin` itself. There is no k3s supervisor, so an agent's
//! exchange goes through Kubernetes' own TLS bootstrap instead, with
//! real parts at every step: the agent turns its join token's secret
//! into a bootstrap token (the same derivation the server registered,
//! see [`super::supervisor`]), authenticates with it as
//! `system:bootstrap:<id>`, sends a CertificateSigningRequest for
//! `system:node:<name>` to the `kubernetes.io/kube-apiserver-client-kubelet`
//! signer, and kube-controller-manager approves it (the node-client
//! auto-approval the server granted) and signs it with the cluster's
//! client CA (k3s configures that signer the same way,
//! pkg/daemons/control/server.go, controllerManager). Before it sends
//! the token anywhere, the agent checks the server CA it trusts against
//! the hash the token carries, as k3s's agent checks the CA it fetches
//! (pkg/clientaccess/token.go). The private key never leaves the
//! machine.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use liken_kube::request::Resource;
use liken_kube::{Api, Client, Config, DynamicObject};
use serde_json::json;
use time::OffsetDateTime;

use super::config::{Role, Setup};
use crate::k3s_node::write_private;

/// CertificateSigningRequests (certificates.k8s.io/v1, cluster-scoped).
pub const CSRS: Resource = Resource {
    group: "certificates.k8s.io",
    version: "v1",
    plural: "certificatesigningrequests",
    kind: "CertificateSigningRequest",
    namespaced: false,
};

/// The signer a kubelet's client certificate comes from.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long a minted kubelet or admin certificate lasts (k3s: a year).
const LIFETIME: time::Duration = time::Duration::days(365);
/// How long an agent waits for its request to be signed.
const SIGNING_WAIT: Duration = Duration::from_secs(120);

/// What the stand-in talks to the apiserver with.
pub struct Credentials {
    /// The kubelet's client (`system:node:<name>`).
    pub kubelet: Client,
    /// A server's admin client (`system:admin`), for its supervisor and
    /// deploy parts.
    pub admin: Option<Client>,
}

/// The user name a kubelet's certificate carries.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// A join token's CA hash (if it has one) and secret
/// ([`crate::k3s_node::parse_token`], which the launcher shares).
pub use crate::k3s_node::parse_token;

/// The bootstrap token (id, secret) for a join token's secret
/// ([`crate::k3s_node::bootstrap_token`], which the launcher shares).
pub use crate::k3s_node::bootstrap_token;

/// Gets the credentials for `setup`'s role (see the module docs).
pub fn obtain(setup: &Setup) -> Result<Credentials, String> {
    let ca_path = setup.server_ca_path();
    let server_ca =
        std::fs::read(&ca_path).map_err(|e| format!("reading {}: {e}", ca_path.display()))?;
    let (kubelet, admin) = match setup.role {
        Role::Server => minted(setup, &server_ca)?,
        Role::Agent => (bootstrapped(setup, &server_ca)?, None),
    };
    let client = |path: &Path| -> Result<Client, String> {
        let config = Config::from_kubeconfig(path, None).map_err(|e| e.to_string())?;
        Ok(Client::new(&config)
            .map_err(|e| e.to_string())?
            .identify("liken-standin-k3s", env!("CARGO_PKG_VERSION")))
    };
    Ok(Credentials {
        kubelet: client(&kubelet)?,
        admin: admin.as_deref().map(client).transpose()?,
    })
}

/// A server: the kubelet's and the admin's certificates, minted from
/// the client CA it holds. Returns both kubeconfigs' paths.
fn minted(setup: &Setup, server_ca: &[u8]) -> Result<(PathBuf, Option<PathBuf>), String> {
    let read = |rel: &str| {
        let p = setup.data(rel);
        std::fs::read(&p).map_err(|e| format!("reading {}: {e}", p.display()))
    };
    let (ca, key) = (
        read("server/tls/client-ca.crt")?,
        read("server/tls/client-ca.key")?,
    );
    let now = OffsetDateTime::now_utc();
    let mint = |user: &str, group: &str| {
        liken_cli::identity::kubeconfig::client_credential(&ca, &key, user, &[group], LIFETIME, now)
            .map_err(|e| format!("minting {user}'s certificate from the client CA: {e}"))
    };
    let (cert, key_pem) = mint(&node_user(&setup.node), "system:nodes")?;
    let kubelet = write_kubelet(setup, server_ca, &cert, &key_pem)?;
    let (cert, key_pem) = mint("system:admin", "system:masters")?;
    let admin = PathBuf::from("/etc/rancher/k3s/k3s.yaml");
    write_private(
        &admin,
        kubeconfig(&setup.endpoint, server_ca, Auth::Cert(&cert, &key_pem)).as_bytes(),
    )?;
    crate::say(&format!(
        "minted {} and system:admin from the cluster's client CA, as a k3s server does \
         (kubeconfigs {} and {})",
        node_user(&setup.node),
        kubelet.display(),
        admin.display()
    ));
    Ok((kubelet, Some(admin)))
}

/// An agent: the TLS bootstrap (see the module docs). Returns the
/// kubelet's kubeconfig.
fn bootstrapped(setup: &Setup, server_ca: &[u8]) -> Result<PathBuf, String> {
    let token = std::fs::read_to_string(&setup.token_file)
        .map_err(|e| format!("reading {}: {e}", setup.token_file.display()))?;
    let (hash, secret) = parse_token(&token)?;
    let Some(hash) = hash else {
        return Err(format!(
            "{} holds a token without a CA hash; an agent needs the secure K10 form \
             (K10<CA hash>::<user>:<secret>) to check the server CA",
            setup.token_file.display()
        ));
    };
    let now = liken_cli::identity::cahash::now();
    let ours = liken_cli::identity::cahash::hash_ca(server_ca, now)?;
    if ours != hash {
        return Err(format!(
            "the server CA {} does not match the join token's hash ({ours} is not {hash}): \
             the token is for another cluster",
            setup.server_ca_path().display()
        ));
    }
    let (id, token_secret) = bootstrap_token(secret);
    let bootstrap = Client::new(
        &Config::from_kubeconfig_text(
            &kubeconfig(
                &setup.endpoint,
                server_ca,
                Auth::Token(&format!("{id}.{token_secret}")),
            ),
            Path::new("bootstrap.kubeconfig"),
            Path::new("/"),
            None,
        )
        .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?
    .identify("liken-standin-k3s", env!("CARGO_PKG_VERSION"));

    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("generating the kubelet's key: {e}"))?;
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, node_user(&setup.node));
    params.distinguished_name = dn;
    let csr = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| format!("writing the certificate request: {e}"))?;
    use base64::Engine;
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": format!("node-csr-{}-", setup.node)},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(csr),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    });
    let api = Api::all(CSRS);
    let created: DynamicObject = bootstrap
        .create(&api, &body)
        .map_err(|e| format!("sending the kubelet's certificate request: {e}"))?;
    let name = liken_kube::Object::name(&created).to_owned();
    crate::say(&format!(
        "sent certificate request {name} for {} with the join token's bootstrap token \
         (system:bootstrap:{id}), in place of k3s's supervisor exchange",
        node_user(&setup.node)
    ));
    let deadline = Instant::now() + SIGNING_WAIT;
    let cert = loop {
        let csr: DynamicObject = bootstrap
            .get(&api, &name)
            .map_err(|e| format!("reading certificate request {name}: {e}"))?;
        let status = &csr.0["status"];
        if let Some(c) = status["certificate"].as_str().filter(|c| !c.is_empty()) {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(c)
                .map_err(|e| {
                    format!("certificate request {name}: the certificate is not base64: {e}")
                })?;
            break String::from_utf8(pem).map_err(|e| e.to_string())?;
        }
        let refused = status["conditions"].as_array().and_then(|cs| {
            cs.iter()
                .find(|c| (c["type"] == "Denied" || c["type"] == "Failed") && c["status"] == "True")
        });
        if let Some(c) = refused {
            return Err(format!(
                "certificate request {name} was {}: {}",
                c["type"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "certificate request {name} was not signed within {} s: is \
                 kube-controller-manager running with the client CA as the kubelet-client signer?",
                SIGNING_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let path = write_kubelet(setup, server_ca, &cert, &key.serialize_pem())?;
    crate::say(&format!(
        "kube-controller-manager signed {} (kubeconfig {})",
        node_user(&setup.node),
        path.display()
    ));
    Ok(path)
}

/// Writes the kubelet's certificate, key and kubeconfig where k3s's
/// agent keeps them; returns the kubeconfig's path.
fn write_kubelet(
    setup: &Setup,
    server_ca: &[u8],
    cert: &str,
    key: &str,
) -> Result<PathBuf, String> {
    let dir = setup.data("agent");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_private(&dir.join("client-kubelet.crt"), cert.as_bytes())?;
    write_private(&dir.join("client-kubelet.key"), key.as_bytes())?;
    let path = dir.join("kubelet.kubeconfig");
    write_private(
        &path,
        kubeconfig(&setup.endpoint, server_ca, Auth::Cert(cert, key)).as_bytes(),
    )?;
    Ok(path)
}

/// How a kubeconfig authenticates.
pub enum Auth<'a> {
    /// A client certificate and key, PEM.
    Cert(&'a str, &'a str),
    /// A bearer token.
    Token(&'a str),
}

/// A kubeconfig for `server`, trusting `ca`.
pub fn kubeconfig(server: &str, ca: &[u8], auth: Auth<'_>) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let user = match auth {
        Auth::Cert(cert, key) => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert.as_bytes()),
            b64(key.as_bytes())
        ),
        Auth::Token(t) => format!("    token: {t}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: default\n\
         clusters:\n- name: default\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\n\
         users:\n- name: default\n  user:\n{user}\
         contexts:\n- name: default\n  context:\n    cluster: default\n    user: default\n",
        b64(ca)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_derive_a_bootstrap_token() {
        let (hash, secret) = parse_token("K10abc::node:0123456789abcdef\n").unwrap();
        assert_eq!((hash, secret), (Some("abc"), "0123456789abcdef"));
        assert_eq!(parse_token("plain").unwrap(), (None, "plain"));
        assert!(parse_token("K10abc").is_err());
        assert!(parse_token("K10abc::node:").is_err());
        assert_eq!(parse_token("K10::node:s").unwrap(), (None, "s"));
        let (id, s) = bootstrap_token("0123456789abcdef");
        assert_eq!((id.len(), s.len()), (6, 16));
        assert!(
            id.chars()
                .chain(s.chars())
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
            "{id}.{s}"
        );
        assert_eq!(bootstrap_token("0123456789abcdef"), (id, s));
        assert_ne!(
            bootstrap_token("another").0,
            bootstrap_token("0123456789abcdef").0
        );
    }

    #[test]
    fn a_kubeconfig_is_read_by_liken_kube() {
        let text = kubeconfig(
            "https://10.0.2.2:6443",
            b"ca",
            Auth::Token("abcdef.0123456789abcdef"),
        );
        let c = Config::from_kubeconfig_text(&text, Path::new("k"), Path::new("/"), None).unwrap();
        assert_eq!(c.server, "https://10.0.2.2:6443");
    }
}
