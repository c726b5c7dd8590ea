//! The boot the bootloader would make next, decided without it: which
//! entry systemd-boot picks (or which slot grub.cfg picks), with what
//! kernel, initrds and command line, and how the try counter changes
//! when that boot starts.
//!
//! init uses this to reboot by kexec: it loads what the bootloader would
//! have loaded and counts the try exactly as the bootloader would have,
//! so a release on trial falls back the same way whether its boots are
//! reached through the firmware or not. Everything here is pure; init
//! reads the files and carries the decision out.
//!
//! systemd-boot's choice (boot.c of systemd 252, Debian 12's:
//! `config_entry_compare` sorts, then `default liken-*` takes the first
//! entry whose id matches): entries with no tries left go last; entries
//! with a `sort-key` before those without, ordered by sort-key, then by
//! `version`, newest first; then by id, newest first; then, for counted
//! entries, more tries left first and fewer tries done first. liken's
//! entries all carry `sort-key liken`, so in practice: a good entry
//! before a bad one, the newer release first.
//!
//! grub.cfg's choice is [`crate::bootloader::render_grub_cfg`]'s script,
//! restated: the preferred slot (`liken_slot`, `a` when unset) unless its
//! tries are `0` and the other slot has a kernel; then one try spent.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use crate::boot::Slot;
use crate::bootloader::{EntryName, GRUB_PREFERRED_VAR, INITIAL_TRIES, LAYER_PATH, grub_tries_var};

/// The kernel argument init adds to a boot it reached by kexec: the
/// entry it booted (`liken-b+3.conf`, the name before the try was
/// counted, as systemd-boot sets LoaderEntrySelected), or `grub`. The
/// EFI variables still name the boot before the kexec, so the next
/// init learns its entry from here instead.
pub const KEXEC_ARG: &str = "liken.kexec";

/// [`KEXEC_ARG`]'s value for a boot GRUB would have made.
pub const KEXEC_GRUB: &str = "grub";

/// What a next boot cannot be decided from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextBootError {
    /// No liken entry (UEFI) or no slot with a kernel (GRUB).
    NothingToBoot,
    /// An entry's text lacks a line systemd-boot needs.
    Entry {
        /// The entry's file name.
        name: String,
        /// What is missing or wrong.
        why: String,
    },
    /// grub.cfg has no `linux` line liken wrote.
    GrubCfg,
}

impl fmt::Display for NextBootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NextBootError::NothingToBoot => {
                f.write_str("the bootloader has no liken entry with a kernel to boot")
            }
            NextBootError::Entry { name, why } => {
                write!(f, "loader entry {name}: {why}; write the release again")
            }
            NextBootError::GrubCfg => f.write_str(
                "grub/grub.cfg has no `linux /liken/$boot/vmlinuz` line; reinstall the machine",
            ),
        }
    }
}

impl std::error::Error for NextBootError {}

/// What a boot loads, with paths relative to the ESP's root (no
/// leading `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootFiles {
    /// The kernel.
    pub linux: String,
    /// The initrds, in the order they are loaded (and concatenated).
    pub initrds: Vec<String>,
    /// The kernel command line, as the bootloader would pass it.
    pub options: String,
}

/// A type #1 entry's fields that decide its place and its boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file name in loader/entries.
    pub file_name: String,
    /// Its parsed name (slot and counter).
    pub name: EntryName,
    /// `sort-key`, if any.
    pub sort_key: Option<String>,
    /// `version`, if any.
    pub version: Option<String>,
    /// What it boots.
    pub files: BootFiles,
}

fn esp_path(p: &str) -> String {
    p.trim_start_matches(['/', '\\']).replace('\\', "/")
}

/// Reads a type #1 entry as systemd-boot does: `key value` lines,
/// comments and blank lines skipped, `options` lines joined by a space,
/// one `initrd` per line in order. `None` for a file that is not a
/// liken entry by name.
pub fn parse_entry(file_name: &str, text: &str) -> Option<Result<Entry, NextBootError>> {
    let name = EntryName::parse(file_name).ok()?;
    let mut sort_key = None;
    let mut version = None;
    let mut linux = None;
    let mut initrds = Vec::new();
    let mut options: Vec<&str> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once(char::is_whitespace) {
            Some((k, v)) => (k, v.trim()),
            None => (line, ""),
        };
        match key {
            "sort-key" => sort_key = Some(value.to_owned()),
            "version" => version = Some(value.to_owned()),
            "linux" => linux = Some(esp_path(value)),
            "initrd" => initrds.push(esp_path(value)),
            "options" if !value.is_empty() => options.push(value),
            _ => {}
        }
    }
    let Some(linux) = linux.filter(|l| !l.is_empty()) else {
        return Some(Err(NextBootError::Entry {
            name: file_name.to_owned(),
            why: "no `linux` line".into(),
        }));
    };
    Some(Ok(Entry {
        file_name: file_name.to_owned(),
        name,
        sort_key,
        version,
        files: BootFiles {
            linux,
            initrds,
            options: options.join(" "),
        },
    }))
}

