//! `make bench`: LIST and decode 5,000 Machines through liken-kube
//! against the same work done by client-go and by kubectl, measured in
//! the same run, and the resident memory of a store holding 10,000
//! Machines.
//!
//! Against the same real apiserver, all paging by 500 (kubectl's
//! default chunk size):
//!
//! - In-process, on a warm connection: liken-kube's `list_all` decoding
//!   into liken-api's typed Machine, against the physical bound: the same
//!   pages read by a bare HTTP client in the same run (ureq with rustls,
//!   the transport liken-kube uses, set up from the same kubeconfig; each
//!   body read whole and not decoded, the continue token cut from it).
//!   That is the apiserver's time to serve the pages plus the wire's,
//!   which no client can beat (target: liken-kube within 1.1x of it).
//!   The rounds of the two alternate, so both meet the same load.
//!   client-go is printed beside them for reference, with no target:
//!   testenv's `client-go-list` (testenv/cmd/client-go-list), a
//!   client-go REST client decoding into typed Go structs as a
//!   kubebuilder operator would, timing its own rounds after one warm-up.
//! - As a command a person runs: a fresh process that reads the
//!   kubeconfig, connects, pages through the LIST, decodes and prints
//!   the list as JSON, against a fresh `kubectl get machines -o json`
//!   (testenv's kubectl, of the apiserver's release). liken has no
//!   listing command yet, so the process is this binary re-run doing what
//!   one would do; the time includes start-up, the TLS handshake and the
//!   printing on both sides, and kubectl's discovery (cached on disk after
//!   the warm-up run, as on a workstation).
//!
//! Each side runs once to warm up and is then timed; medians are
//! compared. The store's memory is measured in a child process (this
//! binary re-run), whose VmRSS after its informer synced 10,000 Machines
//! is the whole process: TLS, client, store.
//!
//! `LIKEN_BENCH_SMOKE=1` (`make bench-smoke`, part of `make test`) runs
//! it all once at a few dozen Machines, so a change to any interface
//! it uses breaks a test instead of this benchmark; its figures are not
//! measurements.

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use liken_api::Machine;
use liken_kube::request::MACHINES;
use liken_kube::{Api, Auth, Client, Config, Informer, ListParams, wake_channel};
use serde_json::json;

/// How much work one run does.
struct Size {
    /// Machines listed.
    list: usize,
    /// Machines in the store.
    store: usize,
    /// Timed rounds of each LIST.
    runs: usize,
    /// Whether this is the smoke run (figures not measurements).
    smoke: bool,
}

impl Size {
    fn from_env() -> Size {
        if std::env::var("LIKEN_BENCH_SMOKE").is_ok_and(|v| v == "1") {
            Size {
                list: 40,
                store: 60,
                runs: 1,
                smoke: true,
            }
        } else {
            Size {
                list: 5_000,
                store: 10_000,
                runs: 5,
                smoke: false,
            }
        }
    }
}

const PAGE: u32 = 500;
/// Set in the store child: the kubeconfig to use.
const STORE_CHILD: &str = "LIKEN_BENCH_STORE_CHILD";
/// Set in the CLI child: the kubeconfig to use.
const LIST_CHILD: &str = "LIKEN_BENCH_LIST_CHILD";

/// A Machine as a running fleet has it: a spec with network and
/// kernel settings, a status with conditions and releases.
fn machine(i: usize) -> serde_json::Value {
    let name = format!("bench-{i:05}");
    let t = "2026-07-01T12:00:00Z";
    json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {"liken-bench": "yes"}},
        "spec": {
            "hostname": name,
            "rebootPolicy": "Auto",
            "sysctls": {"vm.max_map_count": "262144", "net.ipv4.ip_forward": "1"},
            "kernelArgs": ["console=ttyS0", "quiet"],
            "network": {
                "interfaces": [{"name": "eth0", "dhcp": false,
                                "addresses": [format!("10.1.{}.{}/16", i / 250, i % 250 + 1)],
                                "routes": [{"to": "0.0.0.0/0", "via": "10.1.0.1"}],
                                "dns": ["10.1.0.2"]}],
                "ntp": ["pool.ntp.org"]
            },
            "installDisk": "/dev/vda",
        },
        "status": {
            "phase": "Ready", "role": if i < 3 { "leader" } else { "follower" },
            "observedGeneration": 1,
            "release": {"running": "2026.07.01-001", "target": "2026.07.01-001"},
            "conditions": [
                {"type": "SysctlsApplied", "status": "True", "reason": "Converged", "message": "all sysctls applied", "lastTransitionTime": t},
                {"type": "NetworkConfigured", "status": "True", "reason": "Converged", "message": "eth0 configured", "lastTransitionTime": t},
                {"type": "ReleaseCurrent", "status": "True", "reason": "Converged", "message": "running the target release", "lastTransitionTime": t}
            ]
        }
    })
}

