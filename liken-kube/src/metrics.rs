//! Prometheus text exposition (format 0.0.4) on a small std::net
//! listener.
//!
//! A [`Registry`] holds metric families; each family has series keyed by
//! label values, sorted by label name so the same labels in any order are
//! one series. Counters, gauges and histograms are atomics the code
//! updates directly. A series may instead be read at scrape time from a
//! closure (`counter_from`, `gauge_from`), which is how watch restarts
//! (from [`crate::WatchStats`]) and the leader gauge are exported without
//! a second copy of the number; two closures on one series are summed, so
//! two watchers of one resource give one series, never a duplicate. A
//! whole family may be read from one closure (`*_fn`), as the process
//! metrics from `/proc/self` are.
//!
//! [`standard`] registers what every liken operator exports: process
//! metrics, the reconcile duration histogram, the reconcile error
//! counter. [`serve`] answers `GET /metrics` and `GET /healthz` (the
//! [`Registry::health_check`]s, for a liveness probe) on one thread, one
//! short connection at a time; scrapes are rare and small.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The default listen address.
pub const DEFAULT_ADDR: &str = "0.0.0.0:9200";

/// A monotonically increasing count.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    /// The value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A histogram with fixed buckets.
#[derive(Clone, Debug)]
pub struct Histogram(Arc<HistogramInner>);

