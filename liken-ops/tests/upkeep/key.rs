//! The deploy key: read by the real ssh-keygen, kept in a real Secret
//! under the RBAC the flux feature ships.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use liken_kube::request::SECRETS;
use liken_kube::{Api, DynamicObject};
use liken_ops::cluster::flux::deploy_key::{self, ensure_deploy_key};
use liken_testenv::scratch::{TempDir, ok, tool};
use serde_json::json;

use crate::support;

fn write_key(dir: &TempDir, name: &str, pem: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, pem).unwrap();
    // ssh-keygen refuses a private key others may read.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The public line ssh-keygen derives from a private key file.
fn keygen_public(path: &std::path::Path) -> String {
    let out = ok({
        let mut c = tool("ssh-keygen");
        c.arg("-y").arg("-f").arg(path);
        c
    });
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn ssh_keygen_reads_the_minted_key_and_signs_with_it() {
    let dir = TempDir::new("flux-key");
    let key = deploy_key::mint("home");
    let path = write_key(&dir, "identity", &key.private_pem);
    assert_eq!(keygen_public(&path), key.public_line);

    // The private half really is the public half's: a signature made with
    // it verifies against the published line.
    let data = dir.path().join("data");
    std::fs::write(&data, b"liken deploy key check\n").unwrap();
    ok({
        let mut c = tool("ssh-keygen");
        c.args(["-Y", "sign", "-n", "liken", "-f"])
            .arg(&path)
            .arg(&data);
        c
    });
    let fields: Vec<&str> = key.public_line.split(' ').collect();
    let signers = dir.path().join("allowed_signers");
    std::fs::write(&signers, format!("fleet {} {}\n", fields[0], fields[1])).unwrap();
    let verified = ok({
        let mut c = tool("ssh-keygen");
        c.args(["-Y", "verify", "-n", "liken", "-I", "fleet", "-f"])
            .arg(&signers)
            .arg("-s")
            .arg(dir.path().join("data.sig"))
            .stdin(std::fs::File::open(&data).unwrap());
        c
    });
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains("Good \"liken\" signature for fleet"),
        "{verified:?}"
    );
}

#[test]
fn the_encoding_is_byte_for_byte_ssh_keygens() {
    let dir = TempDir::new("flux-key-bytes");
    let path = dir.path().join("k");
    ok({
        let mut c = tool("ssh-keygen");
        c.args(["-q", "-t", "ed25519", "-N", "", "-C", "liken:home", "-f"])
            .arg(&path);
        c
    });
    let written = std::fs::read_to_string(&path).unwrap();
    let (secret, check, comment) = parse_openssh(&written);
    assert_eq!(comment, "liken:home");
    let ours = deploy_key::encode(&secret, &comment, check);
    assert_eq!(ours.private_pem, written);
    let public = std::fs::read_to_string(dir.path().join("k.pub")).unwrap();
    assert_eq!(ours.public_line, public.trim());
}

/// Reads the secret key, check integer and comment out of an unencrypted
/// openssh-key-v1 file (test code: panics on anything unexpected).
fn parse_openssh(pem: &str) -> ([u8; 64], u32, String) {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let blob = BASE64.decode(body).unwrap();
    let mut at = 15; // "openssh-key-v1\0"
    assert_eq!(&blob[..at], b"openssh-key-v1\0");
    let string = |at: &mut usize| -> Vec<u8> {
        let n = u32::from_be_bytes(blob[*at..*at + 4].try_into().unwrap()) as usize;
        let s = blob[*at + 4..*at + 4 + n].to_vec();
        *at += 4 + n;
        s
    };
    assert_eq!(string(&mut at), b"none");
    assert_eq!(string(&mut at), b"none");
    assert_eq!(string(&mut at), b"");
    at += 4; // one key
    string(&mut at); // the public blob
    let private = string(&mut at);
    let check = u32::from_be_bytes(private[..4].try_into().unwrap());
    let mut at = 8;
    let field = |at: &mut usize| -> Vec<u8> {
        let n = u32::from_be_bytes(private[*at..*at + 4].try_into().unwrap()) as usize;
        let s = private[*at + 4..*at + 4 + n].to_vec();
        *at += 4 + n;
        s
    };
    assert_eq!(field(&mut at), b"ssh-ed25519");
    field(&mut at); // the public key
    let secret: [u8; 64] = field(&mut at).try_into().unwrap();
    let comment = String::from_utf8(field(&mut at)).unwrap();
    (secret, check, comment)
}

