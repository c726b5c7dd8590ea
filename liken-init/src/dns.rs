//! A DNS stub resolver for init's own name lookups (the Machine's NTP
//! servers): A and AAAA queries over UDP (to IPv4 or IPv6 servers) to
//! the nameservers in the resolv.conf the network step wrote.
//!
//! Why not the C library's resolver: std resolves names through glibc's
//! getaddrinfo, and in a static binary that pulls in NSS, the dynamic
//! loader's machinery, iconv and gettext, about a quarter of init's
//! size budget, for one lookup per boot. It also has no deadline of its
//! own. Init needs far less: the addresses of a name, from at most three
//! servers it wrote itself.
//!
//! What this resolver does, and its limits:
//! - An IP literal is returned as it is, with no query.
//! - One question per query, recursion desired, a fresh random ID each
//!   time. An answer counts only when it is a response with our ID and
//!   repeats our question exactly (name compared case-insensitively,
//!   type A or AAAA, class IN); anything else on the socket is ignored,
//!   and the socket is connected, so the kernel drops datagrams from any
//!   other address.
//! - A name's IPv4 addresses come first, then its IPv6 ones: a server
//!   that has A records is asked for AAAA too, one that has none only
//!   for AAAA.
//! - CNAME chains are followed within the answer section (up to
//!   [`MAX_CNAMES`] links); a chain the server did not resolve counts as
//!   "no address", as this resolver asks no second question.
//! - A truncated answer (TC) is an error for that server: there is no TCP
//!   fallback, and an A answer for one name fits in 512 bytes unless a
//!   server is misbehaving.
//! - Each server is tried in resolv.conf's order, twice round, sharing
//!   one overall deadline. NXDOMAIN or an answer without an address ends
//!   the search (another server would say the same); a timeout, a
//!   refusal, SERVFAIL, truncation or a malformed answer moves on to the
//!   next server.
//! - No search domains, no /etc/hosts, no caching.
//!
//! [`encode_query`], [`decode_reply`] and [`parse_resolv_conf`] are pure
//! and tested with byte fixtures; [`Resolver::resolve`] carries them out
//! over std's UDP, tested against a real responder on 127.0.0.1.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

/// The DNS port.
pub const PORT: u16 = 53;

/// How many CNAME links of an answer are followed.
pub const MAX_CNAMES: usize = 8;

/// How many nameservers resolv.conf may name (the C library's limit).
pub const MAX_NAMESERVERS: usize = 3;

/// How many times each server is asked before the lookup gives up.
const ROUNDS: u32 = 2;

/// The largest answer over UDP without EDNS (RFC 1035 section 4.2.1).
const UDP_LIMIT: usize = 512;

/// The longest name on the wire, length bytes and root included.
const MAX_NAME: usize = 255;

const HEADER_LEN: usize = 12;
/// Record type A: an IPv4 address.
pub const TYPE_A: u16 = 1;
/// Record type AAAA: an IPv6 address.
pub const TYPE_AAAA: u16 = 28;
const TYPE_CNAME: u16 = 5;
const CLASS_IN: u16 = 1;

const FLAG_RESPONSE: u16 = 0x8000;
const FLAG_TRUNCATED: u16 = 0x0200;
const FLAG_RECURSION_DESIRED: u16 = 0x0100;
const RCODE_NXDOMAIN: u8 = 3;

/// A domain name in its uncompressed wire form (length-prefixed labels
/// ending with the root's zero), ASCII letters lowercased, so two names
/// are equal exactly when DNS says they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name(Vec<u8>);

impl Name {
    /// Parses a dotted host name (one trailing dot allowed). Labels are
    /// 1 to 63 letters, digits, `-` or `_`, and the whole name fits the
    /// wire's 255 bytes.
    pub fn parse(text: &str) -> Result<Name, NameError> {
        let text = text.strip_suffix('.').unwrap_or(text);
        if text.is_empty() {
            return Err(NameError::Empty);
        }
        let mut wire = Vec::with_capacity(text.len().saturating_add(2));
        for label in text.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel);
            }
            let len = u8::try_from(label.len())
                .ok()
                .filter(|&n| n <= 63)
                .ok_or(NameError::LongLabel)?;
            if let Some(c) = label
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            {
                return Err(NameError::Character(c));
            }
            wire.push(len);
            wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
        wire.push(0);
        if wire.len() > MAX_NAME {
            return Err(NameError::Long);
        }
        Ok(Name(wire))
    }

    /// The wire form.
    pub fn wire(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for Name {
    /// Dotted, without the root's dot; bytes that are not printable
    /// ASCII (possible in a name a server sent) show as `\ddd`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_slice();
        let mut first = true;
        while let Some((&len, tail)) = rest.split_first() {
            if len == 0 {
                break;
            }
            let (label, after) = tail.split_at(usize::from(len).min(tail.len()));
            if !first {
                f.write_str(".")?;
            }
            first = false;
            for &b in label {
                if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                    write!(f, "{}", char::from(b))?;
                } else {
                    write!(f, "\\{b:03}")?;
                }
            }
            rest = after;
        }
        if first {
            f.write_str(".")?;
        }
        Ok(())
    }
}

