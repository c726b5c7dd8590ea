//! What wakes the supervisor loop: a child's exit, a signal asking for
//! shutdown, a control-socket request, an address that changed, a
//! healthy answer to the boot's assessment. Every thread that learns of
//! something sends one of these on the loop's channel, so the loop is
//! the only place that decides anything.

use crossbeam_channel::Sender;
use liken_api::control::{Request, Response};

use crate::sys::power::PowerAction;

// How a child ended is the kernel's fact (sys::children); this is its
// public path too.
pub use crate::sys::children::ExitStatus;

/// One thing for the supervisor loop to handle.
#[derive(Debug)]
pub enum Event {
    /// A supervised child ended (the reaper has reaped it).
    Exited {
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: ExitStatus,
    },
    /// A signal asked for an orderly shutdown.
    Signal(PowerAction),
    /// A step that ran beside the boot ([`crate::image_modules`])
    /// failed; the loop adds it to the problems the status reports.
    Problem(liken_api::control::StepProblem),
    /// A DHCP lease moved an interface to another address
    /// ([`crate::net::daemon`]); k3s found its node address on the old
    /// one, so the loop restarts it.
    AddressChanged {
        /// The interface.
        interface: String,
        /// The address before.
        from: String,
        /// The address now.
        to: String,
    },
    /// The k3s health worker ([`crate::bless`]) found this boot's node
    /// healthy; the loop assesses at once rather than at its next poll,
    /// since a boot on trial holds the fleet's turn until it is blessed.
    Healthy,
    /// A control-socket request; the loop answers on `reply`.
    Control {
        /// What was asked.
        request: Request,
        /// Where the answer goes.
        reply: Sender<Response>,
    },
}
