//! Init's SNTP client and DNS stub resolver against servers liken did
//! not write: Debian's chronyd and dnsmasq, each started by the test on
//! loopback ports with a generated configuration, so a bug shared by
//! init's encoder and the unit tests' hand-made responders cannot
//! cancel out.
//!
//! dnsmasq answers for `liken.test` only (no upstream, no hosts file):
//! `clock.liken.test` is 127.0.0.1, `time.liken.test` a CNAME of it,
//! `unsynced.liken.test` is 127.0.0.2, `v6only.liken.test` has only an
//! IPv6 address (2001:db8::7), `clock6.liken.test` only ::1, and any
//! other name in the domain does not exist. dnsmasq listens on 127.0.0.1
//! and on ::1, so the stub is asked over both families.
//! Three chronyd serve NTP on the same port: one on 127.0.0.1 and one on
//! ::1 with `local stratum 8` (synchronised servers), one on 127.0.0.2
//! with no source at all, which answers with leap indicator 3. None
//! touches the host's clock (`-x`); the clock init sets is a fake
//! reading 1970, as on a machine whose battery died.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use liken_init::dns::{ResolveError, Resolver};
use liken_init::ntp::{self, QueryError, Refusal};
use liken_init::sys::clock::FakeClock;

/// How long a server may take to start listening.
const START: Duration = Duration::from_secs(20);

/// A scratch directory for one test's configs and logs, under the
/// target directory (kept for a failure's post-mortem).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A UDP port free on 127.0.0.1 and on ::1 when asked.
fn free_udp_port() -> u16 {
    loop {
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        if UdpSocket::bind(("::1", port)).is_ok() {
            return port;
        }
    }
}

/// A server process, killed (and reaped) when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program` with `args`, its output to `log`; a missing program
/// fails the test saying which package to install.
fn start(program: &str, package: &str, args: &[String], log: &Path) -> Server {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program}: {e}; install Debian's {package} (scripts/setup.sh does)")
        });
    Server(child)
}

/// chronyd serving NTP on `address`:`port`, synchronised to its own
/// clock at stratum 8 when `local`, else with no source at all.
fn chronyd(dir: &Path, name: &str, address: IpAddr, port: u16, local: bool) -> Server {
    let conf = dir.join(format!("{name}.conf"));
    let mut text = format!(
        "port {port}\nbindaddress {address}\nallow 127.0.0.0/8\nallow ::1\n\
         cmdport 0\nbindcmdaddress /\npidfile {}\n",
        dir.join(format!("{name}.pid")).display()
    );
    if local {
        text.push_str("local stratum 8\n");
    }
    std::fs::write(&conf, text).unwrap();
    // -d: foreground, log to stderr; -x: never adjust the host's clock;
    // -u root: no user switch, so the test's files stay readable; -4 or
    // -6: the bound address's family only. chronyd serves the other
    // family on the wildcard address of the same port otherwise, so the
    // IPv6 server would answer for 127.0.0.2 whenever the unsynchronised
    // one there was not bound yet (a CI run got the synchronised answer
    // from 127.0.0.2 that way).
    let family = if address.is_ipv4() { "-4" } else { "-6" };
    let args = [family, "-d", "-x", "-u", "root", "-f"].map(String::from);
    let mut args = args.to_vec();
    args.push(conf.display().to_string());
    start("chronyd", "chrony", &args, &dir.join(format!("{name}.log")))
}

/// Asks `address` until it answers at all (a refusal counts: the server
/// is up), or fails the test after [`START`].
fn wait_for_ntp(address: SocketAddr, log: &Path) {
    let clock = FakeClock::starting_at(SystemTime::now());
    let deadline = Instant::now() + START;
    loop {
        match ntp::query(address, &clock, Duration::from_millis(300)) {
            Ok(_) | Err(QueryError::Refused(_)) => return,
            Err(e) => assert!(
                Instant::now() < deadline,
                "chronyd on {address} did not answer within {START:?} ({e}); see {}",
                log.display()
            ),
        }
    }
}