/// Why a host name cannot be asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// Nothing at all.
    Empty,
    /// Two dots in a row, or a leading dot.
    EmptyLabel,
    /// A label over 63 characters.
    LongLabel,
    /// The whole name over 253 characters.
    Long,
    /// A character host names do not have.
    Character(char),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("the name is empty"),
            NameError::EmptyLabel => f.write_str("the name has an empty label (two dots in a row)"),
            NameError::LongLabel => f.write_str("a label of the name is longer than 63 characters"),
            NameError::Long => f.write_str("the name is longer than 253 characters"),
            NameError::Character(c) => write!(
                f,
                "{c:?} is not allowed in a host name (letters, digits, '-' and '_')"
            ),
        }
    }
}

/// The query for the addresses of `name` of type `qtype` ([`TYPE_A`]
/// or [`TYPE_AAAA`]): header with `id` and recursion desired, one
/// question of that type, class IN.
pub fn encode_query(id: u16, name: &Name, qtype: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(HEADER_LEN.saturating_add(name.0.len()).saturating_add(4));
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&FLAG_RECURSION_DESIRED.to_be_bytes());
    // One question; no answer, authority or additional records.
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    p.extend_from_slice(&name.0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&CLASS_IN.to_be_bytes());
    p
}

/// What a server's answer to our question says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The name's addresses of the asked type, in the server's order,
    /// each once.
    Addresses(Vec<IpAddr>),
    /// NXDOMAIN: the name does not exist.
    NoSuchName,
    /// The name exists but the answer holds no address of the asked
    /// type for it (or only the start of a CNAME chain).
    NoAddress,
}

/// Why a datagram gave no [`Reply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not an answer to our query (another ID, not a response, another
    /// question): ignored, and the wait goes on.
    NotOurs,
    /// TC set: the answer did not fit in UDP.
    Truncated,
    /// The server answered with an error code (2 SERVFAIL, 4 NOTIMP,
    /// 5 REFUSED, ...).
    Rcode(u8),
    /// The answer breaks the format.
    Malformed(&'static str),
    /// The CNAME chain is longer than [`MAX_CNAMES`] or loops.
    CnameChain,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotOurs => f.write_str("the datagram does not answer our query"),
            Refusal::Truncated => f.write_str(
                "the answer was truncated (TC) and this resolver does not retry over TCP",
            ),
            Refusal::Rcode(2) => f.write_str("the server failed to answer (SERVFAIL)"),
            Refusal::Rcode(4) => f.write_str("the server does not support the query (NOTIMP)"),
            Refusal::Rcode(5) => f.write_str("the server refused the query (REFUSED)"),
            Refusal::Rcode(c) => write!(f, "the server answered with error code {c}"),
            Refusal::Malformed(why) => write!(f, "malformed answer: {why}"),
            Refusal::CnameChain => write!(
                f,
                "the answer's CNAME chain loops or is longer than {MAX_CNAMES} links"
            ),
        }
    }
}

/// One record of the answer section that this resolver uses.
enum Record {
    Address(IpAddr),
    Cname(Name),
}

