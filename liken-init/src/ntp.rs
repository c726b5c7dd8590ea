//! Setting the clock at boot from the Machine's NTP servers
//! (`spec.network.ntp`): an SNTP client, the client mode of RFC 4330 and
//! RFC 5905, over std's UDP.
//!
//! Why at boot and only once: many small machines have no working
//! battery-backed clock and start in 1970, and then nothing TLS works
//! (the cluster's CAs are not valid yet) until the clock is right. A
//! single exchange with one server is enough to get within a round trip
//! of the truth; keeping the clock disciplined afterwards is a job for
//! a daemon, which liken does not run yet.
//!
//! The servers are tried in the order the Machine lists them and the
//! first good answer wins. Each name is resolved by [`crate::dns`]
//! from the nameservers in the resolv.conf the network step wrote,
//! within [`Timeouts::resolve`], and each address gets
//! [`Timeouts::reply`] to answer. An
//! answer is used only when it passes the checks RFC 4330 section 5
//! asks of a client: it is a server reply (mode 4) of version 3 or 4,
//! it echoes the transmit timestamp we sent in its originate field (so
//! a stray or forged packet cannot set the clock), its leap indicator is
//! not "alarm" (an unsynchronised server), its stratum is 1 to 15
//! (stratum 0 with a kiss code in the reference id is a kiss-o'-death,
//! whose code the console shows; without one, as chronyd answers before
//! its first sync, the server is unsynchronised), and its transmit time
//! is not zero. A time before [`PLAUSIBLE_AFTER`] is
//! refused too, as no working server is that far behind. An answer
//! that would move the clock more than [`MAX_AHEAD_OF_OTHERS`] forward
//! is checked against the other configured servers, and refused when
//! one of them says a day or more earlier ([`decide_among`]). And no
//! answer moves the clock forward past a [`Ceiling`]: the notAfter of
//! the last of the machine's CA certificates to expire, or without them
//! ten years past this release's build date ([`decide_ceiling`]), so one
//! bad or spoofed server, even the only one configured, cannot expire
//! every certificate the cluster has.
//!
//! [`decide_reply`], [`offset_nanos`], [`decide_time`],
//! [`decide_ceiling`] and [`decide_among`] are pure; [`query`] and
//! [`sync`] carry them out over a real socket, and the clock is read and
//! set through [`Clock`], so the tests run a real UDP responder on
//! loopback against a [`crate::sys::clock::FakeClock`].

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use liken_api::{Machine, Time};

use crate::console::Outcome;
use crate::dns::Resolver;
use crate::sys::clock::Clock;

/// The NTP port.
pub const PORT: u16 = 123;

/// The earliest time a server may report: 2026-01-01T00:00:00Z. A
/// server behind that is broken, and setting the clock from it would
/// make every certificate liken mints look like it comes from the
/// future.
pub const PLAUSIBLE_AFTER: i64 = 1_767_225_600;

/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch.
const NTP_TO_UNIX: i128 = 2_208_988_800;
const NANOS_PER_SECOND: i128 = 1_000_000_000;
/// An NTP packet without extensions or authenticator.
const PACKET_LEN: usize = 48;
/// How many addresses of one name are tried.
const ADDRESSES_PER_SERVER: usize = 3;

/// How long each part of an exchange may take.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Resolving one server's name.
    pub resolve: Duration,
    /// Waiting for one address's answer.
    pub reply: Duration,
}

impl Default for Timeouts {
    /// Short enough that a boot with unreachable servers loses a few
    /// seconds per server, long enough for a slow link's round trip.
    fn default() -> Timeouts {
        Timeouts {
            resolve: Duration::from_secs(3),
            reply: Duration::from_secs(2),
        }
    }
}

/// An NTP timestamp: seconds since 1900 (modulo 2^32) and a binary
/// fraction of a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NtpTime {
    /// Whole seconds, era-relative.
    pub seconds: u32,
    /// Fraction of a second in units of 2^-32 s.
    pub fraction: u32,
}

impl NtpTime {
    /// The all-zero timestamp, which means "not set".
    pub const ZERO: NtpTime = NtpTime {
        seconds: 0,
        fraction: 0,
    };

    /// The timestamp for nanoseconds since the Unix epoch, `None`
    /// before 1970.
    pub fn from_unix_nanos(nanos: i128) -> Option<NtpTime> {
        if nanos < 0 {
            return None;
        }
        let secs = nanos.checked_div(NANOS_PER_SECOND)?;
        let sub = nanos.checked_rem(NANOS_PER_SECOND)?;
        let ntp_secs = secs.checked_add(NTP_TO_UNIX)?;
        // Era 1 (from 2036) wraps the 32-bit seconds, as the wire does.
        let seconds = (ntp_secs & 0xFFFF_FFFF) as u32;
        let fraction = sub.checked_mul(1 << 32)?.checked_div(NANOS_PER_SECOND)?;
        Some(NtpTime {
            seconds,
            fraction: u32::try_from(fraction).ok()?,
        })
    }

    /// The timestamp for a clock reading, `None` before 1970.
    pub fn from_system(t: SystemTime) -> Option<NtpTime> {
        NtpTime::from_unix_nanos(unix_nanos(t)?)
    }

    /// Nanoseconds since the Unix epoch. The era is taken from the top
    /// bit, as RFC 4330 section 3 suggests: set means 1968 to 2036,
    /// clear means 2036 to 2104, so this works across the 2036 wrap
    /// without knowing the local clock, which at boot may read 1970.
    pub fn unix_nanos(self) -> i128 {
        let mut secs = i128::from(self.seconds);
        if self.seconds & 0x8000_0000 == 0 {
            secs = secs.saturating_add(1 << 32);
        }
        let whole = secs
            .saturating_sub(NTP_TO_UNIX)
            .saturating_mul(NANOS_PER_SECOND);
        let part = i128::from(self.fraction)
            .saturating_mul(NANOS_PER_SECOND)
            .checked_shr(32)
            .unwrap_or(0);
        whole.saturating_add(part)
    }

    fn to_bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        let (s, f) = out.split_at_mut(4);
        s.copy_from_slice(&self.seconds.to_be_bytes());
        f.copy_from_slice(&self.fraction.to_be_bytes());
        out
    }

    fn read(packet: &[u8], at: usize) -> Option<NtpTime> {
        Some(NtpTime {
            seconds: be_u32(packet, at)?,
            fraction: be_u32(packet, at.checked_add(4)?)?,
        })
    }
}

