//! The network thread: keeps the DHCP leases, rewrites resolv.conf when
//! their DNS servers change, and publishes the running network's facts
//! (`/run/liken/facts/network.json`) whenever the kernel reports a change.
//!
//! One thread, waiting in poll(2) on a stop socket, a netlink socket
//! subscribed to link, address and route changes, and one DHCP client
//! socket per interface, with the nearest lease timer as its timeout.
//! It never blocks the supervisor loop: what the loop must know (an
//! address that changed under k3s) reaches it as an [`Event`] on its
//! channel, and the boot step that started the thread waits for the
//! first leases on a channel of its own, with a deadline.
//!
//! Everything it decides is decided by [`super::lease::Keeper`] and the
//! pure functions of [`super`] and [`super::facts`]; this module is the
//! thin part that sends, receives, applies and writes.
//!
//! Stopping ([`Daemon::stop`], from the orderly shutdown) gives every
//! lease back with a RELEASE and ends the thread; the shutdown waits
//! for that with a deadline.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use liken_api::Time;
use liken_api::machine::NetworkSpec;
use liken_api::network::{AddressChange, LeaseFacts, LeaseState, NetworkFacts};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::dhcp::{self, Lease};
use super::facts;
use super::lease::{Effect, Keeper, State, To, decide_times};
use super::routes::{LeaseRoute, decide_lease_routes};
use crate::console;
use crate::events::Event;
use crate::sys::netlink::{self, Netlink, Op, Request, rta};

/// How long facts wait after a kernel notification for more to come,
/// so a burst (a link coming up with its addresses and routes) is read
/// once.
const SETTLE: Duration = Duration::from_millis(300);

/// What the thread needs.
pub struct Setup {
    /// The interfaces to keep leases on.
    pub dhcp: Vec<super::DhcpLink>,
    /// The network spec (its static DNS servers).
    pub spec: NetworkSpec,
    /// What the boot could not apply, for the facts.
    pub problems: Vec<String>,
    /// Where network.json goes.
    pub run_liken: PathBuf,
    /// The resolver configuration it writes.
    pub resolv_conf: PathBuf,
    /// The kernel.
    pub netlink: Arc<dyn Netlink + Send + Sync>,
    /// The supervisor loop's channel.
    pub events: Sender<Event>,
}

/// What the thread tells the boot step that started it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// It runs, and resolv.conf names the static servers.
    Started,
    /// An interface holds its first lease (`eth0 10.0.2.15/24 by
    /// DHCP`), and resolv.conf names its servers.
    Bound(String),
}

/// The running thread, and the socket pair the boot step and the
/// shutdown talk to it through (a datagram each way: `started`,
/// `bound <what>` and `done` from it, `stop` to it), which its poll
/// waits on with the rest.
pub struct Daemon {
    socket: UnixDatagram,
}

const STARTED: &[u8] = b"started";
const BOUND: &[u8] = b"bound ";
const DONE: &[u8] = b"done";

impl Daemon {
    /// The length of the next datagram from the thread, read into
    /// `buf`; `None` once `within` has passed since `started` (or the
    /// thread ended).
    fn next_datagram(&self, started: Instant, within: Duration, buf: &mut [u8]) -> Option<usize> {
        let left = within.saturating_sub(started.elapsed());
        if left.is_zero() {
            return None;
        }
        self.socket.set_read_timeout(Some(left)).ok()?;
        self.socket.recv(buf).ok()
    }

    /// The next thing the thread says within `within`; `None` when it
    /// said nothing in time (or ended).
    pub fn next_ready(&self, within: Duration) -> Option<Ready> {
        let mut buf = [0u8; 256];
        let started = Instant::now();
        loop {
            let n = self.next_datagram(started, within, &mut buf)?;
            let got = buf.get(..n).unwrap_or(&[]);
            if got == STARTED {
                return Some(Ready::Started);
            }
            if let Some(what) = got.strip_prefix(BOUND) {
                return Some(Ready::Bound(String::from_utf8_lossy(what).into_owned()));
            }
        }
    }