/// Checks a datagram against the query with `id` for `name` of type
/// `qtype` and reads the addresses it gives.
pub fn decode_reply(packet: &[u8], id: u16, name: &Name, qtype: u16) -> Result<Reply, Refusal> {
    let header = packet.get(..HEADER_LEN).ok_or(Refusal::NotOurs)?;
    let field = |at: usize| be_u16(header, at).unwrap_or(0);
    let flags = field(2);
    if field(0) != id || flags & FLAG_RESPONSE == 0 {
        return Err(Refusal::NotOurs);
    }
    let rcode = (flags & 0x000F) as u8;
    let questions = field(4);
    let answers = field(6);
    if questions == 0 && rcode != 0 {
        // Some servers drop the question from an error answer.
        return Err(Refusal::Rcode(rcode));
    }
    if questions != 1 {
        return Err(Refusal::NotOurs);
    }
    let mut at = HEADER_LEN;
    let question = read_name(packet, at).map_err(|_| Refusal::NotOurs)?;
    at = question.end;
    let asked = be_u16(packet, at).ok_or(Refusal::NotOurs)?;
    let qclass = be_u16(packet, at.saturating_add(2)).ok_or(Refusal::NotOurs)?;
    if question.name != *name || asked != qtype || qclass != CLASS_IN {
        return Err(Refusal::NotOurs);
    }
    at = at.saturating_add(4);
    if flags & FLAG_TRUNCATED != 0 {
        return Err(Refusal::Truncated);
    }
    match rcode {
        0 => {}
        RCODE_NXDOMAIN => return Ok(Reply::NoSuchName),
        other => return Err(Refusal::Rcode(other)),
    }
    let mut records: Vec<(Name, Record)> = Vec::new();
    for _ in 0..answers {
        let owner = read_name(packet, at).map_err(Refusal::Malformed)?;
        at = owner.end;
        let fixed = packet
            .get(at..at.saturating_add(10))
            .ok_or(Refusal::Malformed("a record is cut short"))?;
        let rtype = be_u16(fixed, 0).unwrap_or(0);
        let rclass = be_u16(fixed, 2).unwrap_or(0);
        let rdlength = usize::from(be_u16(fixed, 8).unwrap_or(0));
        let data_at = at.saturating_add(10);
        let data_end = data_at
            .checked_add(rdlength)
            .filter(|&end| end <= packet.len())
            .ok_or(Refusal::Malformed("a record's data runs past the end"))?;
        let data = packet.get(data_at..data_end).unwrap_or(&[]);
        if rclass == CLASS_IN {
            match rtype {
                TYPE_A if qtype == TYPE_A => {
                    let octets: [u8; 4] = data
                        .try_into()
                        .map_err(|_| Refusal::Malformed("an A record is not 4 bytes"))?;
                    records.push((owner.name, Record::Address(Ipv4Addr::from(octets).into())));
                }
                TYPE_AAAA if qtype == TYPE_AAAA => {
                    let octets: [u8; 16] = data
                        .try_into()
                        .map_err(|_| Refusal::Malformed("an AAAA record is not 16 bytes"))?;
                    records.push((owner.name, Record::Address(Ipv6Addr::from(octets).into())));
                }
                TYPE_CNAME => {
                    let target = read_name(packet, data_at).map_err(Refusal::Malformed)?;
                    if target.end != data_end {
                        return Err(Refusal::Malformed("a CNAME's data is not one name"));
                    }
                    records.push((owner.name, Record::Cname(target.name)));
                }
                // RRSIGs and the like: not ours to read.
                _ => {}
            }
        }
        at = data_end;
    }
    decide_addresses(name, &records)
}

/// The addresses for `name` in `records`, following CNAMEs.
fn decide_addresses(name: &Name, records: &[(Name, Record)]) -> Result<Reply, Refusal> {
    let mut current = name;
    for _ in 0..=MAX_CNAMES {
        let mut addresses: Vec<IpAddr> = Vec::new();
        for (owner, record) in records {
            if let Record::Address(ip) = record
                && owner == current
                && !addresses.contains(ip)
            {
                addresses.push(*ip);
            }
        }
        if !addresses.is_empty() {
            return Ok(Reply::Addresses(addresses));
        }
        let next = records.iter().find_map(|(owner, record)| match record {
            Record::Cname(target) if owner == current => Some(target),
            _ => None,
        });
        match next {
            Some(target) => current = target,
            None => return Ok(Reply::NoAddress),
        }
    }
    Err(Refusal::CnameChain)
}

/// A name read from a packet and where the bytes after it start.
struct ReadName {
    name: Name,
    end: usize,
}

/// Reads the (possibly compressed) name at `at`. A compression pointer
/// must point before the run of labels it ends, so every jump goes
/// strictly backwards and a hostile packet cannot loop.
fn read_name(packet: &[u8], at: usize) -> Result<ReadName, &'static str> {
    let mut wire = Vec::new();
    let mut pos = at;
    let mut run_start = at;
    let mut end = None;
    loop {
        let len = *packet.get(pos).ok_or("a name runs past the end")?;
        match len & 0xC0 {
            0xC0 => {
                let low = *packet
                    .get(pos.saturating_add(1))
                    .ok_or("a name runs past the end")?;
                let target = usize::from(u16::from_be_bytes([len & 0x3F, low]));
                if target >= run_start {
                    return Err("a compression pointer does not point backwards");
                }
                end.get_or_insert(pos.saturating_add(2));
                pos = target;
                run_start = target;
            }
            0x00 => {
                let label_end = pos.saturating_add(1).saturating_add(usize::from(len));
                let label = packet
                    .get(pos..label_end)
                    .ok_or("a name runs past the end")?;
                wire.extend(label.iter().map(u8::to_ascii_lowercase));
                if wire.len() > MAX_NAME {
                    return Err("a name is longer than 255 bytes");
                }
                if len == 0 {
                    return Ok(ReadName {
                        name: Name(wire),
                        end: end.unwrap_or(label_end),
                    });
                }
                pos = label_end;
            }
            _ => return Err("a name uses an unknown label type"),
        }
    }
}

