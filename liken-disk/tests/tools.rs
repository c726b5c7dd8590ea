//! liken-disk's images checked by the tools people trust: gdisk's
//! `sgdisk -v`, dosfstools' `fsck.vfat -n`, mtools' `mdir`/`mtype`/`mlabel`
//! (every file listed and read back byte for byte), and a real core.img
//! from `grub-mkimage` placed and read back. scripts/setup.sh installs
//! gdisk, dosfstools, mtools and grub-pc-bin.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Output;

use liken_disk::fat::{self, Options, Timestamp, Tree};
use liken_disk::gpt::{self, MbrBootCode, PartitionSpec, Size};
use liken_disk::grub;
use liken_disk::guid::{BIOS_BOOT, ESP, Guid, LINUX_DATA};
use liken_testenv::scratch::{TempDir, bytes, grub_core, grub_dir, ok, tool};

const MIB: u64 = 1 << 20;

/// stdout and stderr together: some tools report on one, some on the
/// other.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn image(path: &Path, size: u64) -> File {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.set_len(size).unwrap();
    f
}

fn spec(name: &str, t: Guid, size: Size) -> PartitionSpec {
    PartitionSpec {
        name: name.into(),
        type_guid: t,
        guid: Guid::from_name("tools-test", name),
        size,
        attributes: 0,
    }
}

#[test]
fn the_installed_layout_passes_sgdisk() {
    let dir = TempDir::new("disk-gpt");
    let path = dir.path().join("disk.img");
    let size = 4096 * MIB;
    let mut f = image(&path, size);
    let specs = [
        spec("LIKEN-ESP", ESP, Size::Bytes(512 * MIB)),
        spec("LIKEN-BIOS", BIOS_BOOT, Size::Bytes(MIB)),
        spec("LIKEN-A", LINUX_DATA, Size::Bytes(1024 * MIB)),
        spec("LIKEN-B", LINUX_DATA, Size::Bytes(1024 * MIB)),
        spec("LIKEN-DATA", LINUX_DATA, Size::Rest { min: 1024 * MIB }),
    ];
    let layout = gpt::plan(size, Guid::random().unwrap(), &specs).unwrap();
    gpt::write(&mut f, &layout, MbrBootCode::Clear).unwrap();
    drop(f);

    let mut c = tool("sgdisk");
    c.arg("-v").arg(&path);
    let out = text(&ok(c));
    assert!(out.contains("No problems found"), "{out}");

    let mut c = tool("sgdisk");
    c.arg("-p").arg(&path);
    let out = text(&ok(c));
    for (i, (name, code)) in [
        ("LIKEN-ESP", "EF00"),
        ("LIKEN-BIOS", "EF02"),
        ("LIKEN-A", "8300"),
        ("LIKEN-B", "8300"),
        ("LIKEN-DATA", "8300"),
    ]
    .iter()
    .enumerate()
    {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&(i + 1).to_string()))
            .unwrap_or_else(|| panic!("no partition {} in\n{out}", i + 1));
        assert!(line.contains(name) && line.contains(code), "{line}");
        let start: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(start, layout.partitions[i].first_lba);
    }
    let mut c = tool("sgdisk");
    c.arg("-i").arg("3").arg(&path);
    let out = text(&c.output().unwrap());
    assert!(
        out.contains(&format!(
            "Partition unique GUID: {}",
            layout.partitions[2].guid
        )),
        "{out}"
    );
    assert!(out.contains("Partition name: 'LIKEN-A'"), "{out}");

    let mut f = File::open(&path).unwrap();
    assert_eq!(gpt::read(&mut f).unwrap(), layout);
}

