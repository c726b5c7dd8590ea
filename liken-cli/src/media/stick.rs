//! `liken stick`: one bootable disk image that installs a deployment.
//!
//! The image, in [`decide_specs`]'s order:
//!
//! ```text
//! MBR      GRUB's boot.img code + the protective partition record
//! GPT      1 LIKEN-STICK (ESP, FAT32 labelled LIKEN-STICK), sized to its contents
//!          2 LIKEN-BIOS  (BIOS boot, 1 MiB), GRUB's core.img
//! ```
//!
//! and the ESP ([`build_tree`]):
//!
//! ```text
//! EFI/BOOT/BOOTX64.EFI                 systemd-boot
//! loader/loader.conf                   see super::menu
//! loader/entries/install-<name>.conf   one per machine
//! grub/grub.cfg                        the same menu for BIOS (core.img's prefix is (,gpt1)/grub)
//! liken/vmlinuz, liken/boot.cpio, liken/microcode.cpio (when the release has it)
//! liken/layer.cpio                     the deployment layer
//! liken/release/release.yaml + every artifact it names, for the installer
//! loader/keys/auto/{db,KEK,PK}.auth    with -secureboot: the fleet's keys, for
//!                                      systemd-boot to enrol (public halves only)
//! ```
//!
//! Everything is written by liken-disk into a plain file: no loop
//! device, no mount, no root. The same inputs give the same image: GUIDs
//! and the volume id derive from the release's digest and the layer's
//! hash, and every FAT timestamp is the release's date.

use std::fs::File;
use std::io::{self, Read};

use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_GRUB_BOOT, ARTIFACT_GRUB_CORE, ARTIFACT_KERNEL, ARTIFACT_MICROCODE,
    ARTIFACT_SYSTEMD_BOOT, RELEASE_FILE,
};
use liken_disk::fat::{self, Options, Timestamp, Tree};
use liken_disk::gpt::{self, Layout, MbrBootCode, PartitionSpec, Size};
use liken_disk::grub;
use liken_disk::guid::{self, Guid};

use super::MediaError;
use super::menu::{self, InstallMenu};
use super::release::VerifiedRelease;
use crate::releases::progress::Progress;
use crate::releases::stream;
use crate::secureboot::EnrolKeys;

/// The ESP's GPT name and FAT label; install mode finds the stick by it.
pub const STICK_LABEL: &str = "LIKEN-STICK";
/// The BIOS boot partition's GPT name.
pub const BIOS_NAME: &str = "LIKEN-BIOS";
/// The BIOS boot partition's size.
pub const BIOS_SIZE: u64 = 1 << 20;
/// Room left free on the ESP beyond its contents.
pub const SLACK: u64 = 8 << 20;
/// The largest core.img read (it must fit the BIOS boot partition).
const MAX_CORE: u64 = BIOS_SIZE;

/// What the stick holds.
pub struct StickInputs<'a> {
    /// The verified release.
    pub release: &'a VerifiedRelease,
    /// The deployment layer.
    pub layer: &'a [u8],
    /// The menu.
    pub menu: &'a InstallMenu,
    /// The fleet's Secure Boot keys (`-secureboot`), whose `.auth` files
    /// are all of them that goes on the stick.
    pub keys: Option<&'a EnrolKeys>,
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The image's size.
    pub disk_size: u64,
    /// The ESP's size.
    pub esp_size: u64,
    /// Bytes of files on the ESP.
    pub content: u64,
}

/// The seed of the image's GUIDs: the same release and layer give the
/// same image, another deployment gets other GUIDs.
pub fn decide_seed(release: &VerifiedRelease, layer: &[u8]) -> String {
    format!("liken-stick {} {}", release.digest, stream::sha256(layer))
}

/// The stick's partitions for an ESP of `esp_size` bytes.
pub fn decide_specs(esp_size: u64, seed: &str) -> Vec<PartitionSpec> {
    vec![
        PartitionSpec {
            name: STICK_LABEL.to_owned(),
            type_guid: guid::ESP,
            guid: Guid::from_name(seed, STICK_LABEL),
            size: Size::Bytes(esp_size),
            attributes: 0,
        },
        PartitionSpec {
            name: BIOS_NAME.to_owned(),
            type_guid: guid::BIOS_BOOT,
            guid: Guid::from_name(seed, BIOS_NAME),
            size: Size::Bytes(BIOS_SIZE),
            attributes: 0,
        },
    ]
}

/// The ESP's directories and files (artifacts streamed from the release
/// directory when written).
pub fn build_tree(inputs: &StickInputs<'_>) -> Result<Tree, MediaError> {
    let r = inputs.release;
    let mut t = Tree::new();
    let file = |t: &mut Tree, at: &str, name: &'static str| -> Result<(), MediaError> {
        let a = r.artifact(name).map_err(MediaError::Release)?;
        Ok(t.add_file(at, &r.path_of(a))?)
    };
    file(&mut t, "EFI/BOOT/BOOTX64.EFI", ARTIFACT_SYSTEMD_BOOT)?;
    t.add_bytes("loader/loader.conf", menu::render_loader_conf(inputs.menu))?;
    for m in &inputs.menu.machines {
        t.add_bytes(&menu::entry_path(m), menu::render_entry(inputs.menu, m))?;
    }
    t.add_bytes("grub/grub.cfg", menu::render_grub_cfg(inputs.menu))?;
    file(&mut t, menu::KERNEL, ARTIFACT_KERNEL)?;
    file(&mut t, menu::BOOT_CPIO, ARTIFACT_BOOT)?;
    if r.has_microcode() {
        file(&mut t, menu::MICROCODE_CPIO, ARTIFACT_MICROCODE)?;
    }
    t.add_bytes(menu::LAYER_CPIO, inputs.layer.to_vec())?;
    t.add_bytes(
        &format!("liken/release/{RELEASE_FILE}"),
        r.text.as_bytes().to_vec(),
    )?;
    for a in &r.release.artifacts {
        t.add_file(&format!("liken/release/{}", a.file), &r.path_of(a))?;
    }
    if let Some(keys) = inputs.keys {
        for (name, bytes) in &keys.files {
            t.add_bytes(
                &format!("{}/{name}", liken_api::bootloader::SECURE_BOOT_KEYS_DIR),
                bytes.clone(),
            )?;
        }
    }
    Ok(t)
}

