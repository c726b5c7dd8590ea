//! keygen against the real openssl, its bytes held to efitools' own
//! (`cert-to-efi-sig-list`, `sign-efi-sig-list`: scripts/setup.sh
//! installs efitools for these tests), and its refusals.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use super::*;
use crate::testdir::TestDir;

/// 2026-12-01T10:00:00Z.
const NOW: Time = Time::from_unix(1_796_119_200);

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn tools() -> Tools {
    Tools::from_env().expect("openssl on PATH (scripts/setup.sh installs it)")
}

fn tool(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}; scripts/setup.sh installs efitools"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn keygen_writes_keys_0600_public_files_0644_and_one_owner() {
    let tmp = TestDir::new("sb-keygen");
    let dir = tmp.path().join("secureboot");
    let made = keygen(&dir, &tools(), NOW).unwrap();
    assert_eq!(mode(&dir), 0o700, "a directory keygen creates is 0700");
    assert_eq!(made.time.to_string(), "2026-12-01T10:00:00Z");
    let names: Vec<&str> = made.keys.iter().map(|k| k.var.name()).collect();
    assert_eq!(names, ["PK", "KEK", "db"]);
    let mut listed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    let mut want: Vec<String> = key_files(&dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert_eq!(listed, want, "exactly the 13 files, nothing left over");
    let owner = std::fs::read_to_string(dir.join(GUID_FILE)).unwrap();
    assert_eq!(owner.trim(), made.owner.to_string().to_lowercase());
    for var in Var::ALL {
        let n = var.name();
        let key = dir.join(format!("{n}.key"));
        assert_eq!(mode(&key), 0o600, "{n}.key");
        for ext in ["crt", "esl", "auth"] {
            assert_eq!(mode(&dir.join(format!("{n}.{ext}"))), 0o644, "{n}.{ext}");
        }
        // An RSA-2048 key, and the certificate is its own, self-signed.
        let text = tool(
            Command::new("openssl")
                .args(["pkey", "-noout", "-text", "-in"])
                .arg(&key),
        );
        assert!(
            String::from_utf8_lossy(&text).contains("Private-Key: (2048 bit"),
            "{n}"
        );
        let crt = dir.join(format!("{n}.crt"));
        let subject = tool(
            Command::new("openssl")
                .args(["x509", "-noout", "-subject", "-issuer", "-in"])
                .arg(&crt),
        );
        let subject = String::from_utf8_lossy(&subject).into_owned();
        let cn = format!("CN = liken {n} {}", owner.trim());
        assert_eq!(subject, format!("subject={cn}\nissuer={cn}\n"));
        tool(
            Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(&crt)
                .arg(&crt),
        );
        // Every list and variable names the one owner and this
        // certificate.
        let auth = std::fs::read(dir.join(format!("{n}.auth"))).unwrap();
        let parsed = efi::parse_auth(&auth).unwrap();
        assert_eq!(parsed.owner, made.owner);
        let der = tool(
            Command::new("openssl")
                .args(["x509", "-outform", "DER", "-in"])
                .arg(&crt),
        );
        assert_eq!(parsed.cert, &der[..]);
        assert_eq!(
            parsed.list,
            &std::fs::read(dir.join(format!("{n}.esl"))).unwrap()[..]
        );
    }
}

#[test]
fn the_lists_and_variables_are_byte_for_byte_efitools_own() {
    let tmp = TestDir::new("sb-efitools");
    let dir = tmp.path().join("keys");
    let made = keygen(&dir, &tools(), NOW).unwrap();
    let owner = made.owner.to_string().to_lowercase();
    for var in Var::ALL {
        let n = var.name();
        let crt = dir.join(format!("{n}.crt"));
        let esl = tmp.path().join(format!("{n}.efitools.esl"));
        tool(
            Command::new("cert-to-efi-sig-list")
                .args(["-g", &owner])
                .arg(&crt)
                .arg(&esl),
        );
        assert_eq!(
            std::fs::read(&esl).unwrap(),
            std::fs::read(dir.join(format!("{n}.esl"))).unwrap(),
            "{n}.esl"
        );
        let signer = var.signer().name();
        let auth = tmp.path().join(format!("{n}.efitools.auth"));
        tool(
            Command::new("sign-efi-sig-list")
                .args(["-t", "2026-12-01 10:00:00", "-k"])
                .arg(dir.join(format!("{signer}.key")))
                .arg("-c")
                .arg(dir.join(format!("{signer}.crt")))
                .arg(n)
                .arg(&esl)
                .arg(&auth),
        );
        assert_eq!(
            std::fs::read(&auth).unwrap(),
            std::fs::read(dir.join(format!("{n}.auth"))).unwrap(),
            "{n}.auth, signed by {signer}"
        );
    }
}

