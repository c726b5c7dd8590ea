//! Laying liken's disk out on the install target.
//!
//! Everything is decided and checked first ([`decide_plan`]): the
//! partition table for the disk's size, the ESP's files (and that they
//! fit), that the system image fits slot A and GRUB's images their
//! places. Only then does [`write_disk`] touch the disk, in an order
//! that makes the disk bootable last:
//!
//! 1. the GPT (random GUIDs, names LIKEN-ESP, LIKEN-BIOS, LIKEN-A,
//!    LIKEN-B, LIKEN-DATA) with a protective MBR whose boot code is
//!    cleared, so a half-written disk boots nothing;
//! 2. the first MiBs of LIKEN-B and LIKEN-DATA zeroed: a reused disk's
//!    old filesystem must not be mounted as /var (the first boot formats
//!    a LIKEN-DATA without one) or read as a slot;
//! 3. the system image raw into LIKEN-A, hashed as it goes (the media
//!    may have changed since it was verified), synced, its cached pages
//!    dropped and read back from the disk and hashed again;
//! 4. the ESP as a FAT32 volume: systemd-boot, loader.conf, slot A's
//!    entry with three tries, its kernel and initrds, the layer, the
//!    BIOS path's grub.cfg and grubenv, and the media's Secure Boot keys
//!    when it has them (loader/keys/auto, with `secure-boot-enroll` in
//!    loader.conf);
//! 5. GRUB's boot.img into the MBR and core.img into LIKEN-BIOS.
//!
//! Each stage ends with an fsync of the disk. The kernel arguments of
//! the installed entries are decided here too ([`decide_entry_args`]).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

use liken_api::bootloader::{
    self, BootloaderError, EntryKind, EntryName, EntryParams, GrubParams, LAYER_PATH,
};
use liken_api::{Sha256Hex, Slot};
use liken_disk::fat::{self, FatError, Timestamp};
use liken_disk::gpt::{self, GptError, Layout, MbrBootCode, PartitionSpec, Size};
use liken_disk::grub::{self, GrubError};
use liken_disk::guid::{self, Guid};

use super::source::{EnrolKeys, Verified};
use crate::release_check::Checked;
use crate::slot_image::{self, ImageError};

const MIB: u64 = 1 << 20;
/// The ESP's size.
pub const ESP_SIZE: u64 = 512 * MIB;
/// The BIOS boot partition's size (GRUB's core.img).
pub const BIOS_SIZE: u64 = MIB;
/// Each slot's size.
pub const SLOT_SIZE: u64 = 1024 * MIB;
/// The least the data partition (/var) gets; it takes the rest.
pub const DATA_MIN: u64 = 1024 * MIB;
/// The ESP's GPT name and FAT volume label.
pub const ESP_LABEL: &str = "LIKEN-ESP";
/// The BIOS boot partition's GPT name.
pub const BIOS_LABEL: &str = "LIKEN-BIOS";
/// The data partition's GPT name.
pub const DATA_LABEL: &str = "LIKEN-DATA";
/// Bytes zeroed at the start of LIKEN-B and LIKEN-DATA: ext4's
/// superblock is at 1 KiB, squashfs's at 0, both well inside.
pub const ZEROED_HEAD: u64 = 4 * MIB;
/// The ESP's directory for the BIOS path (core.img's prefix is
/// `(,gpt1)/grub`).
pub const GRUB_DIR: &str = "grub";
const CHUNK: usize = 1 << 20;

/// The installed disk's partitions, in entry order, with these GUIDs.
pub fn layout_specs(guids: [Guid; 5]) -> Vec<PartitionSpec> {
    let [esp, bios, a, b, data] = guids;
    let spec = |name: &str, type_guid: Guid, guid: Guid, size: Size| PartitionSpec {
        name: name.to_owned(),
        type_guid,
        guid,
        size,
        attributes: 0,
    };
    vec![
        spec(ESP_LABEL, guid::ESP, esp, Size::Bytes(ESP_SIZE)),
        spec(BIOS_LABEL, guid::BIOS_BOOT, bios, Size::Bytes(BIOS_SIZE)),
        spec(
            Slot::A.partition_label(),
            guid::LINUX_DATA,
            a,
            Size::Bytes(SLOT_SIZE),
        ),
        spec(
            Slot::B.partition_label(),
            guid::LINUX_DATA,
            b,
            Size::Bytes(SLOT_SIZE),
        ),
        spec(
            DATA_LABEL,
            guid::LINUX_DATA,
            data,
            Size::Rest { min: DATA_MIN },
        ),
    ]
}

