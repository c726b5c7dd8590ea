//! kexec_file_load(2): hands the kernel the next boot's kernel, initrd
//! and command line, which `reboot(LINUX_REBOOT_CMD_KEXEC)` then jumps
//! into without the firmware.
//!
//! The file-based call (not the older kexec_load, which takes
//! pre-parsed segments) lets the kernel parse the bzImage itself and,
//! under lockdown, check its signature against the platform keyring,
//! so init needs no image parser and cannot bypass that check. nix has
//! no wrapper for it, so this is a raw syscall: one of the crate's few
//! unsafe blocks.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Loads `kernel` (a bzImage), `initrd` (every initrd, concatenated)
/// and `cmdline` as the image the next kexec reboot starts. Errors are
/// the kernel's: `ENOSYS` (no kexec_file_load), `EPERM` (kexec disabled
/// by `kernel.kexec_load_disabled`, or lockdown), `EKEYREJECTED` or
/// `EBADMSG` (lockdown: the kernel's signature is not trusted),
/// `ENOEXEC` (not a kernel it can load).
pub fn load(kernel: BorrowedFd<'_>, initrd: BorrowedFd<'_>, cmdline: &str) -> io::Result<()> {
    let line = CString::new(cmdline).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the command line holds a NUL byte",
        )
    })?;
    let bytes = line.as_bytes_with_nul();
    // SAFETY: the two descriptors are open for the call's duration
    // (borrowed), `bytes` is a NUL-terminated buffer of the length
    // passed, and the kernel only reads from all three.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_kexec_file_load,
            kernel.as_raw_fd(),
            initrd.as_raw_fd(),
            bytes.len(),
            bytes.as_ptr(),
            0 as nix::libc::c_ulong,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Drops a loaded image, so a reboot goes through the firmware after
/// all (a try that could not be counted must not be jumped into).
pub fn unload() -> io::Result<()> {
    // SAFETY: with KEXEC_FILE_UNLOAD the kernel ignores the descriptors
    // and the command line; no memory is passed.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_kexec_file_load,
            -1 as nix::libc::c_int,
            -1 as nix::libc::c_int,
            0 as nix::libc::c_ulong,
            std::ptr::null::<u8>(),
            nix::libc::KEXEC_FILE_UNLOAD as nix::libc::c_ulong,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What an errno from [`load`] means for a person.
pub fn explain(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(nix::libc::ENOSYS) => "this kernel was built without kexec_file_load",
        Some(nix::libc::EPERM) => {
            "kexec is disabled (kernel.kexec_load_disabled is 1) or kernel lockdown forbids it"
        }
        Some(nix::libc::EKEYREJECTED) | Some(nix::libc::EBADMSG) | Some(nix::libc::ENOKEY) => {
            "kernel lockdown (Secure Boot) requires a kernel signed by a key the platform keyring trusts"
        }
        Some(nix::libc::ENOEXEC) => "the kernel file is not a bzImage this kernel can load",
        Some(nix::libc::ENOMEM) | Some(nix::libc::EADDRNOTAVAIL) => {
            "the kernel found no memory to stage the next kernel in"
        }
        _ => "the kernel refused the load",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_advice() {
        let e = io::Error::from_raw_os_error(nix::libc::EPERM);
        assert!(explain(&e).contains("kexec_load_disabled"));
        let e = io::Error::from_raw_os_error(nix::libc::EKEYREJECTED);
        assert!(explain(&e).contains("Secure Boot"));
    }

    #[test]
    fn a_nul_in_the_command_line_is_refused_before_the_kernel_sees_it() {
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        let e = load(f.as_fd(), f.as_fd(), "a\0b").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
