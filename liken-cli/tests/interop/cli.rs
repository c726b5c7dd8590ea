//! The binary as a shell and kubectl see it: its three names, errors on
//! stderr with exit 1, both flag spellings, the plugin walk (exec, exit
//! status passed through), bash completion, and kubectl's plugin
//! dispatch and completion through the `kubectl_complete-liken` shim.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use liken_testenv::kubectl_bin;

use crate::support::{Scratch, fails, liken, liken_bin, ok, output};

/// A directory holding links to the binary under its other names.
fn bin_dir(s: &Scratch) -> std::path::PathBuf {
    let bin = s.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["liken", "kubectl-liken", "kubectl_complete-liken"] {
        std::os::unix::fs::symlink(liken_bin(), bin.join(name)).unwrap();
    }
    bin
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut p = dir.as_os_str().to_owned();
    p.push(":");
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_three_names_behave_as_one() {
    let s = Scratch::new("names");
    let bin = bin_dir(&s);
    let version = ok(liken(["version"]));
    assert_eq!(
        ok(Command::new(bin.join("kubectl-liken")).arg("version")),
        version
    );
    assert_eq!(
        ok(Command::new(bin.join("kubectl_complete-liken")).arg("ad")),
        "adopt\n:4\n"
    );
    let help = ok(Command::new(bin.join("kubectl-liken")).arg("help"));
    assert!(
        help.contains("liken kubeconfig [-server URL] [-lifetime 30d] <deployment-dir>"),
        "{help}"
    );
    // Real kubectl finds kubectl-liken on PATH.
    let via_kubectl = ok(Command::new(kubectl_bin())
        .args(["liken", "version"])
        .env("PATH", path_with(&bin)));
    assert_eq!(via_kubectl, version);
}

#[test]
fn errors_go_to_stderr_as_liken_colon_and_exit_1() {
    let s = Scratch::new("errors");
    let err = fails(
        liken(["frobnicate"])
            .env("PATH", "/nonexistent")
            .env("HOME", s.path()),
    );
    assert!(
        err.trim_end().ends_with(
            "liken: unknown command \"frobnicate\", and no plugin kubectl-liken-frobnicate on \
             PATH or in ~/.liken/plugins/bin; run `liken help` for the list"
        ),
        "{err}"
    );
    let err = fails(liken(["kubeconfig", "-bogus", "dir"]));
    assert_eq!(
        err,
        "liken: unknown flag -bogus; usage: liken kubeconfig [-server URL] [-lifetime 30d] <deployment-dir>\n"
    );
    let err = fails(liken(["kubeconfig", "-server"]));
    assert!(
        err.starts_with("liken: ") && err.contains("--server"),
        "{err}"
    );
    let err = fails(liken(["mint"]));
    assert_eq!(err, "liken: usage: liken mint <identity-dir>\n");
    let err = fails(liken(Vec::<&str>::new()));
    assert!(
        err.contains("usage:")
            && err.ends_with("liken: a command is required; run `liken help` for the list\n"),
        "{err}"
    );
    // -h after a command is help, not an error.
    let out = ok(liken(["layer", "-h"]));
    assert!(
        out.starts_with("  liken layer [-unsigned] [-seal-key release.key] <manifests-dir>"),
        "{out}"
    );
}

#[test]
fn both_flag_spellings_reach_the_command() {
    let s = Scratch::new("spellings");
    for (i, flag) in ["-server", "--server", "-server=", "--server="]
        .iter()
        .enumerate()
    {
        let dep = s.path().join(format!("d{i}"));
        crate::support::deployment(&dep);
        let url = "https://127.0.0.9:7443";
        let args: Vec<String> = if flag.ends_with('=') {
            vec![
                "kubeconfig".into(),
                format!("{flag}{url}"),
                dep.display().to_string(),
            ]
        } else {
            vec![
                "kubeconfig".into(),
                (*flag).into(),
                url.into(),
                dep.display().to_string(),
            ]
        };
        ok(liken(&args));
        let text = std::fs::read_to_string(dep.join("identity/kubeconfig")).unwrap();
        assert!(text.contains(&format!("server: {url}")), "{flag}: {text}");
    }
}

#[test]
fn unknown_words_walk_to_plugins_and_exec_them() {
    let s = Scratch::new("plugins");
    let on_path = s.path().join("path");
    let home = s.path().join("home");
    let plugin_bin = home.join(".liken/plugins/bin");
    std::fs::create_dir_all(&on_path).unwrap();
    std::fs::create_dir_all(&plugin_bin).unwrap();
    script(
        &plugin_bin.join("kubectl-liken-audio"),
        "echo \"audio from the plugin dir: $*\"; exit 7",
    );
    let path = format!("{}:/usr/bin:/bin", on_path.display());
    let run = |args: &[&str]| output(liken(args).env("PATH", &path).env("HOME", &home));

    let out = run(&["audio", "capture", "-o", "x.wav"]);
    assert_eq!(out.status.code(), Some(7), "the plugin's status is liken's");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "audio from the plugin dir: capture -o x.wav\n"
    );

    // PATH wins over the plugin dir, and the longest name wins.
    script(
        &on_path.join("kubectl-liken-audio"),
        "echo \"audio on PATH: $*\"",
    );
    script(
        &on_path.join("kubectl-liken-audio-capture"),
        "echo \"capture: $*\"",
    );
    let out = run(&["audio", "play", "a.wav"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "audio on PATH: play a.wav\n"
    );
    let out = run(&["audio", "capture", "now"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "capture: now\n");

    // kubectl-liken runs the same walk.
    let bin = bin_dir(&s);
    let out = output(
        Command::new(bin.join("kubectl-liken"))
            .args(["audio", "play"])
            .env("PATH", &path)
            .env("HOME", &home),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "audio on PATH: play\n"
    );
}

#[test]
fn bash_completes_through_the_script() {
    let s = Scratch::new("bash");
    let bin = bin_dir(&s);
    let script_text = ok(liken(["completion", "bash"]));
    let file = s.path().join("liken.bash");
    std::fs::write(&file, script_text).unwrap();
    let complete = |words: &str, cword: usize| {
        ok(Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; _liken_complete; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                file.display()
            ))
            .env("PATH", path_with(&bin)))
    };
    assert_eq!(complete("liken ku", 1), "kubeconfig\nkubectl\n");
    assert_eq!(complete("liken plugins ''", 2), "list\nremove\nsync\n");
    assert_eq!(complete("kubectl-liken mi", 1), "mint\n");
    assert_eq!(complete("liken kubeconfig -s", 2), "-server\n");
    assert_eq!(complete("liken completion ''", 2), "bash\n");
    let registered = ok(Command::new("bash").arg("-c").arg(format!(
        "source {}; complete -p liken kubectl-liken",
        file.display()
    )));
    assert!(
        registered.contains("-F _liken_complete liken"),
        "{registered}"
    );
}

#[test]
/// kubectl (1.26 and later; testenv's is the control plane's release)
/// completes plugins through `kubectl_complete-<name>`.
fn kubectl_completes_liken_through_the_shim() {
    let s = Scratch::new("kubectl-complete");
    let bin = bin_dir(&s);
    let out = ok(Command::new(kubectl_bin())
        .args(["__complete", "liken", "mi"])
        .env("PATH", path_with(&bin)));
    assert!(out.lines().any(|l| l == "mint"), "{out}");
    assert!(out.lines().any(|l| l == ":4"), "{out}");
    let out = ok(Command::new(kubectl_bin())
        .args(["__complete", "liken", "kubeconfig", "-"])
        .env("PATH", path_with(&bin)));
    assert!(out.lines().any(|l| l == "-server"), "{out}");
}
