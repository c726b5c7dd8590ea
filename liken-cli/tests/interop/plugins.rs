//! `liken plugins sync|list|remove` against the fleet's kube-apiserver (the
//! labelled workloads) and Debian's docker-registry on loopback (the CLI
//! images, pushed by skopeo): an index with two platforms, a single
//! manifest with two layers, drift and its repair, remove, a registry
//! that demands a bearer token (a second docker-registry with `auth:
//! token`, verifying tokens signed by a small realm in this test against
//! its rootcertbundle), and a tampered layer blob. And the attacks: a
//! labelled workload in a tenant's namespace (ignored), a tag in a script
//! without -pin (refused, nothing installed), a tag moved in the registry
//! after it was pinned (the pinned digest is still what installs), and
//! `list` never running a plugin (a marker the CLI would write stays
//! absent).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

use crate::fleet::{self, Fleet};
use crate::new_pty::Terminal;
use crate::support::{Scratch, fails, liken, ok, output};

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// docker-registry on loopback, killed when dropped.
struct Registry {
    child: Child,
    port: u16,
}

impl Registry {
    /// Starts docker-registry on a port the kernel just handed out. The
    /// port is free when picked but not held (docker-registry binds it
    /// itself), so another process may take it first: docker-registry
    /// then exits, and the start is tried again on another port; the
    /// failure names each port tried.
    fn start(dir: &Path, name: &str, storage: &Path, auth: &str) -> Registry {
        let mut tried = Vec::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            tried.push(port);
            if let Some(r) = Registry::start_on(dir, name, storage, auth, port) {
                return r;
            }
        }
        panic!("docker-registry could not bind any of the ports {tried:?}; see {name}.log");
    }

    /// docker-registry on `port`, or `None` when it exited (the port was
    /// taken).
    fn start_on(dir: &Path, name: &str, storage: &Path, auth: &str, port: u16) -> Option<Registry> {
        let config = dir.join(format!("{name}.yml"));
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n{auth}",
                storage.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start docker-registry: {e}; scripts/setup.sh installs it")
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("docker-registry exited ({status}) on port {port}, taken; another port");
                return None;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                // Listening, and still alive: the listener is ours.
                std::thread::sleep(Duration::from_millis(100));
                if matches!(child.try_wait(), Ok(None)) {
                    return Some(Registry { child, port });
                }
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on port {port}; see {name}.log"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One platform's image: its layers (bytes, gzip or not) bottom first.
struct Image {
    arch: &'static str,
    layers: Vec<(Vec<u8>, bool)>,
    entrypoint: &'static str,
}

fn layer(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o755);
        b.append_data(&mut h, path, body.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A CLI that answers `--version` and echoes its words; every run is
/// marked in `$LIKEN_TEST_RAN` when that is set.
fn cli(version: &str) -> String {
    format!(
        "#!/bin/sh\n[ -n \"$LIKEN_TEST_RAN\" ] && echo \"$0 $*\" >> \"$LIKEN_TEST_RAN\"\n\
         if [ \"$1\" = --version ]; then echo {version}; exit 0; fi\necho \"$0 $*\"\n"
    )
}

/// Writes an OCI layout at `dir` holding `images` under `tag` (an index
/// when there are several) and pushes it to `to` with skopeo; returns the
/// digests of every layer, in order.
fn push(dir: &Path, images: &[Image], to: &str) -> Vec<String> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let d = sha(bytes);
        std::fs::write(blobs.join(&d["sha256:".len()..]), bytes).unwrap();
        json!({"digest": d, "size": bytes.len()})
    };
    let mut layers_pushed = Vec::new();
    let mut manifests = Vec::new();
    for image in images {
        let layers: Vec<Value> = image
            .layers
            .iter()
            .map(|(bytes, gz)| {
                let mut d = put(bytes);
                layers_pushed.push(d["digest"].as_str().unwrap().to_owned());
                d["mediaType"] = json!(if *gz {
                    "application/vnd.oci.image.layer.v1.tar+gzip"
                } else {
                    "application/vnd.oci.image.layer.v1.tar"
                });
                d
            })
            .collect();
        let diff_ids: Vec<String> = image
            .layers
            .iter()
            .map(|(bytes, gz)| {
                if *gz {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&bytes[..]),
                        &mut out,
                    )
                    .unwrap();
                    sha(&out)
                } else {
                    sha(bytes)
                }
            })
            .collect();
        let config = serde_json::to_vec(&json!({
            "architecture": image.arch, "os": "linux",
            "config": {"Entrypoint": [image.entrypoint]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids}
        }))
        .unwrap();
        let mut config_desc = put(&config);
        config_desc["mediaType"] = json!("application/vnd.oci.image.config.v1+json");
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc, "layers": layers
        }))
        .unwrap();
        let mut m = put(&manifest);
        m["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json");
        m["platform"] = json!({"os": "linux", "architecture": image.arch});
        manifests.push(m);
    }
    let top = if manifests.len() == 1 {
        manifests.pop().unwrap()
    } else {
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests
        }))
        .unwrap();
        let mut i = put(&index);
        i["mediaType"] = json!("application/vnd.oci.image.index.v1+json");
        i
    };
    let mut top = top;
    top["annotations"] = json!({"org.opencontainers.image.ref.name": "push"});
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [top]})).unwrap(),
    )
    .unwrap();
    ok(Command::new("skopeo").args([
        "copy",
        "-q",
        "--all",
        "--preserve-digests",
        "--dest-tls-verify=false",
        &format!("oci:{}:push", dir.display()),
        &format!("docker://{to}"),
    ]));
    layers_pushed
}

