//! The deployment directory: the files `liken new` writes and the other
//! commands read.
//!
//! ```text
//! <dir>/cluster.yaml          the one Cluster
//! <dir>/machines/<name>.yaml  one Machine per computer; <name> is its metadata.name
//! <dir>/identity/             from `liken mint` or `liken adopt`
//! <dir>/identity/kubeconfig   from `liken kubeconfig`
//! <dir>/identity/passthrough.kubeconfig  from `liken kubectl|stern|flux` (one hour)
//! ```
//!
//! Every manifest is read with the strict decoder, and [`read_manifests`]
//! checks the documents against each other (every leader has a Machine,
//! every file name matches its document) and reports every problem it
//! finds in one error, so a person fixes the whole list in one pass.

use std::fmt;
use std::path::{Path, PathBuf};

use liken_api::{Cluster, Machine, decode};

/// The Cluster's file name.
pub const CLUSTER_FILE: &str = "cluster.yaml";
/// The directory of Machine files.
pub const MACHINES_DIR: &str = "machines";
/// The identity directory inside a deployment.
pub const IDENTITY_DIR: &str = "identity";

/// One manifest: where it came from, its exact text, and what it says.
#[derive(Debug, Clone)]
pub struct Manifest<T> {
    /// The file.
    pub path: PathBuf,
    /// Its bytes as written (comments included), which is what a layer
    /// carries.
    pub text: String,
    /// The decoded document.
    pub doc: T,
}

/// A deployment's documents, checked against each other.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// cluster.yaml.
    pub cluster: Manifest<Cluster>,
    /// machines/*.yaml, sorted by name.
    pub machines: Vec<Manifest<Machine>>,
}

/// Why a deployment's manifests cannot be used.
#[derive(Debug)]
pub enum DeploymentError {
    /// A file or directory could not be read.
    Io {
        /// What was read.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The directory has no cluster.yaml.
    NoCluster {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifests are wrong; every problem found.
    Invalid(Vec<String>),
}

impl fmt::Display for DeploymentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeploymentError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            DeploymentError::NoCluster { dir } => write!(
                f,
                "{} has no {CLUSTER_FILE}; run `liken new {}` to write one, or point at the \
                 directory that holds it",
                dir.display(),
                dir.display()
            ),
            DeploymentError::Invalid(problems) => {
                write!(f, "the manifests are not valid:")?;
                for p in problems {
                    for (i, line) in p.lines().enumerate() {
                        let lead = if i == 0 { "\n  " } else { "\n    " };
                        write!(f, "{lead}{}", line.trim_start())?;
                    }
                }
                write!(f, "\nfix them and run the command again")
            }
        }
    }
}

impl std::error::Error for DeploymentError {}

/// What is wrong with an endpoint URL, by the same rule the Cluster's
/// validation applies to spec.endpoint; `None` when it is good.
pub fn endpoint_problem(url: &str) -> Option<String> {
    use liken_api::validate::Validate;
    let probe = Cluster::new(
        "probe",
        liken_api::ClusterSpec {
            endpoint: url.to_owned(),
            leaders: vec!["probe".to_owned()],
            ..Default::default()
        },
    );
    probe
        .validate()
        .into_iter()
        .find(|p| p.field == "spec.endpoint")
        .map(|p| p.message)
}