/// Plans the whole image for `tree`: the ESP sized to it, then the disk.
pub fn decide_layout(tree: &Tree, seed: &str) -> Result<Layout, MediaError> {
    let esp = fat::minimum_size(tree, SLACK)?;
    let specs = decide_specs(esp, seed);
    let disk = gpt::minimum_disk_size(&specs)?;
    Ok(gpt::plan(disk, Guid::from_name(seed, "disk"), &specs)?)
}

fn read_small(r: &VerifiedRelease, name: &'static str, max: u64) -> Result<Vec<u8>, MediaError> {
    let a = r.artifact(name).map_err(MediaError::Release)?;
    let path = r.path_of(a);
    if a.size > max {
        return Err(MediaError::Disk(format!(
            "{} is {} bytes, more than the {max} it may be; build it smaller",
            path.display(),
            a.size
        )));
    }
    let mut bytes = Vec::new();
    File::open(&path)
        .and_then(|f| f.take(max.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(|error| MediaError::Io {
            doing: format!("reading {}", path.display()),
            error,
        })?;
    if bytes.len() as u64 != a.size {
        return Err(MediaError::Changed(path));
    }
    Ok(bytes)
}

/// Writes the stick image into `out` (an empty file).
pub fn write(
    out: &mut File,
    inputs: &StickInputs<'_>,
    progress: &mut Progress,
) -> Result<Summary, MediaError> {
    let seed = decide_seed(inputs.release, inputs.layer);
    let tree = build_tree(inputs)?;
    let layout = decide_layout(&tree, &seed)?;
    let boot_img = read_small(
        inputs.release,
        ARTIFACT_GRUB_BOOT,
        grub::BOOT_IMG_SIZE as u64,
    )?;
    let core_img = read_small(inputs.release, ARTIFACT_GRUB_CORE, MAX_CORE)?;
    let (Some(esp), Some(bios)) = (layout.by_name(STICK_LABEL), layout.by_name(BIOS_NAME)) else {
        return Err(MediaError::Disk("the stick layout lost a partition".into()));
    };
    let disk_size = layout.disk_sectors * liken_disk::SECTOR_SIZE;
    let io = |doing: &str| {
        let doing = doing.to_owned();
        move |error: io::Error| MediaError::Io { doing, error }
    };
    out.set_len(disk_size).map_err(io("sizing the image"))?;
    gpt::write(out, &layout, MbrBootCode::Clear)?;
    let (y, m, d) = inputs.release.release.version.date();
    let opts = Options {
        label: STICK_LABEL.to_owned(),
        volume_id: {
            let g = Guid::from_name(&seed, "volume-id").0;
            u32::from_le_bytes([g[0], g[1], g[2], g[3]])
        },
        time: Timestamp {
            year: u16::try_from(y).unwrap_or(1980),
            month: u8::try_from(m).unwrap_or(1),
            day: u8::try_from(d).unwrap_or(1),
            ..Timestamp::EPOCH
        },
    };
    fat::write(out, esp.offset(), esp.size(), &tree, &opts, &mut |n| {
        progress.advance(n)
    })?;
    grub::install(out, &boot_img, &core_img, bios)?;
    Ok(Summary {
        disk_size,
        esp_size: esp.size(),
        content: tree.content_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_esp_is_gpt1_sized_to_its_contents_and_the_bios_partition_follows() {
        let mut t = Tree::new();
        t.add_bytes("liken/release/big", vec![0u8; 50 << 20])
            .unwrap();
        let l = decide_layout(&t, "seed").unwrap();
        let names: Vec<&str> = l.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, [STICK_LABEL, BIOS_NAME]);
        let esp = &l.partitions[0];
        assert_eq!(esp.type_guid, guid::ESP);
        assert_eq!(esp.first_lba, 2048);
        assert!(esp.size() >= (50 << 20) + SLACK);
        assert!(
            esp.size() < (50 << 20) + SLACK + (8 << 20),
            "{}",
            esp.size()
        );
        let bios = &l.partitions[1];
        assert_eq!(bios.type_guid, guid::BIOS_BOOT);
        assert_eq!(bios.size(), BIOS_SIZE);
        assert_eq!(bios.first_lba % 2048, 0);
        assert_eq!(l.disk_sectors, bios.last_lba + 1 + 33);
        // Reproducible: the same seed gives the same GUIDs, another seed others.
        assert_eq!(decide_layout(&t, "seed").unwrap(), l);
        assert_ne!(decide_layout(&t, "other").unwrap().disk_guid, l.disk_guid);
    }
}