/// systemd's `strverscmp_improved` for the strings liken writes
/// (versions like `2026.12.03-001` and entry ids): runs of digits
/// compare as numbers, everything else byte by byte, and `-` sorts
/// before any other character (a pre-release marker).
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let si = i;
                while a.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                let sj = j;
                while b.get(j).is_some_and(u8::is_ascii_digit) {
                    j += 1;
                }
                let da = strip_zeros(&a[si..i]);
                let db = strip_zeros(&b[sj..j]);
                let o = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if o != Ordering::Equal {
                    return o;
                }
            }
            (Some(&x), Some(&y)) => {
                if x != y {
                    return match (x, y) {
                        (b'-', _) => Ordering::Less,
                        (_, b'-') => Ordering::Greater,
                        _ => x.cmp(&y),
                    };
                }
                i += 1;
                j += 1;
            }
        }
    }
}

fn strip_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|c| **c == b'0').count();
    &d[n..]
}

fn compare_entries(a: &Entry, b: &Entry) -> Ordering {
    let opt = |x: &Option<String>, y: &Option<String>, f: fn(&str, &str) -> Ordering| match (x, y) {
        (Some(x), Some(y)) => f(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    a.name
        .is_bad()
        .cmp(&b.name.is_bad())
        .then_with(|| opt(&a.sort_key, &b.sort_key, |x, y| x.cmp(y)))
        .then_with(|| {
            if a.sort_key.is_some() && b.sort_key.is_some() {
                opt(&a.version, &b.version, |x, y| version_cmp(y, x))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| {
            version_cmp(
                &b.file_name.to_ascii_lowercase(),
                &a.file_name.to_ascii_lowercase(),
            )
        })
        .then_with(|| match (a.name.tries_left, b.name.tries_left) {
            (Some(x), Some(y)) => y
                .cmp(&x)
                .then_with(|| a.name.tries_done.cmp(&b.name.tries_done)),
            _ => Ordering::Equal,
        })
}

/// The boot systemd-boot makes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UefiNext {
    /// The entry it picks.
    pub entry: Entry,
    /// The rename that counts the try (`liken-b+3.conf` to
    /// `liken-b+2-1.conf`); `None` for a blessed entry.
    pub count: Option<(String, String)>,
}

/// Decides systemd-boot's next boot among liken's entries
/// (`default liken-*`, no one-shot or default EFI variable set).
pub fn decide_uefi_next(mut entries: Vec<Entry>) -> Result<UefiNext, NextBootError> {
    entries.sort_by(compare_entries);
    let entry = entries
        .into_iter()
        .next()
        .ok_or(NextBootError::NothingToBoot)?;
    let count = entry
        .name
        .tries_left
        .map(|_| (entry.file_name.clone(), entry.name.after_try().file_name()));
    Ok(UefiNext { entry, count })
}

/// The boot grub.cfg makes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrubNext {
    /// The slot it boots.
    pub slot: Slot,
    /// grubenv after the try is spent; `None` when grub.cfg saves
    /// nothing (the slot is blessed).
    pub env: Option<BTreeMap<String, String>>,
}

/// Decides grub.cfg's next boot from grubenv's variables and which
/// slots have a kernel on the ESP (`has_kernel(slot)`).
pub fn decide_grub_next(
    env: &BTreeMap<String, String>,
    has_kernel: impl Fn(Slot) -> bool,
) -> Result<GrubNext, NextBootError> {
    let preferred = match env.get(GRUB_PREFERRED_VAR).map(String::as_str) {
        Some("b") => Slot::B,
        _ => Slot::A,
    };
    let tries = |s: Slot| env.get(&grub_tries_var(s)).cloned().unwrap_or_default();
    let mut slot = preferred;
    if tries(slot) == "0" && has_kernel(slot.other()) {
        slot = slot.other();
    }
    if !has_kernel(slot) {
        return Err(NextBootError::NothingToBoot);
    }
    let left = tries(slot);
    if left.is_empty() {
        return Ok(GrubNext { slot, env: None });
    }
    // grub.cfg counts down by cases from INITIAL_TRIES; any other value
    // is saved back unchanged.
    let spent = match left.parse::<u32>() {
        Ok(n) if (1..=INITIAL_TRIES).contains(&n) => (n - 1).to_string(),
        _ => left,
    };
    let mut next = env.clone();
    next.insert(grub_tries_var(slot), spent);
    Ok(GrubNext {
        slot,
        env: Some(next),
    })
}

/// What grub.cfg boots for `slot`: the kernel and arguments of its
/// `linux /liken/$boot/vmlinuz ...` line with `$boot` filled in, and
/// the initrds of its rule (microcode.cpio when `microcode`, boot.cpio,
/// the layer).
pub fn grub_files(grub_cfg: &str, slot: Slot, microcode: bool) -> Result<BootFiles, NextBootError> {
    let dir = slot.esp_dir();
    let line = grub_cfg
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("linux /liken/$boot/"))
        .ok_or(NextBootError::GrubCfg)?;
    let mut words = line.split_whitespace().skip(1);
    let linux = words.next().ok_or(NextBootError::GrubCfg)?;
    let options: Vec<String> = words.map(|w| w.replace("$boot", dir)).collect();
    let mut initrds = Vec::new();
    if microcode {
        initrds.push(format!("liken/{dir}/microcode.cpio"));
    }
    initrds.push(format!("liken/{dir}/boot.cpio"));
    initrds.push(LAYER_PATH.to_owned());
    Ok(BootFiles {
        linux: esp_path(&linux.replace("$boot", dir)),
        initrds,
        options: options.join(" "),
    })
}

/// The command line a kexec passes: the bootloader's, and [`KEXEC_ARG`]
/// naming the entry (or `grub`).
pub fn kexec_cmdline(options: &str, booted: &str) -> String {
    let options = options.trim();
    if options.is_empty() {
        format!("{KEXEC_ARG}={booted}")
    } else {
        format!("{options} {KEXEC_ARG}={booted}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootloader::{EntryParams, GrubParams, render_entry, render_grub_cfg};
    use crate::version::Version;

    fn entry(file: &str, version: &str) -> Entry {
        let slot = EntryName::parse(file).unwrap().slot;
        let text = render_entry(&EntryParams {
            slot,
            version: Version::parse(version).unwrap(),
            microcode: false,
            console_args: vec!["console=ttyS0".into()],
            extra_args: vec![],
            verity: None,
        });
        parse_entry(file, &text).unwrap().unwrap()
    }

    #[test]
    fn an_entry_reads_as_systemd_boot_reads_it() {
        let text = render_entry(&EntryParams {
            slot: Slot::B,
            version: Version::parse("2026.12.03-001").unwrap(),
            microcode: true,
            console_args: vec!["console=ttyS0,115200".into()],
            extra_args: vec!["quiet".into()],
            verity: None,
        });
        let e = parse_entry("liken-b+3.conf", &text).unwrap().unwrap();
        assert_eq!(e.sort_key.as_deref(), Some("liken"));
        assert_eq!(e.version.as_deref(), Some("2026.12.03-001"));
        assert_eq!(
            e.files,
            BootFiles {
                linux: "liken/b/vmlinuz".into(),
                initrds: vec![
                    "liken/b/microcode.cpio".into(),
                    "liken/b/boot.cpio".into(),
                    "liken/layer.cpio".into()
                ],
                options: "liken.slot=b panic=10 console=ttyS0,115200 quiet".into(),
            }
        );
        let joined = parse_entry(
            "liken-a.conf",
            "# c\n\nlinux \\liken\\a\\vmlinuz\noptions one\noptions  two\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(joined.files.linux, "liken/a/vmlinuz");
        assert_eq!(joined.files.options, "one two");
        assert!(parse_entry("other.conf", "linux /x").is_none());
        assert!(matches!(
            parse_entry("liken-a.conf", "options x\n"),
            Some(Err(NextBootError::Entry { .. }))
        ));
    }

    #[test]
    fn systemd_boot_order_newest_good_entry_first() {
        // A fresh release on trial wins over the blessed older one.
        let next = decide_uefi_next(vec![
            entry("liken-a.conf", "2026.12.02-001"),
            entry("liken-b+3.conf", "2026.12.03-001"),
        ])
        .unwrap();
        assert_eq!(next.entry.file_name, "liken-b+3.conf");
        assert_eq!(
            next.count,
            Some(("liken-b+3.conf".into(), "liken-b+2-1.conf".into()))
        );
        // Its tries spent, the older blessed one boots, uncounted.
        let next = decide_uefi_next(vec![
            entry("liken-b+0-3.conf", "2026.12.03-001"),
            entry("liken-a.conf", "2026.12.02-001"),
        ])
        .unwrap();
        assert_eq!(next.entry.file_name, "liken-a.conf");
        assert_eq!(next.count, None);
        // Only bad entries: the first bad one still boots, its counter
        // stays at zero and counts one more done, as systemd-boot does.
        let next = decide_uefi_next(vec![entry("liken-b+0-3.conf", "2026.12.03-001")]).unwrap();
        assert_eq!(
            next.count,
            Some(("liken-b+0-3.conf".into(), "liken-b+0-4.conf".into()))
        );
        // Same version in both slots: the id decides, b first.
        let next = decide_uefi_next(vec![
            entry("liken-a.conf", "2026.12.02-001"),
            entry("liken-b.conf", "2026.12.02-001"),
        ])
        .unwrap();
        assert_eq!(next.entry.file_name, "liken-b.conf");
        assert_eq!(decide_uefi_next(vec![]), Err(NextBootError::NothingToBoot));
    }

    #[test]
    fn versions_compare_as_systemd_does() {
        assert_eq!(
            version_cmp("2026.12.10-001", "2026.12.9-001"),
            Ordering::Greater
        );
        assert_eq!(
            version_cmp("2026.12.03-002", "2026.12.03-001"),
            Ordering::Greater
        );
        assert_eq!(version_cmp("1.0", "1.0"), Ordering::Equal);
        assert_eq!(version_cmp("1.0-rc1", "1.0.1"), Ordering::Less);
        assert_eq!(version_cmp("007", "7"), Ordering::Equal);
        assert_eq!(version_cmp("1", "1a"), Ordering::Less);
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn grub_spends_a_try_as_grub_cfg_does() {
        let both = |_: Slot| true;
        // A new release in b: preferred, 3 → 2.
        let e = env(&[("liken_slot", "b"), ("liken_b_tries", "3")]);
        let next = decide_grub_next(&e, both).unwrap();
        assert_eq!(next.slot, Slot::B);
        assert_eq!(next.env.unwrap()["liken_b_tries"], "2");
        // Spent: the other slot, blessed, nothing saved.
        let e = env(&[("liken_slot", "b"), ("liken_b_tries", "0")]);
        assert_eq!(
            decide_grub_next(&e, both).unwrap(),
            GrubNext {
                slot: Slot::A,
                env: None
            }
        );
        // Spent with no other kernel: it boots anyway, 0 saved again.
        let e = env(&[("liken_slot", "b"), ("liken_b_tries", "0")]);
        let next = decide_grub_next(&e, |s| s == Slot::B).unwrap();
        assert_eq!(next.slot, Slot::B);
        assert_eq!(next.env.unwrap()["liken_b_tries"], "0");
        // Unset preference means a.
        let next = decide_grub_next(&BTreeMap::new(), both).unwrap();
        assert_eq!((next.slot, next.env), (Slot::A, None));
        assert_eq!(
            decide_grub_next(&BTreeMap::new(), |_| false),
            Err(NextBootError::NothingToBoot)
        );
    }

    #[test]
    fn grub_files_come_from_the_grub_cfg_liken_writes() {
        let cfg = render_grub_cfg(&GrubParams {
            console_args: vec!["console=ttyS0".into()],
            extra_args: vec!["liken.bless-deadline=60".into()],
        });
        let files = grub_files(&cfg, Slot::B, false).unwrap();
        assert_eq!(files.linux, "liken/b/vmlinuz");
        assert_eq!(
            files.initrds,
            vec!["liken/b/boot.cpio".to_owned(), "liken/layer.cpio".into()]
        );
        assert_eq!(
            files.options,
            "liken.slot=b panic=10 console=ttyS0 liken.bless-deadline=60"
        );
        assert_eq!(
            grub_files(&cfg, Slot::A, true).unwrap().initrds[0],
            "liken/a/microcode.cpio"
        );
        assert_eq!(
            grub_files("set x=1\n", Slot::A, false),
            Err(NextBootError::GrubCfg)
        );
    }

    #[test]
    fn the_kexec_cmdline_names_the_entry() {
        assert_eq!(
            kexec_cmdline("liken.slot=b panic=10 ", "liken-b+3.conf"),
            "liken.slot=b panic=10 liken.kexec=liken-b+3.conf"
        );
        assert_eq!(kexec_cmdline("", KEXEC_GRUB), "liken.kexec=grub");
    }
}
