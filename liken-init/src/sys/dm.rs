//! The device mapper, through the ioctls of `/dev/mapper/control`: make
//! a mapped device, load its table, make the table live, remove it.
//!
//! init needs one mapped device, the booted slot opened through the
//! `verity` target, and there is no dmsetup or udev in the initramfs.
//! So this speaks the kernel's interface directly, as libdevmapper does
//! underneath dmsetup: every request is one buffer that starts with a
//! `struct dm_ioctl` and, for a table, continues with one
//! `struct dm_target_spec` and its parameter string per target. The
//! layouts, command numbers and flags are Linux's
//! include/uapi/linux/dm-ioctl.h (interface version 4); the tests hold
//! the sizes and field offsets here to that header's.
//!
//! - DM_VERSION checks the kernel speaks version 4 of the interface;
//! - DM_DEV_CREATE makes a device with no table and answers its device
//!   number;
//! - DM_TABLE_LOAD loads a table into the device's inactive slot
//!   (read-only: the verity target refuses a writable table);
//! - DM_DEV_SUSPEND without DM_SUSPEND_FLAG resumes the device, which
//!   makes the loaded table live;
//! - DM_DEV_REMOVE takes a device away again when any later step failed.
//!
//! The node: the kernel names a mapped disk `dm-<minor>`, and devtmpfs
//! makes `/dev/dm-<minor>` once the disk is added (at the first table
//! load). init uses the device number DM_DEV_CREATE answers and waits,
//! with a deadline, for a block device node with exactly that number,
//! never a udev name (`/dev/mapper/<name>` needs udev or dmsetup).
//!
//! The ioctl call is the module's only unsafe code. What is above it
//! (the buffers, the order of the calls, the cleanup) is tested with a
//! recording fake ([`FakeDeviceMapper`]) and with pure encoders.
//!
//! Limits: one target per table is all init builds (the encoder takes a
//! list, and the tests cover two); no status or table queries, no
//! rename, no deferred removal, no udev cookies.

#![allow(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The control node devtmpfs makes when dm-mod registers its misc
/// device (`DM_DIR "/" DM_CONTROL_NODE`).
pub const CONTROL: &str = "/dev/mapper/control";

/// The ioctl type of every device-mapper command (`DM_IOCTL`).
pub const DM_IOCTL: u8 = 0xfd;
/// `DM_VERSION_CMD`.
pub const DM_VERSION_CMD: u8 = 0;
/// `DM_DEV_CREATE_CMD`.
pub const DM_DEV_CREATE_CMD: u8 = 3;
/// `DM_DEV_REMOVE_CMD`.
pub const DM_DEV_REMOVE_CMD: u8 = 4;
/// `DM_DEV_SUSPEND_CMD` (suspend, or resume without DM_SUSPEND_FLAG).
pub const DM_DEV_SUSPEND_CMD: u8 = 6;
/// `DM_TABLE_LOAD_CMD`.
pub const DM_TABLE_LOAD_CMD: u8 = 9;

/// The interface version spoken: `DM_VERSION_MAJOR` 4. Minor 0 asks
/// for nothing newer than the first 4.x kernels have (the kernel takes
/// any minor up to its own).
pub const VERSION: [u32; 3] = [4, 0, 0];

/// `DM_READONLY_FLAG`: the table (and so the device) is read-only.
pub const DM_READONLY_FLAG: u32 = 1 << 0;
/// `DM_SUSPEND_FLAG`: with DM_DEV_SUSPEND, suspend rather than resume.
pub const DM_SUSPEND_FLAG: u32 = 1 << 1;

/// `DM_NAME_LEN`: a name's bytes, its NUL included.
pub const DM_NAME_LEN: usize = 128;
/// `DM_UUID_LEN`.
pub const DM_UUID_LEN: usize = 129;
/// `DM_MAX_TYPE_NAME`: a target type's bytes, its NUL included.
pub const DM_MAX_TYPE_NAME: usize = 16;

/// `struct dm_ioctl`, field for field (include/uapi/linux/dm-ioctl.h).
/// Every request buffer starts with one; the kernel answers in it.
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmIoctl {
    /// The interface version: in, the caller's; out, the kernel's.
    pub version: [u32; 3],
    /// The whole buffer's size, this struct included.
    pub data_size: u32,
    /// Where the data after this struct starts, from its start.
    pub data_start: u32,
    /// How many targets follow (DM_TABLE_LOAD).
    pub target_count: u32,
    /// Out: how many openers the device has.
    pub open_count: i32,
    /// DM_*_FLAG bits, in and out.
    pub flags: u32,
    /// Event number, or a udev cookie (unused here: 0).
    pub event_nr: u32,
    /// Padding the header names.
    pub padding: u32,
    /// Out: the device number, as the kernel's `huge_encode_dev`.
    pub dev: u64,
    /// The device's name, NUL-terminated.
    pub name: [u8; DM_NAME_LEN],
    /// The device's UUID, NUL-terminated (empty here).
    pub uuid: [u8; DM_UUID_LEN],
    /// Padding or the start of the data.
    pub data: [u8; 7],
}

