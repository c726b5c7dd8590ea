//! The documents this boot runs: staged documents promoted, and the
//! running pair published for the machine operator.
//!
//! The machine operator stages a changed Machine or Cluster document on
//! the data partition, `/var/lib/liken/staged/<name>` (`machine.yaml`,
//! `cluster.yaml`), with `<name>.sha256` beside it holding the SHA-256
//! of the document's bytes in hex (what `sha256sum` prints: the hex
//! alone, or the hex, spaces and the file name). It writes the document
//! first and the checksum last, so a checksum names a finished document.
//! At boot, before anything uses the Machine, this module:
//!
//! 1. checks each staged document: the checksum file is present and
//!    well formed, the bytes hash to it, and the document passes the
//!    strict decoder (unknown fields and invalid values refused). A good
//!    one is written into `/var/lib/liken/documents/` atomically and the
//!    staged pair removed; a bad one (or half of a pair) is moved to
//!    `/var/lib/liken/rejected/<name>.<time>` for a person to read, with
//!    a console line saying what was wrong, and the documents in force
//!    before stay in force. Promoting is idempotent: a power cut after
//!    the write and before the removal promotes the same bytes again.
//! 2. decides the running documents: the promoted ones when present and
//!    valid, else the deployment layer's. The Machine is chosen again,
//!    by the layer's rules ([`crate::layer::decide_machine`]), from the
//!    layer's documents with the promoted Machine in place of the one of
//!    its name, so a promoted document that no longer claims this
//!    computer is not run here. A promoted document that this init's
//!    decoder refuses (after a rollback to an older release, say) is
//!    passed over with a console line and the layer's is run.
//! 3. writes the running pair, byte for byte as decoded, to
//!    `/run/liken/documents/{machine,cluster}.yaml`, where the machine
//!    operator compares them with what it staged.
//!
//! /var exists only once the root step has mounted the data partition
//! there. Until then (running from the initramfs, or the data partition
//! failed to mount) promotion is not attempted at all, so nothing is
//! written into or moved out of a /var that is only RAM or the image's
//! empty mount point; the layer's documents run and are still published.
//! Whether /var is the data partition is read from
//! /proc/self/mountinfo ([`decide_data_partition`]).

use std::io;
use std::path::{Path, PathBuf};

use liken_api::decode::{self, DecodeError};
use liken_api::hash::sha256;
use liken_api::{Cluster, Machine, Role, Time};

use crate::console::{self, Outcome};
use crate::context::{Boot, MAX_DOCUMENT, MOUNTINFO_CAP, Paths, unescape};
use crate::fsutil::{sync_dir, write_atomic};
use crate::layer::{self, Candidate, SelectError};

// The paths and the checksum format are the contract with the machine
// operator, kept in liken-api so the two sides cannot drift.
pub use liken_api::ondisk::{
    DOCUMENTS_DIR, Document, REJECTED_DIR, RUNNING_DIR, STAGED_DIR, VAR_LIKEN, parse_checksum,
};

/// The filesystem the data partition holds.
pub const DATA_FSTYPE: &str = "ext4";

/// Strictly decodes a document's text, for the check alone.
fn check(doc: Document, text: &str, origin: &str) -> Result<(), DecodeError> {
    match doc {
        Document::Machine => decode::strict::<Machine>(text, origin).map(drop),
        Document::Cluster => decode::strict::<Cluster>(text, origin).map(drop),
    }
}

/// What to do with what was found in staged/ for one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing is staged.
    Nothing,
    /// The bytes are good: promote them.
    Promote,
    /// Refuse them, for this reason.
    Reject(String),
}

/// Judges one staged document from its bytes and its checksum file's
/// (each `None` when absent).
pub fn decide_staged(
    doc: Document,
    yaml: Option<&[u8]>,
    checksum: Option<&[u8]>,
    origin: &str,
) -> Verdict {
    let (file, sum) = (doc.file_name(), doc.checksum_name());
    let (yaml, checksum) = match (yaml, checksum) {
        (None, None) => return Verdict::Nothing,
        (Some(_), None) => {
            return Verdict::Reject(format!(
                "it has no {sum} beside it, so its staging never finished"
            ));
        }
        (None, Some(_)) => {
            return Verdict::Reject(format!("{sum} is there but {file} is not"));
        }
        (Some(y), Some(c)) => (y, c),
    };
    let want = match parse_checksum(checksum, file) {
        Ok(d) => d,
        Err(e) => return Verdict::Reject(format!("{sum} is not a SHA-256: {e}")),
    };
    let got = sha256(yaml);
    if got != want {
        return Verdict::Reject(format!(
            "its bytes hash to {got}, but {sum} says {want}: it was damaged or changed after staging"
        ));
    }
    let Ok(text) = std::str::from_utf8(yaml) else {
        return Verdict::Reject("it is not UTF-8 text".into());
    };
    match check(doc, text, origin) {
        Ok(()) => Verdict::Promote,
        Err(e) => Verdict::Reject(e.to_string()),
    }
}

