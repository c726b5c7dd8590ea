//! DHCPv4 (RFC 2131, options from RFC 2132): the message codec, the
//! client's decisions, and the exchange over a UDP socket.
//!
//! The codec and [`decide_reply`] are pure and tested on packet bytes;
//! [`acquire`] is the thin loop that sends, waits and retransmits. The
//! client asks servers to broadcast their replies, because until it is
//! bound the interface has no address a unicast reply could reach.
//!
//! Only what a boot needs is built: DISCOVER, OFFER, REQUEST, ACK and
//! NAK. Renewal is not: a lease is taken once at boot, and a machine
//! whose lease runs out keeps the address (the kernel does not expire
//! it), so DHCP servers should hand long leases or reservations.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

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
const OPT_CLIENT_ID: u8 = 61;
const OPT_END: u8 = 255;

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
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Discover => 1,
            Kind::Offer => 2,
            Kind::Request => 3,
            Kind::Ack => 5,
            Kind::Nak => 6,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Discover,
            2 => Kind::Offer,
            3 => Kind::Request,
            5 => Kind::Ack,
            6 => Kind::Nak,
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
    /// Option 54.
    pub server_id: Option<Ipv4Addr>,
    /// Option 50.
    pub requested_ip: Option<Ipv4Addr>,
    /// Option 55.
    pub params: Vec<u8>,
    /// Option 61.
    pub client_id: Vec<u8>,
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
            your_ip: Ipv4Addr::UNSPECIFIED,
            mac,
            kind,
            subnet: None,
            routers: Vec::new(),
            dns: Vec::new(),
            lease_secs: None,
            server_id: None,
            requested_ip: None,
            params: vec![OPT_SUBNET, OPT_ROUTER, OPT_DNS, OPT_LEASE],
            // Type 1 (Ethernet) followed by the MAC, as RFC 2132 suggests.
            client_id: client_id(mac),
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
    out.extend_from_slice(&Ipv4Addr::UNSPECIFIED.octets()); // ciaddr
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
    if let Some(secs) = m.lease_secs {
        push_opt(&mut out, OPT_LEASE, &secs.to_be_bytes());
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
    let your_ip = field(16, 4).and_then(ipv4).ok_or_else(short)?;
    let mac: [u8; 6] = field(28, 6)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(short)?;
    let mut m = Message {
        op: fixed.first().copied().unwrap_or(0),
        xid,
        broadcast: flags & FLAG_BROADCAST != 0,
        your_ip,
        mac,
        kind: Kind::Discover,
        subnet: None,
        routers: Vec::new(),
        dns: Vec::new(),
        lease_secs: None,
        server_id: None,
        requested_ip: None,
        params: Vec::new(),
        client_id: Vec::new(),
    };
    let mut kind = None;
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
            OPT_ROUTER => m.routers = addrs(code, data)?,
            OPT_DNS => m.dns = addrs(code, data)?,
            OPT_LEASE => {
                let b: [u8; 4] = data.try_into().map_err(|_| DecodeError::BadLength(code))?;
                m.lease_secs = Some(u32::from_be_bytes(b));
            }
            OPT_SERVER_ID => m.server_id = Some(one_addr(code, data)?),
            OPT_REQUESTED_IP => m.requested_ip = Some(one_addr(code, data)?),
            OPT_PARAMS => m.params = data.to_vec(),
            OPT_CLIENT_ID => m.client_id = data.to_vec(),
            // Options this client has no use for are skipped.
            _ => {}
        }
    }
    m.kind = kind.ok_or(DecodeError::NoType)?;
    Ok(m)
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
}

/// Where the exchange stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// DISCOVER sent, waiting for an OFFER.
    Selecting,
    /// REQUEST sent for this offer, waiting for the ACK.
    Requesting(Message),
}

/// What to do with a packet that arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Not for us, or not what this phase waits for.
    Ignore,
    /// Take the offer: send this REQUEST and wait in the new phase.
    Request(Message),
    /// The server confirmed.
    Bound(Lease),
    /// The server refused; start over with a DISCOVER.
    Restart,
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

