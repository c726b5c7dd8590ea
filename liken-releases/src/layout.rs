//! Where things live in a channel directory.
//!
//! A channel is a plain directory that any web server can share:
//!
//! ```text
//! <channel>/channel.yaml            which version is latest
//! <channel>/<version>/release.yaml  the release document
//! <channel>/<version>/<file>        each artifact it names
//! ```
//!
//! `bundle` takes its inputs in a fixed order and gives each a fixed
//! artifact name and file name, so every release has the same shape and a
//! netboot script can name `<source>/<version>/vmlinuz` without reading
//! release.yaml first. The one table of that mapping is [`INPUTS`].
//!
//! Microcode is the one optional input: Debian ships the CPU vendors'
//! microcode only in its non-free-firmware archive area, which a build
//! machine may not have, and a machine boots without it (the kernel keeps
//! the firmware's microcode). So it is given by flag, `-microcode`, and
//! a release without it has no `microcode` artifact; the boot entries
//! leave its initrd out.
//!
//! Artifact file names from a downloaded release.yaml are [`FileName`]s,
//! which cannot hold a separator; [`artifact_path`] checks the joined path
//! as well, so a future change to `FileName` cannot silently open a way
//! out of the release directory.

use std::path::{Component, Path, PathBuf};

use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_CLI, ARTIFACT_GRUB_BOOT, ARTIFACT_GRUB_CORE, ARTIFACT_KERNEL,
    ARTIFACT_LICENSES, ARTIFACT_MICROCODE, ARTIFACT_SYSTEM, ARTIFACT_SYSTEMD_BOOT,
};
use liken_api::{FileName, Version};

/// One of bundle's inputs: what it is and where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    /// The artifact name in release.yaml.
    pub name: &'static str,
    /// The file name inside the release directory.
    pub file: &'static str,
    /// Whether the artifact is written into a boot slot, so it counts
    /// against the slot size.
    pub slot_bound: bool,
    /// What the input is, for messages.
    pub what: &'static str,
    /// The flag that gives an optional input (`-microcode`); `None` for
    /// the required inputs, which are positional.
    pub flag: Option<&'static str>,
}

/// Bundle's inputs: the required ones in the order the command line
/// takes them, each optional one by its flag.
pub const INPUTS: [Input; 9] = [
    Input {
        name: ARTIFACT_KERNEL,
        file: "vmlinuz",
        slot_bound: true,
        what: "the kernel",
        flag: None,
    },
    Input {
        name: ARTIFACT_SYSTEM,
        file: "liken.sqfs",
        slot_bound: true,
        what: "the squashfs system image",
        flag: None,
    },
    Input {
        name: ARTIFACT_BOOT,
        file: "boot.cpio",
        slot_bound: true,
        what: "the boot initramfs",
        flag: None,
    },
    Input {
        name: ARTIFACT_MICROCODE,
        file: "microcode.cpio",
        slot_bound: true,
        what: "the microcode initramfs",
        flag: Some("microcode"),
    },
    Input {
        name: ARTIFACT_CLI,
        file: "liken",
        slot_bound: false,
        what: "the liken CLI",
        flag: None,
    },
    Input {
        name: ARTIFACT_SYSTEMD_BOOT,
        file: "systemd-boot.efi",
        slot_bound: false,
        what: "systemd-boot's EFI binary",
        flag: None,
    },
    Input {
        name: ARTIFACT_GRUB_BOOT,
        file: "grub-boot.img",
        slot_bound: false,
        what: "GRUB's boot.img",
        flag: None,
    },
    Input {
        name: ARTIFACT_GRUB_CORE,
        file: "grub-core.img",
        slot_bound: false,
        what: "GRUB's core.img",
        flag: None,
    },
    Input {
        name: ARTIFACT_LICENSES,
        file: "licenses.md",
        slot_bound: false,
        what: "the licenses",
        flag: None,
    },
];

/// Whether the artifact of this name is written into a boot slot.
pub fn is_slot_bound(name: &str) -> bool {
    INPUTS.iter().any(|i| i.slot_bound && i.name == name)
}

/// `<channel>/<version>`.
pub fn release_dir(channel: &Path, version: &Version) -> PathBuf {
    channel.join(version.as_str())
}

/// The suffix of a download in progress: `.<file>.partial`.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// The name a download of `file` has while in progress: `.<file>.partial`,
/// a dot-name, so `serve` (which shares no dot-name) never hands out
/// unverified bytes, and a listing shows it apart from the release.
pub fn partial_name(file: &str) -> String {
    format!(".{file}{PARTIAL_SUFFIX}")
}

/// A file name as one URL path segment: RFC 3986's unreserved characters
/// as they are, every other byte percent-encoded, so any name release.yaml
/// may hold makes a valid request (serve decodes each segment back).
pub fn url_segment(name: &str) -> String {
    use std::fmt::Write;
    name.bytes()
        .fold(String::with_capacity(name.len()), |mut out, b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(b));
            } else {
                let _ = write!(out, "%{b:02X}");
            }
            out
        })
}

/// The path of an artifact inside its release directory, or `None` when
/// the joined path would not be a direct child of `dir`.
pub fn artifact_path(dir: &Path, file: &FileName) -> Option<PathBuf> {
    let mut parts = Path::new(file.as_str()).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(name)), None) if name == file.as_str() => {}
        _ => return None,
    }
    let joined = dir.join(file.as_str());
    (joined.parent() == Some(dir)).then_some(joined)
}

/// The download-in-progress path beside an artifact's final path.
pub fn partial_path(final_path: &Path) -> PathBuf {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(partial_name(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::Kind;
    use liken_api::release::{Artifact, Release};
    use liken_api::validate::Validate;

    #[test]
    fn the_table_makes_a_valid_release() {
        let artifacts = INPUTS
            .iter()
            .map(|i| Artifact {
                name: i.name.to_owned(),
                file: FileName::parse(i.file).unwrap(),
                sha256: liken_api::Sha256Hex::parse(&"a".repeat(64)).unwrap(),
                size: 1,
            })
            .collect();
        let r = Release::new(Version::parse("2026.07.11-001").unwrap(), artifacts, vec![]);
        assert!(r.validate().is_empty(), "{:?}", r.validate());
        assert_eq!(r.kind(), "Release");
        let bound: Vec<&str> = INPUTS
            .iter()
            .filter(|i| i.slot_bound)
            .map(|i| i.name)
            .collect();
        assert_eq!(bound, ["kernel", "system", "boot", "microcode"]);
        assert!(is_slot_bound("system") && !is_slot_bound("cli"));
        let optional: Vec<&str> = INPUTS.iter().filter_map(|i| i.flag).collect();
        assert_eq!(optional, ["microcode"]);
    }

    #[test]
    fn artifact_paths_stay_in_their_directory() {
        let dir = Path::new("/srv/channel/2026.07.11-001");
        let ok = FileName::parse("vmlinuz").unwrap();
        assert_eq!(artifact_path(dir, &ok).unwrap(), dir.join("vmlinuz"));
        assert_eq!(
            partial_path(&dir.join("vmlinuz")),
            dir.join(".vmlinuz.partial")
        );
        // FileName already refuses these; the join check must agree.
        for bad in ["..", ".", "a/b"] {
            assert!(FileName::parse(bad).is_err());
        }
        assert_eq!(url_segment("liken.sqfs"), "liken.sqfs");
        assert_eq!(url_segment("a b%/é"), "a%20b%25%2F%C3%A9");
        let dotted = FileName::parse("..hidden").unwrap();
        assert_eq!(artifact_path(dir, &dotted).unwrap(), dir.join("..hidden"));
    }
}
