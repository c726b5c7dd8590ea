//! DHCPv4 (RFC 2131, options from RFC 2132): the message codec and the
//! client's socket.
//!
//! The codec is pure and tested on packet bytes; what to send when, and
//! what a reply means, is [`super::lease`]'s state machine. A client
//! without an address asks servers to broadcast their replies, because
//! the interface has no address a unicast reply could reach; a bound
//! client renews from its address (`ciaddr`) and is answered there.
//!
//! The messages built: DISCOVER, REQUEST (selecting, renewing and
//! rebinding) and RELEASE; understood: OFFER, ACK and NAK, with the
//! options a lease needs (mask, routers, DNS, lease time, server id,
//! T1 and T2).

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

const BOOTREQUEST: u8 = 1;
const BOOTREPLY: u8 = 2;
const HTYPE_ETHERNET: u8 = 1;
const FLAG_BROADCAST: u16 = 0x8000;
const MAGIC: [u8; 4] = [99, 130, 83, 99];
const FIXED_LEN: usize = 236;

const OPT_PAD: u8 = 0;
const OPT_SUBNET: u8 = 1;
const OPT_ROUTER: u8 = 3;
const OPT_DNS: u8 = 6;
const OPT_REQUESTED_IP: u8 = 50;
const OPT_LEASE: u8 = 51;
const OPT_TYPE: u8 = 53;
const OPT_SERVER_ID: u8 = 54;
const OPT_PARAMS: u8 = 55;
const OPT_T1: u8 = 58;
const OPT_T2: u8 = 59;
const OPT_CLIENT_ID: u8 = 61;
const OPT_CLASSLESS: u8 = 121;
const OPT_CLASSLESS_MS: u8 = 249;
const OPT_END: u8 = 255;

/// A classless static route (RFC 3442): destination, prefix length,
/// router (0.0.0.0: the destination is on the link).
pub type Classless = (Ipv4Addr, u8, Ipv4Addr);

/// An optional option the decoder left out of a message it still
/// used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The option's code.
    pub code: u8,
    /// What is wrong with it.
    pub why: &'static str,
}

/// An option's name for a console line.
pub fn option_name(code: u8) -> &'static str {
    match code {
        OPT_ROUTER => "routers",
        OPT_DNS => "DNS servers",
        OPT_T1 => "renewal time T1",
        OPT_T2 => "rebinding time T2",
        OPT_CLASSLESS | OPT_CLASSLESS_MS => "classless static routes",
        _ => "option",
    }
}

/// The DHCP message types this client sends or understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Client looking for servers.
    Discover,
    /// Server offering an address.
    Offer,
    /// Client asking for the offered address.
    Request,
    /// Server confirming.
    Ack,
    /// Server refusing.
    Nak,
    /// Client giving its address back.
    Release,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Discover => 1,
            Kind::Offer => 2,
            Kind::Request => 3,
            Kind::Ack => 5,
            Kind::Nak => 6,
            Kind::Release => 7,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Discover,
            2 => Kind::Offer,
            3 => Kind::Request,
            5 => Kind::Ack,
            6 => Kind::Nak,
            7 => Kind::Release,
            _ => return None,
        })
    }
}

