//! Signed channels through the real binary: `liken fetch` takes only
//! what a trusted key signed and refuses everything else before a single
//! artifact is requested (serve's access log shows none) and with nothing
//! written; a mirror keeps no signature its channel.yaml has outgrown;
//! `liken sign` renews a channel.yaml, and a mirror follows the renewal.

use std::path::Path;

use crate::support::*;

const V1: &str = "2026.07.11-001";
const V2: &str = "2026.07.12-001";

fn fetch(flags: &[&str], source: &str, version: &str, dest: &Path) -> (bool, String, String) {
    let dest = dest.display().to_string();
    let mut args = vec!["fetch"];
    args.extend_from_slice(flags);
    args.extend([source, version, dest.as_str()]);
    run(&args)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn channel_doc(dir: &Path) -> liken_api::Channel {
    let text = std::fs::read_to_string(dir.join("channel.yaml")).unwrap();
    liken_api::decode::strict(&text, "channel.yaml").unwrap()
}

/// One refusal: the flags, the server, the version, the release.yaml and
/// release.yaml.sig the server holds, and what the error says.
type Case<'a> = (&'a [&'a str], &'a Served, &'a str, Vec<u8>, Vec<u8>, String);

/// No artifact was asked of the server: only documents and signatures.
fn no_artifact_requested(served: &Served) {
    for line in served.log() {
        assert!(
            FILES.iter().all(|f| !line.contains(&format!("/{f}\""))),
            "an artifact was requested: {line}"
        );
    }
}

#[test]
fn a_signed_channel_is_fetched_mirrored_renewed_and_followed() {
    let root = TempDir::new("releases-signed");
    let (key, public, id) = keygen(root.path(), "keys");
    let (channel, out) = bundle_with(root.path(), V1, 20_000, &["-sign", &s(&key)]);
    assert!(out.contains(&format!("with key {id}")), "{out}");
    let served = Served::start(&channel);
    let mirror = root.path().join("mirror");

    let (ok, out, err) = fetch(&["-key", &s(&public)], &served.url, "latest", &mirror);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!(
            "channel.yaml is signed by trusted key {id}: serial 1, current until "
        )) && out.contains(&format!("release.yaml is signed by trusted key {id}")),
        "{out}"
    );
    assert!(!out.contains("WARNING"), "{out}");
    assert_eq!(tree(&mirror), tree(&channel));
    assert!(mirror.join("channel.yaml.sig").exists());

    // The defect this guards: a newer version fetched by name rewrites
    // the mirror's channel.yaml, and the upstream's signature beside it
    // no longer signs it. It goes, and fetch says so. -trust takes a
    // deployment directory holding trust.yaml.
    bundle_with(root.path(), V2, 20_000, &["-sign", &s(&key)]);
    let deployment = root.path().join("home");
    std::fs::create_dir_all(&deployment).unwrap();
    let (ok, out, err) = run(&["trust", &s(&deployment.join("trust.yaml")), &s(&public)]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = fetch(&["-trust", &s(&deployment)], &served.url, V2, &mirror);
    assert!(ok, "{out}{err}");
    let sig = mirror.join("channel.yaml.sig");
    assert!(
        out.contains(&format!(
            "removed {}: it signed the previous channel.yaml",
            sig.display()
        )),
        "{out}"
    );
    assert!(!sig.exists(), "a stale channel.yaml.sig is left");
    assert_eq!(channel_doc(&mirror).latest.as_str(), V2);
    assert!(mirror.join(V2).join("release.yaml.sig").exists());

    // The publisher has nothing new but re-signs: the channel moves on
    // (serial 2 from bundling V2, now 3), and a mirror fetching latest
    // takes the renewed document with its signature.
    let (ok, out, err) = run(&[
        "sign",
        "-key",
        &s(&key),
        "-channel-days",
        "5",
        &s(&channel.join("channel.yaml")),
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("renewed it: serial 3, current until"), "{out}");
    assert!(!out.contains("seed"), "{out}");
    let upstream = channel_doc(&channel);
    assert_eq!((upstream.serial, upstream.latest.as_str()), (Some(3), V2));
    let (ok, out, err) = fetch(&["-key", &s(&public)], &served.url, "latest", &mirror);
    assert!(ok, "{out}{err}");
    assert!(out.contains("renewed as serial 3"), "{out}");
    for f in ["channel.yaml", "channel.yaml.sig"] {
        assert_eq!(
            std::fs::read(mirror.join(f)).unwrap(),
            std::fs::read(channel.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn fetch_refuses_what_no_trusted_key_signed_before_any_download() {
    let root = TempDir::new("releases-signed-refuse");
    let (key_a, pub_a, id_a) = keygen(root.path(), "a");
    let (key_b, pub_b, _) = keygen(root.path(), "b");
    let (channel, _) = bundle_with(root.path(), V1, 20_000, &["-sign", &s(&key_a)]);
    let unsigned_root = root.path().join("unsigned");
    let unsigned = bundle(&unsigned_root, V1, 20_000);
    let signed = Served::start(&channel);
    let plain = Served::start(&unsigned);
    let doc = channel.join(V1).join("release.yaml");
    let sig = channel.join(V1).join("release.yaml.sig");
    let good_doc = std::fs::read(&doc).unwrap();
    let good_sig = std::fs::read(&sig).unwrap();

    // A signature by b, claiming to be a's: a forgery.
    let copy = root.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::write(copy.join("release.yaml"), &good_doc).unwrap();
    let (ok, out, err) = run(&["sign", "-key", &s(&key_b), &s(&copy.join("release.yaml"))]);
    assert!(ok, "{out}{err}");
    let by_b = std::fs::read_to_string(copy.join("release.yaml.sig")).unwrap();
    let id_b = out.split("with key ").nth(1).unwrap()[..12].to_owned();
    let forged = by_b.replace(&id_b, &id_a);
    let mut changed = good_doc.clone();
    changed.extend_from_slice(b"# edited after signing\n");

    let key_a_flag = ["-key", &s(&pub_a)];
    let key_b_flag = ["-key", &s(&pub_b)];
    let cases: Vec<Case> = vec![
        (
            &[],
            &signed,
            V1,
            good_doc.clone(),
            good_sig.clone(),
            "give -key <release.pub>".into(),
        ),
        (
            &["-key", "x", "-unsigned"],
            &signed,
            V1,
            good_doc.clone(),
            good_sig.clone(),
            "give one of them".into(),
        ),
        (
            &key_a_flag,
            &plain,
            V1,
            good_doc.clone(),
            good_sig.clone(),
            format!(
                "{}/{V1}/release.yaml is refused: it has no signature",
                plain.url
            ),
        ),
        (
            &key_a_flag,
            &plain,
            "latest",
            good_doc.clone(),
            good_sig.clone(),
            format!("{}/channel.yaml is refused: it has no signature", plain.url),
        ),
        (
            &key_b_flag,
            &signed,
            V1,
            good_doc.clone(),
            good_sig.clone(),
            format!("it is signed by key {id_a}, which the trust root does not list"),
        ),
        (
            &key_b_flag,
            &signed,
            "latest",
            good_doc.clone(),
            good_sig.clone(),
            format!(
                "{}/channel.yaml is refused: it is signed by key {id_a}",
                signed.url
            ),
        ),
        (
            &key_a_flag,
            &signed,
            V1,
            changed.clone(),
            good_sig.clone(),
            format!("its bytes changed after key {id_a} signed them"),
        ),
        (
            &key_a_flag,
            &signed,
            V1,
            good_doc.clone(),
            forged.into_bytes(),
            format!("its signature is not key {id_a}'s over these bytes"),
        ),
        (
            &key_a_flag,
            &signed,
            V1,
            good_doc.clone(),
            b"hello: world\n".to_vec(),
            format!("{}/{V1}/release.yaml.sig is not a signature", signed.url),
        ),
    ];
    for (i, (flags, served, version, doc_bytes, sig_bytes, says)) in cases.into_iter().enumerate() {
        std::fs::write(&doc, &doc_bytes).unwrap();
        std::fs::write(&sig, &sig_bytes).unwrap();
        let dest = root.path().join(format!("dest-{i}"));
        let (ok, out, err) = fetch(flags, &served.url, version, &dest);
        assert!(!ok, "case {i} was fetched: {out}");
        assert!(err.contains(&says), "case {i}: {err}");
        assert!(!dest.exists(), "case {i} wrote into the channel directory");
    }
    std::fs::write(&doc, &good_doc).unwrap();
    std::fs::write(&sig, &good_sig).unwrap();
    no_artifact_requested(&signed);
    no_artifact_requested(&plain);

    // -unsigned takes the unsigned channel, and says what it gives up
    // before anything else.
    let dest = root.path().join("unchecked");
    let (ok, out, err) = fetch(&["-unsigned"], &plain.url, "latest", &dest);
    assert!(ok, "{out}{err}");
    assert!(
        out.starts_with("WARNING: fetching without checking signatures (-unsigned)"),
        "{out}"
    );
    assert_eq!(tree(&dest), tree(&unsigned));
}