#[derive(Debug)]
struct HistogramInner {
    bounds: Vec<f64>,
    /// Per-bucket (not cumulative) counts; the last is +Inf.
    counts: Vec<AtomicU64>,
    sum: Mutex<f64>,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Histogram {
        let mut bounds = bounds.to_vec();
        bounds.sort_by(|a, b| a.total_cmp(b));
        bounds.dedup();
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram(Arc::new(HistogramInner {
            bounds,
            counts,
            sum: Mutex::new(0.0),
        }))
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let i = self
            .0
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.0.bounds.len());
        self.0.counts[i].fetch_add(1, Ordering::Relaxed);
        *self.0.sum.lock().unwrap_or_else(|p| p.into_inner()) += v;
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.0
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// Prometheus's default buckets, in seconds.
pub const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

type ReadFn = Box<dyn Fn() -> Vec<(Vec<(String, String)>, f64)> + Send + Sync>;

/// A value read at scrape time.
type ReadOne = Arc<dyn Fn() -> f64 + Send + Sync>;

/// A liveness check: `Err` says what is wrong.
type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

enum Source {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    /// Closures read at scrape time and summed.
    Read(Vec<ReadOne>),
}

enum Series {
    Fixed(BTreeMap<String, Source>),
    Read(ReadFn),
}

struct Family {
    name: String,
    help: String,
    kind: &'static str,
    series: Series,
}

/// The metrics one process exports, and its liveness checks.
#[derive(Clone, Default)]
pub struct Registry {
    families: Arc<Mutex<Vec<Family>>>,
    checks: Arc<Mutex<Vec<(String, Check)>>>,
}

/// The series key and its text: labels sorted by name, so the order a
/// caller lists them in never makes a second series.
fn label_text(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut sorted = labels.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<String> = sorted
        .iter()
        .map(|(k, v)| {
            assert!(valid_label(k), "{k:?} is not a Prometheus label name");
            format!("{k}=\"{}\"", escape_label(v))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// HELP text escapes backslash and newline (the text format, 0.0.4).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn valid_label(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Runs `f` on the fixed series of family `name`, registering the
    /// family on first use.
    fn with_series<R>(
        &self,
        name: &str,
        help: &str,
        kind: &'static str,
        f: impl FnOnce(&mut BTreeMap<String, Source>) -> R,
    ) -> R {
        assert!(valid_name(name), "{name:?} is not a Prometheus metric name");
        let mut families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let idx = match families.iter().position(|f| f.name == name) {
            Some(i) => {
                assert_eq!(families[i].kind, kind, "{name} registered as two types");
                i
            }
            None => {
                families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    kind,
                    series: Series::Fixed(BTreeMap::new()),
                });
                families.len() - 1
            }
        };
        let Series::Fixed(map) = &mut families[idx].series else {
            panic!("{name} is read from a function; it has no fixed series");
        };
        f(map)
    }

    fn series(
        &self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[(&str, &str)],
        make: impl FnOnce() -> Source,
    ) -> Source {
        self.with_series(name, help, kind, |map| {
            match map.entry(label_text(labels)).or_insert_with(make) {
                Source::Counter(c) => Source::Counter(c.clone()),
                Source::Gauge(g) => Source::Gauge(g.clone()),
                Source::Histogram(h) => Source::Histogram(h.clone()),
                Source::Read(_) => panic!("{name}{labels:?} is read from a closure"),
            }
        })
    }

    fn add_read(
        &self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[(&str, &str)],
        read: ReadOne,
    ) {
        self.with_series(name, help, kind, |map| {
            match map
                .entry(label_text(labels))
                .or_insert_with(|| Source::Read(Vec::new()))
            {
                Source::Read(reads) => reads.push(read),
                _ => panic!("{name}{labels:?} is updated directly, not read"),
            }
        })
    }

    /// A counter series read at scrape time from `read`. Registering a
    /// second closure on the same name and labels adds the two, so two
    /// sources of one count (two watchers of one resource) stay one
    /// series.
    pub fn counter_from(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        self.add_read(name, help, "counter", labels, Arc::new(read));
    }

    /// A gauge series read at scrape time; closures on one series add.
    pub fn gauge_from(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        self.add_read(name, help, "gauge", labels, Arc::new(read));
    }

    /// A liveness check `GET /healthz` runs: `Err` makes the answer 500
    /// with the message (the elector's, through
    /// [`crate::election::Elector::register`]).
    pub fn health_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_owned(), Arc::new(check)));
    }

    /// Runs every health check: the failures, each as `name: message`.
    pub fn check_health(&self) -> Vec<String> {
        let checks: Vec<(String, Check)> = self
            .checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        checks
            .iter()
            .filter_map(|(name, check)| check().err().map(|e| format!("{name}: {e}")))
            .collect()
    }

    /// A counter (registering it on first use); `labels` pick the series.
    pub fn counter(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Counter {
        match self.series(name, help, "counter", labels, || {
            Source::Counter(Counter::default())
        }) {
            Source::Counter(c) => c,
            _ => unreachable!("kind checked above"),
        }
    }

    /// A gauge.
    pub fn gauge(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Gauge {
        match self.series(name, help, "gauge", labels, || {
            Source::Gauge(Gauge::default())
        }) {
            Source::Gauge(g) => g,
            _ => unreachable!("kind checked above"),
        }
    }

    /// A histogram with `buckets` (upper bounds, seconds or any unit).
    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        buckets: &[f64],
    ) -> Histogram {
        match self.series(name, help, "histogram", labels, || {
            Source::Histogram(Histogram::new(buckets))
        }) {
            Source::Histogram(h) => h,
            _ => unreachable!("kind checked above"),
        }
    }

    fn register_fn(&self, name: &str, help: &str, kind: &'static str, read: ReadFn) {
        assert!(valid_name(name), "{name:?} is not a Prometheus metric name");
        let mut families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            families.iter().all(|f| f.name != name),
            "{name} is registered twice"
        );
        families.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            series: Series::Read(read),
        });
    }

    /// A gauge family read at scrape time: `read` returns each series'
    /// labels and value.
    pub fn gauge_fn(
        &self,
        name: &str,
        help: &str,
        read: impl Fn() -> Vec<(Vec<(String, String)>, f64)> + Send + Sync + 'static,
    ) {
        self.register_fn(name, help, "gauge", Box::new(read));
    }

    /// A counter family read at scrape time.
    pub fn counter_fn(
        &self,
        name: &str,
        help: &str,
        read: impl Fn() -> Vec<(Vec<(String, String)>, f64)> + Send + Sync + 'static,
    ) {
        self.register_fn(name, help, "counter", Box::new(read));
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for f in families.iter() {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            match &f.series {
                Series::Fixed(map) => {
                    for (labels, source) in map {
                        render_source(&mut out, &f.name, labels, source);
                    }
                }
                Series::Read(read) => {
                    for (labels, v) in read() {
                        let pairs: Vec<(&str, &str)> = labels
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.as_str()))
                            .collect();
                        let _ = writeln!(out, "{}{} {}", f.name, label_text(&pairs), number(v));
                    }
                }
            }
        }
        out
    }
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

