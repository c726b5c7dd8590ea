//! rtnetlink: bringing a link up, adding an IPv4 address, adding an
//! IPv4 route.
//!
//! The messages are built as byte buffers by pure encoders (checked
//! byte for byte in the tests) and sent over a NETLINK_ROUTE socket
//! from `nix`, so this module needs no unsafe code. Every request asks
//! for an acknowledgement, and the kernel's answer is decoded into an
//! errno; EEXIST counts as success, since an address or route that is
//! already there is the state asked for.
//!
//! Only IPv4 is encoded: the Machine's network spec is IPv4 in
//! practice (QEMU's user network, DHCPv4), and IPv6 would be a second
//! family of encoders to test.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    socket,
};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const IFF_UP: u32 = 0x1;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_BROADCAST: u16 = 4;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTN_UNICAST: u8 = 1;

const HEADER_LEN: usize = 16;

/// One change to the kernel's network configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Set IFF_UP on the link.
    LinkUp {
        /// Interface index.
        index: u32,
    },
    /// Add an IPv4 address with its prefix length.
    AddAddress {
        /// Interface index.
        index: u32,
        /// The address.
        address: Ipv4Addr,
        /// Prefix length, 0 to 32.
        prefix: u8,
    },
    /// Add (or replace) an IPv4 route through a gateway.
    AddRoute {
        /// Interface index the route leaves by.
        index: u32,
        /// Destination network.
        destination: Ipv4Addr,
        /// Destination prefix length; 0 is the default route.
        prefix: u8,
        /// The gateway.
        gateway: Ipv4Addr,
    },
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

fn push_attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4usize.saturating_add(data.len());
    buf.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    // Attributes are aligned to four bytes.
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX).to_ne_bytes();
    if let Some(head) = buf.get_mut(0..4) {
        head.copy_from_slice(&len);
    }
    buf
}

fn broadcast(address: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let host_bits = 32u32.saturating_sub(u32::from(prefix.min(32)));
    let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
    Ipv4Addr::from(u32::from(address) | !mask)
}

/// The netlink message for `request`, with sequence number `seq`.
pub fn encode(request: &Request, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    match *request {
        Request::LinkUp { index } => {
            push_header(&mut buf, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
            // struct ifinfomsg
            buf.push(AF_UNSPEC);
            buf.push(0);
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&index.to_ne_bytes());
            buf.extend_from_slice(&IFF_UP.to_ne_bytes());
            buf.extend_from_slice(&IFF_UP.to_ne_bytes());
        }
        Request::AddAddress {
            index,
            address,
            prefix,
        } => {
            push_header(
                &mut buf,
                RTM_NEWADDR,
                NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
                seq,
            );
            // struct ifaddrmsg
            buf.push(AF_INET);
            buf.push(prefix);
            buf.push(0);
            buf.push(RT_SCOPE_UNIVERSE);
            buf.extend_from_slice(&index.to_ne_bytes());
            push_attr(&mut buf, IFA_LOCAL, &address.octets());
            push_attr(&mut buf, IFA_ADDRESS, &address.octets());
            if prefix < 31 {
                push_attr(
                    &mut buf,
                    IFA_BROADCAST,
                    &broadcast(address, prefix).octets(),
                );
            }
        }
        Request::AddRoute {
            index,
            destination,
            prefix,
            gateway,
        } => {
            push_header(
                &mut buf,
                RTM_NEWROUTE,
                NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
                seq,
            );
            // struct rtmsg
            buf.push(AF_INET);
            buf.push(prefix);
            buf.push(0);
            buf.push(0);
            buf.push(RT_TABLE_MAIN);
            buf.push(RTPROT_BOOT);
            buf.push(RT_SCOPE_UNIVERSE);
            buf.push(RTN_UNICAST);
            buf.extend_from_slice(&0u32.to_ne_bytes());
            if prefix > 0 {
                push_attr(&mut buf, RTA_DST, &destination.octets());
            }
            push_attr(&mut buf, RTA_GATEWAY, &gateway.octets());
            push_attr(&mut buf, RTA_OIF, &index.to_ne_bytes());
        }
    }
    finish(buf)
}

/// What the kernel's reply to request `seq` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// Done (or already so: EEXIST).
    Done,
    /// Refused with this errno.
    Refused(i32),
    /// The reply is for another request or is not an acknowledgement.
    Other,
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes(b.try_into().ok()?))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// Decodes the first message of a reply as the acknowledgement of
/// request `seq`; `None` when the bytes are too short to be one.
pub fn decode_ack(reply: &[u8], seq: u32) -> Option<Ack> {
    let kind = read_u16(reply, 4)?;
    let got_seq = read_u32(reply, 8)?;
    if kind != NLMSG_ERROR || got_seq != seq {
        return Some(Ack::Other);
    }
    let error = i32::from_ne_bytes(read_u32(reply, HEADER_LEN)?.to_ne_bytes());
    let errno = error.checked_neg()?;
    Some(match errno {
        0 => Ack::Done,
        e if e == nix::libc::EEXIST => Ack::Done,
        e => Ack::Refused(e),
    })
}