fn be_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

/// The nameservers resolv.conf names, in its order, at most
/// [`MAX_NAMESERVERS`]. Comments (`#`, `;`), other options and entries
/// that are not an IP address (a scoped IPv6 address, say) are skipped.
pub fn parse_resolv_conf(text: &str) -> Vec<IpAddr> {
    let mut servers = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        if !servers.contains(&ip) {
            servers.push(ip);
        }
        if servers.len() >= MAX_NAMESERVERS {
            break;
        }
    }
    servers
}

/// Why a lookup found no address.
#[derive(Debug)]
pub enum ResolveError {
    /// The name is not a host name.
    BadName(NameError),
    /// There is no server to ask; the text says why.
    NoNameservers(String),
    /// A server said the name does not exist.
    NoSuchName(SocketAddr),
    /// A server said the name has no address.
    NoAddress(SocketAddr),
    /// No server gave an answer; what each did.
    Failed(Vec<(SocketAddr, ServerError)>),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::BadName(e) => write!(f, "{e}"),
            ResolveError::NoNameservers(why) => write!(
                f,
                "{why}: give the interface DNS servers (spec.network.interfaces[].dns) or use \
                 DHCP, or name the server by IP address"
            ),
            ResolveError::NoSuchName(server) => {
                write!(f, "DNS server {} says the name does not exist", server.ip())
            }
            ResolveError::NoAddress(server) => {
                write!(f, "DNS server {} has no address for the name", server.ip())
            }
            ResolveError::Failed(each) => {
                f.write_str("no DNS server answered (")?;
                for (i, (server, e)) in each.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{}: {e}", server.ip())?;
                }
                f.write_str("): check that the DNS servers are reachable (UDP port 53)")
            }
        }
    }
}

/// Why one server gave no answer on one try.
#[derive(Debug)]
pub enum ServerError {
    /// The socket could not be made or used (no route, port refused).
    Socket(io::Error),
    /// Nothing usable within the wait; the count is of datagrams that
    /// did not answer our query.
    Timeout {
        /// How long we waited.
        waited: Duration,
        /// Datagrams ignored.
        ignored: usize,
    },
    /// An answer that cannot be used.
    Refused(Refusal),
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Socket(e) => write!(f, "{e}"),
            ServerError::Timeout { waited, ignored } => {
                write!(f, "no answer within {} ms", waited.as_millis())?;
                if *ignored > 0 {
                    write!(f, " ({ignored} stray datagrams ignored)")?;
                }
                Ok(())
            }
            ServerError::Refused(r) => write!(f, "{r}"),
        }
    }
}

/// The servers to ask and how long a lookup may take.
#[derive(Debug)]
pub struct Resolver {
    /// Where the servers are, or why there are none.
    servers: Result<Vec<SocketAddr>, String>,
    /// One lookup's whole deadline, shared by every try.
    deadline: Duration,
}

impl Resolver {
    /// Asks `servers` (address and port), with `deadline` per lookup.
    pub fn new(servers: Vec<SocketAddr>, deadline: Duration) -> Resolver {
        let servers = if servers.is_empty() {
            Err("no DNS server is configured".to_owned())
        } else {
            Ok(servers)
        };
        Resolver { servers, deadline }
    }

    /// Asks the nameservers the resolv.conf at `path` lists, on port 53.
    /// A missing or empty file is reported when a name needs them, so a
    /// Machine that names its servers by address never needs DNS.
    pub fn from_resolv_conf(path: &Path, deadline: Duration) -> Resolver {
        let servers = match std::fs::read_to_string(path) {
            Ok(text) => {
                let servers: Vec<SocketAddr> = parse_resolv_conf(&text)
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, PORT))
                    .collect();
                if servers.is_empty() {
                    Err(format!("{} names no nameserver", path.display()))
                } else {
                    Ok(servers)
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
                "{} does not exist (the network step found no DNS server)",
                path.display()
            )),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        };
        Resolver { servers, deadline }
    }

    /// The addresses of `host`: an IP literal as it is, else the name's
    /// addresses (IPv4 first) from the first server that answers.
    pub fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let name = Name::parse(host).map_err(ResolveError::BadName)?;
        let servers = self
            .servers
            .as_ref()
            .map_err(|why| ResolveError::NoNameservers(why.clone()))?;
        let tries = u32::try_from(servers.len())
            .unwrap_or(u32::MAX)
            .saturating_mul(ROUNDS)
            .max(1);
        let per_try = self.deadline.checked_div(tries).unwrap_or(self.deadline);
        let started = Instant::now();
        let mut failures = Vec::new();
        for _ in 0..ROUNDS {
            for &server in servers {
                let left = self.deadline.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(ResolveError::Failed(failures));
                }
                let wait = per_try.min(left);
                let first = ask(server, &name, TYPE_A, wait);
                // The IPv6 addresses, after the IPv4 ones; a server that
                // answered A but not AAAA still gave an answer.
                let answer = match first {
                    Ok(Reply::Addresses(mut ips)) => {
                        if let Ok(Reply::Addresses(v6)) = ask(server, &name, TYPE_AAAA, wait) {
                            ips.extend(v6);
                        }
                        Ok(Reply::Addresses(ips))
                    }
                    Ok(Reply::NoAddress) => ask(server, &name, TYPE_AAAA, wait),
                    other => other,
                };
                match answer {
                    Ok(Reply::Addresses(ips)) => return Ok(ips),
                    Ok(Reply::NoSuchName) => return Err(ResolveError::NoSuchName(server)),
                    Ok(Reply::NoAddress) => return Err(ResolveError::NoAddress(server)),
                    Err(e) => failures.push((server, e)),
                }
            }
        }
        Err(ResolveError::Failed(failures))
    }
}