/// The smallest disk the layout fits.
pub fn minimum_size() -> Result<u64, GptError> {
    // Any distinct non-nil GUIDs do for a size.
    let g = |n: &str| Guid::from_name("size", n);
    gpt::minimum_disk_size(&layout_specs([g("1"), g("2"), g("3"), g("4"), g("5")]))
}

/// The installed entries' kernel arguments: `console=` arguments, and
/// the extra ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryArgs {
    /// Every `console=` argument of this boot, in order.
    pub console: Vec<String>,
    /// `liken.machine=`, this boot's [`CARRIED`] arguments, then the
    /// Machine's `spec.kernelArgs`.
    pub extra: Vec<String>,
}

/// This boot's arguments the installed entries keep: how long a trial
/// may take to get healthy. Never `liken.bless-after=`, which blesses
/// by uptime alone: a test's stick may boot install mode with it, but
/// the installed machine must earn its blessing from k3s.
pub const CARRIED: &[&str] = &["liken.bless-deadline="];

/// The arguments the installed machine boots with, from this boot's
/// command line (the stick's entry for this machine) and the Machine.
/// `liken.machine=` names the machine so a fleet's layer, which holds
/// every machine's document, picks the same one after the install;
/// `liken.install` is of course not carried.
pub fn decide_entry_args(cmdline: &str, machine: &str, kernel_args: &[String]) -> EntryArgs {
    let args = crate::cmdline::split(cmdline);
    let console = args
        .iter()
        .filter(|a| a.starts_with("console="))
        .cloned()
        .collect();
    let mut extra = vec![format!("liken.machine={machine}")];
    extra.extend(
        args.iter()
            .filter(|a| CARRIED.iter().any(|c| a.starts_with(c)))
            .cloned(),
    );
    extra.extend(kernel_args.iter().cloned());
    EntryArgs { console, extra }
}

/// Why the disk was not (completely) written. Each message says what to
/// do.
#[derive(Debug)]
pub enum WriteError {
    /// The plan does not fit the disk or the images do not fit their
    /// places; nothing was written.
    Plan(String),
    /// A stage failed part way; the disk does not boot.
    Stage {
        /// What was being written.
        stage: &'static str,
        /// The error.
        error: String,
    },
    /// The system image on the media changed after it was verified.
    SystemChanged(Sha256Hex),
    /// Slot A read back differently from what was written.
    ReadBack {
        /// The digest release.yaml gives.
        want: Sha256Hex,
        /// The digest read back.
        got: Sha256Hex,
    },
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const AGAIN: &str = "the disk is partly written and does not boot; fix the cause and \
                             boot the install media again";
        match self {
            WriteError::Plan(why) => write!(f, "{why}; nothing was written to the disk"),
            WriteError::Stage { stage, error } => {
                write!(f, "writing {stage} failed ({error}); {AGAIN}")
            }
            WriteError::SystemChanged(d) => write!(
                f,
                "the system image changed while it was copied (sha256 {d}, not the verified \
                 one); the install media is failing: build it again, then boot it again"
            ),
            WriteError::ReadBack { want, got } => write!(
                f,
                "slot A read back with sha256 {got} after {want} was written: the disk loses \
                 writes, so replace it (or its cable) and boot the install media again"
            ),
        }
    }
}

impl std::error::Error for WriteError {}

fn stage(stage: &'static str) -> impl Fn(&dyn fmt::Display) -> WriteError {
    move |e| WriteError::Stage {
        stage,
        error: e.to_string(),
    }
}

/// Slot A's entry: the release's version, its microcode, the
/// arguments, and the system image's root hash when the release carries
/// a dm-verity record. grub.cfg, which both slots share, gets the same
/// arguments without the root hash ([`GrubParams`]).
pub fn entry_params(v: &Verified, args: &EntryArgs) -> EntryParams {
    EntryParams {
        slot: Slot::A,
        version: v.release.version.clone(),
        microcode: v.microcode.is_some(),
        console_args: args.console.clone(),
        extra_args: args.extra.clone(),
        verity: v.verity.clone(),
    }
}

