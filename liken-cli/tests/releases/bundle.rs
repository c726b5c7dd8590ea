//! `liken bundle` through the binary: flags, refusals, immutability.

use crate::support::*;

#[test]
fn bundles_refuse_what_would_break_a_fleet() {
    let root = TempDir::new("releases-bundle");
    let channel = bundle(root.path(), "2026.07.11-002", 4000);
    let doc = std::fs::read_to_string(channel.join("2026.07.11-002/release.yaml")).unwrap();
    assert!(
        doc.contains("name: microcode") && doc.contains("file: grub-core.img"),
        "{doc}"
    );

    let inputs = root.path().join("inputs-2026.07.11-002");
    let files = input_args(&inputs);
    let with = |extra: &[&str], version: &str| {
        let mut args = vec!["bundle"];
        args.extend_from_slice(extra);
        args.extend(files.iter().map(String::as_str));
        let ch = channel.display().to_string();
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(ch);
        args.push(version.to_owned());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&refs)
    };

    let (ok, _, err) = with(&[], "2026.07.11-002");
    assert!(!ok && err.contains("immutable"), "{err}");
    let (ok, _, err) = with(&["--slot-size", "8Ki"], "2026.07.11-003");
    assert!(!ok && err.contains("pass a larger -slot-size"), "{err}");
    let (ok, _, err) = with(&["-slot-size", "lots"], "2026.07.11-003");
    assert!(!ok && err.contains("for example 1Gi"), "{err}");
    let (ok, _, err) = with(&[], "2026.7.11-3");
    assert!(!ok && err.contains("yyyy.mm.dd-nnn"), "{err}");
    assert!(!channel.join("2026.07.11-003").exists());

    let (ok, out, err) = with(&["-slot-size=64Mi"], "2026.07.11-001");
    assert!(ok, "{err}");
    assert!(out.contains("latest stays 2026.07.11-002"), "{out}");
    assert!(out.contains("of 64.0 MiB used"), "{out}");

    // Without -microcode the release has eight artifacts.
    let eight: Vec<String> = files.iter().skip(2).cloned().collect();
    let mut args = vec!["bundle".to_owned()];
    args.extend(eight);
    args.push(channel.display().to_string());
    args.push("2026.07.12-001".to_owned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = run(&refs);
    assert!(ok && out.contains(": 8 artifacts"), "{out}{err}");
    let doc = std::fs::read_to_string(channel.join("2026.07.12-001/release.yaml")).unwrap();
    assert!(!doc.contains("microcode"), "{doc}");

    // -channel-days sets how long the channel.yaml written stays current.
    let (ok, _, err) = with(&["-channel-days", "0"], "2026.07.13-001");
    assert!(!ok && err.contains("from 1 to 366"), "{err}");
    let before = liken_api::Time::from_system(std::time::SystemTime::now());
    let (ok, out, err) = with(&["-channel-days", "3"], "2026.07.13-001");
    assert!(ok, "{out}{err}");
    let ch: liken_api::Channel = liken_api::decode::strict(
        &std::fs::read_to_string(channel.join("channel.yaml")).unwrap(),
        "channel.yaml",
    )
    .unwrap();
    let days = ch.expires.unwrap().seconds_since(before);
    assert!((3 * 86_400..3 * 86_400 + 60).contains(&days), "{days}");

    let (ok, _, err) = run(&["bundle", "a", "b"]);
    assert!(
        !ok && err.contains(
            "usage: liken bundle [-sign release.key] [-secureboot-key <keys-dir> -layer-key \
             release.pub [-uki-arg ARG ...]] [-slot-size 1Gi]"
        ),
        "{err}"
    );
}
