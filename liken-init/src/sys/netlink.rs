//! rtnetlink: the links, addresses and routes of both IP families,
//! bonds and VLANs created, the kernel's tables dumped, and its change
//! notifications subscribed to.
//!
//! The messages are built as byte buffers by pure encoders (checked
//! byte for byte in the tests) and sent over a NETLINK_ROUTE socket
//! from `nix`, so this module needs no unsafe code. Every change asks
//! for an acknowledgement, and the kernel's answer is decoded into an
//! errno; EEXIST counts as success for an addition, and "not there"
//! (ESRCH, EADDRNOTAVAIL, ENODEV) for a removal, since either is the
//! state asked for. [`messages`] and [`attributes`] walk what the
//! kernel sends back; the meaning of a dump is decoded by
//! [`crate::net::facts`].
//!
//! Every socket has a receive timeout ([`TIMEOUT`]): the kernel answers
//! at once, and a PID 1 must not wait forever on anything.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    setsockopt, socket, sockopt,
};

/// How long the kernel may take to answer one request or dump.
pub const TIMEOUT: Duration = Duration::from_secs(2);

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

/// A route's scope: the destination is on the link, no gateway.
const RT_SCOPE_LINK: u8 = 253;

const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// IFF_UP: the link is administratively up.
pub const IFF_UP: u32 = 0x1;
/// IFF_LOOPBACK.
pub const IFF_LOOPBACK: u32 = 0x8;
/// IFF_LOWER_UP: the driver reports carrier.
pub const IFF_LOWER_UP: u32 = 0x1_0000;

/// Link attributes (linux/if_link.h).
pub mod ifla {
    /// Hardware address.
    pub const ADDRESS: u16 = 1;
    /// Name, NUL-terminated.
    pub const IFNAME: u16 = 3;
    /// MTU, u32.
    pub const MTU: u16 = 4;
    /// The underlying link's index (a VLAN's parent), u32.
    pub const LINK: u16 = 5;
    /// The master's index (a bond member's bond), u32.
    pub const MASTER: u16 = 10;
    /// Nested: kind and kind-specific data.
    pub const LINKINFO: u16 = 18;
    /// In LINKINFO: the kind's name.
    pub const INFO_KIND: u16 = 1;
    /// In LINKINFO: nested kind-specific data.
    pub const INFO_DATA: u16 = 2;
    /// In a VLAN's INFO_DATA: the id, u16.
    pub const VLAN_ID: u16 = 1;
    /// In a bond's INFO_DATA: the mode, u8.
    pub const BOND_MODE: u16 = 1;
    /// In a bond's INFO_DATA: the active member's index, u32.
    pub const BOND_ACTIVE_SLAVE: u16 = 2;
    /// In a bond's INFO_DATA: the link monitoring interval, u32 ms.
    pub const BOND_MIIMON: u16 = 3;
}

/// Address attributes (linux/if_addr.h).
pub mod ifa {
    /// The address (the peer's on a point-to-point link).
    pub const ADDRESS: u16 = 1;
    /// The local address.
    pub const LOCAL: u16 = 2;
    /// The broadcast address.
    pub const BROADCAST: u16 = 4;
    /// The full 32-bit flags (the header holds only the low 8).
    pub const FLAGS: u16 = 8;
    /// Duplicate address detection found another host using the
    /// address: the kernel keeps it, unusable, until it is removed.
    pub const F_DADFAILED: u32 = 0x08;
    /// Duplicate address detection has not finished.
    pub const F_TENTATIVE: u32 = 0x40;
    /// No lifetime: added by hand, not by autoconfiguration.
    pub const F_PERMANENT: u32 = 0x80;
}

/// Route attributes and values (linux/rtnetlink.h).
pub mod rta {
    /// Destination.
    pub const DST: u16 = 1;
    /// Outgoing interface index, u32.
    pub const OIF: u16 = 4;
    /// Gateway.
    pub const GATEWAY: u16 = 5;
    /// The route's metric (priority), u32: of two routes to one
    /// destination the lower is used.
    pub const PRIORITY: u16 = 6;
    /// The table, u32 (the header's byte says 252 when it does not fit).
    pub const TABLE: u16 = 15;
    /// The main table.
    pub const TABLE_MAIN: u8 = 254;
    /// A plain unicast route.
    pub const UNICAST: u8 = 1;
    /// Protocol: the kernel's own (a connected subnet).
    pub const PROTO_KERNEL: u8 = 2;
    /// Protocol: added at boot; init's static routes.
    pub const PROTO_BOOT: u8 = 3;
    /// Protocol: a router advertisement.
    pub const PROTO_RA: u8 = 9;
    /// Protocol: a DHCP client; init's leased default routes.
    pub const PROTO_DHCP: u8 = 16;
}