/// Changing the kernel's network configuration.
pub trait Netlink {
    /// Carries out one request, waiting for the kernel's answer.
    fn apply(&self, request: &Request) -> io::Result<()>;
}

/// A NETLINK_ROUTE socket, opened per request set.
pub struct RealNetlink {
    seq: Mutex<u32>,
}

impl RealNetlink {
    /// A client; the socket is opened per request.
    pub fn new() -> RealNetlink {
        RealNetlink { seq: Mutex::new(1) }
    }
}

impl Default for RealNetlink {
    fn default() -> Self {
        RealNetlink::new()
    }
}

fn open() -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &NetlinkAddr::new(0, 0),
    )?;
    Ok(fd)
}

impl Netlink for RealNetlink {
    fn apply(&self, request: &Request) -> io::Result<()> {
        let seq = {
            let mut s = self
                .seq
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *s = s.wrapping_add(1);
            *s
        };
        let fd = open()?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let message = encode(request, seq);
        sendto(raw, &message, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        let mut buf = [0u8; 4096];
        // Skip anything that is not our acknowledgement (there should be
        // nothing else on a fresh socket, but the kernel does not promise).
        for _ in 0..16 {
            let n = recv(raw, &mut buf, MsgFlags::empty())?;
            match buf.get(..n).and_then(|reply| decode_ack(reply, seq)) {
                Some(Ack::Done) => return Ok(()),
                Some(Ack::Refused(e)) => return Err(io::Error::from_raw_os_error(e)),
                Some(Ack::Other) => continue,
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "short netlink reply",
                    ));
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no netlink acknowledgement",
        ))
    }
}

/// Records each request; fails the ones it is told to.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected bytes are laid out field by field by hand from the
    // structs in linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h
    // and linux/if_link.h, on a little-endian machine.

    #[test]
    #[cfg(target_endian = "little")]
    fn link_up_bytes() {
        let got = encode(&Request::LinkUp { index: 2 }, 7);
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
    fn add_address_bytes() {
        let got = encode(
            &Request::AddAddress {
                index: 2,
                address: Ipv4Addr::new(10, 0, 2, 15),
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
    fn default_route_bytes() {
        let got = encode(
            &Request::AddRoute {
                index: 2,
                destination: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
                gateway: Ipv4Addr::new(10, 0, 2, 2),
            },
            9,
        );
        let want: [u8; 44] = [
            44, 0, 0, 0, // nlmsg_len
            24, 0, // RTM_NEWROUTE
            0x05, 0x05, // REQUEST | ACK | REPLACE | CREATE
            9, 0, 0, 0, // seq
            0, 0, 0, 0, // pid
            2, 0, 0, 0, // AF_INET, dst_len 0, src_len, tos
            254, 3, 0, 1, // main table, RTPROT_BOOT, universe, unicast
            0, 0, 0, 0, // flags
            8, 0, 5, 0, 10, 0, 2, 2, // RTA_GATEWAY
            8, 0, 4, 0, 2, 0, 0, 0, // RTA_OIF
        ];
        assert_eq!(got, want);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn network_route_carries_destination() {
        let got = encode(
            &Request::AddRoute {
                index: 3,
                destination: Ipv4Addr::new(192, 168, 50, 0),
                prefix: 24,
                gateway: Ipv4Addr::new(10, 0, 0, 1),
            },
            1,
        );
        assert_eq!(got.len(), 52);
        assert_eq!(got.get(17), Some(&24));
        assert_eq!(got.get(28..36), Some(&[8, 0, 1, 0, 192, 168, 50, 0][..]));
    }

    #[test]
    fn point_to_point_prefix_has_no_broadcast() {
        let got = encode(
            &Request::AddAddress {
                index: 1,
                address: Ipv4Addr::new(10, 1, 1, 1),
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
        assert_eq!(decode_ack(&ack(5, 0), 5), Some(Ack::Done));
        assert_eq!(decode_ack(&ack(5, -nix::libc::EEXIST), 5), Some(Ack::Done));
        assert_eq!(
            decode_ack(&ack(5, -nix::libc::ENODEV), 5),
            Some(Ack::Refused(nix::libc::ENODEV))
        );
        assert_eq!(decode_ack(&ack(4, 0), 5), Some(Ack::Other));
        assert_eq!(decode_ack(&[1, 2, 3], 5), None);
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