/// One DHCP message, with the fields and options this client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// BOOTREQUEST from clients, BOOTREPLY from servers.
    pub op: u8,
    /// Transaction id.
    pub xid: u32,
    /// Ask for broadcast replies.
    pub broadcast: bool,
    /// The client's own address, when it has one (ciaddr: renewing,
    /// rebinding, releasing).
    pub client_ip: Ipv4Addr,
    /// The address offered or assigned (yiaddr).
    pub your_ip: Ipv4Addr,
    /// Client hardware address.
    pub mac: [u8; 6],
    /// Option 53.
    pub kind: Kind,
    /// Option 1.
    pub subnet: Option<Ipv4Addr>,
    /// Option 3 (all routers, in order).
    pub routers: Vec<Ipv4Addr>,
    /// Option 6.
    pub dns: Vec<Ipv4Addr>,
    /// Option 51, seconds.
    pub lease_secs: Option<u32>,
    /// Option 58: when to renew, seconds after the lease was granted.
    pub t1: Option<u32>,
    /// Option 59: when to rebind.
    pub t2: Option<u32>,
    /// Option 54.
    pub server_id: Option<Ipv4Addr>,
    /// Option 50.
    pub requested_ip: Option<Ipv4Addr>,
    /// Option 55.
    pub params: Vec<u8>,
    /// Option 61.
    pub client_id: Vec<u8>,
    /// Option 121, or else 249: classless static routes.
    pub classless: Vec<Classless>,
    /// Optional options that were malformed and left out (never sent).
    pub skipped: Vec<Skipped>,
}

/// Why bytes are not a DHCP message this client can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than the fixed header and magic cookie.
    Short(usize),
    /// The magic cookie is wrong: not DHCP (plain BOOTP, or noise).
    NoMagic,
    /// Not an Ethernet client address.
    NotEthernet,
    /// An option runs past the end.
    Truncated(u8),
    /// Option 53 is missing or unknown.
    NoType,
    /// An address option's length is not a multiple of four.
    BadLength(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short(n) => write!(f, "a {n}-byte packet is too short for DHCP"),
            DecodeError::NoMagic => f.write_str("no DHCP magic cookie (a BOOTP-only server?)"),
            DecodeError::NotEthernet => f.write_str("not an Ethernet hardware address"),
            DecodeError::Truncated(o) => write!(f, "option {o} runs past the end of the packet"),
            DecodeError::NoType => f.write_str("no known DHCP message type (option 53)"),
            DecodeError::BadLength(o) => write!(f, "option {o} has a bad length"),
        }
    }
}