#[test]
fn keygen_never_overwrites_and_says_so() {
    let tmp = TestDir::new("sb-exists");
    let dir = tmp.path().join("keys");
    keygen(&dir, &tools(), NOW).unwrap();
    let before = std::fs::read(dir.join("PK.key")).unwrap();
    let e = keygen(&dir, &tools(), NOW).unwrap_err();
    assert!(matches!(e, SecureBootError::KeyExists(_)), "{e}");
    assert!(e.to_string().contains("never overwritten"), "{e}");
    assert_eq!(std::fs::read(dir.join("PK.key")).unwrap(), before);
    // One file of a set is enough to refuse, before anything is written.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("db.auth"), b"x").unwrap();
    let e = keygen(&other, &tools(), NOW).unwrap_err();
    assert!(e.to_string().contains("db.auth already exists"), "{e}");
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
}

#[test]
fn a_missing_openssl_names_the_debian_package() {
    let tmp = TestDir::new("sb-missing");
    let e = Tools::find(tmp.path().as_os_str()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("openssl is not on PATH") && text.contains("apt-get install openssl"),
        "{text}"
    );
    assert!(Tools::find(OsStr::new("")).is_err());
}

#[test]
fn a_run_that_fails_part_way_leaves_nothing_behind() {
    let tmp = TestDir::new("sb-fails");
    // An openssl that makes keys (the real one) but cannot make
    // certificates.
    let fake = tmp.path().join("openssl");
    let real = tools().openssl;
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = req ]; then echo 'req: no config' >&2; exit 3; fi\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("keys");
    let e = keygen(&dir, &Tools { openssl: fake }, NOW).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("making the PK certificate (openssl) failed") && text.contains("no config"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "the key written before the failure is removed"
    );
}

#[test]
fn the_command_prints_what_it_made_and_never_a_private_key() {
    let tmp = TestDir::new("sb-command");
    let dir = tmp.path().join("keys");
    let (r, out, err) =
        crate::tests::run_with(&["keygen", "-secureboot", &dir.display().to_string()], "");
    r.unwrap();
    assert_eq!(err, "");
    for n in ["PK", "KEK", "db"] {
        assert!(out.contains(&format!("{n}.key (private, 0600)")), "{out}");
        let key = std::fs::read_to_string(dir.join(format!("{n}.key"))).unwrap();
        for line in key.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!out.contains(line), "{out}");
        }
    }
    assert!(out.contains("db.auth (signed by KEK"), "{out}");
    assert!(out.contains("liken stick -secureboot"), "{out}");
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    // Without -secureboot, keygen still makes a release key.
    let release = tmp.path().join("release");
    let (r, out, _) = crate::tests::run_with(&["keygen", &release.display().to_string()], "");
    r.unwrap();
    assert!(release.join("release.key").exists(), "{out}");
}

#[test]
fn read_enrol_keys_takes_the_auth_files_only_and_checks_them() {
    let tmp = TestDir::new("sb-read");
    let dir = tmp.path().join("keys");
    let made = keygen(&dir, &tools(), NOW).unwrap();
    let keys = read_enrol_keys(&dir).unwrap();
    let names: Vec<&str> = keys.files.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["db.auth", "KEK.auth", "PK.auth"]);
    assert_eq!(keys.owner, made.owner);
    for (n, bytes) in &keys.files {
        assert_eq!(bytes, &std::fs::read(dir.join(n)).unwrap());
    }
    let db_der = tool(
        Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(dir.join("db.crt")),
    );
    assert_eq!(keys.db_cert, db_der);

    // A private key where a variable belongs is refused, naming it.
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    for n in ["PK.auth", "KEK.auth"] {
        std::fs::copy(dir.join(n), bad.join(n)).unwrap();
    }
    std::fs::copy(dir.join("db.key"), bad.join("db.auth")).unwrap();
    let e = read_enrol_keys(&bad).unwrap_err();
    assert!(e.to_string().contains("db.auth is not a key file"), "{e}");
    // A missing file, and files of two different keygen runs.
    std::fs::remove_file(bad.join("db.auth")).unwrap();
    assert!(
        read_enrol_keys(&bad)
            .unwrap_err()
            .to_string()
            .contains("db.auth")
    );
    let other = tmp.path().join("other");
    keygen(&other, &tools(), NOW).unwrap();
    std::fs::copy(other.join("db.auth"), bad.join("db.auth")).unwrap();
    let e = read_enrol_keys(&bad).unwrap_err();
    assert!(e.to_string().contains("owner GUID"), "{e}");
}
