//! `liken kubectl|stern|flux`: real kubectl against the fleet's
//! kube-apiserver, with KUBECONFIG replaced and the tool's exit status
//! passed through.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;

use crate::fleet;
use crate::support::{Scratch, fails, liken, ok, output};

#[test]
fn kubectl_runs_on_the_deployments_credential_and_its_status_passes_through() {
    let f = fleet::shared();
    let s = Scratch::new("passthrough");
    // A kubectl plugin, so real kubectl runs a program that reports the
    // environment it was given and exits with a status of its own.
    let bin = s.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let probe = bin.join("kubectl-probe");
    std::fs::write(
        &probe,
        "#!/bin/sh\necho \"KUBECONFIG=$KUBECONFIG\"\necho \"args=$*\"\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // testenv's kubectl (the apiserver's release), not one from PATH.
    let kubectl = liken_testenv::kubectl_bin();
    let kubectl_dir = kubectl.parent().unwrap();
    let path =
        std::env::join_paths([bin.as_path(), kubectl_dir, std::path::Path::new("/bin")]).unwrap();
    let run = |args: &[&str]| {
        let mut c = liken([
            OsStr::new("kubectl"),
            OsStr::new("-server"),
            OsStr::new(f.cp.server()),
        ]);
        c.arg(&f.dep)
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", "/nonexistent/a:/nonexistent/b");
        c
    };

    // Words after the directory are kubectl's, flags included.
    let namespaces = ok(run(&["get", "namespaces", "-o", "name"]));
    assert!(
        namespaces.lines().any(|l| l == "namespace/kube-system"),
        "{namespaces}"
    );
    let crds = ok(run(&["get", "crd", "machines.liken.sh", "-o", "name"]));
    assert_eq!(
        crds.trim(),
        "customresourcedefinition.apiextensions.k8s.io/machines.liken.sh"
    );

    let out = output(run(&["probe", "--flag", "x"]));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passthrough = f.dep.join("identity/passthrough.kubeconfig");
    assert_eq!(
        stdout,
        format!("KUBECONFIG={}\nargs=--flag x\n", passthrough.display()),
        "KUBECONFIG names the passthrough's kubeconfig alone"
    );
    // The certificate kubectl was given (and the apiserver accepted
    // above) expires within the hour, as OpenSSL reads it.
    assert_eq!(crate::support::mode(&passthrough), 0o600);
    let cert = crate::identity_openssl::admin_cert(&passthrough, s.path());
    let end = crate::identity_openssl::end_date(&cert);
    assert!(
        crate::identity_openssl::expires_within(&cert, 3600),
        "{end}"
    );
    assert!(
        !crate::identity_openssl::expires_within(&cert, 3600 - 300),
        "{end}"
    );
    // kubectl's own failure status comes through too.
    let out = output(run(&["get", "machine", "no-such-machine"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));

    // A tool that is not installed: how to install it, and exit 1.
    let mut stern = liken([
        OsStr::new("stern"),
        OsStr::new("-server"),
        OsStr::new(f.cp.server()),
    ]);
    stern
        .arg(&f.dep)
        .arg("-n")
        .arg("kube-system")
        .env("PATH", &bin);
    let err = fails(stern);
    assert!(
        err.starts_with("liken: stern is not on PATH; install it and run this again"),
        "{err}"
    );
    let mut flux = liken([OsStr::new("flux")]);
    flux.arg(&f.dep).env("PATH", &bin);
    assert!(fails(flux).contains("fluxcd.io"));
}
