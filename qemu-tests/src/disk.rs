//! Installed disks made for a test with the real tools: sgdisk for the
//! GPT, mkfs.vfat and mtools for the ESP, the system image written raw
//! into its slot. The layout is the installed disk's (the issue-5 plan):
//!
//! | # | name        | type | size |
//! | 1 | LIKEN-ESP   | EF00 | 512 MiB, FAT32 labelled LIKEN-ESP |
//! | 2 | LIKEN-BIOS  | EF02 | 1 MiB |
//! | 3 | LIKEN-A     | 8300 | 1 GiB, slot A's squashfs raw |
//! | 4 | LIKEN-B     | 8300 | 1 GiB |
//! | 5 | LIKEN-DATA  | 8300 | the rest, blank (init formats it) |
//!
//! The disk image is a sparse file, so its 4 GiB cost what is written.
//! Nothing here needs root or a loop device. The same reading helpers
//! (partition table, ESP files) serve disks install mode wrote.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use liken_api::bootloader::{
    EntryParams, GrubParams, render_entry, render_grub_cfg, render_loader_conf,
};
use liken_api::release::Release;
use liken_api::verity::VerityArg;
use liken_api::{Slot, Version};

use crate::{check, cli_layer, images, run};

/// The disk's size: the plan's minimum target.
pub const DISK_BYTES: u64 = 4 << 30;
/// The ESP's size.
pub const ESP_BYTES: u64 = 512 << 20;

/// A partition: where it starts and how long it is, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset from the disk's start.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A disk image with the installed layout.
pub struct Disk {
    /// The image file.
    pub path: PathBuf,
    /// Partitions 1 to 5 by GPT name.
    pub parts: Vec<(String, Extent)>,
}

impl Disk {
    /// Creates a blank sparse image and partitions it with sgdisk.
    pub fn partitioned(path: &Path) -> Disk {
        let _ = std::fs::remove_file(path);
        let f = std::fs::File::create(path).unwrap_or_else(|e| panic!("create disk: {e}"));
        f.set_len(DISK_BYTES)
            .unwrap_or_else(|e| panic!("size disk: {e}"));
        drop(f);
        let p = path.to_string_lossy().into_owned();
        run(
            "sgdisk",
            &[
                "-o",
                "-n",
                "1:2048:+512M",
                "-t",
                "1:EF00",
                "-c",
                "1:LIKEN-ESP",
                "-n",
                "2:0:+1M",
                "-t",
                "2:EF02",
                "-c",
                "2:LIKEN-BIOS",
                "-n",
                "3:0:+1G",
                "-t",
                "3:8300",
                "-c",
                "3:LIKEN-A",
                "-n",
                "4:0:+1G",
                "-t",
                "4:8300",
                "-c",
                "4:LIKEN-B",
                "-n",
                "5:0:0",
                "-t",
                "5:8300",
                "-c",
                "5:LIKEN-DATA",
                &p,
            ],
        );
        Disk::read(path)
    }

    /// An existing disk image, its partitions read with `sgdisk -p`.
    pub fn read(path: &Path) -> Disk {
        let table = run("sgdisk", &["-p", &path.to_string_lossy()]);
        Disk {
            path: path.to_owned(),
            parts: parse_table(&table),
        }
    }