fn client(kubeconfig: &std::path::Path) -> Client {
    Client::new(&Config::from_kubeconfig(kubeconfig, None).expect("kubeconfig")).expect("client")
}

/// Creates Machines `from..to` (spec, then status) on four threads.
fn create(c: &Client, from: usize, to: usize) {
    let next = AtomicUsize::new(from);
    let api = Api::all(MACHINES);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return;
                    }
                    let m = machine(i);
                    let created: Machine = c.create(&api, &m).expect("create");
                    let mut status = m.clone();
                    status["metadata"]["resourceVersion"] =
                        created.metadata.resource_version.into();
                    let req = api
                        .replace_status(
                            &created.metadata.name,
                            serde_json::to_vec(&status).unwrap(),
                        )
                        .unwrap();
                    c.send(&req).expect("status");
                }
            });
        }
    });
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The child: sync an informer on every Machine and report memory.
fn store_child(kubeconfig: &str) {
    let before = vm_rss_kib();
    let c = client(std::path::Path::new(kubeconfig));
    let (tx, _rx) = wake_channel();
    let informer = Informer::<Machine>::start(c, Api::all(MACHINES), tx);
    let store = informer.store();
    assert!(
        store.wait_synced(Duration::from_secs(300)),
        "the store never synced"
    );
    // Let the watch settle and transient buffers go.
    std::thread::sleep(Duration::from_millis(500));
    let after = vm_rss_kib();
    println!("{} {before} {after}", store.len());
}

/// The CLI child: what a listing command would do in a fresh process,
/// from reading the kubeconfig to printing the list as JSON.
fn list_child(kubeconfig: &str) {
    let c = client(std::path::Path::new(kubeconfig));
    let list = c
        .list_all::<Machine>(&Api::all(MACHINES), &ListParams::default().limit(PAGE))
        .expect("list");
    let out = std::io::stdout().lock();
    let mut out = std::io::BufWriter::new(out);
    serde_json::to_writer_pretty(
        &mut out,
        &json!({"apiVersion": "v1", "kind": "List", "items": list.items}),
    )
    .expect("stdout");
    out.flush().expect("stdout");
}

/// Runs `cmd` to its end and returns how long it took and its stdout,
/// failing the bench with its stderr unless it succeeded.
fn timed(cmd: &mut Command) -> (Duration, Vec<u8>) {
    let t = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (d, out.stdout)
}

/// The number of items in a printed JSON list.
fn items_in(stdout: &[u8]) -> usize {
    let v: serde_json::Value = serde_json::from_slice(stdout).expect("a JSON list");
    v["items"].as_array().map_or(0, Vec::len)
}

fn ratio_line(ours: Duration, theirs: Duration, smoke: bool) -> String {
    let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
    let note = if smoke {
        " (smoke size: not a measurement)"
    } else {
        ""
    };
    format!("liken-kube is {ratio:.1}x faster{note}")
}

/// How many times the bound liken-kube's time is, against a target of at
/// most `target` times.
fn bound_line(ours: Duration, bound: Duration, target: f64, smoke: bool) -> String {
    let ratio = ours.as_secs_f64() / bound.as_secs_f64();
    let verdict = if smoke {
        "(smoke size: not a measurement)"
    } else if ratio <= target {
        "PASS"
    } else {
        "MISS"
    };
    format!("liken-kube takes {ratio:.2}x the bound (target <= {target}x) {verdict}")
}

/// A bare HTTP client for the physical bound: the TLS setup liken-kube
/// makes from a kubeconfig (ureq with rustls), and nothing else.
struct Raw {
    agent: ureq::Agent,
    server: String,
    bearer: Option<String>,
}