fn render_source(out: &mut String, name: &str, labels: &str, source: &Source) {
    match source {
        Source::Counter(c) => {
            let _ = writeln!(out, "{name}{labels} {}", c.get());
        }
        Source::Gauge(g) => {
            let _ = writeln!(out, "{name}{labels} {}", number(g.get()));
        }
        Source::Read(reads) => {
            let sum: f64 = reads.iter().map(|r| r()).sum();
            let _ = writeln!(out, "{name}{labels} {}", number(sum));
        }
        Source::Histogram(h) => {
            // `le` joins the series' own labels.
            let inner = labels.trim_start_matches('{').trim_end_matches('}');
            let with = |le: &str| {
                if inner.is_empty() {
                    format!("{{le=\"{le}\"}}")
                } else {
                    format!("{{{inner},le=\"{le}\"}}")
                }
            };
            let mut cumulative = 0;
            for (i, b) in h.0.bounds.iter().enumerate() {
                cumulative += h.0.counts[i].load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}_bucket{} {cumulative}", with(&number(*b)));
            }
            cumulative += h.0.counts[h.0.bounds.len()].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{} {cumulative}", with("+Inf"));
            let sum = *h.0.sum.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(out, "{name}_sum{labels} {}", number(sum));
            let _ = writeln!(out, "{name}_count{labels} {cumulative}");
        }
    }
}

/// The metrics every operator exports.
pub struct Standard {
    /// How long each reconcile pass took.
    pub reconcile_duration: Histogram,
    /// Reconcile passes that ended in an error.
    pub reconcile_errors: Counter,
}

/// Registers process metrics and the reconcile metrics in `registry`.
pub fn standard(registry: &Registry) -> Standard {
    process::register(registry);
    Standard {
        reconcile_duration: registry.histogram(
            "liken_reconcile_duration_seconds",
            "How long one reconcile pass took.",
            &[],
            DEFAULT_BUCKETS,
        ),
        reconcile_errors: registry.counter(
            "liken_reconcile_errors_total",
            "Reconcile passes that ended in an error.",
            &[],
        ),
    }
}

/// Process metrics from /proc/self, in the names client libraries use.
pub mod process {
    use super::Registry;

    /// What /proc/self tells about this process.
    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    pub struct Sample {
        /// User plus system CPU time, seconds.
        pub cpu_seconds: f64,
        /// Resident set size, bytes.
        pub resident_bytes: f64,
        /// Virtual memory size, bytes.
        pub virtual_bytes: f64,
        /// Threads.
        pub threads: f64,
        /// Start time, seconds since the epoch.
        pub start_time_seconds: f64,
        /// Open file descriptors.
        pub open_fds: f64,
    }

    /// Parses `/proc/<pid>/stat` given the clock tick rate, the page size
    /// and the boot time (`btime` of /proc/stat).
    pub fn parse_stat(stat: &str, ticks: f64, page: f64, boot_time: f64) -> Option<Sample> {
        // The command name is in parentheses and may hold spaces; fields
        // are counted from after its closing parenthesis (field 3 on).
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i - 3).and_then(|s| s.parse::<f64>().ok());
        Some(Sample {
            cpu_seconds: (num(14)? + num(15)?) / ticks,
            threads: num(20)?,
            start_time_seconds: boot_time + num(22)? / ticks,
            virtual_bytes: num(23)?,
            resident_bytes: num(24)? * page,
            open_fds: 0.0,
        })
    }

    /// Reads this process's sample now.
    pub fn sample() -> Option<Sample> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let btime = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|s| s.trim().parse::<f64>().ok())?;
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        let mut s = parse_stat(&stat, ticks, page, btime)?;
        s.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as f64)
            .unwrap_or(0.0);
        Some(s)
    }

    /// Registers the process families.
    pub fn register(registry: &Registry) {
        type Pick = fn(&Sample) -> f64;
        let families: [(&str, &str, bool, Pick); 6] = [
            (
                "process_cpu_seconds_total",
                "User and system CPU time, seconds.",
                true,
                |s| s.cpu_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory, bytes.",
                false,
                |s| s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory, bytes.",
                false,
                |s| s.virtual_bytes,
            ),
            ("process_threads", "Threads.", false, |s| s.threads),
            (
                "process_start_time_seconds",
                "Start time, seconds since the epoch.",
                false,
                |s| s.start_time_seconds,
            ),
            ("process_open_fds", "Open file descriptors.", false, |s| {
                s.open_fds
            }),
        ];
        for (name, help, counter, pick) in families {
            let read = move || {
                sample()
                    .map(|s| vec![(vec![], pick(&s))])
                    .unwrap_or_default()
            };
            if counter {
                registry.counter_fn(name, help, read);
            } else {
                registry.gauge_fn(name, help, read);
            }
        }
    }
}