/// `struct dm_target_spec`: one target of a table, followed directly by
/// its NUL-terminated parameter string.
#[repr(C)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmTargetSpec {
    /// The first sector of the mapped device the target covers.
    pub sector_start: u64,
    /// How many 512-byte sectors it covers.
    pub length: u64,
    /// Out only (table status).
    pub status: i32,
    /// Bytes from this spec's start to the next one's.
    pub next: u32,
    /// The target type (`verity`), NUL-terminated.
    pub target_type: [u8; DM_MAX_TYPE_NAME],
}

/// The header's size: where every request's data starts.
pub const HEADER: usize = size_of::<DmIoctl>();
/// A target spec's size, before its parameters.
pub const SPEC: usize = size_of::<DmTargetSpec>();

/// Writes `bytes` into `out` at `at`, if they fit (the encoders size
/// `out` first, so they always do).
fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(slot) = at
        .checked_add(bytes.len())
        .and_then(|end| out.get_mut(at..end))
    {
        slot.copy_from_slice(bytes);
    }
}

fn get<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

impl DmIoctl {
    /// A request for the device `name` (which [`check_name`] has
    /// passed), with these flags, for a buffer of `data_size` bytes
    /// holding `target_count` targets after the header.
    pub fn request(name: &str, flags: u32, data_size: u32, target_count: u32) -> DmIoctl {
        let mut n = [0u8; DM_NAME_LEN];
        // At most DM_NAME_LEN - 1 bytes, so a NUL always ends it.
        let len = name.len().min(DM_NAME_LEN.saturating_sub(1));
        put(&mut n, 0, name.as_bytes().get(..len).unwrap_or_default());
        DmIoctl {
            version: VERSION,
            data_size,
            data_start: HEADER as u32,
            target_count,
            open_count: 0,
            flags,
            event_nr: 0,
            padding: 0,
            dev: 0,
            name: n,
            uuid: [0; DM_UUID_LEN],
            data: [0; 7],
        }
    }

    /// The header's bytes, each field at its offset in the C struct.
    pub fn encode(&self, out: &mut [u8]) {
        for (i, v) in self.version.iter().enumerate() {
            let at = offset_of!(DmIoctl, version).saturating_add(i.saturating_mul(4));
            put(out, at, &v.to_ne_bytes());
        }
        put(
            out,
            offset_of!(DmIoctl, data_size),
            &self.data_size.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmIoctl, data_start),
            &self.data_start.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmIoctl, target_count),
            &self.target_count.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmIoctl, open_count),
            &self.open_count.to_ne_bytes(),
        );
        put(out, offset_of!(DmIoctl, flags), &self.flags.to_ne_bytes());
        put(
            out,
            offset_of!(DmIoctl, event_nr),
            &self.event_nr.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmIoctl, padding),
            &self.padding.to_ne_bytes(),
        );
        put(out, offset_of!(DmIoctl, dev), &self.dev.to_ne_bytes());
        put(out, offset_of!(DmIoctl, name), &self.name);
        put(out, offset_of!(DmIoctl, uuid), &self.uuid);
        put(out, offset_of!(DmIoctl, data), &self.data);
    }

    /// The header the kernel answered with; `None` when the buffer is
    /// shorter than one.
    pub fn decode(bytes: &[u8]) -> Option<DmIoctl> {
        let u32_at = |at: usize| get::<4>(bytes, at).map(u32::from_ne_bytes);
        let v = offset_of!(DmIoctl, version);
        Some(DmIoctl {
            version: [
                u32_at(v)?,
                u32_at(v.checked_add(4)?)?,
                u32_at(v.checked_add(8)?)?,
            ],
            data_size: u32_at(offset_of!(DmIoctl, data_size))?,
            data_start: u32_at(offset_of!(DmIoctl, data_start))?,
            target_count: u32_at(offset_of!(DmIoctl, target_count))?,
            open_count: get::<4>(bytes, offset_of!(DmIoctl, open_count)).map(i32::from_ne_bytes)?,
            flags: u32_at(offset_of!(DmIoctl, flags))?,
            event_nr: u32_at(offset_of!(DmIoctl, event_nr))?,
            padding: u32_at(offset_of!(DmIoctl, padding))?,
            dev: get::<8>(bytes, offset_of!(DmIoctl, dev)).map(u64::from_ne_bytes)?,
            name: get::<DM_NAME_LEN>(bytes, offset_of!(DmIoctl, name))?,
            uuid: get::<DM_UUID_LEN>(bytes, offset_of!(DmIoctl, uuid))?,
            data: get::<7>(bytes, offset_of!(DmIoctl, data))?,
        })
    }
}

impl DmTargetSpec {
    /// The spec's bytes, each field at its offset in the C struct.
    pub fn encode(&self, out: &mut [u8]) {
        put(
            out,
            offset_of!(DmTargetSpec, sector_start),
            &self.sector_start.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmTargetSpec, length),
            &self.length.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmTargetSpec, status),
            &self.status.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmTargetSpec, next),
            &self.next.to_ne_bytes(),
        );
        put(
            out,
            offset_of!(DmTargetSpec, target_type),
            &self.target_type,
        );
    }
}

