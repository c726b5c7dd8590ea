//! Where the API server is and how to prove who we are.
//!
//! Two sources: a kubeconfig file (what the CLI and the tests use) and the
//! in-cluster service account (what the operators use). Both produce one
//! [`Config`]: the server URL, the CA to trust, and the credentials.
//!
//! Only what liken's clusters need is supported: CA data or file, client
//! certificate and key (data or file), bearer token or token file. A
//! kubeconfig that relies on an `exec` plugin, an auth provider, basic
//! auth, `insecure-skip-tls-verify`, `tls-server-name` or `proxy-url` is
//! refused with a message saying so, rather than half-working (a client
//! that ignored `tls-server-name` would check the certificate against the
//! wrong name; one that ignored `proxy-url` would go around the proxy). One file is read (the first path of
//! `KUBECONFIG`); merging several is not done.
//!
//! Secrets never appear in `Debug` output.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

/// The in-cluster service account directory.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How the client proves its identity.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials (anonymous).
    None,
    /// A bearer token.
    Token(String),
    /// A bearer token re-read from this file, which the kubelet rotates.
    TokenFile(PathBuf),
    /// A client certificate chain and its private key, PEM.
    ClientCert {
        /// The certificate chain, PEM.
        cert_pem: Vec<u8>,
        /// The private key, PEM.
        key_pem: Vec<u8>,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::TokenFile(p) => write!(f, "TokenFile({})", p.display()),
            Auth::ClientCert { .. } => f.write_str("ClientCert(<redacted>)"),
        }
    }
}

/// Everything the client needs to reach the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `https://host:port`, without a trailing slash.
    pub server: String,
    /// The CA bundle to trust, PEM; the built-in web roots when absent.
    pub ca_pem: Option<Vec<u8>>,
    /// The credentials.
    pub auth: Auth,
    /// The namespace the context or the service account names.
    pub namespace: String,
    /// The timeout for each request that does not set its own.
    pub timeout: Duration,
    /// Where this config came from, for messages.
    pub origin: String,
}

/// Whether credentials may go to `server`: over https always; over plain
/// http only anonymously, or to a loopback address (a test's fake server,
/// a local proxy), because a bearer token or a client key sent over http
/// is readable by anyone on the path. Errors say what to do.
pub fn decide_plain_http(server: &str, auth: &Auth) -> Result<(), String> {
    let Some(rest) = server.strip_prefix("http://") else {
        return Ok(());
    };
    if matches!(auth, Auth::None) {
        return Ok(());
    }
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    let what = match auth {
        Auth::ClientCert { .. } => "a client key",
        _ => "a bearer token",
    };
    Err(format!(
        "the server {server} is plain http and not a loopback address, so {what} would cross \
         the network in the clear; use the server's https:// URL"
    ))
}

/// Why a config could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The kubeconfig is not valid YAML of the right shape.
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// Something needed is missing or unusable.
    Invalid {
        /// The file, or `in-cluster`.
        origin: String,
        /// What is wrong and what to do.
        message: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, message } => {
                write!(f, "{}: cannot read: {message}", path.display())
            }
            ConfigError::Parse { path, message } => {
                write!(f, "{}: not a kubeconfig: {message}", path.display())
            }
            ConfigError::Invalid { origin, message } => write!(f, "{origin}: {message}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The default request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(default, rename = "current-context")]
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context")]
    value: T,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: UserEntry,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    #[serde(default)]
    server: String,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    #[serde(default)]
    tls_server_name: Option<String>,
    #[serde(default)]
    proxy_url: Option<String>,
}

#[derive(Deserialize)]
struct ContextEntry {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    #[serde(default)]
    client_certificate: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(default)]
    exec: Option<serde_yaml::Value>,
    #[serde(default, rename = "auth-provider")]
    auth_provider: Option<serde_yaml::Value>,
    #[serde(default)]
    username: Option<String>,
}

impl Config {
    /// Reads a kubeconfig file, using `context` or else its current-context.
    pub fn from_kubeconfig(path: &Path, context: Option<&str>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::from_kubeconfig_text(&text, path, base, context)
    }

