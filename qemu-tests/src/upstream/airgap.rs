//! The airgap images: what liken-init linked into `agent/images`,
//! imported into containerd's `k8s.io` namespace, where the CRI finds
//! them.
//!
//! k3s walks `agent/images` once containerd answers and imports every
//! file it supports (k3s-io/k3s pkg/agent/containerd/containerd.go,
//! `PreloadImages`, and watcher.go's `isFileSupported`: the archive
//! suffixes of rancher/wharfie's pkg/tarfile, and `.txt` lists of image
//! names it pulls), decompressing by suffix and calling containerd's
//! import with all platforms, in the `k8s.io` namespace. The launcher
//! imports the plain `.tar` archives (OCI or docker-save) with the real
//! `ctr images import --all-platforms`; a compressed archive or a `.txt`
//! list is named and left, since ctr does not decompress and nothing
//! here may pull. k3s also labels what it imported as pinned so the
//! kubelet's image garbage collection keeps it; the launcher does not.

use std::path::{Path, PathBuf};

/// What to do with one file of `agent/images`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Import it with ctr.
    Import,
    /// A form k3s imports that the launcher does not (why).
    NotHere(&'static str),
    /// Not an image archive k3s would read.
    Ignore,
}

/// Decides by the file's name, as k3s does.
pub fn decide(name: &str) -> Verdict {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with('.') {
        return Verdict::Ignore;
    }
    if lower.ends_with(".tar") {
        return Verdict::Import;
    }
    for s in [
        ".tar.lz4", ".tar.bz2", ".tbz", ".tar.gz", ".tgz", ".tar.zst", ".tzst",
    ] {
        if lower.ends_with(s) {
            return Verdict::NotHere("a compressed archive (k3s decompresses it; ctr does not)");
        }
    }
    if lower.ends_with(".txt") {
        return Verdict::NotHere("a list of images to pull (nothing here may pull)");
    }
    Verdict::Ignore
}

/// The files of `dir` with their verdicts, in name order.
pub fn survey(dir: &Path) -> Vec<(PathBuf, Verdict)> {
    let mut out: Vec<(PathBuf, Verdict)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let v = decide(&e.file_name().to_string_lossy());
                    (e.path(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_as_k3s_names_them() {
        assert_eq!(decide("liken-machine-operator.tar"), Verdict::Import);
        assert_eq!(decide("IMAGES.TAR"), Verdict::Import);
        assert!(matches!(
            decide("k3s-airgap-images-amd64.tar.zst"),
            Verdict::NotHere(_)
        ));
        assert!(matches!(decide("list.txt"), Verdict::NotHere(_)));
        assert_eq!(decide(".hidden.tar"), Verdict::Ignore);
        assert_eq!(decide("readme.md"), Verdict::Ignore);
    }
}