/// Multicast groups a monitor subscribes to: links, both families'
/// addresses and routes (RTMGRP_* in linux/rtnetlink.h).
pub const MONITOR_GROUPS: u32 = 0x1 | 0x10 | 0x40 | 0x100 | 0x400;

/// Whether a request adds or removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Add (a route beside any other to the same destination).
    Add,
    /// Remove.
    Remove,
}

/// A bond's mode as the bonding driver numbers it.
pub fn bond_mode_number(mode: liken_api::machine::BondMode) -> u8 {
    match mode {
        liken_api::machine::BondMode::ActiveBackup => 1,
        liken_api::machine::BondMode::Lacp => 4,
    }
}

/// The bonding driver's name for a mode number.
pub fn bond_mode_name(mode: u8) -> &'static str {
    match mode {
        0 => "balance-rr",
        1 => "active-backup",
        2 => "balance-xor",
        3 => "broadcast",
        4 => "802.3ad",
        5 => "balance-tlb",
        6 => "balance-alb",
        _ => "unknown",
    }
}

/// One change to the kernel's network configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Change a link: bring it up or down, set its MTU, make it a
    /// member of a bond (`master`); what is `None` is left as it is.
    Link {
        /// Interface index.
        index: u32,
        /// Up or down.
        up: Option<bool>,
        /// The MTU.
        mtu: Option<u32>,
        /// The bond to join.
        master: Option<u32>,
    },
    /// Create a bond, or set an existing one's mode and link
    /// monitoring (loading the bonding driver makes a `bond0`).
    Bond {
        /// Its name.
        name: String,
        /// The driver's mode number ([`bond_mode_number`]).
        mode: u8,
        /// Link monitoring interval, milliseconds.
        miimon: u32,
    },
    /// Create a VLAN on a parent link.
    Vlan {
        /// Its name.
        name: String,
        /// The parent's index.
        parent: u32,
        /// The VLAN id.
        id: u16,
    },
    /// Add or remove an address with its prefix length.
    Address {
        /// Add or remove.
        op: Op,
        /// Interface index.
        index: u32,
        /// The address, either family.
        address: IpAddr,
        /// Prefix length.
        prefix: u8,
    },
    /// Add or remove a route through a gateway, or on the link.
    Route {
        /// Add or remove.
        op: Op,
        /// Interface index the route leaves by.
        index: u32,
        /// Destination network, of the gateway's family.
        destination: IpAddr,
        /// Destination prefix length; 0 is the default route.
        prefix: u8,
        /// The gateway; `None`: the destination is on the link (a
        /// route of link scope, as `ip route add ... dev eth0`).
        gateway: Option<IpAddr>,
        /// The metric; each interface has its own, so two interfaces'
        /// default routes are two routes, not one replacing the other.
        metric: u32,
        /// Who added it ([`rta::PROTO_BOOT`], [`rta::PROTO_DHCP`]).
        protocol: u8,
    },
}

impl Request {
    /// Bring a link up.
    pub fn up(index: u32) -> Request {
        Request::Link {
            index,
            up: Some(true),
            mtu: None,
            master: None,
        }
    }
}

/// What a dump asks the kernel for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dump {
    /// Every link.
    Links,
    /// Every address, both families.
    Addresses,
    /// Every route, both families, every table.
    Routes,
}

fn push_header(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) {
    // The length is patched in by `finish` once the body is known.
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    // Port id 0: the message is for the kernel.
    buf.extend_from_slice(&0u32.to_ne_bytes());
}

fn pad(buf: &mut Vec<u8>) {
    // Attributes are aligned to four bytes.
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

fn push_attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4usize.saturating_add(data.len());
    buf.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    pad(buf);
}

/// Starts a nested attribute; [`end_nest`] fills in its length.
fn begin_nest(buf: &mut Vec<u8>, kind: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    at
}

fn end_nest(buf: &mut [u8], at: usize) {
    let len = u16::try_from(buf.len().saturating_sub(at)).unwrap_or(u16::MAX);
    if let Some(head) = buf.get_mut(at..at.saturating_add(2)) {
        head.copy_from_slice(&len.to_ne_bytes());
    }
}

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX).to_ne_bytes();
    if let Some(head) = buf.get_mut(0..4) {
        head.copy_from_slice(&len);
    }
    buf
}

