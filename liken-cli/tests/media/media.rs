//! `liken media` end to end, read back with GNU cpio.

use std::io::Write;
use std::process::Stdio;

use crate::support::{TempDir, assert_warned_once, deployment, layer, liken, release, tool, tree};

fn pad4(n: usize) -> usize {
    n.next_multiple_of(4)
}

#[test]
fn a_netboot_image_is_boot_cpio_the_layer_and_the_release() {
    let tmp = TempDir::new("media-netboot");
    let rel = release(tmp.path(), false);
    let dep = deployment(tmp.path());
    let out = tmp.path().join("install.cpio");
    let (success, stdout, err) = liken(&[
        "media",
        "-output",
        out.to_str().unwrap(),
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(success, "{err}");
    assert!(
        stdout.contains("liken.install=1 liken.machine=<name>"),
        "{stdout}"
    );
    assert_warned_once(&stdout, &err);
    assert!(
        err.contains("serve it only to the machines being installed"),
        "{err}"
    );
    let image = std::fs::read(&out).unwrap();

    // boot.cpio unchanged, then the layer `liken layer` packs, each at a
    // four-byte boundary, then our archive of the release.
    let boot = std::fs::read(rel.join("boot.cpio")).unwrap();
    assert_eq!(&image[..boot.len()], &boot[..]);
    let at = pad4(boot.len());
    assert!(image[boot.len()..at].iter().all(|b| *b == 0));
    let lay = layer(tmp.path(), &dep);
    assert_eq!(&image[at..at + lay.len()], &lay[..]);
    let rest = &image[pad4(at + lay.len())..];

    let list = |archive: &[u8]| -> String {
        let mut child = tool("cpio")
            .args(["-t", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // cpio stops reading at the archive's trailer.
        let _ = child.stdin.take().unwrap().write_all(archive);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(list(&image[at..at + lay.len()]).contains("etc/liken/cluster.yaml"));
    let listed = list(rest);
    let mut want = vec![
        "liken".to_owned(),
        "liken/layer.cpio".to_owned(),
        "liken/release".to_owned(),
    ];
    let files = tree(&rel);
    for (p, _) in &files {
        want.push(format!("liken/release/{p}"));
    }
    let mut got: Vec<String> = listed.lines().map(str::to_owned).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // Extracted, every file is the release's.
    let x = tmp.path().join("x");
    std::fs::create_dir(&x).unwrap();
    let mut child = tool("cpio")
        .args(["-i", "-d", "--quiet"])
        .current_dir(&x)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(tree(&x.join("liken/release")), files);
    assert_eq!(std::fs::read(x.join("liken/layer.cpio")).unwrap(), lay);

    // The same inputs give the same bytes; an existing output needs -force.
    let (success, _, err) = liken(&[
        "media",
        "-output",
        out.to_str().unwrap(),
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(!success && err.contains("-force"), "{err}");
    assert!(
        !err.contains("warning"),
        "no warning when nothing is written: {err}"
    );
    let (success, _, err) = liken(&[
        "media",
        "-force",
        "-output",
        out.to_str().unwrap(),
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(success, "{err}");
    assert!(std::fs::read(&out).unwrap() == image);
}
