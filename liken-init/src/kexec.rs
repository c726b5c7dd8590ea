//! Rebooting by kexec: the next boot's kernel started straight from
//! this one, the firmware skipped, the bootloader's try counting kept.
//!
//! On a server most of a reboot is firmware (POST, memory training,
//! option ROMs). When a release is applied or a reboot is requested,
//! the orderly shutdown ([`crate::serve::shutdown`]) asks [`prepare`]
//! once k3s and every other process are stopped and the ESP is held:
//!
//! 1. it reads the bootloader's own files and decides the boot the
//!    bootloader would make ([`liken_api::next_boot`]: systemd-boot's
//!    entry order, or grub.cfg's rule with grubenv);
//! 2. loads that kernel, its initrds (concatenated into one memfd, in
//!    the entry's order) and its command line with kexec_file_load,
//!    adding `liken.kexec=<entry>` so the next init knows which entry it
//!    is (the EFI variables still name this boot's);
//! 3. only then counts the try, exactly as the bootloader would have:
//!    the entry renamed `+3` to `+2-1`, or grubenv's tries lowered.
//!    A count that fails unloads the kernel again: a trial must never
//!    run uncounted.
//!
//! A trial that does not become healthy is rebooted through the firmware
//! (never by kexec), so the bootloader judges the remaining tries and
//! falls back as it always has. Everything that makes kexec impossible
//! or unsafe falls back to the firmware and says why: asked for by the
//! documents (`spec.reboot: firmware`), the loader unknown, a file
//! missing, the kernel refusing the load (no kexec, kexec disabled,
//! lockdown). The reason is kept in [`NOTE`] on the data partition for
//! the next boot's record; a kexec boot says so on its command line.
//!
//! A machine whose ESP holds a signed unified kernel image of liken's
//! (`EFI/Linux/liken-*.efi`) always reboots through the firmware
//! ([`decide_uki_refusal`]): the image's command line, with the slot's
//! dm-verity root hash, is part of what the firmware checks, and loading
//! its sections by kexec would trust the kernel's own signature check
//! instead of the firmware's, under rules (lockdown, the platform
//! keyring) that a fleet key in db does not satisfy with Debian's
//! kernel. So the firmware starts the image, checks its signature, and
//! systemd-boot counts its try, as on a power-on.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::Path;

use liken_api::RebootVia;
use liken_api::bootloader::{ENTRIES_DIR, parse_grubenv, render_grubenv};
use liken_api::next_boot::{
    BootFiles, KEXEC_GRUB, decide_grub_next, decide_uefi_next, grub_files, kexec_cmdline,
    parse_entry,
};

use crate::assessment::Loader;
use crate::bless::GRUBENV;
use crate::esp::Esp;
use crate::fsutil;
use crate::sys::power::Power;

/// The file under /var/lib/liken that says why the last reboot went
/// through the firmware, for the next boot's record.
pub const NOTE: &str = "reboot-via";
/// The longest [`NOTE`] init reads back.
const NOTE_CAP: u64 = 4096;
/// The largest loader entry read.
const ENTRY_CAP: u64 = 64 * 1024;
/// The largest grub.cfg read.
const GRUB_CFG_CAP: u64 = 64 * 1024;
/// GRUB's configuration on the ESP.
pub const GRUB_CFG: &str = "grub/grub.cfg";
/// The most initrd bytes staged in memory for the next kernel (the
/// release's boot.cpio and microcode, and the layer, are far smaller).
const INITRD_CAP: u64 = 1024 * 1024 * 1024;

/// How the shutdown was asked to reboot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// By kexec, when it can be done.
    Kexec,
    /// Through the firmware; why.
    Firmware(String),
}

impl Wanted {
    /// What a control request's `via` asks for.
    pub fn from_request(via: RebootVia) -> Wanted {
        match via {
            RebootVia::Kexec => Wanted::Kexec,
            RebootVia::Firmware => Wanted::Firmware(
                "the machine's documents ask for firmware reboots (spec.reboot: firmware)".into(),
            ),
        }
    }
}

/// What [`prepare`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepared {
    /// A kernel is loaded and the try counted; what was loaded.
    Kexec(String),
    /// Nothing is loaded; why the firmware reboots.
    Firmware(String),
}

/// How the try is counted before the jump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// A blessed entry: nothing to count.
    Nothing,
    /// systemd-boot's rename in loader/entries.
    Rename {
        /// The entry's name now.
        from: String,
        /// Its name with the try spent.
        to: String,
    },
    /// grubenv with the try spent.
    Grubenv(BTreeMap<String, String>),
}

/// The boot to load, decided from the bootloader's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadPlan {
    /// The entry (or `grub`) as `liken.kexec=` names it.
    pub booted: String,
    /// The slot's name, for messages.
    pub slot: String,
    /// The kernel, initrds and the bootloader's command line.
    pub files: BootFiles,
    /// The try to count.
    pub count: Count,
}

