//! `liken layer` read by GNU cpio: the archive is newc, lists in sorted
//! order with fixed owners and times, extracts to exactly the inputs, and
//! the same inputs give the same bytes.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::{Scratch, deployment, fails, liken, mode, ok};

fn cpio(args: &[&str], input: &[u8], cwd: &std::path::Path) -> String {
    let mut child = Command::new("cpio")
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cpio is installed by scripts/setup.sh");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cpio {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const IDENTITY: [&str; 13] = [
    "server/agent-token",
    "server/tls/client-ca.crt",
    "server/tls/client-ca.key",
    "server/tls/etcd/peer-ca.crt",
    "server/tls/etcd/peer-ca.key",
    "server/tls/etcd/server-ca.crt",
    "server/tls/etcd/server-ca.key",
    "server/tls/request-header-ca.crt",
    "server/tls/request-header-ca.key",
    "server/tls/server-ca.crt",
    "server/tls/server-ca.key",
    "server/tls/service.key",
    "server/token",
];

#[test]
fn cpio_lists_and_extracts_the_layer_exactly() {
    let s = Scratch::new("layer");
    let dep = s.path().join("home");
    deployment(&dep);
    let out1 = s.path().join("one.cpio");
    let out2 = s.path().join("two.cpio");
    let layer = |out: &std::path::Path| {
        ok(liken([
            std::ffi::OsStr::new("layer"),
            dep.as_os_str(),
            dep.join("identity").as_os_str(),
            out.as_os_str(),
        ]))
    };
    let said = layer(&out1);
    assert!(said.contains("machines node-1, node-2"), "{said}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    layer(&out2);
    let bytes = std::fs::read(&out1).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&out2).unwrap(),
        "same inputs, same bytes"
    );
    assert_eq!(mode(&out1), 0o600, "the layer holds CA keys");

    // The listing, in archive order, forced to read as newc.
    let listed: Vec<String> = cpio(&["-t", "--quiet", "-H", "newc"], &bytes, s.path())
        .lines()
        .map(str::to_owned)
        .collect();
    let mut want: Vec<String> = [
        "etc",
        "etc/liken",
        "etc/liken/cluster.yaml",
        "etc/liken/identity",
        "etc/liken/identity/server",
        "etc/liken/identity/server/tls",
        "etc/liken/identity/server/tls/etcd",
        "etc/liken/machines",
        "etc/liken/machines/node-1.yaml",
        "etc/liken/machines/node-2.yaml",
        "etc/liken/trust.yaml",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(IDENTITY.iter().map(|f| format!("etc/liken/identity/{f}")))
    .collect();
    want.sort();
    assert_eq!(listed, want);

    // Owners and times carry nothing from this machine.
    let verbose = cpio(&["-t", "-v", "--quiet", "-n"], &bytes, s.path());
    for line in verbose.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((cols[2], cols[3]), ("0", "0"), "{line}");
        assert!(line.contains("1970"), "zero mtime: {line}");
    }

    // Extraction gives back every input byte for byte, with its mode.
    let root = s.path().join("root");
    std::fs::create_dir(&root).unwrap();
    cpio(
        &["-i", "-d", "--quiet", "--no-absolute-filenames"],
        &bytes,
        &root,
    );
    let etc = root.join("etc/liken");
    for (packed, source) in [
        ("cluster.yaml", dep.join("cluster.yaml")),
        ("machines/node-1.yaml", dep.join("machines/node-1.yaml")),
        ("machines/node-2.yaml", dep.join("machines/node-2.yaml")),
    ] {
        assert_eq!(
            std::fs::read(etc.join(packed)).unwrap(),
            std::fs::read(source).unwrap(),
            "{packed}"
        );
        assert_eq!(mode(&etc.join(packed)), 0o644, "{packed}");
    }
    for f in IDENTITY {
        let got = etc.join("identity").join(f);
        assert_eq!(
            std::fs::read(&got).unwrap(),
            std::fs::read(dep.join("identity").join(f)).unwrap(),
            "{f}"
        );
        let private = f.ends_with(".key") || f.ends_with("token");
        assert_eq!(mode(&got), if private { 0o600 } else { 0o644 }, "{f}");
    }
    for d in ["", "/identity", "/identity/server/tls/etcd", "/machines"] {
        assert_eq!(mode(&root.join(format!("etc/liken{d}"))), 0o755, "{d}");
    }
    assert!(
        !etc.join("identity/kubeconfig").exists(),
        "no admin credential in a layer"
    );
}

#[test]
fn a_layer_with_an_undeclared_leader_is_refused_and_not_written() {
    let s = Scratch::new("layer-refused");
    let dep = s.path().join("home");
    deployment(&dep);
    std::fs::remove_file(dep.join("machines/node-1.yaml")).unwrap();
    std::fs::write(
        dep.join("machines/node-2.yaml"),
        std::fs::read_to_string(dep.join("machines/node-2.yaml"))
            .unwrap()
            .replace("rebootPolicy: Auto", "rebootPolicy: Sometimes"),
    )
    .unwrap();
    let out = s.path().join("layer.cpio");
    let err = fails(liken([
        std::ffi::OsStr::new("layer"),
        dep.as_os_str(),
        dep.join("identity").as_os_str(),
        out.as_os_str(),
    ]));
    assert!(
        err.starts_with("liken: layer: the manifests are not valid:"),
        "{err}"
    );
    assert!(err.contains("spec.leaders[0] names \"node-1\""), "{err}");
    assert!(err.contains("node-2.yaml"), "{err}");
    assert!(!out.exists());
}
