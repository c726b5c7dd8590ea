//! liken-disk's dm-verity trees checked by cryptsetup's own
//! `veritysetup verify`, which rebuilds the tree in userspace (no
//! device-mapper, no root) and compares it with the one on disk.
//!
//! Each size is laid out as `liken bundle` lays out a system artifact:
//! the data, zeros to the next 4096-byte boundary, then the hash area,
//! in one file checked with `--hash-offset`. The sizes cover every shape
//! the level count takes: one block (no level), a partial last block,
//! one full hash block, two levels, and three (more than 128 × 128 data
//! blocks, 64 MiB). Then one flipped byte must make veritysetup refuse,
//! which shows it checked the bytes rather than agreed with anything.
//! scripts/setup.sh installs veritysetup (cryptsetup-bin).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Output;

use liken_disk::verity::{self, Tree};
use liken_testenv::scratch::{TempDir, bytes, ok, tool};

const BLOCK: u64 = 4096;
const MIB: usize = 1 << 20;

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `len` pseudo-random bytes to `path` a mebibyte at a time, so
/// the 64 MiB case never sits in memory whole.
fn write_data(path: &Path, len: usize, seed: u64) {
    let mut f = BufWriter::new(File::create(path).unwrap());
    let mut left = len;
    let mut chunk = 0u64;
    while left > 0 {
        let n = left.min(MIB);
        f.write_all(&bytes(n, seed ^ (chunk << 32))).unwrap();
        left -= n;
        chunk += 1;
    }
    f.flush().unwrap();
}

/// Builds the tree of the file at `path` from the file itself, then pads
/// the file to whole blocks and appends the hash area, as bundle does.
fn append_tree(path: &Path, salt: &[u8]) -> Tree {
    let mut area = Vec::new();
    let tree = verity::build(&mut File::open(path).unwrap(), salt, &mut area).unwrap();
    assert_eq!(area.len() as u64, tree.geometry.hash_size());
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(&vec![0; tree.padding() as usize]).unwrap();
    f.write_all(&area).unwrap();
    tree
}

/// `veritysetup verify` with every parameter spelled out, rather than
/// left to its defaults: the format liken records in release.yaml.
fn verify(data: &Path, hash: &Path, hash_offset: u64, tree: &Tree, salt: &[u8]) -> Output {
    let mut c = tool("veritysetup");
    c.args([
        "verify",
        "--no-superblock",
        "--format=1",
        "--hash=sha256",
        "--data-block-size=4096",
        "--hash-block-size=4096",
    ])
    .arg(format!("--data-blocks={}", tree.geometry.data_blocks))
    .arg(format!("--hash-offset={hash_offset}"))
    .arg(format!(
        "--salt={}",
        if salt.is_empty() {
            "-".into()
        } else {
            hex(salt)
        }
    ))
    .arg(data)
    .arg(hash)
    .arg(hex(&tree.root_hash));
    c.output().unwrap()
}

fn refused(out: &Output) -> bool {
    let text = String::from_utf8_lossy(&out.stderr);
    !out.status.success() && text.contains("failed")
}

fn flip(path: &Path, at: u64) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x01]).unwrap();
}

#[test]
fn veritysetup_verifies_trees_of_every_depth_and_refuses_a_flipped_byte() {
    let dir = TempDir::new("disk-verity");
    let salt: Vec<u8> = (100u8..132).collect();
    // (data bytes, levels of the tree)
    let cases: [(usize, usize); 6] = [
        (4096, 0),
        (2 * 4096 + 123, 1),
        (128 * 4096, 1),
        (MIB + 5 * 4096 + 7, 2),
        (128 * 128 * 4096 + 3 * 4096 + 100, 3),
        (4096 + 1, 1),
    ];
    for (i, (len, levels)) in cases.into_iter().enumerate() {
        let img = dir.path().join(format!("image-{i}"));
        write_data(&img, len, 0x5EED + i as u64);
        let tree = append_tree(&img, &salt);
        assert_eq!(tree.geometry.levels.len(), levels, "{len} bytes");
        assert_eq!(tree.data_len, len as u64);
        let offset = tree.geometry.data_size();
        assert_eq!(offset % BLOCK, 0);
        assert_eq!(
            std::fs::metadata(&img).unwrap().len(),
            offset + tree.geometry.hash_size()
        );

        let out = verify(&img, &img, offset, &tree, &salt);
        assert!(
            out.status.success(),
            "veritysetup refused the tree of {len} bytes:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );

        // One bit of the data's last byte, then of the first.
        for at in [len as u64 - 1, 0] {
            flip(&img, at);
            let out = verify(&img, &img, offset, &tree, &salt);
            assert!(
                refused(&out),
                "veritysetup took {len} bytes with byte {at} flipped: {out:?}"
            );
            flip(&img, at);
        }
        // A flipped byte of the tree's top block, where there is a tree.
        if levels > 0 {
            flip(&img, offset);
            assert!(refused(&verify(&img, &img, offset, &tree, &salt)));
            flip(&img, offset);
        }
        // Flipped back, it verifies again: the flip was what it refused.
        let out = verify(&img, &img, offset, &tree, &salt);
        assert!(out.status.success(), "{out:?}");
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn a_hash_area_in_a_file_of_its_own_verifies_and_a_wrong_salt_does_not() {
    // The other layout veritysetup knows: data and hash area apart, the
    // area at offset 0 of its own file, and no salt at all.
    let dir = TempDir::new("disk-verity-apart");
    let data = dir.path().join("data");
    let hash = dir.path().join("hash");
    write_data(&data, 300 * 4096, 7);
    let mut area = File::create(&hash).unwrap();
    let tree = verity::build(&mut File::open(&data).unwrap(), &[], &mut area).unwrap();
    drop(area);
    assert_eq!(tree.geometry.levels, [3, 1]);
    ok({
        let mut c = tool("veritysetup");
        c.args(["verify", "--no-superblock", "--salt=-"])
            .arg(&data)
            .arg(&hash)
            .arg(hex(&tree.root_hash));
        c
    });
    assert!(refused(&verify(&data, &hash, 0, &tree, &[1])));
    assert!(verify(&data, &hash, 0, &tree, &[]).status.success());
}
