//! Deployments made the way a person makes one: the real `liken` CLI's
//! `mint`, `new`, `trust` and `layer`, with each scenario's own Machine
//! documents and target release written in between.
//!
//! Every scenario that installs or boots a fleet needs one; made here,
//! they are all made the same way, and a change to one of those verbs
//! meets every scenario at once instead of the one that spelled it out.

use std::path::{Path, PathBuf};

use crate::command::run;

/// One machine of a deployment.
pub struct Machine {
    /// Its name (`liken new -machine <name>=<role>`).
    pub name: String,
    /// A leader (the API server, the cluster operator), else a follower.
    pub leader: bool,
    /// The Machine document written over the one `liken new` wrote;
    /// `None` keeps `liken new`'s.
    pub document: Option<String>,
}

/// The release a Cluster names as its target, with its channel.
pub struct Target<'a> {
    /// The release's version.
    pub version: &'a str,
    /// Its release.yaml's digest (`sha256:<hex>`), the catalog's pin.
    pub digest: &'a str,
    /// The channel's URL, as the machines reach it.
    pub source: &'a str,
}

/// What [`make`] makes.
pub struct Spec<'a> {
    /// The `liken` program.
    pub liken: &'a Path,
    /// The deployment directory (`liken new`'s argument); the identity
    /// goes to its `identity/`.
    pub dir: &'a Path,
    /// The Cluster's name.
    pub cluster: &'a str,
    /// The endpoint the machines reach the API at.
    pub endpoint: &'a str,
    /// The machines.
    pub machines: &'a [Machine],
    /// The release keys (`release.pub` files) of the trust root `liken
    /// trust` writes; none makes an unsigned deployment, whose layer
    /// `liken layer -unsigned` packs.
    pub trusted: &'a [&'a Path],
    /// The Cluster's target release and catalog; `None` names none,
    /// which a machine whose init is a development build (no version of
    /// its own) satisfies.
    pub target: Option<Target<'a>>,
}

/// A deployment on the disk.
pub struct Deployment {
    /// The `liken` program that made it.
    pub liken: PathBuf,
    /// Its directory.
    pub dir: PathBuf,
    /// Its identity (`<dir>/identity`).
    pub identity: PathBuf,
    /// Whether it has a trust root (else its layers are unsigned).
    pub signed: bool,
}

/// `liken mint` (unless `<dir>/identity` was minted already: a control
/// plane on the host starts on the identity before the endpoint it
/// listens at, which `new` needs, is known), `liken new`, each machine's
/// document, `liken trust`, then the target appended to cluster.yaml.
pub fn make(spec: &Spec<'_>) -> Deployment {
    let dir = spec.dir.to_string_lossy().into_owned();
    let identity = spec.dir.join("identity");
    if !identity.exists() {
        mint(spec.liken, spec.dir);
    }
    let mut args: Vec<String> = ["new", "-name", spec.cluster, "-endpoint", spec.endpoint]
        .map(str::to_owned)
        .to_vec();
    for m in spec.machines {
        args.push("-machine".into());
        args.push(format!(
            "{}={}",
            m.name,
            if m.leader { "leader" } else { "follower" }
        ));
    }
    args.push(dir.clone());
    run(
        spec.liken,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for m in spec.machines {
        if let Some(doc) = &m.document {
            let path = spec.dir.join("machines").join(format!("{}.yaml", m.name));
            std::fs::write(&path, doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    if !spec.trusted.is_empty() {
        let mut args = vec!["trust".to_owned(), format!("{dir}/trust.yaml")];
        args.extend(
            spec.trusted
                .iter()
                .map(|p| p.to_string_lossy().into_owned()),
        );
        run(
            spec.liken,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    if let Some(t) = &spec.target {
        let path = spec.dir.join("cluster.yaml");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::fs::write(&path, with_target(&text, t))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    Deployment {
        liken: spec.liken.to_owned(),
        dir: spec.dir.to_owned(),
        identity,
        signed: !spec.trusted.is_empty(),
    }
}

/// `liken mint <dir>/identity`: the cluster's CAs and tokens; returns
/// the identity's directory.
pub fn mint(liken: &Path, dir: &Path) -> PathBuf {
    let identity = dir.join("identity");
    run(liken, &["mint", &identity.to_string_lossy()]);
    identity
}

/// cluster.yaml as `liken new` wrote it (its `spec:` last), with the
/// target version and a catalog of that one release from its channel.
pub fn with_target(cluster_yaml: &str, t: &Target<'_>) -> String {
    format!(
        "{}\n  version: {v}\n  releases:\n    source: {s}\n    catalog:\n      \
         - version: {v}\n        digest: {d}\n",
        cluster_yaml.trim_end(),
        v = t.version,
        s = t.source,
        d = t.digest,
    )
}

impl Deployment {
    /// `liken layer` into `out`: every machine's documents and the
    /// identity, `-unsigned` when the deployment has no trust root.
    pub fn layer(&self, out: &Path) -> PathBuf {
        let (d, i, o) = (
            self.dir.to_string_lossy(),
            self.identity.to_string_lossy(),
            out.to_string_lossy(),
        );
        let mut args = vec!["layer"];
        if !self.signed {
            args.push("-unsigned");
        }
        args.extend([&*d, &*i, &*o]);
        run(&self.liken, &args);
        out.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_spec_liken_new_wrote() {
        let yaml = "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\n\
                    spec:\n  endpoint: https://192.0.2.1:6443\n\n";
        let t = Target {
            version: "2026.02.01-001",
            digest: "sha256:ab",
            source: "http://10.0.2.2:8080",
        };
        assert_eq!(
            with_target(yaml, &t),
            "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\nspec:\n  \
             endpoint: https://192.0.2.1:6443\n  version: 2026.02.01-001\n  releases:\n    \
             source: http://10.0.2.2:8080\n    catalog:\n      - version: 2026.02.01-001\n        \
             digest: sha256:ab\n"
        );
    }
}
