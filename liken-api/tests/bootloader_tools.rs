//! The bootloader files checked by GRUB's own tools (Debian's
//! grub-common, installed by scripts/setup.sh): grub-script-check parses
//! the generated grub.cfg, and grub-editenv reads and writes the grubenv
//! blocks our renderer and parser handle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use liken_api::bootloader::{
    EntryParams, GRUBENV_SIZE, GrubParams, parse_grubenv, render_entry, render_grub_cfg,
    render_grubenv, render_loader_conf,
};
use liken_api::verity::VerityArg;
use liken_api::{Slot, Version};

fn shipped(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../boot")
            .join(name),
    )
    .unwrap()
}

#[test]
fn shipped_files_match_the_renderers() {
    assert_eq!(shipped("loader.conf"), render_loader_conf());
    let version = Version::parse("2026.12.02-001").unwrap();
    let args = "console=ttyS0,115200 quiet";
    let template = |verity: &str| {
        shipped("entry-template.conf")
            .replace("@VERSION@", version.as_str())
            .replace("@SLOT@", "B")
            .replace("@DIR@", "b")
            .replace("@VERITY@", verity)
            .replace("@ARGS@", args)
    };
    let params = EntryParams {
        slot: Slot::B,
        version: version.clone(),
        microcode: true,
        console_args: vec!["console=ttyS0,115200".into()],
        extra_args: vec!["quiet".into()],
        verity: None,
    };
    assert_eq!(render_entry(&params), template(""));
    // With the release's root hash: one space, then the argument.
    let verity = VerityArg::parse(&format!("{}:0f:513", "ab".repeat(32))).unwrap();
    let got = render_entry(&EntryParams {
        verity: Some(verity.clone()),
        ..params
    });
    assert_eq!(got, template(&format!(" {}", verity.render())));
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("liken-bootloader-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}; run scripts/setup.sh (grub-common)"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn grub_script_check_accepts_grub_cfg() {
    let dir = scratch("cfg");
    let cfg = dir.join("grub.cfg");
    let text = render_grub_cfg(&GrubParams {
        console_args: vec!["console=ttyS0,115200".into()],
        extra_args: vec!["quiet".into()],
    });
    std::fs::write(&cfg, &text).unwrap();
    run("grub-script-check", &[path(&cfg)]);
    // The checked-in copy is the rendering without machine arguments.
    assert_eq!(
        shipped("grub.cfg"),
        render_grub_cfg(&GrubParams {
            console_args: vec![],
            extra_args: vec![],
        })
    );
    // A broken script is refused, so the check above means something.
    std::fs::write(&cfg, "if [ a = b ]; then\n").unwrap();
    let st = Command::new("grub-script-check")
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!st.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn grub_editenv_reads_our_block_and_we_read_its() {
    let dir = scratch("env");
    let ours = dir.join("ours");
    let mut env = BTreeMap::new();
    env.insert("liken_a_tries".to_string(), "2".to_string());
    env.insert("liken_slot".to_string(), "a".to_string());
    env.insert("odd".to_string(), "back\\slash\nnewline".to_string());
    std::fs::write(&ours, render_grubenv(&env).unwrap()).unwrap();
    let listed = run("grub-editenv", &[path(&ours), "list"]);
    assert_eq!(
        listed,
        "liken_a_tries=2\nliken_slot=a\nodd=back\\slash\nnewline\n"
    );

    // grub-editenv's own block, variables set in name order, is
    // byte-identical to ours.
    let theirs = dir.join("theirs");
    run("grub-editenv", &[path(&theirs), "create"]);
    run(
        "grub-editenv",
        &[
            path(&theirs),
            "set",
            "liken_a_tries=2",
            "liken_slot=a",
            "odd=back\\slash\nnewline",
        ],
    );
    let block = std::fs::read(&theirs).unwrap();
    assert_eq!(block.len(), GRUBENV_SIZE);
    assert_eq!(block, render_grubenv(&env).unwrap().to_vec());
    assert_eq!(parse_grubenv(&block).unwrap(), env);

    // What grub-editenv does to our block (unset, set) we read back.
    run("grub-editenv", &[path(&ours), "unset", "liken_a_tries"]);
    run("grub-editenv", &[path(&ours), "set", "liken_b_tries=3"]);
    let got = parse_grubenv(&std::fs::read(&ours).unwrap()).unwrap();
    let mut want = env.clone();
    want.remove("liken_a_tries");
    want.insert("liken_b_tries".to_string(), "3".to_string());
    assert_eq!(got, want);

    let empty = dir.join("empty");
    run("grub-editenv", &[path(&empty), "create"]);
    assert_eq!(
        std::fs::read(&empty).unwrap(),
        render_grubenv(&BTreeMap::new()).unwrap().to_vec()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