/// Decides what a packet `m` means to a client with hardware address
/// `mac`, in transaction `xid`, in `phase`.
pub fn decide_reply(phase: &Phase, xid: u32, mac: [u8; 6], m: &Message) -> Reply {
    if m.op != BOOTREPLY || m.xid != xid || m.mac != mac {
        return Reply::Ignore;
    }
    match (phase, m.kind) {
        (Phase::Selecting, Kind::Offer) if !m.your_ip.is_unspecified() => {
            Reply::Request(request(m, mac))
        }
        (Phase::Requesting(sent), Kind::Ack) => {
            // An ACK from another server than the one we asked is for
            // someone else's REQUEST in a shared broadcast domain.
            if sent.server_id.is_some() && m.server_id.is_some() && sent.server_id != m.server_id {
                return Reply::Ignore;
            }
            let prefix = m
                .subnet
                .and_then(mask_prefix)
                .unwrap_or_else(|| default_prefix(m.your_ip));
            Reply::Bound(Lease {
                address: m.your_ip,
                prefix,
                router: m.routers.first().copied(),
                dns: m.dns.clone(),
                lease_secs: m.lease_secs,
                server: m.server_id,
            })
        }
        (Phase::Requesting(sent), Kind::Nak)
            if sent.server_id.is_none() || m.server_id == sent.server_id =>
        {
            Reply::Restart
        }
        _ => Reply::Ignore,
    }
}

/// Why no lease was had.
#[derive(Debug)]
pub enum DhcpError {
    /// The socket could not be set up.
    Socket(io::Error),
    /// No server answered in time.
    Timeout(Duration),
}

impl fmt::Display for DhcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DhcpError::Socket(e) => write!(f, "cannot open the DHCP client socket: {e}"),
            DhcpError::Timeout(d) => write!(
                f,
                "no DHCP lease within {}s; check the cable and the DHCP server, \
                 or give the interface static addresses",
                d.as_secs()
            ),
        }
    }
}

fn open_socket(interface: &str) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68))?;
    sock.set_broadcast(true)?;
    nix::sys::socket::setsockopt(
        &sock,
        nix::sys::socket::sockopt::BindToDevice,
        &std::ffi::OsString::from(interface),
    )?;
    Ok(sock)
}

/// Taking a lease on an interface that is up.
pub trait DhcpClient {
    /// A lease on `interface` for hardware address `mac`, or why not.
    fn lease(&self, interface: &str, mac: [u8; 6]) -> Result<Lease, String>;
}

/// The real client over UDP, waiting at most `deadline` per interface.
pub struct RealDhcp {
    /// How long one interface may take.
    pub deadline: Duration,
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

impl DhcpClient for RealDhcp {
    fn lease(&self, interface: &str, mac: [u8; 6]) -> Result<Lease, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        acquire(interface, mac, decide_xid(mac, now), self.deadline).map_err(|e| e.to_string())
    }
}