    /// Asks the thread to give its leases back and end; whether it did
    /// within `within`.
    pub fn stop(&self, within: Duration) -> bool {
        let _ = self.socket.send(b"stop");
        let mut buf = [0u8; 256];
        let started = Instant::now();
        while let Some(n) = self.next_datagram(started, within, &mut buf) {
            if buf.get(..n) == Some(DONE) {
                return true;
            }
        }
        false
    }
}

/// Starts the thread.
pub fn spawn(setup: Setup) -> io::Result<Daemon> {
    let (ours, theirs) = UnixDatagram::pair()?;
    // The thread never waits to tell the step something: what nobody
    // reads (a late lease, after the boot went on) is dropped.
    theirs.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("network".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut t = Thread::new(setup, &theirs);
            t.run();
            let _ = theirs.send(DONE);
        })?;
    Ok(Daemon { socket: ours })
}

/// One interface's lease and its socket.
struct Slot {
    name: String,
    index: u32,
    /// Static routes added after each new lease.
    routes: Vec<super::StaticRoute>,
    /// The interface's route metric.
    metric: u32,
    /// The destinations the Machine routes statically here.
    statics: Vec<(IpAddr, u8)>,
    socket: Option<UdpSocket>,
    keeper: Keeper,
    /// The lease on the interface now.
    applied: Option<Lease>,
    /// The address the interface last held, this boot.
    before: Option<Ipv4Addr>,
    /// Whether the link had a carrier when last heard of.
    carrier: Option<bool>,
}

struct Thread<'a> {
    setup: Setup,
    /// The step's and the shutdown's socket.
    talk: &'a UnixDatagram,
    /// CLOCK_BOOTTIME when the thread started.
    started: Duration,
    slots: Vec<Slot>,
    facts: NetworkFacts,
    /// resolv.conf as last written, if ever.
    resolv: Option<String>,
    /// When the facts are due to be read and written again.
    publish_at: Option<Duration>,
    /// The kernel's problems already said on the console.
    said: Vec<String>,
}

