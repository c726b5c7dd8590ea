//! `liken index` over a bundled channel, from the local directory and
//! from the served channel alone.

use std::io::Write;
use std::process::Stdio;

use crate::support::*;

fn index(source: &str, out: &std::path::Path, keys: &str) -> (bool, String, String) {
    let mut child = liken()
        .args(["index", "-source", source, &out.display().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(keys.as_bytes())
        .unwrap();
    text(child.wait_with_output().unwrap())
}

#[test]
fn renders_pages_and_versions_newest_first() {
    let root = TempDir::new("releases-index");
    let channel = bundle(root.path(), "2026.07.11-001", 5000);
    bundle(root.path(), "2026.08.02-001", 6000);
    let keys = tree(&channel).join("\n");
    let (ok, out, err) = index("https://releases.example/stable", &channel, &keys);
    assert!(ok, "{out}{err}");
    assert!(out.contains("indexed 2 releases"), "{out}");

    let front = std::fs::read_to_string(channel.join("index.html")).unwrap();
    let newer = front.find(">2026.08.02-001<").unwrap();
    let older = front.find(">2026.07.11-001<").unwrap();
    assert!(newer < older, "newest first");
    let doc = std::fs::read(channel.join("2026.07.11-001/release.yaml")).unwrap();
    let digest = format!("sha256:{}", sha256_hex(&doc));
    let page = std::fs::read_to_string(channel.join("2026.07.11-001/index.html")).unwrap();
    assert!(
        page.contains(&format!(
            "  - version: 2026.07.11-001\n    digest: {digest}"
        )),
        "{page}"
    );
    assert!(page.contains("<a href=\"liken.sqfs\">liken.sqfs</a>"));
    assert!(page.contains("linux") && page.contains("6.1.0-28"));
    let mirror = std::fs::read_to_string(channel.join("mirror.html")).unwrap();
    assert!(mirror.contains(
        "liken fetch -key release.pub -digest sha256:&lt;hex&gt; https://releases.example/stable"
    ));

    let versions: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(channel.join("versions.yaml")).unwrap())
            .unwrap();
    assert_eq!(versions["latest"].as_str(), Some("2026.08.02-001"));
    assert_eq!(
        versions["versions"][1]["version"].as_str(),
        Some("2026.07.11-001")
    );
    assert_eq!(
        versions["versions"][1]["digest"].as_str(),
        Some(digest.as_str())
    );

    // Rendering into an empty directory reads the documents from the
    // served channel instead, and gives the same catalog.
    let s = Served::start(&channel);
    let fresh = root.path().join("fresh");
    let (ok, out, err) = index(&s.url, &fresh, &keys);
    assert!(ok, "{out}{err}");
    let again: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(fresh.join("versions.yaml")).unwrap())
            .unwrap();
    assert_eq!(again["versions"], versions["versions"]);
    // And serve shows the front page for the channel's root.
    let (body, _) = curl(&[&format!("{}/", s.url)]);
    assert!(String::from_utf8(body).unwrap().contains("liken releases"));
}

#[test]
fn refuses_broken_channels() {
    let root = TempDir::new("releases-index-bad");
    let out = root.path().join("out");
    let (ok, _, err) = index("ftp://x", &out, "");
    assert!(!ok && err.contains("-source"), "{err}");
    let (ok, _, err) = index("http://127.0.0.1:1", &out, "2026.02.30-001/release.yaml\n");
    assert!(!ok && err.contains("does not name a real date"), "{err}");
    std::fs::create_dir_all(out.join("2026.07.11-001")).unwrap();
    std::fs::write(out.join("2026.07.11-001/release.yaml"), "kind: Release\n").unwrap();
    let (ok, _, err) = index("http://127.0.0.1:1", &out, "2026.07.11-001/release.yaml\n");
    assert!(!ok && err.contains("apiVersion"), "{err}");
    let (ok, _, err) = run(&["index", &out.display().to_string()]);
    assert!(!ok && err.contains("usage: liken index -source"), "{err}");
}

#[test]
fn shows_who_signed_each_release_locally_and_from_the_source() {
    let root = TempDir::new("releases-index-signed");
    let (key, _, id) = keygen(root.path(), "keys");
    let k = key.display().to_string();
    let (channel, _) = bundle_with(root.path(), "2026.07.11-001", 5000, &["-sign", &k]);
    bundle(root.path(), "2026.07.12-001", 5000);
    bundle(root.path(), "2026.07.13-001", 5000);
    std::fs::write(
        channel.join("2026.07.13-001/release.yaml.sig"),
        "not: a signature\n",
    )
    .unwrap();
    let keys = tree(&channel).join("\n");
    let want = format!(
        "  2026.07.13-001: unreadable signature\n  2026.07.12-001: unsigned\n  \
         2026.07.11-001: signed by key {id}\n"
    );

    let (ok, out, err) = index("https://releases.example/stable", &channel, &keys);
    assert!(ok, "{out}{err}");
    assert!(out.contains("indexed 3 releases"), "{out}");
    assert!(out.ends_with(&want), "{out}");
    let front = std::fs::read_to_string(channel.join("index.html")).unwrap();
    assert!(front.contains(&format!("<td>key {id}</td>")), "{front}");
    assert!(front.contains("<td>unreadable signature</td>"), "{front}");
    let page = std::fs::read_to_string(channel.join("2026.07.11-001/index.html")).unwrap();
    assert!(
        page.contains(&format!("names key <code>{id}</code>")),
        "{page}"
    );

    // From the served channel alone, the signatures come over HTTP.
    let s = Served::start(&channel);
    let fresh = root.path().join("fresh");
    let (ok, out, err) = index(&s.url, &fresh, &keys);
    assert!(ok, "{out}{err}");
    assert!(out.ends_with(&want), "{out}");
}