/// One query of type `qtype` to one server, waiting up to `wait` for
/// its answer.
fn ask(server: SocketAddr, name: &Name, qtype: u16, wait: Duration) -> Result<Reply, ServerError> {
    let socket = crate::udp::connected(server).map_err(ServerError::Socket)?;
    let id = random_id();
    socket
        .send(&encode_query(id, name, qtype))
        .map_err(ServerError::Socket)?;
    let started = Instant::now();
    let mut ignored: usize = 0;
    let mut buf = [0u8; UDP_LIMIT];
    loop {
        let Some(n) = crate::udp::recv_before(&socket, &mut buf, started, wait)
            .map_err(ServerError::Socket)?
        else {
            return Err(ServerError::Timeout {
                waited: wait,
                ignored,
            });
        };
        // A datagram longer than the buffer arrives cut to it; a server
        // that sends one is past UDP's limit and fails as malformed or
        // truncated below.
        match decode_reply(buf.get(..n).unwrap_or(&[]), id, name, qtype) {
            Err(Refusal::NotOurs) => ignored = ignored.saturating_add(1),
            Err(r) => return Err(ServerError::Refused(r)),
            Ok(reply) => return Ok(reply),
        }
    }
}

/// A query ID nobody off the path can guess: std's hasher keys come
/// from the kernel's random source, and each `RandomState` differs.
fn random_id() -> u16 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x6c69_6b65_6e64_6e73);
    (h.finish() & 0xFFFF) as u16
}

/// A DNS server on 127.0.0.1 for tests: answers each query with the
/// bytes its function makes from the query.
#[cfg(test)]
pub(crate) mod test_server {
    use std::net::{SocketAddr, UdpSocket};