/// A token realm for docker-registry's `auth: token`: ES256 JWTs with the
/// signing certificate in `x5c`, which the registry verifies against its
/// rootcertbundle. `forge` signs with a key the registry does not trust.
struct Realm {
    port: u16,
    scopes: Arc<Mutex<Vec<String>>>,
    forge: Arc<Mutex<bool>>,
}

fn signer() -> (ring::signature::EcdsaKeyPair, Vec<u8>, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["liken-test-realm".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &key.serialize_der(),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap();
    (pair, cert.der().to_vec(), cert.pem())
}

impl Realm {
    /// Starts the realm; writes the trusted certificate to `bundle`.
    fn start(bundle: &Path) -> Realm {
        let trusted = signer();
        let forged = signer();
        std::fs::write(bundle, &trusted.2).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let scopes = Arc::new(Mutex::new(Vec::new()));
        let forge = Arc::new(Mutex::new(false));
        let (s, fg) = (scopes.clone(), forge.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut line = String::new();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                reader.read_line(&mut line).unwrap();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                        break;
                    }
                }
                let target = line.split(' ').nth(1).unwrap_or("");
                let query = target.split_once('?').map_or("", |(_, q)| q);
                let param = |k: &str| {
                    query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                        .map(|v| {
                            v.replace("%3A", ":")
                                .replace("%2F", "/")
                                .replace("%2C", ",")
                        })
                        .unwrap_or_default()
                };
                let scope = param("scope");
                s.lock().unwrap().push(scope.clone());
                let repo = scope.split(':').nth(1).unwrap_or("").to_owned();
                let (key, der) = if *fg.lock().unwrap() {
                    (&forged.0, &forged.1)
                } else {
                    (&trusted.0, &trusted.1)
                };
                let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                let header = json!({"typ": "JWT", "alg": "ES256",
                    "x5c": [base64::engine::general_purpose::STANDARD.encode(der)]});
                let claims = json!({"iss": "liken-test-realm", "sub": "", "aud": "liken-test-registry",
                    "exp": now + 300, "nbf": now - 10, "iat": now, "jti": format!("{now}-{repo}"),
                    "access": [{"type": "repository", "name": repo, "actions": ["pull"]}]});
                let signing = format!(
                    "{}.{}",
                    b64(header.to_string().as_bytes()),
                    b64(claims.to_string().as_bytes())
                );
                let sig = key
                    .sign(&ring::rand::SystemRandom::new(), signing.as_bytes())
                    .unwrap();
                let body = json!({"token": format!("{signing}.{}", b64(sig.as_ref()))}).to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Realm {
            port,
            scopes,
            forge,
        }
    }
}

fn workload(f: &Fleet, kind: &str, name: &str, domain: &str, image: &str) {
    workload_in(f, "liken-system", kind, name, domain, image)
}

fn workload_in(f: &Fleet, ns: &str, kind: &str, name: &str, domain: &str, image: &str) {
    let body = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"cli.liken.sh/plugin": domain}},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "operator", "image": image}]}}}
    });
    let plural = format!("{}s", kind.to_lowercase());
    let path = format!("/apis/apps/v1/namespaces/{ns}/{plural}");
    let (code, _) =
        f.cp.request("GET", &format!("{path}/{name}"), None)
            .unwrap();
    let (code, answer) = if code == 200 {
        let (_, mut current) =
            f.cp.request("GET", &format!("{path}/{name}"), None)
                .unwrap();
        current["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        f.cp.request("PUT", &format!("{path}/{name}"), Some(&current))
            .unwrap()
    } else {
        f.cp.request("POST", &path, Some(&body)).unwrap()
    };
    assert!(code == 200 || code == 201, "{answer}");
}