    /// As [`Config::from_kubeconfig`], from text; relative file names are
    /// resolved against `base`.
    pub fn from_kubeconfig_text(
        text: &str,
        path: &Path,
        base: &Path,
        context: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.clone(),
            message,
        };
        let kc: Kubeconfig = serde_yaml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let wanted = context.unwrap_or(&kc.current_context);
        if wanted.is_empty() {
            return Err(invalid(
                "no current-context is set; set one with `kubectl config use-context`".into(),
            ));
        }
        let ctx = kc
            .contexts
            .iter()
            .find(|c| c.name == wanted)
            .ok_or_else(|| invalid(format!("no context named {wanted:?}")))?;
        let cluster = kc
            .clusters
            .iter()
            .find(|c| c.name == ctx.value.cluster)
            .ok_or_else(|| {
                invalid(format!(
                    "context {wanted:?} names cluster {:?}, which is not in the file",
                    ctx.value.cluster
                ))
            })?;
        let cluster = &cluster.value;
        if cluster.insecure_skip_tls_verify {
            return Err(invalid(
                "insecure-skip-tls-verify is not supported; give the cluster's certificate-authority-data"
                    .into(),
            ));
        }
        if cluster.tls_server_name.is_some() {
            return Err(invalid(
                "tls-server-name is not supported; give the server an address its certificate names"
                    .into(),
            ));
        }
        if cluster.proxy_url.is_some() {
            return Err(invalid(
                "proxy-url is not supported; reach the server directly (liken's operators run in the cluster)"
                    .into(),
            ));
        }
        let server = cluster.server.trim_end_matches('/').to_owned();
        if !server.starts_with("https://") && !server.starts_with("http://") {
            return Err(invalid(format!(
                "cluster server {server:?} is not an http(s) URL"
            )));
        }
        let ca_pem =
            match (
                &cluster.certificate_authority_data,
                &cluster.certificate_authority,
            ) {
                (Some(data), _) => Some(decode_b64(data).map_err(|e| {
                    invalid(format!("certificate-authority-data is not base64: {e}"))
                })?),
                (None, Some(file)) => Some(read_file(&resolve(base, file))?),
                (None, None) => None,
            };

