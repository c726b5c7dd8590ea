//! EFI variables, read from efivarfs.
//!
//! The kernel shows each variable as a file
//! `/sys/firmware/efi/efivars/<Name>-<vendor GUID>`: four bytes of
//! attributes (little-endian), then the variable's data. systemd-boot
//! tells the booted system which entry it chose in
//! `LoaderEntrySelected` under its vendor GUID [`LOADER_VENDOR`], as a
//! NUL-terminated UTF-16LE string; boot assessment reads it to learn
//! which slot's entry to bless.
//!
//! The firmware's own variables sit under the EFI global vendor GUID
//! [`GLOBAL_VENDOR`]: `SecureBoot` and `SetupMode`, one byte each after
//! the attributes. init reads them to say in its boot log whether the
//! firmware checked what it started ([`secure_boot_state`]).
//!
//! The seam is the sysfs root, as for [`crate::sys::block`]: tests hand
//! a temporary tree. Parsing is separate and pure, and takes any bytes
//! (short, odd-length, unterminated) without panicking. Files are read
//! with PID 1's rules ([`crate::fsutil::read_capped`]): no link
//! followed, no blocking open, at most [`MAX_VAR`] bytes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The vendor GUID of the Boot Loader Interface (systemd-boot's
/// variables).
pub const LOADER_VENDOR: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

/// The entry systemd-boot booted.
pub const LOADER_ENTRY_SELECTED: &str = "LoaderEntrySelected";

/// The vendor GUID of the variables the UEFI specification defines
/// (EFI_GLOBAL_VARIABLE).
pub const GLOBAL_VENDOR: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// 1 when the firmware enforces Secure Boot (checks each image it
/// starts against db), 0 when it does not.
pub const SECURE_BOOT: &str = "SecureBoot";

/// 1 while the firmware has no platform key (setup mode: keys may be
/// enrolled unsigned, nothing is checked).
pub const SETUP_MODE: &str = "SetupMode";

/// The most init reads of one variable: the variables it reads are a
/// few bytes, and efivarfs shows each as a regular file.
pub const MAX_VAR: u64 = 4096;

/// efivarfs under the sysfs root.
pub fn efivars_dir(sys: &Path) -> PathBuf {
    sys.join("firmware/efi/efivars")
}

/// Whether this boot came through UEFI (the kernel exports
/// /sys/firmware/efi only then).
pub fn is_efi_boot(sys: &Path) -> bool {
    sys.join("firmware/efi").is_dir()
}

/// What is wrong with a variable's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EfiVarError {
    /// Fewer than the four attribute bytes.
    Short(usize),
    /// A UTF-16 string with an odd number of bytes.
    OddLength(usize),
    /// Not valid UTF-16.
    NotUtf16,
    /// A one-byte flag variable whose data is not one byte.
    FlagLength(usize),
    /// A one-byte flag that is neither 0 nor 1.
    FlagValue(u8),
}

impl fmt::Display for EfiVarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EfiVarError::Short(n) => write!(
                f,
                "the variable is {n} bytes, shorter than its 4 attribute bytes"
            ),
            EfiVarError::OddLength(n) => write!(
                f,
                "the variable's string is {n} bytes, not whole UTF-16 characters"
            ),
            EfiVarError::NotUtf16 => f.write_str("the variable's string is not valid UTF-16"),
            EfiVarError::FlagLength(n) => write!(
                f,
                "the variable holds {n} bytes of data, not the one byte of a flag"
            ),
            EfiVarError::FlagValue(v) => {
                write!(f, "the flag variable holds {v}, neither 0 nor 1")
            }
        }
    }
}

impl std::error::Error for EfiVarError {}

/// A variable file's attributes and data.
pub fn split_var(raw: &[u8]) -> Result<(u32, &[u8]), EfiVarError> {
    match raw.split_first_chunk::<4>() {
        Some((attrs, data)) => Ok((u32::from_le_bytes(*attrs), data)),
        None => Err(EfiVarError::Short(raw.len())),
    }
}

/// A UTF-16LE string, ending at the first NUL (or at the end of the
/// data when there is none).
pub fn parse_utf16(data: &[u8]) -> Result<String, EfiVarError> {
    let (units, rest) = data.as_chunks::<2>();
    if !rest.is_empty() {
        return Err(EfiVarError::OddLength(data.len()));
    }
    let units: Vec<u16> = units
        .iter()
        .map(|pair| u16::from_le_bytes(*pair))
        .take_while(|u| *u != 0)
        .collect();
    String::from_utf16(&units).map_err(|_| EfiVarError::NotUtf16)
}