fn octets(address: IpAddr) -> (u8, Vec<u8>) {
    match address {
        IpAddr::V4(a) => (AF_INET, a.octets().to_vec()),
        IpAddr::V6(a) => (AF_INET6, a.octets().to_vec()),
    }
}

fn broadcast(address: std::net::Ipv4Addr, prefix: u8) -> std::net::Ipv4Addr {
    let host_bits = 32u32.saturating_sub(u32::from(prefix.min(32)));
    let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
    std::net::Ipv4Addr::from(u32::from(address) | !mask)
}

/// struct ifinfomsg: family, type, index, flags and the mask of flags
/// to change.
fn push_ifinfo(buf: &mut Vec<u8>, index: u32, flags: u32, change: u32) {
    buf.push(AF_UNSPEC);
    buf.push(0);
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&index.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&change.to_ne_bytes());
}

fn push_name(buf: &mut Vec<u8>, name: &str) {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    push_attr(buf, ifla::IFNAME, &bytes);
}

/// A link of `kind` named `name`, with `data` as its kind's attributes.
fn push_new_link(buf: &mut Vec<u8>, name: &str, kind: &str, data: &[(u16, Vec<u8>)]) {
    push_ifinfo(buf, 0, 0, 0);
    push_name(buf, name);
    let info = begin_nest(buf, ifla::LINKINFO);
    push_attr(buf, ifla::INFO_KIND, kind.as_bytes());
    let nested = begin_nest(buf, ifla::INFO_DATA);
    for (k, v) in data {
        push_attr(buf, *k, v);
    }
    end_nest(buf, nested);
    end_nest(buf, info);
}

