//! efivarfs for the steps that read EFI variables, and the boot log's
//! line on Secure Boot.
//!
//! Debian's kernel has efivarfs as a module, which the initramfs does
//! not carry, so it is mounted on demand once the system image's module
//! tree is reachable ([`ensure_mounted`]): by the `secureboot` step here
//! and by boot assessment (`crate::bless`), whichever comes first.
//!
//! The `secureboot` step prints what the firmware says in `SecureBoot`
//! and `SetupMode` ([`crate::sys::efivars::secure_boot_state`]): whether
//! the firmware checked the image it started against db. It is a report,
//! not a gate: init cannot check the firmware's word, and a machine
//! whose owner turned Secure Boot off still boots. Odd bytes in the
//! variables are said as such and never stop the boot.

use std::path::Path;

use crate::console::Outcome;
use crate::context::Boot;
use crate::sys::efivars;

/// The milestone name.
pub const MILESTONE: &str = "secureboot";

/// Mounts efivarfs on a UEFI boot where it is not mounted yet. Call it
/// after the root step: the module comes from the system image's tree.
pub fn ensure_mounted(boot: &mut Boot) -> Result<(), String> {
    if !efivars::is_efi_boot(&boot.paths.sys) {
        return Ok(());
    }
    let target = efivars::efivars_dir(&boot.paths.sys);
    let mounts = std::fs::read_to_string(boot.paths.proc.join("self/mounts")).unwrap_or_default();
    if decide_mounted(&mounts, &target) {
        return Ok(());
    }
    if let Some(report) = boot.load_modules(&["efivarfs"])
        && let Err(e) = crate::modload::describe(&report, 0.0)
    {
        return Err(format!("cannot load efivarfs: {e}"));
    }
    let request = crate::sys::mount::MountRequest {
        source: "efivarfs".into(),
        target: target.clone(),
        fstype: "efivarfs".into(),
        flags: crate::sys::mount::MsFlags::MS_NOSUID
            | crate::sys::mount::MsFlags::MS_NODEV
            | crate::sys::mount::MsFlags::MS_NOEXEC,
        data: None,
    };
    boot.sys.mount.mount(&request).map_err(|e| {
        format!(
            "cannot mount efivarfs on {} ({e}), so the firmware's variables (Secure Boot, the \
             entry systemd-boot booted) are unknown",
            target.display()
        )
    })?;
    boot.mounted.push(target);
    Ok(())
}

/// Whether /proc/self/mounts lists a mount on `target`.
pub fn decide_mounted(mounts: &str, target: &Path) -> bool {
    let want = target.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// The boot step: the firmware's Secure Boot state, in the boot log.
pub fn step(boot: &mut Boot) -> Outcome {
    if !efivars::is_efi_boot(&boot.paths.sys) {
        return Outcome::ok_with("not a UEFI boot (BIOS or no EFI runtime): no Secure Boot");
    }
    if let Err(e) = ensure_mounted(boot) {
        return Outcome::ok_with(format!("unknown: {e}"));
    }
    match efivars::secure_boot_state(&boot.paths.sys) {
        Ok(state) => Outcome::ok_with(state.describe()),
        Err(e) => Outcome::ok_with(format!("unknown: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_read_from_the_table() {
        let table = "sysfs /sys sysfs rw 0 0\nefivarfs /sys/firmware/efi/efivars efivarfs rw 0 0\n";
        assert!(decide_mounted(
            table,
            Path::new("/sys/firmware/efi/efivars")
        ));
        assert!(!decide_mounted(table, Path::new("/sys/firmware")));
        assert!(!decide_mounted("", Path::new("/sys")));
    }
}
