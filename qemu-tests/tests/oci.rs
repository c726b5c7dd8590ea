//! The operator image archives `images/oci-image.sh` writes, checked by
//! tools that did not write them: the archive's own digests recomputed
//! here, skopeo reading it as an `oci-archive:`, and a real registry
//! (Debian's docker-registry on loopback) taking it through `skopeo
//! copy` and serving back the same manifest and entrypoint. Building
//! twice gives one sha256, and a binary that is not static is refused.
//!
//! The binary imaged is a static hello-world compiled here with rustc,
//! so the test needs neither the operators (not built yet) nor `make
//! images`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qemu_tests::{check, scratch, text, workspace};
use serde_json::Value;

const NAME: &str = "liken.sh/liken-ops:test";

fn oci_image(binary: &Path, name: &str, out: &Path) -> std::process::Output {
    Command::new(workspace().join("images/oci-image.sh"))
        .arg(binary)
        .arg(name)
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run images/oci-image.sh: {e}"))
}

fn sha256(path: &Path) -> String {
    let out = check(Command::new("sha256sum").arg(path));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn skopeo_json(args: &[&str]) -> Value {
    let out = check(Command::new("skopeo").args(args));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("skopeo {args:?} printed no JSON ({e}):\n{}", text(&out)))
}

/// A static program to put in the image, compiled with the toolchain
/// the workspace builds with (static-pie, as the Makefile's STATIC).
fn static_hello(dir: &Path) -> PathBuf {
    let src = dir.join("liken-oci-hello.rs");
    std::fs::write(
        &src,
        "fn main() { println!(\"hello from an OCI image\"); }\n",
    )
    .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let bin = dir.join("liken-oci-hello");
    check(
        Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
            .args([
                "-O",
                "-C",
                "target-feature=+crt-static",
                "--target",
                "x86_64-unknown-linux-gnu",
                "-o",
            ])
            .arg(&bin)
            .arg(&src),
    );
    bin
}