impl Raw {
    fn new(config: &Config) -> Raw {
        let pem_certs = |pem: &[u8]| -> Vec<ureq::tls::Certificate<'static>> {
            ureq::tls::parse_pem(pem)
                .filter_map(|item| match item.expect("PEM") {
                    ureq::tls::PemItem::Certificate(c) => Some(c),
                    _ => None,
                })
                .collect()
        };
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = &config.ca_pem {
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&pem_certs(ca)));
        }
        let mut bearer = None;
        match &config.auth {
            Auth::None => {}
            Auth::Token(t) => bearer = Some(t.trim().to_owned()),
            Auth::TokenFile(p) => {
                bearer = Some(
                    std::fs::read_to_string(p)
                        .expect("token file")
                        .trim()
                        .to_owned(),
                )
            }
            Auth::ClientCert { cert_pem, key_pem } => {
                let key = ureq::tls::PrivateKey::from_pem(key_pem).expect("client key");
                tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(
                    &pem_certs(cert_pem),
                    key,
                )));
            }
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .max_redirects(0)
            .build()
            .into();
        Raw {
            agent,
            server: config.server.clone(),
            bearer,
        }
    }

    /// Every page of the Machines LIST, each body read whole and kept
    /// undecoded; the continue token is the one field looked at.
    fn list_pages(&self) -> Vec<Vec<u8>> {
        let mut pages = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/apis/liken.sh/v1alpha1/machines?limit={PAGE}",
                self.server
            );
            if let Some(t) = &token {
                url.push_str("&continue=");
                url.push_str(&percent_encode(t));
            }
            let mut req = self.agent.get(&url).header("Accept", "application/json");
            if let Some(b) = &self.bearer {
                req = req.header("Authorization", &format!("Bearer {b}"));
            }
            let body = req
                .call()
                .expect("raw LIST")
                .into_body()
                .into_with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .expect("raw LIST body");
            token = continue_token(&body);
            pages.push(body);
            if token.is_none() {
                return pages;
            }
        }
    }
}

/// The list's continue token, cut from the body without decoding it:
/// the list's `metadata` comes before the items (an apiserver that
/// streams its list encoding) or after them (one that sorts the keys), so
/// the head and the tail are searched; no Machine field is `continue`.
fn continue_token(body: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"continue\":\"";
    const NEAR: usize = 4096;
    let head = &body[..body.len().min(NEAR)];
    let tail = &body[body.len().saturating_sub(NEAR)..];
    [head, tail]
        .into_iter()
        .find_map(|part| {
            let at = part.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
            let end = part[at..].iter().position(|&b| b == b'"')?;
            let token = std::str::from_utf8(&part[at..at + end]).expect("a UTF-8 token");
            Some(token.to_owned())
        })
        .filter(|t| !t.is_empty())
}

/// A query value percent-encoded (a continue token is base64).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The Machines in raw pages, counted after the timing.
fn items_in_pages(pages: &[Vec<u8>]) -> usize {
    pages
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_slice(p).expect("a JSON page");
            v["items"].as_array().map_or(0, Vec::len)
        })
        .sum()
}