/// A device number: what DM_DEV_CREATE answers and what the node in
/// /dev carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevNum {
    /// The major number (the device mapper's, given at load).
    pub major: u32,
    /// The minor number: the `N` of `dm-N`.
    pub minor: u32,
}

impl DevNum {
    /// From the kernel's `huge_encode_dev` (dm-ioctl's `dev` field):
    /// `minor & 0xff | major << 8 | (minor & !0xff) << 12`.
    pub fn from_kernel(dev: u64) -> DevNum {
        DevNum {
            major: ((dev >> 8) & 0xfff) as u32,
            minor: ((dev & 0xff) | ((dev >> 12) & 0xfff00)) as u32,
        }
    }

    /// As a `st_rdev` holds it (glibc's and musl's `makedev`).
    pub fn to_rdev(self) -> u64 {
        let (major, minor) = (u64::from(self.major), u64::from(self.minor));
        ((major & 0xffff_f000) << 32)
            | ((major & 0xfff) << 8)
            | ((minor & 0xffff_ff00) << 12)
            | (minor & 0xff)
    }

    /// From a `st_rdev` (glibc's and musl's `major` and `minor`).
    pub fn from_rdev(rdev: u64) -> DevNum {
        DevNum {
            major: (((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff)) as u32,
            minor: (((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff)) as u32,
        }
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// One target of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The first sector of the mapped device it covers.
    pub start: u64,
    /// How many 512-byte sectors.
    pub sectors: u64,
    /// The target type, such as `verity`.
    pub kind: String,
    /// The target's parameters, as its constructor reads them.
    pub params: String,
}

/// Which command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// DM_VERSION.
    Version,
    /// DM_DEV_CREATE.
    Create,
    /// DM_TABLE_LOAD.
    Load,
    /// DM_DEV_SUSPEND, resuming.
    Resume,
    /// DM_DEV_REMOVE.
    Remove,
}

impl Op {
    /// The header's name for the command.
    pub fn name(self) -> &'static str {
        match self {
            Op::Version => "DM_VERSION",
            Op::Create => "DM_DEV_CREATE",
            Op::Load => "DM_TABLE_LOAD",
            Op::Resume => "DM_DEV_SUSPEND (resume)",
            Op::Remove => "DM_DEV_REMOVE",
        }
    }

    fn cmd(self) -> u8 {
        match self {
            Op::Version => DM_VERSION_CMD,
            Op::Create => DM_DEV_CREATE_CMD,
            Op::Load => DM_TABLE_LOAD_CMD,
            Op::Resume => DM_DEV_SUSPEND_CMD,
            Op::Remove => DM_DEV_REMOVE_CMD,
        }
    }
}

/// What went wrong with the device mapper. Each message says what to do.
#[derive(Debug)]
pub enum DmError {
    /// The control node is missing or cannot be opened.
    Control {
        /// Its path.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The kernel speaks another major version of the interface.
    Version([u32; 3]),
    /// A name the device mapper refuses.
    Name(String),
    /// A target the encoder cannot put in a request.
    Target(String),
    /// A command failed.
    Ioctl {
        /// The command.
        op: Op,
        /// The device it named.
        name: String,
        /// The kernel's error.
        error: io::Error,
    },
    /// The device's node did not appear as the block device DM_DEV_CREATE
    /// named.
    Node {
        /// Where it was looked for.
        path: PathBuf,
        /// The device number it should carry.
        dev: DevNum,
        /// What was found instead.
        found: String,
    },
}

impl fmt::Display for DmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DmError::Control { path, error } => write!(
                f,
                "cannot open the device mapper's {} ({error}): the kernel has no device mapper; \
                 boot.cpio must carry dm-mod and dm-verity (images/boot-modules.txt): rebuild \
                 the images",
                path.display()
            ),
            DmError::Version(v) => write!(
                f,
                "the kernel's device mapper speaks interface {}.{}.{}, not {}.x: boot a kernel \
                 built for liken",
                v[0], v[1], v[2], VERSION[0]
            ),
            DmError::Name(n) => write!(
                f,
                "{n:?} is no device-mapper name (1 to {} bytes, no '/', not . .. or control); \
                 this is a bug in liken-init",
                DM_NAME_LEN.saturating_sub(1)
            ),
            DmError::Target(why) => {
                write!(
                    f,
                    "the table cannot be encoded ({why}); this is a bug in liken-init"
                )
            }
            DmError::Ioctl { op, name, error } => {
                let what = match op {
                    Op::Version => "the kernel refused the device mapper's version check",
                    Op::Create => "the kernel did not create the mapped device",
                    Op::Load => {
                        "the kernel refused the table (the kernel log's `device-mapper:` line \
                         says why: a partition smaller than the table, or a target module \
                         that is not loaded)"
                    }
                    Op::Resume => "the kernel did not make the loaded table live",
                    Op::Remove => "the kernel did not remove the mapped device",
                };
                let todo = match (op, error.raw_os_error()) {
                    (Op::Create, Some(nix::libc::EBUSY)) => {
                        "a device of that name exists already: reboot"
                    }
                    (Op::Load, _) => {
                        "check that the slot holds the release its boot entry names, and write \
                         the release again"
                    }
                    _ => "reboot, and if it happens again rebuild the images",
                };
                write!(f, "{} {name}: {what}: {error}; {todo}", op.name())
            }
            DmError::Node { path, dev, found } => write!(
                f,
                "the mapped device's node {} is not block device {dev} ({found}); devtmpfs \
                 must be mounted on /dev: reboot",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DmError {}

/// Checks a name the kernel will take (dm-ioctl.c's check_name and
/// DM_NAME_LEN): 1 to 127 bytes, no '/', no NUL, and none of the names
/// /dev/mapper reserves.
pub fn check_name(name: &str) -> Result<(), DmError> {
    let ok = !name.is_empty()
        && name.len() < DM_NAME_LEN
        && !name.contains(['/', '\0'])
        && !matches!(name, "." | ".." | "control");
    if ok {
        Ok(())
    } else {
        Err(DmError::Name(name.to_owned()))
    }
}

fn to_u32(n: usize, what: &str) -> Result<u32, DmError> {
    u32::try_from(n).map_err(|_| DmError::Target(format!("{what} of {n} bytes")))
}

/// A request with no data after the header (version, create, resume,
/// remove).
pub fn encode_plain(name: &str, flags: u32) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER];
    DmIoctl::request(name, flags, HEADER as u32, 0).encode(&mut buf);
    buf
}

/// A DM_TABLE_LOAD request: the header, then per target its spec and
/// its parameters, NUL-terminated and padded so the next spec starts on
/// an 8-byte boundary (the kernel checks the alignment); each spec's
/// `next` is the distance to the one after it.
pub fn encode_table(name: &str, targets: &[Target], read_only: bool) -> Result<Vec<u8>, DmError> {
    let mut body = Vec::new();
    for t in targets {
        let kind = t.kind.as_bytes();
        if kind.is_empty() || kind.len() >= DM_MAX_TYPE_NAME || kind.contains(&0) {
            return Err(DmError::Target(format!("target type {:?}", t.kind)));
        }
        if t.params.contains('\0') {
            return Err(DmError::Target("a NUL in the parameters".into()));
        }
        let mut target_type = [0u8; DM_MAX_TYPE_NAME];
        put(&mut target_type, 0, kind);
        // The parameters, their NUL, then zeros to a multiple of 8.
        let with_nul = t.params.len().saturating_add(1);
        let padded = with_nul.div_ceil(8).saturating_mul(8);
        let next = to_u32(SPEC.saturating_add(padded), "a target")?;
        let spec = DmTargetSpec {
            sector_start: t.start,
            length: t.sectors,
            status: 0,
            next,
            target_type,
        };
        let mut chunk = vec![0u8; SPEC.saturating_add(padded)];
        spec.encode(&mut chunk);
        put(&mut chunk, SPEC, t.params.as_bytes());
        body.extend_from_slice(&chunk);
    }
    let size = to_u32(HEADER.saturating_add(body.len()), "a table")?;
    let count = to_u32(targets.len(), "a target list")?;
    let flags = if read_only { DM_READONLY_FLAG } else { 0 };
    let mut buf = vec![0u8; HEADER];
    DmIoctl::request(name, flags, size, count).encode(&mut buf);
    buf.extend_from_slice(&body);
    Ok(buf)
}

/// The ioctl request number of a command: `_IOWR(DM_IOCTL, cmd, struct
/// dm_ioctl)`.
pub fn request_code(cmd: u8) -> nix::sys::ioctl::ioctl_num_type {
    nix::request_code_readwrite!(DM_IOCTL, cmd, HEADER)
}

/// The device mapper.
pub trait DeviceMapper {
    /// DM_VERSION: the kernel's interface version.
    fn version(&self) -> Result<[u32; 3], DmError>;
    /// DM_DEV_CREATE: a device with no table, suspended; its number.
    fn create(&self, name: &str) -> Result<DevNum, DmError>;
    /// DM_TABLE_LOAD: the table into the device's inactive slot.
    fn load(&self, name: &str, targets: &[Target], read_only: bool) -> Result<(), DmError>;
    /// DM_DEV_SUSPEND without DM_SUSPEND_FLAG: the loaded table made
    /// live and the device resumed.
    fn resume(&self, name: &str) -> Result<(), DmError>;
    /// DM_DEV_REMOVE.
    fn remove(&self, name: &str) -> Result<(), DmError>;
}

/// The kernel's device mapper through its control node.
pub struct RealDeviceMapper {
    /// The control node ([`CONTROL`]).
    pub control: PathBuf,
    /// How long to wait for the node to appear after dm-mod loaded
    /// (devtmpfs makes it as the module registers).
    pub appear: Duration,
}

impl RealDeviceMapper {
    /// The machine's control node, waited for up to 2 s.
    pub fn new() -> RealDeviceMapper {
        RealDeviceMapper {
            control: PathBuf::from(CONTROL),
            appear: Duration::from_secs(2),
        }
    }