/// What [`promote`] did with one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// Nothing was staged.
    Nothing,
    /// The staged document is now the promoted one.
    Promoted,
    /// The staged document was refused and moved aside.
    Rejected {
        /// Why.
        why: String,
        /// Where its files went.
        moved_to: Vec<PathBuf>,
    },
    /// Reading or writing failed; what is staged stays staged.
    Failed(String),
}

/// Reads a staged or promoted file, absent being `None`: opened without
/// following links or blocking, refused unless a regular file of at
/// most [`MAX_DOCUMENT`] bytes ([`crate::fsutil::read_capped`]).
fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match crate::fsutil::read_capped(path, MAX_DOCUMENT) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A name in rejected/ that is not taken: `<name>.<time>`, then
/// `<name>.<time>.1` and on, as a clock reset at boot can repeat a time.
fn free_name(dir: &Path, name: &str, stamp: Time) -> PathBuf {
    let base = format!("{name}.{stamp}");
    let mut candidate = dir.join(&base);
    let mut n: u32 = 0;
    while candidate.symlink_metadata().is_ok() && n < 1000 {
        n = n.saturating_add(1);
        candidate = dir.join(format!("{base}.{n}"));
    }
    candidate
}

/// Promotes or rejects what is staged for `doc` under `var_liken`.
pub fn promote(var_liken: &Path, doc: Document, stamp: Time) -> Promotion {
    let staged = var_liken.join(STAGED_DIR);
    let yaml_path = staged.join(doc.file_name());
    let sum_path = staged.join(doc.checksum_name());
    let yaml = match read_optional(&yaml_path) {
        Ok(y) => y,
        Err(e) => return Promotion::Failed(format!("cannot read {}: {e}", yaml_path.display())),
    };
    let sum = match read_optional(&sum_path) {
        Ok(s) => s,
        Err(e) => return Promotion::Failed(format!("cannot read {}: {e}", sum_path.display())),
    };
    let origin = yaml_path.display().to_string();
    match decide_staged(doc, yaml.as_deref(), sum.as_deref(), &origin) {
        Verdict::Nothing => Promotion::Nothing,
        Verdict::Promote => {
            let documents = var_liken.join(DOCUMENTS_DIR);
            let target = documents.join(doc.file_name());
            // The bytes written are the bytes just verified, never a
            // second read of the staged file.
            let bytes = yaml.unwrap_or_default();
            let written = std::fs::create_dir_all(&documents)
                .and_then(|()| write_atomic(&target, &bytes, 0o644))
                .and_then(|()| std::fs::remove_file(&yaml_path))
                .and_then(|()| std::fs::remove_file(&sum_path))
                .and_then(|()| sync_dir(&staged));
            match written {
                Ok(()) => Promotion::Promoted,
                Err(e) => Promotion::Failed(format!(
                    "cannot promote {} into {}: {e}",
                    yaml_path.display(),
                    documents.display()
                )),
            }
        }
        Verdict::Reject(why) => {
            let rejected = var_liken.join(REJECTED_DIR);
            if let Err(e) = std::fs::create_dir_all(&rejected) {
                return Promotion::Failed(format!(
                    "{origin} is bad ({why}), and cannot be moved aside: {e}"
                ));
            }
            let mut moved_to = Vec::new();
            for (present, from, name) in [
                (yaml.is_some(), &yaml_path, doc.file_name()),
                (sum.is_some(), &sum_path, doc.checksum_name()),
            ] {
                if !present {
                    continue;
                }
                let to = free_name(&rejected, name, stamp);
                if let Err(e) = std::fs::rename(from, &to) {
                    return Promotion::Failed(format!(
                        "{origin} is bad ({why}), and cannot be moved to {}: {e}",
                        to.display()
                    ));
                }
                moved_to.push(to);
            }
            let _ = sync_dir(&rejected).and_then(|()| sync_dir(&staged));
            Promotion::Rejected { why, moved_to }
        }
    }
}