    /// A partition by GPT name.
    pub fn part(&self, name: &str) -> Extent {
        self.parts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| *e)
            .unwrap_or_else(|| panic!("the disk has no partition {name}: {:?}", self.parts))
    }

    /// Writes `file` into partition `name` at its start, skipping zero
    /// blocks so the image stays sparse.
    pub fn write_into(&self, name: &str, file: &Path) {
        let ext = self.part(name);
        let len = std::fs::metadata(file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .len();
        assert!(
            len <= ext.len,
            "{} ({len} bytes) does not fit in {name} ({} bytes)",
            file.display(),
            ext.len
        );
        let mut input =
            std::fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .unwrap_or_else(|e| panic!("open disk: {e}"));
        let mut buf = vec![0u8; 1 << 20];
        let mut at = ext.offset;
        loop {
            let n = read_full(&mut input, &mut buf);
            if n == 0 {
                break;
            }
            let chunk = &buf[..n];
            if chunk.iter().any(|b| *b != 0) {
                out.seek(SeekFrom::Start(at)).unwrap();
                out.write_all(chunk)
                    .unwrap_or_else(|e| panic!("write disk: {e}"));
            }
            at += n as u64;
        }
        out.sync_all().unwrap();
    }

    /// Places the images' GRUB boot.img in the MBR and core.img in
    /// LIKEN-BIOS with liken-disk, as install mode does.
    pub fn install_grub(&self) {
        let dir = &images().dir;
        let read = |name: &str| {
            std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}; make images"))
        };
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .unwrap_or_else(|e| panic!("open disk: {e}"));
        let layout =
            liken_disk::gpt::read(&mut f).unwrap_or_else(|e| panic!("the disk's GPT: {e}"));
        let bios = layout
            .by_name("LIKEN-BIOS")
            .unwrap_or_else(|| panic!("the disk has no LIKEN-BIOS partition"));
        liken_disk::grub::install(&mut f, &read("grub-boot.img"), &read("grub-core.img"), bios)
            .unwrap_or_else(|e| panic!("placing GRUB: {e}"));
        f.sync_all().unwrap_or_else(|e| panic!("sync disk: {e}"));
    }

    /// The variables in the ESP's grub/grubenv, read with grub-editenv
    /// after the machine is off.
    pub fn grubenv(&self) -> BTreeMap<String, String> {
        let env = self.path.with_extension("grubenv");
        std::fs::write(&env, self.esp_file("grub/grubenv"))
            .unwrap_or_else(|e| panic!("write {}: {e}", env.display()));
        let text = run("grub-editenv", &[&env.to_string_lossy(), "list"]);
        let _ = std::fs::remove_file(&env);
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// mtools's name for a partition's filesystem: `disk@@offset`.
    pub fn mtools_image(&self, name: &str) -> String {
        format!("{}@@{}", self.path.display(), self.part(name).offset)
    }

    /// The file names in a directory of the ESP, read with mdir after
    /// the machine is off.
    pub fn esp_list(&self, dir: &str) -> Vec<String> {
        let image = self.mtools_image("LIKEN-ESP");
        let text = run("mdir", &["-b", "-i", &image, &format!("::{dir}")]);
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().rsplit('/').next().map(str::to_owned))
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        names
    }

    /// A file on the ESP, read with mtype after the machine is off.
    pub fn esp_file(&self, path: &str) -> Vec<u8> {
        let image = self.mtools_image("LIKEN-ESP");
        check(Command::new("mtype").args(["-i", &image, &format!("::{path}")])).stdout
    }

    /// Puts `file` on the ESP at `path`, replacing what is there, with
    /// mcopy while the machine is off.
    pub fn esp_put(&self, path: &str, file: &Path) {
        let image = self.mtools_image("LIKEN-ESP");
        run(
            "mcopy",
            &[
                "-o",
                "-i",
                &image,
                &file.to_string_lossy(),
                &format!("::{path}"),
            ],
        );
    }

    /// Inverts the byte at `offset` in partition `name` (a corrupted
    /// block, for dm-verity to find).
    pub fn flip_byte(&self, name: &str, offset: u64) {
        let ext = self.part(name);
        assert!(offset < ext.len, "{offset} is past the end of {name}");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .unwrap_or_else(|e| panic!("open disk: {e}"));
        let at = ext.offset + offset;
        let mut byte = [0u8; 1];
        f.seek(SeekFrom::Start(at)).unwrap();
        f.read_exact(&mut byte).unwrap();
        byte[0] = !byte[0];
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&byte).unwrap();
        f.sync_all().unwrap();
    }

    /// The first `len` bytes of partition `name`.
    pub fn read_part(&self, name: &str, len: usize) -> Vec<u8> {
        let ext = self.part(name);
        let mut f = std::fs::File::open(&self.path).unwrap_or_else(|e| panic!("open disk: {e}"));
        f.seek(SeekFrom::Start(ext.offset))
            .unwrap_or_else(|e| panic!("seek disk: {e}"));
        let mut bytes = vec![0u8; len];
        f.read_exact(&mut bytes)
            .unwrap_or_else(|e| panic!("read {name}: {e}"));
        bytes
    }

    /// Copies partition `name` out into the file `to`, sparse, for a
    /// tool that checks a filesystem image.
    pub fn extract(&self, name: &str, to: &Path) {
        let ext = self.part(name);
        let mut src = std::fs::File::open(&self.path).unwrap_or_else(|e| panic!("open disk: {e}"));
        src.seek(SeekFrom::Start(ext.offset))
            .unwrap_or_else(|e| panic!("seek disk: {e}"));
        let mut out =
            std::fs::File::create(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
        out.set_len(ext.len)
            .unwrap_or_else(|e| panic!("size {}: {e}", to.display()));
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < ext.len {
            let n = buf.len().min((ext.len - at) as usize);
            src.read_exact(&mut buf[..n])
                .unwrap_or_else(|e| panic!("read {name}: {e}"));
            if buf[..n].iter().any(|b| *b != 0) {
                out.seek(SeekFrom::Start(at)).unwrap();
                out.write_all(&buf[..n])
                    .unwrap_or_else(|e| panic!("write {}: {e}", to.display()));
            }
            at += n as u64;
        }
    }

    /// What blkid says the filesystem in a partition is (`TYPE`, `LABEL`).
    pub fn probe(&self, name: &str) -> String {
        let ext = self.part(name);
        let out = Command::new("blkid")
            .args(["-p", "-o", "export", "-O", &ext.offset.to_string()])
            .arg(&self.path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run blkid: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

/// Reads `sgdisk -p`'s table: number, start, end sectors, ..., name.
fn parse_table(text: &str) -> Vec<(String, Extent)> {
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("Number") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 {
            continue;
        }
        let (Ok(start), Ok(end)) = (f[1].parse::<u64>(), f[2].parse::<u64>()) else {
            continue;
        };
        out.push((
            f[f.len() - 1].to_owned(),
            Extent {
                offset: start * 512,
                len: (end + 1 - start) * 512,
            },
        ));
    }
    out
}

/// A FAT32 ESP image (512 MiB, labelled LIKEN-ESP) holding `files`
/// (path on the ESP, file on the host), made with mkfs.vfat, mmd and
/// mcopy.
pub fn esp_image(path: &Path, files: &[(&str, &Path)]) {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).unwrap_or_else(|e| panic!("create esp: {e}"));
    f.set_len(ESP_BYTES).unwrap();
    drop(f);
    let p = path.to_string_lossy().into_owned();
    run("mkfs.vfat", &["-F", "32", "-n", "LIKEN-ESP", &p]);
    let mut dirs: Vec<String> = Vec::new();
    for (dest, _) in files {
        let mut at = String::new();
        let parts: Vec<&str> = dest.split('/').collect();
        for d in &parts[..parts.len() - 1] {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(d);
            if !dirs.contains(&at) {
                run("mmd", &["-i", &p, &format!("::{at}")]);
                dirs.push(at.clone());
            }
        }
    }
    for (dest, src) in files {
        run(
            "mcopy",
            &["-i", &p, &src.to_string_lossy(), &format!("::{dest}")],
        );
    }
}

/// systemd-boot: the images' own build when there is one, else Debian's
/// systemd-boot-efi package's (scripts/setup.sh installs it).
pub fn systemd_boot(images_dir: &Path) -> PathBuf {
    let built = images_dir.join("systemd-boot.efi");
    if built.exists() {
        return built;
    }
    let debian = PathBuf::from("/usr/lib/systemd/boot/efi/systemd-bootx64.efi");
    assert!(
        debian.exists(),
        "no systemd-boot: neither {} nor {}; run scripts/setup.sh (systemd-boot-efi)",
        built.display(),
        debian.display()
    );
    debian
}

/// A loader entry for a test machine: the console on ttyS0, then
/// `extra` (kernel arguments such as `liken.bless-after=`), and the
/// slot's `liken.verity=` when given, as init writes it.
pub fn entry(
    slot: Slot,
    version: &str,
    microcode: bool,
    extra: &[&str],
    verity: Option<&VerityArg>,
) -> String {
    render_entry(&EntryParams {
        slot,
        version: Version::parse(version).unwrap_or_else(|e| panic!("{version}: {e}")),
        microcode,
        console_args: vec!["console=ttyS0".into()],
        extra_args: extra.iter().map(|a| (*a).to_owned()).collect(),
        verity: verity.cloned(),
    })
}

/// A FAT disk (no partition table, 256 MiB) holding everything in
/// `release` (files and directories) at its root: the second drive a
/// stand-in mounts to hand init a release, as the machine operator hands
/// it a downloaded one.
pub fn release_disk(path: &Path, release: &Path) {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).unwrap();
    f.set_len(256 << 20).unwrap();
    drop(f);
    let p = path.to_string_lossy().into_owned();
    run("mkfs.vfat", &["-F", "32", "-n", "RELEASE", &p]);
    for e in std::fs::read_dir(release).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        run(
            "mcopy",
            &[
                "-s",
                "-i",
                &p,
                &e.path().to_string_lossy(),
                &format!("::{name}"),
            ],
        );
    }
}

