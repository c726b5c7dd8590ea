//! `liken kubeconfig`: an admin credential for kubectl, derived from the
//! identity.
//!
//! The credential is a fresh P-256 client certificate signed by the
//! identity's client CA, with organisation `system:masters` (the group
//! Kubernetes binds to cluster-admin) and common name `liken-admin`. The
//! kubeconfig embeds it with the server CA, so the file stands alone.
//!
//! Lifetimes: Kubernetes cannot revoke a client certificate (the
//! apiserver checks no CRL), so an admin certificate that leaks is
//! cluster-admin until it expires. `liken kubeconfig` writes one for a
//! person to keep, valid for [`KUBECONFIG_LIFETIME`] (30 days) unless
//! `-lifetime` chooses another (at most [`MAX_LIFETIME`]), and says when
//! it expires. The commands that only need the cluster for one run (the
//! passthrough, approve-reboot, plugins: see `crate::cluster`) mint one
//! valid for [`SESSION_LIFETIME`] (an hour), which is enough for a `kubectl
//! logs -f` session and nearly worthless to whoever copies it later.
//!
//! The endpoint is `spec.endpoint` from the deployment's cluster.yaml, the
//! address machines join through. A workstation often reaches the API
//! server by another way (a forwarded port, a VPN address), so `-server`
//! replaces it. The file goes to `<dir>/identity/kubeconfig`, 0600, beside
//! the identity it comes from, and is replaced atomically on each run, so
//! a running kubectl never reads half of it.

use std::path::{Path, PathBuf};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde::Serialize;
use time::{Duration, OffsetDateTime};

use super::{CLIENT_CA_CERT, CLIENT_CA_KEY, IdentityError, SERVER_CA_CERT, io_at, keys};
use crate::deployment::{self, DeploymentError, IDENTITY_DIR};
use crate::{Io, args::Parsed};

/// The admin certificate's common name (the user Kubernetes sees).
pub const ADMIN_USER: &str = "liken-admin";
/// The admin certificate's organisation (its group).
pub const ADMIN_GROUP: &str = "system:masters";
/// How long the admin certificate `liken kubeconfig` writes is valid
/// unless `-lifetime` says otherwise.
pub const KUBECONFIG_LIFETIME: Duration = Duration::days(30);
/// The longest `-lifetime` accepted: the one year k3s gives its own
/// admin certificate.
pub const MAX_LIFETIME: Duration = Duration::days(365);
/// How long the certificates minted for one command's run are valid.
pub const SESSION_LIFETIME: Duration = Duration::hours(1);
/// The name used for a deployment whose cluster.yaml is absent.
pub const FALLBACK_NAME: &str = "liken";

/// Why no kubeconfig was written.
#[derive(Debug)]
pub enum KubeconfigError {
    /// cluster.yaml could not be read or is not valid.
    Deployment(DeploymentError),
    /// No endpoint: no cluster.yaml and no -server.
    NoEndpoint {
        /// The deployment directory.
        dir: PathBuf,
    },
    /// -server is not an https URL.
    BadServer(String),
    /// The deployment has no identity (or an incomplete one).
    NoIdentity {
        /// The file that is missing.
        path: PathBuf,
        /// The identity directory.
        identity: PathBuf,
    },
    /// The identity could not be read or used.
    Identity(IdentityError),
    /// -lifetime is not a duration liken takes.
    BadLifetime(String),
}