/// The ESP's files for a fresh install into slot A, with the fleet's
/// Secure Boot keys for systemd-boot to enrol when the media carry them.
pub fn decide_esp(
    v: &Verified,
    layer: &[u8],
    args: &EntryArgs,
    keys: Option<&EnrolKeys>,
) -> Result<fat::Tree, WriteError> {
    let plan_err = |e: &dyn fmt::Display| WriteError::Plan(format!("the ESP's files: {e}"));
    let params = entry_params(v, args);
    let entry = format!(
        "{}/{}",
        bootloader::ENTRIES_DIR,
        EntryName::fresh(Slot::A).file_name()
    );
    let grubenv = bootloader::render_grubenv(&bootloader::decide_grub_new_release(
        &BTreeMap::new(),
        Slot::A,
    ))
    .map_err(|e: BootloaderError| plan_err(&e))?;
    let grub_cfg = bootloader::render_grub_cfg(&GrubParams {
        console_args: args.console.clone(),
        extra_args: args.extra.clone(),
    });
    let dir = format!("liken/{}", Slot::A.esp_dir());
    let mut t = fat::Tree::new();
    let mut add = |path: &str, bytes: Vec<u8>| t.add_bytes(path, bytes).map_err(|e| plan_err(&e));
    add("EFI/BOOT/BOOTX64.EFI", v.systemd_boot.clone())?;
    let loader_conf = match keys {
        Some(_) => bootloader::render_loader_conf_enrolling(),
        None => bootloader::render_loader_conf(),
    };
    add("loader/loader.conf", loader_conf.into_bytes())?;
    for (name, bytes) in keys.map(|k| k.files.as_slice()).unwrap_or_default() {
        add(
            &format!("{}/{name}", bootloader::SECURE_BOOT_KEYS_DIR),
            bytes.clone(),
        )?;
    }
    add(&format!("{dir}/vmlinuz"), v.kernel.clone())?;
    add(&format!("{dir}/boot.cpio"), v.boot.clone())?;
    if let Some(m) = &v.microcode {
        add(&format!("{dir}/microcode.cpio"), m.clone())?;
    }
    add(&format!("{GRUB_DIR}/grub.cfg"), grub_cfg.into_bytes())?;
    add(&format!("{GRUB_DIR}/grubenv"), grubenv.to_vec())?;
    match &v.uki_a {
        // The signed image is the entry: no type #1 entry beside it, whose
        // command line nothing would vouch for. The layer reaches the
        // image's boot as systemd-boot's credential.
        Some(uki) => {
            add(
                &EntryName::fresh_of(EntryKind::Uki, Slot::A).path(),
                uki.clone(),
            )?;
            add(
                &format!(
                    "{}/{}",
                    bootloader::CREDENTIALS_DIR,
                    bootloader::LAYER_CREDENTIAL
                ),
                layer.to_vec(),
            )?;
        }
        None => add(&entry, bootloader::render_entry(&params).into_bytes())?,
    }
    add(LAYER_PATH, layer.to_vec())?;
    t.add_dir(&format!("liken/{}", Slot::B.esp_dir()))
        .map_err(|e| plan_err(&e))?;
    Ok(t)
}

/// What [`write_disk`] carries out.
pub struct Plan<'a> {
    /// The partition table.
    pub layout: Layout,
    /// The ESP's files.
    pub esp: fat::Tree,
    /// The ESP's label, serial and file times.
    pub esp_options: fat::Options,
    /// The release.
    pub verified: &'a Verified,
}

fn part<'l>(layout: &'l Layout, name: &str) -> Result<&'l gpt::Partition, WriteError> {
    layout
        .by_name(name)
        .ok_or_else(|| WriteError::Plan(format!("the layout has no {name} (a bug in init)")))
}