/// The netlink message for `request`, with sequence number `seq`.
pub fn encode(request: &Request, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    match request {
        Request::Link {
            index,
            up,
            mtu,
            master,
        } => {
            push_header(&mut buf, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
            let (flags, change) = match up {
                Some(true) => (IFF_UP, IFF_UP),
                Some(false) => (0, IFF_UP),
                None => (0, 0),
            };
            push_ifinfo(&mut buf, *index, flags, change);
            if let Some(mtu) = mtu {
                push_attr(&mut buf, ifla::MTU, &mtu.to_ne_bytes());
            }
            if let Some(master) = master {
                push_attr(&mut buf, ifla::MASTER, &master.to_ne_bytes());
            }
        }
        Request::Bond { name, mode, miimon } => {
            // No EXCL: an existing bond (the driver's own bond0) takes
            // the mode and interval, which it accepts while it is down
            // and has no members.
            push_header(&mut buf, RTM_NEWLINK, create, seq);
            push_new_link(
                &mut buf,
                name,
                "bond",
                &[
                    (ifla::BOND_MODE, vec![*mode]),
                    (ifla::BOND_MIIMON, miimon.to_ne_bytes().to_vec()),
                ],
            );
        }
        Request::Vlan { name, parent, id } => {
            push_header(&mut buf, RTM_NEWLINK, create | NLM_F_EXCL, seq);
            push_new_link(
                &mut buf,
                name,
                "vlan",
                &[(ifla::VLAN_ID, id.to_ne_bytes().to_vec())],
            );
            push_attr(&mut buf, ifla::LINK, &parent.to_ne_bytes());
        }
        Request::Address {
            op,
            index,
            address,
            prefix,
        } => {
            let (kind, flags) = match op {
                Op::Add => (RTM_NEWADDR, create | NLM_F_EXCL),
                Op::Remove => (RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK),
            };
            push_header(&mut buf, kind, flags, seq);
            let (family, bytes) = octets(*address);
            // struct ifaddrmsg
            buf.push(family);
            buf.push(*prefix);
            buf.push(0);
            buf.push(0); // scope universe
            buf.extend_from_slice(&index.to_ne_bytes());
            push_attr(&mut buf, ifa::LOCAL, &bytes);
            push_attr(&mut buf, ifa::ADDRESS, &bytes);
            if let IpAddr::V4(a) = address
                && *op == Op::Add
                && *prefix < 31
            {
                push_attr(&mut buf, ifa::BROADCAST, &broadcast(*a, *prefix).octets());
            }
        }
        Request::Route {
            op,
            index,
            destination,
            prefix,
            gateway,
            metric,
            protocol,
        } => {
            // No NLM_F_REPLACE: a route replaces another of the same
            // destination and metric, whichever interface it leaves by,
            // and a lease's default route must never take another
            // interface's (or a static one's) place. An identical route
            // is EEXIST, which is the state asked for.
            // Removal matches any protocol and scope (0 and
            // RT_SCOPE_NOWHERE), as `ip route del` does.
            let on_link = if gateway.is_none() { RT_SCOPE_LINK } else { 0 };
            let (kind, flags, protocol, scope) = match op {
                Op::Add => (RTM_NEWROUTE, create, *protocol, on_link),
                Op::Remove => (RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, 0, 255),
            };
            push_header(&mut buf, kind, flags, seq);
            let (family, dst) = octets(*destination);
            // struct rtmsg
            buf.push(family);
            buf.push(*prefix);
            buf.push(0);
            buf.push(0);
            buf.push(rta::TABLE_MAIN);
            buf.push(protocol);
            buf.push(scope);
            buf.push(rta::UNICAST);
            buf.extend_from_slice(&0u32.to_ne_bytes());
            if *prefix > 0 {
                push_attr(&mut buf, rta::DST, &dst);
            }
            if let Some(gateway) = gateway {
                push_attr(&mut buf, rta::GATEWAY, &octets(*gateway).1);
            }
            push_attr(&mut buf, rta::OIF, &index.to_ne_bytes());
            push_attr(&mut buf, rta::PRIORITY, &metric.to_ne_bytes());
        }
    }
    finish(buf)
}

/// The netlink message asking for dump `what`, with sequence `seq`.
pub fn encode_dump(what: Dump, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(32);
    let flags = NLM_F_REQUEST | NLM_F_DUMP;
    match what {
        Dump::Links => {
            push_header(&mut buf, RTM_GETLINK, flags, seq);
            push_ifinfo(&mut buf, 0, 0, 0);
        }
        Dump::Addresses => {
            push_header(&mut buf, RTM_GETADDR, flags, seq);
            buf.extend_from_slice(&[AF_UNSPEC, 0, 0, 0]);
            buf.extend_from_slice(&0u32.to_ne_bytes());
        }
        Dump::Routes => {
            push_header(&mut buf, RTM_GETROUTE, flags, seq);
            buf.extend_from_slice(&[AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0]);
            buf.extend_from_slice(&0u32.to_ne_bytes());
        }
    }
    finish(buf)
}

/// What the kernel's reply to request `seq` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// Done (or already so).
    Done,
    /// Refused with this errno.
    Refused(i32),
    /// The reply is for another request or is not an acknowledgement.
    Other,
}

/// A native-endian u16 at `at`.
pub fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes(b.try_into().ok()?))
}

/// A native-endian u32 at `at`.
pub fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// Walks the netlink messages in `buf`: each one's type, sequence
/// number and payload (after the 16-byte header). Stops at the first
/// malformed length.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let len = usize::try_from(read_u32(rest, 0)?).ok()?;
        let kind = read_u16(rest, 4)?;
        let seq = read_u32(rest, 8)?;
        let payload = rest.get(16..len)?;
        rest = rest.get(align4(len)?..).unwrap_or(&[]);
        Some((kind, seq, payload))
    })
}

/// Walks the attributes in `buf` (the part of a payload after its fixed
/// header, or a nested attribute's data): each one's type (without the
/// nested and byte-order flags) and data.
pub fn attributes(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let len = usize::from(read_u16(rest, 0)?);
        let kind = read_u16(rest, 2)? & 0x3fff;
        let data = rest.get(4..len)?;
        rest = rest.get(align4(len)?..).unwrap_or(&[]);
        Some((kind, data))
    })
}

/// Decodes the first message of a reply as the acknowledgement of
/// request `seq`; `None` when the bytes are too short to be one.
pub fn decode_ack(reply: &[u8], seq: u32) -> Option<Ack> {
    let (kind, got_seq, payload) = messages(reply).next()?;
    if kind != NLMSG_ERROR || got_seq != seq {
        return Some(Ack::Other);
    }
    let error = i32::from_ne_bytes(read_u32(payload, 0)?.to_ne_bytes());
    Some(match error.checked_neg()? {
        0 => Ack::Done,
        e => Ack::Refused(e),
    })
}