impl std::fmt::Display for KubeconfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeconfigError::Deployment(e) => write!(f, "{e}"),
            KubeconfigError::NoEndpoint { dir } => write!(
                f,
                "{} has no cluster.yaml to take the API server's address from; \
                 pass -server https://<address>:6443",
                dir.display()
            ),
            KubeconfigError::BadServer(s) => write!(
                f,
                "-server {s:?} is not an https URL; give one such as https://127.0.0.1:6443"
            ),
            KubeconfigError::NoIdentity { path, identity } => write!(
                f,
                "{} is missing; the deployment needs its identity first: run \
                 `liken mint {}` (or `liken adopt <harvest-dir> {}`)",
                path.display(),
                identity.display(),
                identity.display()
            ),
            KubeconfigError::Identity(e) => write!(f, "{e}"),
            KubeconfigError::BadLifetime(s) => write!(
                f,
                "-lifetime {s:?} is not a lifetime between 1 minute and {} days: give a \
                 number with m, h or d (90m, 12h, 30d)",
                MAX_LIFETIME.whole_days()
            ),
        }
    }
}

impl std::error::Error for KubeconfigError {}

impl From<IdentityError> for KubeconfigError {
    fn from(e: IdentityError) -> Self {
        KubeconfigError::Identity(e)
    }
}

/// Runs `liken kubeconfig [-server URL] [-lifetime 30d] <deployment-dir>`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [dir] = parsed.paths()?;
    let lifetime = match parsed.value("lifetime") {
        Some(text) => parse_lifetime(text)?,
        None => KUBECONFIG_LIFETIME,
    };
    let now = OffsetDateTime::now_utc();
    let path = write_kubeconfig(&dir, parsed.value("server"), lifetime, now)?;
    writeln!(io.out, "wrote {} (admin credential, 0600)", path.display())?;
    writeln!(
        io.out,
        "its certificate expires {} (in {}); Kubernetes cannot revoke it before then, so \
         keep the file private, and run this again for a fresh one (-lifetime chooses \
         another span)",
        expiry_text(now + lifetime),
        lifetime_text(lifetime)
    )?;
    writeln!(io.out, "use it with: export KUBECONFIG={}", path.display())?;
    Ok(())
}

/// Reads `-lifetime`: a whole number of minutes, hours or days (`90m`,
/// `12h`, `30d`), from one minute to [`MAX_LIFETIME`].
pub fn parse_lifetime(text: &str) -> Result<Duration, KubeconfigError> {
    let bad = || KubeconfigError::BadLifetime(text.to_owned());
    let unit = text.chars().last().ok_or_else(bad)?;
    let number = &text[..text.len() - unit.len_utf8()];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = number.parse().map_err(|_| bad())?;
    let d = match unit {
        'm' => Duration::minutes(n.min(MAX_LIFETIME.whole_minutes() + 1)),
        'h' => Duration::hours(n.min(MAX_LIFETIME.whole_hours() + 1)),
        'd' => Duration::days(n.min(MAX_LIFETIME.whole_days() + 1)),
        _ => return Err(bad()),
    };
    if d < Duration::minutes(1) || d > MAX_LIFETIME {
        return Err(bad());
    }
    Ok(d)
}

/// `30 days`, `12 hours`, `90 minutes`: the largest whole unit.
pub fn lifetime_text(d: Duration) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if d.whole_days() > 0 && d == Duration::days(d.whole_days()) {
        plural(d.whole_days(), "day")
    } else if d.whole_hours() > 0 && d == Duration::hours(d.whole_hours()) {
        plural(d.whole_hours(), "hour")
    } else {
        plural(d.whole_minutes(), "minute")
    }
}