/// Whether `var` is a mounted ext4 filesystem, from the text of
/// /proc/self/mountinfo. The last mount on a point is the visible one.
pub fn decide_data_partition(mountinfo: &str, var: &Path) -> Result<(), String> {
    let mut found: Option<String> = None;
    for line in mountinfo.lines() {
        let mut fields = line.split(' ');
        let Some(point) = fields.nth(4) else {
            continue;
        };
        if Path::new(&unescape(point)) != var {
            continue;
        }
        // The optional fields end at a lone "-"; the fstype follows.
        let fstype = fields.skip_while(|f| *f != "-").nth(1).unwrap_or("");
        found = Some(fstype.to_owned());
    }
    match found {
        Some(t) if t == DATA_FSTYPE => Ok(()),
        Some(t) => Err(format!(
            "{} is a {t} mount, not the {DATA_FSTYPE} data partition",
            var.display()
        )),
        None => Err(format!(
            "nothing is mounted on {}, so there is no data partition (running from the initramfs)",
            var.display()
        )),
    }
}

/// Whether the data partition is mounted on `paths.var`.
pub fn data_partition(paths: &Paths) -> Result<(), String> {
    let path = paths.proc.join("self/mountinfo");
    let text = crate::fsutil::read_capped(&path, MOUNTINFO_CAP)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decide_data_partition(&text, &paths.var)
}

/// Where the running Machine came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// The promoted document.
    Promoted(Machine),
    /// The layer's `machines/<file>.yaml`.
    Layer {
        /// The file's name without `.yaml`.
        file: String,
        /// Its document.
        machine: Machine,
    },
}

/// Chooses this computer's Machine from the layer's documents with the
/// promoted one (if any) in place of the one of its name.
pub fn decide_running_machine(
    wanted: Option<&str>,
    macs: &[[u8; 6]],
    layer: &[Candidate],
    promoted: Option<&Machine>,
    dir: &str,
) -> Result<Chosen, SelectError> {
    let mut candidates: Vec<Candidate> = Vec::with_capacity(layer.len().saturating_add(1));
    let mut replaced = false;
    for c in layer {
        let same = promoted.is_some_and(|p| {
            c.name == p.metadata.name
                || c.document
                    .as_ref()
                    .is_ok_and(|m| m.metadata.name == p.metadata.name)
        });
        let document = match (same, promoted) {
            (true, Some(p)) => {
                replaced = true;
                Ok(p.clone())
            }
            _ => c.document.clone(),
        };
        candidates.push(Candidate {
            name: c.name.clone(),
            document,
        });
    }
    if let (false, Some(p)) = (replaced, promoted) {
        candidates.push(Candidate {
            name: p.metadata.name.clone(),
            document: Ok(p.clone()),
        });
    }
    let chosen = layer::decide_machine(wanted, macs, &candidates, dir)?;
    if let Some(p) = promoted
        && chosen.metadata.name == p.metadata.name
    {
        return Ok(Chosen::Promoted(chosen.clone()));
    }
    let file = candidates
        .iter()
        .find(|c| c.document.as_ref().is_ok_and(|m| std::ptr::eq(m, chosen)))
        .map_or_else(|| chosen.metadata.name.clone(), |c| c.name.clone());
    Ok(Chosen::Layer {
        file,
        machine: chosen.clone(),
    })
}

/// The strict decoder of one kind.
type Decoder<T> = fn(&str, &str) -> Result<T, DecodeError>;

