//! The files init and the machine operator hand each other.
//!
//! The two programs meet in two places besides the control socket
//! ([`crate::control`]): the data partition, where the operator stages a
//! changed document for init to promote at the next boot, and /run/liken,
//! where init publishes what this boot is running. Both sides name these
//! paths and read the checksum format from this one module, so the
//! writer and the reader cannot drift apart.
//!
//! ```text
//! /var/lib/liken/                      VAR_LIKEN (the data partition)
//!   staged/machine.yaml                 written by the operator, document first,
//!   staged/machine.yaml.sha256          then its checksum (render_checksum)
//!   staged/cluster.yaml{,.sha256}
//!   documents/{machine,cluster}.yaml    promoted by init at boot
//!   rejected/<name>.<time>              what init refused, for a person
//!   releases/<version>/                 downloaded releases (control::RELEASES_DIR)
//! /run/liken/                          RUN_LIKEN (this boot only)
//!   boot.json                           the boot record (crate::BootRecord)
//!   network.json                        the running network (crate::network::NetworkFacts),
//!                                       rewritten whenever it changes
//!   documents/{machine,cluster}.yaml    the documents this boot runs
//!   init.sock                           the control socket (control::SOCKET_PATH)
//! ```
//!
//! The staging protocol: the operator writes `<name>` atomically
//! (temporary file, fsync, rename), then `<name>.sha256` the same way.
//! The checksum is written last, so a checksum always names a finished
//! document; init refuses a document without one, a checksum without its
//! document, and bytes that do not hash to their checksum.
//!
//! Paths here are absolute on the machine; programs that run against a
//! scratch root in tests join them below that root themselves.

use crate::digest::{DigestError, Sha256Hex};

/// liken's state on the data partition.
pub const VAR_LIKEN: &str = "/var/lib/liken";
/// Below [`VAR_LIKEN`]: what the machine operator staged.
pub const STAGED_DIR: &str = "staged";
/// Below [`VAR_LIKEN`]: the documents init promoted.
pub const DOCUMENTS_DIR: &str = "documents";
/// Below [`VAR_LIKEN`]: staged documents init refused.
pub const REJECTED_DIR: &str = "rejected";
/// Below [`VAR_LIKEN`]: downloaded releases, one directory per version
/// (the same path as [`crate::control::RELEASES_DIR`]).
pub const RELEASES_DIR: &str = "releases";

/// What init publishes for this boot.
pub const RUN_LIKEN: &str = "/run/liken";
/// Below [`RUN_LIKEN`]: the directory of the facts init publishes for
/// the machine operator. A directory of their own, so the operator's pod
/// mounts it (and the documents, the socket and its own records) rather
/// than all of /run/liken, which also holds the deployment layer, the
/// ESP's mount point and k3s's log. A directory and not the files
/// themselves, because each file is replaced by a rename, which a
/// bind-mounted file would never see.
pub const FACTS_DIR: &str = "facts";
/// Below [`RUN_LIKEN`]: the boot record, [`crate::BootRecord`] as JSON.
pub const BOOT_RECORD: &str = "facts/boot.json";
/// Below [`RUN_LIKEN`]: the running network,
/// [`crate::network::NetworkFacts`] as JSON, replaced atomically each
/// time init sees it change.
pub const NETWORK_FACTS: &str = "facts/network.json";
/// Below [`RUN_LIKEN`]: the documents this boot runs, byte for byte.
pub const RUNNING_DIR: &str = "documents";

/// The suffix of a staged document's checksum file.
pub const CHECKSUM_SUFFIX: &str = ".sha256";

/// One of the two documents a machine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Document {
    /// This computer's Machine.
    Machine,
    /// The fleet's Cluster.
    Cluster,
}

impl Document {
    /// Both, in the order init promotes them.
    pub const ALL: [Document; 2] = [Document::Machine, Document::Cluster];

    /// Its file name in staged/, documents/ and /run/liken/documents.
    pub fn file_name(self) -> &'static str {
        match self {
            Document::Machine => "machine.yaml",
            Document::Cluster => "cluster.yaml",
        }
    }

    /// The name of its checksum file in staged/.
    pub fn checksum_name(self) -> &'static str {
        match self {
            Document::Machine => "machine.yaml.sha256",
            Document::Cluster => "cluster.yaml.sha256",
        }
    }

    /// The key that names it in [`crate::BootRecord::documents`].
    pub fn record_key(self) -> &'static str {
        match self {
            Document::Machine => "machine",
            Document::Cluster => "cluster",
        }
    }
}