impl<'a> Thread<'a> {
    fn new(setup: Setup, talk: &'a UnixDatagram) -> Thread<'a> {
        let started = boottime();
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let mut facts = NetworkFacts {
            problems: setup.problems.clone(),
            ..NetworkFacts::default()
        };
        let slots = setup
            .dhcp
            .iter()
            .map(|link| {
                let (name, mac) = (&link.name, link.mac);
                let socket = dhcp::open_socket(name)
                    .map_err(|e| {
                        let text = format!("{name}: cannot open the DHCP client socket: {e}");
                        console::line(&format!("dhcp: {text}"));
                        facts.problems.push(text);
                    })
                    .ok();
                Slot {
                    name: name.clone(),
                    index: link.index,
                    routes: link.routes.clone(),
                    metric: link.metric,
                    statics: link.statics.clone(),
                    socket,
                    keeper: Keeper::new(mac, dhcp::decide_xid(mac, wall), Duration::ZERO),
                    applied: None,
                    before: None,
                    carrier: None,
                }
            })
            .collect();
        Thread {
            setup,
            talk,
            started,
            slots,
            facts,
            resolv: None,
            publish_at: Some(Duration::ZERO),
            said: Vec::new(),
        }
    }

    /// The lease timers' clock: CLOCK_BOOTTIME since the thread
    /// started, which (unlike the monotonic clock) goes on while the
    /// machine is suspended or its VM paused, so a lease that ran out
    /// meanwhile is seen to have run out.
    fn now(&self) -> Duration {
        boottime().saturating_sub(self.started)
    }

    fn run(&mut self) {
        let stop = self.talk;
        // Without notifications the facts are still rewritten whenever a
        // lease changes; the console says what is missing.
        let monitor = netlink::open(netlink::MONITOR_GROUPS)
            .map_err(|e| {
                console::line(&format!(
                    "network thread: cannot watch the kernel's network changes ({e}); \
                     the published facts follow the leases only"
                ))
            })
            .ok();
        self.write_resolv();
        let _ = self.talk.send(STARTED);
        let mut buf = vec![0u8; 8 * 1024];
        loop {
            let now = self.now();
            for i in 0..self.slots.len() {
                if let Some(slot) = self.slots.get_mut(i) {
                    let effects = slot.keeper.on_timer(now);
                    self.carry_out(i, effects);
                }
            }
            if self.publish_at.is_some_and(|at| at <= self.now()) {
                self.publish();
            }
            let wake = self
                .slots
                .iter()
                .filter(|s| s.socket.is_some())
                .filter_map(|s| s.keeper.next)
                .chain(self.publish_at)
                .min();
            let timeout = wake.map_or(PollTimeout::NONE, |at| {
                let wait = at
                    .saturating_sub(self.now())
                    .saturating_add(Duration::from_millis(1));
                PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX)
            });
            let (stopping, changed, readable) = {
                let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
                if let Some(m) = &monitor {
                    fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
                }
                let first_socket = fds.len();
                let with_socket: Vec<usize> = (0..self.slots.len())
                    .filter(|i| self.slots.get(*i).is_some_and(|s| s.socket.is_some()))
                    .collect();
                for s in self.slots.iter().filter_map(|s| s.socket.as_ref()) {
                    fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
                }
                if poll(&mut fds, timeout).is_err() {
                    // EINTR: go round again.
                    continue;
                }
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                let stopping = fds.first().is_some_and(ready);
                let changed = monitor.is_some() && fds.get(1).is_some_and(ready);
                let readable: Vec<usize> = with_socket
                    .iter()
                    .enumerate()
                    .filter(|(n, _)| fds.get(first_socket.saturating_add(*n)).is_some_and(ready))
                    .map(|(_, i)| *i)
                    .collect();
                (stopping, changed, readable)
            };
            if stopping {
                self.release_all();
                return;
            }
            if changed && let Some(m) = &monitor {
                let carriers = drain(m, &mut buf);
                self.on_carriers(&carriers);
                let at = self.now().saturating_add(SETTLE);
                self.publish_at = Some(self.publish_at.map_or(at, |p| p.min(at)));
            }
            for i in readable {
                self.receive(i, &mut buf);
            }
        }
    }

    /// Reads every datagram waiting on slot `i`'s socket.
    fn receive(&mut self, i: usize, buf: &mut [u8]) {
        for _ in 0..64 {
            let Some(socket) = self.slots.get(i).and_then(|s| s.socket.as_ref()) else {
                return;
            };
            let n = match socket.recv_from(buf) {
                Ok((n, _)) => n,
                Err(_) => return,
            };
            let Some(Ok(m)) = buf.get(..n).map(dhcp::decode) else {
                continue;
            };
            let now = self.now();
            let effects = match self.slots.get_mut(i) {
                Some(slot) => slot.keeper.on_message(&m, now),
                None => return,
            };
            self.carry_out(i, effects);
        }
    }

    /// A link that regained its carrier re-checks its lease.
    fn on_carriers(&mut self, carriers: &[(u32, bool)]) {
        let now = self.now();
        for (index, up) in carriers {
            let Some(i) = self.slots.iter().position(|s| s.index == *index) else {
                continue;
            };
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            let before = slot.carrier.replace(*up);
            if *up && before == Some(false) {
                let effects = slot.keeper.on_link_up(now);
                self.carry_out(i, effects);
            }
        }
    }