    /// Opens the control node, read-write, without following a link,
    /// waiting for it up to `appear`; it must be a character device.
    fn open(&self) -> Result<File, DmError> {
        let deadline = Instant::now().checked_add(self.appear);
        loop {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(&self.control)
                .and_then(|f| {
                    if f.metadata()?.file_type().is_char_device() {
                        Ok(f)
                    } else {
                        Err(io::Error::other("it is not a character device"))
                    }
                });
            match opened {
                Ok(f) => return Ok(f),
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        && deadline.is_some_and(|d| Instant::now() < d) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => {
                    return Err(DmError::Control {
                        path: self.control.clone(),
                        error,
                    });
                }
            }
        }
    }

    /// Sends one request; the kernel answers in the same buffer.
    fn call(&self, op: Op, name: &str, buf: &mut [u8]) -> Result<DmIoctl, DmError> {
        let control = self.open()?;
        let fail = |error| DmError::Ioctl {
            op,
            name: name.to_owned(),
            error,
        };
        // SAFETY: `control` is an open descriptor for the call's
        // duration; `buf` is a live, writable buffer of `buf.len()`
        // bytes, and the dm_ioctl header at its start says so in
        // `data_size` (every encoder sets it to the buffer's length), which
        // is the most the kernel reads from or writes back into it
        // (dm-ioctl.c copy_params and ctl_ioctl). The kernel keeps no
        // reference to it after the call.
        let r = unsafe {
            nix::libc::ioctl(
                control.as_raw_fd(),
                request_code(op.cmd()),
                buf.as_mut_ptr(),
            )
        };
        if r < 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        DmIoctl::decode(buf).ok_or_else(|| {
            fail(io::Error::other(
                "the kernel's answer is shorter than a dm_ioctl",
            ))
        })
    }
}

impl Default for RealDeviceMapper {
    fn default() -> Self {
        RealDeviceMapper::new()
    }
}

impl DeviceMapper for RealDeviceMapper {
    fn version(&self) -> Result<[u32; 3], DmError> {
        let mut buf = encode_plain("", 0);
        Ok(self.call(Op::Version, "", &mut buf)?.version)
    }