/// Every file of a volume: its path and bytes, streamed ones included.
fn esp_tree(dir: &Path) -> (Tree, Vec<(String, Vec<u8>)>) {
    let mut tree = Tree::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add_bytes = |tree: &mut Tree, path: &str, b: Vec<u8>| {
        tree.add_bytes(path, b.clone()).unwrap();
        files.push((path.to_owned(), b));
    };
    add_bytes(&mut tree, "EFI/BOOT/BOOTX64.EFI", bytes(70_001, 1));
    add_bytes(
        &mut tree,
        "loader/loader.conf",
        b"timeout 0\ndefault install-*\n".to_vec(),
    );
    for n in 1..=3 {
        add_bytes(
            &mut tree,
            &format!("loader/entries/install-node-{n}.conf"),
            format!("title install node-{n}\nlinux /liken/vmlinuz\n").into_bytes(),
        );
    }
    add_bytes(&mut tree, "empty.txt", Vec::new());
    add_bytes(&mut tree, "exactly-one-cluster.bin", bytes(4096, 2));
    add_bytes(
        &mut tree,
        "Mixed Case Name.Text",
        b"spaces and case\n".to_vec(),
    );
    add_bytes(&mut tree, "grub/grub.cfg", b"set timeout=0\n".to_vec());
    // Enough names in one directory to take several clusters and to
    // make the short names collide past ~9.
    for n in 0..300 {
        add_bytes(
            &mut tree,
            &format!("many/a-rather-long-file-name-number-{n:03}.conf"),
            format!("{n}\n").into_bytes(),
        );
    }
    tree.add_dir("liken/release").unwrap();
    // Streamed from files on disk, one of them several MiB.
    for (name, len, seed) in [
        ("vmlinuz", 5 * MIB as usize + 123, 3u64),
        ("boot.cpio", 2_000_000, 4),
    ] {
        let src = dir.join(name);
        let b = bytes(len, seed);
        std::fs::write(&src, &b).unwrap();
        let path = format!("liken/{name}");
        tree.add_file(&path, &src).unwrap();
        files.push((path, b));
    }
    (tree, files)
}

#[test]
fn a_fat_volume_passes_fsck_and_mtools_reads_every_file() {
    let dir = TempDir::new("disk-fat");
    let (tree, files) = esp_tree(dir.path());
    let path = dir.path().join("esp.img");
    // The volume at an offset, as in a partition; fsck reads a copy.
    let offset = MIB;
    let size = fat::minimum_size(&tree, 4 * MIB).unwrap();
    let mut f = image(&path, offset + size);
    let opts = Options {
        label: "LIKEN-ESP".into(),
        volume_id: 0xC0FF_EE00,
        time: Timestamp {
            year: 2026,
            month: 12,
            day: 2,
            hour: 12,
            minute: 30,
            second: 10,
        },
    };
    let mut written = 0;
    let plan = fat::write(&mut f, offset, size, &tree, &opts, &mut |n| written += n).unwrap();
    assert_eq!(
        written,
        files.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    );
    assert!(u64::from(plan.geometry.clusters) >= fat::MIN_CLUSTERS);

    let alone = dir.path().join("alone.img");
    let mut out = image(&alone, size);
    f.seek(SeekFrom::Start(offset)).unwrap();
    std::io::copy(&mut (&f).take(size), &mut out).unwrap();
    drop(out);

    let mut c = tool("fsck.vfat");
    c.arg("-n").arg("-v").arg(&alone);
    let out = text(&ok(c));
    assert!(!out.contains("differences"), "{out}");
    assert!(
        !out.to_lowercase().contains("free cluster summary wrong"),
        "{out}"
    );

    let img = format!("{}@@{offset}", path.display());
    let mut c = tool("mlabel");
    c.args(["-s", "-i", &img, "::"]);
    let out = text(&ok(c));
    assert!(out.contains("LIKEN-ESP"), "{out}");

    let mut c = tool("mdir");
    c.args(["-/", "-b", "-i", &img, "::/"]);
    let listing = text(&ok(c));
    let listed: Vec<&str> = listing
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(|l| l.trim_start_matches("::/"))
        .collect();
    let mut want: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    let mut got = listed.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "mdir lists exactly the files written");
    assert!(
        listing.lines().any(|l| l == "::/liken/release/"),
        "{listing}"
    );

    for (p, b) in &files {
        let mut c = tool("mtype");
        c.args(["-i", &img, &format!("::/{p}")]);
        assert_eq!(&ok(c).stdout, b, "{p} reads back as written");
    }

    // The same input gives the same bytes.
    let again = dir.path().join("again.img");
    let mut g = image(&again, offset + size);
    fat::write(&mut g, offset, size, &tree, &opts, &mut |_| {}).unwrap();
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&path).unwrap());
}

