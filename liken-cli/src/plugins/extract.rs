//! Finding one file in an image's layers: the program its entrypoint
//! names.
//!
//! An image's filesystem is its layers applied bottom first. Each layer is
//! a tar whose entries add files, and whose whiteouts remove what lower
//! layers had: `dir/.wh.name` removes `dir/name` (and everything under
//! it), and `dir/.wh..wh..opq` hides all of `dir` from below. So the file
//! the image runs is the one in the highest layer that has it, unless a
//! layer above removes it. [`scan_layer`] reads one layer and says which
//! of the three it does; the caller keeps the newest copy.
//!
//! Only a regular file is taken: an entrypoint that is a link, a
//! directory or a device is refused rather than followed, because
//! following a link means resolving paths inside an image, which is where
//! archive tricks live. Layers reach this module only after their digest
//! has been checked ([`super::registry`]).

use std::fmt;
use std::io::{self, Read};

use super::oci::Compression;

/// What one layer does to the wanted path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerVerdict {
    /// The layer holds the file; its bytes went to the sink.
    Found,
    /// The layer removes it (a whiteout of it or of a directory above it).
    Removed,
    /// The layer leaves it as the layers below have it.
    Untouched,
}

/// Why a layer could not be read.
#[derive(Debug)]
pub enum ExtractError {
    /// The archive is not a readable tar (or gzip).
    Archive(io::Error),
    /// The wanted path is not a regular file in the layer.
    NotAFile {
        /// The path.
        path: String,
        /// What it is instead.
        kind: String,
    },
    /// Writing the file out failed.
    Sink(io::Error),
}

impl fmt::Display for ExtractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtractError::Archive(e) => write!(f, "the layer is not a readable archive: {e}"),
            ExtractError::NotAFile { path, kind } => write!(
                f,
                "/{path}, the image's entrypoint, is a {kind}, not a regular file; liken \
                 installs only a plain executable"
            ),
            ExtractError::Sink(e) => write!(f, "writing the CLI out: {e}"),
        }
    }
}

impl std::error::Error for ExtractError {}

/// A tar entry's path without a leading `./` or `/`.
fn normalise(path: &str) -> &str {
    let mut p = path;
    loop {
        if let Some(rest) = p.strip_prefix("./") {
            p = rest;
        } else if let Some(rest) = p.strip_prefix('/') {
            p = rest;
        } else {
            return p.trim_end_matches('/');
        }
    }
}

/// Whether an entry at `path` is a whiteout that removes `want`.
pub fn decide_whiteout(path: &str, want: &str) -> bool {
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    };
    let Some(hidden) = name.strip_prefix(".wh.") else {
        return false;
    };
    let under = |d: &str| d.is_empty() || want.starts_with(&format!("{d}/"));
    if hidden == ".wh..opq" {
        return under(dir);
    }
    let target = if dir.is_empty() {
        hidden.to_owned()
    } else {
        format!("{dir}/{hidden}")
    };
    want == target || want.starts_with(&format!("{target}/"))
}

/// Reads one layer and reports what it does to `want` (a path without a
/// leading `/`). When the layer holds the file, its bytes are handed to
/// `sink` while the archive is read.
pub fn scan_layer(
    layer: impl Read,
    compression: Compression,
    want: &str,
    sink: &mut dyn FnMut(&mut dyn Read) -> io::Result<()>,
) -> Result<LayerVerdict, ExtractError> {
    let reader: Box<dyn Read> = match compression {
        Compression::None => Box::new(layer),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(layer)),
    };
    let mut archive = tar::Archive::new(reader);
    let mut verdict = LayerVerdict::Untouched;
    for entry in archive.entries().map_err(ExtractError::Archive)? {
        let mut entry = entry.map_err(ExtractError::Archive)?;
        let raw = entry.path_bytes();
        let path = String::from_utf8_lossy(&raw).into_owned();
        let path = normalise(&path);
        if path == want {
            let kind = entry.header().entry_type();
            if !(kind.is_file() || kind == tar::EntryType::Continuous) {
                let kind = if kind.is_symlink() {
                    "symbolic link".to_owned()
                } else if kind.is_hard_link() {
                    "hard link".to_owned()
                } else if kind.is_dir() {
                    "directory".to_owned()
                } else {
                    format!("{kind:?} entry")
                };
                return Err(ExtractError::NotAFile {
                    path: want.to_owned(),
                    kind,
                });
            }
            sink(&mut entry).map_err(ExtractError::Sink)?;
            verdict = LayerVerdict::Found;
        } else if verdict != LayerVerdict::Found && decide_whiteout(path, want) {
            verdict = LayerVerdict::Removed;
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o755);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn scan(
        layer: &[u8],
        compression: Compression,
    ) -> (Result<LayerVerdict, ExtractError>, Vec<u8>) {
        let mut got = Vec::new();
        let r = scan_layer(layer, compression, "usr/bin/cli", &mut |r| {
            got.clear();
            r.read_to_end(&mut got).map(|_| ())
        });
        (r, got)
    }

    #[test]
    fn the_file_is_found_plain_and_gzipped() {
        let layer = tar_of(&[("usr/bin/other", b"no"), ("./usr/bin/cli", b"#!cli")]);
        let (v, got) = scan(&layer, Compression::None);
        assert_eq!(v.unwrap(), LayerVerdict::Found);
        assert_eq!(got, b"#!cli");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &layer).unwrap();
        let (v, got) = scan(&gz.finish().unwrap(), Compression::Gzip);
        assert_eq!(v.unwrap(), LayerVerdict::Found);
        assert_eq!(got, b"#!cli");
        let (v, _) = scan(&tar_of(&[("etc/x", b"")]), Compression::None);
        assert_eq!(v.unwrap(), LayerVerdict::Untouched);
    }

    #[test]
    fn whiteouts_remove_the_file_or_a_directory_above_it() {
        for w in [
            "usr/bin/.wh.cli",
            "usr/.wh.bin",
            "usr/bin/.wh..wh..opq",
            ".wh..wh..opq",
        ] {
            assert!(decide_whiteout(w, "usr/bin/cli"), "{w}");
        }
        for w in [
            "usr/bin/.wh.cl",
            "usr/bin/.wh.clix",
            "opt/.wh..wh..opq",
            "usr/bin/cli",
        ] {
            assert!(!decide_whiteout(w, "usr/bin/cli"), "{w}");
        }
        let (v, _) = scan(&tar_of(&[("usr/.wh.bin", b"")]), Compression::None);
        assert_eq!(v.unwrap(), LayerVerdict::Removed);
        // An opaque directory with the file in the same layer keeps it.
        let (v, got) = scan(
            &tar_of(&[("usr/bin/.wh..wh..opq", b""), ("usr/bin/cli", b"new")]),
            Compression::None,
        );
        assert_eq!(
            (v.unwrap(), got.as_slice()),
            (LayerVerdict::Found, &b"new"[..])
        );
    }

    #[test]
    fn a_link_or_garbage_is_refused() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "usr/bin/cli", "/bin/sh").unwrap();
        let (v, _) = scan(&b.into_inner().unwrap(), Compression::None);
        let msg = v.unwrap_err().to_string();
        assert!(msg.contains("symbolic link"), "{msg}");
        let (v, _) = scan(&[0x1f, 0x8b, 1, 2, 3], Compression::Gzip);
        assert!(matches!(v, Err(ExtractError::Archive(_))));
    }
}