/// `2026-12-04 17:45 UTC`.
fn expiry_text(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// The cluster's name and the endpoint the kubeconfig points at.
pub fn decide_endpoint(
    dir: &Path,
    cluster: Option<&liken_api::Cluster>,
    server: Option<&str>,
) -> Result<(String, String), KubeconfigError> {
    let name = cluster.map_or(FALLBACK_NAME.to_owned(), |c| c.metadata.name.clone());
    match (server, cluster) {
        (Some(s), _) => match deployment::endpoint_problem(s) {
            Some(_) => Err(KubeconfigError::BadServer(s.to_owned())),
            None => Ok((name, s.to_owned())),
        },
        (None, Some(c)) => Ok((name, c.spec.endpoint.clone())),
        (None, None) => Err(KubeconfigError::NoEndpoint {
            dir: dir.to_owned(),
        }),
    }
}

/// The kubeconfig `liken kubeconfig` writes, below the deployment.
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// Writes `<dir>/identity/kubeconfig` with a certificate valid for
/// `lifetime` from `now`; returns its path.
pub fn write_kubeconfig(
    dir: &Path,
    server: Option<&str>,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<PathBuf, KubeconfigError> {
    let path = dir.join(IDENTITY_DIR).join(KUBECONFIG_FILE);
    write_kubeconfig_to(&path, dir, server, lifetime, now)?;
    Ok(path)
}

/// Writes a kubeconfig for the deployment at `dir` to `path`, 0600,
/// atomically.
pub fn write_kubeconfig_to(
    path: &Path,
    dir: &Path,
    server: Option<&str>,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<(), KubeconfigError> {
    let text = kubeconfig_text(dir, server, lifetime, now)?;
    crate::files::replace(path, text.as_bytes(), crate::files::PRIVATE).map_err(io_at(path))?;
    Ok(())
}

/// A kubeconfig with a fresh admin credential valid for `lifetime`,
/// without writing it (shell completion and the cluster commands reach
/// the cluster with it and leave no file behind).
pub fn kubeconfig_text(
    dir: &Path,
    server: Option<&str>,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<String, KubeconfigError> {
    let cluster = deployment::read_cluster(dir).map_err(KubeconfigError::Deployment)?;
    let (name, endpoint) = decide_endpoint(dir, cluster.as_ref().map(|m| &m.doc), server)?;
    let identity = dir.join(IDENTITY_DIR);
    let read = |rel: &str| {
        let p = identity.join(rel);
        std::fs::read(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                KubeconfigError::NoIdentity {
                    path: p.clone(),
                    identity: identity.clone(),
                }
            } else {
                KubeconfigError::Identity(io_at(&p)(e))
            }
        })
    };
    let server_ca = read(SERVER_CA_CERT)?;
    let client_ca = read(CLIENT_CA_CERT)?;
    let client_key = read(CLIENT_CA_KEY)?;
    let (cert, key) = client_credential(
        &client_ca,
        &client_key,
        ADMIN_USER,
        &[ADMIN_GROUP],
        lifetime,
        now,
    )
    .map_err(|e| match e {
        IdentityError::BadFiles(mut p) => {
            for (path, _) in &mut p {
                *path = identity.join(&*path);
            }
            IdentityError::BadFiles(p)
        }
        other => other,
    })?;
    Ok(render(
        &name,
        &endpoint,
        &server_ca,
        cert.as_bytes(),
        key.as_bytes(),
    ))
}

/// A new admin client certificate under the client CA, valid for
/// [`KUBECONFIG_LIFETIME`]: (cert PEM, key PEM).
pub fn admin_credential(
    ca_cert_pem: &[u8],
    ca_key_pem: &[u8],
    now: OffsetDateTime,
) -> Result<(String, String), IdentityError> {
    client_credential(
        ca_cert_pem,
        ca_key_pem,
        ADMIN_USER,
        &[ADMIN_GROUP],
        KUBECONFIG_LIFETIME,
        now,
    )
}

/// A new client certificate under the client CA for `user` (the common
/// name) in `groups` (its organisations), valid for `lifetime` from
/// `now` (backdated like the CAs): (cert PEM, key PEM). The apiserver
/// takes the common name as the user and each organisation as a group,
/// so this is how any client certificate of the cluster is made, as k3s
/// makes its own from the same CA (pkg/daemons/control/deps/deps.go,
/// genClientCerts).
pub fn client_credential(
    ca_cert_pem: &[u8],
    ca_key_pem: &[u8],
    user: &str,
    groups: &[&str],
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<(String, String), IdentityError> {
    let bad =
        |rel: &str, p: keys::PemProblem| IdentityError::BadFiles(vec![(PathBuf::from(rel), p.0)]);
    let ca_key = keys::signing_key(ca_key_pem).map_err(|p| bad(CLIENT_CA_KEY, p))?;
    let ca_der = keys::first_certificate(ca_cert_pem).map_err(|p| bad(CLIENT_CA_CERT, p))?;
    if !keys::key_matches_certificate(&ca_key, &ca_der).map_err(|p| bad(CLIENT_CA_CERT, p))? {
        return Err(IdentityError::BadFiles(vec![(
            PathBuf::from(CLIENT_CA_KEY),
            "is not the key of client-ca.crt".into(),
        )]));
    }
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), ca_key).map_err(|source| {
        IdentityError::Certificate {
            what: "client CA".into(),
            source,
        }
    })?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
        IdentityError::Certificate {
            what: user.into(),
            source,
        }
    })?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for g in groups {
        dn.push(DnType::OrganizationName, *g);
    }
    dn.push(DnType::CommonName, user);
    params.distinguished_name = dn;
    // CA:FALSE written out, so no verifier can mistake it for a CA.
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - super::mint::BACKDATE;
    params.not_after = now + lifetime;
    params.serial_number = Some(super::mint::serial()?);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| IdentityError::Certificate {
            what: user.into(),
            source,
        })?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig<'a> {
    api_version: &'a str,
    kind: &'a str,
    clusters: [Named<'a, ClusterEntry>; 1],
    users: [Named<'a, UserEntry>; 1],
    contexts: [Named<'a, ContextEntry<'a>>; 1],
    current_context: &'a str,
}

#[derive(Serialize)]
struct Named<'a, T> {
    name: &'a str,
    #[serde(flatten)]
    body: T,
}