#[test]
fn a_volume_too_small_for_its_files_is_refused() {
    let dir = TempDir::new("disk-fat-small");
    let (tree, _) = esp_tree(dir.path());
    let opts = Options {
        label: "X".into(),
        volume_id: 1,
        time: Timestamp::EPOCH,
    };
    let mut f = image(&dir.path().join("x.img"), 40 * MIB);
    let mut big = tree.clone();
    let src = dir.path().join("big");
    image(&src, 40 * MIB);
    big.add_file("big", &src).unwrap();
    let e = fat::write(&mut f, 0, 40 * MIB, &big, &opts, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("make the partition larger"), "{e}");
}

#[test]
fn grub_is_placed_as_grub_setup_places_it() {
    let dir = TempDir::new("disk-grub");
    let gdir = grub_dir();
    let core = dir.path().join("core.img");
    grub_core(&core);
    let core_img = std::fs::read(&core).unwrap();
    let boot_img = std::fs::read(gdir.join("boot.img")).unwrap();

    let path = dir.path().join("stick.img");
    let size = 64 * MIB;
    let mut f = image(&path, size);
    let specs = [
        spec("LIKEN-STICK", ESP, Size::Bytes(40 * MIB)),
        spec("LIKEN-BIOS", BIOS_BOOT, Size::Bytes(MIB)),
    ];
    let layout = gpt::plan(size, Guid::from_name("t", "disk"), &specs).unwrap();
    gpt::write(&mut f, &layout, MbrBootCode::Clear).unwrap();
    let bios = layout.by_name("LIKEN-BIOS").unwrap();
    grub::install(&mut f, &boot_img, &core_img, bios).unwrap();

    let fields = grub::read_fields(&mut f).unwrap();
    let sectors = (core_img.len() as u64).div_ceil(512);
    assert_eq!(
        fields,
        grub::BootFields {
            kernel_sector: bios.first_lba,
            boot_drive: 0xFF,
            drive_check: [0x90, 0x90],
            blocklist_start: bios.first_lba + 1,
            blocklist_len: u16::try_from(sectors - 1).unwrap(),
            blocklist_segment: 0x820,
        }
    );
    // boot.img's code is in the MBR and GRUB's own image carried the
    // default blocklist we replaced (start 2, segment 0x820).
    assert_eq!(&core_img[500..508], &2u64.to_le_bytes());
    assert_eq!(&core_img[510..512], &0x820u16.to_le_bytes());
    let mut mbr = [0u8; 512];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut mbr).unwrap();
    assert_eq!(&mbr[0x5A..0x5C], &boot_img[0x5A..0x5C]);
    assert_eq!(&mbr[0x65..0x66], &boot_img[0x65..0x66]);
    assert_eq!(&mbr[0x68..0x1B8], &boot_img[0x68..0x1B8]);
    assert_eq!(mbr[0x1C2], 0xEE, "the protective partition stays");
    let mut on_disk = vec![0u8; core_img.len()];
    f.seek(SeekFrom::Start(bios.offset())).unwrap();
    f.read_exact(&mut on_disk).unwrap();
    assert_eq!(&on_disk[..488], &core_img[..488]);
    assert_eq!(&on_disk[512..], &core_img[512..]);
    drop(f);

    // The table is still whole and the GPT keeps the boot code when
    // rewritten.
    let mut c = tool("sgdisk");
    c.arg("-v").arg(&path);
    let out = text(&ok(c));
    assert!(out.contains("No problems found"), "{out}");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    gpt::write(&mut f, &layout, MbrBootCode::Keep).unwrap();
    assert_eq!(grub::read_fields(&mut f).unwrap(), fields);

    // A core.img larger than the partition is refused, nothing written.
    let before = std::fs::read(&path).unwrap();
    let big = vec![0u8; (bios.size() + 1) as usize];
    let e = grub::install(&mut f, &boot_img, &big, bios).unwrap_err();
    assert!(matches!(e, grub::GrubError::CoreTooLarge { .. }), "{e}");
    f.flush().unwrap();
    assert!(std::fs::read(&path).unwrap() == before);
}
