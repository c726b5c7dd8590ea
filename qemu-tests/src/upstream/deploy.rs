//! The server's auto-deploy directory, `<data-dir>/server/manifests`,
//! applied as k3s's deploy controller applies it.
//!
//! k3s (k3s-io/k3s pkg/deploy/controller.go) walks the directory, takes
//! every `.yaml`, `.yml` and `.json` file that has no `<file>.skip`
//! beside it, applies each to the cluster at start and again whenever
//! its checksum changes, and tries a file that failed again later.
//! liken-init seeds the release's manifests there on leaders (the CRDs,
//! the operators' RBAC, DaemonSet and Deployment, the deployment's
//! ConfigMap), so this is how they reach the cluster.
//!
//! The launcher does the same with the bundled kubectl: `kubectl apply
//! --server-side --force-conflicts` of each file, as `system:admin`
//! (`server/cred/admin.kubeconfig`), with the field manager
//! [`FIELD_MANAGER`]. k3s applies through its own apply (wrangler's
//! objectset, with an Addon object per file and ownership labels that
//! let it prune objects a file no longer holds); the launcher makes no
//! Addon and prunes nothing. A file is applied whole; one whose objects
//! depend on another's (a custom resource before its CRD is served) fails
//! and is tried on the next pass, every [`PASS`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::console::say;

/// The field manager of the launcher's applies.
pub const FIELD_MANAGER: &str = "liken-upstream-k3s-deploy";
/// How often the directory is looked at again.
pub const PASS: Duration = Duration::from_secs(10);
/// How deep below the directory files are looked for (as init seeds).
const MAX_DEPTH: u32 = 4;

/// Whether k3s's deploy controller applies a file of this name.
pub fn is_manifest(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|s| name.to_ascii_lowercase().ends_with(s))
}

/// The files of one pass to apply: each manifest (path and digest) with
/// no `.skip` beside it whose digest is not the one last applied.
pub fn decide_pass(
    files: &[(PathBuf, String)],
    skips: &[PathBuf],
    applied: &BTreeMap<PathBuf, String>,
) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|(p, _)| {
            let mut skip = p.clone().into_os_string();
            skip.push(".skip");
            !skips.contains(&PathBuf::from(skip))
        })
        .filter(|(p, d)| applied.get(p) != Some(d))
        .map(|(p, _)| p.clone())
        .collect()
}

fn walk(dir: &Path, depth: u32, files: &mut Vec<(PathBuf, String)>, skips: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if depth < MAX_DEPTH {
                walk(&p, depth + 1, files, skips);
            }
        } else if name.ends_with(".skip") {
            skips.push(p);
        } else if is_manifest(&name)
            && let Ok(bytes) = std::fs::read(&p)
        {
            let digest = liken_api::hash::sha256(&bytes).to_string();
            files.push((p, digest));
        }
    }
}

/// Applies the directory every [`PASS`], for the launcher's life (a
/// thread of its own).
pub fn run(dir: PathBuf, kubectl: PathBuf, kubeconfig: PathBuf) {
    let mut applied: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut failing: BTreeMap<PathBuf, String> = BTreeMap::new();
    loop {
        let (mut files, mut skips) = (Vec::new(), Vec::new());
        walk(&dir, 0, &mut files, &mut skips);
        files.sort();
        for file in decide_pass(&files, &skips, &applied) {
            let out = Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args([
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    &format!("--field-manager={FIELD_MANAGER}"),
                    "-f",
                ])
                .arg(&file)
                .output();
            let digest = files
                .iter()
                .find(|(p, _)| *p == file)
                .map(|(_, d)| d.clone())
                .unwrap_or_default();
            match out {
                Ok(o) if o.status.success() => {
                    say(&format!(
                        "deploy: applied {} ({} objects), as k3s's deploy controller does",
                        file.display(),
                        String::from_utf8_lossy(&o.stdout).lines().count()
                    ));
                    failing.remove(&file);
                    applied.insert(file, digest);
                }
                Ok(o) => {
                    let why = String::from_utf8_lossy(&o.stderr).trim().to_owned();
                    // Said once per reason, not every pass.
                    if failing.get(&file) != Some(&why) {
                        say(&format!(
                            "deploy: {} not applied yet ({why}); trying again every {} s",
                            file.display(),
                            PASS.as_secs()
                        ));
                        failing.insert(file, why);
                    }
                }
                Err(e) => say(&format!("deploy: cannot run kubectl: {e}")),
            }
        }
        std::thread::sleep(PASS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_by_name() {
        assert!(is_manifest("liken-crds.yaml"));
        assert!(is_manifest("a.YML"));
        assert!(is_manifest("b.json"));
        assert!(!is_manifest(".hidden.yaml"));
        assert!(!is_manifest("a.yaml.skip"));
        assert!(!is_manifest("notes.txt"));
    }

    #[test]
    fn a_pass_applies_what_changed_and_not_what_is_skipped() {
        let p = PathBuf::from;
        let files = vec![
            (p("/m/a.yaml"), "d1".to_owned()),
            (p("/m/b.yaml"), "d2".to_owned()),
            (p("/m/c.yaml"), "d3".to_owned()),
        ];
        let skips = vec![p("/m/c.yaml.skip")];
        let mut applied = BTreeMap::new();
        assert_eq!(
            decide_pass(&files, &skips, &applied),
            [p("/m/a.yaml"), p("/m/b.yaml")]
        );
        applied.insert(p("/m/a.yaml"), "d1".to_owned());
        applied.insert(p("/m/b.yaml"), "old".to_owned());
        assert_eq!(decide_pass(&files, &skips, &applied), [p("/m/b.yaml")]);
    }
}