    fn carry_out(&mut self, i: usize, effects: Vec<Effect>) {
        for effect in effects {
            let Some(slot) = self.slots.get_mut(i) else {
                return;
            };
            match effect {
                Effect::Send(m, to) => {
                    let dest = match to {
                        To::Broadcast => Ipv4Addr::BROADCAST,
                        To::Server(a) => a,
                    };
                    if let Some(s) = &slot.socket {
                        // A lost datagram is what the retries are for.
                        let _ = s.send_to(
                            &dhcp::encode(&m),
                            SocketAddrV4::new(dest, dhcp::SERVER_PORT),
                        );
                    }
                }
                Effect::Say(text) => console::line(&format!("dhcp: {}: {text}", slot.name)),
                Effect::Apply { new, .. } => {
                    self.apply_lease(i, new);
                    self.publish_at = Some(self.now());
                }
                Effect::Remove(lease, reason) => {
                    self.take_off(i, &lease);
                    self.record(i, Some(&lease), None, reason);
                    self.write_resolv();
                    self.publish_at = Some(self.now());
                }
            }
        }
    }

    fn record(&mut self, i: usize, from: Option<&Lease>, to: Option<&Lease>, reason: &str) {
        let cidr = |l: &Lease| format!("{}/{}", l.address, l.prefix);
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        self.facts.push_change(AddressChange {
            time: Time::from_system(SystemTime::now()),
            interface: slot.name.clone(),
            from: from.map(cidr),
            to: to.map(cidr),
            reason: reason.to_owned(),
        });
    }