/// Whether refusal `errno` of `request` means the state asked for is
/// already there: EEXIST for an addition, "no such" for a removal.
pub fn already_so(request: &Request, errno: i32) -> bool {
    use nix::libc::{EADDRNOTAVAIL, EEXIST, ENODEV, ESRCH};
    let removal = matches!(
        request,
        Request::Address { op: Op::Remove, .. } | Request::Route { op: Op::Remove, .. }
    );
    if removal {
        [ESRCH, EADDRNOTAVAIL, ENODEV].contains(&errno)
    } else {
        errno == EEXIST
    }
}

/// Changing and reading the kernel's network configuration.
pub trait Netlink {
    /// Carries out one request, waiting for the kernel's answer.
    fn apply(&self, request: &Request) -> io::Result<()>;
    /// The messages of a dump, each one's payload (after the netlink
    /// header) as its own buffer.
    fn dump(&self, what: Dump) -> io::Result<Vec<Vec<u8>>>;
}

/// A NETLINK_ROUTE socket per request.
pub struct RealNetlink {
    seq: Mutex<u32>,
}

impl RealNetlink {
    /// A client; the socket is opened per request.
    pub fn new() -> RealNetlink {
        RealNetlink { seq: Mutex::new(1) }
    }

    fn next_seq(&self) -> u32 {
        let mut s = self
            .seq
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *s = s.wrapping_add(1);
        *s
    }
}

impl Default for RealNetlink {
    fn default() -> Self {
        RealNetlink::new()
    }
}

/// A NETLINK_ROUTE socket bound to `groups` (0: none), with a receive
/// timeout of [`TIMEOUT`] unless `groups` subscribes to notifications
/// (whose reader waits with poll).
pub fn open(groups: u32) -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    if groups == 0 {
        let secs = i64::try_from(TIMEOUT.as_secs()).unwrap_or(2);
        setsockopt(
            &fd,
            sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(secs, 0),
        )?;
    }
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
    Ok(fd)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

impl Netlink for RealNetlink {
    fn apply(&self, request: &Request) -> io::Result<()> {
        let seq = self.next_seq();
        let fd = open(0)?;
        let raw = fd.as_raw_fd();
        sendto(
            raw,
            &encode(request, seq),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        let mut buf = [0u8; 4096];
        // Skip anything that is not our acknowledgement (there should be
        // nothing else on a fresh socket, but the kernel does not promise).
        for _ in 0..16 {
            let n = recv(raw, &mut buf, MsgFlags::empty())?;
            match buf.get(..n).and_then(|reply| decode_ack(reply, seq)) {
                Some(Ack::Done) => return Ok(()),
                Some(Ack::Refused(e)) if already_so(request, e) => return Ok(()),
                Some(Ack::Refused(e)) => return Err(io::Error::from_raw_os_error(e)),
                Some(Ack::Other) => continue,
                None => return Err(invalid("short netlink reply")),
            }
        }
        Err(invalid("no netlink acknowledgement"))
    }

    fn dump(&self, what: Dump) -> io::Result<Vec<Vec<u8>>> {
        let seq = self.next_seq();
        let fd = open(0)?;
        let raw = fd.as_raw_fd();
        sendto(
            raw,
            &encode_dump(what, seq),
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        let mut buf = vec![0u8; 32 * 1024];
        let mut out = Vec::new();
        // A machine with thousands of links or routes ends the walk here
        // rather than holding init for long.
        for _ in 0..4096 {
            let n = recv(raw, &mut buf, MsgFlags::empty())?;
            for (kind, got_seq, payload) in messages(buf.get(..n).unwrap_or(&[])) {
                if got_seq != seq {
                    continue;
                }
                match kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let e =
                            read_u32(payload, 0).map_or(0, |e| i32::from_ne_bytes(e.to_ne_bytes()));
                        return Err(io::Error::from_raw_os_error(e.checked_neg().unwrap_or(0)));
                    }
                    _ => out.push(payload.to_vec()),
                }
            }
        }
        Err(invalid("the netlink dump did not end"))
    }
}

/// Records each request; fails the ones it is told to; every dump is
/// empty (the decoders are tested on messages of their own).
#[derive(Clone, Default)]
pub struct FakeNetlink {
    /// Every request, in order.
    pub applied: Arc<Mutex<Vec<Request>>>,
    /// Requests that fail with EADDRNOTAVAIL.
    pub fail: Vec<Request>,
}