/// A running exposition listener.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (the port, when bound to :0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// How many connections are answered at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 128;
/// The whole time a client has to send its request head: a client that
/// trickles bytes (a slowloris) is cut off then, however often it sends.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Gives a connection's place back when its thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Listens on `addr` (e.g. [`DEFAULT_ADDR`], or `127.0.0.1:0` in tests)
/// and answers `GET /metrics` with `registry`'s exposition. Each
/// connection has a thread of its own, up to [`MAX_CONNECTIONS`], and
/// [`REQUEST_DEADLINE`] for its whole request, so slow clients cannot
/// keep the kubelet's liveness probe from an answer.
pub fn serve(addr: &str, registry: Registry) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    // A wake-up connection goes to loopback even when bound to 0.0.0.0.
    let wake = if local.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], local.port()))
    } else {
        local
    };
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = stop.clone();
    let thread = std::thread::Builder::new()
        .name("liken-kube-metrics".into())
        .spawn(move || {
            let in_flight = Arc::new(AtomicUsize::new(0));
            for conn in listener.incoming() {
                if thread_stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = conn else {
                    continue;
                };
                if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let slot = Slot(in_flight.clone());
                let registry = registry.clone();
                // A failed spawn drops the closure, its slot and the stream.
                let _ = std::thread::Builder::new()
                    .name("liken-kube-metrics-conn".into())
                    .spawn(move || {
                        let _slot = slot;
                        let _ = answer(stream, &registry);
                    });
            }
        })?;
    Ok(MetricsServer {
        addr: wake,
        stop,
        thread: Some(thread),
    })
}

/// Decides the response to a request head: status line, content type,
/// body.
pub fn decide_response(head: &str, registry: &Registry) -> (&'static str, &'static str, String) {
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            registry.render(),
        ),
        ("GET", "/healthz") => {
            let failures = registry.check_health();
            if failures.is_empty() {
                ("200 OK", "text/plain", "ok\n".into())
            } else {
                (
                    "500 Internal Server Error",
                    "text/plain",
                    failures.join("\n") + "\n",
                )
            }
        }
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics, liveness at /healthz\n".into(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".into()),
    }
}

fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    // Read the head, at most 8 KiB, within the deadline as a whole.
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    if head.is_empty() {
        return Ok(());
    }
    let (status, ctype, body) = decide_response(&String::from_utf8_lossy(&head), registry);
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64 clients trickling a byte a second hold neither the liveness
    /// answer (it comes within a second) nor their connections past the
    /// deadline.
    #[test]
    fn slow_clients_do_not_starve_healthz() {
        let server = serve("127.0.0.1:0", Registry::new()).unwrap();
        let addr = server.local_addr();
        let mut slow: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let trickle = std::thread::spawn(move || {
            for _ in 0..4 {
                for s in &mut slow {
                    let _ = s.write_all(b"G");
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            slow
        });
        std::thread::sleep(Duration::from_millis(1500));
        let asked = Instant::now();
        let mut probe = TcpStream::connect(addr).unwrap();
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        probe.read_to_string(&mut answer).unwrap();
        let took = asked.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
        // Past the deadline, the server has closed every slow connection.
        let mut slow = trickle.join().unwrap();
        for s in &mut slow {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut rest = Vec::new();
            match s.read_to_end(&mut rest) {
                Ok(_) => assert!(rest.is_empty(), "a slow client got {rest:?}"),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                Err(e) => panic!("a slow client's connection is still open: {e}"),
            }
        }
    }

    #[test]
    fn text_exposition() {
        let r = Registry::new();
        let c = r.counter("liken_things_total", "Things.", &[("kind", "a\"b")]);
        c.add(3);
        r.gauge("liken_fleet_ready", "Ready machines.", &[])
            .set(4.5);
        let h = r.histogram("liken_pass_seconds", "Pass.", &[], &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        r.gauge_fn("liken_read", "Read.", || {
            vec![(vec![("x".into(), "y".into())], 2.0)]
        });
        assert_eq!(
            r.render(),
            "# HELP liken_things_total Things.\n\
             # TYPE liken_things_total counter\n\
             liken_things_total{kind=\"a\\\"b\"} 3\n\
             # HELP liken_fleet_ready Ready machines.\n\
             # TYPE liken_fleet_ready gauge\n\
             liken_fleet_ready 4.5\n\
             # HELP liken_pass_seconds Pass.\n\
             # TYPE liken_pass_seconds histogram\n\
             liken_pass_seconds_bucket{le=\"0.1\"} 1\n\
             liken_pass_seconds_bucket{le=\"1\"} 2\n\
             liken_pass_seconds_bucket{le=\"+Inf\"} 3\n\
             liken_pass_seconds_sum 7.55\n\
             liken_pass_seconds_count 3\n\
             # HELP liken_read Read.\n\
             # TYPE liken_read gauge\n\
             liken_read{x=\"y\"} 2\n"
        );
        // The same name and labels give the same series.
        r.counter("liken_things_total", "Things.", &[("kind", "a\"b")])
            .inc();
        assert_eq!(c.get(), 4);
    }

    #[test]
    fn proc_stat_parses() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 104857600 2560 18446744073709551615";
        let s = process::parse_stat(stat, 100.0, 4096.0, 1_700_000_000.0).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 7.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(s.virtual_bytes, 104_857_600.0);
        assert_eq!(s.resident_bytes, 2560.0 * 4096.0);
        let live = process::sample().unwrap();
        assert!(live.resident_bytes > 0.0 && live.threads >= 1.0 && live.open_fds > 0.0);
    }

    #[test]
    fn serves_metrics_over_tcp() {
        let r = Registry::new();
        let std = standard(&r);
        std.reconcile_errors.inc();
        std.reconcile_duration.observe(0.2);
        let stats = Arc::new(crate::watch::WatchStats::default());
        stats.restarts.fetch_add(2, Ordering::Relaxed);
        stats.register(&r, "machines");
        Arc::new(crate::watch::WatchStats::default()).register(&r, "clusters");
        r.gauge("liken_fleet_machines", "Machines.", &[]).set(3.0);
        let server = serve("127.0.0.1:0", r).unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(server.local_addr()).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let out = get("/metrics");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("text/plain; version=0.0.4"));
        assert!(out.contains("\nliken_reconcile_errors_total 1\n"), "{out}");
        assert!(out.contains("\nliken_reconcile_duration_seconds_count 1\n"));
        assert!(out.contains("\nprocess_resident_memory_bytes "));
        assert!(out.contains("\nprocess_cpu_seconds_total "));
        assert!(
            out.contains("\nliken_watch_restarts_total{resource=\"machines\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("\nliken_watch_restarts_total{resource=\"clusters\"} 0\n"));
        assert!(out.contains("\nliken_fleet_machines 3\n"));
        assert!(get("/other").starts_with("HTTP/1.1 404"));
        server.stop();
    }

    #[test]
    fn series_are_one_whatever_the_label_order() {
        let r = Registry::new();
        r.counter("liken_x_total", "X.", &[("b", "2"), ("a", "1")])
            .inc();
        r.counter("liken_x_total", "X.", &[("a", "1"), ("b", "2")])
            .inc();
        assert_eq!(
            r.render(),
            "# HELP liken_x_total X.\n# TYPE liken_x_total counter\nliken_x_total{a=\"1\",b=\"2\"} 2\n"
        );
    }

    #[test]
    fn help_escapes_backslash_and_newline() {
        let r = Registry::new();
        r.gauge("liken_y", "a \\ b\nc", &[]).set(1.0);
        assert!(
            r.render().starts_with("# HELP liken_y a \\\\ b\\nc\n"),
            "{}",
            r.render()
        );
    }

    #[test]
    fn read_series_add_up_instead_of_repeating() {
        let r = Registry::new();
        let a = Arc::new(crate::watch::WatchStats::default());
        let b = Arc::new(crate::watch::WatchStats::default());
        a.lists.fetch_add(1, Ordering::Relaxed);
        b.lists.fetch_add(2, Ordering::Relaxed);
        a.register(&r, "machines");
        b.register(&r, "machines");
        let out = r.render();
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("liken_watch_lists_total"))
            .collect();
        assert_eq!(lines, ["liken_watch_lists_total{resource=\"machines\"} 3"]);
    }

    #[test]
    fn healthz_runs_the_checks() {
        let r = Registry::new();
        let (status, _, body) = decide_response("GET /healthz HTTP/1.1\r\n", &r);
        assert_eq!((status, body.as_str()), ("200 OK", "ok\n"));
        let bad = Arc::new(AtomicBool::new(false));
        let flag = bad.clone();
        r.health_check("elector", move || {
            if flag.load(Ordering::SeqCst) {
                Err("stuck".into())
            } else {
                Ok(())
            }
        });
        assert_eq!(decide_response("GET /healthz HTTP/1.1\r\n", &r).0, "200 OK");
        bad.store(true, Ordering::SeqCst);
        let (status, _, body) = decide_response("GET /healthz HTTP/1.1\r\n", &r);
        assert_eq!(
            (status, body.as_str()),
            ("500 Internal Server Error", "elector: stuck\n")
        );
    }
}
