//! SIGTERM and SIGINT as a message on a channel.
//!
//! The kubelet stops a pod with SIGTERM and waits its grace period before
//! SIGKILL. An operator must use that time well: finish the pass in
//! flight (its writes belong together), flush the Events it queued, and
//! release its Lease so a waiting copy takes over at once. So the signal
//! must not interrupt anything; it is a message the loop reads between
//! two passes, on the same `select!` as its wake and tick channels.
//!
//! [`listen`] blocks the two signals in the calling thread, which must be
//! the main thread before it starts any other: threads inherit the mask,
//! so no thread ever runs a handler, and one thread takes them with
//! sigwait(2) and sends on the channel. A second SIGTERM or SIGINT while
//! the program is shutting down is sent too; a caller may treat it as
//! "stop waiting for the flush".

use crossbeam_channel::{Receiver, bounded};
use nix::sys::signal::{SigSet, Signal};

/// A stop request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: the kubelet (or a person) asks the process to end.
    Terminate,
    /// SIGINT: Ctrl-C on a terminal.
    Interrupt,
}

/// Why the signals could not be set up.
#[derive(Debug)]
pub struct SignalError(String);

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "setting up SIGTERM and SIGINT: {}", self.0)
    }
}

impl std::error::Error for SignalError {}

/// Blocks SIGTERM and SIGINT in this thread (and so in every thread it
/// starts later) and returns the channel their arrivals are sent on. Call
/// it first in `main`, before any thread exists.
pub fn listen() -> Result<Receiver<Stop>, SignalError> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(|e| SignalError(e.to_string()))?;
    // Room for a second signal while the first is being handled; more
    // than that adds nothing.
    let (tx, rx) = bounded(2);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                let stop = match set.wait() {
                    Ok(Signal::SIGTERM) => Stop::Terminate,
                    Ok(Signal::SIGINT) => Stop::Interrupt,
                    // Only the two blocked signals can be taken here; an
                    // error (EINTR) is retried.
                    Ok(_) | Err(_) => continue,
                };
                if tx.try_send(stop).is_err() && tx.is_empty() {
                    // The receiver is gone: nobody is left to tell.
                    return;
                }
            }
        })
        .map_err(|e| SignalError(e.to_string()))?;
    Ok(rx)
}