    fn create(&self, name: &str) -> Result<DevNum, DmError> {
        check_name(name)?;
        let mut buf = encode_plain(name, 0);
        Ok(DevNum::from_kernel(
            self.call(Op::Create, name, &mut buf)?.dev,
        ))
    }

    fn load(&self, name: &str, targets: &[Target], read_only: bool) -> Result<(), DmError> {
        check_name(name)?;
        let mut buf = encode_table(name, targets, read_only)?;
        self.call(Op::Load, name, &mut buf).map(drop)
    }

    fn resume(&self, name: &str) -> Result<(), DmError> {
        check_name(name)?;
        let mut buf = encode_plain(name, 0);
        self.call(Op::Resume, name, &mut buf).map(drop)
    }

    fn remove(&self, name: &str) -> Result<(), DmError> {
        check_name(name)?;
        let mut buf = encode_plain(name, 0);
        self.call(Op::Remove, name, &mut buf).map(drop)
    }
}

/// A mapped device that is live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// Its device-mapper name.
    pub name: String,
    /// Its device number.
    pub dev: DevNum,
    /// Its node, `/dev/dm-<minor>`.
    pub node: PathBuf,
}

/// The node devtmpfs makes for a mapped device: `<dev>/dm-<minor>`.
pub fn node_path(dev_dir: &Path, dev: DevNum) -> PathBuf {
    dev_dir.join(format!("dm-{}", dev.minor))
}

