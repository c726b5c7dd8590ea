//! How the agent joins with its agent token alone, as a follower does.
//!
//! k3s: the agent reads its token (`K10<CA hash>::<user>:<secret>`),
//! fetches the server's CA bundle from `/cacerts` and refuses it unless
//! its SHA-256 is the token's hash (k3s-io/k3s pkg/clientaccess/token.go),
//! keeps it as `agent/server-ca.crt`, then presents the token to the
//! supervisor on the server, which answers with the kubelet's client
//! certificate (`system:node:<name>` in `system:nodes`, signed by the
//! client CA; pkg/agent/config/config.go asks `/v1-k3s/client-kubelet.crt`,
//! pkg/server/router.go answers) and kube-proxy's (`system:kube-proxy`).
//!
//! There is no k3s supervisor on the test's control plane, so the
//! exchange goes through Kubernetes' own TLS bootstrap, done by the real
//! kubelet: the agent token's secret becomes a bootstrap token (the
//! first 6 and next 16 hex digits of its SHA-256, the derivation the
//! node stand-in's server registers and the test's host registers for
//! this launcher), which the kubelet presents through
//! `--bootstrap-kubeconfig` to send its own CertificateSigningRequest;
//! kube-controller-manager approves and signs it with the client CA. The
//! CA the launcher trusts is the one init copied from the layer, checked
//! against the token's hash before the token goes anywhere. kube-proxy
//! then uses the kubelet's certificate (the host binds
//! `system:node-proxier` to `system:nodes` in place of the supervisor's
//! `system:kube-proxy` certificate).
//!
//! The node password: k3s's agent keeps one in /etc/rancher/node/password
//! (16 random bytes in hex, 0600, made on its first start and read on
//! every later one; pkg/agent/config/config.go, ensureNodePassword) and
//! presents it with each supervisor request, so a server refuses another
//! machine claiming the node's name. Nothing here checks it, since no
//! supervisor asks, but the launcher keeps the file as k3s does, so what
//! liken promises of it (kept on the data partition, the same across
//! upgrades) is judged on the file a real agent leaves.

use std::path::Path;

use super::config::Agent;
use crate::k3s_node::write_private;

/// Where k3s's agent keeps the node password (pkg/agent/config/config.go:
/// `/etc/rancher/node/password`).
pub const NODE_PASSWORD: &str = "/etc/rancher/node/password";

/// Reads the node password at `path`, or makes one as k3s does (16
/// bytes from the kernel's random source, in hex with a newline, 0600);
/// whether it was `created`.
pub fn ensure_node_password(path: &Path) -> Result<bool, String> {
    use std::io::Read;
    // As k3s: a file that is there is the password, whatever it holds.
    match std::fs::metadata(path) {
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let mut random = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    let text = format!("{}\n", liken_api::digest::to_hex(&random));
    write_private(path, text.as_bytes())?;
    Ok(true)
}

/// A join token's CA hash and secret
/// ([`crate::k3s_node::parse_token`]). The launcher refuses a bare
/// token: without the hash it could not check the CA it trusts.
pub fn decide_token(token: &str) -> Result<(&str, &str), String> {
    match crate::k3s_node::parse_token(token)? {
        (Some(hash), secret) => Ok((hash, secret)),
        (None, _) => Err(
            "the join token has no CA hash: it is not in k3s's secure form \
             (K10<CA hash>::<user>:<secret>)"
                .into(),
        ),
    }
}

/// The bootstrap token `<id>.<secret>` that stands for a join token's
/// secret (see the module docs), derived as the stand-in derives it
/// ([`crate::k3s_node::bootstrap_token`]).
pub fn bootstrap_token(secret: &str) -> String {
    let (id, secret) = crate::k3s_node::bootstrap_token(secret);
    format!("{id}.{secret}")
}

/// A kubeconfig for `server` trusting the CA file `ca`, with a bearer
/// token or a client certificate and key file.
pub fn kubeconfig(server: &str, ca: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: default\nclusters:\n- name: default\n  \
         cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: \
         default\n  user:\n{user}contexts:\n- name: default\n  context:\n    cluster: default\n    \
         user: default\n",
        ca.display()
    )
}