    /// Starts the server; `answer` returns the datagrams to send back.
    pub(crate) fn start(answer: impl Fn(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> SocketAddr {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                for reply in answer(&buf[..n]) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        addr
    }

    /// An answer to `query` (ID and question copied) with `flags` and
    /// the answer records given as wire bytes.
    pub(crate) fn reply(query: &[u8], flags: u16, records: &[Vec<u8>]) -> Vec<u8> {
        let mut p = query.to_vec();
        p[2..4].copy_from_slice(&flags.to_be_bytes());
        p[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        for r in records {
            p.extend_from_slice(r);
        }
        p
    }

    /// An A record whose owner is the question's name (pointer to 12).
    pub(crate) fn a_for_question(ip: [u8; 4]) -> Vec<u8> {
        let mut r = vec![0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4];
        r.extend_from_slice(&ip);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::test_server::{a_for_question, reply, start};
    use super::*;

    const OK: u16 = 0x8180;

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn names_are_parsed_into_lowercase_wire_form() {
        assert_eq!(
            name("Pool.NTP.org.").wire(),
            b"\x04pool\x03ntp\x03org\x00".as_slice()
        );
        assert_eq!(name("time_1.example").to_string(), "time_1.example");
        assert_eq!(Name::parse(""), Err(NameError::Empty));
        assert_eq!(Name::parse("."), Err(NameError::Empty));
        assert_eq!(Name::parse("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(Name::parse(".a"), Err(NameError::EmptyLabel));
        assert_eq!(Name::parse(&"x".repeat(64)), Err(NameError::LongLabel));
        assert!(Name::parse(&"x".repeat(63)).is_ok());
        let long = vec!["abcdefghi"; 26].join(".");
        assert_eq!(Name::parse(&long), Err(NameError::Long));
        assert_eq!(Name::parse("a b"), Err(NameError::Character(' ')));
        assert_eq!(Name::parse("ä.example"), Err(NameError::Character('ä')));
    }

    #[test]
    fn the_query_is_one_recursive_a_question() {
        let q = encode_query(0xBEEF, &name("Time.Example"), TYPE_A);
        assert_eq!(
            q,
            b"\xBE\xEF\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04time\x07example\x00\x00\x01\x00\x01"
        );
    }

    /// A real answer as a recursive resolver sends it: `www.example.com`
    /// is a CNAME to `web.example.net`, which has two addresses, plus an
    /// RRSIG-like record of another type that is skipped.
    fn cname_fixture() -> Vec<u8> {
        let mut p = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 4, 0, 0, 0, 0];
        p.extend_from_slice(b"\x03WWW\x07example\x03com\x00\x00\x01\x00\x01");
        // www.example.com CNAME web.example.net (owner: pointer to 12).
        p.extend_from_slice(&[0xC0, 12, 0, 5, 0, 1, 0, 0, 1, 0, 0, 17]);
        let web_at = p.len();
        p.extend_from_slice(b"\x03web\x07example\x03net\x00");
        // An unused record type on the alias (type 46, 3 bytes of data).
        p.extend_from_slice(&[0xC0, 12, 0, 46, 0, 1, 0, 0, 1, 0, 0, 3, 1, 2, 3]);
        // Two A records owned by web.example.net (pointer to its name).
        for ip in [[192, 0, 2, 1], [192, 0, 2, 2]] {
            p.extend_from_slice(&[0xC0, web_at as u8, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            p.extend_from_slice(&ip);
        }
        p
    }

    #[test]
    fn a_cname_chain_in_the_answer_is_followed() {
        let p = cname_fixture();
        assert_eq!(
            decode_reply(&p, 0x1234, &name("www.example.com"), TYPE_A),
            Ok(Reply::Addresses(vec![
                Ipv4Addr::new(192, 0, 2, 1).into(),
                Ipv4Addr::new(192, 0, 2, 2).into()
            ]))
        );
    }

    #[test]
    fn answers_to_other_queries_are_not_ours() {
        let p = cname_fixture();
        let www = name("www.example.com");
        assert_eq!(
            decode_reply(&p, 0x1235, &www, TYPE_A),
            Err(Refusal::NotOurs)
        );
        assert_eq!(
            decode_reply(&p, 0x1234, &name("www.example.org"), TYPE_A),
            Err(Refusal::NotOurs)
        );
        // A query rather than a response.
        let mut q = p.clone();
        q[2] &= 0x7F;
        assert_eq!(
            decode_reply(&q, 0x1234, &www, TYPE_A),
            Err(Refusal::NotOurs)
        );
        // Another question type (AAAA).
        let mut aaaa = p.clone();
        aaaa[30] = 28;
        assert_eq!(
            decode_reply(&aaaa, 0x1234, &www, TYPE_A),
            Err(Refusal::NotOurs)
        );
        assert_eq!(
            decode_reply(&p, 0x1234, &www, TYPE_AAAA),
            Err(Refusal::NotOurs)
        );
        assert_eq!(
            decode_reply(&p[..11], 0x1234, &www, TYPE_A),
            Err(Refusal::NotOurs)
        );
    }

    #[test]
    fn error_codes_truncation_and_missing_addresses() {
        let www = name("www.example.com");
        let q = encode_query(7, &www, TYPE_A);
        let with = |flags: u16| reply(&q, flags, &[]);
        assert_eq!(
            decode_reply(&with(0x8183), 7, &www, TYPE_A),
            Ok(Reply::NoSuchName)
        );
        assert_eq!(
            decode_reply(&with(0x8182), 7, &www, TYPE_A),
            Err(Refusal::Rcode(2))
        );
        assert_eq!(
            decode_reply(&with(0x8185), 7, &www, TYPE_A),
            Err(Refusal::Rcode(5))
        );
        assert_eq!(
            decode_reply(&with(0x8380), 7, &www, TYPE_A),
            Err(Refusal::Truncated)
        );
        assert_eq!(
            decode_reply(&with(OK), 7, &www, TYPE_A),
            Ok(Reply::NoAddress)
        );
        // REFUSED without the question.
        let bare = [0, 7, 0x81, 0x85, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_reply(&bare, 7, &www, TYPE_A), Err(Refusal::Rcode(5)));
        // A CNAME whose target the answer does not resolve.
        let mut cname = vec![0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 4];
        cname.extend_from_slice(b"\x01x\xC0\x10");
        let p = reply(&q, OK, &[cname]);
        assert_eq!(decode_reply(&p, 7, &www, TYPE_A), Ok(Reply::NoAddress));
        // Duplicated addresses are given once.
        let a = a_for_question([10, 0, 0, 1]);
        let p = reply(&q, OK, &[a.clone(), a]);
        assert_eq!(
            decode_reply(&p, 7, &www, TYPE_A),
            Ok(Reply::Addresses(vec![Ipv4Addr::new(10, 0, 0, 1).into()]))
        );
    }

    #[test]
    fn hostile_answers_are_malformed_not_panics_or_loops() {
        let www = name("www.example.com");
        let q = encode_query(9, &www, TYPE_A);
        // A pointer to itself, and one pointing forward.
        let looped = reply(&q, OK, &[vec![0xC0, 33]]);
        assert!(matches!(
            decode_reply(&looped, 9, &www, TYPE_A),
            Err(Refusal::Malformed(_))
        ));
        // A run of labels that ends in a pointer back to its own start.
        let mut p = reply(&q, OK, &[]);
        p[7] = 1;
        let at = p.len() as u8;
        p.extend_from_slice(&[1, b'a', 0xC0, at]);
        assert!(matches!(
            decode_reply(&p, 9, &www, TYPE_A),
            Err(Refusal::Malformed(_))
        ));
        // An A record with 5 bytes of data, and data past the end.
        let mut bad_a = a_for_question([1, 2, 3, 4]);
        bad_a[11] = 5;
        bad_a.push(5);
        assert_eq!(
            decode_reply(&reply(&q, OK, &[bad_a]), 9, &www, TYPE_A),
            Err(Refusal::Malformed("an A record is not 4 bytes"))
        );
        let mut short = a_for_question([1, 2, 3, 4]);
        short[11] = 40;
        assert!(matches!(
            decode_reply(&reply(&q, OK, &[short]), 9, &www, TYPE_A),
            Err(Refusal::Malformed(_))
        ));
        // More answers announced than present.
        let mut p = reply(&q, OK, &[a_for_question([1, 2, 3, 4])]);
        p[7] = 2;
        assert!(matches!(
            decode_reply(&p, 9, &www, TYPE_A),
            Err(Refusal::Malformed(_))
        ));
        // A CNAME loop a -> a.
        let mut self_alias = vec![0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2];
        self_alias.extend_from_slice(&[0xC0, 12]);
        assert_eq!(
            decode_reply(&reply(&q, OK, &[self_alias]), 9, &www, TYPE_A),
            Err(Refusal::CnameChain)
        );
        // Every truncation of a good answer is refused, never a panic.
        let good = cname_fixture();
        let full = name("www.example.com");
        for n in 0..good.len() {
            assert!(
                decode_reply(&good[..n], 0x1234, &full, TYPE_A).is_err(),
                "{n}"
            );
        }
    }

    /// An AAAA record whose owner is the question's name.
    fn aaaa_for_question(ip: &str) -> Vec<u8> {
        let mut r = vec![0xC0, 12, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16];
        r.extend_from_slice(&ip.parse::<Ipv6Addr>().unwrap().octets());
        r
    }

    #[test]
    fn an_aaaa_question_takes_only_aaaa_records() {
        let www = name("www.example.com");
        let q = encode_query(3, &www, TYPE_AAAA);
        assert_eq!(&q[q.len() - 4..], &[0, 28, 0, 1]);
        let p = reply(
            &q,
            OK,
            &[a_for_question([10, 0, 0, 1]), aaaa_for_question("fd77::1")],
        );
        assert_eq!(
            decode_reply(&p, 3, &www, TYPE_AAAA),
            Ok(Reply::Addresses(vec!["fd77::1".parse().unwrap()]))
        );
        let mut bad = aaaa_for_question("fd77::1");
        bad[11] = 4;
        bad.truncate(16);
        assert_eq!(
            decode_reply(&reply(&q, OK, &[bad]), 3, &www, TYPE_AAAA),
            Err(Refusal::Malformed("an AAAA record is not 16 bytes"))
        );
    }

    #[test]
    fn ipv4_addresses_come_first_then_ipv6() {
        let answer = |q: &[u8]| {
            let record = if q[q.len() - 3] == 28 {
                aaaa_for_question("fd77::123")
            } else {
                a_for_question([192, 0, 2, 12])
            };
            vec![reply(q, OK, &[record])]
        };
        let both = start(answer);
        let r = Resolver::new(vec![both], Duration::from_secs(2));
        assert_eq!(
            r.resolve("ntp.example").unwrap(),
            vec![
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 12)),
                "fd77::123".parse::<IpAddr>().unwrap()
            ]
        );
        // A name with no A record is asked for AAAA.
        let v6_only = start(|q| {
            let records = if q[q.len() - 3] == 28 {
                vec![aaaa_for_question("fd77::124")]
            } else {
                vec![]
            };
            vec![reply(q, OK, &records)]
        });
        let r = Resolver::new(vec![v6_only], Duration::from_secs(2));
        assert_eq!(
            r.resolve("ntp.example").unwrap(),
            vec!["fd77::124".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn resolv_conf_gives_at_most_three_servers_in_order() {
        let text = "# by liken\nsearch example\nnameserver 10.0.2.3\n; old\nnameserver fe80::1%eth0\n\
                    nameserver 2001:db8::53\nnameserver 10.0.2.3\nnameserver 1.1.1.1\nnameserver 8.8.8.8\n";
        assert_eq!(
            parse_resolv_conf(text),
            vec![
                IpAddr::V4(Ipv4Addr::new(10, 0, 2, 3)),
                "2001:db8::53".parse::<IpAddr>().unwrap(),
                IpAddr::V4(Ipv4Addr::new(1, 1, 1, 1)),
            ]
        );
        assert!(parse_resolv_conf("nameserver\nnameservers 1.2.3.4\n").is_empty());
    }

    #[test]
    fn literals_need_no_server_and_names_need_one() {
        let none = Resolver::new(Vec::new(), Duration::from_secs(1));
        assert_eq!(
            none.resolve("192.0.2.7").unwrap(),
            vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))]
        );
        assert_eq!(
            none.resolve("2001:db8::1").unwrap(),
            vec!["2001:db8::1".parse::<IpAddr>().unwrap()]
        );
        let e = none.resolve("time.example").unwrap_err();
        assert!(
            e.to_string().contains("spec.network.interfaces[].dns"),
            "{e}"
        );
        assert!(matches!(
            none.resolve("bad name").unwrap_err(),
            ResolveError::BadName(NameError::Character(' '))
        ));

        let dir = std::env::temp_dir().join(format!("liken-dns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = Resolver::from_resolv_conf(&dir.join("resolv.conf"), Duration::from_secs(1));
        let e = missing.resolve("time.example").unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        std::fs::write(dir.join("resolv.conf"), "nameserver 192.0.2.53\n").unwrap();
        let read = Resolver::from_resolv_conf(&dir.join("resolv.conf"), Duration::from_secs(1));
        assert_eq!(
            read.servers.as_ref().unwrap(),
            &vec!["192.0.2.53:53".parse::<SocketAddr>().unwrap()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_real_exchange_ignores_strays_and_follows_the_answer() {
        let server = start(|q| {
            // A stray with another ID first, then the real answer.
            let mut stray = reply(q, OK, &[a_for_question([6, 6, 6, 6])]);
            stray[1] ^= 0xFF;
            vec![stray, reply(q, OK, &[a_for_question([192, 0, 2, 9])])]
        });
        let r = Resolver::new(vec![server], Duration::from_secs(2));
        assert_eq!(
            r.resolve("ntp.example").unwrap(),
            vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9))]
        );
    }

    #[test]
    fn a_failing_server_gives_way_to_the_next() {
        let servfail = start(|q| vec![reply(q, 0x8182, &[])]);
        let truncated = start(|q| vec![reply(q, 0x8380, &[])]);
        let silent = start(|_| Vec::new());
        let good = start(|q| vec![reply(q, OK, &[a_for_question([192, 0, 2, 10])])]);
        let r = Resolver::new(
            vec![servfail, truncated, silent, good],
            Duration::from_secs(4),
        );
        assert_eq!(
            r.resolve("ntp.example").unwrap(),
            vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))]
        );

        let r = Resolver::new(vec![servfail, truncated], Duration::from_secs(2));
        let e = r.resolve("ntp.example").unwrap_err();
        let ResolveError::Failed(each) = &e else {
            panic!("{e}")
        };
        assert_eq!(each.len(), 4, "two rounds of two servers: {e}");
        let text = e.to_string();
        assert!(text.contains("SERVFAIL"), "{text}");
        assert!(text.contains("truncated"), "{text}");
    }

    #[test]
    fn nxdomain_ends_the_lookup_and_silence_times_out() {
        let nx = start(|q| vec![reply(q, 0x8183, &[])]);
        // Would answer, but is never asked: NXDOMAIN is final.
        let never = start(|q| vec![reply(q, OK, &[a_for_question([192, 0, 2, 11])])]);
        let r = Resolver::new(vec![nx, never], Duration::from_secs(2));
        let e = r.resolve("nope.example").unwrap_err();
        assert!(matches!(e, ResolveError::NoSuchName(s) if s == nx), "{e}");

        let silent = start(|_| Vec::new());
        let r = Resolver::new(vec![silent], Duration::from_millis(300));
        let started = Instant::now();
        let e = r.resolve("ntp.example").unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(e.to_string().contains("no answer within"), "{e}");
    }
}
