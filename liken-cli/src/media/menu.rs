//! The install menu, rendered once for both firmware paths: one
//! systemd-boot entry per machine (UEFI) and the same entries in
//! grub.cfg (BIOS), so a person picks the same thing whichever way the
//! computer boots the stick.
//!
//! Each entry boots the release's kernel with `liken.install=1
//! liken.machine=<name>` and the `-console` and `-kernel-arg` arguments;
//! install mode copies the `console=` and `liken.bless-deadline=`
//! arguments into the installed machine's own entries (never
//! `liken.bless-after=`: an installed machine is blessed by k3s). The initrds are the
//! release's microcode (when it has one, first, as early microcode must
//! be), boot.cpio, then the deployment layer.
//!
//! With one machine the menu boots it after a few seconds; with several
//! it waits for a choice, since the wrong entry installs the wrong
//! identity onto the computer.
//!
//! Everything here is pure text; arguments are checked to a plain
//! character set first ([`decide_kernel_args`]), so nothing a person
//! types can break out of a loader entry line or a GRUB word.

use std::fmt;

use liken_api::Version;

/// Seconds the menu waits before booting a stick's only machine.
pub const SINGLE_MACHINE_TIMEOUT: u32 = 3;

/// Where the stick keeps the release's boot files, relative to the ESP.
pub const KERNEL: &str = "liken/vmlinuz";
/// The release's boot initramfs on the stick.
pub const BOOT_CPIO: &str = "liken/boot.cpio";
/// The release's microcode initramfs on the stick, when it has one.
pub const MICROCODE_CPIO: &str = "liken/microcode.cpio";
/// The deployment layer on the stick.
pub const LAYER_CPIO: &str = liken_api::bootloader::LAYER_PATH;

/// A kernel argument that cannot go on the menu.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// Empty, or characters outside the plain set.
    Chars {
        /// The flag it came from.
        flag: &'static str,
        /// The value.
        value: String,
    },
    /// An argument the menu sets itself.
    Reserved(String),
    /// A machine name that is not a plain name.
    Machine(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Chars { flag, value } => write!(
                f,
                "-{flag} {value:?} must be non-empty and use only letters, digits and , . _ : / = + -"
            ),
            ArgError::Reserved(a) => write!(
                f,
                "-kernel-arg {a:?}: liken.install and liken.machine are set by the menu itself; \
                 leave them out"
            ),
            ArgError::Machine(m) => write!(
                f,
                "machine name {m:?} must be lower-case letters, digits and '-' to be named on a \
                 boot menu"
            ),
        }
    }
}

impl std::error::Error for ArgError {}

fn plain(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b",._:/=+-".contains(&b))
}

/// The kernel arguments every entry carries: `console=<c>` for each
/// `-console` value (in order), then each `-kernel-arg`.
pub fn decide_kernel_args(consoles: &[&str], extra: &[&str]) -> Result<Vec<String>, ArgError> {
    let mut out = Vec::new();
    for c in consoles {
        let c = c.strip_prefix("console=").unwrap_or(c);
        if !plain(c) {
            return Err(ArgError::Chars {
                flag: "console",
                value: (*c).to_owned(),
            });
        }
        out.push(format!("console={c}"));
    }
    for a in extra {
        if !plain(a) {
            return Err(ArgError::Chars {
                flag: "kernel-arg",
                value: (*a).to_owned(),
            });
        }
        let key = a.split('=').next().unwrap_or(a);
        if key == "liken.install" || key == "liken.machine" {
            return Err(ArgError::Reserved((*a).to_owned()));
        }
        out.push((*a).to_owned());
    }
    Ok(out)
}

/// Checks a machine name for the menu (file names, GRUB titles).
pub fn check_machine(name: &str) -> Result<(), ArgError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ArgError::Machine(name.to_owned()))
    }
}

/// Everything the menu says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallMenu {
    /// The release installed.
    pub version: Version,
    /// The machines, in the order shown (checked with [`check_machine`]).
    pub machines: Vec<String>,
    /// Whether the release has microcode.cpio.
    pub microcode: bool,
    /// From [`decide_kernel_args`].
    pub kernel_args: Vec<String>,
    /// Whether the stick carries the fleet's Secure Boot keys for
    /// systemd-boot to enrol (`-secureboot`).
    pub enroll_keys: bool,
}

impl InstallMenu {
    fn timeout_waits(&self) -> bool {
        self.machines.len() != 1
    }

    /// The initrds of every entry, in load order, relative to the ESP.
    pub fn initrds(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.microcode {
            v.push(MICROCODE_CPIO);
        }
        v.push(BOOT_CPIO);
        v.push(LAYER_CPIO);
        v
    }

    /// The kernel command line of `machine`'s entry.
    pub fn options(&self, machine: &str) -> String {
        let mut parts = vec![
            "liken.install=1".to_owned(),
            format!("liken.machine={machine}"),
        ];
        parts.extend(self.kernel_args.iter().cloned());
        parts.join(" ")
    }

    fn title(&self, machine: &str) -> String {
        format!("Install liken {} on {machine}", self.version)
    }
}

/// The entry file of `machine`, relative to the ESP.
pub fn entry_path(machine: &str) -> String {
    format!(
        "{}/install-{machine}.conf",
        liken_api::bootloader::ENTRIES_DIR
    )
}