        let user = if ctx.value.user.is_empty() {
            UserEntry::default()
        } else {
            let found = kc.users.into_iter().find(|u| u.name == ctx.value.user);
            match found {
                Some(u) => u.user,
                None => {
                    return Err(invalid(format!(
                        "context {wanted:?} names user {:?}, which is not in the file",
                        ctx.value.user
                    )));
                }
            }
        };
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(invalid(
                "the user authenticates through an exec plugin or auth provider, which liken does not run; \
                 use a kubeconfig with a client certificate or a token (`liken kubeconfig` writes one)"
                    .into(),
            ));
        }
        if user.username.is_some() {
            return Err(invalid(
                "basic authentication (username) is not supported; use a client certificate or a token"
                    .into(),
            ));
        }
        let cert = match (&user.client_certificate_data, &user.client_certificate) {
            (Some(d), _) => Some(
                decode_b64(d)
                    .map_err(|e| invalid(format!("client-certificate-data is not base64: {e}")))?,
            ),
            (None, Some(f)) => Some(read_file(&resolve(base, f))?),
            (None, None) => None,
        };
        let key = match (&user.client_key_data, &user.client_key) {
            (Some(d), _) => Some(
                decode_b64(d)
                    .map_err(|e| invalid(format!("client-key-data is not base64: {e}")))?,
            ),
            (None, Some(f)) => Some(read_file(&resolve(base, f))?),
            (None, None) => None,
        };
        let auth = match (cert, key, &user.token, &user.token_file) {
            (Some(cert_pem), Some(key_pem), _, _) => Auth::ClientCert { cert_pem, key_pem },
            (Some(_), None, _, _) | (None, Some(_), _, _) => {
                return Err(invalid(
                    "the user has a client certificate without its key (or a key without its certificate)"
                        .into(),
                ));
            }
            (None, None, Some(token), _) => Auth::Token(token.clone()),
            (None, None, None, Some(file)) => Auth::TokenFile(resolve(base, file)),
            (None, None, None, None) => Auth::None,
        };
        Ok(Config {
            server,
            ca_pem,
            auth,
            namespace: ctx
                .value
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            timeout: DEFAULT_TIMEOUT,
            origin,
        })
    }

    /// The service account a pod runs as: the token and CA under
    /// [`SERVICE_ACCOUNT_DIR`], the server from `KUBERNETES_SERVICE_HOST`
    /// and `KUBERNETES_SERVICE_PORT`.
    pub fn in_cluster() -> Result<Config, ConfigError> {
        Config::in_cluster_from(Path::new(SERVICE_ACCOUNT_DIR), |k| std::env::var(k).ok())
    }

    /// As [`Config::in_cluster`], with the directory and the environment
    /// given (tests use a temporary directory).
    pub fn in_cluster_from(
        dir: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: "in-cluster".into(),
            message,
        };
        let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty());
        let port = env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty());
        let (Some(host), Some(port)) = (host, port) else {
            return Err(invalid(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; this is not a pod, \
                 so pass a kubeconfig instead"
                    .into(),
            ));
        };
        if port.parse::<u16>().is_err() {
            return Err(invalid(format!(
                "KUBERNETES_SERVICE_PORT {port:?} is not a port number"
            )));
        }
        // An IPv6 service address needs brackets in a URL.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let token = dir.join("token");
        if !token.is_file() {
            return Err(invalid(format!(
                "{} is missing; the pod has no service-account token mounted",
                token.display()
            )));
        }
        let ca_pem = read_file(&dir.join("ca.crt"))?;
        let namespace = std::fs::read_to_string(dir.join("namespace"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "default".to_owned());
        Ok(Config {
            server: format!("https://{host}:{port}"),
            ca_pem: Some(ca_pem),
            auth: Auth::TokenFile(token),
            namespace,
            timeout: DEFAULT_TIMEOUT,
            origin: "in-cluster".into(),
        })
    }

    /// In a pod, the service account; elsewhere the kubeconfig named by
    /// `KUBECONFIG` (its first path) or `~/.kube/config`.
    pub fn infer() -> Result<Config, ConfigError> {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            return Config::in_cluster();
        }
        let path = match std::env::var_os("KUBECONFIG") {
            Some(v) if !v.is_empty() => {
                let v = v.to_string_lossy().into_owned();
                PathBuf::from(v.split(':').next().unwrap_or_default())
            }
            _ => {
                let home = std::env::var_os("HOME").ok_or_else(|| ConfigError::Invalid {
                    origin: "kubeconfig".into(),
                    message: "neither KUBECONFIG nor HOME is set; pass a kubeconfig".into(),
                })?;
                PathBuf::from(home).join(".kube/config")
            }
        };
        Config::from_kubeconfig(&path, None)
    }
}

fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