fn delete_workload(f: &Fleet, name: &str) {
    let (code, answer) =
        f.cp.request(
            "DELETE",
            &format!("/apis/apps/v1/namespaces/liken-system/deployments/{name}"),
            None,
        )
        .unwrap();
    assert_eq!(code, 200, "{answer}");
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn plugins_sync_list_drift_remove_token_and_tampering() {
    let f = fleet::shared();
    let s = Scratch::new("plugins");
    let storage = s.path().join("storage");
    let open = Registry::start(s.path(), "open", &storage, "");
    let o = open.host();
    let amd64 = |version: &str, domain: &str| Image {
        arch: "amd64",
        layers: vec![(
            gzip(&layer(&[(
                &format!("usr/bin/kubectl-liken-{domain}"),
                &cli(version),
            )])),
            true,
        )],
        entrypoint: if domain == "audio" {
            "/usr/bin/kubectl-liken-audio"
        } else {
            "/usr/bin/kubectl-liken-x"
        },
    };
    let arm64 = Image {
        arch: "arm64",
        layers: vec![(
            layer(&[("usr/bin/kubectl-liken-audio", "#!/bin/sh\necho arm64\n")]),
            false,
        )],
        entrypoint: "/usr/bin/kubectl-liken-audio",
    };
    let layout = |n: &str| s.path().join("layouts").join(n);
    // audio: an index of two platforms, twice (1.0, then 1.1).
    push(
        &layout("audio-1.0"),
        &[amd64("1.0", "audio"), arm64],
        &format!("{o}/liken/audio-operator-cli:1.0"),
    );
    push(
        &layout("audio-1.1"),
        &[amd64("1.1", "audio")],
        &format!("{o}/liken/audio-operator-cli:1.1"),
    );
    // media: one manifest of two layers, the upper replacing the file.
    push(
        &layout("media"),
        &[Image {
            arch: "amd64",
            layers: vec![
                (
                    layer(&[("usr/bin/kubectl-liken-media", &cli("0.9"))]),
                    false,
                ),
                (
                    gzip(&layer(&[
                        ("etc/x", ""),
                        ("./usr/bin/kubectl-liken-media", &cli("2.0")),
                    ])),
                    true,
                ),
            ],
            entrypoint: "/usr/bin/kubectl-liken-media",
        }],
        &format!("{o}/liken/media-operator-cli:2.0"),
    );
    push(
        &layout("secure"),
        &[amd64("3.0", "x")],
        &format!("{o}/liken/secure-operator-cli:3.0"),
    );
    let tampered = push(
        &layout("display"),
        &[amd64("4.0", "x")],
        &format!("{o}/liken/display-operator-cli:4.0"),
    );

    f.cp.ensure_namespace("liken-system").unwrap();
    f.cp.ensure_namespace("tenant").unwrap();
    // A tenant labels workloads of its own: one with a domain of its
    // own, one claiming audio with the media image. Neither is read.
    workload_in(
        f,
        "tenant",
        "Deployment",
        "evil-operator",
        "evil",
        &format!("{o}/liken/media-operator:2.0"),
    );
    workload_in(
        f,
        "tenant",
        "Deployment",
        "audio-operator",
        "audio",
        &format!("{o}/liken/media-operator:2.0"),
    );
    workload(
        f,
        "Deployment",
        "audio-operator",
        "audio",
        &format!("{o}/liken/audio-operator:1.0"),
    );
    workload(
        f,
        "DaemonSet",
        "media-operator",
        "media",
        &format!("{o}/liken/media-operator:2.0"),
    );

    let home = s.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let bin = home.join(".liken/plugins/bin");
    let ran = s.path().join("ran");
    let plugins = |args: &[&str]| {
        let mut c = liken([OsStr::new("plugins"), OsStr::new(args[0])]);
        c.env("LIKEN_TEST_RAN", &ran);
        if args[0] != "remove" {
            c.args(["-server", f.cp.server()]).arg(&f.dep);
        }
        c.args(&args[1..])
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin");
        c
    };

    // In a script, a tag not yet pinned is refused, and nothing is
    // installed.
    let err = fails(plugins(&["sync"]));
    assert!(
        err.starts_with("liken: plugins: 2 CLIs were not installed:\n  kubectl-liken-audio: "),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{o}/liken/audio-operator-cli:1.0 is a tag, which its registry may move, and this \
             workstation has not pinned it (it names sha256:"
        )) && err.contains("add -pin to trust that digest from now on"),
        "{err}"
    );
    assert!(names(&bin).is_empty(), "{:?}", names(&bin));

    let out = ok(plugins(&["sync", "-pin"]));
    let digest_of = |out: &str, what: &str| {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("pinned {o}/liken/{what} to sha256:")))
            .unwrap_or_else(|| panic!("{what} pinned in {out}"));
        line.rsplit(' ').next().unwrap().to_owned()
    };
    let audio_pin = digest_of(&out, "audio-operator-cli:1.0");
    let media_pin = digest_of(&out, "media-operator-cli:2.0");
    assert!(
        out.contains(&format!(
            "installed kubectl-liken-audio from {o}/liken/audio-operator-cli:1.0@{audio_pin}\n"
        )) && out.contains(&format!(
            "installed kubectl-liken-media from {o}/liken/media-operator-cli:2.0@{media_pin}\n"
        )) && out.ends_with(&format!("export PATH=\"{}:$PATH\"\n", bin.display())),
        "{out}"
    );
    // The tenant's workloads were not read: no evil CLI, and audio is
    // the liken-system operator's.
    assert_eq!(names(&bin), ["kubectl-liken-audio", "kubectl-liken-media"]);
    assert!(!out.contains("evil"), "{out}");
    let record: Value = serde_json::from_slice(
        &std::fs::read(home.join(".liken/plugins/records/audio.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        record["pins"][format!("{o}/liken/audio-operator-cli:1.0")],
        json!(audio_pin)
    );
    let audio = bin.join("kubectl-liken-audio");
    assert_eq!(
        ok(Command::new(&audio).arg("--version")),
        "1.0\n",
        "the amd64 build"
    );
    assert_eq!(
        ok(Command::new(bin.join("kubectl-liken-media")).arg("--version")),
        "2.0\n",
        "the upper layer's"
    );
    // The plugin walk finds what sync installed.
    let walked = ok(liken(["audio", "capture"])
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin"));
    assert!(
        walked.ends_with("kubectl-liken-audio capture\n"),
        "{walked}"
    );
    assert_eq!(ok(plugins(&["list"])), "audio\t1.0\t1.0\nmedia\t2.0\t2.0\n");
    assert!(
        !ran.exists(),
        "list ran a plugin: {:?}",
        std::fs::read_to_string(&ran)
    );

    // The tag moves in the registry to other bytes: sync still installs
    // the pinned digest, without asking.
    push(
        &layout("audio-moved"),
        &[amd64("6.6.6", "audio")],
        &format!("{o}/liken/audio-operator-cli:1.0"),
    );
    std::fs::remove_file(&audio).unwrap();
    let out = ok(plugins(&["sync"]));
    assert!(
        out.contains(&format!(
            "installed kubectl-liken-audio from {o}/liken/audio-operator-cli:1.0@{audio_pin}\n"
        )) && !out.contains("pinned"),
        "{out}"
    );
    assert_eq!(ok(Command::new(&audio).arg("--version")), "1.0\n");

    // The operator moves on: drift, then sync repairs it once the new
    // tag is pinned.
    workload(
        f,
        "Deployment",
        "audio-operator",
        "audio",
        &format!("{o}/liken/audio-operator:1.1"),
    );
    assert_eq!(
        ok(plugins(&["list"])),
        "audio\t1.0\t1.1\tdrift\nmedia\t2.0\t2.0\n"
    );
    let err = fails(plugins(&["sync"]));
    assert!(
        err.contains("audio-operator-cli:1.1 is a tag") && !err.contains("kubectl-liken-media"),
        "{err}"
    );
    ok(plugins(&["sync", "-pin"]));
    assert_eq!(ok(plugins(&["list"])), "audio\t1.1\t1.1\nmedia\t2.0\t2.0\n");

    assert_eq!(
        ok(plugins(&["remove", "media"])),
        "removed kubectl-liken-media\n"
    );
    assert_eq!(
        ok(plugins(&["list"])),
        "audio\t1.1\t1.1\nmedia\t-\t2.0\nno local CLI for: media; run: liken plugins sync\n"
    );
    let out = output(plugins(&["remove", "media"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not installed"));
    ok(plugins(&["sync"]));

    // A registry that demands a token: the same storage behind
    // docker-registry's token auth.
    let bundle = s.path().join("realm.crt");
    let realm = Realm::start(&bundle);
    let secure = Registry::start(
        s.path(),
        "secure",
        &storage,
        &format!(
            "auth:\n  token:\n    realm: http://127.0.0.1:{}/token\n    service: liken-test-registry\n    \
             issuer: liken-test-realm\n    rootcertbundle: {}\n",
            realm.port,
            bundle.display()
        ),
    );
    let sh = secure.host();
    let anonymous = ureq::get(&format!(
        "http://{sh}/v2/liken/secure-operator-cli/manifests/3.0"
    ))
    .config()
    .http_status_as_error(false)
    .build()
    .call()
    .unwrap();
    assert_eq!(
        anonymous.status().as_u16(),
        401,
        "the registry demands a token"
    );
    workload(
        f,
        "Deployment",
        "secure-operator",
        "secure",
        &format!("{sh}/liken/secure-operator:3.0"),
    );
    let out = ok(plugins(&["sync", "-pin"]));
    assert!(
        out.contains(&format!(
            "installed kubectl-liken-secure from {sh}/liken/secure-operator-cli:3.0@sha256:"
        )),
        "{out}"
    );
    assert_eq!(
        ok(Command::new(bin.join("kubectl-liken-secure")).arg("--version")),
        "3.0\n"
    );
    assert!(
        realm
            .scopes
            .lock()
            .unwrap()
            .contains(&"repository:liken/secure-operator-cli:pull".to_owned()),
        "{:?}",
        realm.scopes.lock().unwrap()
    );
    // A token the registry cannot verify is refused, and nothing is
    // installed from it.
    std::fs::remove_file(bin.join("kubectl-liken-secure")).unwrap();
    *realm.forge.lock().unwrap() = true;
    let out = output(plugins(&["sync"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kubectl-liken-secure: ") && err.contains("the token it issued was refused"),
        "{err}"
    );
    assert!(!bin.join("kubectl-liken-secure").exists());
    *realm.forge.lock().unwrap() = false;
    delete_workload(f, "secure-operator");

    // A tampered layer: refused, nothing under the final name, no
    // temporary left, and the other CLIs still sync.
    let hex = &tampered[0]["sha256:".len()..];
    let data: PathBuf = storage.join(format!(
        "docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    ));
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    workload(
        f,
        "Deployment",
        "display-operator",
        "display",
        &format!("{o}/liken/display-operator:4.0"),
    );
    let out = output(plugins(&["sync", "-pin"]));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("installed kubectl-liken-audio"), "{stdout}");
    assert!(
        err.starts_with("liken: plugins: 1 CLI was not installed:\n  kubectl-liken-display: the blob liken/display-operator-cli@sha256:")
            && err.contains("hashes to sha256:")
            && err.contains("so it was refused"),
        "{err}"
    );
    assert_eq!(names(&bin), ["kubectl-liken-audio", "kubectl-liken-media"]);
    delete_workload(f, "display-operator");

    // On a terminal, a new tag is asked about: no pins nothing, yes pins
    // and installs.
    push(
        &layout("ask"),
        &[amd64("7.0", "x")],
        &format!("{o}/liken/ask-operator-cli:7.0"),
    );
    workload(
        f,
        "Deployment",
        "ask-operator",
        "ask",
        &format!("{o}/liken/ask-operator:7.0"),
    );
    let question = format!(
        "kubectl-liken-ask comes from {o}/liken/ask-operator-cli:7.0, a tag its registry may \
         move; it names sha256:"
    );
    let (mut t, mut child, pump) = Terminal::spawn(plugins(&["sync"]));
    t.expect(&question);
    t.expect("Pin it to that digest and install it? [y/N] ");
    t.answer("n");
    t.expect("ask-operator-cli:7.0 was not pinned, so nothing was installed");
    assert_eq!(child.wait().unwrap().code(), Some(1), "{}", t.seen);
    pump.join().unwrap();
    assert!(!bin.join("kubectl-liken-ask").exists());
    let (mut t, mut child, pump) = Terminal::spawn(plugins(&["sync"]));
    t.expect(&question);
    t.answer("y");
    t.expect(&format!("pinned {o}/liken/ask-operator-cli:7.0 to sha256:"));
    t.expect("installed kubectl-liken-ask from ");
    assert!(child.wait().unwrap().success(), "{}", t.seen);
    pump.join().unwrap();
    assert_eq!(
        ok(Command::new(bin.join("kubectl-liken-ask")).arg("--version")),
        "7.0\n"
    );
    delete_workload(f, "ask-operator");
}