impl std::fmt::Display for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.file_name())
    }
}

/// The checksum file's text for a document's bytes: the hex digest, two
/// spaces and the file name, as `sha256sum` writes it, so a person can
/// check a staged document with `sha256sum -c`.
pub fn render_checksum(digest: &Sha256Hex, file_name: &str) -> String {
    format!("{digest}  {file_name}\n")
}

/// Why a checksum file is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChecksumError {
    /// The file is not UTF-8 text.
    NotText,
    /// The file is empty.
    Empty,
    /// The first word is not a lower-case hex SHA-256.
    Digest(DigestError),
    /// More than the digest and this file's name.
    Trailing {
        /// The file name the checksum may name.
        file_name: String,
    },
}

impl std::fmt::Display for ChecksumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChecksumError::NotText => f.write_str("it is not text"),
            ChecksumError::Empty => f.write_str("it is empty"),
            ChecksumError::Digest(e) => write!(f, "{e}"),
            ChecksumError::Trailing { file_name } => write!(
                f,
                "it should hold the hex digest alone or `<hex>  {file_name}`"
            ),
        }
    }
}

impl std::error::Error for ChecksumError {}

/// Reads a checksum file: 64 lower-case hex digits, optionally followed
/// by the file name as `sha256sum` writes it (`<hex>  <name>`, or
/// `<hex> *<name>`), nothing else.
pub fn parse_checksum(text: &[u8], file_name: &str) -> Result<Sha256Hex, ChecksumError> {
    let text = std::str::from_utf8(text).map_err(|_| ChecksumError::NotText)?;
    let mut words = text.split_whitespace();
    let hex = words.next().ok_or(ChecksumError::Empty)?;
    let digest = Sha256Hex::parse(hex).map_err(ChecksumError::Digest)?;
    match (words.next(), words.next()) {
        (None, _) => Ok(digest),
        (Some(name), None) if name.strip_prefix('*').unwrap_or(name) == file_name => Ok(digest),
        _ => Err(ChecksumError::Trailing {
            file_name: file_name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256;

    #[test]
    fn a_rendered_checksum_parses_back_and_reads_like_sha256sum() {
        let d = sha256(b"kind: Machine\n");
        let text = render_checksum(&d, "machine.yaml");
        assert_eq!(text, format!("{d}  machine.yaml\n"));
        assert_eq!(
            parse_checksum(text.as_bytes(), "machine.yaml"),
            Ok(d.clone())
        );
        assert_eq!(
            parse_checksum(d.to_string().as_bytes(), "machine.yaml"),
            Ok(d.clone())
        );
        assert_eq!(
            parse_checksum(format!("{d} *machine.yaml").as_bytes(), "machine.yaml"),
            Ok(d.clone())
        );
    }

    #[test]
    fn a_checksum_for_another_file_or_with_more_words_is_refused() {
        let d = sha256(b"x");
        for bad in [
            format!("{d}  cluster.yaml"),
            format!("{d}  machine.yaml extra"),
        ] {
            assert_eq!(
                parse_checksum(bad.as_bytes(), "machine.yaml"),
                Err(ChecksumError::Trailing {
                    file_name: "machine.yaml".into()
                }),
                "{bad}"
            );
        }
        assert_eq!(
            parse_checksum(b"", "machine.yaml"),
            Err(ChecksumError::Empty)
        );
        assert_eq!(
            parse_checksum(b"\xff", "machine.yaml"),
            Err(ChecksumError::NotText)
        );
        assert!(matches!(
            parse_checksum(b"abc", "machine.yaml"),
            Err(ChecksumError::Digest(_))
        ));
    }

    #[test]
    fn the_checksum_name_is_the_file_name_and_the_suffix() {
        for d in Document::ALL {
            assert_eq!(
                d.checksum_name(),
                format!("{}{CHECKSUM_SUFFIX}", d.file_name())
            );
        }
        assert_eq!(
            format!("{VAR_LIKEN}/{RELEASES_DIR}"),
            crate::control::RELEASES_DIR
        );
    }
}
