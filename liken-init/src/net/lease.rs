//! A DHCPv4 lease kept for the life of the machine (RFC 2131 section
//! 4.4): taken, renewed at T1 from the server that granted it, rebound
//! at T2 from any server, and on expiry or a refusal given up and asked
//! for again.
//!
//! [`Keeper`] is the state machine, with no I/O and no clock of its
//! own: [`Keeper::on_timer`] and [`Keeper::on_message`] take the
//! monotonic time as an argument and return the [`Effect`]s to carry
//! out (send this, put that lease on the interface, take it off, say
//! so), so the whole life of a lease is tested table-style in
//! microseconds. [`super::daemon`] carries the effects out from the
//! network thread, never from the supervisor loop.
//!
//! Timers, from the moment a lease is granted: T1 and T2 as the server
//! gives them (options 58 and 59), else half and seven eighths of the
//! lease. While renewing or rebinding, a request is repeated after half
//! the time left to the next deadline, but no sooner than
//! [`MIN_RETRY`] (RFC 2131 says 60 s; leases of a few minutes, which
//! test networks hand out, would then get one try). Without a lease a
//! DISCOVER is repeated after 1, 2, 4, 8 and then every
//! [`MAX_BACKOFF`] seconds, for ever: a machine that booted while its
//! DHCP server was down gets its address once the server is back.
//! A lease without an end (no option 51, or 0xffffffff) is never
//! renewed.
//!
//! Floors, so an odd server cannot make a storm: a lease shorter than
//! [`MIN_LEASE`] (20 s, dhcpcd's DHCP_MIN_LEASE; busybox udhcpc uses
//! 2 × 61 s) counts as [`MIN_LEASE`], and a server's T1 under
//! [`MIN_T1`] is ignored for half the lease. A lease that expires, is
//! refused or is never granted counts as a failure, and the DISCOVERs
//! after it start further apart ([`decide_discover_wait`]) until a
//! renewal succeeds, so a server that grants and forgets leases is not
//! asked at the first back-off step over and over. A renewal ACK that
//! leaves out the mask or the lease time keeps the lease's known ones
//! ([`decide_renewed`]). A lease whose address, mask or router no host
//! can use is refused ([`decide_refusal`]). A link that comes back up
//! asks its server whether the lease still stands (INIT-REBOOT, RFC
//! 2131 section 3.2), as the link may now be on another network.
//!
//! The keeper holds a fixed amount of state whatever happens, so a
//! machine renewing for months allocates nothing more as it goes.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::dhcp::{self, Kind, Lease, Message};

/// The shortest wait before a renewal or rebinding request is repeated.
pub const MIN_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between DISCOVERs.
pub const MAX_BACKOFF: Duration = Duration::from_secs(16);
/// How many REQUESTs for one offer go unanswered before the keeper
/// starts over with a DISCOVER.
const REQUEST_TRIES: u32 = 4;
/// The pause after a refusal (NAK) before asking again, so a server
/// that refuses everything is not asked in a tight loop.
const AFTER_NAK: Duration = Duration::from_secs(2);
/// A lease time meaning "no end".
const INFINITE: u32 = u32::MAX;
/// The shortest lease the keeper believes: a lease time of 0 or a few
/// seconds (a misconfigured server) counts as this (dhcpcd's
/// DHCP_MIN_LEASE).
pub const MIN_LEASE: Duration = Duration::from_secs(20);
/// The earliest renewal: a server's T1 under this (0, 1 or 2 s, a
/// server asking for a renewal storm) is ignored, and the renewal falls
/// at half the lease (at least half of [`MIN_LEASE`]). It stays this
/// low because a T1 of a few seconds under a longer lease is a real
/// setting (it is how the QEMU tests and `make bench` make dnsmasq,
/// whose shortest lease is 2 minutes, renew often), not a misconfiguration.
pub const MIN_T1: Duration = Duration::from_secs(3);

/// A lease held since `granted` (monotonic time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The lease.
    pub lease: Lease,
    /// When the server last granted or extended it.
    pub granted: Duration,
}

/// Where the keeper stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No lease: DISCOVER sent, waiting for an OFFER.
    Selecting,
    /// This REQUEST sent for an offer, waiting for the ACK.
    Requesting(Message),
    /// Holding a lease, before T1.
    Bound(Held),
    /// Past T1: asking the granting server to extend it.
    Renewing(Held),
    /// Past T2: asking any server.
    Rebinding(Held),
    /// The link came back up: asking whether the lease still stands
    /// on the network it is on now (INIT-REBOOT).
    Rebooting(Held),
}

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// 255.255.255.255 on the interface.
    Broadcast,
    /// A server's address, unicast.
    Server(Ipv4Addr),
}

/// One thing for the network thread to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send a message from the interface's client port.
    Send(Message, To),
    /// Put `new` on the interface (address and default route), taking
    /// `old` off first where it differs.
    Apply {
        /// The lease held before, if any.
        old: Option<Lease>,
        /// The lease to hold.
        new: Lease,
    },
    /// Take the lease off the interface, for this reason (the facts
    /// record it).
    Remove(Lease, &'static str),
    /// A console line (without the interface's name, which the thread
    /// adds).
    Say(String),
}

/// When a lease's timers fall, after it was granted; `None` for a lease
/// without an end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    /// Renew from the granting server.
    pub t1: Duration,
    /// Rebind from any server.
    pub t2: Duration,
    /// The end.
    pub expiry: Duration,
}