impl Message {
    /// A client message with nothing but the essentials set.
    fn client(kind: Kind, xid: u32, mac: [u8; 6]) -> Message {
        Message {
            op: BOOTREQUEST,
            xid,
            broadcast: true,
            client_ip: Ipv4Addr::UNSPECIFIED,
            your_ip: Ipv4Addr::UNSPECIFIED,
            mac,
            kind,
            subnet: None,
            routers: Vec::new(),
            dns: Vec::new(),
            lease_secs: None,
            t1: None,
            t2: None,
            server_id: None,
            requested_ip: None,
            params: vec![
                OPT_SUBNET,
                OPT_ROUTER,
                OPT_DNS,
                OPT_LEASE,
                OPT_CLASSLESS,
                OPT_CLASSLESS_MS,
            ],
            // Type 1 (Ethernet) followed by the MAC, as RFC 2132 suggests.
            client_id: client_id(mac),
            classless: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

fn client_id(mac: [u8; 6]) -> Vec<u8> {
    let mut id = vec![HTYPE_ETHERNET];
    id.extend_from_slice(&mac);
    id
}

/// A DISCOVER from `mac`.
pub fn discover(xid: u32, mac: [u8; 6]) -> Message {
    Message::client(Kind::Discover, xid, mac)
}

/// The REQUEST that takes `offer`.
pub fn request(offer: &Message, mac: [u8; 6]) -> Message {
    let mut m = Message::client(Kind::Request, offer.xid, mac);
    m.requested_ip = Some(offer.your_ip);
    m.server_id = offer.server_id;
    m
}

/// The REQUEST that extends the lease on `address` (renewing, unicast
/// to its server, or rebinding, broadcast): from the address itself,
/// naming neither the address nor a server, as RFC 2131 section 4.3.2
/// asks, and answered at the address.
pub fn extend(address: Ipv4Addr, xid: u32, mac: [u8; 6]) -> Message {
    let mut m = Message::client(Kind::Request, xid, mac);
    m.client_ip = address;
    m.broadcast = false;
    m
}

/// The REQUEST of a client whose link came back up, asking whether its
/// lease on `address` still stands (INIT-REBOOT, RFC 2131 section
/// 4.3.2): broadcast, naming the address and no server.
pub fn reboot(address: Ipv4Addr, xid: u32, mac: [u8; 6]) -> Message {
    let mut m = Message::client(Kind::Request, xid, mac);
    m.requested_ip = Some(address);
    m
}

/// The RELEASE that gives `address` back to `server`.
pub fn release(address: Ipv4Addr, server: Option<Ipv4Addr>, xid: u32, mac: [u8; 6]) -> Message {
    let mut m = Message::client(Kind::Release, xid, mac);
    m.client_ip = address;
    m.broadcast = false;
    m.server_id = server;
    m.params = Vec::new();
    m
}

fn push_addrs(out: &mut Vec<u8>, code: u8, addrs: &[Ipv4Addr]) {
    if addrs.is_empty() {
        return;
    }
    let bytes: Vec<u8> = addrs.iter().flat_map(|a| a.octets()).collect();
    push_opt(out, code, &bytes);
}

fn push_opt(out: &mut Vec<u8>, code: u8, data: &[u8]) {
    // Options longer than 255 bytes would need RFC 3396 splitting;
    // nothing this client sends comes close.
    out.push(code);
    out.push(u8::try_from(data.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(data.get(..255).unwrap_or(data));
}

/// The message as sent on the wire.
pub fn encode(m: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(300);
    out.push(m.op);
    out.push(HTYPE_ETHERNET);
    out.push(6);
    out.push(0);
    out.extend_from_slice(&m.xid.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    let flags = if m.broadcast { FLAG_BROADCAST } else { 0 };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&m.client_ip.octets());
    out.extend_from_slice(&m.your_ip.octets());
    out.extend_from_slice(&Ipv4Addr::UNSPECIFIED.octets()); // siaddr
    out.extend_from_slice(&Ipv4Addr::UNSPECIFIED.octets()); // giaddr
    out.extend_from_slice(&m.mac);
    out.extend_from_slice(&[0; 10]); // rest of chaddr
    out.extend_from_slice(&[0; 64 + 128]); // sname, file
    out.extend_from_slice(&MAGIC);
    push_opt(&mut out, OPT_TYPE, &[m.kind.code()]);
    if !m.client_id.is_empty() {
        push_opt(&mut out, OPT_CLIENT_ID, &m.client_id);
    }
    if let Some(ip) = m.requested_ip {
        push_opt(&mut out, OPT_REQUESTED_IP, &ip.octets());
    }
    if let Some(ip) = m.server_id {
        push_opt(&mut out, OPT_SERVER_ID, &ip.octets());
    }
    if let Some(ip) = m.subnet {
        push_opt(&mut out, OPT_SUBNET, &ip.octets());
    }
    push_addrs(&mut out, OPT_ROUTER, &m.routers);
    push_addrs(&mut out, OPT_DNS, &m.dns);
    for (code, secs) in [(OPT_LEASE, m.lease_secs), (OPT_T1, m.t1), (OPT_T2, m.t2)] {
        if let Some(secs) = secs {
            push_opt(&mut out, code, &secs.to_be_bytes());
        }
    }
    if !m.params.is_empty() {
        push_opt(&mut out, OPT_PARAMS, &m.params);
    }
    out.push(OPT_END);
    // Some servers and relays drop BOOTP packets under 300 bytes.
    while out.len() < 300 {
        out.push(OPT_PAD);
    }
    out
}

fn ipv4(bytes: &[u8]) -> Option<Ipv4Addr> {
    let octets: [u8; 4] = bytes.try_into().ok()?;
    Some(Ipv4Addr::from(octets))
}

fn addrs(code: u8, data: &[u8]) -> Result<Vec<Ipv4Addr>, DecodeError> {
    if data.is_empty() || !data.len().is_multiple_of(4) {
        return Err(DecodeError::BadLength(code));
    }
    Ok(data.chunks_exact(4).filter_map(ipv4).collect())
}

fn one_addr(code: u8, data: &[u8]) -> Result<Ipv4Addr, DecodeError> {
    ipv4(data).ok_or(DecodeError::BadLength(code))
}

/// Reads a message off the wire.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let short = || DecodeError::Short(bytes.len());
    let fixed = bytes.get(..FIXED_LEN).ok_or_else(short)?;
    if bytes.get(FIXED_LEN..FIXED_LEN.saturating_add(4)) != Some(&MAGIC[..]) {
        return Err(if bytes.len() < FIXED_LEN.saturating_add(4) {
            short()
        } else {
            DecodeError::NoMagic
        });
    }
    if fixed.get(1) != Some(&HTYPE_ETHERNET) || fixed.get(2) != Some(&6) {
        return Err(DecodeError::NotEthernet);
    }
    let field = |from: usize, len: usize| fixed.get(from..from.saturating_add(len));
    let xid = u32::from_be_bytes(
        field(4, 4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(short)?,
    );
    let flags = u16::from_be_bytes(
        field(10, 2)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(short)?,
    );
    let client_ip = field(12, 4).and_then(ipv4).ok_or_else(short)?;
    let your_ip = field(16, 4).and_then(ipv4).ok_or_else(short)?;
    let mac: [u8; 6] = field(28, 6)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(short)?;
    let mut m = Message {
        op: fixed.first().copied().unwrap_or(0),
        xid,
        broadcast: flags & FLAG_BROADCAST != 0,
        client_ip,
        your_ip,
        mac,
        kind: Kind::Discover,
        subnet: None,
        routers: Vec::new(),
        dns: Vec::new(),
        lease_secs: None,
        t1: None,
        t2: None,
        server_id: None,
        requested_ip: None,
        params: Vec::new(),
        client_id: Vec::new(),
        classless: Vec::new(),
        skipped: Vec::new(),
    };
    let mut kind = None;
    let mut ms_classless = None;
    let mut rest = bytes.get(FIXED_LEN.saturating_add(4)..).unwrap_or(&[]);
    while let Some((&code, after)) = rest.split_first() {
        match code {
            OPT_PAD => {
                rest = after;
                continue;
            }
            OPT_END => break,
            _ => {}
        }
        let (&len, after) = after.split_first().ok_or(DecodeError::Truncated(code))?;
        let len = usize::from(len);
        let data = after.get(..len).ok_or(DecodeError::Truncated(code))?;
        rest = after.get(len..).unwrap_or(&[]);
        match code {
            OPT_TYPE => kind = data.first().copied().and_then(Kind::from_code),
            OPT_SUBNET => m.subnet = Some(one_addr(code, data)?),
            // Optional options: a malformed one is left out and the
            // rest of the message used, as dhcpcd and systemd-networkd
            // do; what a lease cannot do without (type, server id,
            // lease time, mask) stays an error.
            OPT_ROUTER | OPT_DNS => match addrs(code, data) {
                Ok(a) if code == OPT_ROUTER => m.routers = a,
                Ok(a) => m.dns = a,
                Err(_) => m.skipped.push(Skipped {
                    code,
                    why: "its length is not a non-zero multiple of 4",
                }),
            },
            OPT_T1 | OPT_T2 => match <[u8; 4]>::try_from(data) {
                Ok(b) if code == OPT_T1 => m.t1 = Some(u32::from_be_bytes(b)),
                Ok(b) => m.t2 = Some(u32::from_be_bytes(b)),
                Err(_) => m.skipped.push(Skipped {
                    code,
                    why: "its length is not 4",
                }),
            },
            OPT_LEASE => {
                let b: [u8; 4] = data.try_into().map_err(|_| DecodeError::BadLength(code))?;
                m.lease_secs = Some(u32::from_be_bytes(b));
            }
            OPT_CLASSLESS | OPT_CLASSLESS_MS => match parse_classless(data) {
                Ok(routes) if code == OPT_CLASSLESS => m.classless = routes,
                Ok(routes) => ms_classless = Some(routes),
                Err(why) => m.skipped.push(Skipped { code, why }),
            },
            OPT_SERVER_ID => m.server_id = Some(one_addr(code, data)?),
            OPT_REQUESTED_IP => m.requested_ip = Some(one_addr(code, data)?),
            OPT_PARAMS => m.params = data.to_vec(),
            OPT_CLIENT_ID => m.client_id = data.to_vec(),
            // Options this client has no use for are skipped.
            _ => {}
        }
    }
    m.kind = kind.ok_or(DecodeError::NoType)?;
    // Option 249 is Microsoft's older number for option 121, used
    // only when 121 is absent.
    if m.classless.is_empty()
        && let Some(routes) = ms_classless
    {
        m.classless = routes;
    }
    Ok(m)
}

/// Option 121's routes (RFC 3442 section 3): per route a prefix
/// length, the destination's significant octets, and the router.
pub fn parse_classless(data: &[u8]) -> Result<Vec<Classless>, &'static str> {
    const BAD: &str = "a route is cut short or longer than /32";
    let mut routes = Vec::new();
    let mut rest = data;
    while let Some((&width, after)) = rest.split_first() {
        if width > 32 {
            return Err(BAD);
        }
        let significant = usize::from(width.div_ceil(8));
        let (dst, after) = after.split_at_checked(significant).ok_or(BAD)?;
        let (router, after) = after.split_at_checked(4).ok_or(BAD)?;
        let mut octets = [0u8; 4];
        for (o, d) in octets.iter_mut().zip(dst) {
            *o = *d;
        }
        // Bits past the prefix length are not part of the destination.
        let host_bits = 32u32.saturating_sub(u32::from(width));
        let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
        let destination = Ipv4Addr::from(u32::from_be_bytes(octets) & mask);
        let router = ipv4(router).unwrap_or(Ipv4Addr::UNSPECIFIED);
        routes.push((destination, width, router));
        rest = after;
    }
    if routes.is_empty() {
        return Err(BAD);
    }
    Ok(routes)
}

/// What a bound client holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The address.
    pub address: Ipv4Addr,
    /// Its prefix length, from the subnet mask.
    pub prefix: u8,
    /// The first router, for the default route.
    pub router: Option<Ipv4Addr>,
    /// DNS servers.
    pub dns: Vec<Ipv4Addr>,
    /// Lease time in seconds, when the server gave one.
    pub lease_secs: Option<u32>,
    /// The server that granted it.
    pub server: Option<Ipv4Addr>,
    /// T1 and T2 when the server gave them, seconds.
    pub t1: Option<u32>,
    /// See `t1`.
    pub t2: Option<u32>,
    /// Classless static routes; when there are any they replace the
    /// default route through `router` (RFC 3442).
    pub classless: Vec<Classless>,
}

/// A subnet mask's prefix length; `None` when the mask is not contiguous.
pub fn mask_prefix(mask: Ipv4Addr) -> Option<u8> {
    let bits = u32::from(mask);
    let ones = bits.leading_ones();
    (bits.checked_shl(ones).unwrap_or(0) == 0)
        .then(|| u8::try_from(ones).ok())
        .flatten()
}

/// The class-based prefix RFC 2131 falls back to without option 1.
fn default_prefix(address: Ipv4Addr) -> u8 {
    match address.octets().first() {
        Some(0..=127) => 8,
        Some(128..=191) => 16,
        _ => 24,
    }
}

/// Whether `m` is a server's reply to our transaction `xid` from `mac`.
pub fn is_reply_to(m: &Message, xid: u32, mac: [u8; 6]) -> bool {
    m.op == BOOTREPLY && m.xid == xid && m.mac == mac
}

/// The lease an ACK grants.
pub fn lease_from_ack(m: &Message) -> Lease {
    let prefix = m
        .subnet
        .and_then(mask_prefix)
        .unwrap_or_else(|| default_prefix(m.your_ip));
    Lease {
        address: m.your_ip,
        prefix,
        router: m.routers.first().copied(),
        dns: m.dns.clone(),
        lease_secs: m.lease_secs,
        server: m.server_id,
        t1: m.t1,
        t2: m.t2,
        classless: m.classless.clone(),
    }
}

/// A transaction id that differs between machines (the MAC) and
/// between boots (the clock), so two clients on one network are not
/// confused by each other's replies.
pub fn decide_xid(mac: [u8; 6], since_epoch: Duration) -> u32 {
    let [_, _, a, b, c, d] = mac;
    let secs = since_epoch.as_secs().to_le_bytes();
    let [s0, s1, s2, s3, ..] = secs;
    u32::from_be_bytes([a, b, c, d])
        ^ since_epoch.subsec_nanos()
        ^ u32::from_le_bytes([s0, s1, s2, s3])
}

/// The client's port.
pub const CLIENT_PORT: u16 = 68;
/// The servers' port.
pub const SERVER_PORT: u16 = 67;

/// The client's socket on `interface`: port 68 of every address, bound
/// to the device before the port, so that each interface's client has
/// its own socket on the same port; broadcast allowed; non-blocking
/// (its reader waits in poll).
pub fn open_socket(interface: &str) -> io::Result<UdpSocket> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, setsockopt, socket, sockopt,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    setsockopt(
        &fd,
        sockopt::BindToDevice,
        &std::ffi::OsString::from(interface),
    )?;
    setsockopt(&fd, sockopt::Broadcast, &true)?;
    let any = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, CLIENT_PORT));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &any)?;
    Ok(UdpSocket::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const XID: u32 = 0x1a2b_3c4d;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A reply laid out as QEMU's user network (slirp) sends it: the
    /// fixed header with yiaddr 10.0.2.15 and siaddr 10.0.2.2, then
    /// type, server id, lease, mask, router, DNS.
    fn slirp_reply(kind: u8) -> Vec<u8> {
        let mut p = hex(
            "02 01 06 00 1a2b3c4d 0000 0000 00000000 0a00020f 0a000202 00000000
             525400123456 00000000000000000000",
        );
        p.extend_from_slice(&[0; 192]);
        p.extend(hex(&format!(
            "63825363 3501{kind:02x} 3604 0a000202 3304 00015180 0104 ffffff00
             0304 0a000202 0604 0a000203 ff"
        )));
        p
    }

    #[test]
    fn discover_bytes() {
        let got = encode(&discover(XID, MAC));
        assert_eq!(got.len(), 300);
        let mut want = hex(
            "01 01 06 00 1a2b3c4d 0000 8000 00000000 00000000 00000000 00000000
             525400123456 00000000000000000000",
        );
        want.extend_from_slice(&[0; 192]);
        want.extend(hex(
            "63825363 350101 3d07 01525400123456 3706 01 03 06 33 79 f9 ff",
        ));
        want.resize(300, 0);
        assert_eq!(got, want);
    }

    #[test]
    fn request_names_offer_and_server() {
        let offer = decode(&slirp_reply(2)).unwrap();
        let got = encode(&request(&offer, MAC));
        let options = &got[240..];
        let want =
            hex("350103 3d07 01525400123456 3204 0a00020f 3604 0a000202 3706 0103063379f9 ff");
        assert_eq!(&options[..want.len()], &want[..]);
        assert!(options[want.len()..].iter().all(|&b| b == 0));
    }

    #[test]
    fn decodes_slirp_offer() {
        let m = decode(&slirp_reply(2)).unwrap();
        assert_eq!(m.op, BOOTREPLY);
        assert_eq!(m.kind, Kind::Offer);
        assert_eq!(m.xid, XID);
        assert_eq!(m.mac, MAC);
        assert_eq!(m.your_ip, Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(m.subnet, Some(Ipv4Addr::new(255, 255, 255, 0)));
        assert_eq!(m.routers, vec![Ipv4Addr::new(10, 0, 2, 2)]);
        assert_eq!(m.dns, vec![Ipv4Addr::new(10, 0, 2, 3)]);
        assert_eq!(m.lease_secs, Some(86400));
        assert_eq!(m.server_id, Some(Ipv4Addr::new(10, 0, 2, 2)));
    }

    #[test]
    fn round_trip() {
        let offer = decode(&slirp_reply(2)).unwrap();
        let req = request(&offer, MAC);
        assert_eq!(decode(&encode(&req)).unwrap(), req);
    }

    #[test]
    fn an_ack_grants_a_lease_with_its_times() {
        let mut ack = decode(&slirp_reply(5)).unwrap();
        assert!(is_reply_to(&ack, XID, MAC));
        assert!(!is_reply_to(&ack, XID + 1, MAC));
        // Our own broadcast looped back is a request, not a reply.
        assert!(!is_reply_to(
            &decode(&encode(&discover(XID, MAC))).unwrap(),
            XID,
            MAC
        ));
        ack.t1 = Some(30);
        ack.t2 = Some(52);
        let again = decode(&encode(&ack)).unwrap();
        assert_eq!((again.t1, again.t2), (Some(30), Some(52)));
        assert_eq!(
            lease_from_ack(&again),
            Lease {
                address: Ipv4Addr::new(10, 0, 2, 15),
                prefix: 24,
                router: Some(Ipv4Addr::new(10, 0, 2, 2)),
                dns: vec![Ipv4Addr::new(10, 0, 2, 3)],
                lease_secs: Some(86400),
                server: Some(Ipv4Addr::new(10, 0, 2, 2)),
                t1: Some(30),
                t2: Some(52),
                classless: Vec::new(),
            }
        );
    }

    #[test]
    fn renewal_and_release_bytes() {
        let me = Ipv4Addr::new(10, 0, 2, 15);
        let got = encode(&extend(me, XID, MAC));
        // No broadcast flag, ciaddr set, and neither option 50 nor 54.
        assert_eq!(&got[10..16], &hex("0000 0a00020f")[..]);
        let want = hex("350103 3d07 01525400123456 3706 0103063379f9 ff");
        assert_eq!(&got[240..240 + want.len()], &want[..]);
        let got = encode(&release(me, Some(Ipv4Addr::new(10, 0, 2, 2)), XID, MAC));
        assert_eq!(&got[12..16], &me.octets());
        let want = hex("350107 3d07 01525400123456 3604 0a000202 ff");
        assert_eq!(&got[240..240 + want.len()], &want[..]);
        assert_eq!(decode(&got).unwrap().kind, Kind::Release);
    }

    #[test]
    fn bad_packets() {
        let p = slirp_reply(2);
        assert_eq!(decode(&p[..100]), Err(DecodeError::Short(100)));
        let mut nomagic = p.clone();
        nomagic[236] = 0;
        assert_eq!(decode(&nomagic), Err(DecodeError::NoMagic));
        // Cut inside the DNS option (its length says 4, 2 remain).
        let cut = p.len() - 4;
        assert_eq!(decode(&p[..cut]), Err(DecodeError::Truncated(6)));
        let mut notype = p.clone();
        notype[242] = 9;
        assert_eq!(decode(&notype), Err(DecodeError::NoType));
        let mut badlen = p[..240].to_vec();
        badlen.extend(hex("350102 3303 0a0002 ff"));
        assert_eq!(decode(&badlen), Err(DecodeError::BadLength(51)));
    }

    /// Each row: the options after the type, what is skipped (option
    /// code), and the routers and DNS servers kept.
    #[test]
    fn malformed_optional_options_are_skipped() {
        type Row = (&'static str, &'static [u8], usize, usize);
        let rows: &[Row] = &[
            ("0600 0304 0a000202", &[6], 1, 0),
            ("0603 0a0002 0604 0a000203", &[6], 0, 1),
            ("0303 0a0002 0608 0a000203 0a000204", &[3], 0, 2),
            ("3a02 0001 3b05 0000000100", &[58, 59], 0, 0),
            ("7902 2001 0304 0a000202", &[121], 1, 0),
            ("7906 21 0a000000 00", &[121], 0, 0),
        ];
        for (options, skipped, routers, dns) in rows {
            let mut p = slirp_reply(5)[..240].to_vec();
            p.extend(hex(&format!("350105 3604 0a000202 {options} ff")));
            let m = decode(&p).unwrap_or_else(|e| panic!("{options}: {e}"));
            let codes: Vec<u8> = m.skipped.iter().map(|s| s.code).collect();
            assert_eq!(&codes, skipped, "{options}");
            assert_eq!(
                (m.routers.len(), m.dns.len()),
                (*routers, *dns),
                "{options}"
            );
            assert_eq!((m.t1, m.t2), (None, None), "{options}");
        }
        assert_eq!(option_name(6), "DNS servers");
    }

    #[test]
    fn classless_routes_parse() {
        type Row = (
            &'static str,
            Result<Vec<(&'static str, u8, &'static str)>, ()>,
        );
        let rows: Vec<Row> = vec![
            // RFC 3442's examples: a default route and 10.17/16.
            (
                "00 0a000001 10 0a11 0a000002",
                Ok(vec![
                    ("0.0.0.0", 0, "10.0.0.1"),
                    ("10.17.0.0", 16, "10.0.0.2"),
                ]),
            ),
            // /32 and /25 take all or part of a fourth octet; the bits
            // past the length are dropped.
            (
                "20 c0000201 00000000 19 0a0000ff 0a000001",
                Ok(vec![
                    ("192.0.2.1", 32, "0.0.0.0"),
                    ("10.0.0.128", 25, "10.0.0.1"),
                ]),
            ),
            ("21 0a000000 0a000001", Err(())),
            ("18 0a0000 0a00", Err(())),
            ("00 0a00", Err(())),
        ];
        for (bytes, want) in rows {
            let got = parse_classless(&hex(bytes)).map_err(|_| ());
            let want = want.map(|v| {
                v.into_iter()
                    .map(|(d, p, g)| (d.parse().unwrap(), p, g.parse().unwrap()))
                    .collect::<Vec<_>>()
            });
            assert_eq!(got, want, "{bytes}");
        }
        // 249 counts only without 121.
        let mut p = slirp_reply(5)[..240].to_vec();
        p.extend(hex("350105 f905 00 0a000009 7905 00 0a000001 ff"));
        assert_eq!(
            decode(&p).unwrap().classless,
            [(Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(10, 0, 0, 1))]
        );
        let mut p = slirp_reply(5)[..240].to_vec();
        p.extend(hex("350105 f905 00 0a000009 ff"));
        assert_eq!(
            decode(&p).unwrap().classless,
            [(Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(10, 0, 0, 9))]
        );
    }

    #[test]
    fn xids_differ_by_machine_and_boot() {
        let t = Duration::new(1_700_000_000, 5);
        let other = [0x52, 0x54, 0, 0x12, 0x34, 0x57];
        assert_ne!(decide_xid(MAC, t), decide_xid(other, t));
        assert_ne!(
            decide_xid(MAC, t),
            decide_xid(MAC, t + Duration::from_nanos(1))
        );
    }

    #[test]
    fn masks() {
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 255, 255, 0)), Some(24));
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 255, 255, 255)), Some(32));
        assert_eq!(mask_prefix(Ipv4Addr::UNSPECIFIED), Some(0));
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 0, 255, 0)), None);
        assert_eq!(default_prefix(Ipv4Addr::new(10, 0, 2, 15)), 8);
        assert_eq!(default_prefix(Ipv4Addr::new(192, 168, 1, 2)), 24);
    }
}