fn secret_field(name: &str) -> Option<String> {
    let s: DynamicObject = support::admin()
        .get_opt(&Api::namespaced(SECRETS, "flux-system"), "flux-system")
        .unwrap()?;
    let b64 = s
        .pointer(&format!("/data/{}", name.replace('/', "~1")))?
        .as_str()?;
    Some(String::from_utf8(BASE64.decode(b64).unwrap()).unwrap())
}

/// Without the feature's grant the operator cannot read the Secret: the
/// pass publishes nothing new and writes nothing.
pub fn without_the_grant() {
    let admin = support::admin();
    let secrets = Api::namespaced(SECRETS, "flux-system");
    let cluster = support::cluster("keyless", &[("flux", None)]);
    support::apply_flux_feature();
    support::kubectl(&[
        "-n",
        "flux-system",
        "delete",
        "rolebinding/liken-cluster-operator-flux",
    ]);
    let _ = admin.delete(&secrets, "flux-system", &Default::default());
    support::wait_gone(&admin, &secrets, "flux-system");
    let recorder = support::recorder();
    assert_eq!(
        ensure_deploy_key(&support::operator(), &recorder, &cluster),
        None
    );
    assert_eq!(secret_field("identity"), None);
    recorder.shutdown(Duration::from_secs(5));
}

/// The deploy key in the Secret, under the Role the feature ships.
pub fn scenario() {
    let admin = support::admin();
    let secrets = Api::namespaced(SECRETS, "flux-system");
    let hosts = "forge.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOne\n";
    let mut cluster = support::cluster(
        "keyed",
        &[(
            "flux",
            Some(json!({"url": "ssh://git@forge.example/fleet.git", "knownHosts": hosts})),
        )],
    );
    let operator = support::operator();
    let recorder = support::recorder();

    // With it (as k3s applies the feature), the first pass mints.
    support::apply_flux_feature();
    let minted = ensure_deploy_key(&operator, &recorder, &cluster).expect("a minted key");
    assert!(
        minted.starts_with("ssh-ed25519 ") && minted.ends_with(" liken:keyed"),
        "{minted}"
    );
    assert_eq!(
        secret_field("identity.pub").as_deref(),
        Some(minted.as_str())
    );
    assert_eq!(secret_field("known_hosts").as_deref(), Some(hosts));
    let dir = TempDir::new("flux-key-secret");
    let identity = write_key(&dir, "identity", &secret_field("identity").unwrap());
    assert_eq!(keygen_public(&identity), minted);

    // A settled key: the same answer and not one write.
    let mark = support::cp().audit_mark().unwrap();
    assert_eq!(
        ensure_deploy_key(&operator, &recorder, &cluster),
        Some(minted.clone())
    );
    let writes = support::operator_writes(mark);
    assert!(writes.is_empty(), "a settled key wrote: {writes:?}");

    // The forge rotated its host key: one patch of the Secret, same key.
    let rotated = "forge.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyTwo\n";
    cluster.spec.features.insert(
        "flux".into(),
        Some(serde_json::from_value(json!({"knownHosts": rotated})).unwrap()),
    );
    let mark = support::cp().audit_mark().unwrap();
    assert_eq!(
        ensure_deploy_key(&operator, &recorder, &cluster),
        Some(minted.clone())
    );
    let writes = support::operator_writes(mark);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].verb.as_str(), writes[0].resource.as_str()),
        ("patch", "secrets")
    );
    assert_eq!(secret_field("known_hosts").as_deref(), Some(rotated));
    assert_eq!(
        secret_field("identity.pub").as_deref(),
        Some(minted.as_str())
    );

    // Rotation is deleting the Secret: the next pass mints a new pair.
    admin
        .delete(&secrets, "flux-system", &Default::default())
        .unwrap();
    let fresh = ensure_deploy_key(&operator, &recorder, &cluster).expect("a fresh key");
    assert_ne!(fresh, minted);

    // The mints posted FluxDeployKeyMinted on the Cluster (the second as
    // the first one's series).
    recorder.shutdown(Duration::from_secs(10));
    let events = support::kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "default",
        "--field-selector",
        "reason=FluxDeployKeyMinted,regarding.name=keyed",
        "-o",
        "jsonpath={range .items[*]}{.note}{\"\\n\"}{end}",
    ]);
    assert!(events.contains("status.flux.publicKey"), "{events}");
}