fn be_u32(packet: &[u8], at: usize) -> Option<u32> {
    let bytes = packet.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

/// Nanoseconds since the Unix epoch for a clock reading, `None` before
/// 1970.
pub fn unix_nanos(t: SystemTime) -> Option<i128> {
    let d = t.duration_since(UNIX_EPOCH).ok()?;
    Some(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

fn system_time(nanos: i128) -> Option<SystemTime> {
    let n = u64::try_from(nanos).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_nanos(n))
}

/// The client's request: version 4, mode 3, our transmit timestamp and
/// nothing else (RFC 4330 section 5).
pub fn request(transmit: NtpTime) -> [u8; PACKET_LEN] {
    let mut p = [0u8; PACKET_LEN];
    if let Some(first) = p.first_mut() {
        // LI 0, VN 4, mode 3 (client).
        *first = 0b00_100_011;
    }
    if let Some(t) = p.get_mut(40..48) {
        t.copy_from_slice(&transmit.to_bytes());
    }
    p
}

/// The parts of a server's answer the clock is set from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The server's distance from a reference clock.
    pub stratum: u8,
    /// When the server received our request (T2).
    pub receive: NtpTime,
    /// When the server sent its answer (T3).
    pub transmit: NtpTime,
}

/// Why an answer was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Shorter than an NTP packet.
    Short(usize),
    /// Its originate timestamp is not the transmit timestamp we sent: a
    /// late answer to an earlier request, or not an answer to us at all.
    NotOurs,
    /// Not a server reply.
    Mode(u8),
    /// A version this client does not speak.
    Version(u8),
    /// Leap indicator 3: the server's own clock is not synchronised.
    Unsynchronised,
    /// Stratum 0: a kiss-o'-death, with its four-letter code.
    Kiss(String),
    /// Stratum 16 or more, or 0 without a kiss code: the server has no
    /// usable source.
    Stratum(u8),
    /// The transmit timestamp is zero.
    NoTransmitTime,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Short(n) => write!(f, "a {n}-byte packet is not an NTP answer"),
            Refusal::NotOurs => write!(f, "the answer does not echo our request's timestamp"),
            Refusal::Mode(m) => write!(f, "mode {m} is not a server's answer (mode 4)"),
            Refusal::Version(v) => write!(f, "NTP version {v} is not 3 or 4"),
            Refusal::Unsynchronised => write!(
                f,
                "the server says its own clock is not synchronised (leap indicator 3)"
            ),
            Refusal::Kiss(code) => write!(
                f,
                "the server refused to serve us (kiss-o'-death {code:?}); use another server"
            ),
            Refusal::Stratum(s) => write!(f, "stratum {s}: the server has no usable time source"),
            Refusal::NoTransmitTime => write!(f, "the answer carries no transmit time"),
        }
    }
}

/// Checks a packet against the request whose transmit timestamp was
/// `sent`.
pub fn decide_reply(packet: &[u8], sent: NtpTime) -> Result<Reply, Refusal> {
    let Some(header) = packet.get(..PACKET_LEN) else {
        return Err(Refusal::Short(packet.len()));
    };
    let first = header.first().copied().unwrap_or(0);
    let leap = first >> 6;
    let version = (first >> 3) & 0b111;
    let mode = first & 0b111;
    let stratum = header.get(1).copied().unwrap_or(0);
    let originate = NtpTime::read(header, 24).unwrap_or(NtpTime::ZERO);
    let receive = NtpTime::read(header, 32).unwrap_or(NtpTime::ZERO);
    let transmit = NtpTime::read(header, 40).unwrap_or(NtpTime::ZERO);
    if originate != sent {
        return Err(Refusal::NotOurs);
    }
    if mode != 4 {
        return Err(Refusal::Mode(mode));
    }
    if !(3..=4).contains(&version) {
        return Err(Refusal::Version(version));
    }
    if stratum == 0
        && let Some(code) = kiss_code(header)
    {
        return Err(Refusal::Kiss(code));
    }
    // A server with no source at all (chronyd before its first sync)
    // answers stratum 0 with leap indicator 3 and no kiss code: it is
    // unsynchronised, not refusing us.
    if leap == 3 {
        return Err(Refusal::Unsynchronised);
    }
    if stratum == 0 || stratum > 15 {
        return Err(Refusal::Stratum(stratum));
    }
    if transmit == NtpTime::ZERO {
        return Err(Refusal::NoTransmitTime);
    }
    Ok(Reply {
        stratum,
        receive,
        transmit,
    })
}

/// A stratum-0 answer's kiss code (RFC 5905 section 7.4): the
/// reference id as up to four ASCII capitals or digits, zero filled.
fn kiss_code(header: &[u8]) -> Option<String> {
    let id = header.get(12..16)?;
    let len = id.iter().position(|&b| b == 0).unwrap_or(id.len());
    let (code, fill) = id.split_at(len);
    let valid = !code.is_empty()
        && code
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        && fill.iter().all(|&b| b == 0);
    valid.then(|| code.iter().map(|&b| char::from(b)).collect())
}

/// The clock's offset from the server, RFC 5905's
/// `((T2 - T1) + (T3 - T4)) / 2`, all in nanoseconds since 1970: T1 we
/// sent, T2 the server received, T3 the server sent, T4 we received.
/// Positive means our clock is behind.
pub fn offset_nanos(t1: i128, t2: i128, t3: i128, t4: i128) -> i128 {
    t2.saturating_sub(t1)
        .saturating_add(t3.saturating_sub(t4))
        .checked_div(2)
        .unwrap_or(0)
}

/// One server's good answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The address that answered.
    pub address: SocketAddr,
    /// Its stratum.
    pub stratum: u8,
    /// How far our clock is behind it, in nanoseconds.
    pub offset: i128,
}

/// Why one address gave no usable answer.
#[derive(Debug)]
pub enum QueryError {
    /// The socket could not be made or used (no route, refused port).
    Socket(io::Error),
    /// Nothing usable arrived in time; the count is of packets ignored
    /// because they did not answer our request.
    NoAnswer {
        /// How long we waited.
        waited: Duration,
        /// Packets that were not an answer to our request.
        ignored: usize,
    },
    /// An answer came and failed a check.
    Refused(Refusal),
    /// Our own clock reads before 1970, so no request can carry it.
    ClockBeforeEpoch,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Socket(e) => write!(f, "{e}"),
            QueryError::NoAnswer { waited, ignored } => {
                write!(f, "no answer within {:.1} s", waited.as_secs_f64())?;
                if *ignored > 0 {
                    write!(f, " ({ignored} packets that were not answers ignored)")?;
                }
                Ok(())
            }
            QueryError::Refused(r) => write!(f, "{r}"),
            QueryError::ClockBeforeEpoch => write!(f, "the local clock reads before 1970"),
        }
    }
}