    /// Takes a lease's default route and address off its interface.
    fn take_off(&mut self, i: usize, lease: &Lease) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let nl = &*self.setup.netlink;
        let (routes, _) = decide_lease_routes(lease, &slot.statics);
        remove_routes(nl, slot.index, slot.metric, &routes);
        let _ = nl.apply(&Request::Address {
            op: Op::Remove,
            index: slot.index,
            address: lease.address.into(),
            prefix: lease.prefix,
        });
        slot.applied = None;
    }

    fn apply_lease(&mut self, i: usize, new: Lease) {
        let nl = Arc::clone(&self.setup.netlink);
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let (name, index, metric) = (slot.name.clone(), slot.index, slot.metric);
        let routes = slot.routes.clone();
        let (leased, skipped) = decide_lease_routes(&new, &slot.statics);
        let old = slot.applied.clone();
        let moved = old
            .as_ref()
            .is_some_and(|o| (o.address, o.prefix) != (new.address, new.prefix));
        match &old {
            // The old address goes first: were it the subnet's primary,
            // removing it later would take the new one with it.
            Some(o) if moved => self.take_off(i, o),
            Some(o) => {
                // Only the routes the new lease no longer has.
                let Some(slot) = self.slots.get(i) else {
                    return;
                };
                let (before, _) = decide_lease_routes(o, &slot.statics);
                let gone: Vec<LeaseRoute> =
                    before.into_iter().filter(|r| !leased.contains(r)).collect();
                remove_routes(&*nl, index, metric, &gone);
            }
            None => {}
        }
        let add = Request::Address {
            op: Op::Add,
            index,
            address: new.address.into(),
            prefix: new.prefix,
        };
        if let Err(e) = nl.apply(&add) {
            console::line(&format!(
                "dhcp: {name}: cannot add the leased {}/{}: {e}",
                new.address, new.prefix
            ));
        }
        if old.is_none() || moved {
            for text in &skipped {
                console::line(&format!("dhcp: {name}: {text}"));
            }
        }
        for r in &leased {
            if let Err(e) = nl.apply(&route_request(Op::Add, index, metric, r)) {
                let via = r
                    .gateway
                    .map_or("on the link".to_owned(), |g| format!("via {g}"));
                console::line(&format!(
                    "dhcp: {name}: cannot add the leased route to {}/{} {via}: {e}",
                    r.destination, r.prefix
                ));
            }
        }
        // The Machine's routes through the lease's subnet, on a new
        // lease (a renewal keeps them).
        if old.is_none() || moved {
            for r in &routes {
                let add = Request::Route {
                    op: Op::Add,
                    index,
                    destination: r.destination,
                    prefix: r.prefix,
                    gateway: Some(r.gateway),
                    metric,
                    protocol: rta::PROTO_BOOT,
                };
                if let Err(e) = nl.apply(&add) {
                    let text = format!(
                        "{name}: cannot add the route to {}/{} via {}: {e}; check that the \
                         gateway is inside the subnet the DHCP server leases",
                        r.destination, r.prefix, r.gateway
                    );
                    console::line(&format!("dhcp: {text}"));
                    if !self.facts.problems.contains(&text) {
                        self.facts.problems.push(text);
                    }
                }
            }
        }
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let before = slot.before.replace(new.address);
        slot.applied = Some(new.clone());
        if old.is_none() || moved {
            let reason = match before {
                None => "leased",
                Some(b) if b == new.address => "leased again",
                Some(_) => "the server gave another address",
            };
            self.record(i, old.as_ref().filter(|_| moved), Some(&new), reason);
        }
        self.write_resolv();
        match before {
            None => {
                let what = format!("{name} {}/{} by DHCP", new.address, new.prefix);
                let _ = self.talk.send(&[BOUND, what.as_bytes()].concat());
            }
            // k3s found its node address on the old one: the supervisor
            // loop restarts it on the new one.
            Some(b) if b != new.address => {
                let _ = self.setup.events.send(Event::AddressChanged {
                    interface: name,
                    from: b.to_string(),
                    to: new.address.to_string(),
                });
            }
            Some(_) => {}
        }
    }

    /// Rewrites resolv.conf when its servers changed; an image's own
    /// file is left alone until there is a server to name.
    fn write_resolv(&mut self) {
        let leased: Vec<Ipv4Addr> = self
            .slots
            .iter()
            .filter_map(|s| s.applied.as_ref())
            .flat_map(|l| l.dns.iter().copied())
            .collect();
        let servers = super::decide_servers(&self.setup.spec, &leased);
        let text = super::decide_resolv(&servers);
        if self.resolv.as_deref() == Some(text.as_str())
            || (self.resolv.is_none() && servers.is_empty())
        {
            return;
        }
        let path = &self.setup.resolv_conf;
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::fsutil::write_atomic(path, text.as_bytes(), 0o644));
        match written {
            Ok(()) => {
                self.facts.dns = servers.iter().map(IpAddr::to_string).collect();
                self.resolv = Some(text);
            }
            Err(e) => console::line(&format!(
                "network thread: cannot write {}: {e}; names will not resolve",
                path.display()
            )),
        }
    }

    /// Reads the kernel and writes network.json.
    fn publish(&mut self) {
        self.publish_at = None;
        let now = self.now();
        let wall = SystemTime::now();
        let at = |mono: Duration| {
            let t = if mono >= now {
                wall.checked_add(mono.saturating_sub(now))
            } else {
                wall.checked_sub(now.saturating_sub(mono))
            };
            Time::from_system(t.unwrap_or(wall))
        };
        let kernel = match facts::read(&*self.setup.netlink) {
            Ok(k) => k,
            // The next change tries again.
            Err(_) => return,
        };
        let leased: Vec<IpAddr> = self
            .slots
            .iter()
            .filter_map(|s| s.applied.as_ref())
            .map(|l| l.address.into())
            .collect();
        let mut out = facts::decide_facts(&kernel, &leased);
        out.time = Time::from_system(wall);
        out.dns = self.facts.dns.clone();
        out.changes = self.facts.changes.clone();
        // Duplicate address detection failures are said once each.
        let found = std::mem::replace(&mut out.problems, self.facts.problems.clone());
        for problem in found {
            if !self.said.contains(&problem) {
                console::line(&format!("network: {problem}"));
                self.said.push(problem.clone());
            }
            out.problems.push(problem);
        }
        out.leases = self.slots.iter().map(|s| lease_facts(s, &at)).collect();
        let mut bytes = serde_json::to_vec(&out).unwrap_or_default();
        bytes.push(b'\n');
        let path = self.setup.run_liken.join(liken_api::ondisk::NETWORK_FACTS);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = crate::fsutil::write_atomic(&path, &bytes, 0o644);
    }

    fn release_all(&mut self) {
        for i in 0..self.slots.len() {
            let effects = match self.slots.get_mut(i) {
                Some(slot) => slot.keeper.release(),
                None => continue,
            };
            let sent: Vec<Effect> = effects
                .into_iter()
                .filter(|e| matches!(e, Effect::Send(..)))
                .collect();
            if let (false, Some(slot)) = (sent.is_empty(), self.slots.get(i)) {
                console::line(&format!("dhcp: {}: lease released", slot.name));
            }
            self.carry_out(i, sent);
        }
    }
}

