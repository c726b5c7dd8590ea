//! The UDP exchange the DNS stub resolver and the SNTP client share:
//! a socket connected to the one server asked, and waiting for its
//! datagrams against a deadline.
//!
//! Connected, because the kernel then drops datagrams from any other
//! address and an ICMP port-unreachable shows as an error at once
//! rather than as a timeout. The deadline covers the whole wait, not
//! each read: every datagram a caller ignores (not the answer to its
//! question) shortens what is left.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// A socket on an ephemeral port of the right family, connected to
/// `server`.
pub fn connected(server: SocketAddr) -> io::Result<UdpSocket> {
    let local: IpAddr = if server.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = UdpSocket::bind(SocketAddr::new(local, 0))?;
    socket.connect(server)?;
    Ok(socket)
}

/// The next datagram's length, read into `buf`, or `None` once `wait`
/// has passed since `started`. A datagram longer than `buf` arrives cut
/// to it.
pub fn recv_before(
    socket: &UdpSocket,
    buf: &mut [u8],
    started: Instant,
    wait: Duration,
) -> io::Result<Option<usize>> {
    let left = wait.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Ok(None);
    }
    socket.set_read_timeout(Some(left))?;
    match socket.recv(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_arrives_and_silence_ends_at_the_deadline() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let socket = connected(server.local_addr().unwrap()).unwrap();
        server
            .send_to(b"hello", socket.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 3];
        let wait = Duration::from_millis(300);
        assert_eq!(
            recv_before(&socket, &mut buf, Instant::now(), wait).unwrap(),
            Some(3)
        );
        assert_eq!(&buf, b"hel");
        let started = Instant::now();
        assert_eq!(recv_before(&socket, &mut buf, started, wait).unwrap(), None);
        assert!(started.elapsed() >= wait);
        // A deadline already passed does not read at all.
        let long_ago = Instant::now().checked_sub(wait).unwrap();
        assert_eq!(
            recv_before(&socket, &mut buf, long_ago, wait).unwrap(),
            None
        );
    }
}