/// Why a reboot goes through the firmware when `entries` (the names of
/// both entry directories) include a unified kernel image of liken's;
/// `Ok` when none does.
pub fn decide_uki_refusal(entries: &[String]) -> Result<(), String> {
    match entries.iter().find(|n| {
        liken_api::bootloader::EntryName::parse(n)
            .is_ok_and(|e| e.kind == liken_api::bootloader::EntryKind::Uki)
    }) {
        None => Ok(()),
        Some(name) => Err(format!(
            "the ESP holds a signed unified kernel image ({}), whose command line only the \
             firmware's signature check vouches for: init does not load it by kexec, so the \
             firmware starts it",
            liken_api::bootloader::entry_path(name)
        )),
    }
}

/// Reads the bootloader's files on `esp` and decides the boot it would
/// make next.
pub fn plan(esp: &Esp<'_>, loader: &Loader) -> Result<LoadPlan, String> {
    let err = |e: crate::esp::EspError| e.to_string();
    match loader {
        Loader::Uefi(_) => {
            decide_uki_refusal(&esp.list_entries().map_err(err)?)?;
            let mut entries = Vec::new();
            for name in esp.list(ENTRIES_DIR).map_err(err)? {
                let rel = format!("{ENTRIES_DIR}/{name}");
                let path = esp.path(&rel).map_err(err)?;
                let Ok(bytes) = fsutil::read_capped(&path, ENTRY_CAP) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&bytes);
                match parse_entry(&name, &text) {
                    None => {}
                    Some(Ok(e)) => entries.push(e),
                    Some(Err(e)) => return Err(e.to_string()),
                }
            }
            let next = decide_uefi_next(entries).map_err(|e| e.to_string())?;
            let count = match next.count {
                Some((from, to)) => Count::Rename { from, to },
                None => Count::Nothing,
            };
            Ok(LoadPlan {
                booted: next.entry.file_name.clone(),
                slot: next.entry.name.slot.to_string(),
                files: next.entry.files,
                count,
            })
        }
        Loader::Grub => {
            let block = esp.read(GRUBENV).map_err(err)?;
            let env = parse_grubenv(&block).map_err(|e| e.to_string())?;
            let has_kernel = |s: liken_api::Slot| {
                esp.exists(&format!("liken/{}/vmlinuz", s.esp_dir()))
                    .unwrap_or(false)
            };
            let next = decide_grub_next(&env, has_kernel).map_err(|e| e.to_string())?;
            let cfg_path = esp.path(GRUB_CFG).map_err(err)?;
            let cfg = fsutil::read_capped(&cfg_path, GRUB_CFG_CAP)
                .map_err(|e| format!("{GRUB_CFG}: {e}"))?;
            let microcode = esp
                .exists(&format!("liken/{}/microcode.cpio", next.slot.esp_dir()))
                .unwrap_or(false);
            let files = grub_files(&String::from_utf8_lossy(&cfg), next.slot, microcode)
                .map_err(|e| e.to_string())?;
            Ok(LoadPlan {
                booted: KEXEC_GRUB.to_owned(),
                slot: next.slot.to_string(),
                files,
                count: next.env.map_or(Count::Nothing, Count::Grubenv),
            })
        }
    }
}

/// The zeros that bring `len` to a multiple of four (0 to 3).
pub fn pad_to_four(len: u64) -> usize {
    match len % 4 {
        1 => 3,
        2 => 2,
        3 => 1,
        _ => 0,
    }
}