/// Asks one address for the time: one request, and up to `wait` for
/// its answer.
pub fn query(address: SocketAddr, clock: &dyn Clock, wait: Duration) -> Result<Sample, QueryError> {
    let socket = crate::udp::connected(address).map_err(QueryError::Socket)?;
    let t1 = clock.now();
    let t1_nanos = unix_nanos(t1).ok_or(QueryError::ClockBeforeEpoch)?;
    let sent = NtpTime::from_unix_nanos(t1_nanos).ok_or(QueryError::ClockBeforeEpoch)?;
    socket.send(&request(sent)).map_err(QueryError::Socket)?;
    let started = Instant::now();
    let mut ignored: usize = 0;
    let mut buf = [0u8; 512];
    loop {
        let Some(n) = crate::udp::recv_before(&socket, &mut buf, started, wait)
            .map_err(QueryError::Socket)?
        else {
            return Err(QueryError::NoAnswer {
                waited: wait,
                ignored,
            });
        };
        let t4 = clock.now();
        let packet = buf.get(..n).unwrap_or(&[]);
        match decide_reply(packet, sent) {
            Ok(reply) => {
                let t4_nanos = unix_nanos(t4).ok_or(QueryError::ClockBeforeEpoch)?;
                return Ok(Sample {
                    address,
                    stratum: reply.stratum,
                    offset: offset_nanos(
                        t1_nanos,
                        reply.receive.unix_nanos(),
                        reply.transmit.unix_nanos(),
                        t4_nanos,
                    ),
                });
            }
            // Not an answer to this request: keep waiting for the real one.
            Err(Refusal::NotOurs | Refusal::Short(_)) => ignored = ignored.saturating_add(1),
            Err(r) => return Err(QueryError::Refused(r)),
        }
    }
}

/// How long after its build date a release is taken to be running, when
/// no CA certificate dates the ceiling: ten years, the lifetime of the
/// CAs `liken mint` makes and k3s makes. Long enough that a release kept
/// on a shelf is still set right; it stops the answers decades off (a
/// spoofed 2090, a 2036 wrap read wrong).
pub const RELEASE_SPAN: i64 = 3650 * 86_400;

/// The latest time an NTP answer may move the clock forward to, and what
/// sets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ceiling {
    /// The time.
    pub at: Time,
    /// Why it is there.
    pub reason: CeilingReason,
}

/// What a [`Ceiling`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CeilingReason {
    /// The notAfter of this CA certificate, the last of the machine's
    /// to expire.
    NotAfter(String),
    /// [`RELEASE_SPAN`] after this release's build date.
    Release(Time),
}

impl fmt::Display for Ceiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            CeilingReason::NotAfter(file) => write!(
                f,
                "{}, when {file} expires, the last of this machine's CA certificates",
                self.at
            ),
            CeilingReason::Release(built) => write!(
                f,
                "{}, ten years after this release's build date {built}",
                self.at
            ),
        }
    }
}

/// This release's build date: the date in the version the image build
/// gave it, not before [`PLAUSIBLE_AFTER`] (a plain `cargo build` has no
/// version, and was made after that).
pub fn build_date() -> Time {
    let floor = Time::from_unix(PLAUSIBLE_AFTER);
    crate::boot_record::build_version()
        .and_then(|v| {
            let (y, m, d) = v.date();
            format!("{y:04}-{m:02}-{d:02}T00:00:00Z")
                .parse::<Time>()
                .ok()
        })
        .map_or(floor, |t| t.max(floor))
}

/// The ceiling for a release built on `built` on a machine whose CA
/// certificates last expire at `not_after` (the time and the file).
/// While they are valid, the clock is not moved past their notAfter: a
/// bad or spoofed server would expire every certificate at once, and
/// k3s would renew its leaf certificates from that wrong time. Without
/// certificates, or when they expired before this release was built (so
/// the true time is past them and nothing is left to protect), the
/// ceiling is [`RELEASE_SPAN`] after the build date.
pub fn decide_ceiling(built: Time, not_after: Option<(Time, String)>) -> Ceiling {
    match not_after {
        Some((at, file)) if at > built => Ceiling {
            at,
            reason: CeilingReason::NotAfter(file),
        },
        _ => Ceiling {
            at: built.plus_seconds(RELEASE_SPAN),
            reason: CeilingReason::Release(built),
        },
    }
}

/// The ceiling from the CA certificates at `certificates` (those that
/// exist) and this release's build date. A certificate init cannot read
/// is named on the console and left out.
pub fn ceiling_from(certificates: &[&Path]) -> Ceiling {
    let mut newest: Option<(Time, String)> = None;
    for &path in certificates {
        match crate::ca_time::latest_not_after(&[path]) {
            Ok(Some(found)) if newest.as_ref().is_none_or(|(t, _)| found.0 > *t) => {
                newest = Some(found);
            }
            Ok(_) => {}
            Err(why) => {
                crate::console::line(&format!("ntp: {why}; the clock's ceiling leaves it out"))
            }
        }
    }
    decide_ceiling(build_date(), newest)
}

/// Why an answer's time is not set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeRefusal {
    /// Before [`PLAUSIBLE_AFTER`].
    Implausible(Time),
    /// Forward past the [`Ceiling`].
    PastCeiling {
        /// The time the answer would set.
        said: Time,
        /// The ceiling it passes.
        ceiling: Ceiling,
    },
    /// Not a time the clock can hold.
    OutOfRange,
}

impl fmt::Display for TimeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeRefusal::Implausible(t) => {
                write!(f, "it says the time is {t}, which no working server says")
            }
            TimeRefusal::PastCeiling { said, ceiling } => {
                write!(f, "refused {said}, later than {ceiling}")
            }
            TimeRefusal::OutOfRange => write!(f, "its time is out of range"),
        }
    }
}