/// Waits up to `deadline` for `path` to be the block device `dev`
/// (looked at without following a link).
pub fn wait_for_node(path: &Path, dev: DevNum, deadline: Duration) -> Result<(), DmError> {
    let until = Instant::now().checked_add(deadline);
    loop {
        let found = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_block_device() && DevNum::from_rdev(m.rdev()) == dev => {
                return Ok(());
            }
            Ok(m) if m.file_type().is_block_device() => {
                format!("it is block device {}", DevNum::from_rdev(m.rdev()))
            }
            Ok(_) => "it is not a block device".to_owned(),
            Err(e) => e.to_string(),
        };
        if until.is_none_or(|u| Instant::now() >= u) {
            return Err(DmError::Node {
                path: path.to_owned(),
                dev,
                found,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Makes the device `name` with these targets and makes it live:
/// version check, create, load, resume, then `node` (which waits for
/// its node and names it). Whatever fails after the create removes the
/// device again, so a failed attempt leaves nothing mapped; a removal
/// that fails too is added to the error's text.
pub fn open(
    dm: &dyn DeviceMapper,
    name: &str,
    targets: &[Target],
    read_only: bool,
    node: &dyn Fn(DevNum) -> Result<PathBuf, DmError>,
) -> Result<Mapped, String> {
    let version = dm.version().map_err(|e| e.to_string())?;
    if version.first() != VERSION.first() {
        return Err(DmError::Version(version).to_string());
    }
    let dev = dm.create(name).map_err(|e| e.to_string())?;
    let live = dm
        .load(name, targets, read_only)
        .and_then(|()| dm.resume(name))
        .and_then(|()| node(dev));
    match live {
        Ok(path) => Ok(Mapped {
            name: name.to_owned(),
            dev,
            node: path,
        }),
        Err(e) => match dm.remove(name) {
            Ok(()) => Err(e.to_string()),
            Err(r) => Err(format!("{e} (and removing it again: {r})")),
        },
    }
}

/// What the fake was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DmCall {
    /// DM_VERSION.
    Version,
    /// DM_DEV_CREATE of a name.
    Create(String),
    /// DM_TABLE_LOAD of a name, its targets, read-only or not.
    Load(String, Vec<Target>, bool),
    /// Resume of a name.
    Resume(String),
    /// DM_DEV_REMOVE of a name.
    Remove(String),
}

/// Records calls; answers device 253:`minor` and fails the commands it
/// is told to, with the errno given.
#[derive(Clone, Default)]
pub struct FakeDeviceMapper {
    /// Every call, in order.
    pub calls: Arc<Mutex<Vec<DmCall>>>,
    /// Commands that fail, and with which errno.
    pub fail: Vec<(Op, i32)>,
    /// The interface version answered (4.47.0 when unset).
    pub kernel_version: Option<[u32; 3]>,
    /// The minor number a create answers.
    pub minor: u32,
}

impl FakeDeviceMapper {
    /// The calls so far.
    pub fn calls(&self) -> Vec<DmCall> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn record(&self, op: Op, name: &str, call: DmCall) -> Result<(), DmError> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
        match self.fail.iter().find(|(o, _)| *o == op) {
            Some((_, errno)) => Err(DmError::Ioctl {
                op,
                name: name.to_owned(),
                error: io::Error::from_raw_os_error(*errno),
            }),
            None => Ok(()),
        }
    }
}

impl DeviceMapper for FakeDeviceMapper {
    fn version(&self) -> Result<[u32; 3], DmError> {
        self.record(Op::Version, "", DmCall::Version)?;
        Ok(self.kernel_version.unwrap_or([4, 47, 0]))
    }

    fn create(&self, name: &str) -> Result<DevNum, DmError> {
        self.record(Op::Create, name, DmCall::Create(name.to_owned()))?;
        Ok(DevNum {
            major: 253,
            minor: self.minor,
        })
    }

    fn load(&self, name: &str, targets: &[Target], read_only: bool) -> Result<(), DmError> {
        self.record(
            Op::Load,
            name,
            DmCall::Load(name.to_owned(), targets.to_vec(), read_only),
        )
    }

    fn resume(&self, name: &str) -> Result<(), DmError> {
        self.record(Op::Resume, name, DmCall::Resume(name.to_owned()))
    }

    fn remove(&self, name: &str) -> Result<(), DmError> {
        self.record(Op::Remove, name, DmCall::Remove(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts against include/uapi/linux/dm-ioctl.h on a 64-bit
    /// machine: offsets as the C compiler lays out those fields (u32s
    /// packed, the u64 `dev` at 40 after `padding`, the char arrays
    /// after it, the struct padded to the u64's alignment).
    #[test]
    fn the_structs_are_the_headers() {
        assert_eq!(size_of::<DmIoctl>(), 312);
        assert_eq!(std::mem::align_of::<DmIoctl>(), 8);
        assert_eq!(offset_of!(DmIoctl, version), 0);
        assert_eq!(offset_of!(DmIoctl, data_size), 12);
        assert_eq!(offset_of!(DmIoctl, data_start), 16);
        assert_eq!(offset_of!(DmIoctl, target_count), 20);
        assert_eq!(offset_of!(DmIoctl, open_count), 24);
        assert_eq!(offset_of!(DmIoctl, flags), 28);
        assert_eq!(offset_of!(DmIoctl, event_nr), 32);
        assert_eq!(offset_of!(DmIoctl, padding), 36);
        assert_eq!(offset_of!(DmIoctl, dev), 40);
        assert_eq!(offset_of!(DmIoctl, name), 48);
        assert_eq!(offset_of!(DmIoctl, uuid), 176);
        // dm-ioctl.c's minimum_data_size, offsetof(struct dm_ioctl, data).
        assert_eq!(offset_of!(DmIoctl, data), 305);

        assert_eq!(size_of::<DmTargetSpec>(), 40);
        assert_eq!(offset_of!(DmTargetSpec, sector_start), 0);
        assert_eq!(offset_of!(DmTargetSpec, length), 8);
        assert_eq!(offset_of!(DmTargetSpec, status), 16);
        assert_eq!(offset_of!(DmTargetSpec, next), 20);
        assert_eq!(offset_of!(DmTargetSpec, target_type), 24);
    }

    #[test]
    fn request_codes_are_iowr_of_the_struct() {
        // _IOWR(0xfd, nr, struct dm_ioctl): read|write (3) << 30, size
        // 312 (0x138) << 16, type 0xfd << 8, the number.
        assert_eq!(request_code(DM_VERSION_CMD) as u32, 0xC138_FD00);
        assert_eq!(request_code(DM_DEV_CREATE_CMD) as u32, 0xC138_FD03);
        assert_eq!(request_code(DM_DEV_REMOVE_CMD) as u32, 0xC138_FD04);
        assert_eq!(request_code(DM_DEV_SUSPEND_CMD) as u32, 0xC138_FD06);
        assert_eq!(request_code(DM_TABLE_LOAD_CMD) as u32, 0xC138_FD09);
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_plain_request_is_a_header_naming_the_device() {
        let b = encode_plain("liken-b", 0);
        assert_eq!(b.len(), 312);
        assert_eq!((u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8)), (4, 0, 0));
        assert_eq!(u32_at(&b, 12), 312, "data_size");
        assert_eq!(u32_at(&b, 16), 312, "data_start");
        assert_eq!(u32_at(&b, 20), 0, "target_count");
        assert_eq!(u32_at(&b, 28), 0, "flags");
        assert_eq!(&b[48..56], b"liken-b\0");
        assert!(b[56..].iter().all(|x| *x == 0));
        // And the decoder reads back what the encoder wrote.
        let h = DmIoctl::decode(&b).unwrap();
        assert_eq!(h, DmIoctl::request("liken-b", 0, 312, 0));
        assert_eq!(DmIoctl::decode(&b[..311]), None);
    }

    #[test]
    fn a_table_follows_the_header_spec_by_spec() {
        let targets = [
            Target {
                start: 0,
                sectors: 4104,
                kind: "verity".into(),
                // 11 bytes and a NUL: padded to 16.
                params: "1 254:4 x y".into(),
            },
            Target {
                start: 4104,
                sectors: 8,
                kind: "zero".into(),
                // 7 bytes and a NUL: exactly 8.
                params: "abcdefg".into(),
            },
        ];
        let b = encode_table("liken-b", &targets, true).unwrap();
        assert_eq!(b.len(), 312 + 40 + 16 + 40 + 8);
        assert_eq!(u32_at(&b, 12), b.len() as u32, "data_size");
        assert_eq!(u32_at(&b, 16), 312, "data_start");
        assert_eq!(u32_at(&b, 20), 2, "target_count");
        assert_eq!(u32_at(&b, 28), DM_READONLY_FLAG, "flags");
        let first = &b[312..];
        assert_eq!(u64_at(first, 0), 0);
        assert_eq!(u64_at(first, 8), 4104);
        assert_eq!(u32_at(first, 20), 56, "next: spec and padded params");
        assert_eq!(&first[24..40], b"verity\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(&first[40..56], b"1 254:4 x y\0\0\0\0\0");
        let second = &first[56..];
        assert_eq!(u64_at(second, 0), 4104);
        assert_eq!(u64_at(second, 8), 8);
        assert_eq!(u32_at(second, 20), 48);
        assert_eq!(&second[24..29], b"zero\0");
        assert_eq!(&second[40..48], b"abcdefg\0");
        // Every spec starts on an 8-byte boundary.
        assert_eq!((312 + 56) % 8, 0);

        let writable = encode_table("x", &targets[..1], false).unwrap();
        assert_eq!(u32_at(&writable, 28), 0);
        // A type the header cannot hold, or a NUL, is refused.
        let long = Target {
            kind: "a-type-of-16-byt".into(),
            ..targets[0].clone()
        };
        assert!(matches!(
            encode_table("x", &[long], true),
            Err(DmError::Target(_))
        ));
        let nul = Target {
            params: "a\0b".into(),
            ..targets[0].clone()
        };
        assert!(encode_table("x", &[nul], true).is_err());
    }

    #[test]
    fn names_the_kernel_refuses_are_refused_here() {
        assert!(check_name("liken-b").is_ok());
        assert!(check_name(&"n".repeat(127)).is_ok());
        for bad in ["", ".", "..", "control", "a/b", "a\0b"] {
            assert!(matches!(check_name(bad), Err(DmError::Name(_))), "{bad:?}");
        }
        assert!(check_name(&"n".repeat(128)).is_err());
    }

    #[test]
    fn device_numbers_decode_both_ways() {
        // huge_encode_dev(MKDEV(253, 0)) and of a minor past 255.
        assert_eq!(
            DevNum::from_kernel(253 << 8),
            DevNum {
                major: 253,
                minor: 0
            }
        );
        let big = DevNum {
            major: 253,
            minor: 0x1234,
        };
        let kernel = (0x34) | (253 << 8) | (0x1200 << 12);
        assert_eq!(DevNum::from_kernel(kernel), big);
        assert_eq!(DevNum::from_rdev(big.to_rdev()), big);
        // For numbers that fit 32 bits, st_rdev is the kernel's encoding.
        assert_eq!(big.to_rdev(), kernel);
        assert_eq!(big.to_string(), "253:4660");
        // What std reports for a real node agrees: /dev/null is 1:3.
        if let Ok(m) = std::fs::metadata("/dev/null") {
            assert_eq!(DevNum::from_rdev(m.rdev()), DevNum { major: 1, minor: 3 });
        }
    }

    fn verity_target() -> Target {
        Target {
            start: 0,
            sectors: 8,
            kind: "verity".into(),
            params: "1 254:4 254:4 4096 4096 1 1 sha256 r s".into(),
        }
    }

    #[test]
    fn open_creates_loads_resumes_and_names_the_node() {
        let dm = FakeDeviceMapper {
            minor: 3,
            ..Default::default()
        };
        let node = |d: DevNum| Ok(node_path(Path::new("/dev"), d));
        let m = open(&dm, "liken-a", &[verity_target()], true, &node).unwrap();
        assert_eq!(
            m,
            Mapped {
                name: "liken-a".into(),
                dev: DevNum {
                    major: 253,
                    minor: 3
                },
                node: "/dev/dm-3".into(),
            }
        );
        assert_eq!(
            dm.calls(),
            [
                DmCall::Version,
                DmCall::Create("liken-a".into()),
                DmCall::Load("liken-a".into(), vec![verity_target()], true),
                DmCall::Resume("liken-a".into()),
            ]
        );
    }

    #[test]
    fn a_failure_after_the_create_removes_the_device() {
        let node = |d: DevNum| Ok(node_path(Path::new("/dev"), d));
        // The table is refused: the device goes again.
        let dm = FakeDeviceMapper {
            fail: vec![(Op::Load, nix::libc::EINVAL)],
            ..Default::default()
        };
        let e = open(&dm, "liken-a", &[verity_target()], true, &node).unwrap_err();
        assert!(
            e.starts_with("DM_TABLE_LOAD liken-a: the kernel refused the table")
                && e.contains("Invalid argument")
                && e.ends_with("write the release again"),
            "{e}"
        );
        assert_eq!(dm.calls().last(), Some(&DmCall::Remove("liken-a".into())));

        // The node never appears, and the removal fails too: both said.
        let dm = FakeDeviceMapper {
            fail: vec![(Op::Remove, nix::libc::EBUSY)],
            ..Default::default()
        };
        let missing = |d: DevNum| {
            Err(DmError::Node {
                path: node_path(Path::new("/dev"), d),
                dev: d,
                found: "No such file or directory".into(),
            })
        };
        let e = open(&dm, "liken-a", &[verity_target()], true, &missing).unwrap_err();
        assert!(
            e.contains("/dev/dm-0 is not block device 253:0 (No such file or directory)")
                && e.contains("(and removing it again: DM_DEV_REMOVE liken-a"),
            "{e}"
        );

        // Nothing is created on a kernel of another interface, and a
        // create that fails leaves nothing to remove.
        let dm = FakeDeviceMapper {
            kernel_version: Some([5, 0, 0]),
            ..Default::default()
        };
        let e = open(&dm, "liken-a", &[verity_target()], true, &node).unwrap_err();
        assert!(e.contains("speaks interface 5.0.0, not 4.x"), "{e}");
        assert_eq!(dm.calls(), [DmCall::Version]);
        let dm = FakeDeviceMapper {
            fail: vec![(Op::Create, nix::libc::EBUSY)],
            ..Default::default()
        };
        let e = open(&dm, "liken-a", &[verity_target()], true, &node).unwrap_err();
        assert!(e.contains("a device of that name exists already"), "{e}");
        assert_eq!(
            dm.calls(),
            [DmCall::Version, DmCall::Create("liken-a".into())]
        );
    }

    #[test]
    fn the_node_is_waited_for_with_a_deadline() {
        let dir = std::env::temp_dir().join(format!("liken-init-dm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = DevNum {
            major: 253,
            minor: 0,
        };
        let path = node_path(&dir, dev);
        assert_eq!(path, dir.join("dm-0"));
        let t0 = Instant::now();
        let e = wait_for_node(&path, dev, Duration::from_millis(50)).unwrap_err();
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("is not block device 253:0"), "{e}");
        // A file in its place is no node, nor is a link to one.
        std::fs::write(&path, "").unwrap();
        let e = wait_for_node(&path, dev, Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("(it is not a block device)"), "{e}");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/null", &path).unwrap();
        assert!(wait_for_node(&path, dev, Duration::ZERO).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_control_node_says_what_to_do() {
        let dm = RealDeviceMapper {
            control: "/nonexistent/mapper/control".into(),
            appear: Duration::from_millis(20),
        };
        let e = dm.version().unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/mapper/control") && e.contains("images/boot-modules.txt"),
            "{e}"
        );
        // A regular file is no control node.
        let dm = RealDeviceMapper {
            control: "/proc/self/cmdline".into(),
            appear: Duration::ZERO,
        };
        assert!(
            dm.version()
                .unwrap_err()
                .to_string()
                .contains("character device")
        );
    }
}
