//! The kernel, behind one narrow seam per area.
//!
//! Each area is a trait with the real implementation (safe wrappers from
//! `nix`) and a recording fake, so the
//! logic above it (the boot steps, coldplug, shutdown) is tested without
//! root and without a kernel to break. Areas whose only seam is the
//! filesystem (block devices read from /sys) take a root directory
//! instead, and tests hand them a temporary tree.
//!
//! - [`mount`] wraps mount(2) and umount2(2);
//! - [`modules`] wraps finit_module(2);
//! - [`power`] wraps sync(2), reboot(2) and the Ctrl-Alt-Del switch,
//!   and the kexec calls of [`kexec`] (kexec_file_load(2), a raw
//!   syscall);
//! - [`block`] finds GPT partitions by label in /sys/class/block;
//! - [`dm`] makes, loads, resumes and removes device-mapper devices
//!   through /dev/mapper/control's ioctls (the slot opened through
//!   dm-verity);
//! - [`efivars`] reads EFI variables (the entry systemd-boot booted);
//! - [`children`] holds the table of init's children that the reaper
//!   and the spawners share, and how a child ended;
//! - [`command`] runs a program to its end (mke2fs, `k3s kubectl`)
//!   without racing the reaper;
//! - [`netlink`] changes and reads links (bonds and VLANs too),
//!   addresses and routes of both families over rtnetlink;
//! - [`sysctl`] writes a kernel parameter under /proc/sys;
//! - [`clock`] reads and sets the wall clock (the NTP step);
//! - [`process`] clears init's signal mask in a child before exec,
//!   chroots a child, and trims the heap; with [`kexec`] and [`dm`]'s
//!   ioctl call, the crate's only unsafe code.

pub mod block;
pub mod children;
pub mod clock;
pub mod command;
pub mod dm;
pub mod efivars;
pub mod kexec;
pub mod modules;
pub mod mount;
pub mod netlink;
pub mod power;
pub mod process;
pub mod sysctl;

/// The kernel interfaces a boot uses, real or fake.
pub struct Sys {
    /// mount(2).
    pub mount: Box<dyn mount::Mounter + Send>,
    /// finit_module(2); shared, as the image's modules load on a worker
    /// thread beside the boot steps ([`crate::image_modules`]).
    pub modules: std::sync::Arc<dyn modules::ModuleLoader + Send + Sync>,
    /// sync(2) and reboot(2).
    pub power: Box<dyn power::Power + Send>,
    /// rtnetlink: links, addresses, routes; shared with the network
    /// thread ([`crate::net::daemon`]).
    pub netlink: std::sync::Arc<dyn netlink::Netlink + Send + Sync>,
    /// /proc/sys writes.
    pub sysctl: Box<dyn sysctl::SysctlWriter + Send>,
    /// Programs run to their end.
    pub run: std::sync::Arc<dyn command::Runner + Send + Sync>,
    /// The wall clock.
    pub clock: Box<dyn clock::Clock + Send>,
    /// The device mapper (the slot opened through dm-verity).
    pub dm: Box<dyn dm::DeviceMapper + Send>,
}

impl Sys {
    /// The running kernel; commands are reaped through the reaper's
    /// `table`.
    pub fn real(table: children::SharedTable) -> Sys {
        Sys {
            run: std::sync::Arc::new(command::RealRunner { table }),
            mount: Box::new(mount::RealMounter),
            modules: std::sync::Arc::new(modules::RealLoader),
            power: Box::new(power::RealPower),
            netlink: std::sync::Arc::new(netlink::RealNetlink::new()),
            sysctl: Box::new(sysctl::RealSysctl),
            clock: Box::new(clock::RealClock),
            dm: Box::new(dm::RealDeviceMapper::new()),
        }
    }
}