/// A one-byte boolean variable (`SecureBoot`, `SetupMode`) from its
/// whole file: four attribute bytes, then exactly one byte, 0 or 1.
pub fn parse_flag(raw: &[u8]) -> Result<bool, EfiVarError> {
    let (_, data) = split_var(raw)?;
    match data {
        [0] => Ok(false),
        [1] => Ok(true),
        [v] => Err(EfiVarError::FlagValue(*v)),
        _ => Err(EfiVarError::FlagLength(data.len())),
    }
}

/// What the firmware says of Secure Boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecureBootState {
    /// `SecureBoot` is 1: the firmware checked this boot's images
    /// against db.
    Enabled,
    /// `SecureBoot` is 0 (or absent, as on firmware without Secure
    /// Boot), and a platform key is enrolled.
    Disabled,
    /// `SecureBoot` is 0 and `SetupMode` 1: no platform key, so keys can
    /// be enrolled and nothing is checked.
    SetupMode,
}

impl SecureBootState {
    /// As the boot log says it.
    pub fn describe(self) -> &'static str {
        match self {
            SecureBootState::Enabled => "enabled",
            SecureBootState::Disabled => "disabled",
            SecureBootState::SetupMode => "disabled (setup mode: no platform key enrolled)",
        }
    }
}

/// The state from the two variables' files (`None`: the firmware has no
/// such variable).
pub fn decide_secure_boot(
    secure_boot: Option<&[u8]>,
    setup_mode: Option<&[u8]>,
) -> Result<SecureBootState, EfiVarError> {
    if secure_boot.map(parse_flag).transpose()? == Some(true) {
        return Ok(SecureBootState::Enabled);
    }
    if setup_mode.map(parse_flag).transpose()? == Some(true) {
        return Ok(SecureBootState::SetupMode);
    }
    Ok(SecureBootState::Disabled)
}

/// A variable's whole file (attributes and data), `None` when the
/// firmware has no such variable.
fn read_raw(sys: &Path, name: &str, vendor: &str) -> Result<Option<Vec<u8>>, ReadError> {
    let path = efivars_dir(sys).join(format!("{name}-{vendor}"));
    match crate::fsutil::read_capped(&path, MAX_VAR) {
        Ok(raw) => Ok(Some(raw)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReadError::Io(path, e)),
    }
}

/// The firmware's Secure Boot state, from `SecureBoot` and `SetupMode`
/// in efivarfs (which must be mounted).
pub fn secure_boot_state(sys: &Path) -> Result<SecureBootState, ReadError> {
    let secure_boot = read_raw(sys, SECURE_BOOT, GLOBAL_VENDOR)?;
    let setup_mode = read_raw(sys, SETUP_MODE, GLOBAL_VENDOR)?;
    decide_secure_boot(secure_boot.as_deref(), setup_mode.as_deref()).map_err(|e| {
        ReadError::Format(
            efivars_dir(sys).join(format!("{SECURE_BOOT}-{GLOBAL_VENDOR}")),
            e,
        )
    })
}