/// A promoted document, decoded: `None` when there is none, `Err` when
/// it can no longer be read or decoded.
fn read_promoted<T>(
    var_liken: &Path,
    doc: Document,
    decode: Decoder<T>,
) -> Option<Result<(T, Vec<u8>), String>> {
    let path = var_liken.join(DOCUMENTS_DIR).join(doc.file_name());
    let bytes = match read_optional(&path) {
        Ok(None) => return None,
        Ok(Some(b)) => b,
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let origin = path.display().to_string();
    let decoded = match std::str::from_utf8(&bytes) {
        Ok(text) => decode(text, &origin).map_err(|e| e.to_string()),
        Err(_) => Err(format!("{origin} is not UTF-8 text")),
    };
    Some(decoded.map(|doc| (doc, bytes)))
}

/// The promoted document to run instead of the layer's, when there is
/// one this init can decode. One it cannot is passed over with a console
/// line, so the layer's runs and a person sees why.
fn usable_promoted<T>(var_liken: &Path, doc: Document, decode: Decoder<T>) -> Option<(T, Vec<u8>)> {
    match read_promoted(var_liken, doc, decode)? {
        Ok(found) => Some(found),
        Err(e) => {
            console::line(&format!(
                "documents: the promoted {doc} cannot be used ({e}); running the layer's"
            ));
            None
        }
    }
}

/// The layer's file for a document, decoded from exactly the bytes read.
fn read_layer<T>(path: &Path, decode: Decoder<T>) -> Result<(T, Vec<u8>), String> {
    let bytes = crate::fsutil::read_capped(path, MAX_DOCUMENT)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let origin = path.display().to_string();
    let text = std::str::from_utf8(&bytes).map_err(|_| format!("{origin} is not UTF-8 text"))?;
    let doc = decode(text, &origin).map_err(|e| e.to_string())?;
    Ok((doc, bytes))
}

/// The documents step (SPEC.md's step 6, first half): the running
/// documents replace the layer's in the boot.
pub fn step(boot: &mut Boot) -> Outcome {
    let (outcome, running) = settle(
        &boot.paths,
        boot.cmdline.machine.as_deref(),
        boot.machine.as_ref(),
        boot.started,
    );
    boot.machine = running.machine;
    boot.cluster = running.cluster;
    outcome
}

/// The documents a boot runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// This computer's Machine, when one is valid.
    pub machine: Option<Machine>,
    /// The Cluster, when valid.
    pub cluster: Option<Cluster>,
}

