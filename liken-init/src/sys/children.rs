//! The children init starts: the table of their pids that the spawner
//! and the reaper ([`crate::reaper`]) share, and how a child ended.
//!
//! They sit at the ground, beside [`super::command`] and
//! [`super::process`] that register and start children, so the kernel
//! seams never reach up into the supervisor or the reaper for them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_channel::Sender;

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal (named) killed it.
    Signal(String),
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exited with status {c}"),
            ExitStatus::Signal(s) => write!(f, "was killed by {s}"),
        }
    }
}

/// The pids of supervised children; everything else init reaps is an
/// orphan and is dropped.
#[derive(Debug, Default)]
pub struct ChildTable {
    pids: HashSet<u32>,
    /// Children someone waits for directly (a command run to its end,
    /// such as mke2fs): their exit goes to the waiter, not the loop.
    waiters: HashMap<u32, Sender<ExitStatus>>,
}

impl ChildTable {
    /// Records a child.
    pub fn insert(&mut self, pid: u32) {
        self.pids.insert(pid);
    }

    /// Records a child whose exit is sent to `waiter` instead of the
    /// supervisor loop.
    pub fn insert_waiter(&mut self, pid: u32, waiter: Sender<ExitStatus>) {
        self.waiters.insert(pid, waiter);
    }

    /// Takes the waiter of a child run to its end, if `pid` is one.
    pub fn take_waiter(&mut self, pid: u32) -> Option<Sender<ExitStatus>> {
        self.waiters.remove(&pid)
    }

    /// Forgets a child; whether it was known.
    pub fn remove(&mut self, pid: u32) -> bool {
        self.pids.remove(&pid)
    }
}

/// The table, shared between the spawner and the reaper.
pub type SharedTable = Arc<Mutex<ChildTable>>;

/// Locks the table. A poisoned lock still holds a usable set of pids;
/// init keeps going with it rather than giving up reaping.
pub fn lock(table: &SharedTable) -> MutexGuard<'_, ChildTable> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}
