//! A TCP proxy in front of the apiserver that can make the watches
//! passing through it go silent without closing them: the fault of a
//! half-open connection or a stuck apiserver watch cache, which the
//! operator can only notice by what the stream fails to deliver.
//!
//! The proxy does not read TLS; it tells a watch from other requests by
//! behaviour. [`FreezeProxy::freeze`] stops the server-to-client
//! direction of every connection open at that moment. A connection on
//! which the client then writes again was a pooled request connection,
//! and is let go at once (the client gets its answer); one on which the
//! client stays silent, holding an open request, is a watch, and stays
//! frozen until [`FreezeProxy::thaw`]. Connections opened after the
//! freeze pass untouched, so the operator's reads and its election keep
//! working. What the server tried to send into a frozen stream is
//! counted, as evidence the freeze did silence something.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One proxied connection's freeze flag.
struct Conn {
    frozen: AtomicBool,
    /// When the client last wrote on it.
    wrote: Mutex<Instant>,
}

/// A connection the client wrote on this recently may carry a request in
/// flight; freezing it would hang that request, not silence a watch.
const IN_FLIGHT: Duration = Duration::from_secs(1);

/// A running proxy.
pub struct FreezeProxy {
    /// `host:port` it listens on.
    pub address: String,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    held: Arc<AtomicU64>,
}

impl FreezeProxy {
    /// Listens on a free loopback port and forwards to `upstream`
    /// (`host:port`).
    pub fn start(upstream: &str) -> FreezeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
        let held = Arc::new(AtomicU64::new(0));
        let (t_conns, t_held, upstream) = (conns.clone(), held.clone(), upstream.to_owned());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let conn = Arc::new(Conn {
                    frozen: AtomicBool::new(false),
                    wrote: Mutex::new(Instant::now()),
                });
                t_conns.lock().unwrap().push(conn.clone());
                pump(client, server, conn, t_held.clone());
            }
        });
        FreezeProxy {
            address,
            conns,
            held,
        }
    }

    /// Silences the server side of every connection open now on which
    /// the client has not written for a while (a request just sent is let
    /// finish: the fault is a silent stream, not a lost answer).
    pub fn freeze(&self) {
        for c in self.conns.lock().unwrap().iter() {
            // Under the lock the client side takes to thaw, so a write
            // cannot slip between the check and the freeze.
            let wrote = c.wrote.lock().unwrap();
            if wrote.elapsed() > IN_FLIGHT {
                c.frozen.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Lets every frozen connection flow again.
    pub fn thaw(&self) {
        for c in self.conns.lock().unwrap().iter() {
            c.frozen.store(false, Ordering::SeqCst);
        }
    }

    /// How many connections are frozen now.
    pub fn frozen(&self) -> usize {
        self.conns
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.frozen.load(Ordering::SeqCst))
            .count()
    }

    /// How many chunks the server sent that a freeze held back.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }
}

/// Copies both ways on two threads. The client side thaws its own
/// connection whenever it writes; the server side holds each chunk
/// while the connection is frozen (and reads no more, so TCP's window
/// holds the rest).
fn pump(client: TcpStream, server: TcpStream, conn: Arc<Conn>, held: Arc<AtomicU64>) {
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up = conn.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match c_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut wrote = up.wrote.lock().unwrap();
                    *wrote = Instant::now();
                    up.frozen.store(false, Ordering::SeqCst);
                    drop(wrote);
                    if s_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = s_write.shutdown(Shutdown::Write);
    });
    let (mut s_read, mut c_write) = (server, client);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if conn.frozen.load(Ordering::SeqCst) {
                        held.fetch_add(1, Ordering::SeqCst);
                        while conn.frozen.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    if c_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = c_write.shutdown(Shutdown::Write);
    });
}
