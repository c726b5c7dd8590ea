//! The deployment layer: the Cluster and Machine documents this boot
//! reads from /etc/liken, and the choice of this computer's Machine.
//!
//! `liken layer` packs `etc/liken/cluster.yaml` and
//! `etc/liken/machines/<name>.yaml` (one per computer in the fleet)
//! into a cpio that boots alongside the release, so every machine of a
//! fleet boots the same layer and init must pick its own document:
//!
//! 1. the name on the kernel command line (`liken.machine=`), else
//! 2. the one document that lists a MAC address this computer has, else
//! 3. the only document there is.
//!
//! Documents are read with the strict decoder: a field init does not
//! know is a mistake to report, never a setting to drop. A document that
//! fails to decode still takes part in the choice under its file name,
//! so the console names the broken file that was meant for this machine
//! rather than claiming there is none.

use std::fmt;
use std::path::{Path, PathBuf};

use liken_api::decode::{self, DecodeError};
use liken_api::{Cluster, Machine};

/// One Machine document as found in the layer.
#[derive(Debug)]
pub struct Candidate {
    /// The file's name without `.yaml`; `liken layer` names each file
    /// after its Machine.
    pub name: String,
    /// The decoded document, or why it could not be decoded.
    pub document: Result<Machine, DecodeError>,
}

/// Why no Machine document was chosen.
#[derive(Debug, PartialEq, Eq)]
pub enum SelectError {
    /// The layer holds no Machine documents.
    Empty {
        /// Where they were looked for.
        dir: String,
    },
    /// The command line names a machine the layer does not hold.
    NoSuchMachine {
        /// The name asked for.
        name: String,
        /// The names there are.
        available: Vec<String>,
    },
    /// The chosen document is broken.
    Invalid {
        /// Its name.
        name: String,
        /// The decoder's message, naming file and field.
        error: String,
    },
    /// More than one document lists this computer's MAC addresses.
    AmbiguousMac {
        /// The documents that claim it.
        names: Vec<String>,
    },
    /// Several documents, and nothing says which is this computer.
    CannotChoose {
        /// The names there are.
        available: Vec<String>,
    },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::Empty { dir } => write!(
                f,
                "no Machine documents in {dir}; boot with a deployment layer made by `liken layer`"
            ),
            SelectError::NoSuchMachine { name, available } => write!(
                f,
                "the kernel command line asks for machine {name:?}, but the layer holds only {}; \
                 correct liken.machine= or add machines/{name}.yaml to the layer",
                available.join(", ")
            ),
            SelectError::Invalid { name, error } => write!(
                f,
                "the Machine document for {name:?} is not valid: {error}; \
                 fix it, rebuild the layer with `liken layer`, and reboot \
                 (this machine waits, and still reboots on request)"
            ),
            SelectError::AmbiguousMac { names } => write!(
                f,
                "machines {} all list a MAC address of this computer; \
                 keep each MAC in one document, or boot with liken.machine=<name>",
                names.join(", ")
            ),
            SelectError::CannotChoose { available } => write!(
                f,
                "the layer holds machines {} and none lists a MAC address of this computer; \
                 boot with liken.machine=<name>, or add this computer's MAC to its document",
                available.join(", ")
            ),
        }
    }
}

/// Picks this computer's document. `macs` are the hardware addresses of
/// its network interfaces.
pub fn decide_machine<'a>(
    wanted: Option<&str>,
    macs: &[[u8; 6]],
    candidates: &'a [Candidate],
    dir: &str,
) -> Result<&'a Machine, SelectError> {
    let names = || {
        candidates
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let chosen = |c: &'a Candidate| match &c.document {
        Ok(m) => Ok(m),
        Err(e) => Err(SelectError::Invalid {
            name: c.name.clone(),
            error: e.to_string(),
        }),
    };
    if candidates.is_empty() {
        return Err(SelectError::Empty {
            dir: dir.to_owned(),
        });
    }
    if let Some(name) = wanted {
        let found = candidates
            .iter()
            .find(|c| c.name == name || c.document.as_ref().is_ok_and(|m| m.metadata.name == name));
        return match found {
            Some(c) => chosen(c),
            None => Err(SelectError::NoSuchMachine {
                name: name.to_owned(),
                available: names(),
            }),
        };
    }
    let by_mac: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| {
            c.document
                .as_ref()
                .is_ok_and(|m| macs.iter().any(|mac| m.has_mac(*mac)))
        })
        .collect();
    match by_mac.as_slice() {
        [one] => return chosen(one),
        [] => {}
        many => {
            return Err(SelectError::AmbiguousMac {
                names: many.iter().map(|c| c.name.clone()).collect(),
            });
        }
    }
    match candidates {
        [only] => chosen(only),
        _ => Err(SelectError::CannotChoose { available: names() }),
    }
}

/// Where the layer's documents live.
pub fn cluster_path(etc_liken: &Path) -> PathBuf {
    etc_liken.join("cluster.yaml")
}

/// A layer document's text: a regular file (no link, no FIFO) of at most
/// [`crate::context::MAX_DOCUMENT`] bytes, as UTF-8.
fn read_document(path: &Path) -> std::io::Result<String> {
    let bytes = crate::fsutil::read_capped(path, crate::context::MAX_DOCUMENT)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// Reads the Cluster document.
pub fn read_cluster(etc_liken: &Path) -> Result<Cluster, String> {
    let path = cluster_path(etc_liken);
    let origin = path.display().to_string();
    let text = read_document(&path).map_err(|e| {
        format!("cannot read {origin}: {e}; boot with a deployment layer made by `liken layer`")
    })?;
    decode::strict::<Cluster>(&text, &origin).map_err(|e| {
        format!("{e}; fix cluster.yaml, rebuild the layer with `liken layer`, and reboot")
    })
}

/// Reads every `machines/*.yaml`, sorted by name so the choice never
/// depends on directory order.
pub fn read_machines(etc_liken: &Path) -> Result<Vec<Candidate>, String> {
    let dir = etc_liken.join("machines");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    crate::order::by_key(&mut paths, |p| crate::order::path_key(p));
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let origin = path.display().to_string();
        let document = match read_document(&path) {
            Ok(text) => decode::strict::<Machine>(&text, &origin),
            Err(e) => Err(DecodeError::Syntax {
                origin,
                message: e.to_string(),
            }),
        };
        out.push(Candidate { name, document });
    }
    Ok(out)
}