/// Why a variable could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read.
    Io(PathBuf, io::Error),
    /// Its bytes are not what the variable holds.
    Format(PathBuf, EfiVarError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(p, e) => write!(f, "cannot read EFI variable {}: {e}", p.display()),
            ReadError::Format(p, e) => write!(f, "EFI variable {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for ReadError {}

/// A variable's data, `None` when the firmware has no such variable.
pub fn read_var(sys: &Path, name: &str, vendor: &str) -> Result<Option<Vec<u8>>, ReadError> {
    let path = efivars_dir(sys).join(format!("{name}-{vendor}"));
    let Some(raw) = read_raw(sys, name, vendor)? else {
        return Ok(None);
    };
    match split_var(&raw) {
        Ok((_, data)) => Ok(Some(data.to_vec())),
        Err(e) => Err(ReadError::Format(path, e)),
    }
}

/// LoaderEntrySelected: the id of the entry systemd-boot booted, `None`
/// when not booted by systemd-boot (BIOS, another loader, direct kernel
/// boot).
pub fn loader_entry_selected(sys: &Path) -> Result<Option<String>, ReadError> {
    let Some(data) = read_var(sys, LOADER_ENTRY_SELECTED, LOADER_VENDOR)? else {
        return Ok(None);
    };
    let path = efivars_dir(sys).join(format!("{LOADER_ENTRY_SELECTED}-{LOADER_VENDOR}"));
    parse_utf16(&data)
        .map(Some)
        .map_err(|e| ReadError::Format(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    #[test]
    fn parses_loader_entry_selected() {
        let mut raw = vec![0x06, 0, 0, 0];
        raw.extend(utf16("liken-b+3.conf"));
        raw.extend([0, 0]);
        let (attrs, data) = split_var(&raw).unwrap();
        assert_eq!(attrs, 6);
        assert_eq!(parse_utf16(data).unwrap(), "liken-b+3.conf");
        // Bytes after the NUL are ignored; a missing NUL ends at the end.
        let mut tail = utf16("a");
        tail.extend([0, 0, b'x', 0]);
        assert_eq!(parse_utf16(&tail).unwrap(), "a");
        assert_eq!(parse_utf16(&utf16("liken-a")).unwrap(), "liken-a");
        assert_eq!(parse_utf16(&[]).unwrap(), "");
    }

    #[test]
    fn odd_data_is_an_error_not_a_panic() {
        assert_eq!(split_var(&[1, 2, 3]), Err(EfiVarError::Short(3)));
        assert_eq!(split_var(&[]), Err(EfiVarError::Short(0)));
        assert_eq!(split_var(&[7, 0, 0, 0]), Ok((7, &[][..])));
        assert_eq!(
            parse_utf16(&[b'a', 0, b'b']),
            Err(EfiVarError::OddLength(3))
        );
        // A lone high surrogate.
        assert_eq!(parse_utf16(&[0x00, 0xd8]), Err(EfiVarError::NotUtf16));
    }

    #[test]
    fn decodes_secure_boot_and_setup_mode() {
        // NV | BS | RT, then the byte.
        let on = [6, 0, 0, 0, 1];
        let off = [6, 0, 0, 0, 0];
        assert_eq!(parse_flag(&on), Ok(true));
        assert_eq!(parse_flag(&off), Ok(false));
        assert_eq!(parse_flag(&[6, 0, 0, 0]), Err(EfiVarError::FlagLength(0)));
        assert_eq!(
            parse_flag(&[6, 0, 0, 0, 1, 0]),
            Err(EfiVarError::FlagLength(2))
        );
        assert_eq!(parse_flag(&[6, 0, 0, 0, 2]), Err(EfiVarError::FlagValue(2)));
        assert_eq!(parse_flag(&[6, 0]), Err(EfiVarError::Short(2)));
        assert_eq!(
            decide_secure_boot(Some(&on), Some(&off)),
            Ok(SecureBootState::Enabled)
        );
        assert_eq!(
            decide_secure_boot(Some(&off), Some(&on)),
            Ok(SecureBootState::SetupMode)
        );
        assert_eq!(
            decide_secure_boot(Some(&off), Some(&off)),
            Ok(SecureBootState::Disabled)
        );
        // Firmware without Secure Boot has neither variable.
        assert_eq!(
            decide_secure_boot(None, None),
            Ok(SecureBootState::Disabled)
        );
        assert_eq!(
            decide_secure_boot(Some(&[6, 0, 0, 0, 7]), None),
            Err(EfiVarError::FlagValue(7))
        );
    }

    #[test]
    fn reads_secure_boot_without_following_links() {
        let dir = std::env::temp_dir().join(format!("liken-init-sb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(efivars_dir(&dir)).unwrap();
        let file = efivars_dir(&dir).join(format!("{SECURE_BOOT}-{GLOBAL_VENDOR}"));
        std::fs::write(&file, [6, 0, 0, 0, 1]).unwrap();
        assert_eq!(secure_boot_state(&dir).unwrap(), SecureBootState::Enabled);
        std::fs::remove_file(&file).unwrap();
        let elsewhere = dir.join("elsewhere");
        std::fs::write(&elsewhere, [6, 0, 0, 0, 1]).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        let e = secure_boot_state(&dir).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_from_efivarfs() {
        let dir = std::env::temp_dir().join(format!("liken-init-efi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!is_efi_boot(&dir));
        assert_eq!(loader_entry_selected(&dir).unwrap(), None);
        std::fs::create_dir_all(efivars_dir(&dir)).unwrap();
        assert!(is_efi_boot(&dir));
        let file = efivars_dir(&dir).join(format!("{LOADER_ENTRY_SELECTED}-{LOADER_VENDOR}"));
        let mut raw = vec![6, 0, 0, 0];
        raw.extend(utf16("liken-a+2-1.conf\0"));
        std::fs::write(&file, &raw).unwrap();
        assert_eq!(
            loader_entry_selected(&dir).unwrap().as_deref(),
            Some("liken-a+2-1.conf")
        );
        std::fs::write(&file, [6, 0]).unwrap();
        let e = loader_entry_selected(&dir).unwrap_err();
        assert!(e.to_string().contains("shorter than"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