/// The kubeconfig user of a bearer token.
pub fn token_user(token: &str) -> String {
    format!("    token: {token}\n")
}

/// The kubeconfig user of a client certificate and key in one file.
pub fn cert_user(pem: &Path) -> String {
    format!(
        "    client-certificate: {0}\n    client-key: {0}\n",
        pem.display()
    )
}

/// Where the kubelet's bootstrap kubeconfig goes (not a k3s file: k3s
/// has no bootstrap token).
pub const BOOTSTRAP_KUBECONFIG: &str = "agent/liken-upstream-bootstrap.kubeconfig";

/// Checks the CA against the token, keeps it as `agent/server-ca.crt`
/// and writes the kubelet's bootstrap kubeconfig; returns the bootstrap
/// token's id (`system:bootstrap:<id>`).
pub fn prepare(agent: &Agent, ca_file: &Path) -> Result<String, String> {
    let token = std::fs::read_to_string(&agent.token_file)
        .map_err(|e| format!("reading {}: {e}", agent.token_file.display()))?;
    let (hash, secret) = decide_token(&token)?;
    let ca = std::fs::read(ca_file).map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
    let ours = liken_cli::identity::cahash::hash_ca(&ca, liken_cli::identity::cahash::now())?;
    if ours != hash {
        return Err(format!(
            "the server CA {} does not match the join token's hash ({ours} is not {hash}): the \
             token is for another cluster",
            ca_file.display()
        ));
    }
    let kept = agent.data("agent/server-ca.crt");
    write_private(&kept, &ca)?;
    let bootstrap = bootstrap_token(secret);
    write_private(
        &agent.data(BOOTSTRAP_KUBECONFIG),
        kubeconfig(&agent.server, &kept, &token_user(&bootstrap)).as_bytes(),
    )?;
    Ok(bootstrap
        .split_once('.')
        .map(|(id, _)| id.to_owned())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(
            decide_token("K10abc::node:s3cret\n").unwrap(),
            ("abc", "s3cret")
        );
        assert!(decide_token("s3cret").is_err());
        assert!(decide_token("K10abc:node:s").is_err());
        assert!(decide_token("K10abc::node:").is_err());
        // k3s reads an empty hash as none; the launcher needs one.
        assert!(decide_token("K10::node:s3cret").is_err());
    }

    #[test]
    fn the_bootstrap_token_fits_kubernetes_form() {
        let t = bootstrap_token("s3cret");
        let (id, secret) = t.split_once('.').unwrap();
        assert_eq!((id.len(), secret.len()), (6, 16));
        assert!(t.chars().all(|c| c == '.' || c.is_ascii_hexdigit()));
        assert_eq!(t, bootstrap_token("s3cret"));
    }

    #[test]
    fn the_node_password_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("liken-node-password-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("node/password");
        assert_eq!(ensure_node_password(&path), Ok(true));
        let made = std::fs::read_to_string(&path).unwrap();
        assert_eq!(made.len(), 33, "{made:?}");
        assert!(
            made.trim_end().bytes().all(|b| b.is_ascii_hexdigit()),
            "{made:?}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A later start keeps it.
        assert_eq!(ensure_node_password(&path), Ok(false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), made);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_kubeconfig_names_its_files() {
        let k = kubeconfig(
            "https://10.0.2.2:6443",
            Path::new("/var/lib/rancher/k3s/agent/server-ca.crt"),
            &cert_user(Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem")),
        );
        assert!(k.contains("server: https://10.0.2.2:6443\n"));
        assert!(k.contains("certificate-authority: /var/lib/rancher/k3s/agent/server-ca.crt\n"));
        assert!(k.contains("client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n"));
    }
}