/// docker-registry serving from a scratch directory on loopback, killed
/// when dropped.
struct Registry {
    child: Child,
    port: u16,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free loopback port: {e}"));
        let storage = dir.join("registry-storage");
        std::fs::create_dir_all(&storage).unwrap_or_else(|e| panic!("{}: {e}", storage.display()));
        let config = dir.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", config.display()));
        let log = dir.join("registry.log");
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = file
            .try_clone()
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start docker-registry: {e}; scripts/setup.sh installs it")
            });
        let mut registry = Registry { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = registry.child.try_wait() {
                panic!(
                    "docker-registry exited ({status}) before listening:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on 127.0.0.1:{port} within 30 s; see {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    fn image(&self, repo: &str) -> String {
        format!("docker://127.0.0.1:{}/{repo}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_operator_image_is_a_deterministic_oci_archive_registries_accept() {
    let dir = scratch("oci-image");
    let hello = static_hello(&dir);

    let first = dir.join("first/liken-ops.tar");
    let second = dir.join("second/liken-ops.tar");
    for out in [&first, &second] {
        let run = oci_image(&hello, NAME, out);
        assert!(run.status.success(), "oci-image.sh failed:\n{}", text(&run));
    }
    assert_eq!(
        sha256(&first),
        sha256(&second),
        "two builds of one binary and name differ"
    );

    // The layout, read back and every digest recomputed over the bytes.
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap_or_else(|e| panic!("{}: {e}", layout.display()));
    let listing = text(&check(Command::new("tar").arg("-tvf").arg(&first)));
    for line in listing.lines() {
        assert!(
            line.contains(" 0/0 ") && line.contains(" 1970-01-01 00:00 "),
            "archive entry not owned by 0:0 at time 0: {line}"
        );
    }
    check(
        Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-xf")
            .arg(&first),
    );
    assert_eq!(
        json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let blobs = layout.join("blobs/sha256");
    let blob = |digest: &str| -> PathBuf {
        let hex = digest
            .strip_prefix("sha256:")
            .unwrap_or_else(|| panic!("digest {digest} is not sha256"));
        let path = blobs.join(hex);
        assert_eq!(sha256(&path), hex, "blob {hex} does not hash to its name");
        path
    };
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("index.json manifests");
    assert_eq!(manifests.len(), 1, "index.json: {index}");
    let entry = &manifests[0];
    assert_eq!(entry["annotations"]["io.containerd.image.name"], NAME);
    assert_eq!(
        entry["annotations"]["org.opencontainers.image.ref.name"],
        "test"
    );
    assert_eq!(entry["platform"]["architecture"], "amd64");
    let manifest_digest = entry["digest"]
        .as_str()
        .expect("manifest digest")
        .to_owned();
    let manifest_path = blob(&manifest_digest);
    assert_eq!(
        entry["size"].as_u64(),
        std::fs::metadata(&manifest_path).ok().map(|m| m.len())
    );
    let manifest = json(&manifest_path);
    let config_path = blob(
        manifest["config"]["digest"]
            .as_str()
            .expect("config digest"),
    );
    let layers = manifest["layers"].as_array().expect("manifest layers");
    assert_eq!(layers.len(), 1, "manifest: {manifest}");
    let layer_digest = layers[0]["digest"]
        .as_str()
        .expect("layer digest")
        .to_owned();
    let layer_path = blob(&layer_digest);
    let config = json(&config_path);
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/liken-oci-hello"])
    );
    assert_eq!(
        config["config"]["Env"],
        serde_json::json!(["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    );
    assert_eq!(
        config["rootfs"]["diff_ids"],
        serde_json::json!([layer_digest.clone()])
    );

    // The layer holds the binary alone, byte for byte, and it runs.
    let names = text(&check(Command::new("tar").arg("-tf").arg(&layer_path)));
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["usr/", "usr/bin/", "usr/bin/liken-oci-hello"]
    );
    let root = dir.join("rootfs");
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    check(
        Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-xf")
            .arg(&layer_path),
    );
    let inside = root.join("usr/bin/liken-oci-hello");
    check(Command::new("cmp").arg(&hello).arg(&inside));
    assert_eq!(
        text(&check(&mut Command::new(&inside))),
        "hello from an OCI image\n"
    );

    // skopeo reads the archive as an OCI layout.
    let archive = format!("oci-archive:{}", first.display());
    let local = skopeo_json(&["inspect", &archive]);
    assert_eq!(local["Digest"], manifest_digest.as_str());
    assert_eq!(local["Layers"], serde_json::json!([layer_digest.clone()]));

    // A real registry takes it, and serves back the very manifest.
    // --preserve-digests: skopeo otherwise gzips the uncompressed layer
    // on the way, which gives the registry a different manifest.
    let registry = Registry::start(&dir);
    let remote = registry.image("liken-ops:test");
    check(Command::new("skopeo").args([
        "copy",
        "-q",
        "--preserve-digests",
        "--dest-tls-verify=false",
        &archive,
        &remote,
    ]));
    let served = skopeo_json(&["inspect", "--tls-verify=false", &remote]);
    assert_eq!(served["Digest"], manifest_digest.as_str());
    assert_eq!(served["Layers"], serde_json::json!([layer_digest]));
    let served_config = skopeo_json(&["inspect", "--config", "--tls-verify=false", &remote]);
    assert_eq!(
        served_config["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/liken-oci-hello"])
    );
    let raw =
        check(Command::new("skopeo").args(["inspect", "--raw", "--tls-verify=false", &remote]));
    assert_eq!(
        raw.stdout,
        std::fs::read(&manifest_path).unwrap_or_default(),
        "the registry serves a manifest other than the archive's"
    );
}

#[test]
fn a_binary_that_is_not_static_is_refused() {
    let dir = scratch("oci-image-dynamic");
    // This test's own executable links glibc dynamically.
    let me = std::env::current_exe().expect("the test binary's path");
    let out = dir.join("refused.tar");
    let run = oci_image(&me, NAME, &out);
    assert!(!run.status.success(), "a dynamic binary was imaged");
    assert!(
        text(&run).contains("is not static"),
        "unclear refusal: {}",
        text(&run)
    );
    assert!(!out.exists(), "a refused build left {}", out.display());
}

#[test]
fn a_name_without_a_registry_host_or_tag_is_refused() {
    let dir = scratch("oci-image-name");
    let hello = static_hello(&dir);
    for bad in [
        "liken-ops:1",
        "liken.sh/liken-ops",
        "liken.sh/Liken-Ops:1",
        "liken.sh/x:\"1\"",
    ] {
        let out = dir.join("refused.tar");
        let run = oci_image(&hello, bad, &out);
        assert!(!run.status.success(), "name {bad} was accepted");
        assert!(
            text(&run).contains("is not a full reference"),
            "{}",
            text(&run)
        );
        assert!(!out.exists());
    }
}

/// `--tzdata` puts Debian's tz database in the layer at
/// /usr/share/zoneinfo, where the operators read maintenance windows'
/// zones; the reader they use (liken-api's TZif parser) reads it there,
/// and the leap-second zones it refuses are left out.
#[test]
fn the_tzdata_option_carries_the_zones_the_operators_read() {
    let dir = scratch("oci-image-tzdata");
    let hello = static_hello(&dir);
    let out = dir.join("liken-ops.tar");
    let run = Command::new(workspace().join("images/oci-image.sh"))
        .arg("--tzdata")
        .arg(&hello)
        .arg(NAME)
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run images/oci-image.sh: {e}"));
    assert!(
        run.status.success(),
        "oci-image.sh --tzdata failed:\n{}",
        text(&run)
    );
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    check(
        Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-xf")
            .arg(&out),
    );
    let index = json(&layout.join("index.json"));
    let manifest_hex =
        index["manifests"][0]["digest"].as_str().unwrap()["sha256:".len()..].to_owned();
    let manifest = json(&layout.join("blobs/sha256").join(manifest_hex));
    let layer_hex = manifest["layers"][0]["digest"].as_str().unwrap()["sha256:".len()..].to_owned();
    let root = dir.join("rootfs");
    std::fs::create_dir_all(&root).unwrap();
    check(
        Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-xf")
            .arg(layout.join("blobs/sha256").join(layer_hex)),
    );
    let zoneinfo = root.join("usr/share/zoneinfo");
    for (zone, january, july) in [
        ("Europe/Berlin", 3600, 7200),
        ("America/New_York", -18_000, -14_400),
        ("UTC", 0, 0),
    ] {
        let bytes = std::fs::read(zoneinfo.join(zone)).unwrap_or_else(|e| panic!("{zone}: {e}"));
        let z = liken_api::tzif::parse(&bytes).unwrap_or_else(|e| panic!("{zone}: {e}"));
        // 2030-01-15 and 2030-07-15, past the transitions the file lists
        // for some zones: the footer rule decides.
        assert_eq!(z.offset_at(1_894_665_600), january, "{zone}");
        assert_eq!(z.offset_at(1_910_390_400), july, "{zone}");
    }
    assert!(!zoneinfo.join("right").exists());
    assert!(root.join("usr/share/doc/tzdata/copyright").is_file());
}