/// The `liken.verity=` argument for a bundled release's system image
/// (`<channel>/<version>/`), from its release.yaml's record.
pub fn release_verity(dir: &Path) -> VerityArg {
    let path = dir.join("release.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let release: Release = liken_api::decode::strict(&text, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    let record = release.verity.as_ref().unwrap_or_else(|| {
        panic!(
            "{} has no verity record: bundle it again (make qemu-images)",
            path.display()
        )
    });
    VerityArg::from_record(record).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a slot boots: the kernel and boot.cpio the ESP holds for it,
/// and the system image written raw into its partition.
pub struct SlotFiles {
    /// The kernel (bzImage).
    pub vmlinuz: PathBuf,
    /// boot.cpio.
    pub boot_cpio: PathBuf,
    /// The squashfs system image.
    pub system: PathBuf,
}

impl SlotFiles {
    /// The images' kernel and boot.cpio with the system image that runs
    /// the stand-in as k3s.
    pub fn standin() -> SlotFiles {
        let images = images();
        SlotFiles {
            vmlinuz: images.vmlinuz.clone(),
            boot_cpio: images.boot_cpio.clone(),
            system: images.system_standin.clone(),
        }
    }

    /// A bundled release's (`<channel>/<version>/`).
    pub fn release(dir: &Path) -> SlotFiles {
        SlotFiles {
            vmlinuz: dir.join("vmlinuz"),
            boot_cpio: dir.join("boot.cpio"),
            system: dir.join("liken.sqfs"),
        }
    }
}