fn decode_b64(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(compact)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn parse(text: &str, context: Option<&str>) -> Result<Config, ConfigError> {
        Config::from_kubeconfig_text(text, Path::new("/k/config"), Path::new("/k"), context)
    }

    fn doc(user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: main\n\
             clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443/\n    certificate-authority-data: {}\n\
             contexts:\n- name: main\n  context:\n    cluster: c\n    user: u\n    namespace: liken-system\n\
             - name: other\n  context:\n    cluster: c\n    user: t\n\
             users:\n- name: u\n  user:\n{user}\n- name: t\n  user:\n    token: abc\n",
            b64("CA PEM")
        )
    }

    #[test]
    fn credentials_never_cross_plain_http_beyond_loopback() {
        let token = Auth::Token("t".into());
        let key = Auth::ClientCert {
            cert_pem: Vec::new(),
            key_pem: Vec::new(),
        };
        for ok in [
            "https://10.0.0.1:6443",
            "http://127.0.0.1:8080",
            "http://localhost:8080/",
            "http://[::1]:8080",
        ] {
            assert_eq!(decide_plain_http(ok, &token), Ok(()), "{ok}");
            assert_eq!(decide_plain_http(ok, &key), Ok(()), "{ok}");
        }
        assert_eq!(
            decide_plain_http("http://10.0.0.1:8080", &Auth::None),
            Ok(())
        );
        let e = decide_plain_http("http://10.0.0.1:8080", &token).unwrap_err();
        assert!(e.contains("a bearer token would cross the network"), "{e}");
        let e = decide_plain_http("http://[2001:db8::1]:80", &key).unwrap_err();
        assert!(e.contains("a client key"), "{e}");
        let e = decide_plain_http("http://127.0.0.1.evil.example:80", &token).unwrap_err();
        assert!(e.contains("use the server's https:// URL"), "{e}");
    }

    #[test]
    fn client_certificate_data() {
        let c = parse(
            &doc(&format!(
                "    client-certificate-data: {}\n    client-key-data: {}",
                b64("CERT"),
                b64("KEY")
            )),
            None,
        )
        .unwrap();
        assert_eq!(c.server, "https://127.0.0.1:6443");
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(
            c.auth,
            Auth::ClientCert {
                cert_pem: b"CERT".to_vec(),
                key_pem: b"KEY".to_vec()
            }
        );
        assert_eq!(c.namespace, "liken-system");
        assert!(!format!("{c:?}").contains("KEY"));
    }

    #[test]
    fn named_context_with_token() {
        let c = parse(&doc("    token: x"), Some("other")).unwrap();
        assert_eq!(c.auth, Auth::Token("abc".into()));
        assert_eq!(c.namespace, "default");
        assert_eq!(format!("{:?}", c.auth), "Token(<redacted>)");
    }

    #[test]
    fn files_resolve_against_the_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("liken-kube-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), "CA").unwrap();
        std::fs::write(dir.join("tls.crt"), "C").unwrap();
        std::fs::write(dir.join("tls.key"), "K").unwrap();
        let text = "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n    certificate-authority: ca.crt\n\
                    contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
                    users:\n- name: u\n  user:\n    client-certificate: tls.crt\n    client-key: tls.key\n";
        let path = dir.join("config");
        std::fs::write(&path, text).unwrap();
        let c = Config::from_kubeconfig(&path, None).unwrap();
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(
            c.auth,
            Auth::ClientCert {
                cert_pem: b"C".to_vec(),
                key_pem: b"K".to_vec()
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refusals_say_why() {
        let e = parse(&doc("    exec:\n      command: aws"), None).unwrap_err();
        assert!(e.to_string().contains("exec plugin"), "{e}");
        let e = parse(&doc("    client-certificate-data: eA=="), None).unwrap_err();
        assert!(e.to_string().contains("without its key"), "{e}");
        let e = parse(&doc("    token: t"), Some("nope")).unwrap_err();
        assert_eq!(e.to_string(), "/k/config: no context named \"nope\"");
        let e = parse(
            &doc("    token: t").replace(
                "certificate-authority-data",
                "insecure-skip-tls-verify: true\n    x",
            ),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("insecure-skip-tls-verify"), "{e}");
        for (field, words) in [
            (
                "tls-server-name: kubernetes",
                "tls-server-name is not supported",
            ),
            ("proxy-url: http://proxy:3128", "proxy-url is not supported"),
        ] {
            let e = parse(
                &doc("    token: t").replace(
                    "certificate-authority-data",
                    &format!("{field}\n    certificate-authority-data"),
                ),
                None,
            )
            .unwrap_err();
            assert!(e.to_string().contains(words), "{e}");
        }
        let e = parse("current-context: ''\n", None).unwrap_err();
        assert!(e.to_string().contains("no current-context"), "{e}");
        let e = parse(": : :", None).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }));
    }

    #[test]
    fn in_cluster() {
        let dir = std::env::temp_dir().join(format!("liken-kube-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "tok").unwrap();
        std::fs::write(dir.join("ca.crt"), "CA").unwrap();
        std::fs::write(dir.join("namespace"), "liken-system\n").unwrap();
        let env = |host: &'static str| {
            move |k: &str| match k {
                "KUBERNETES_SERVICE_HOST" => Some(host.to_owned()),
                "KUBERNETES_SERVICE_PORT" => Some("443".to_owned()),
                _ => None,
            }
        };
        let c = Config::in_cluster_from(&dir, env("10.43.0.1")).unwrap();
        assert_eq!(c.server, "https://10.43.0.1:443");
        assert_eq!(c.auth, Auth::TokenFile(dir.join("token")));
        assert_eq!(c.namespace, "liken-system");
        let c = Config::in_cluster_from(&dir, env("fd00::1")).unwrap();
        assert_eq!(c.server, "https://[fd00::1]:443");
        let e = Config::in_cluster_from(&dir, |_| None).unwrap_err();
        assert!(e.to_string().contains("not a pod"), "{e}");
        std::fs::remove_file(dir.join("token")).unwrap();
        let e = Config::in_cluster_from(&dir, env("10.0.0.1")).unwrap_err();
        assert!(e.to_string().contains("no service-account token"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