/// Plans the install onto a disk of `disk_size` bytes and checks that
/// everything fits, before anything is written.
pub fn decide_plan<'a>(
    disk_size: u64,
    guids: [Guid; 6],
    esp: fat::Tree,
    esp_options: fat::Options,
    verified: &'a Verified,
) -> Result<Plan<'a>, WriteError> {
    let [disk, p1, p2, p3, p4, p5] = guids;
    let layout = gpt::plan(disk_size, disk, &layout_specs([p1, p2, p3, p4, p5]))
        .map_err(|e| WriteError::Plan(e.to_string()))?;
    let esp_part = part(&layout, ESP_LABEL)?;
    fat::plan(esp_part.size(), &esp).map_err(|e| WriteError::Plan(format!("the ESP: {e}")))?;
    let slot = part(&layout, Slot::A.partition_label())?;
    let system = verified.system.artifact.size;
    if system > slot.size() {
        return Err(WriteError::Plan(format!(
            "the system image is {system} bytes but slot A holds {}; the release is too large \
             for liken's layout",
            slot.size()
        )));
    }
    let bios = part(&layout, BIOS_LABEL)?;
    grub::decide_mbr(&verified.grub_boot, &[0u8; 512], bios.first_lba)
        .map_err(|e| WriteError::Plan(e.to_string()))?;
    let core = u64::try_from(verified.grub_core.len()).unwrap_or(u64::MAX);
    if core > bios.size() {
        return Err(WriteError::Plan(
            GrubError::CoreTooLarge {
                core,
                partition: bios.size(),
            }
            .to_string(),
        ));
    }
    // The patch grub::install makes, tried on a copy: a core.img it
    // would refuse is refused now, before the disk is touched.
    let first: Option<&[u8; 512]> = verified
        .grub_core
        .get(..512)
        .and_then(|f| f.try_into().ok());
    let first = first.ok_or_else(|| {
        WriteError::Plan(
            GrubError::BadCoreImg(format!("is {core} bytes, less than one sector")).to_string(),
        )
    })?;
    grub::decide_core_first_sector(
        first,
        bios.first_lba,
        core.div_ceil(liken_disk::SECTOR_SIZE),
    )
    .map_err(|e| WriteError::Plan(e.to_string()))?;
    Ok(Plan {
        layout,
        esp,
        esp_options,
        verified,
    })
}

/// FAT's timestamp for a moment (UTC), clamped into FAT's years.
pub fn fat_time(t: std::time::SystemTime) -> Timestamp {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let mut days = secs / 86_400;
    let rem = secs % 86_400;
    let mut year: u64 = 1970;
    loop {
        let len = if leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days = days.saturating_sub(len);
        year = year.saturating_add(1);
        if year > 2107 {
            return Timestamp::EPOCH;
        }
    }
    if year < 1980 {
        return Timestamp::EPOCH;
    }
    let feb = if leap(year) { 29 } else { 28 };
    let mut month: u8 = 1;
    for len in [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] {
        if days < len {
            break;
        }
        days = days.saturating_sub(len);
        month = month.saturating_add(1);
    }
    Timestamp {
        year: u16::try_from(year).unwrap_or(1980),
        month,
        day: u8::try_from(days.saturating_add(1)).unwrap_or(1),
        hour: u8::try_from(rem / 3600).unwrap_or(0),
        minute: u8::try_from(rem % 3600 / 60).unwrap_or(0),
        second: u8::try_from(rem % 60).unwrap_or(0),
    }
}

fn sync(disk: &File, what: &'static str) -> Result<(), WriteError> {
    disk.sync_all().map_err(|e| stage(what)(&e))
}

fn zero(disk: &mut File, offset: u64, len: u64) -> io::Result<()> {
    disk.seek(SeekFrom::Start(offset))?;
    let zeros = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK as u64);
        disk.write_all(
            zeros
                .get(..usize::try_from(n).unwrap_or(0))
                .unwrap_or_default(),
        )?;
        left = left.saturating_sub(n);
    }
    Ok(())
}

fn write_slot(
    disk: &mut File,
    slot: &gpt::Partition,
    system: &Checked,
    say: &mut dyn FnMut(&str),
) -> Result<(), WriteError> {
    slot_image::write_image(system, disk, slot.offset(), &mut |l| {
        say(&format!("slot A: {l}"))
    })
    .map_err(|e| match e {
        ImageError::Changed(written) => WriteError::SystemChanged(written),
        ImageError::ReadBack(got) => WriteError::ReadBack {
            want: system.artifact.sha256.clone(),
            got,
        },
        other => stage("slot A")(&other),
    })?;
    say(&format!(
        "slot A: {} MiB written and read back (sha256 {})",
        system.artifact.size / MIB,
        system.artifact.sha256.short()
    ));
    Ok(())
}