fn main() {
    if let Ok(kc) = std::env::var(STORE_CHILD) {
        store_child(&kc);
        return;
    }
    if let Ok(kc) = std::env::var(LIST_CHILD) {
        list_child(&kc);
        return;
    }
    let size = Size::from_env();
    let (list_n, store_n, runs) = (size.list, size.store, size.runs);
    // `cargo bench` passes --bench; nothing else is accepted.
    let t0 = Instant::now();
    let cp = liken_testenv::start(liken_testenv::Options::default())
        .unwrap_or_else(|e| panic!("liken-testenv: the control plane is not available: {e}"));
    eprintln!(
        "control plane ready in {:.1}s",
        cp.startup_time().as_secs_f64()
    );
    let c = client(cp.kubeconfig());
    let t = Instant::now();
    create(&c, 0, list_n);
    eprintln!(
        "created {list_n} Machines in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    // In-process: liken-kube against the bound, their rounds
    // alternating; then client-go in its own process timing its own.
    let api = Api::all(MACHINES);
    let params = ListParams::default().limit(PAGE);
    let liken = || {
        let t = Instant::now();
        let list = c.list_all::<Machine>(&api, &params).expect("list");
        let d = t.elapsed();
        assert_eq!(list.items.len(), list_n);
        d
    };
    let raw = Raw::new(&Config::from_kubeconfig(cp.kubeconfig(), None).expect("kubeconfig"));
    let raw_round = || {
        let t = Instant::now();
        let pages = raw.list_pages();
        let d = t.elapsed();
        assert_eq!(items_in_pages(&pages), list_n, "the raw pages");
        d
    };
    liken();
    raw_round();
    let (mut ours, mut bound) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(liken());
        bound.push(raw_round());
    }
    let (ours, bound) = (median(ours), median(bound));
    println!(
        "LIST+decode of {list_n} Machines in-process, warm connection: liken-kube {:.0} ms, \
         the bound (the same pages read raw, undecoded) {:.0} ms (median of {runs}): {}",
        ms(ours),
        ms(bound),
        bound_line(ours, bound, 1.1, size.smoke)
    );
    let client_go = liken_testenv::testenv_bin("client-go-list")
        .unwrap_or_else(|e| panic!("the client-go reference: {e}"));
    let (_, out) = timed(
        Command::new(client_go)
            .arg(format!("-kubeconfig={}", cp.kubeconfig().display()))
            .arg(format!("-limit={PAGE}"))
            .arg(format!("-rounds={runs}"))
            .arg(format!("-expect={list_n}")),
    );
    let text = String::from_utf8_lossy(&out);
    let theirs: Vec<Duration> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("round ")?.split_whitespace();
            let ns: u64 = f.next()?.parse().ok()?;
            let n: usize = f.next()?.parse().ok()?;
            assert_eq!(n, list_n, "client-go-list found {n} Machines");
            Some(Duration::from_nanos(ns))
        })
        .collect();
    assert_eq!(theirs.len(), runs, "client-go-list printed {text:?}");
    let theirs = median(theirs);
    println!(
        "  for reference, client-go LIST+decode of the same {list_n} Machines: {:.0} ms \
         (median of {runs}): {}",
        ms(theirs),
        ratio_line(ours, theirs, size.smoke)
    );

    // A fresh process each, printing the list as JSON.
    let exe = std::env::current_exe().expect("this binary");
    let mut ours_cli = Command::new(&exe);
    ours_cli.env(LIST_CHILD, cp.kubeconfig());
    let mut kubectl = cp.kubectl();
    kubectl.args([
        "get",
        "machines.liken.sh",
        "-o",
        "json",
        &format!("--chunk-size={PAGE}"),
    ]);
    for cmd in [&mut ours_cli, &mut kubectl] {
        let (_, out) = timed(cmd);
        assert_eq!(items_in(&out), list_n, "{cmd:?}");
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(timed(&mut ours_cli).0);
        theirs.push(timed(&mut kubectl).0);
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "LIST of {list_n} Machines as a fresh process printing JSON: liken-kube {:.0} ms, \
         kubectl get -o json {:.0} ms (median of {runs}): {}",
        ms(ours),
        ms(theirs),
        ratio_line(ours, theirs, size.smoke)
    );

    let t = Instant::now();
    create(&c, list_n, store_n);
    eprintln!(
        "created {} more Machines in {:.1}s",
        store_n - list_n,
        t.elapsed().as_secs_f64()
    );
    let out = Command::new(exe)
        .env(STORE_CHILD, cp.kubeconfig())
        .output()
        .expect("the store child runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = text
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let [count, before, after] = nums[..] else {
        panic!("the child printed {text:?}")
    };
    assert_eq!(count as usize, store_n);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "store of {count} Machines: process RSS {:.1} MiB after sync ({:.1} MiB at start, {:.1} MiB added) \
         (target < 60 MB) {}",
        mib(after),
        mib(before),
        mib(after.saturating_sub(before)),
        match (size.smoke, (after * 1024) < 60_000_000) {
            (true, _) => "(smoke size: not a measurement)",
            (false, true) => "PASS",
            (false, false) => "MISS",
        }
    );
    eprintln!("bench done in {:.0}s", t0.elapsed().as_secs_f64());
}