/// The time to set: now moved by the offset, refused when it lands
/// before [`PLAUSIBLE_AFTER`], or forward past `ceiling` (an answer that
/// moves a clock already past the ceiling back towards it is taken).
pub fn decide_time(
    now: SystemTime,
    offset: i128,
    ceiling: &Ceiling,
) -> Result<SystemTime, TimeRefusal> {
    let now_nanos = unix_nanos(now).unwrap_or(0);
    let target = now_nanos.saturating_add(offset);
    let seconds = |nanos: i128| {
        Time::from_unix(
            i64::try_from(nanos.checked_div(NANOS_PER_SECOND).unwrap_or(0)).unwrap_or(0),
        )
    };
    let floor = i128::from(PLAUSIBLE_AFTER).saturating_mul(NANOS_PER_SECOND);
    if target < floor {
        return Err(TimeRefusal::Implausible(seconds(target)));
    }
    let top = i128::from(ceiling.at.unix()).saturating_mul(NANOS_PER_SECOND);
    if target > top && offset > 0 {
        return Err(TimeRefusal::PastCeiling {
            said: seconds(target),
            ceiling: ceiling.clone(),
        });
    }
    system_time(target).ok_or(TimeRefusal::OutOfRange)
}

/// The addresses of one server entry on `port`: an IP literal as it
/// is, a name through init's own DNS resolver (its IPv4 addresses, then
/// its IPv6 ones), which keeps to its deadline.
pub fn resolve(server: &str, port: u16, resolver: &Resolver) -> Result<Vec<SocketAddr>, String> {
    let ips = resolver
        .resolve(server)
        .map_err(|e| format!("cannot resolve the name: {e}"))?;
    Ok(ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, port))
        .collect())
}

/// How the clock was set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synced {
    /// The server entry that answered.
    pub server: String,
    /// Its answer.
    pub sample: Sample,
    /// The time the clock was set to.
    pub set_to: SystemTime,
}

/// How far ahead of another configured server's answer an answer may
/// be and still set the clock. One bad or spoofed server moving the
/// clock years ahead would expire every certificate the cluster has;
/// a day is far beyond any honest disagreement between servers and
/// short of every certificate lifetime liken mints.
pub const MAX_AHEAD_OF_OTHERS: Duration = Duration::from_secs(24 * 60 * 60);

/// One server's good answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The server entry.
    pub server: String,
    /// Its answer.
    pub sample: Sample,
}

/// Which of `candidates` (good answers, in the Machine's order; their
/// offsets from the same clock) sets the clock: the first that is not
/// more than [`MAX_AHEAD_OF_OTHERS`] ahead of another's, with a line
/// for each one refused. The earliest answer is never refused, so
/// there is always a choice when there is a candidate.
pub fn decide_among(candidates: &[Candidate]) -> (Option<usize>, Vec<String>) {
    let bound = i128::try_from(MAX_AHEAD_OF_OTHERS.as_nanos()).unwrap_or(i128::MAX);
    let mut refused = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let behind = candidates
            .iter()
            .filter(|o| o.sample.offset.saturating_add(bound) < c.sample.offset)
            .min_by_key(|o| o.sample.offset);
        match behind {
            None => return (Some(i), refused),
            Some(o) => refused.push(format!(
                "{}: refused, a day or more ahead of {}",
                c.server, o.server
            )),
        }
    }
    (None, refused)
}

/// The first good answer of `server`'s addresses; what went wrong with
/// each address that gave none goes to `failures`.
fn first_good(
    server: &str,
    port: u16,
    clock: &dyn Clock,
    resolver: &Resolver,
    reply: Duration,
    ceiling: &Ceiling,
    failures: &mut Vec<String>,
) -> Option<Sample> {
    let addresses = match resolve(server, port, resolver) {
        Ok(a) => a,
        Err(e) => {
            failures.push(format!("{server}: {e}"));
            return None;
        }
    };
    for address in addresses.into_iter().take(ADDRESSES_PER_SERVER) {
        let sample = match query(address, clock, reply) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{server} ({address}): {e}"));
                continue;
            }
        };
        match decide_time(clock.now(), sample.offset, ceiling) {
            Ok(_) => return Some(sample),
            Err(e) => {
                let line = format!("{server} ({address}): {e}");
                // Said at once: a later server may still set the clock,
                // and this one's answer is what a person must look at.
                if matches!(e, TimeRefusal::PastCeiling { .. }) {
                    crate::console::line(&format!("ntp: {line}"));
                }
                failures.push(line);
            }
        }
    }
    None
}

/// Tries `servers` in order on `port`, names resolved by `resolver`, and
/// sets the clock from the first good answer. An answer that moves the
/// clock more than [`MAX_AHEAD_OF_OTHERS`] forward is first checked
/// against the other servers' answers ([`decide_among`]), so one bad
/// server cannot move it years ahead (a Machine with one server has
/// nothing to check against). No answer moves the clock forward past
/// `ceiling` ([`decide_time`]): one that would is named on the console
/// and the next server asked. `Err` lists what each server did wrong.
pub fn sync(
    servers: &[String],
    port: u16,
    clock: &dyn Clock,
    resolver: &Resolver,
    reply: Duration,
    ceiling: &Ceiling,
) -> Result<Synced, Vec<String>> {
    let mut failures = Vec::new();
    let mut candidates = Vec::new();
    let far = i128::try_from(MAX_AHEAD_OF_OTHERS.as_nanos()).unwrap_or(i128::MAX);
    for server in servers {
        let Some(sample) = first_good(server, port, clock, resolver, reply, ceiling, &mut failures)
        else {
            continue;
        };
        let jump = sample.offset;
        candidates.push(Candidate {
            server: server.clone(),
            sample,
        });
        if candidates.len() == 1 && jump <= far {
            break;
        }
    }
    let (chosen, refused) = decide_among(&candidates);
    for r in &refused {
        crate::console::line(&format!("ntp: {r}"));
    }
    failures.extend(refused);
    let Some(c) = chosen.and_then(|i| candidates.get(i)) else {
        return Err(failures);
    };
    let set_to = match decide_time(clock.now(), c.sample.offset, ceiling) {
        Ok(t) => t,
        Err(e) => {
            failures.push(format!("{}: {e}", c.server));
            return Err(failures);
        }
    };
    if let Err(e) = clock.set(set_to) {
        failures.push(format!("setting the clock failed: {e}"));
        return Err(failures);
    }
    Ok(Synced {
        server: c.server.clone(),
        sample: c.sample,
        set_to,
    })
}

