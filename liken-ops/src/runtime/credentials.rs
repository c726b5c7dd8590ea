//! Where an operator's credentials come from.
//!
//! In a pod, the operators use their ServiceAccount: the token the
//! kubelet projects and rotates (liken-kube re-reads it), the CA from the
//! same mount, and the apiserver from `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT`. Outside a cluster (a person's workstation,
//! a test that runs the binary under a ServiceAccount token) they take a
//! kubeconfig the way kubectl does. The order, first match wins:
//!
//! 1. `--kubeconfig <file>`;
//! 2. `KUBECONFIG` (its first path; liken-kube reads one file, not a
//!    merged list);
//! 3. the in-cluster service account, when `KUBERNETES_SERVICE_HOST` is
//!    set;
//! 4. `~/.kube/config`.
//!
//! client-go's `BuildConfigFromFlags` puts an explicit kubeconfig before
//! the in-cluster account the same way, so a person who points a pod's
//! operator at another cluster on purpose gets what they asked for.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use liken_kube::{Config, ConfigError};

/// The source [`decide_source`] chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A kubeconfig file, and why it was chosen.
    Kubeconfig(PathBuf, &'static str),
    /// The pod's ServiceAccount.
    InCluster,
}

/// Chooses the source from the flag, `KUBECONFIG`,
/// `KUBERNETES_SERVICE_HOST` and `HOME`.
pub fn decide_source(
    flag: Option<&Path>,
    kubeconfig_env: Option<OsString>,
    service_host: Option<OsString>,
    home: Option<OsString>,
) -> Result<Source, ConfigError> {
    if let Some(path) = flag {
        return Ok(Source::Kubeconfig(path.to_owned(), "--kubeconfig"));
    }
    if let Some(v) = kubeconfig_env.filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy().into_owned();
        let first = v.split(':').find(|p| !p.is_empty()).unwrap_or_default();
        return Ok(Source::Kubeconfig(PathBuf::from(first), "KUBECONFIG"));
    }
    if service_host.is_some_and(|h| !h.is_empty()) {
        return Ok(Source::InCluster);
    }
    match home.filter(|h| !h.is_empty()) {
        Some(h) => Ok(Source::Kubeconfig(
            PathBuf::from(h).join(".kube/config"),
            "~/.kube/config",
        )),
        None => Err(ConfigError::Invalid {
            origin: "credentials".into(),
            message: "not in a pod, and neither --kubeconfig, KUBECONFIG nor HOME is set; \
                      pass --kubeconfig <file>"
                .into(),
        }),
    }
}

/// Loads the configuration from the source [`decide_source`] picks in
/// this process's environment.
pub fn load(flag: Option<&Path>) -> Result<(Config, Source), ConfigError> {
    let source = decide_source(
        flag,
        std::env::var_os("KUBECONFIG"),
        std::env::var_os("KUBERNETES_SERVICE_HOST"),
        std::env::var_os("HOME"),
    )?;
    let config = match &source {
        Source::Kubeconfig(path, _) => Config::from_kubeconfig(path, None)?,
        Source::InCluster => Config::in_cluster()?,
    };
    Ok((config, source))
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Kubeconfig(p, why) => write!(f, "kubeconfig {} (from {why})", p.display()),
            Source::InCluster => f.write_str("the in-cluster service account"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn the_first_source_that_is_there_wins() {
        let flag = Path::new("/tmp/flag.kubeconfig");
        let table: [(Option<&Path>, _, _, _, Source); 6] = [
            (
                Some(flag),
                os("/env"),
                os("10.0.0.1"),
                os("/root"),
                Source::Kubeconfig(flag.into(), "--kubeconfig"),
            ),
            (
                None,
                os("/a:/b"),
                os("10.0.0.1"),
                os("/root"),
                Source::Kubeconfig("/a".into(), "KUBECONFIG"),
            ),
            (
                None,
                os(":/b"),
                None,
                None,
                Source::Kubeconfig("/b".into(), "KUBECONFIG"),
            ),
            (None, os(""), os("10.0.0.1"), os("/root"), Source::InCluster),
            (None, None, os("10.0.0.1"), None, Source::InCluster),
            (
                None,
                None,
                os(""),
                os("/root"),
                Source::Kubeconfig("/root/.kube/config".into(), "~/.kube/config"),
            ),
        ];
        for (flag, env, host, home, want) in table {
            assert_eq!(
                decide_source(flag, env.clone(), host.clone(), home.clone()).unwrap(),
                want,
                "{flag:?} {env:?} {host:?} {home:?}"
            );
        }
    }

    #[test]
    fn nowhere_to_look_says_what_to_pass() {
        let e = decide_source(None, None, None, None).unwrap_err();
        assert!(e.to_string().contains("--kubeconfig"), "{e}");
    }
}