/// loader/loader.conf: a few seconds then the only machine, or wait for
/// a choice among several; no editor, no entries but ours; and, with
/// the fleet's keys on the stick, `secure-boot-enroll force`
/// ([`liken_api::bootloader::SECURE_BOOT_ENROLL`]: what systemd-boot 252
/// does with it is there).
pub fn render_loader_conf(m: &InstallMenu) -> String {
    let timeout = if m.timeout_waits() {
        "menu-force".to_owned()
    } else {
        SINGLE_MACHINE_TIMEOUT.to_string()
    };
    let default = m.machines.first().map_or(String::new(), |first| {
        format!("default install-{first}.conf\n")
    });
    let enroll = if m.enroll_keys {
        format!("{}\n", liken_api::bootloader::SECURE_BOOT_ENROLL)
    } else {
        String::new()
    };
    format!("timeout {timeout}\n{default}editor no\nauto-entries no\nauto-firmware no\n{enroll}")
}

/// `machine`'s Boot Loader Specification entry.
pub fn render_entry(m: &InstallMenu, machine: &str) -> String {
    let mut s = format!(
        "title {}\nsort-key liken-install\nversion {}\nlinux /{KERNEL}\n",
        m.title(machine),
        m.version
    );
    for i in m.initrds() {
        s.push_str(&format!("initrd /{i}\n"));
    }
    s.push_str(&format!("options {}\n", m.options(machine)));
    s
}

/// grub.cfg for the BIOS path: the same entries, in the same order,
/// with the same timeout rule. Paths are relative to `$root`, which
/// core.img's prefix `(,gpt1)/grub` sets to the stick's ESP.
pub fn render_grub_cfg(m: &InstallMenu) -> String {
    let timeout = if m.timeout_waits() {
        "-1".to_owned()
    } else {
        SINGLE_MACHINE_TIMEOUT.to_string()
    };
    let mut s =
        String::from("# liken install stick: the same menu as loader/entries/install-*.conf.\n");
    s.push_str(&format!("set timeout={timeout}\nset default=0\n"));
    let initrds: Vec<String> = m.initrds().iter().map(|i| format!("/{i}")).collect();
    for machine in &m.machines {
        s.push_str(&format!("menuentry \"{}\" {{\n", m.title(machine)));
        s.push_str(&format!("  linux /{KERNEL} {}\n", m.options(machine)));
        s.push_str(&format!("  initrd {}\n", initrds.join(" ")));
        s.push_str("}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn menu(machines: &[&str], microcode: bool) -> InstallMenu {
        InstallMenu {
            version: Version::parse("2026.12.02-001").unwrap(),
            machines: machines.iter().map(|m| (*m).to_owned()).collect(),
            microcode,
            kernel_args: decide_kernel_args(
                &["ttyS0,115200", "console=tty0"],
                &["liken.bless-after=30"],
            )
            .unwrap(),
            enroll_keys: false,
        }
    }

    #[test]
    fn kernel_args_are_plain_and_not_the_menus_own() {
        assert_eq!(
            menu(&["a"], false).kernel_args,
            [
                "console=ttyS0,115200",
                "console=tty0",
                "liken.bless-after=30"
            ]
        );
        for bad in ["", "ttyS0 quiet", "ttyS0;reboot", "tty\"0", "$x"] {
            assert!(decide_kernel_args(&[bad], &[]).is_err(), "{bad:?}");
        }
        let e = decide_kernel_args(&[], &["liken.machine=x"]).unwrap_err();
        assert!(e.to_string().contains("set by the menu"), "{e}");
        assert!(check_machine("node-1").is_ok());
        assert!(check_machine("Node 1").is_err());
    }

    #[test]
    fn an_entry_per_machine_with_microcode_first() {
        let m = menu(&["node-1", "node-2"], true);
        assert_eq!(entry_path("node-1"), "loader/entries/install-node-1.conf");
        assert_eq!(
            render_entry(&m, "node-2"),
            "title Install liken 2026.12.02-001 on node-2\n\
             sort-key liken-install\n\
             version 2026.12.02-001\n\
             linux /liken/vmlinuz\n\
             initrd /liken/microcode.cpio\n\
             initrd /liken/boot.cpio\n\
             initrd /liken/layer.cpio\n\
             options liken.install=1 liken.machine=node-2 console=ttyS0,115200 console=tty0 liken.bless-after=30\n"
        );
        let no_ucode = render_entry(&menu(&["a"], false), "a");
        assert!(!no_ucode.contains("microcode"));
    }

    #[test]
    fn several_machines_wait_for_a_choice_in_both_menus() {
        let many = menu(&["node-1", "node-2"], false);
        assert!(
            render_loader_conf(&many)
                .starts_with("timeout menu-force\ndefault install-node-1.conf\n")
        );
        let cfg = render_grub_cfg(&many);
        assert!(cfg.contains("set timeout=-1\n"));
        assert_eq!(cfg.matches("menuentry ").count(), 2);
        assert!(cfg.contains(
            "  linux /liken/vmlinuz liken.install=1 liken.machine=node-2 console=ttyS0,115200 console=tty0 liken.bless-after=30\n  initrd /liken/boot.cpio /liken/layer.cpio\n"
        ));
        let one = menu(&["node-1"], false);
        assert!(render_loader_conf(&one).starts_with("timeout 3\n"));
        assert!(!render_loader_conf(&one).contains("secure-boot-enroll"));
        let enrolling = InstallMenu {
            enroll_keys: true,
            ..one.clone()
        };
        assert_eq!(
            render_loader_conf(&enrolling),
            format!("{}secure-boot-enroll force\n", render_loader_conf(&one))
        );
        assert!(render_grub_cfg(&one).contains("set timeout=3\n"));
    }
}