/// Writes `plan` onto `disk`, fsyncing after each stage; `say` hears a
/// line per stage and the slot's progress.
pub fn write_disk(
    disk: &mut File,
    plan: &Plan<'_>,
    say: &mut dyn FnMut(&str),
) -> Result<(), WriteError> {
    let layout = &plan.layout;
    gpt::write(disk, layout, MbrBootCode::Clear).map_err(|e| stage("the partition table")(&e))?;
    sync(disk, "the partition table")?;
    let data = part(layout, DATA_LABEL)?;
    say(&format!(
        "partition table written ({} partitions; {DATA_LABEL} {} MiB)",
        layout.partitions.len(),
        data.size() / MIB
    ));

    for name in [Slot::B.partition_label(), DATA_LABEL] {
        let p = part(layout, name)?;
        zero(disk, p.offset(), ZEROED_HEAD.min(p.size()))
            .map_err(|e| stage("zeros over old filesystems")(&e))?;
    }
    sync(disk, "zeros over old filesystems")?;
    say(&format!(
        "{} and {DATA_LABEL} cleared (the first boot formats {DATA_LABEL})",
        Slot::B.partition_label()
    ));

    let slot = part(layout, Slot::A.partition_label())?;
    write_slot(disk, slot, &plan.verified.system, say)?;

    let esp = part(layout, ESP_LABEL)?;
    fat::write(
        disk,
        esp.offset(),
        esp.size(),
        &plan.esp,
        &plan.esp_options,
        &mut |_| {},
    )
    .map_err(|e: FatError| stage("the ESP")(&e))?;
    sync(disk, "the ESP")?;
    say(&format!(
        "ESP written ({:.1} MiB of files: systemd-boot, loader entry {}, kernel and initrds \
         of slot A, the layer, grub.cfg and grubenv)",
        plan.esp.content_bytes() as f64 / MIB as f64,
        EntryName::fresh(Slot::A).file_name()
    ));

    let bios = part(layout, BIOS_LABEL)?;
    grub::install(
        disk,
        &plan.verified.grub_boot,
        &plan.verified.grub_core,
        bios,
    )
    .map_err(|e| stage("GRUB's boot code")(&e))?;
    sync(disk, "GRUB's boot code")?;
    say(&format!(
        "GRUB written (boot.img in the MBR, core.img in {BIOS_LABEL})"
    ));
    Ok(())
}

/// Opens the target for writing, exclusively: on a block device, O_EXCL
/// fails while anything (a mount, a swap) holds it.
pub fn open_target(device: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_EXCL)
        .open(device)
}

/// Fresh random GUIDs for the disk and its five partitions.
pub fn random_guids() -> io::Result<[Guid; 6]> {
    Ok([
        Guid::random()?,
        Guid::random()?,
        Guid::random()?,
        Guid::random()?,
        Guid::random()?,
        Guid::random()?,
    ])
}

/// A random FAT volume serial.
pub fn random_volume_id() -> io::Result<u32> {
    let g = Guid::random()?;
    let [a, b, c, d, ..] = g.0;
    Ok(u32::from_le_bytes([a, b, c, d]))
}

/// The ESP's FAT options.
pub fn esp_options(volume_id: u32, time: Timestamp) -> fat::Options {
    fat::Options {
        label: ESP_LABEL.to_owned(),
        volume_id,
        time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_layout_needs_about_3_5_gib() {
        let need = minimum_size().unwrap();
        assert!(need > 3 * 1024 * MIB + 512 * MIB, "{need}");
        assert!(need < 4 * 1024 * MIB, "a 4 GiB disk fits: {need}");
    }

    #[test]
    fn entry_args_carry_consoles_and_the_deadline_not_bless_after() {
        let args = decide_entry_args(
            "BOOT_IMAGE=/liken/vmlinuz console=tty0 liken.install=1 liken.machine=web-1 \
             console=ttyS0,115200 liken.bless-after=20 quiet liken.bless-deadline=600",
            "web-1",
            &["mitigations=auto".to_owned()],
        );
        assert_eq!(args.console, ["console=tty0", "console=ttyS0,115200"]);
        assert_eq!(
            args.extra,
            [
                "liken.machine=web-1",
                "liken.bless-deadline=600",
                "mitigations=auto"
            ]
        );
    }

    #[test]
    fn fat_times() {
        let t = fat_time(UNIX_EPOCH + Duration::from_secs(1_796_210_001));
        // 2026-12-02 11:13:21 UTC.
        assert_eq!(
            t,
            Timestamp {
                year: 2026,
                month: 12,
                day: 2,
                hour: 11,
                minute: 13,
                second: 21
            }
        );
        assert_eq!(fat_time(UNIX_EPOCH), Timestamp::EPOCH);
        let t = fat_time(UNIX_EPOCH + Duration::from_secs(951_782_400));
        assert_eq!((t.year, t.month, t.day), (2000, 2, 29));
    }
}