/// One slot on an installed disk: its entry's file name, the release
/// version and extra kernel arguments the entry names, and what it boots.
pub struct Installed<'a> {
    /// Slot A or B.
    pub slot: Slot,
    /// The entry's file name, try counter included (`liken-a+3.conf`).
    pub entry: &'a str,
    /// The release version the entry names.
    pub version: &'a str,
    /// Kernel arguments after the console.
    pub extra: &'a [&'a str],
    /// The kernel, boot.cpio and system image.
    pub files: &'a SlotFiles,
    /// The system image's root hash for the entry (`liken.verity=`),
    /// when it carries a dm-verity tree and the slot is to boot through
    /// it.
    pub verity: Option<&'a VerityArg>,
}

/// The BIOS path of an installed disk: GRUB's boot.img and core.img (the
/// images' own), grub.cfg with these kernel arguments after the console,
/// and a grubenv holding these variables.
pub struct Grub<'a> {
    /// grubenv's variables (`liken_slot`, `liken_<slot>_tries`),
    /// written by grub-editenv.
    pub env: &'a [(&'a str, &'a str)],
    /// Kernel arguments after `console=ttyS0`, for both slots.
    pub extra: &'a [&'a str],
}

/// `<dir>/disk.img` as install mode leaves a disk, made with the tools
/// instead: systemd-boot, loader.conf and a `liken new` deployment's
/// layer on the ESP, each of `slots` with its entry, kernel and
/// boot.cpio there and its system image in its partition, and
/// LIKEN-DATA blank. Booted under UEFI.
pub fn installed_disk(dir: &Path, slots: &[Installed<'_>]) -> Disk {
    installed_disk_with(dir, slots, None)
}

/// As [`installed_disk`], bootable under BIOS as well when `grub` is
/// given: grub.cfg and grubenv (made by grub-editenv) in the ESP's
/// `grub/`, core.img in LIKEN-BIOS and boot.img in the MBR, placed by
/// liken-disk as install mode places them.
pub fn installed_disk_with(dir: &Path, slots: &[Installed<'_>], grub: Option<&Grub<'_>>) -> Disk {
    let (_, layer) = cli_layer(dir, "test", "node-1");
    installed_disk_layered(dir, slots, grub, &layer)
}

/// As [`installed_disk_with`], with a deployment layer the test made
/// (a fleet host's deployment packed by `liken layer`).
pub fn installed_disk_layered(
    dir: &Path,
    slots: &[Installed<'_>],
    grub: Option<&Grub<'_>>,
    layer: &Path,
) -> Disk {
    let layer = layer.to_owned();
    let loader_conf = dir.join("loader.conf");
    std::fs::write(&loader_conf, render_loader_conf())
        .unwrap_or_else(|e| panic!("write loader.conf: {e}"));
    let mut files: Vec<(String, PathBuf)> = vec![
        ("EFI/BOOT/BOOTX64.EFI".into(), systemd_boot(&images().dir)),
        ("loader/loader.conf".into(), loader_conf),
        ("liken/layer.cpio".into(), layer),
    ];
    for s in slots {
        let text = dir.join(s.entry);
        std::fs::write(&text, entry(s.slot, s.version, false, s.extra, s.verity))
            .unwrap_or_else(|e| panic!("write {}: {e}", text.display()));
        let d = s.slot.esp_dir();
        files.push((format!("loader/entries/{}", s.entry), text));
        files.push((format!("liken/{d}/vmlinuz"), s.files.vmlinuz.clone()));
        files.push((format!("liken/{d}/boot.cpio"), s.files.boot_cpio.clone()));
    }
    if let Some(g) = grub {
        let cfg = dir.join("grub.cfg");
        std::fs::write(
            &cfg,
            render_grub_cfg(&GrubParams {
                console_args: vec!["console=ttyS0".into()],
                extra_args: g.extra.iter().map(|a| (*a).to_owned()).collect(),
            }),
        )
        .unwrap_or_else(|e| panic!("write grub.cfg: {e}"));
        let env = dir.join("grubenv");
        let _ = std::fs::remove_file(&env);
        let e = env.to_string_lossy().into_owned();
        run("grub-editenv", &[&e, "create"]);
        for (k, v) in g.env {
            run("grub-editenv", &[&e, "set", &format!("{k}={v}")]);
        }
        files.push(("grub/grub.cfg".into(), cfg));
        files.push(("grub/grubenv".into(), env));
    }
    let esp = dir.join("esp.img");
    let refs: Vec<(&str, &Path)> = files
        .iter()
        .map(|(d, p)| (d.as_str(), p.as_path()))
        .collect();
    esp_image(&esp, &refs);
    let d = Disk::partitioned(&dir.join("disk.img"));
    d.write_into("LIKEN-ESP", &esp);
    for s in slots {
        d.write_into(s.slot.partition_label(), &s.files.system);
    }
    if grub.is_some() {
        d.install_grub();
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sgdisks_table() {
        let text = "Disk x: 8388608 sectors, 4.0 GiB\n\
Number  Start (sector)    End (sector)  Size       Code  Name\n\
   1            2048         1050623   512.0 MiB   EF00  LIKEN-ESP\n\
   3         1052672         3149823   1024.0 MiB  8300  LIKEN-A\n";
        let t = parse_table(text);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            (
                "LIKEN-ESP".to_owned(),
                Extent {
                    offset: 1 << 20,
                    len: 512 << 20
                }
            )
        );
        assert_eq!(t[1].0, "LIKEN-A");
    }
}
