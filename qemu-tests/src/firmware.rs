//! The firmware a test machine boots with, as QEMU arguments: SeaBIOS
//! (QEMU's default, nothing to add) or OVMF on pflash, so one test body
//! can run under either and the tests and the demo agree on how OVMF is
//! attached.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Which firmware path a machine boots through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// OVMF: systemd-boot from the ESP.
    Uefi,
    /// SeaBIOS: GRUB's boot.img and core.img.
    Bios,
}

impl Firmware {
    /// The QEMU arguments for this firmware; under UEFI with a fresh
    /// copy of OVMF's variable store in `dir`, so the boot starts from
    /// firmware defaults.
    pub fn args(self, dir: &Path) -> Vec<OsString> {
        match self {
            Firmware::Bios => Vec::new(),
            Firmware::Uefi => Ovmf::fresh(dir).args(),
        }
    }
}

/// OVMF's code (read-only) and one machine's copy of its variables.
#[derive(Clone, Debug)]
pub struct Ovmf {
    /// OVMF_CODE.fd, shared and read-only.
    pub code: PathBuf,
    /// This machine's copy of OVMF_VARS.fd, kept across its boots.
    pub vars: PathBuf,
}

impl Ovmf {
    /// Copies Debian's OVMF variable store into `dir`, or fails naming
    /// the package that provides the firmware.
    pub fn fresh(dir: &Path) -> Ovmf {
        let code = PathBuf::from("/usr/share/OVMF/OVMF_CODE.fd");
        let template = PathBuf::from("/usr/share/OVMF/OVMF_VARS.fd");
        assert!(
            code.exists() && template.exists(),
            "no OVMF firmware in /usr/share/OVMF; run scripts/setup.sh (ovmf)"
        );
        let vars = dir.join("OVMF_VARS.fd");
        std::fs::copy(&template, &vars).unwrap_or_else(|e| panic!("copy OVMF vars: {e}"));
        Ovmf { code, vars }
    }

    /// OVMF's Secure Boot build (Debian's `OVMF_CODE_4M.secboot.fd`, its
    /// variables behind SMM) with a fresh copy of the blank 4 MiB
    /// variable store, `OVMF_VARS_4M.fd`: no PK, so the firmware is in
    /// setup mode and takes whatever keys are written. Boot it with
    /// [`Ovmf::secure_args`].
    pub fn secure_boot_setup_mode(dir: &Path) -> Ovmf {
        let code = PathBuf::from("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd");
        let template = PathBuf::from("/usr/share/OVMF/OVMF_VARS_4M.fd");
        assert!(
            code.exists() && template.exists(),
            "no OVMF Secure Boot firmware in /usr/share/OVMF; run scripts/setup.sh (ovmf)"
        );
        let vars = dir.join("OVMF_VARS_4M.fd");
        std::fs::copy(&template, &vars).unwrap_or_else(|e| panic!("copy OVMF vars: {e}"));
        Ovmf { code, vars }
    }

    /// The Secure Boot build's arguments: SMM on (the `-machine` option
    /// QEMU merges into the harness's `-machine q35`), the flash's secure
    /// property so that only SMM code writes the variables, and both
    /// files on pflash.
    pub fn secure_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "-machine".into(),
            "smm=on".into(),
            "-global".into(),
            "driver=cfi.pflash01,property=secure,value=on".into(),
        ];
        args.extend(self.args());
        args
    }

    /// Both files on pflash: unit 0 the code, unit 1 the variables.
    pub fn args(&self) -> Vec<OsString> {
        vec![
            "-drive".into(),
            format!(
                "if=pflash,format=raw,unit=0,readonly=on,file={}",
                self.code.display()
            )
            .into(),
            "-drive".into(),
            format!("if=pflash,format=raw,unit=1,file={}", self.vars.display()).into(),
        ]
    }
}