#[test]
fn init_resolves_through_dnsmasq_and_sets_the_clock_from_chronyd() {
    let dir = scratch("chrony-dnsmasq");
    let (clock_ip, unsynced_ip) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    // The ports are free when picked, but the servers bind them
    // themselves, so another process may take one first: a server that
    // lost its port (dnsmasq exits, chronyd logs that it could not bind)
    // makes the test pick other ports, and the failure names them.
    let mut tried = Vec::new();
    let dns_log = dir.join("dnsmasq.log");
    let (ntp_port, dns_port, _servers) = loop {
        let ntp_port = free_udp_port();
        // Two free ports are not always two ports.
        let dns_port = std::iter::repeat_with(free_udp_port)
            .find(|p| *p != ntp_port)
            .unwrap();
        tried.push((ntp_port, dns_port));
        let dnsmasq = start(
            "dnsmasq",
            "dnsmasq-base",
            &[
                "--keep-in-foreground".into(),
                "--conf-file=/dev/null".into(),
                "--no-resolv".into(),
                "--no-hosts".into(),
                "--bind-interfaces".into(),
                "--listen-address=127.0.0.1".into(),
                "--listen-address=::1".into(),
                format!("--port={dns_port}"),
                format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
                "--user=root".into(),
                "--local=/liken.test/".into(),
                format!("--host-record=clock.liken.test,{clock_ip}"),
                format!("--host-record=unsynced.liken.test,{unsynced_ip}"),
                "--host-record=v6only.liken.test,2001:db8::7".into(),
                "--host-record=clock6.liken.test,::1".into(),
                "--cname=time.liken.test,clock.liken.test".into(),
                "--log-queries".into(),
                format!("--log-facility={}", dns_log.display()),
            ],
            &dir.join("dnsmasq.out"),
        );
        let mut servers = vec![
            (dnsmasq, dns_log.clone()),
            (
                chronyd(&dir, "synced", clock_ip.into(), ntp_port, true),
                dir.join("synced.log"),
            ),
            (
                chronyd(&dir, "synced6", Ipv6Addr::LOCALHOST.into(), ntp_port, true),
                dir.join("synced6.log"),
            ),
            (
                chronyd(&dir, "unsynced", unsynced_ip.into(), ntp_port, false),
                dir.join("unsynced.log"),
            ),
        ];
        std::thread::sleep(Duration::from_millis(500));
        let lost = servers.iter_mut().find_map(|(server, log)| {
            let text = std::fs::read_to_string(&*log).unwrap_or_default()
                + &std::fs::read_to_string(dir.join("dnsmasq.out")).unwrap_or_default();
            let exited = matches!(server.0.try_wait(), Ok(Some(_)));
            (exited || text.contains("Could not bind") || text.contains("Address already in use"))
                .then(|| log.display().to_string())
        });
        match lost {
            None => break (ntp_port, dns_port, servers),
            Some(which) if tried.len() < 4 => {
                eprintln!(
                    "a server lost its port (ntp {ntp_port}, dns {dns_port}; see {which}); \
                     trying other ports"
                );
            }
            Some(which) => {
                panic!("the servers could not bind any of the ports {tried:?}; see {which}")
            }
        }
    };

    // dnsmasq: a CNAME followed to its address, a name that does not
    // exist, and a name with an IPv6 address only (asked for A, then
    // AAAA).
    let server = SocketAddr::from((Ipv4Addr::LOCALHOST, dns_port));
    let resolver = Resolver::new(vec![server], Duration::from_secs(5));
    let deadline = Instant::now() + START;
    let via_cname = loop {
        match resolver.resolve("time.liken.test") {
            // Not listening yet.
            Err(ResolveError::Failed(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => break other,
        }
    };
    assert_eq!(
        via_cname.unwrap_or_else(|e| panic!("{e}; see {}", dns_log.display())),
        [IpAddr::V4(clock_ip)]
    );
    match resolver.resolve("absent.liken.test") {
        Err(ResolveError::NoSuchName(s)) => assert_eq!(s, server),
        other => panic!("absent.liken.test: {other:?}"),
    }
    assert_eq!(
        resolver.resolve("v6only.liken.test").unwrap(),
        ["2001:db8::7".parse::<IpAddr>().unwrap()]
    );
    // The same over IPv6: dnsmasq asked on ::1.
    let server6 = SocketAddr::from((Ipv6Addr::LOCALHOST, dns_port));
    let resolver6 = Resolver::new(vec![server6], Duration::from_secs(5));
    assert_eq!(
        resolver6.resolve("time.liken.test").unwrap(),
        [IpAddr::V4(clock_ip)]
    );
    assert_eq!(
        resolver6.resolve("clock6.liken.test").unwrap(),
        [IpAddr::V6(Ipv6Addr::LOCALHOST)]
    );
    match resolver6.resolve("absent.liken.test") {
        Err(ResolveError::NoSuchName(s)) => assert_eq!(s, server6),
        other => panic!("absent.liken.test over IPv6: {other:?}"),
    }
    let log = std::fs::read_to_string(&dns_log).unwrap();
    for name in ["time.liken.test", "absent.liken.test", "v6only.liken.test"] {
        assert!(
            log.contains(&format!("query[A] {name} from 127.0.0.1")),
            "dnsmasq logged no A query for {name}:\n{log}"
        );
    }
    for (name, from) in [
        ("v6only.liken.test", "127.0.0.1"),
        ("clock6.liken.test", "::1"),
    ] {
        assert!(
            log.contains(&format!("query[AAAA] {name} from {from}")),
            "dnsmasq logged no AAAA query for {name} from {from}:\n{log}"
        );
    }

    // chronyd: a synchronised server's answer passes every check and
    // measures the fake 1970 clock as decades behind; an unsynchronised
    // one's is refused for its leap indicator.
    let synced = SocketAddr::from((clock_ip, ntp_port));
    let unsynced = SocketAddr::from((unsynced_ip, ntp_port));
    let synced6 = SocketAddr::from((Ipv6Addr::LOCALHOST, ntp_port));
    wait_for_ntp(synced, &dir.join("synced.log"));
    wait_for_ntp(synced6, &dir.join("synced6.log"));
    wait_for_ntp(unsynced, &dir.join("unsynced.log"));
    let in_1970 = UNIX_EPOCH + Duration::from_secs(86_400);
    let sample = ntp::query(
        synced,
        &FakeClock::starting_at(in_1970),
        Duration::from_secs(3),
    )
    .unwrap_or_else(|e| panic!("chronyd's answer: {e}"));
    assert_eq!(sample.stratum, 8, "chronyd serves at its `local stratum`");
    let behind = SystemTime::now()
        .duration_since(in_1970)
        .unwrap()
        .as_nanos() as i128;
    assert!(
        (sample.offset - behind).abs() < 2_000_000_000,
        "offset {} ns, the clock is {behind} ns behind",
        sample.offset
    );
    match ntp::query(
        unsynced,
        &FakeClock::starting_at(in_1970),
        Duration::from_secs(3),
    ) {
        Err(QueryError::Refused(Refusal::Unsynchronised)) => {}
        other => panic!("the unsynchronised chronyd's answer: {other:?}"),
    }

    // The boot's whole exchange: names through dnsmasq, the first
    // server refused, the clock set from the second to the host's time;
    // then over IPv6, a name with only an AAAA record resolved by asking
    // dnsmasq on ::1, and the time from chronyd on ::1.
    let v4_names = ["unsynced.liken.test", "time.liken.test"];
    // A machine with no CA certificates: ten years past this build.
    let ceiling = ntp::decide_ceiling(ntp::build_date(), None);
    for (names, resolver, from) in [
        (&v4_names[..], &resolver, synced),
        (&["clock6.liken.test"][..], &resolver6, synced6),
    ] {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let clock = FakeClock::starting_at(in_1970);
        let synced_by = ntp::sync(
            &names,
            ntp_port,
            &clock,
            resolver,
            Duration::from_secs(3),
            &ceiling,
        )
        .unwrap_or_else(|e| panic!("no server in {names:?} set the clock: {e:?}"));
        assert_eq!(Some(&synced_by.server), names.last());
        assert_eq!(synced_by.sample.address, from);
        let set = clock.set_to();
        assert_eq!(set.len(), 1, "{set:?}");
        let off = match set[0].duration_since(SystemTime::now()) {
            Ok(ahead) => ahead,
            Err(e) => e.duration(),
        };
        assert!(
            off < Duration::from_secs(2),
            "set {off:?} away from the host's clock by {from}"
        );
    }
}