impl FakeNetlink {
    /// The requests so far.
    pub fn applied(&self) -> Vec<Request> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Netlink for FakeNetlink {
    fn apply(&self, request: &Request) -> io::Result<()> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(request.clone());
        if self.fail.contains(request) {
            return Err(io::Error::from_raw_os_error(nix::libc::EADDRNOTAVAIL));
        }
        Ok(())
    }

    fn dump(&self, _: Dump) -> io::Result<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    // Expected bytes are laid out field by field by hand from the
    // structs in linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h
    // and linux/if_link.h, on a little-endian machine.

    #[test]
    #[cfg(target_endian = "little")]
    fn link_up_bytes() {
        let got = encode(&Request::up(2), 7);
        let want: [u8; 32] = [
            32, 0, 0, 0, // nlmsg_len
            16, 0, // RTM_NEWLINK
            5, 0, // NLM_F_REQUEST | NLM_F_ACK
            7, 0, 0, 0, // seq
            0, 0, 0, 0, // pid
            0, 0, 0, 0, // family AF_UNSPEC, pad, type
            2, 0, 0, 0, // ifindex
            1, 0, 0, 0, // flags IFF_UP
            1, 0, 0, 0, // change IFF_UP
        ];
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn member_down_with_master_and_mtu_bytes() {
        let got = encode(
            &Request::Link {
                index: 3,
                up: Some(false),
                mtu: Some(9000),
                master: Some(5),
            },
            1,
        );
        let want: [u8; 48] = [
            48, 0, 0, 0, 16, 0, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0, // header
            0, 0, 0, 0, 3, 0, 0, 0, // AF_UNSPEC, index 3
            0, 0, 0, 0, // flags: not up
            1, 0, 0, 0, // change IFF_UP
            8, 0, 4, 0, 0x28, 0x23, 0, 0, // IFLA_MTU 9000
            8, 0, 10, 0, 5, 0, 0, 0, // IFLA_MASTER 5
        ];
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn bond_bytes() {
        let got = encode(
            &Request::Bond {
                name: "bond0".into(),
                mode: 1,
                miimon: 100,
            },
            2,
        );
        let want: Vec<u8> = [
            &[76, 0, 0, 0, 16, 0, 0x05, 0x04, 2, 0, 0, 0, 0, 0, 0, 0][..], // REQUEST|ACK|CREATE
            &[0; 16],                                                      // ifinfomsg
            &[10, 0, 3, 0, b'b', b'o', b'n', b'd', b'0', 0, 0, 0],         // IFLA_IFNAME
            &[32, 0, 18, 0],                                               // IFLA_LINKINFO
            &[8, 0, 1, 0, b'b', b'o', b'n', b'd'],                         // IFLA_INFO_KIND
            &[20, 0, 2, 0],                                                // IFLA_INFO_DATA
            &[5, 0, 1, 0, 1, 0, 0, 0],                                     // IFLA_BOND_MODE 1
            &[8, 0, 3, 0, 100, 0, 0, 0],                                   // IFLA_BOND_MIIMON
        ]
        .concat();
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn vlan_bytes() {
        let got = encode(
            &Request::Vlan {
                name: "vlan42".into(),
                parent: 3,
                id: 42,
            },
            4,
        );
        let want: Vec<u8> = [
            &[76, 0, 0, 0, 16, 0, 0x05, 0x06, 4, 0, 0, 0, 0, 0, 0, 0][..], // ...|EXCL|CREATE
            &[0; 16],
            &[11, 0, 3, 0, b'v', b'l', b'a', b'n', b'4', b'2', 0, 0], // IFLA_IFNAME
            &[24, 0, 18, 0],                                          // IFLA_LINKINFO
            &[8, 0, 1, 0, b'v', b'l', b'a', b'n'],                    // IFLA_INFO_KIND
            &[12, 0, 2, 0],                                           // IFLA_INFO_DATA
            &[6, 0, 1, 0, 42, 0, 0, 0],                               // IFLA_VLAN_ID
            &[8, 0, 5, 0, 3, 0, 0, 0],                                // IFLA_LINK 3
        ]
        .concat();
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn add_address_bytes() {
        let got = encode(
            &Request::Address {
                op: Op::Add,
                index: 2,
                address: Ipv4Addr::new(10, 0, 2, 15).into(),
                prefix: 24,
            },
            8,
        );
        let want: [u8; 48] = [
            48, 0, 0, 0, // nlmsg_len
            20, 0, // RTM_NEWADDR
            0x05, 0x06, // REQUEST | ACK | EXCL | CREATE
            8, 0, 0, 0, // seq
            0, 0, 0, 0, // pid
            2, 24, 0, 0, // AF_INET, /24, flags, scope universe
            2, 0, 0, 0, // ifindex
            8, 0, 2, 0, 10, 0, 2, 15, // IFA_LOCAL
            8, 0, 1, 0, 10, 0, 2, 15, // IFA_ADDRESS
            8, 0, 4, 0, 10, 0, 2, 255, // IFA_BROADCAST
        ];
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn ipv6_address_and_its_removal() {
        let address: IpAddr = "fd00::5".parse::<Ipv6Addr>().unwrap().into();
        let add = encode(
            &Request::Address {
                op: Op::Add,
                index: 2,
                address,
                prefix: 64,
            },
            1,
        );
        let mut v6 = [0u8; 16];
        v6[0] = 0xfd;
        v6[15] = 5;
        let want: Vec<u8> = [
            &[64, 0, 0, 0, 20, 0, 0x05, 0x06, 1, 0, 0, 0, 0, 0, 0, 0][..],
            &[10, 64, 0, 0, 2, 0, 0, 0], // AF_INET6, /64
            &[20, 0, 2, 0],
            &v6,
            &[20, 0, 1, 0],
            &v6,
        ]
        .concat();
        assert_eq!(add, want);
        let remove = encode(
            &Request::Address {
                op: Op::Remove,
                index: 2,
                address,
                prefix: 64,
            },
            1,
        );
        assert_eq!(remove.get(4..8), Some(&[21, 0, 0x05, 0][..]), "RTM_DELADDR");
        assert_eq!(remove.get(16..), want.get(16..));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn default_route_bytes() {
        let got = encode(
            &Request::Route {
                op: Op::Add,
                index: 2,
                destination: Ipv4Addr::UNSPECIFIED.into(),
                prefix: 0,
                gateway: Some(Ipv4Addr::new(10, 0, 2, 2).into()),
                metric: 100,
                protocol: rta::PROTO_DHCP,
            },
            9,
        );
        let want: [u8; 52] = [
            52, 0, 0, 0, // nlmsg_len
            24, 0, // RTM_NEWROUTE
            0x05, 0x04, // REQUEST | ACK | CREATE, never REPLACE
            9, 0, 0, 0, // seq
            0, 0, 0, 0, // pid
            2, 0, 0, 0, // AF_INET, dst_len 0, src_len, tos
            254, 16, 0, 1, // main table, RTPROT_DHCP, universe, unicast
            0, 0, 0, 0, // flags
            8, 0, 5, 0, 10, 0, 2, 2, // RTA_GATEWAY
            8, 0, 4, 0, 2, 0, 0, 0, // RTA_OIF
            8, 0, 6, 0, 100, 0, 0, 0, // RTA_PRIORITY
        ];
        assert_eq!(got, want);
        let removal = encode(
            &Request::Route {
                op: Op::Remove,
                index: 2,
                destination: Ipv4Addr::UNSPECIFIED.into(),
                prefix: 0,
                gateway: Some(Ipv4Addr::new(10, 0, 2, 2).into()),
                metric: 100,
                protocol: rta::PROTO_DHCP,
            },
            9,
        );
        assert_eq!(
            removal.get(4..8),
            Some(&[25, 0, 0x05, 0][..]),
            "RTM_DELROUTE"
        );
        assert_eq!(
            removal.get(20..24),
            Some(&[254, 0, 255, 1][..]),
            "any protocol, any scope"
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn on_link_route_has_link_scope_and_no_gateway() {
        let got = encode(
            &Request::Route {
                op: Op::Add,
                index: 2,
                destination: Ipv4Addr::new(192, 0, 2, 1).into(),
                prefix: 32,
                gateway: None,
                metric: 100,
                protocol: rta::PROTO_DHCP,
            },
            1,
        );
        let want: Vec<u8> = [
            &[52, 0, 0, 0, 24, 0, 0x05, 0x04, 1, 0, 0, 0, 0, 0, 0, 0][..],
            &[2, 32, 0, 0, 254, 16, 253, 1, 0, 0, 0, 0], // scope link
            &[8, 0, 1, 0, 192, 0, 2, 1],                 // RTA_DST
            &[8, 0, 4, 0, 2, 0, 0, 0],                   // RTA_OIF
            &[8, 0, 6, 0, 100, 0, 0, 0],                 // RTA_PRIORITY
        ]
        .concat();
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn ipv6_network_route_carries_destination() {
        let got = encode(
            &Request::Route {
                op: Op::Add,
                index: 3,
                destination: "fd99::".parse::<IpAddr>().unwrap(),
                prefix: 64,
                gateway: Some("fd50::1".parse::<IpAddr>().unwrap()),
                metric: 1024,
                protocol: rta::PROTO_BOOT,
            },
            1,
        );
        assert_eq!(got.len(), 28 + 20 + 20 + 8 + 8);
        assert_eq!(got.get(16..18), Some(&[10, 64][..]));
        assert_eq!(got.get(28..32), Some(&[20, 0, 1, 0][..]), "RTA_DST");
        assert_eq!(got.get(48..52), Some(&[20, 0, 5, 0][..]), "RTA_GATEWAY");
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn dump_requests() {
        assert_eq!(
            encode_dump(Dump::Links, 3),
            [
                32, 0, 0, 0, 18, 0, 0x01, 0x03, 3, 0, 0, 0, 0, 0, 0,
                0, // GETLINK, REQUEST|DUMP
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ]
        );
        assert_eq!(encode_dump(Dump::Addresses, 3).len(), 24);
        assert_eq!(encode_dump(Dump::Routes, 3).len(), 28);
    }

    #[test]
    fn point_to_point_prefix_has_no_broadcast() {
        let got = encode(
            &Request::Address {
                op: Op::Add,
                index: 1,
                address: Ipv4Addr::new(10, 1, 1, 1).into(),
                prefix: 32,
            },
            1,
        );
        assert_eq!(got.len(), 40);
    }

    fn ack(seq: u32, error: i32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&36u32.to_ne_bytes());
        b.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&1234u32.to_ne_bytes());
        b.extend_from_slice(&error.to_ne_bytes());
        b.extend_from_slice(&[0; 16]);
        b
    }

    #[test]
    fn acks_decode() {
        use nix::libc::{EADDRNOTAVAIL, EEXIST, ENODEV};
        assert_eq!(decode_ack(&ack(5, 0), 5), Some(Ack::Done));
        assert_eq!(decode_ack(&ack(5, -EEXIST), 5), Some(Ack::Refused(EEXIST)));
        assert_eq!(decode_ack(&ack(5, -ENODEV), 5), Some(Ack::Refused(ENODEV)));
        assert_eq!(decode_ack(&ack(4, 0), 5), Some(Ack::Other));
        assert_eq!(decode_ack(&[1, 2, 3], 5), None);
        let add = Request::up(1);
        let remove = Request::Address {
            op: Op::Remove,
            index: 1,
            address: Ipv4Addr::LOCALHOST.into(),
            prefix: 8,
        };
        assert!(already_so(&add, EEXIST) && !already_so(&add, ENODEV));
        assert!(already_so(&remove, EADDRNOTAVAIL) && !already_so(&remove, EEXIST));
    }

    #[test]
    fn messages_and_attributes_walk_and_stop_at_garbage() {
        let mut two = ack(1, 0);
        two.extend(ack(2, 0));
        let seqs: Vec<u32> = messages(&two).map(|(_, s, _)| s).collect();
        assert_eq!(seqs, [1, 2]);
        // A length past the end ends the walk.
        let mut bad = ack(1, 0);
        bad[0] = 200;
        assert_eq!(messages(&bad).count(), 0);
        let mut attrs = Vec::new();
        push_attr(&mut attrs, 3, b"eth0\0");
        push_attr(&mut attrs, 4, &1500u32.to_ne_bytes());
        let got: Vec<(u16, Vec<u8>)> = attributes(&attrs).map(|(k, d)| (k, d.to_vec())).collect();
        assert_eq!(
            got,
            [(3, b"eth0\0".to_vec()), (4, 1500u32.to_ne_bytes().to_vec())]
        );
        assert_eq!(attributes(&[5, 0, 1]).count(), 0);
    }

    #[test]
    fn broadcast_addresses() {
        assert_eq!(
            broadcast(Ipv4Addr::new(10, 0, 2, 15), 24),
            Ipv4Addr::new(10, 0, 2, 255)
        );
        assert_eq!(
            broadcast(Ipv4Addr::new(10, 0, 2, 15), 0),
            Ipv4Addr::BROADCAST
        );
    }
}
