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

/// Unpacks every cpio archive of a netboot image from `start` (past the
/// release's boot.cpio, a stand-in here) into `into` with GNU cpio, as
/// the kernel unpacks them one after another into one root (each ends at
/// its trailer; zero padding lies between them); then the layer the
/// image carries as a file, into `into/layer`.
fn unpack_all(image: &[u8], mut start: usize, into: &std::path::Path) {
    std::fs::create_dir_all(into).unwrap();
    let trailer = b"TRAILER!!!\0";
    while start < image.len() {
        let end = image[start..]
            .windows(trailer.len())
            .position(|w| w == trailer)
            .map(|i| start + i + trailer.len())
            .expect("every archive ends at a trailer");
        assert!(
            image[start..].starts_with(b"070701"),
            "an archive at {start}"
        );
        let mut child = tool("cpio")
            .args(["-i", "-d", "-u", "--quiet", "--no-absolute-filenames"])
            .current_dir(into)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = child.stdin.take().unwrap().write_all(&image[start..]);
        assert!(child.wait().unwrap().success());
        start = end
            + image[end..]
                .iter()
                .position(|b| *b != 0)
                .unwrap_or(image.len() - end);
    }
    let nested = std::fs::read(into.join("liken/layer.cpio")).unwrap();
    unpack_all_one(&nested, &into.join("layer"));
}

fn unpack_all_one(archive: &[u8], into: &std::path::Path) {
    std::fs::create_dir_all(into).unwrap();
    let mut child = tool("cpio")
        .args(["-i", "-d", "--quiet", "--no-absolute-filenames"])
        .current_dir(into)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(archive);
    assert!(child.wait().unwrap().success());
}

/// A follower's netboot image, opened the way the kernel opens it,
/// holds no private key and no server token in any file (the layer it
/// unpacks, and the layer it carries as a file), only the agent token
/// and the server CA certificate; it lists only followers. The leader's
/// image still holds the whole identity. A role that is not one is
/// refused.
#[test]
fn a_followers_netboot_image_holds_no_private_key() {
    let tmp = TempDir::new("media-roles");
    let rel = release(tmp.path(), false);
    let dep = deployment(tmp.path());
    let make = |role: &str| {
        let out = tmp.path().join(format!("{role}.cpio"));
        let (success, stdout, err) = liken(&[
            "media",
            "-role",
            role,
            "-output",
            out.to_str().unwrap(),
            rel.to_str().unwrap(),
            dep.to_str().unwrap(),
        ]);
        assert!(success, "{err}");
        let x = tmp.path().join(format!("x-{role}"));
        let boot = std::fs::read(rel.join("boot.cpio")).unwrap().len();
        unpack_all(&std::fs::read(&out).unwrap(), pad4(boot), &x);
        (stdout, err, tree(&x))
    };
    let has = |files: &[(String, Vec<u8>)], needle: &str| -> Vec<String> {
        files
            .iter()
            .filter(|(_, b)| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .map(|(p, _)| p.clone())
            .collect()
    };

    let (stdout, err, files) = make("follower");
    assert!(
        stdout.contains("the followers' layer (no private key) for node-2\n"),
        "{stdout}"
    );
    assert!(
        err.contains("no private key or server token") && !err.contains("warning"),
        "{err}"
    );
    assert!(
        has(&files, "PRIVATE KEY").is_empty(),
        "{:?}",
        has(&files, "PRIVATE KEY")
    );
    assert!(
        has(&files, "::server:").is_empty(),
        "{:?}",
        has(&files, "::server:")
    );
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    for layer in ["etc/liken", "layer/etc/liken"] {
        for want in [
            "cluster.yaml",
            "machines/node-2.yaml",
            "identity/server/agent-token",
            "identity/server/tls/server-ca.crt",
        ] {
            assert!(
                names.contains(&format!("{layer}/{want}").as_str()),
                "{layer}/{want}: {names:?}"
            );
        }
        let identity: Vec<&&str> = names
            .iter()
            .filter(|n| n.starts_with(&format!("{layer}/identity/")))
            .collect();
        assert_eq!(identity.len(), 2, "{identity:?}");
    }
    assert!(!has(&files, "::node:").is_empty());

    let (stdout, err, files) = make("leader");
    assert!(
        stdout.contains("the leaders' layer for node-1\n"),
        "{stdout}"
    );
    assert!(err.contains("liken: warning: "), "{err}");
    let keys = has(&files, "PRIVATE KEY");
    assert!(
        keys.contains(&"etc/liken/identity/server/tls/client-ca.key".to_owned())
            && keys.contains(&"layer/etc/liken/identity/server/tls/service.key".to_owned()),
        "{keys:?}"
    );
    assert!(!has(&files, "::server:").is_empty());

    let (success, _, err) = liken(&[
        "media",
        "-role",
        "worker",
        "-output",
        tmp.path().join("w.cpio").to_str().unwrap(),
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(!success && err.contains("give leader or follower"), "{err}");
}