/// The hardware addresses of this computer's interfaces, from
/// /sys/class/net/*/address (loopback's all-zero address left out).
pub fn read_macs(sys: &Path) -> Vec<[u8; 6]> {
    let Ok(entries) = std::fs::read_dir(sys.join("class/net")) else {
        return Vec::new();
    };
    let mut macs: Vec<[u8; 6]> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("address")).ok())
        .filter_map(|text| parse_mac(text.trim()))
        .filter(|m| *m != [0; 6])
        .collect();
    crate::order::by_key(&mut macs, |m| m.to_vec());
    macs.dedup();
    macs
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut out {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, mac: Option<&str>) -> Candidate {
        let mac_yaml = mac
            .map(|m| {
                format!("\n  network:\n    interfaces:\n      - mac: \"{m}\"\n        dhcp: true")
            })
            .unwrap_or_default();
        let text = format!(
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  hostname: {name}{mac_yaml}\n"
        );
        Candidate {
            name: name.to_owned(),
            document: decode::strict::<Machine>(&text, &format!("machines/{name}.yaml")),
        }
    }

    fn broken(name: &str) -> Candidate {
        let text = format!(
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  hostnme: x\n"
        );
        Candidate {
            name: name.to_owned(),
            document: decode::strict::<Machine>(&text, &format!("machines/{name}.yaml")),
        }
    }

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    #[test]
    fn the_command_line_wins() {
        let c = [machine("a", Some("52:54:00:12:34:56")), machine("b", None)];
        let m = decide_machine(Some("b"), &[MAC], &c, "d").unwrap();
        assert_eq!(m.metadata.name, "b");
        let e = decide_machine(Some("z"), &[MAC], &c, "d").unwrap_err();
        assert_eq!(
            e,
            SelectError::NoSuchMachine {
                name: "z".into(),
                available: vec!["a".into(), "b".into()]
            }
        );
        assert!(e.to_string().contains("liken.machine="), "{e}");
    }

    #[test]
    fn then_the_mac_then_the_only_one() {
        let c = [machine("a", None), machine("b", Some("52:54:00:12:34:56"))];
        assert_eq!(
            decide_machine(None, &[MAC], &c, "d").unwrap().metadata.name,
            "b"
        );
        assert!(matches!(
            decide_machine(None, &[], &c, "d"),
            Err(SelectError::CannotChoose { .. })
        ));
        let only = [machine("solo", None)];
        assert_eq!(
            decide_machine(None, &[], &only, "d").unwrap().metadata.name,
            "solo"
        );
        let twice = [
            machine("a", Some("52:54:00:12:34:56")),
            machine("b", Some("52:54:00:12:34:56")),
        ];
        assert!(matches!(
            decide_machine(None, &[MAC], &twice, "d"),
            Err(SelectError::AmbiguousMac { .. })
        ));
        assert!(matches!(
            decide_machine(None, &[MAC], &[], "d"),
            Err(SelectError::Empty { .. })
        ));
    }

    #[test]
    fn a_broken_document_is_reported_when_it_is_the_one() {
        let c = [broken("web-1")];
        let e = decide_machine(None, &[], &c, "d").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("web-1"), "{text}");
        assert!(text.contains("spec.hostnme"), "{text}");
        assert!(text.contains("reboots on request"), "{text}");
        let c = [broken("web-1"), machine("web-2", None)];
        assert!(matches!(
            decide_machine(Some("web-1"), &[], &c, "d"),
            Err(SelectError::Invalid { .. })
        ));
        assert_eq!(
            decide_machine(Some("web-2"), &[], &c, "d")
                .unwrap()
                .metadata
                .name,
            "web-2"
        );
    }

    #[test]
    fn reads_documents_and_macs_from_a_tree() {
        let dir = std::env::temp_dir().join(format!("liken-init-layer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etc/machines")).unwrap();
        std::fs::create_dir_all(dir.join("sys/class/net/eth0")).unwrap();
        std::fs::create_dir_all(dir.join("sys/class/net/lo")).unwrap();
        std::fs::write(
            dir.join("sys/class/net/eth0/address"),
            "52:54:00:12:34:56\n",
        )
        .unwrap();
        std::fs::write(dir.join("sys/class/net/lo/address"), "00:00:00:00:00:00\n").unwrap();
        std::fs::write(
            dir.join("etc/machines/b.yaml"),
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: b\n",
        )
        .unwrap();
        std::fs::write(dir.join("etc/machines/a.yaml"), "kind: Machine\n").unwrap();
        std::fs::write(dir.join("etc/machines/notes.txt"), "ignored").unwrap();
        let c = read_machines(&dir.join("etc")).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].name, "a");
        assert!(c[0].document.is_err());
        assert!(c[1].document.is_ok());
        assert_eq!(read_macs(&dir.join("sys")), vec![MAC]);
        assert!(
            read_cluster(&dir.join("etc"))
                .unwrap_err()
                .contains("cluster.yaml")
        );
        assert!(read_machines(&dir.join("none")).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
