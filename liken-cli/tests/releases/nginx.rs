//! `liken fetch` from Debian's nginx, a static web server liken did not
//! write, over plain http and over https, so fetch is not proven only
//! against `liken serve`'s own reading of HTTP.
//!
//! The test mints a CA and a server certificate for 127.0.0.1 with
//! liken-testenv's PKI and starts nginx on two loopback ports (http and
//! https) through liken-testenv's nginx helper, the one the operators'
//! channel tests use, serving a bundled channel. Over https,
//! fetch trusts the server through `-ca` and nothing else: without it
//! (the built-in public roots) and with another CA it refuses, and
//! leaves no release behind. A partial download resumes from nginx with
//! a Range request, which nginx's access log shows as a 206 of the rest.
//! nginx's own redirects on one host are followed from http up to https
//! and refused from https down to plain http, before any plain request
//! is made (the access log records the scheme of each request).

use std::path::{Path, PathBuf};

use liken_testenv::nginx::Nginx;
use liken_testenv::pki::mint_serving;

use crate::support::*;

const V: &str = "2026.07.11-001";

/// A CA and a server certificate for 127.0.0.1 signed by it, from
/// liken-testenv's PKI: (the CA's certificate file, the server's pair).
fn mint(dir: &Path, name: &str) -> (PathBuf, liken_testenv::pki::Pair) {
    let (ca, server) = mint_serving(name).unwrap();
    let ca_crt = dir.join(format!("{name}-ca.crt"));
    std::fs::write(&ca_crt, &ca.cert_pem).unwrap();
    (ca_crt, server)
}

fn fetch(source: &str, dest: &Path, ca: Option<&Path>) -> (bool, String, String) {
    let dest = dest.display().to_string();
    let ca = ca.map(|p| p.display().to_string());
    // Signatures are fetch.rs's subject; here the transport is.
    let mut args = vec!["fetch", "-unsigned"];
    if let Some(ca) = &ca {
        args.extend(["-ca", ca]);
    }
    args.extend([source, "latest", &dest]);
    run(&args)
}

fn same_tree(a: &Path, b: &Path) {
    assert_eq!(tree(a), tree(b));
    for f in tree(a) {
        assert!(
            std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(),
            "{f} differs"
        );
    }
}

#[test]
fn fetch_from_nginx_over_http_and_https_with_an_explicit_ca() {
    let work = TempDir::new("releases-nginx");
    let channel = bundle(work.path(), V, 700_000);
    let (ca, server) = mint(work.path(), "nginx");
    let (other_ca, _) = mint(work.path(), "other");
    let key = work.path().join("server.key");
    std::fs::write(&key, &server.key_pem).unwrap();
    let nginx = Nginx::start_https(work.path(), &channel, &server);
    let https = nginx.https.clone().unwrap();

    // Plain http: byte for byte.
    let dest = work.path().join("over-http");
    let (ok, out, err) = fetch(&nginx.url, &dest, None);
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // https without -ca: the built-in roots do not know this CA.
    let dest = work.path().join("no-ca");
    let (ok, out, err) = fetch(&https, &dest, None);
    assert!(!ok, "fetch trusted a certificate no root signed: {out}");
    assert!(err.starts_with("liken: "), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(!dest.join(V).join("release.yaml").exists());
    // Nor with another CA.
    let (ok, out, err) = fetch(&https, &dest, Some(&other_ca));
    assert!(!ok, "fetch trusted a certificate another CA signed: {out}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(!dest.join(V).join("release.yaml").exists());
    // A -ca file that holds no certificate is a clear error.
    let (ok, _, err) = fetch(&https, &dest, Some(&key));
    assert!(!ok);
    assert!(err.contains("-ca ") && err.contains("certificate"), "{err}");

    // With the CA that signed it: byte for byte.
    let dest = work.path().join("over-https");
    let (ok, out, err) = fetch(&https, &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // A resume from nginx over https asks for the rest only.
    let full = std::fs::read(channel.join(V).join("liken.sqfs")).unwrap();
    let dest = work.path().join("resumed");
    std::fs::create_dir_all(dest.join(V)).unwrap();
    let prefix = 250_000;
    std::fs::write(dest.join(V).join(".liken.sqfs.partial"), &full[..prefix]).unwrap();
    let (ok, out, err) = fetch(&https, &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);
    let log = nginx.access_log();
    let line = log
        .lines()
        .rfind(|l| l.contains(&format!("GET /{V}/liken.sqfs ")))
        .unwrap_or_else(|| panic!("nginx logged no GET of liken.sqfs:\n{log}"));
    assert!(
        line.starts_with("https ") && line.ends_with(&format!("\" 206 {}", full.len() - prefix)),
        "the resume was not a range of the rest over https: {line}"
    );

    // nginx sends plain http up to https on the same host: followed,
    // for channel.yaml and every file, byte for byte.
    let dest = work.path().join("upgraded");
    let (ok, out, err) = fetch(&format!("{}/to-https", nginx.url), &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // nginx sends https down to plain http on the same host: refused
    // before the plain request is made, and nothing is written.
    let before = nginx.access_log().lines().count();
    let dest = work.path().join("downgraded");
    let (ok, out, err) = fetch(&format!("{https}/to-http"), &dest, Some(&ca));
    assert!(!ok, "fetch followed https down to http: {out}");
    assert!(
        err.contains(&format!(
            "the server redirects to {}/channel.yaml, which liken does not follow",
            nginx.url
        )) && err.contains("it leaves https for plain http"),
        "{err}"
    );
    assert!(!dest.exists(), "something was written: {:?}", tree(&dest));
    let log = nginx.access_log();
    let after: Vec<&str> = log.lines().skip(before).collect();
    assert!(
        after.len() == 1
            && after[0].starts_with("https \"GET /to-http/channel.yaml HTTP/1.1\" 302 "),
        "nginx saw other requests than the one redirected: {after:?}"
    );
}