/// The initrds, concatenated into one anonymous memory file (what
/// kexec_file_load takes), rewound.
fn initrd_file(esp: &Esp<'_>, initrds: &[String]) -> Result<std::fs::File, String> {
    let fd = nix::sys::memfd::memfd_create("liken-initrd", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(|e| format!("cannot create a memory file for the initrds ({e})"))?;
    let mut out = std::fs::File::from(fd);
    let mut total: u64 = 0;
    for rel in initrds {
        let path = esp.path(rel).map_err(|e| e.to_string())?;
        let f = fsutil::open_regular(&path).map_err(|e| format!("{rel}: {e}"))?;
        let left = INITRD_CAP.saturating_sub(total);
        let n = io::copy(&mut f.take(left.saturating_add(1)), &mut out)
            .map_err(|e| format!("{rel}: {e}"))?;
        total = total.saturating_add(n);
        if total > INITRD_CAP {
            return Err(format!(
                "the initrds pass the {INITRD_CAP} bytes init stages for a kexec"
            ));
        }
        // Each starts on a four-byte boundary, as GRUB and systemd-boot
        // place them: the kernel takes an archive after a compressed one
        // only there, skipping zeros up to it.
        let pad = pad_to_four(total);
        out.write_all([0u8; 3].get(..pad).unwrap_or_default())
            .map_err(|e| format!("{rel}: {e}"))?;
        total = total.saturating_add(pad as u64);
    }
    out.rewind()
        .map_err(|e| format!("cannot rewind the initrds ({e})"))?;
    Ok(out)
}

/// Loads `plan`'s kernel and counts its try; on success, what was
/// loaded. Any failure leaves nothing loaded and nothing counted.
pub fn load(esp: &Esp<'_>, power: &dyn Power, plan: &LoadPlan) -> Result<String, String> {
    let kernel_path = esp.path(&plan.files.linux).map_err(|e| e.to_string())?;
    let kernel =
        fsutil::open_regular(&kernel_path).map_err(|e| format!("{}: {e}", plan.files.linux))?;
    let initrd = initrd_file(esp, &plan.files.initrds)?;
    let cmdline = kexec_cmdline(&plan.files.options, &plan.booted);
    power
        .kexec_load(kernel.as_fd(), initrd.as_fd(), &cmdline)
        .map_err(|e| {
            format!(
                "the kernel refused to load {} ({e}): {}",
                plan.files.linux,
                crate::sys::kexec::explain(&e)
            )
        })?;
    let counted = match &plan.count {
        Count::Nothing => Ok("blessed, nothing to count".to_owned()),
        Count::Rename { from, to } => esp
            .rename(
                &format!("{ENTRIES_DIR}/{from}"),
                &format!("{ENTRIES_DIR}/{to}"),
            )
            .map(|()| format!("try counted: {from} renamed to {to}"))
            .map_err(|e| e.to_string()),
        Count::Grubenv(env) => render_grubenv(env)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                esp.overwrite_in_place(GRUBENV, &bytes)
                    .map_err(|e| e.to_string())
            })
            .map(|()| format!("try counted in {GRUBENV}: {}", tries_in(env))),
    };
    match counted {
        Ok(how) => Ok(format!(
            "slot {} ({}) loaded: {}, {} initrd(s); {how}",
            plan.slot,
            plan.booted,
            plan.files.linux,
            plan.files.initrds.len()
        )),
        Err(e) => {
            let undone = match power.kexec_unload() {
                Ok(()) => "the loaded kernel was dropped".to_owned(),
                Err(u) => format!("dropping the loaded kernel failed too ({u})"),
            };
            Err(format!(
                "the try could not be counted ({e}); {undone}, so the bootloader counts it"
            ))
        }
    }
}

/// grubenv's try counters as `name=value`, for the log: what GRUB will
/// read on the next firmware boot.
fn tries_in(env: &BTreeMap<String, String>) -> String {
    let tries: Vec<String> = env
        .iter()
        .filter(|(k, _)| k.starts_with("liken_") && k.ends_with("_tries"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if tries.is_empty() {
        "no try counter left".to_owned()
    } else {
        tries.join(" ")
    }
}

/// Decides and carries out the reboot's way: loads the next kernel when
/// kexec is wanted and possible. `esp` mounts the held ESP; `loader` is
/// how this boot was assessed.
pub fn prepare<'a>(
    wanted: &Wanted,
    loader: Option<&Loader>,
    esp: impl FnOnce() -> Result<Esp<'a>, String>,
    power: &dyn Power,
) -> Prepared {
    if let Wanted::Firmware(why) = wanted {
        return Prepared::Firmware(why.clone());
    }
    let Some(loader) = loader else {
        return Prepared::Firmware(
            "this boot found no bootloader try counter, so only the bootloader can choose the \
             next boot"
                .into(),
        );
    };
    let esp = match esp() {
        Ok(esp) => esp,
        Err(e) => return Prepared::Firmware(e),
    };
    let result = plan(&esp, loader).and_then(|p| load(&esp, power, &p));
    if let Err(e) = esp.unmount() {
        crate::console::line(&format!("esp: {e}"));
    }
    match result {
        Ok(done) => Prepared::Kexec(done),
        Err(why) => Prepared::Firmware(why),
    }
}

/// Keeps (or clears, after a kexec) the reason the next boot is reached
/// through the firmware, in `var_liken`.
pub fn write_note(var_liken: &Path, prepared: &Prepared) -> io::Result<()> {
    let path = var_liken.join(NOTE);
    match prepared {
        Prepared::Firmware(why) => fsutil::write_atomic(&path, why.as_bytes(), 0o644),
        Prepared::Kexec(_) => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// Reads and removes the last shutdown's [`NOTE`]: why this boot was
/// reached through the firmware. `None` without one (a power-on).
pub fn take_note(var_liken: &Path) -> Option<String> {
    let path = var_liken.join(NOTE);
    let bytes = fsutil::read_capped(&path, NOTE_CAP).ok();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&bytes?).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// How this boot was reached, from its command line and the last
/// shutdown's note: `(via, why the firmware)`.
pub fn decide_via(kexec_arg: Option<&str>, note: Option<String>) -> (RebootVia, Option<String>) {
    match kexec_arg {
        Some(_) => (RebootVia::Kexec, None),
        None => (RebootVia::Firmware, note),
    }
}

#[cfg(test)]
mod tests;