/// The timers of `lease`: the server's T1 and T2 when they are in order
/// (T1 < T2 < lease) and T1 is at least [`MIN_T1`], else 1/2 and 7/8 of
/// the lease; a lease under [`MIN_LEASE`] counts as [`MIN_LEASE`].
pub fn decide_times(lease: &Lease) -> Option<Times> {
    let secs = lease.lease_secs.filter(|s| *s != INFINITE)?;
    let total = u64::from(secs).max(MIN_LEASE.as_secs());
    let t1 = lease
        .t1
        .map(u64::from)
        .filter(|t| *t < total && *t >= MIN_T1.as_secs())
        .unwrap_or(total / 2);
    let t2 = lease
        .t2
        .map(u64::from)
        .filter(|t| *t > t1 && *t < total)
        .unwrap_or(total.saturating_mul(7) / 8)
        .max(t1);
    Some(Times {
        t1: Duration::from_secs(t1),
        t2: Duration::from_secs(t2),
        expiry: Duration::from_secs(total),
    })
}

/// The lease a renewal ACK `m` grants over the one `held`: what the
/// ACK leaves out (the mask, the lease time, the server id) keeps the
/// known value, rather than moving the address to a class prefix or
/// making the lease endless.
pub fn decide_renewed(held: &Lease, m: &Message) -> Lease {
    let mut lease = dhcp::lease_from_ack(m);
    if m.subnet.is_none() {
        lease.prefix = held.prefix;
    }
    if m.lease_secs.is_none() {
        lease.lease_secs = held.lease_secs;
    }
    if m.server_id.is_none() {
        lease.server = held.server;
    }
    lease
}

/// Why the lease offered or granted in `m` cannot be used, if it
/// cannot: an address no host may hold, a zero mask, a zero router.
pub fn decide_refusal(m: &Message) -> Option<String> {
    let a = m.your_ip;
    let host_bits = m
        .subnet
        .and_then(dhcp::mask_prefix)
        .filter(|p| *p < 31)
        .map_or(0, |p| 32u32.saturating_sub(u32::from(p)));
    let host_mask = u32::MAX.checked_shl(host_bits).map_or(u32::MAX, |m| !m);
    let host = u32::from(a) & host_mask;
    let why = if a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback() {
        "no host may hold that address"
    } else if m.subnet.is_some_and(|s| s.is_unspecified()) {
        "the subnet mask is 0.0.0.0"
    } else if m.routers.first().is_some_and(|r| r.is_unspecified()) {
        "the router is 0.0.0.0"
    } else if host_bits > 0 && (host == host_mask || host == 0) {
        "it is its subnet's network or broadcast address"
    } else {
        return None;
    };
    Some(format!(
        "refused the lease of {a} from {}: {why}",
        m.server_id.unwrap_or(Ipv4Addr::UNSPECIFIED)
    ))
}

/// How long after failure number `failures` (an expiry, a refusal, a
/// request never answered) the first DISCOVER waits: at once after the
/// first, then along the back-off, so the back-off is not forgotten
/// when a lease is lost again.
pub fn decide_discover_wait(failures: u32) -> Duration {
    if failures <= 1 {
        Duration::ZERO
    } else {
        decide_backoff(failures.saturating_sub(1))
    }
}

