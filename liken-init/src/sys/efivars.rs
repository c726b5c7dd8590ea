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
//! The seam is the sysfs root, as for [`crate::sys::block`]: tests hand
//! a temporary tree. Parsing is separate and pure, and takes any bytes
//! (short, odd-length, unterminated) without panicking.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The vendor GUID of the Boot Loader Interface (systemd-boot's
/// variables).
pub const LOADER_VENDOR: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

/// The entry systemd-boot booted.
pub const LOADER_ENTRY_SELECTED: &str = "LoaderEntrySelected";

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
    let raw = match std::fs::read(&path) {
        Ok(raw) => raw,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(path, e)),
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