fn read_text(path: &Path) -> Result<String, DeploymentError> {
    std::fs::read_to_string(path).map_err(|source| DeploymentError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads `<dir>/cluster.yaml` strictly; `None` when there is none.
pub fn read_cluster(dir: &Path) -> Result<Option<Manifest<Cluster>>, DeploymentError> {
    let path = dir.join(CLUSTER_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(DeploymentError::Io { path, source }),
    };
    let doc = decode::strict::<Cluster>(&text, &path.display().to_string())
        .map_err(|e| DeploymentError::Invalid(vec![e.to_string()]))?;
    Ok(Some(Manifest { path, text, doc }))
}

/// Reads and cross-checks every manifest of the deployment in `dir`.
pub fn read_manifests(dir: &Path) -> Result<Manifests, DeploymentError> {
    let mut problems = Vec::new();

    // Only cluster.yaml belongs at the top; another YAML file there is a
    // document that would silently not be packed.
    let entries = std::fs::read_dir(dir).map_err(|source| DeploymentError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut top = Vec::new();
    for e in entries {
        let e = e.map_err(|source| DeploymentError::Io {
            path: dir.to_owned(),
            source,
        })?;
        top.push(e.file_name().to_string_lossy().into_owned());
    }
    top.sort();
    for name in &top {
        let top_level = [CLUSTER_FILE, liken_api::signing::TRUST_FILE];
        if !top_level.contains(&name.as_str())
            && (name.ends_with(".yaml") || name.ends_with(".yml"))
        {
            problems.push(format!(
                "{}: only {CLUSTER_FILE} and {} belong at the top of the deployment; \
                 a Machine goes in {MACHINES_DIR}/<name>.yaml",
                dir.join(name).display(),
                liken_api::signing::TRUST_FILE,
            ));
        }
    }

    let cluster_path = dir.join(CLUSTER_FILE);
    let cluster = if cluster_path.exists() {
        let text = read_text(&cluster_path)?;
        match decode::strict::<Cluster>(&text, &cluster_path.display().to_string()) {
            Ok(doc) => Some(Manifest {
                path: cluster_path,
                text,
                doc,
            }),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        }
    } else {
        problems.push(format!(
            "{}: missing; a deployment has exactly one Cluster (`liken new` writes it)",
            cluster_path.display()
        ));
        None
    };

    let machines_dir = dir.join(MACHINES_DIR);
    let mut names = Vec::new();
    match std::fs::read_dir(&machines_dir) {
        Ok(entries) => {
            for e in entries {
                let e = e.map_err(|source| DeploymentError::Io {
                    path: machines_dir.clone(),
                    source,
                })?;
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(DeploymentError::Io {
                path: machines_dir,
                source,
            });
        }
    }
    names.sort();
    let mut machines = Vec::new();
    for name in names {
        let path = machines_dir.join(&name);
        let Some(stem) = name.strip_suffix(".yaml").filter(|_| path.is_file()) else {
            problems.push(format!(
                "{}: {MACHINES_DIR}/ holds only <name>.yaml files, one Machine each; \
                 rename or move this one",
                path.display()
            ));
            continue;
        };
        let text = read_text(&path)?;
        match decode::strict::<Machine>(&text, &path.display().to_string()) {
            Ok(doc) if doc.metadata.name != stem => problems.push(format!(
                "{}: metadata.name is {:?}, but the file is named {name}; \
                 name the file after the machine ({}.yaml)",
                path.display(),
                doc.metadata.name,
                doc.metadata.name
            )),
            Ok(doc) => machines.push(Manifest { path, text, doc }),
            Err(e) => problems.push(e.to_string()),
        }
    }

    if let Some(c) = &cluster {
        problems.extend(decide_cross_checks(
            &c.doc,
            &machines.iter().map(|m| &m.doc).collect::<Vec<_>>(),
            &machines_dir,
        ));
    }

    match cluster {
        Some(cluster) if problems.is_empty() => Ok(Manifests { cluster, machines }),
        _ => Err(DeploymentError::Invalid(problems)),
    }
}

/// What is wrong between the Cluster and the Machines: leaders with no
/// Machine, and a fleet with no Machine at all.
pub fn decide_cross_checks(
    cluster: &Cluster,
    machines: &[&Machine],
    machines_dir: &Path,
) -> Vec<String> {
    let mut problems = Vec::new();
    if machines.is_empty() {
        problems.push(format!(
            "{}: no Machine documents; add one <name>.yaml per computer",
            machines_dir.display()
        ));
    }
    for (i, leader) in cluster.spec.leaders.iter().enumerate() {
        if !machines.iter().any(|m| &m.metadata.name == leader) {
            problems.push(format!(
                "{CLUSTER_FILE}: spec.leaders[{i}] names {leader:?}, but no Machine declares \
                 it; add {MACHINES_DIR}/{leader}.yaml or remove the name"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    const CLUSTER: &str = "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\n\
        spec:\n  endpoint: https://10.0.0.10:6443\n  leaders: [node-1, node-9]\n";

    fn machine(name: &str) -> String {
        format!(
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec: {{}}\n"
        )
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let tmp = TestDir::new("deployment");
        let d = tmp.path();
        std::fs::write(d.join(CLUSTER_FILE), CLUSTER).unwrap();
        std::fs::write(d.join("node-3.yaml"), machine("node-3")).unwrap();
        std::fs::create_dir(d.join(MACHINES_DIR)).unwrap();
        std::fs::write(d.join("machines/node-1.yaml"), machine("node-1")).unwrap();
        std::fs::write(d.join("machines/node-2.yaml"), machine("other")).unwrap();
        std::fs::write(d.join("machines/node-4.yml"), machine("node-4")).unwrap();
        std::fs::write(
            d.join("machines/node-5.yaml"),
            machine("node-5").replace("spec: {}", "spec:\n  role: leader"),
        )
        .unwrap();
        let msg = read_manifests(d).unwrap_err().to_string();
        for want in [
            "node-3.yaml: only cluster.yaml and trust.yaml belong",
            "metadata.name is \"other\"",
            "node-4.yml: machines/ holds only",
            "unknown field `spec.role`",
            "spec.leaders[1] names \"node-9\"",
        ] {
            assert!(msg.contains(want), "{want} in:\n{msg}");
        }
        assert!(!msg.contains("node-1\","), "{msg}");
    }

    #[test]
    fn a_sound_deployment_reads_in_name_order() {
        let tmp = TestDir::new("deployment-ok");
        let d = tmp.path();
        std::fs::write(d.join(CLUSTER_FILE), CLUSTER.replace(", node-9", "")).unwrap();
        std::fs::create_dir(d.join(MACHINES_DIR)).unwrap();
        for n in ["node-2", "node-1"] {
            std::fs::write(d.join(format!("machines/{n}.yaml")), machine(n)).unwrap();
        }
        let m = read_manifests(d).unwrap();
        let names: Vec<_> = m
            .machines
            .iter()
            .map(|m| m.doc.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["node-1", "node-2"]);
        assert_eq!(m.cluster.text, CLUSTER.replace(", node-9", ""));
    }

    #[test]
    fn no_cluster_and_no_machines_are_problems() {
        let tmp = TestDir::new("deployment-empty");
        let msg = read_manifests(tmp.path()).unwrap_err().to_string();
        assert!(msg.contains("cluster.yaml: missing"), "{msg}");
        assert!(read_cluster(tmp.path()).unwrap().is_none());
    }
}