/// The milestone text for a good sync.
pub fn describe(synced: &Synced) -> String {
    let offset = synced.sample.offset as f64 / 1e9;
    let server = if synced.server == synced.sample.address.ip().to_string() {
        synced.server.clone()
    } else {
        format!("{} ({})", synced.server, synced.sample.address.ip())
    };
    format!(
        "clock set to {} from {server}, stratum {}, offset {offset:+.3} s",
        Time::from_system(synced.set_to),
        synced.sample.stratum
    )
}

/// The boot step: sets the clock from the Machine's servers, names
/// resolved through the nameservers in `resolv_conf`, never forward past
/// the ceiling the CA certificates at `certificates` give
/// ([`ceiling_from`]).
pub fn step(
    machine: Option<&Machine>,
    clock: &dyn Clock,
    resolv_conf: &Path,
    certificates: &[&Path],
) -> Outcome {
    let Some(machine) = machine else {
        return Outcome::Skipped("no valid Machine document".into());
    };
    let servers = machine
        .spec
        .network
        .as_ref()
        .map_or(&[][..], |n| n.ntp.as_slice());
    if servers.is_empty() {
        return Outcome::Skipped(format!(
            "no NTP servers in spec.network.ntp; the clock stays at {}",
            Time::from_system(clock.now())
        ));
    }
    let timeouts = Timeouts::default();
    let resolver = Resolver::from_resolv_conf(resolv_conf, timeouts.resolve);
    let ceiling = ceiling_from(certificates);
    match sync(servers, PORT, clock, &resolver, timeouts.reply, &ceiling) {
        Ok(synced) => Outcome::ok_with(describe(&synced)),
        Err(failures) => Outcome::Failed(format!(
            "no NTP server gave a usable answer ({}); the clock stays at {}: check \
             spec.network.ntp and that the servers are reachable (UDP port 123)",
            failures.join("; "),
            Time::from_system(clock.now())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::clock::FakeClock;
    use std::net::UdpSocket;

    /// What the test responder does with a request.
    #[derive(Clone, Copy)]
    enum Answer {
        /// A good answer `ahead` seconds after the real clock.
        Good { ahead: i128 },
        /// A good answer, preceded by one that echoes another timestamp.
        StrayThenGood { ahead: i128 },
        /// A kiss-o'-death.
        Kiss,
        /// Leap indicator 3.
        Alarm,
        /// Nothing at all.
        Silent,
    }

    fn reply_for(request: &[u8], server_nanos: i128, first: u8, stratum: u8) -> Vec<u8> {
        let mut p = vec![0u8; PACKET_LEN];
        p[0] = first;
        p[1] = stratum;
        p[12..16].copy_from_slice(b"RATE");
        // Originate := the request's transmit.
        p[24..32].copy_from_slice(&request[40..48]);
        let t = NtpTime::from_unix_nanos(server_nanos).unwrap().to_bytes();
        p[32..40].copy_from_slice(&t);
        p[40..48].copy_from_slice(&t);
        p
    }

    /// A real SNTP server on 127.0.0.1 that answers each request as told.
    fn responder(answer: Answer) -> SocketAddr {
        responder_on("127.0.0.1:0", answer)
    }

    /// A real SNTP server on `bind` that answers each request as told.
    fn responder_on(bind: &str, answer: Answer) -> SocketAddr {
        let socket = UdpSocket::bind(bind).unwrap();
        let addr = socket.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let req = &buf[..n];
                assert_eq!(n, PACKET_LEN);
                assert_eq!(req[0], 0x23, "LI 0, version 4, client mode");
                let now = unix_nanos(SystemTime::now()).unwrap();
                let at = |ahead: i128| now + ahead * NANOS_PER_SECOND;
                let good = 0b00_100_100;
                match answer {
                    Answer::Good { ahead } => {
                        socket
                            .send_to(&reply_for(req, at(ahead), good, 2), from)
                            .unwrap();
                    }
                    Answer::StrayThenGood { ahead } => {
                        let mut stray = reply_for(req, at(-1_000_000), good, 2);
                        stray[31] ^= 1;
                        socket.send_to(&stray, from).unwrap();
                        socket
                            .send_to(&reply_for(req, at(ahead), good, 2), from)
                            .unwrap();
                    }
                    Answer::Kiss => {
                        socket
                            .send_to(&reply_for(req, at(0), good, 0), from)
                            .unwrap();
                    }
                    Answer::Alarm => {
                        socket
                            .send_to(&reply_for(req, at(0), 0b11_100_100, 2), from)
                            .unwrap();
                    }
                    Answer::Silent => {}
                }
            }
        });
        addr
    }

    const QUICK: Duration = Duration::from_millis(400);

    /// `sync` of IP literals on `port` with no certificates.
    fn sync_literals(
        servers: &[String],
        port: u16,
        clock: &FakeClock,
    ) -> Result<Synced, Vec<String>> {
        sync(servers, port, clock, &literals_only(), QUICK, &open())
    }

    /// The ceiling of a machine without certificates: ten years after
    /// the build, out of the way of the tests' real-clock answers.
    fn open() -> Ceiling {
        decide_ceiling(build_date(), None)
    }

    /// A resolver with no nameserver: enough for IP literals.
    fn literals_only() -> Resolver {
        Resolver::new(Vec::new(), Duration::from_secs(2))
    }

    /// A DNS server on loopback that says `ntp.test` is 127.0.0.1 and
    /// that every other name does not exist.
    fn dns() -> Resolver {
        use crate::dns::test_server::{a_for_question, reply, start};
        let server = start(|q| {
            let asks_ntp_test = q.get(12..22) == Some(b"\x03ntp\x04test\x00".as_slice());
            if asks_ntp_test {
                vec![reply(q, 0x8180, &[a_for_question([127, 0, 0, 1])])]
            } else {
                vec![reply(q, 0x8183, &[])]
            }
        });
        Resolver::new(vec![server], Duration::from_secs(2))
    }

    #[test]
    fn timestamps_round_trip_and_cross_the_2036_wrap() {
        for secs in [
            0i128,
            1_767_225_600,
            2_085_978_495,
            2_085_978_496,
            4_000_000_000,
        ] {
            let nanos = secs * NANOS_PER_SECOND + 250_000_000;
            let t = NtpTime::from_unix_nanos(nanos).unwrap();
            let back = t.unix_nanos();
            assert!((back - nanos).abs() <= 1, "{secs}: {back} vs {nanos}");
        }
        // 2036-02-07T06:28:16Z is NTP second 2^32, which wraps to 0.
        let wrap = NtpTime::from_unix_nanos(2_085_978_496 * NANOS_PER_SECOND).unwrap();
        assert_eq!(wrap.seconds, 0);
        assert_eq!(NtpTime::from_unix_nanos(-1), None);
        assert_eq!(
            NtpTime::from_system(UNIX_EPOCH).unwrap().seconds,
            2_208_988_800
        );
    }

    #[test]
    fn the_request_is_a_version_4_client_packet_with_our_timestamp() {
        let t = NtpTime {
            seconds: 0x0102_0304,
            fraction: 0x0506_0708,
        };
        let p = request(t);
        assert_eq!(p[0], 0x23);
        assert!(p[1..40].iter().all(|&b| b == 0));
        assert_eq!(&p[40..48], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn replies_are_checked() {
        let sent = NtpTime {
            seconds: 0xE000_0000,
            fraction: 7,
        };
        let mut req = [0u8; PACKET_LEN];
        req[40..48].copy_from_slice(&sent.to_bytes());
        let now = 1_800_000_000 * NANOS_PER_SECOND;
        let good = reply_for(&req, now, 0b00_100_100, 2);
        let r = decide_reply(&good, sent).unwrap();
        assert_eq!(r.stratum, 2);
        assert_eq!(r.transmit.unix_nanos() / NANOS_PER_SECOND, 1_800_000_000);
        // Version 3 servers are fine too.
        assert!(decide_reply(&reply_for(&req, now, 0b00_011_100, 1), sent).is_ok());

        let no_refid = |first: u8| {
            let mut p = reply_for(&req, now, first, 0);
            p[12..16].fill(0);
            p
        };
        let cases: [(Vec<u8>, Refusal); 10] = [
            (good[..40].to_vec(), Refusal::Short(40)),
            (reply_for(&req, now, 0b00_100_011, 2), Refusal::Mode(3)),
            (reply_for(&req, now, 0b00_010_100, 2), Refusal::Version(2)),
            (
                reply_for(&req, now, 0b11_100_100, 2),
                Refusal::Unsynchronised,
            ),
            (
                reply_for(&req, now, 0b00_100_100, 0),
                Refusal::Kiss("RATE".into()),
            ),
            (
                {
                    let mut p = reply_for(&req, now, 0b11_100_100, 0);
                    p[12..16].copy_from_slice(b"DEN\0");
                    p
                },
                Refusal::Kiss("DEN".into()),
            ),
            // What chronyd with no source answers (the chrony_dnsmasq
            // test asks a real one): unsynchronised, not a kiss.
            (no_refid(0b11_100_100), Refusal::Unsynchronised),
            (no_refid(0b00_100_100), Refusal::Stratum(0)),
            (reply_for(&req, now, 0b00_100_100, 16), Refusal::Stratum(16)),
            (
                {
                    let mut p = good.clone();
                    p[40..48].fill(0);
                    p
                },
                Refusal::NoTransmitTime,
            ),
        ];
        for (packet, want) in cases {
            assert_eq!(decide_reply(&packet, sent), Err(want.clone()), "{want}");
        }
        let other = NtpTime {
            seconds: sent.seconds,
            fraction: 8,
        };
        assert_eq!(decide_reply(&good, other), Err(Refusal::NotOurs));
    }

    #[test]
    fn offset_is_the_mean_of_both_legs() {
        let s = NANOS_PER_SECOND;
        // Our clock 100 s behind, 0.2 s each way.
        assert_eq!(
            offset_nanos(0, 100 * s + s / 5, 100 * s + s / 5, 2 * s / 5),
            100 * s
        );
        assert_eq!(offset_nanos(100 * s, 0, 0, 100 * s), -100 * s);
    }

    #[test]
    fn a_real_exchange_sets_a_1970_clock_to_the_servers_time() {
        let addr = responder(Answer::Good { ahead: 1000 });
        // A machine whose clock died: it reads 1970.
        let clock = FakeClock::starting_at(UNIX_EPOCH + Duration::from_secs(10));
        let servers = vec!["127.0.0.1".to_owned()];
        let synced = sync_literals(&servers, addr.port(), &clock).unwrap();
        let expected = unix_nanos(SystemTime::now()).unwrap() + 1000 * NANOS_PER_SECOND
            - 10 * NANOS_PER_SECOND;
        assert!(
            (synced.sample.offset - expected).abs() < 2 * NANOS_PER_SECOND,
            "offset {} vs {expected}",
            synced.sample.offset
        );
        assert_eq!(synced.sample.stratum, 2);
        assert_eq!(clock.set_to(), vec![synced.set_to]);
        let set = unix_nanos(synced.set_to).unwrap();
        let want = unix_nanos(SystemTime::now()).unwrap() + 1000 * NANOS_PER_SECOND;
        assert!((set - want).abs() < 2 * NANOS_PER_SECOND, "{set} vs {want}");
        let text = describe(&synced);
        assert!(
            text.contains("from 127.0.0.1, stratum 2, offset +"),
            "{text}"
        );
    }

    #[test]
    fn a_stray_packet_is_ignored_and_the_real_answer_used() {
        let addr = responder(Answer::StrayThenGood { ahead: 50 });
        let clock = FakeClock::starting_at(SystemTime::now());
        let s = query(addr, &clock, Duration::from_secs(2)).unwrap();
        assert!(
            (s.offset - 50 * NANOS_PER_SECOND).abs() < NANOS_PER_SECOND,
            "{}",
            s.offset
        );
    }

    #[test]
    fn bad_answers_and_silence_fall_through_to_the_next_server() {
        let silent = responder(Answer::Silent);
        let kiss = responder(Answer::Kiss);
        let alarm = responder(Answer::Alarm);
        let clock = FakeClock::starting_at(SystemTime::now());
        for (addr, want) in [
            (kiss, "kiss-o'-death \"RATE\""),
            (alarm, "leap indicator 3"),
        ] {
            let e = query(addr, &clock, Duration::from_secs(2)).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
        let e = query(silent, &clock, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, QueryError::NoAnswer { .. }), "{e}");
        assert!(
            clock.set_to().is_empty(),
            "nothing is set from a bad answer"
        );

        // Each server in its own port is out of reach of `sync` (one port
        // for all), so chain them through the step's pieces: a server
        // with nothing listening fails, and the whole sync reports each.
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let servers = vec!["127.0.0.1".to_owned(), "no-such-host.invalid".to_owned()];
        let failures = sync(&servers, port, &clock, &dns(), QUICK, &open()).unwrap_err();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(
            failures[0].starts_with("127.0.0.1 (127.0.0.1:"),
            "{failures:?}"
        );
        assert!(
            failures[1].starts_with("no-such-host.invalid: cannot resolve the name: DNS server"),
            "{failures:?}"
        );
        assert!(failures[1].contains("does not exist"), "{failures:?}");
        assert!(clock.set_to().is_empty());
    }

    #[test]
    fn a_server_named_by_dns_sets_the_clock() {
        let addr = responder(Answer::Good { ahead: 100 });
        let clock = FakeClock::starting_at(SystemTime::now());
        let servers = vec!["nope.test".to_owned(), "ntp.test".to_owned()];
        let synced = sync(&servers, addr.port(), &clock, &dns(), QUICK, &open()).unwrap();
        assert_eq!(synced.server, "ntp.test");
        assert_eq!(synced.sample.address, addr);
        assert!(
            describe(&synced).contains("from ntp.test (127.0.0.1)"),
            "{}",
            describe(&synced)
        );
    }

    #[test]
    fn the_step_reports_a_name_without_resolv_conf() {
        let spec = liken_api::MachineSpec {
            network: Some(liken_api::machine::NetworkSpec {
                ntp: vec!["time.example".to_owned()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let m = Machine::new("web-1", spec);
        let clock = FakeClock::starting_at(SystemTime::now());
        let missing = std::env::temp_dir().join("liken-ntp-no-such-dir/resolv.conf");
        match step(Some(&m), &clock, &missing, &[]) {
            Outcome::Failed(why) => {
                assert!(why.contains("time.example: cannot resolve"), "{why}");
                assert!(why.contains("does not exist"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Each row: the servers' offsets in days (in the Machine's order),
    /// which one sets the clock, and how many are refused.
    #[test]
    fn an_answer_far_ahead_of_the_others_is_refused() {
        type Row = (&'static [i128], Option<usize>, usize);
        let rows: &[Row] = &[
            (&[], None, 0),
            (&[20_000], Some(0), 0),
            (&[20_000, 20_000], Some(0), 0),
            // The first server says 2080, the others today.
            (&[40_000, 20_000, 20_000], Some(1), 1),
            // Less than a day apart: the first wins.
            (&[20_000, 20_000 - 1], Some(0), 0),
            // Two far ahead, one honest last.
            (&[40_000, 30_000, 20_000], Some(2), 2),
            // Behind the others is not this check's business.
            (&[20_000, 40_000], Some(0), 0),
        ];
        let day = 86_400 * NANOS_PER_SECOND;
        for (offsets, chosen, refused) in rows {
            let candidates: Vec<Candidate> = offsets
                .iter()
                .enumerate()
                .map(|(i, d)| Candidate {
                    server: format!("ntp{i}"),
                    sample: Sample {
                        address: format!("192.0.2.{}:123", i + 1).parse().unwrap(),
                        stratum: 2,
                        offset: d * day,
                    },
                })
                .collect();
            let (got, lines) = decide_among(&candidates);
            assert_eq!(
                (got, lines.len()),
                (*chosen, *refused),
                "{offsets:?}: {lines:?}"
            );
        }
        let one = |offset| Candidate {
            server: "bad.example".into(),
            sample: Sample {
                address: "192.0.2.9:123".parse().unwrap(),
                stratum: 1,
                offset,
            },
        };
        let (_, lines) = decide_among(&[
            one(3 * day),
            Candidate {
                server: "good".into(),
                ..one(0)
            },
        ]);
        assert_eq!(lines, ["bad.example: refused, a day or more ahead of good"]);
    }

    /// Each row: the build date, the certificates' last notAfter, and
    /// the ceiling with what sets it.
    #[test]
    fn the_ceiling_is_the_last_not_after_or_ten_years_past_the_build() {
        let t = |s: &str| s.parse::<Time>().unwrap();
        let built = t("2026-12-05T00:00:00Z");
        let ca = |s: &str| Some((t(s), "server-ca.crt".to_owned()));
        let not_after = |s: &str| (t(s), CeilingReason::NotAfter("server-ca.crt".into()));
        let release = (t("2036-12-02T00:00:00Z"), CeilingReason::Release(built));
        type Row = (Option<(Time, String)>, (Time, CeilingReason));
        let rows: Vec<Row> = vec![
            // A machine with no CA certificates yet (a follower before its
            // k3s first ran): ten years after the build.
            (None, release.clone()),
            // CAs minted with this release: their notAfter, ten years on.
            (
                ca("2036-11-30T08:44:33Z"),
                not_after("2036-11-30T08:44:33Z"),
            ),
            // CAs minted long ago, a release built late in their life: the
            // notAfter, though it is sooner than the release's span.
            (
                ca("2027-03-01T00:00:00Z"),
                not_after("2027-03-01T00:00:00Z"),
            ),
            // CAs rotated to live longer than the release's span.
            (
                ca("2046-01-01T00:00:00Z"),
                not_after("2046-01-01T00:00:00Z"),
            ),
            // CAs that expired before this release was built: nothing left
            // to protect, so the release's span.
            (ca("2026-01-01T00:00:00Z"), release.clone()),
            (ca("2026-12-05T00:00:00Z"), release),
        ];
        for (certs, (at, reason)) in rows {
            let why = format!("{certs:?}");
            assert_eq!(
                decide_ceiling(built, certs),
                Ceiling { at, reason },
                "{why}"
            );
        }
        // A dev build (no release version) dates itself no earlier than
        // PLAUSIBLE_AFTER.
        assert!(build_date() >= Time::from_unix(PLAUSIBLE_AFTER));
    }

    /// Each row: the clock now, the answer's offset (seconds), and what
    /// is decided, against a ceiling at 2036-11-30T08:44:33Z.
    #[test]
    fn an_answer_past_the_ceiling_is_refused() {
        let t = |s: &str| s.parse::<Time>().unwrap();
        let ceiling = Ceiling {
            at: t("2036-11-30T08:44:33Z"),
            reason: CeilingReason::NotAfter("/var/lib/rancher/k3s/server/tls/server-ca.crt".into()),
        };
        let today = t("2026-12-05T12:00:00Z");
        let top = ceiling.at;
        let implausible = |s| Err(TimeRefusal::Implausible(t(s)));
        let past = |said: Time| {
            Err(TimeRefusal::PastCeiling {
                said,
                ceiling: ceiling.clone(),
            })
        };
        type Row = (Time, i64, Result<Time, TimeRefusal>);
        let rows: Vec<Row> = vec![
            // An honest answer, a few seconds off.
            (today, 3, Ok(today.plus_seconds(3))),
            // A dead RTC in 1970 set to today.
            (Time::EPOCH.plus_seconds(10), today.unix() - 10, Ok(today)),
            // Up to the ceiling, and not a second past it.
            (today, top.seconds_since(today), Ok(top)),
            (
                today,
                top.seconds_since(today) + 1,
                past(top.plus_seconds(1)),
            ),
            // A spoofed 2090.
            (
                today,
                t("2090-01-01T00:00:00Z").seconds_since(today),
                past(t("2090-01-01T00:00:00Z")),
            ),
            // From 1970 to past the ceiling: refused too.
            (
                Time::EPOCH,
                t("2040-01-01T00:00:00Z").unix(),
                past(t("2040-01-01T00:00:00Z")),
            ),
            // A clock already past the ceiling moved back, even to a time
            // still past it.
            (
                t("2050-01-01T00:00:00Z"),
                -86_400,
                Ok(t("2049-12-31T00:00:00Z")),
            ),
            (
                t("2050-01-01T00:00:00Z"),
                today.seconds_since(t("2050-01-01T00:00:00Z")),
                Ok(today),
            ),
            // Before 2026: no working server says that.
            (
                Time::EPOCH.plus_seconds(10),
                5,
                implausible("1970-01-01T00:00:15Z"),
            ),
        ];
        for (now, offset, want) in rows {
            let got = decide_time(
                now.to_system(),
                i128::from(offset) * NANOS_PER_SECOND,
                &ceiling,
            )
            .map(Time::from_system);
            assert_eq!(got, want, "{now} {offset:+}");
        }
        let line = past(t("2090-01-01T00:00:00Z")).unwrap_err().to_string();
        assert_eq!(
            line,
            "refused 2090-01-01T00:00:00Z, later than 2036-11-30T08:44:33Z, when \
             /var/lib/rancher/k3s/server/tls/server-ca.crt expires, the last of this machine's \
             CA certificates"
        );
        let release = decide_ceiling(t("2026-12-05T00:00:00Z"), None);
        assert_eq!(
            release.to_string(),
            "2036-12-02T00:00:00Z, ten years after this release's build date 2026-12-05T00:00:00Z"
        );
    }

    #[test]
    fn the_ceiling_is_read_from_the_certificates_that_exist() {
        let dir = std::env::temp_dir().join(format!("liken-ntp-ceiling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // notAfter=Nov 30 08:44:33 2036 GMT (ca_time's test certificate).
        let ca = dir.join("server-ca.crt");
        std::fs::write(&ca, crate::ca_time::tests::CA).unwrap();
        let missing = dir.join("client-ca.crt");
        let c = ceiling_from(&[&missing, &ca]);
        assert_eq!(c.at, "2036-11-30T08:44:33Z".parse().unwrap());
        assert_eq!(c.reason, CeilingReason::NotAfter(ca.display().to_string()));
        // A file that holds no certificate is left out (and named), the
        // others still count.
        let junk = dir.join("junk.crt");
        std::fs::write(&junk, "not a certificate").unwrap();
        assert_eq!(ceiling_from(&[&junk, &ca]), c);
        assert_eq!(ceiling_from(&[&junk]), decide_ceiling(build_date(), None));
        assert_eq!(ceiling_from(&[]), decide_ceiling(build_date(), None));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Over real sockets: the first server says twenty years ahead,
    /// past the ceiling, and is refused; the second sets the clock.
    #[test]
    fn a_server_past_the_ceiling_gives_way_to_the_next() {
        let far = responder(Answer::Good {
            ahead: 20 * 365 * 86_400,
        });
        let port = far.port();
        responder_on(&format!("127.0.0.2:{port}"), Answer::Good { ahead: 30 });
        let now = Time::from_system(SystemTime::now());
        let ceiling = Ceiling {
            at: now.plus_seconds(365 * 86_400),
            reason: CeilingReason::NotAfter("server-ca.crt".into()),
        };
        let clock = FakeClock::starting_at(SystemTime::now());
        let servers = vec!["127.0.0.1".to_owned(), "127.0.0.2".to_owned()];
        let synced = sync(&servers, port, &clock, &literals_only(), QUICK, &ceiling).unwrap();
        assert_eq!(synced.server, "127.0.0.2");
        let set = Time::from_system(synced.set_to);
        assert!((set.seconds_since(now) - 30).abs() <= 2, "{set}");
        // Alone, the far server leaves the clock as it is, and says why.
        let failures = sync(
            &servers[..1],
            port,
            &clock,
            &literals_only(),
            QUICK,
            &ceiling,
        )
        .unwrap_err();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].starts_with(&format!("127.0.0.1 (127.0.0.1:{port}): refused 20")),
            "{failures:?}"
        );
        assert!(
            failures[0].ends_with(
                "when server-ca.crt expires, the last of this machine's CA certificates"
            ),
            "{failures:?}"
        );
        assert_eq!(clock.set_to(), vec![synced.set_to]);
    }

    #[test]
    fn the_step_skips_without_a_machine_or_servers() {
        let clock = FakeClock::starting_at(SystemTime::now());
        let resolv = Path::new("/etc/resolv.conf");
        assert!(matches!(
            step(None, &clock, resolv, &[]),
            Outcome::Skipped(_)
        ));
        let m = Machine::new("web-1", liken_api::MachineSpec::default());
        match step(Some(&m), &clock, resolv, &[]) {
            Outcome::Skipped(why) => assert!(why.contains("spec.network.ntp"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failing_clock_stops_the_sync() {
        let addr = responder(Answer::Good { ahead: 0 });
        let mut clock = FakeClock::starting_at(SystemTime::now());
        clock.fail = Some(1);
        let servers = vec!["127.0.0.1".to_owned(), "127.0.0.2".to_owned()];
        let failures = sync_literals(&servers, addr.port(), &clock).unwrap_err();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].starts_with("setting the clock failed"),
            "{failures:?}"
        );
    }
}