#[derive(Serialize)]
struct ClusterEntry {
    cluster: ClusterBody,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterBody {
    server: String,
    certificate_authority_data: String,
}

#[derive(Serialize)]
struct UserEntry {
    user: UserBody,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct UserBody {
    client_certificate_data: String,
    client_key_data: String,
}

#[derive(Serialize)]
struct ContextEntry<'a> {
    context: ContextBody<'a>,
}

#[derive(Serialize)]
struct ContextBody<'a> {
    cluster: &'a str,
    user: &'a str,
}

/// The kubeconfig text. Entries are named after the cluster, so the
/// kubeconfigs of several clusters merge without clashing.
pub fn render(name: &str, endpoint: &str, server_ca: &[u8], cert: &[u8], key: &[u8]) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let user = format!("{name}-admin");
    let doc = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: [Named {
            name,
            body: ClusterEntry {
                cluster: ClusterBody {
                    server: endpoint.to_owned(),
                    certificate_authority_data: b64(server_ca),
                },
            },
        }],
        users: [Named {
            name: &user,
            body: UserEntry {
                user: UserBody {
                    client_certificate_data: b64(cert),
                    client_key_data: b64(key),
                },
            },
        }],
        contexts: [Named {
            name,
            body: ContextEntry {
                context: ContextBody {
                    cluster: name,
                    user: &user,
                },
            },
        }],
        current_context: name,
    };
    // Plain structs of strings always serialize.
    serde_yaml::to_string(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;
    use std::os::unix::fs::PermissionsExt;

    fn deployment(tmp: &Path, with_cluster: bool) -> PathBuf {
        let d = tmp.join("dep");
        std::fs::create_dir_all(&d).unwrap();
        super::super::mint::mint(&d.join(IDENTITY_DIR)).unwrap();
        if with_cluster {
            std::fs::write(
                d.join("cluster.yaml"),
                "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\n\
                 spec:\n  endpoint: https://10.0.0.10:6443\n  leaders: [node-1]\n",
            )
            .unwrap();
        }
        d
    }

    #[test]
    fn the_endpoint_comes_from_cluster_yaml_unless_server_is_given() {
        let tmp = TestDir::new("kubeconfig");
        let d = deployment(tmp.path(), true);
        let path =
            write_kubeconfig(&d, None, KUBECONFIG_LIFETIME, OffsetDateTime::now_utc()).unwrap();
        assert_eq!(path, d.join("identity/kubeconfig"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("server: https://10.0.0.10:6443"), "{text}");
        assert!(text.contains("current-context: home"), "{text}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        write_kubeconfig(
            &d,
            Some("https://127.0.0.1:16443"),
            KUBECONFIG_LIFETIME,
            OffsetDateTime::now_utc(),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("server: https://127.0.0.1:16443"), "{text}");
    }

    #[test]
    fn without_cluster_yaml_server_is_required() {
        let tmp = TestDir::new("kubeconfig-nocluster");
        let d = deployment(tmp.path(), false);
        let msg = write_kubeconfig(&d, None, KUBECONFIG_LIFETIME, OffsetDateTime::now_utc())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("pass -server"), "{msg}");
        write_kubeconfig(
            &d,
            Some("https://127.0.0.1:6443"),
            KUBECONFIG_LIFETIME,
            OffsetDateTime::now_utc(),
        )
        .unwrap();
        let msg = write_kubeconfig(
            &d,
            Some("http://x"),
            KUBECONFIG_LIFETIME,
            OffsetDateTime::now_utc(),
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("not an https URL"), "{msg}");
    }

    #[test]
    fn the_admin_certificate_is_in_system_masters_under_the_client_ca() {
        let tmp = TestDir::new("kubeconfig-cert");
        let d = deployment(tmp.path(), true);
        let ca = std::fs::read(d.join("identity").join(CLIENT_CA_CERT)).unwrap();
        let ca_key = std::fs::read(d.join("identity").join(CLIENT_CA_KEY)).unwrap();
        let (cert, _) = admin_credential(&ca, &ca_key, OffsetDateTime::now_utc()).unwrap();
        let der = keys::first_certificate(cert.as_bytes()).unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
        let o = c.subject().iter_organization().next().unwrap();
        assert_eq!(o.as_str().unwrap(), "system:masters");
        let ca_der = keys::first_certificate(&ca).unwrap();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        assert_eq!(c.issuer(), ca_cert.subject());
        c.verify_signature(Some(ca_cert.public_key())).unwrap();
    }

    #[test]
    fn a_missing_identity_is_named() {
        let tmp = TestDir::new("kubeconfig-noid");
        let d = tmp.path();
        std::fs::write(
            d.join("cluster.yaml"),
            "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\n\
             spec:\n  endpoint: https://10.0.0.10:6443\n  leaders: [node-1]\n",
        )
        .unwrap();
        let msg = write_kubeconfig(d, None, KUBECONFIG_LIFETIME, OffsetDateTime::now_utc())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("server/tls/server-ca.crt is missing"), "{msg}");
        assert!(msg.contains("liken mint"), "{msg}");
    }

    #[test]
    fn lifetimes_are_minutes_hours_or_days_up_to_a_year() {
        assert_eq!(parse_lifetime("90m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_lifetime("12h").unwrap(), Duration::hours(12));
        assert_eq!(parse_lifetime("30d").unwrap(), Duration::days(30));
        assert_eq!(parse_lifetime("365d").unwrap(), MAX_LIFETIME);
        for bad in [
            "",
            "d",
            "0m",
            "366d",
            "9999999999999999999d",
            "1w",
            "-1d",
            "1.5h",
            "30",
        ] {
            let e = parse_lifetime(bad).unwrap_err().to_string();
            assert!(e.contains("90m, 12h, 30d"), "{bad}: {e}");
        }
        assert_eq!(lifetime_text(KUBECONFIG_LIFETIME), "30 days");
        assert_eq!(lifetime_text(SESSION_LIFETIME), "1 hour");
        assert_eq!(lifetime_text(Duration::minutes(90)), "90 minutes");
    }
}