/// Takes a lease on `interface` (which must be up), giving up after
/// `deadline`. `xid` should differ between machines and boots.
pub fn acquire(
    interface: &str,
    mac: [u8; 6],
    xid: u32,
    deadline: Duration,
) -> Result<Lease, DhcpError> {
    let sock = open_socket(interface).map_err(DhcpError::Socket)?;
    let server = SocketAddrV4::new(Ipv4Addr::BROADCAST, 67);
    let started = Instant::now();
    let mut phase = Phase::Selecting;
    let mut outgoing = discover(xid, mac);
    // RFC 2131 asks for randomised exponential backoff from 4 s; a boot
    // waits for this, so start at 1 s and cap at 4 s.
    let mut wait = Duration::from_secs(1);
    let mut buf = [0u8; 1500];
    while started.elapsed() < deadline {
        // A send failure (no carrier yet) is retried like a lost packet.
        let _ = sock.send_to(&encode(&outgoing), server);
        let until = Instant::now()
            .checked_add(wait)
            .unwrap_or_else(Instant::now);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if sock.set_read_timeout(Some(left)).is_err() {
                break;
            }
            let Ok((n, _)) = sock.recv_from(&mut buf) else {
                break;
            };
            let Some(Ok(m)) = buf.get(..n).map(decode) else {
                continue;
            };
            match decide_reply(&phase, xid, mac, &m) {
                Reply::Ignore => {}
                Reply::Request(req) => {
                    outgoing = req.clone();
                    phase = Phase::Requesting(req);
                    let _ = sock.send_to(&encode(&outgoing), server);
                }
                Reply::Bound(lease) => return Ok(lease),
                Reply::Restart => {
                    phase = Phase::Selecting;
                    outgoing = discover(xid, mac);
                    break;
                }
            }
        }
        wait = wait.saturating_mul(2).min(Duration::from_secs(4));
    }
    Err(DhcpError::Timeout(deadline))
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
            "63825363 350101 3d07 01525400123456 3704 01 03 06 33 ff",
        ));
        want.resize(300, 0);
        assert_eq!(got, want);
    }

    #[test]
    fn request_names_offer_and_server() {
        let offer = decode(&slirp_reply(2)).unwrap();
        let got = encode(&request(&offer, MAC));
        let options = &got[240..];
        let want = hex("350103 3d07 01525400123456 3204 0a00020f 3604 0a000202 3704 01030633 ff");
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
    fn full_exchange() {
        let offer = decode(&slirp_reply(2)).unwrap();
        let Reply::Request(req) = decide_reply(&Phase::Selecting, XID, MAC, &offer) else {
            panic!("offer not taken");
        };
        assert_eq!(req.kind, Kind::Request);
        let phase = Phase::Requesting(req);
        let ack = decode(&slirp_reply(5)).unwrap();
        assert_eq!(
            decide_reply(&phase, XID, MAC, &ack),
            Reply::Bound(Lease {
                address: Ipv4Addr::new(10, 0, 2, 15),
                prefix: 24,
                router: Some(Ipv4Addr::new(10, 0, 2, 2)),
                dns: vec![Ipv4Addr::new(10, 0, 2, 3)],
                lease_secs: Some(86400),
                server: Some(Ipv4Addr::new(10, 0, 2, 2)),
            })
        );
        let nak = decode(&slirp_reply(6)).unwrap();
        assert_eq!(decide_reply(&phase, XID, MAC, &nak), Reply::Restart);
    }

    #[test]
    fn ignores_what_is_not_ours() {
        let offer = decode(&slirp_reply(2)).unwrap();
        assert_eq!(
            decide_reply(&Phase::Selecting, XID + 1, MAC, &offer),
            Reply::Ignore
        );
        let mut other = MAC;
        other[5] = 0x57;
        assert_eq!(
            decide_reply(&Phase::Selecting, XID, other, &offer),
            Reply::Ignore
        );
        // An ACK while still selecting is someone else's.
        let ack = decode(&slirp_reply(5)).unwrap();
        assert_eq!(
            decide_reply(&Phase::Selecting, XID, MAC, &ack),
            Reply::Ignore
        );
        // Our own broadcast DISCOVER looped back is a request, not a reply.
        let own = decode(&encode(&discover(XID, MAC))).unwrap();
        assert_eq!(
            decide_reply(&Phase::Selecting, XID, MAC, &own),
            Reply::Ignore
        );
        // An ACK from a server we did not ask.
        let Reply::Request(req) = decide_reply(&Phase::Selecting, XID, MAC, &offer) else {
            panic!("offer not taken");
        };
        let mut ack = decode(&slirp_reply(5)).unwrap();
        ack.server_id = Some(Ipv4Addr::new(10, 0, 2, 9));
        assert_eq!(
            decide_reply(&Phase::Requesting(req), XID, MAC, &ack),
            Reply::Ignore
        );
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
        badlen.extend(hex("350102 0303 0a0002 ff"));
        assert_eq!(decode(&badlen), Err(DecodeError::BadLength(3)));
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