/// Promotes what is staged (when /var is the data partition), decides
/// the running documents and publishes them. `wanted` is the command
/// line's machine name, `layer_choice` the Machine the layer alone gave,
/// `stamp` the time rejected files are named with.
pub fn settle(
    paths: &Paths,
    wanted: Option<&str>,
    layer_choice: Option<&Machine>,
    stamp: Time,
) -> (Outcome, Running) {
    let mut failures: Vec<String> = Vec::new();
    let mut promoted_now: Vec<&str> = Vec::new();
    let mut promoted_machine: Option<(Machine, Vec<u8>)> = None;
    let mut promoted_cluster: Option<(Cluster, Vec<u8>)> = None;
    let data = data_partition(paths);
    if data.is_ok() {
        for doc in Document::ALL {
            match promote(&paths.var_liken, doc, stamp) {
                Promotion::Nothing => {}
                Promotion::Promoted => promoted_now.push(doc.file_name()),
                Promotion::Rejected { why, moved_to } => {
                    let to: Vec<String> =
                        moved_to.iter().map(|p| p.display().to_string()).collect();
                    console::line(&format!(
                        "documents: refused the staged {}: {why}; moved to {}; the documents \
                         in force before stay in force",
                        doc.file_name(),
                        to.join(" and ")
                    ));
                }
                Promotion::Failed(e) => failures.push(e),
            }
        }
        promoted_machine = usable_promoted(
            &paths.var_liken,
            Document::Machine,
            decode::strict::<Machine>,
        );
        promoted_cluster = usable_promoted(
            &paths.var_liken,
            Document::Cluster,
            decode::strict::<Cluster>,
        );
    }

    let etc = &paths.etc_liken;
    let cluster = match promoted_cluster {
        Some((c, bytes)) => Some((c, bytes, "promoted")),
        None => match read_layer(&layer::cluster_path(etc), decode::strict::<Cluster>) {
            Ok((c, bytes)) => Some((c, bytes, "layer")),
            Err(_) => None, // the machine step already said why
        },
    };

    let candidates = layer::read_machines(etc).unwrap_or_default();
    let macs = layer::read_macs(&paths.sys);
    let dir = etc.join("machines").display().to_string();
    let promoted_ref = promoted_machine.as_ref().map(|(m, _)| m);
    let chosen = match decide_running_machine(wanted, &macs, &candidates, promoted_ref, &dir) {
        Ok(c) => Some(c),
        Err(e) => match layer_choice {
            // The layer alone chose a Machine; keep it, and say why the
            // promoted one could not take part.
            Some(m) => {
                console::line(&format!(
                    "documents: with the promoted machine.yaml the choice fails ({e}); \
                     running the layer's {}",
                    m.metadata.name
                ));
                Some(Chosen::Layer {
                    file: candidates
                        .iter()
                        .find(|c| {
                            c.document
                                .as_ref()
                                .is_ok_and(|d| d.metadata.name == m.metadata.name)
                        })
                        .map_or_else(|| m.metadata.name.clone(), |c| c.name.clone()),
                    machine: m.clone(),
                })
            }
            None => None,
        },
    };
    if let (Some((p, _)), Some(Chosen::Layer { machine, .. })) = (&promoted_machine, &chosen)
        && p.metadata.name != machine.metadata.name
    {
        console::line(&format!(
            "documents: the promoted machine.yaml is for {}, not this computer ({}); not run",
            p.metadata.name, machine.metadata.name
        ));
    }
    let machine = match chosen {
        Some(Chosen::Promoted(m)) => {
            let bytes = promoted_machine.map(|(_, b)| b).unwrap_or_default();
            Some((m, bytes, "promoted"))
        }
        Some(Chosen::Layer { file, .. }) => {
            match read_layer(
                &etc.join("machines").join(format!("{file}.yaml")),
                decode::strict::<Machine>,
            ) {
                Ok((m, bytes)) => Some((m, bytes, "layer")),
                Err(e) => {
                    failures.push(e);
                    None
                }
            }
        }
        None => None,
    };

    let running = paths.run_liken.join(RUNNING_DIR);
    let published = std::fs::create_dir_all(&running).and_then(|()| {
        if let Some((_, bytes, _)) = &machine {
            write_atomic(&running.join(Document::Machine.file_name()), bytes, 0o644)?;
        }
        if let Some((_, bytes, _)) = &cluster {
            write_atomic(&running.join(Document::Cluster.file_name()), bytes, 0o644)?;
        }
        Ok(())
    });
    if let Err(e) = published {
        failures.push(format!(
            "cannot write {}: {e}; the machine operator cannot see which documents run",
            running.display()
        ));
    }

    let mut detail = Vec::new();
    match &machine {
        Some((m, _, from)) => detail.push(format!("machine {} from the {from}", m.metadata.name)),
        None => detail.push("no valid Machine".to_owned()),
    }
    match &cluster {
        Some((c, _, from)) => detail.push(format!("cluster {} from the {from}", c.metadata.name)),
        None => detail.push("no valid Cluster".to_owned()),
    }
    if let (Some((m, _, _)), Some((c, _, _))) = (&machine, &cluster) {
        let role = if c.is_leader(&m.metadata.name) {
            Role::Leader
        } else {
            Role::Follower
        };
        detail.push(format!("{} here", role.as_str()));
    }
    if !promoted_now.is_empty() {
        detail.push(format!("promoted {} this boot", promoted_now.join(" and ")));
    }
    if let Err(why) = &data {
        detail.push(format!("nothing promoted: {why}"));
    }
    let result = Running {
        machine: machine.map(|(m, _, _)| m),
        cluster: cluster.map(|(c, _, _)| c),
    };
    let text = detail.join(", ");
    let outcome = if !failures.is_empty() {
        Outcome::Failed(format!("{}; {text}", failures.join("; ")))
    } else if result.machine.is_none() {
        Outcome::Skipped(format!("{text}; see the machine line"))
    } else {
        Outcome::ok_with(format!("{text}; published in {}", running.display()))
    };
    (outcome, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::MachineSpec;

    const MACHINE: &str = "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: web-1\nspec:\n  hostname: web-1\n";
    const MACHINE_V2: &str = "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: web-1\nspec:\n  hostname: web-one\n";
    const CLUSTER: &str = "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\nspec:\n  endpoint: https://10.0.0.10:6443\n  leaders: [web-1]\n";

    fn hex(bytes: &[u8]) -> String {
        sha256(bytes).as_str().to_owned()
    }

    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let d = std::env::temp_dir()
                .join(format!("liken-init-staged-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tree(d)
        }

        fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
            p
        }

        /// Stages `bytes` as the machine operator does: the document
        /// under staged/, then its checksum beside it.
        fn stage(&self, doc: Document, bytes: &[u8]) {
            self.write(&format!("var/lib/liken/staged/{doc}"), bytes);
            self.write(
                &format!("var/lib/liken/staged/{}", doc.checksum_name()),
                hex(bytes).as_bytes(),
            );
        }

        fn paths(&self) -> Paths {
            let root = &self.0;
            let mut p = Paths::real();
            p.proc = root.join("proc");
            p.sys = root.join("sys");
            p.run_liken = root.join("run/liken");
            p.etc_liken = root.join("layer");
            p.var = root.join("var");
            p.var_liken = root.join("var/lib/liken");
            self.write(
                "proc/self/mountinfo",
                format!(
                    "22 1 0:20 / / ro,relatime - squashfs /dev/vda3 ro\n\
                     30 22 253:5 / {} rw,relatime shared:9 - ext4 /dev/vda5 rw\n",
                    root.join("var").display()
                )
                .as_bytes(),
            );
            p
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn every_step_that_applies_the_machine_runs_after_the_documents() {
        let names: Vec<&str> = crate::steps::BOOT.iter().map(|s| s.name).collect();
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(at("root") < at("documents"), "/var first: {names:?}");
        for later in [
            "machine-modules",
            "sysctls",
            "hostname",
            "network",
            "ntp",
            "boot-record",
            "k3s-seed",
            "k3s",
        ] {
            assert!(at("documents") < at(later), "{later}: {names:?}");
        }
        assert!(at("network") < at("ntp"), "{names:?}");
        assert_eq!(at("k3s-seed") + 1, at("k3s"), "{names:?}");
    }

    #[test]
    fn checksums_are_read_strictly() {
        let h = hex(b"x");
        assert_eq!(parse_checksum(h.as_bytes(), "m.yaml").unwrap().as_str(), h);
        assert!(parse_checksum(format!("{h}\n").as_bytes(), "m.yaml").is_ok());
        assert!(parse_checksum(format!("{h}  m.yaml\n").as_bytes(), "m.yaml").is_ok());
        assert!(parse_checksum(format!("{h} *m.yaml\n").as_bytes(), "m.yaml").is_ok());
        assert!(parse_checksum(format!("{h}  other.yaml").as_bytes(), "m.yaml").is_err());
        assert!(parse_checksum(format!("{h} m.yaml extra").as_bytes(), "m.yaml").is_err());
        assert!(parse_checksum(h.to_uppercase().as_bytes(), "m.yaml").is_err());
        assert!(
            parse_checksum(b"", "m.yaml")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(parse_checksum(&[0xff], "m.yaml").is_err());
    }

    #[test]
    fn staged_documents_are_judged() {
        let d = Document::Machine;
        let m = MACHINE.as_bytes();
        let sum = hex(m);
        assert_eq!(decide_staged(d, None, None, "o"), Verdict::Nothing);
        assert_eq!(
            decide_staged(d, Some(m), Some(sum.as_bytes()), "o"),
            Verdict::Promote
        );
        let reject = |v: Verdict, want: &str| match v {
            Verdict::Reject(why) => assert!(why.contains(want), "{why}"),
            other => panic!("{other:?}"),
        };
        reject(decide_staged(d, Some(m), None, "o"), "never finished");
        reject(decide_staged(d, None, Some(sum.as_bytes()), "o"), "is not");
        reject(
            decide_staged(d, Some(m), Some(hex(b"other").as_bytes()), "o"),
            "damaged or changed",
        );
        reject(
            decide_staged(d, Some(m), Some(b"nonsense"), "o"),
            "not a SHA-256",
        );
        let typo = MACHINE.replace("hostname", "hostnme");
        reject(
            decide_staged(
                d,
                Some(typo.as_bytes()),
                Some(hex(typo.as_bytes()).as_bytes()),
                "o",
            ),
            "spec.hostnme",
        );
        // A Cluster is not a Machine.
        reject(
            decide_staged(
                d,
                Some(CLUSTER.as_bytes()),
                Some(hex(CLUSTER.as_bytes()).as_bytes()),
                "o",
            ),
            "kind",
        );
        assert_eq!(
            decide_staged(
                Document::Cluster,
                Some(CLUSTER.as_bytes()),
                Some(hex(CLUSTER.as_bytes()).as_bytes()),
                "o"
            ),
            Verdict::Promote
        );
    }

    #[test]
    fn the_data_partition_is_read_from_mountinfo() {
        let var = Path::new("/var");
        let ok = "30 22 253:5 / /var rw,relatime shared:9 - ext4 /dev/vda5 rw\n";
        assert_eq!(decide_data_partition(ok, var), Ok(()));
        let tmpfs = "30 22 0:5 / /var rw - tmpfs tmpfs rw\n";
        assert!(
            decide_data_partition(tmpfs, var)
                .unwrap_err()
                .contains("tmpfs")
        );
        let none = "22 1 0:20 / / rw - rootfs rootfs rw\n";
        assert!(
            decide_data_partition(none, var)
                .unwrap_err()
                .contains("initramfs")
        );
        // The last mount on a point is the one that shows.
        let over = format!("{ok}31 30 0:6 / /var rw - tmpfs tmpfs rw\n");
        assert!(decide_data_partition(&over, var).is_err());
        let spaced = "30 22 253:5 / /my\\040var rw - ext4 /dev/vda5 rw\n";
        assert_eq!(decide_data_partition(spaced, Path::new("/my var")), Ok(()));
    }

    #[test]
    fn promotion_moves_good_documents_in_and_bad_ones_aside() {
        let t = Tree::new("promote");
        let var = t.0.join("var/lib/liken");
        let stamp = Time::from_unix(1_800_000_000);
        assert_eq!(promote(&var, Document::Machine, stamp), Promotion::Nothing);

        t.write("var/lib/liken/staged/machine.yaml", MACHINE.as_bytes());
        t.write(
            "var/lib/liken/staged/machine.yaml.sha256",
            format!("{}  machine.yaml\n", hex(MACHINE.as_bytes())).as_bytes(),
        );
        assert_eq!(promote(&var, Document::Machine, stamp), Promotion::Promoted);
        assert_eq!(
            std::fs::read_to_string(var.join("documents/machine.yaml")).unwrap(),
            MACHINE
        );
        assert_eq!(std::fs::read_dir(var.join("staged")).unwrap().count(), 0);

        // A damaged one is moved aside; the promoted one stays.
        t.write("var/lib/liken/staged/machine.yaml", MACHINE_V2.as_bytes());
        t.write(
            "var/lib/liken/staged/machine.yaml.sha256",
            hex(MACHINE.as_bytes()).as_bytes(),
        );
        match promote(&var, Document::Machine, stamp) {
            Promotion::Rejected { why, moved_to } => {
                assert!(why.contains("damaged"), "{why}");
                assert_eq!(
                    moved_to,
                    vec![
                        var.join("rejected/machine.yaml.2027-01-15T08:00:00Z"),
                        var.join("rejected/machine.yaml.sha256.2027-01-15T08:00:00Z"),
                    ]
                );
                assert_eq!(std::fs::read_to_string(&moved_to[0]).unwrap(), MACHINE_V2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            std::fs::read_to_string(var.join("documents/machine.yaml")).unwrap(),
            MACHINE
        );
        // A second rejection at the same clock reading keeps the first.
        t.write("var/lib/liken/staged/machine.yaml", b"junk");
        match promote(&var, Document::Machine, stamp) {
            Promotion::Rejected { moved_to, .. } => assert_eq!(
                moved_to,
                vec![var.join("rejected/machine.yaml.2027-01-15T08:00:00Z.1")]
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(var.join("rejected")).unwrap().count(), 3);
    }

    fn candidate(name: &str, text: &str) -> Candidate {
        Candidate {
            name: name.to_owned(),
            document: decode::strict::<Machine>(text, name),
        }
    }

    fn machine_text(name: &str, hostname: &str, mac: Option<&str>) -> String {
        let net = mac.map_or(String::new(), |m| {
            format!("\n  network:\n    interfaces:\n      - mac: \"{m}\"\n        dhcp: true")
        });
        format!(
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  hostname: {hostname}{net}\n"
        )
    }

    #[test]
    fn the_running_machine_is_chosen_again_with_the_promoted_one() {
        const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        let layer = [
            candidate(
                "web-1",
                &machine_text("web-1", "old", Some("52:54:00:12:34:56")),
            ),
            candidate("web-2", &machine_text("web-2", "web-2", None)),
        ];
        let promoted: Machine = decode::strict(
            &machine_text("web-1", "new", Some("52:54:00:12:34:56")),
            "p",
        )
        .unwrap();
        match decide_running_machine(None, &[MAC], &layer, Some(&promoted), "d").unwrap() {
            Chosen::Promoted(m) => assert_eq!(m.hostname(), "new"),
            other => panic!("{other:?}"),
        }
        // Promoted for another computer: this one runs its layer document.
        let other: Machine = decode::strict(&machine_text("web-2", "x", None), "p").unwrap();
        assert_eq!(
            decide_running_machine(None, &[MAC], &layer, Some(&other), "d").unwrap(),
            Chosen::Layer {
                file: "web-1".into(),
                machine: layer[0].document.clone().unwrap()
            }
        );
        // A promoted document repairs a broken layer document of its name.
        let broken = [candidate("web-1", "kind: Machine\n")];
        let fixed = Machine::new("web-1", MachineSpec::default());
        assert_eq!(
            decide_running_machine(Some("web-1"), &[], &broken, Some(&fixed), "d").unwrap(),
            Chosen::Promoted(fixed.clone())
        );
        assert!(decide_running_machine(Some("web-1"), &[], &broken, None, "d").is_err());
        // The command line still decides.
        assert!(matches!(
            decide_running_machine(Some("web-2"), &[MAC], &layer, Some(&promoted), "d"),
            Ok(Chosen::Layer { file, .. }) if file == "web-2"
        ));
    }

    const STAMP: Time = Time::from_unix(1_800_000_000);

    #[test]
    fn the_step_promotes_and_publishes_the_running_documents() {
        let t = Tree::new("step");
        t.write("layer/cluster.yaml", CLUSTER.as_bytes());
        t.write("layer/machines/web-1.yaml", MACHINE.as_bytes());
        t.stage(Document::Machine, MACHINE_V2.as_bytes());
        t.stage(Document::Cluster, b"kind: Cluster\n");
        let (outcome, b) = settle(&t.paths(), None, None, STAMP);
        let Outcome::Ok(Some(text)) = &outcome else {
            panic!("{outcome:?}");
        };
        assert!(text.contains("machine web-1 from the promoted"), "{text}");
        assert!(text.contains("cluster home from the layer"), "{text}");
        assert!(text.contains("leader here"), "{text}");
        assert!(text.contains("promoted machine.yaml this boot"), "{text}");
        assert_eq!(b.machine.as_ref().unwrap().hostname(), "web-one");
        assert_eq!(b.cluster.as_ref().unwrap().metadata.name, "home");
        let run = t.0.join("run/liken/documents");
        assert_eq!(
            std::fs::read_to_string(run.join("machine.yaml")).unwrap(),
            MACHINE_V2
        );
        assert_eq!(
            std::fs::read_to_string(run.join("cluster.yaml")).unwrap(),
            CLUSTER
        );
        assert!(
            t.0.join("var/lib/liken/rejected/cluster.yaml.2027-01-15T08:00:00Z")
                .exists()
        );

        // The next boot runs the promoted Machine with nothing staged.
        let (outcome, b) = settle(&t.paths(), None, None, STAMP);
        assert!(matches!(outcome, Outcome::Ok(_)), "{outcome:?}");
        assert_eq!(b.machine.as_ref().unwrap().hostname(), "web-one");
    }

    #[test]
    fn without_the_data_partition_nothing_is_promoted() {
        let t = Tree::new("nodata");
        t.write("layer/cluster.yaml", CLUSTER.as_bytes());
        t.write("layer/machines/web-1.yaml", MACHINE.as_bytes());
        t.stage(Document::Machine, MACHINE_V2.as_bytes());
        let mut paths = t.paths();
        t.write(
            "proc/self/mountinfo",
            b"22 1 0:20 / / rw - rootfs rootfs rw\n",
        );
        paths.var_liken = t.0.join("var/lib/liken");
        let (outcome, b) = settle(&paths, None, None, STAMP);
        let Outcome::Ok(Some(text)) = &outcome else {
            panic!("{outcome:?}");
        };
        assert!(text.contains("nothing promoted"), "{text}");
        assert_eq!(b.machine.as_ref().unwrap().hostname(), "web-1");
        assert!(t.0.join("var/lib/liken/staged/machine.yaml").exists());
        assert!(!t.0.join("var/lib/liken/documents").exists());
        assert_eq!(
            std::fs::read_to_string(t.0.join("run/liken/documents/machine.yaml")).unwrap(),
            MACHINE
        );
    }
}
