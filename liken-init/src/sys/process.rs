//! Starting a child with a clean signal mask.
//!
//! init blocks the signals it takes through sigwait (see
//! [`crate::reaper`]), and a forked child inherits that mask across
//! exec. std's `Command` does not clear it, so k3s would start with
//! SIGTERM, SIGINT and SIGCHLD blocked: it could not be stopped
//! politely and its own children would never be reaped. The fix has to
//! run in the child between fork and exec, which only
//! `CommandExt::pre_exec` offers, and that is unsafe. This module is
//! one of the two places in init that allow unsafe code (the other is
//! [`super::kexec`]'s raw syscall), which is why it also
//! holds the other pre_exec hooks (a chroot, and the process limits k3s
//! starts with), [`trim_heap`], init's one call into the C library's
//! allocator, and [`set_thread_nice`], which nix does not wrap.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::resource::Resource;
use nix::sys::signal::SigSet;

/// Hands the heap's free pages back to the kernel. glibc keeps freed
/// memory for reuse; once the boot steps have dropped the module
/// indexes (megabytes), PID 1 will not reuse most of it for the rest of
/// the machine's uptime.
#[cfg(target_env = "gnu")]
pub fn trim_heap() {
    // SAFETY: malloc_trim has no preconditions: it walks glibc's own
    // arenas under their locks, returns unused pages with madvise, and
    // reports whether it released any; no Rust object is touched.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// musl's allocator hands freed groups back to the kernel by itself and
/// has no malloc_trim: nothing to do.
#[cfg(not(target_env = "gnu"))]
pub fn trim_heap() {}

/// Sets the calling thread's nice value (Linux schedules threads, and
/// setpriority with a thread id applies to that thread alone). Used for
/// work that runs beside the boot steps, so that on a machine with one
/// CPU the steps get it first.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    let tid = nix::unistd::gettid().as_raw();
    let Ok(who) = nix::libc::id_t::try_from(tid) else {
        return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
    };
    // SAFETY: setpriority takes plain integers and touches no memory of
    // ours; it fails cleanly (EACCES, ESRCH) on bad arguments.
    let rc = unsafe {
        nix::libc::setpriority(nix::libc::PRIO_PROCESS, who, nix::libc::c_int::from(nice))
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes `command` clear the signal mask in the child before exec.
pub fn unblock_signals_in_child(command: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec, where
    // only async-signal-safe work is allowed. It builds an empty
    // sigset on the stack and calls pthread_sigmask, which is
    // async-signal-safe; it allocates nothing, takes no lock and
    // touches no state shared with the parent.
    unsafe {
        command.pre_exec(|| {
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        })
    }
}

/// One process limit: the resource and its value (soft and hard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The resource.
    pub resource: Resource,
    /// Its soft and hard value ([`nix::sys::resource::RLIM_INFINITY`]:
    /// unlimited).
    pub value: u64,
}

/// Makes `command` set `limits` (soft and hard) in the child before
/// exec. A limit the kernel refuses fails the start, so the service
/// never runs with less than it was promised.
pub fn limits_in_child(command: &mut Command, limits: &[Limit]) {
    if limits.is_empty() {
        return;
    }
    let limits = limits.to_vec();
    // SAFETY: the closure runs in the forked child before exec. It reads
    // the vector moved in before the fork (no allocation) and calls
    // setrlimit(2) through nix, a plain system call that takes no lock;
    // async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            for l in &limits {
                nix::sys::resource::setrlimit(l.resource, l.value, l.value)
                    .map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
}

/// Makes `command` run with `root` as its root directory: the child
/// chroots there (and changes into its `/`) before exec, so a program of
/// the system image (mke2fs, which needs the image's own libraries)
/// runs before init itself has switched root. The path is turned into a
/// C string here, before the fork, so the child allocates nothing.
pub fn chroot_in_child(command: &mut Command, root: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let root = CString::new(root.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: the closure runs in the forked child before exec. It calls
    // chroot(2) and chdir(2) through nix with C strings that exist
    // already (`root`, moved in, and a literal), so nothing is
    // allocated and no lock is taken; both calls are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::chroot(root.as_c_str()).map_err(std::io::Error::from)?;
            nix::unistd::chdir(c"/").map_err(std::io::Error::from)
        });
    }
    Ok(())
}