/// The netlink request that adds or removes lease route `r` of the
/// interface `index` at `metric`.
pub fn route_request(op: Op, index: u32, metric: u32, r: &LeaseRoute) -> Request {
    Request::Route {
        op,
        index,
        destination: r.destination.into(),
        prefix: r.prefix,
        gateway: r.gateway.map(IpAddr::V4),
        metric,
        protocol: rta::PROTO_DHCP,
    }
}

/// Removes `routes` (a lease's), the routes through a gateway before
/// the on-link routes that made their gateways reachable.
pub fn remove_routes(nl: &dyn Netlink, index: u32, metric: u32, routes: &[LeaseRoute]) {
    for r in routes.iter().rev() {
        let _ = nl.apply(&route_request(Op::Remove, index, metric, r));
    }
}

/// Reads whatever is waiting on the monitor socket without blocking;
/// the links whose carrier it reported, in order.
fn drain(monitor: &OwnedFd, buf: &mut [u8]) -> Vec<(u32, bool)> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut carriers = Vec::new();
    for _ in 0..256 {
        match recv(monitor.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => carriers.extend(decide_carriers(buf.get(..n).unwrap_or(&[]))),
            Err(_) => break,
        }
    }
    carriers
}

/// The links a batch of netlink notifications reports, each with
/// whether it has a carrier (IFF_LOWER_UP and IFF_UP).
pub fn decide_carriers(batch: &[u8]) -> Vec<(u32, bool)> {
    const RTM_NEWLINK: u16 = 16;
    netlink::messages(batch)
        .filter(|(kind, _, _)| *kind == RTM_NEWLINK)
        .filter_map(|(_, _, payload)| {
            let index = netlink::read_u32(payload, 4)?;
            let flags = netlink::read_u32(payload, 8)?;
            let want = netlink::IFF_UP | netlink::IFF_LOWER_UP;
            Some((index, flags & want == want))
        })
        .collect()
}

/// CLOCK_BOOTTIME: monotonic, and counting time suspended.
fn boottime() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

fn lease_facts(slot: &Slot, at: &dyn Fn(Duration) -> Time) -> LeaseFacts {
    let mut f = LeaseFacts {
        interface: slot.name.clone(),
        renewals: slot.keeper.renewals,
        ..LeaseFacts::default()
    };
    let held = match &slot.keeper.state {
        State::Selecting | State::Requesting(_) => return f,
        State::Bound(h) => {
            f.state = LeaseState::Bound;
            h
        }
        State::Renewing(h) => {
            f.state = LeaseState::Renewing;
            h
        }
        State::Rebinding(h) => {
            f.state = LeaseState::Rebinding;
            h
        }
        // Asking whether the lease stands after the link came back:
        // the published states have no word of their own for it.
        State::Rebooting(h) => {
            f.state = LeaseState::Renewing;
            h
        }
    };
    let l = &held.lease;
    f.address = Some(format!("{}/{}", l.address, l.prefix));
    f.router = l.router.map(|r| r.to_string());
    f.server = l.server.map(|s| s.to_string());
    f.dns = l.dns.iter().map(Ipv4Addr::to_string).collect();
    f.granted = Some(at(held.granted));
    if let Some(t) = decide_times(l) {
        f.renew_at = Some(at(held.granted.saturating_add(t.t1)));
        f.rebind_at = Some(at(held.granted.saturating_add(t.t2)));
        f.expires_at = Some(at(held.granted.saturating_add(t.expiry)));
    }
    f
}