/// The wait before DISCOVER number `tries` (1 for the first) is
/// repeated: 1, 2, 4, 8 s, then [`MAX_BACKOFF`].
pub fn decide_backoff(tries: u32) -> Duration {
    let secs = 1u64
        .checked_shl(tries.saturating_sub(1).min(8))
        .unwrap_or(u64::MAX);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

/// When to repeat an unanswered renewal or rebinding request sent at
/// `now`: after half the time left to `deadline`, no sooner than
/// [`MIN_RETRY`], never after `deadline`.
pub fn decide_retry(now: Duration, deadline: Duration) -> Duration {
    let half = deadline
        .saturating_sub(now)
        .checked_div(2)
        .unwrap_or_default();
    now.saturating_add(half.max(MIN_RETRY)).min(deadline)
}

/// Keeps one interface's lease.
#[derive(Clone, Debug)]
pub struct Keeper {
    mac: [u8; 6],
    xid: u32,
    /// Where it stands.
    pub state: State,
    /// When it acts next; `None`: only a message can move it (a lease
    /// without an end).
    pub next: Option<Duration>,
    tries: u32,
    /// The last address the interface held, for the console's "was".
    pub last: Option<Ipv4Addr>,
    /// Extensions granted since boot.
    pub renewals: u32,
    /// Leases lost or never granted since the last renewal.
    failures: u32,
    /// The optional options last said to be skipped, so a server that
    /// always sends them is named once, not at every renewal.
    said_skipped: Vec<u8>,
}

impl Keeper {
    /// A keeper for hardware address `mac` that sends its first DISCOVER
    /// at `now`; `xid` should differ between machines and boots
    /// ([`dhcp::decide_xid`]).
    pub fn new(mac: [u8; 6], xid: u32, now: Duration) -> Keeper {
        Keeper {
            mac,
            xid,
            state: State::Selecting,
            next: Some(now),
            tries: 0,
            last: None,
            renewals: 0,
            failures: 0,
            said_skipped: Vec::new(),
        }
    }

    /// The lease held, if any.
    pub fn held(&self) -> Option<&Held> {
        match &self.state {
            State::Bound(h) | State::Renewing(h) | State::Rebinding(h) | State::Rebooting(h) => {
                Some(h)
            }
            State::Selecting | State::Requesting(_) => None,
        }
    }

    /// A new transaction: replies to the old one no longer count.
    fn new_xid(&mut self) {
        self.xid = self.xid.wrapping_add(0x9E37_79B9);
        self.tries = 0;
    }

    fn start_over(&mut self, at: Duration) {
        self.state = State::Selecting;
        self.new_xid();
        self.next = Some(at);
    }

    /// Starts over after a lost or refused lease, `at` or later along
    /// the back-off kept across failures.
    fn start_over_failed(&mut self, at: Duration) {
        self.failures = self.failures.saturating_add(1);
        self.start_over(at.saturating_add(decide_discover_wait(self.failures)));
    }

    /// The link came (back) up at `now`: a held lease is checked with
    /// the server (INIT-REBOOT), and a keeper without one asks at once
    /// rather than at the end of its back-off.
    pub fn on_link_up(&mut self, now: Duration) -> Vec<Effect> {
        match self.state.clone() {
            State::Bound(held)
            | State::Renewing(held)
            | State::Rebinding(held)
            | State::Rebooting(held) => {
                self.new_xid();
                self.state = State::Rebooting(held);
                self.next = Some(now);
            }
            State::Selecting | State::Requesting(_) => {
                self.start_over(now);
            }
        }
        self.on_timer(now)
    }

    /// Console lines for the optional options `m` left out, when they
    /// differ from the last ones said.
    fn say_skipped(&mut self, m: &Message, out: &mut Vec<Effect>) {
        let codes: Vec<u8> = m.skipped.iter().map(|s| s.code).collect();
        if codes == self.said_skipped {
            return;
        }
        let server = m
            .server_id
            .map_or("the server".to_owned(), |s| format!("server {s}"));
        for skipped in &m.skipped {
            out.push(Effect::Say(format!(
                "skipped the {} (option {}) from {server}: {}",
                dhcp::option_name(skipped.code),
                skipped.code,
                skipped.why
            )));
        }
        self.said_skipped = codes;
    }

    /// What to do now that the timer (at [`Keeper::next`]) is due.
    /// Nothing when it is not.
    pub fn on_timer(&mut self, now: Duration) -> Vec<Effect> {
        if self.next.is_none_or(|at| at > now) {
            return Vec::new();
        }
        let mut out = Vec::new();
        match self.state.clone() {
            State::Selecting => {
                self.tries = self.tries.saturating_add(1);
                out.push(Effect::Send(
                    dhcp::discover(self.xid, self.mac),
                    To::Broadcast,
                ));
                let step = self.tries.saturating_add(self.failures);
                self.next = Some(now.saturating_add(decide_backoff(step)));
            }
            State::Rebooting(held) => {
                if self.tries >= REQUEST_TRIES {
                    // No server answered: the lease's own timers go on.
                    self.tries = 0;
                    self.state = State::Bound(held.clone());
                    self.on_lease_timer(held, now, &mut out);
                    return out;
                }
                self.tries = self.tries.saturating_add(1);
                let l = &held.lease;
                out.push(Effect::Send(
                    dhcp::reboot(l.address, self.xid, self.mac),
                    To::Broadcast,
                ));
                self.next = Some(now.saturating_add(decide_backoff(self.tries)));
            }
            State::Requesting(request) => {
                if self.tries >= REQUEST_TRIES {
                    self.start_over_failed(now);
                    return self.on_timer(now);
                }
                self.tries = self.tries.saturating_add(1);
                out.push(Effect::Send(request, To::Broadcast));
                self.next = Some(now.saturating_add(decide_backoff(self.tries)));
            }
            State::Bound(held) | State::Renewing(held) | State::Rebinding(held) => {
                self.on_lease_timer(held, now, &mut out);
            }
        }
        out
    }

    fn on_lease_timer(&mut self, held: Held, now: Duration, out: &mut Vec<Effect>) {
        let Some(times) = decide_times(&held.lease) else {
            self.next = None;
            return;
        };
        let granted = held.granted;
        let at = |t: Duration| granted.saturating_add(t);
        let address = held.lease.address;
        if now >= at(times.expiry) {
            out.push(Effect::Remove(held.lease.clone(), "the lease expired"));
            out.push(Effect::Say(format!(
                "the lease on {address}/{} expired without an answer from a DHCP server; \
                 the address is removed and a new lease asked for",
                held.lease.prefix
            )));
            self.last = Some(address);
            self.start_over_failed(now);
            out.extend(self.on_timer(now));
        } else if now >= at(times.t2) {
            if !matches!(self.state, State::Rebinding(_)) {
                self.new_xid();
                self.state = State::Rebinding(held);
            }
            out.push(Effect::Send(
                dhcp::extend(address, self.xid, self.mac),
                To::Broadcast,
            ));
            self.next = Some(decide_retry(now, at(times.expiry)));
        } else if now >= at(times.t1) {
            let to = held.lease.server.map_or(To::Broadcast, To::Server);
            if !matches!(self.state, State::Renewing(_)) {
                self.new_xid();
                self.state = State::Renewing(held);
            }
            out.push(Effect::Send(dhcp::extend(address, self.xid, self.mac), to));
            self.next = Some(decide_retry(now, at(times.t2)));
        } else {
            self.next = Some(at(times.t1));
        }
    }

    /// What a message that arrived at `now` means.
    pub fn on_message(&mut self, m: &Message, now: Duration) -> Vec<Effect> {
        if !dhcp::is_reply_to(m, self.xid, self.mac) {
            return Vec::new();
        }
        let mut out = Vec::new();
        match (self.state.clone(), m.kind) {
            (State::Selecting, Kind::Offer) | (State::Requesting(_), Kind::Ack)
                if decide_refusal(m).is_some() =>
            {
                // Another server may offer something usable; the
                // back-off goes on meanwhile.
                out.extend(decide_refusal(m).map(Effect::Say));
                if matches!(self.state, State::Requesting(_)) {
                    self.start_over_failed(now);
                }
            }
            (State::Selecting, Kind::Offer) => {
                let request = dhcp::request(m, self.mac);
                out.push(Effect::Send(request.clone(), To::Broadcast));
                self.state = State::Requesting(request);
                self.tries = 1;
                self.next = Some(now.saturating_add(decide_backoff(1)));
            }
            (State::Requesting(sent), Kind::Ack) => {
                // An ACK from another server than the one asked is for
                // someone else's REQUEST in a shared broadcast domain.
                if sent.server_id.is_some()
                    && m.server_id.is_some()
                    && sent.server_id != m.server_id
                {
                    return out;
                }
                let lease = dhcp::lease_from_ack(m);
                out.push(Effect::Say(self.describe_grant(&lease)));
                self.say_skipped(m, &mut out);
                out.push(Effect::Apply {
                    old: None,
                    new: lease.clone(),
                });
                self.bind(lease, now);
            }
            (State::Requesting(sent), Kind::Nak)
                if sent.server_id.is_none() || m.server_id == sent.server_id =>
            {
                self.failures = self.failures.saturating_add(1);
                let wait = decide_discover_wait(self.failures).max(AFTER_NAK);
                self.start_over(now.saturating_add(wait));
            }
            (State::Renewing(_) | State::Rebinding(_) | State::Rebooting(_), Kind::Ack)
                if decide_refusal(m).is_some() =>
            {
                // The lease held is kept until its own timers end it.
                out.extend(decide_refusal(m).map(Effect::Say));
            }
            (
                State::Renewing(held) | State::Rebinding(held) | State::Rebooting(held),
                Kind::Ack,
            ) => {
                let lease = decide_renewed(&held.lease, m);
                self.say_skipped(m, &mut out);
                if lease.address != held.lease.address {
                    out.push(Effect::Say(self.describe_grant(&lease)));
                }
                out.push(Effect::Apply {
                    old: Some(held.lease),
                    new: lease.clone(),
                });
                self.renewals = self.renewals.saturating_add(1);
                self.failures = 0;
                self.bind(lease, now);
            }
            (
                State::Renewing(held) | State::Rebinding(held) | State::Rebooting(held),
                Kind::Nak,
            ) => {
                let l = &held.lease;
                out.push(Effect::Remove(
                    l.clone(),
                    "the server refused to extend the lease",
                ));
                out.push(Effect::Say(format!(
                    "the DHCP server refused to extend the lease on {}/{}; \
                     the address is removed and a new lease asked for",
                    l.address, l.prefix
                )));
                self.last = Some(l.address);
                self.start_over_failed(now);
                out.extend(self.on_timer(now));
            }
            _ => {}
        }
        out
    }

    fn describe_grant(&self, lease: &Lease) -> String {
        let mut text = format!("leased {}/{}", lease.address, lease.prefix);
        if let Some(server) = lease.server {
            text.push_str(&format!(" from {server}"));
        }
        match decide_times(lease) {
            Some(t) => text.push_str(&format!(" for {} s", t.expiry.as_secs())),
            None => text.push_str(" with no end"),
        }
        if let Some(last) = self.last.filter(|l| *l != lease.address) {
            text.push_str(&format!(", a new address (was {last})"));
        }
        text
    }

    fn bind(&mut self, lease: Lease, now: Duration) {
        self.last = Some(lease.address);
        self.next = decide_times(&lease).map(|t| now.saturating_add(t.t1));
        self.state = State::Bound(Held {
            lease,
            granted: now,
        });
        self.tries = 0;
    }

    /// Gives the lease back (orderly shutdown): the RELEASE to send, if
    /// a lease is held. The keeper holds nothing afterwards.
    pub fn release(&mut self) -> Vec<Effect> {
        let Some(held) = self.held().cloned() else {
            return Vec::new();
        };
        self.new_xid();
        let l = held.lease;
        let to = l.server.map_or(To::Broadcast, To::Server);
        self.state = State::Selecting;
        self.next = None;
        vec![Effect::Send(
            dhcp::release(l.address, l.server, self.xid, self.mac),
            to,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    const SERVER: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    /// A server's reply of `kind` to the keeper's current transaction.
    fn reply(k: &Keeper, kind: Kind, address: [u8; 4], lease_secs: u32) -> Message {
        let mut m = dhcp::discover(k.xid, MAC);
        m.op = 2;
        m.kind = kind;
        m.your_ip = Ipv4Addr::from(address);
        m.server_id = Some(SERVER);
        m.subnet = Some(Ipv4Addr::new(255, 255, 255, 0));
        m.routers = vec![SERVER];
        m.dns = vec![SERVER];
        m.lease_secs = Some(lease_secs);
        m
    }

    fn lease(address: [u8; 4], secs: u32) -> Lease {
        Lease {
            address: Ipv4Addr::from(address),
            prefix: 24,
            router: Some(SERVER),
            dns: vec![SERVER],
            lease_secs: Some(secs),
            server: Some(SERVER),
            t1: None,
            t2: None,
            classless: Vec::new(),
        }
    }

    /// A keeper bound to 10.77.0.53 for 120 s at t = 10 s.
    fn bound() -> Keeper {
        let mut k = Keeper::new(MAC, 7, s(0));
        k.state = State::Bound(Held {
            lease: lease([10, 77, 0, 53], 120),
            granted: s(10),
        });
        k.next = Some(s(70));
        k.last = Some(Ipv4Addr::new(10, 77, 0, 53));
        k
    }

    /// The effects' kinds in a few words, for the tables.
    fn summary(effects: &[Effect]) -> Vec<String> {
        effects
            .iter()
            .map(|e| match e {
                Effect::Send(m, to) => format!(
                    "send {:?} ciaddr {} to {}",
                    m.kind,
                    m.client_ip,
                    match to {
                        To::Broadcast => "broadcast".to_owned(),
                        To::Server(a) => a.to_string(),
                    }
                ),
                Effect::Apply { old, new } => format!(
                    "apply {} (was {})",
                    new.address,
                    old.as_ref()
                        .map_or("none".to_owned(), |o| o.address.to_string())
                ),
                Effect::Remove(l, _) => format!("remove {}", l.address),
                Effect::Say(_) => "say".to_owned(),
            })
            .collect()
    }

    #[test]
    fn times_follow_the_server_or_the_rfc() {
        let mut l = lease([10, 0, 0, 2], 120);
        assert_eq!(
            decide_times(&l),
            Some(Times {
                t1: s(60),
                t2: s(105),
                expiry: s(120)
            })
        );
        l.t1 = Some(20);
        l.t2 = Some(40);
        assert_eq!(decide_times(&l).map(|t| (t.t1, t.t2)), Some((s(20), s(40))));
        // Out of order or past the end: the defaults.
        l.t1 = Some(200);
        l.t2 = Some(10);
        assert_eq!(
            decide_times(&l).map(|t| (t.t1, t.t2)),
            Some((s(60), s(105)))
        );
        l.lease_secs = Some(u32::MAX);
        assert_eq!(decide_times(&l), None);
        l.lease_secs = None;
        assert_eq!(decide_times(&l), None);
        // A one-second lease still orders its timers.
        l.lease_secs = Some(1);
        l.t1 = None;
        l.t2 = None;
        let t = decide_times(&l).unwrap();
        assert!(t.t1 <= t.t2 && t.t2 <= t.expiry);
    }

    #[test]
    fn backoff_and_retries() {
        let waits: Vec<u64> = (1..=7).map(|n| decide_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 16, 16]);
        assert_eq!(decide_backoff(u32::MAX), MAX_BACKOFF);
        // Half the time left, at least MIN_RETRY, never past the deadline.
        assert_eq!(
            decide_retry(s(70), s(115)),
            s(92) + Duration::from_millis(500)
        );
        assert_eq!(decide_retry(s(110), s(115)), s(115));
        assert_eq!(decide_retry(s(100), s(112)), s(106));
        assert_eq!(decide_retry(s(120), s(115)), s(115));
    }

    #[test]
    fn a_lease_is_taken_from_discover_to_ack() {
        let mut k = Keeper::new(MAC, 7, s(0));
        assert_eq!(
            summary(&k.on_timer(s(0))),
            ["send Discover ciaddr 0.0.0.0 to broadcast"]
        );
        assert_eq!(k.next, Some(s(1)));
        // Nothing is due before the timer.
        assert!(k.on_timer(Duration::from_millis(500)).is_empty());
        assert_eq!(
            summary(&k.on_timer(s(1))),
            ["send Discover ciaddr 0.0.0.0 to broadcast"]
        );
        assert_eq!(k.next, Some(s(3)));
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        let sent = k.on_message(&offer, s(2));
        assert_eq!(summary(&sent), ["send Request ciaddr 0.0.0.0 to broadcast"]);
        let Effect::Send(req, _) = &sent[0] else {
            unreachable!()
        };
        assert_eq!(req.requested_ip, Some(Ipv4Addr::new(10, 77, 0, 53)));
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        let got = k.on_message(&ack, s(3));
        assert_eq!(summary(&got), ["say", "apply 10.77.0.53 (was none)"]);
        let Effect::Say(line) = &got[0] else {
            unreachable!()
        };
        assert_eq!(line, "leased 10.77.0.53/24 from 10.77.0.1 for 120 s");
        assert_eq!(k.next, Some(s(63)));
        assert!(matches!(k.state, State::Bound(Held { granted, .. }) if granted == s(3)));
    }

    #[test]
    fn replies_that_are_not_ours_change_nothing() {
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        let mut offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        offer.xid = offer.xid.wrapping_add(1);
        assert!(k.on_message(&offer, s(1)).is_empty());
        // An ACK while selecting is someone else's.
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        assert!(k.on_message(&ack, s(1)).is_empty());
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        k.on_message(&offer, s(1));
        // An ACK from a server we did not ask.
        let mut other = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        other.server_id = Some(Ipv4Addr::new(10, 77, 0, 9));
        assert!(k.on_message(&other, s(2)).is_empty());
        assert!(matches!(k.state, State::Requesting(_)));
    }

    #[test]
    fn an_unanswered_request_starts_over() {
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        k.on_message(&offer, s(1));
        for _ in 1..REQUEST_TRIES {
            let t = k.next.unwrap();
            assert_eq!(
                summary(&k.on_timer(t)),
                ["send Request ciaddr 0.0.0.0 to broadcast"]
            );
        }
        let t = k.next.unwrap();
        assert_eq!(
            summary(&k.on_timer(t)),
            ["send Discover ciaddr 0.0.0.0 to broadcast"]
        );
        assert_eq!(k.state, State::Selecting);
    }

    /// The life of a 120-second lease granted at t = 10 s: each row is
    /// (time, what arrives: None for the timer, the state after, the
    /// effects).
    #[test]
    fn a_lease_is_renewed_rebound_and_expires_on_time() {
        type Row = (u64, &'static str, &'static [&'static str]);
        let rows: &[Row] = &[
            (69, "bound", &[]),
            (
                70,
                "renewing",
                &["send Request ciaddr 10.77.0.53 to 10.77.0.1"],
            ),
            // Half of the 45 s left to T2, then half again, at least 5 s.
            (92, "renewing", &[]),
            (
                93,
                "renewing",
                &["send Request ciaddr 10.77.0.53 to 10.77.0.1"],
            ),
            (
                104,
                "renewing",
                &["send Request ciaddr 10.77.0.53 to 10.77.0.1"],
            ),
            (109, "renewing", &[]),
            (
                110,
                "renewing",
                &["send Request ciaddr 10.77.0.53 to 10.77.0.1"],
            ),
            (
                115,
                "rebinding",
                &["send Request ciaddr 10.77.0.53 to broadcast"],
            ),
            (122, "rebinding", &[]),
            (
                123,
                "rebinding",
                &["send Request ciaddr 10.77.0.53 to broadcast"],
            ),
            (
                128,
                "rebinding",
                &["send Request ciaddr 10.77.0.53 to broadcast"],
            ),
            (
                130,
                "selecting",
                &[
                    "remove 10.77.0.53",
                    "say",
                    "send Discover ciaddr 0.0.0.0 to broadcast",
                ],
            ),
        ];
        let mut k = bound();
        for (at, state, effects) in rows {
            let got = k.on_timer(s(*at));
            let name = match k.state {
                State::Selecting => "selecting",
                State::Requesting(_) => "requesting",
                State::Bound(_) => "bound",
                State::Renewing(_) => "renewing",
                State::Rebinding(_) => "rebinding",
                State::Rebooting(_) => "rebooting",
            };
            assert_eq!(
                (name, summary(&got)),
                (*state, effects.iter().map(|e| e.to_string()).collect()),
                "at {at} s"
            );
        }
    }

    #[test]
    fn a_renewal_keeps_the_address_and_counts() {
        let mut k = bound();
        k.on_timer(s(70));
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        let got = k.on_message(&ack, s(71));
        // Quiet: the same address needs no console line.
        assert_eq!(summary(&got), ["apply 10.77.0.53 (was 10.77.0.53)"]);
        assert_eq!(k.renewals, 1);
        assert_eq!(k.next, Some(s(131)));
        // The ACK of the renewal before does not count twice.
        assert!(k.on_message(&ack, s(72)).is_empty());
    }

    #[test]
    fn a_moved_lease_is_applied_over_the_old_one() {
        let mut k = bound();
        k.on_timer(s(115));
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 120], 120);
        let got = k.on_message(&ack, s(116));
        assert_eq!(summary(&got), ["say", "apply 10.77.0.120 (was 10.77.0.53)"]);
        let Effect::Say(line) = &got[0] else {
            unreachable!()
        };
        assert!(line.ends_with("a new address (was 10.77.0.53)"), "{line}");
    }

    #[test]
    fn a_refused_renewal_removes_the_address_and_starts_over() {
        let mut k = bound();
        k.on_timer(s(70));
        let nak = reply(&k, Kind::Nak, [0, 0, 0, 0], 0);
        let got = k.on_message(&nak, s(71));
        assert_eq!(
            summary(&got),
            [
                "remove 10.77.0.53",
                "say",
                "send Discover ciaddr 0.0.0.0 to broadcast"
            ]
        );
        // The next lease names the old address.
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 120], 120);
        k.on_message(&offer, s(72));
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 120], 120);
        let got = k.on_message(&ack, s(73));
        let Effect::Say(line) = &got[0] else {
            unreachable!()
        };
        assert!(line.ends_with("(was 10.77.0.53)"), "{line}");
    }

    #[test]
    fn a_nak_to_a_request_waits_before_asking_again() {
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        k.on_message(&offer, s(1));
        let nak = reply(&k, Kind::Nak, [0, 0, 0, 0], 0);
        assert!(k.on_message(&nak, s(1)).is_empty());
        assert_eq!((k.state.clone(), k.next), (State::Selecting, Some(s(3))));
    }

    #[test]
    fn release_gives_the_lease_back_once() {
        let mut k = bound();
        assert_eq!(
            summary(&k.release()),
            ["send Release ciaddr 10.77.0.53 to 10.77.0.1"]
        );
        assert!(k.release().is_empty());
        assert_eq!(k.next, None);
        assert!(Keeper::new(MAC, 1, s(0)).release().is_empty());
    }

    #[test]
    fn a_lease_without_an_end_is_never_renewed() {
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], u32::MAX);
        k.on_message(&offer, s(1));
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], u32::MAX);
        let got = k.on_message(&ack, s(2));
        let Effect::Say(line) = &got[0] else {
            unreachable!()
        };
        assert!(line.ends_with("with no end"), "{line}");
        assert_eq!(k.next, None);
        assert!(k.on_timer(s(1_000_000)).is_empty());
    }

    #[test]
    fn a_hundred_renewals_hold_the_same_state() {
        let mut k = bound();
        let mut t = s(70);
        for _ in 0..100 {
            k.on_timer(t);
            let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
            assert_eq!(k.on_message(&ack, t).len(), 1);
            t = k.next.unwrap();
        }
        assert_eq!(k.renewals, 100);
        assert!(matches!(k.state, State::Bound(_)));
    }

    /// (lease time, T1, T2) as the server sent them, and the timers
    /// the keeper runs, in seconds.
    #[test]
    fn floors_keep_odd_lease_times_from_storming() {
        type Row = (
            Option<u32>,
            Option<u32>,
            Option<u32>,
            Option<(u64, u64, u64)>,
        );
        let rows: &[Row] = &[
            (Some(0), None, None, Some((10, 17, 20))),
            (Some(1), None, None, Some((10, 17, 20))),
            (Some(20), None, None, Some((10, 17, 20))),
            (Some(120), Some(0), None, Some((60, 105, 120))),
            (Some(120), Some(2), Some(0), Some((60, 105, 120))),
            (Some(120), Some(3), Some(0), Some((3, 105, 120))),
            (Some(120), Some(9), Some(20), Some((9, 20, 120))),
            (Some(0), Some(0), Some(0), Some((10, 17, 20))),
            (Some(3600), Some(1800), Some(3150), Some((1800, 3150, 3600))),
            (None, Some(5), None, None),
            (Some(u32::MAX), None, None, None),
        ];
        for (secs, t1, t2, want) in rows {
            let mut l = lease([10, 0, 0, 2], 0);
            (l.lease_secs, l.t1, l.t2) = (*secs, *t1, *t2);
            let got =
                decide_times(&l).map(|t| (t.t1.as_secs(), t.t2.as_secs(), t.expiry.as_secs()));
            assert_eq!(got, *want, "{secs:?} {t1:?} {t2:?}");
        }
    }

    /// A server that grants a lease of 0 with T1 0 and never answers a
    /// renewal: over ten minutes the keeper sends a bounded number of
    /// messages, and the DISCOVERs after each expiry spread out.
    #[test]
    fn a_zero_lease_does_not_storm() {
        let mut k = Keeper::new(MAC, 7, s(0));
        let mut sent = 0;
        let mut discovers_at = Vec::new();
        let mut t = s(0);
        while t < s(600) {
            for e in k.on_timer(t) {
                if let Effect::Send(m, _) = e {
                    sent += 1;
                    if m.kind == Kind::Discover {
                        discovers_at.push(t.as_secs());
                        let mut offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 0);
                        offer.t1 = Some(0);
                        let req = k.on_message(&offer, t);
                        assert_eq!(req.len(), 1);
                        let mut ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 0);
                        ack.t1 = Some(0);
                        k.on_message(&ack, t);
                    }
                }
            }
            t = k.next.unwrap().max(t);
        }
        // Each 20-second lease costs a handful of renewal tries.
        assert!(sent < 200, "{sent} messages in ten minutes");
        let gaps: Vec<u64> = discovers_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g >= 20), "{gaps:?}");
        assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
        assert_eq!(decide_discover_wait(1), s(0));
        assert_eq!(decide_discover_wait(2), s(1));
        assert_eq!(decide_discover_wait(3), s(2));
        assert_eq!(decide_discover_wait(50), MAX_BACKOFF);
    }

    #[test]
    fn a_renewal_without_mask_or_lease_time_keeps_them() {
        let mut held = lease([10, 77, 0, 53], 120);
        held.prefix = 26;
        type Row = (bool, bool, u8, Option<u32>);
        let rows: &[Row] = &[
            (true, true, 24, Some(300)),
            (false, true, 26, Some(300)),
            (true, false, 24, Some(120)),
            (false, false, 26, Some(120)),
        ];
        let k = bound();
        for (mask, time, prefix, secs) in rows {
            let mut ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 300);
            if !mask {
                ack.subnet = None;
            }
            if !time {
                ack.lease_secs = None;
            }
            let got = decide_renewed(&held, &ack);
            assert_eq!(
                (got.prefix, got.lease_secs),
                (*prefix, *secs),
                "{mask} {time}"
            );
        }
        // Through the keeper: the renewal applies the known prefix.
        let mut k = bound();
        k.on_timer(s(70));
        let mut ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        ack.subnet = None;
        ack.lease_secs = None;
        let got = k.on_message(&ack, s(71));
        let Some(Effect::Apply { new, .. }) = got.last() else {
            panic!("{got:?}");
        };
        assert_eq!((new.prefix, new.lease_secs), (24, Some(120)));
        assert_eq!(k.next, Some(s(131)));
    }

    #[test]
    fn leases_no_host_can_use_are_refused() {
        type Row = (
            [u8; 4],
            Option<[u8; 4]>,
            Option<[u8; 4]>,
            Option<&'static str>,
        );
        let rows: &[Row] = &[
            (
                [10, 77, 0, 53],
                Some([255, 255, 255, 0]),
                Some([10, 77, 0, 1]),
                None,
            ),
            ([0, 0, 0, 0], None, None, Some("no host may hold")),
            ([255, 255, 255, 255], None, None, Some("no host may hold")),
            ([224, 0, 0, 5], None, None, Some("no host may hold")),
            ([127, 0, 0, 2], None, None, Some("no host may hold")),
            (
                [10, 77, 0, 53],
                Some([0, 0, 0, 0]),
                None,
                Some("the subnet mask is 0.0.0.0"),
            ),
            (
                [10, 77, 0, 53],
                None,
                Some([0, 0, 0, 0]),
                Some("the router is 0.0.0.0"),
            ),
            (
                [10, 77, 0, 255],
                Some([255, 255, 255, 0]),
                None,
                Some("network or broadcast address"),
            ),
            (
                [10, 77, 0, 0],
                Some([255, 255, 255, 0]),
                None,
                Some("network or broadcast address"),
            ),
            // /31 and /32 have no broadcast address.
            ([10, 77, 0, 1], Some([255, 255, 255, 254]), None, None),
            ([203, 0, 113, 7], Some([255, 255, 255, 255]), None, None),
        ];
        let k = Keeper::new(MAC, 7, s(0));
        for (address, mask, router, why) in rows {
            let mut m = reply(&k, Kind::Ack, *address, 120);
            m.subnet = mask.map(Ipv4Addr::from);
            m.routers = router.map(Ipv4Addr::from).into_iter().collect();
            let got = decide_refusal(&m);
            match why {
                None => assert_eq!(got, None, "{address:?}"),
                Some(w) => {
                    let line = got.unwrap_or_else(|| panic!("{address:?} was taken"));
                    assert!(
                        line.contains(w) && line.contains("from 10.77.0.1"),
                        "{line}"
                    );
                }
            }
        }
        // An offer of one is not requested; an ACK of one is not applied.
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        let offer = reply(&k, Kind::Offer, [127, 0, 0, 2], 120);
        assert_eq!(summary(&k.on_message(&offer, s(1))), ["say"]);
        assert_eq!(k.state, State::Selecting);
        let offer = reply(&k, Kind::Offer, [10, 77, 0, 53], 120);
        k.on_message(&offer, s(1));
        let mut ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        ack.routers = vec![Ipv4Addr::UNSPECIFIED];
        assert_eq!(summary(&k.on_message(&ack, s(2))), ["say"]);
        assert_eq!(k.state, State::Selecting);
    }

    #[test]
    fn skipped_options_are_named_once() {
        let mut k = bound();
        k.on_timer(s(70));
        let mut ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        ack.skipped = vec![dhcp::Skipped {
            code: 6,
            why: "its length is not a non-zero multiple of 4",
        }];
        let got = k.on_message(&ack, s(71));
        let Effect::Say(line) = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(
            line,
            "skipped the DNS servers (option 6) from server 10.77.0.1: its length is not a \
             non-zero multiple of 4"
        );
        let t = k.next.unwrap();
        k.on_timer(t);
        let mut again = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        again.skipped = ack.skipped.clone();
        assert_eq!(
            summary(&k.on_message(&again, t)),
            ["apply 10.77.0.53 (was 10.77.0.53)"]
        );
    }

    #[test]
    fn a_link_back_up_checks_its_lease() {
        let mut k = bound();
        let got = k.on_link_up(s(30));
        assert_eq!(summary(&got), ["send Request ciaddr 0.0.0.0 to broadcast"]);
        let Effect::Send(m, _) = &got[0] else {
            unreachable!()
        };
        assert_eq!(
            (m.requested_ip, m.server_id),
            (Some(Ipv4Addr::new(10, 77, 0, 53)), None)
        );
        assert!(matches!(k.state, State::Rebooting(_)));
        // Confirmed: bound again from now.
        let ack = reply(&k, Kind::Ack, [10, 77, 0, 53], 120);
        assert_eq!(
            summary(&k.on_message(&ack, s(31))),
            ["apply 10.77.0.53 (was 10.77.0.53)"]
        );
        assert_eq!(k.next, Some(s(91)));
        // Refused (another network now): removed and asked for anew.
        k.on_link_up(s(40));
        let nak = reply(&k, Kind::Nak, [0, 0, 0, 0], 0);
        assert_eq!(
            summary(&k.on_message(&nak, s(41))),
            [
                "remove 10.77.0.53",
                "say",
                "send Discover ciaddr 0.0.0.0 to broadcast"
            ]
        );
        // Unanswered: after the tries the lease's timers go on.
        let mut k = bound();
        k.on_link_up(s(30));
        for _ in 1..REQUEST_TRIES {
            let t = k.next.unwrap();
            assert_eq!(summary(&k.on_timer(t)).len(), 1);
        }
        let t = k.next.unwrap();
        assert!(k.on_timer(t).is_empty());
        assert!(matches!(k.state, State::Bound(_)));
        assert_eq!(k.next, Some(s(70)));
        // Without a lease, a link up asks at once.
        let mut k = Keeper::new(MAC, 7, s(0));
        k.on_timer(s(0));
        assert_eq!(
            summary(&k.on_link_up(Duration::from_millis(300))),
            ["send Discover ciaddr 0.0.0.0 to broadcast"]
        );
    }
}
