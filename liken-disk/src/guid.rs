//! GUIDs as GPT stores them.
//!
//! A GUID's text form (`C12A7328-F81F-11D2-BA4B-00A0C93EC93B`) and its 16
//! bytes on disk differ: the first three groups are stored little-endian
//! (Microsoft's mixed-endian layout), the last two as written. [`Guid`]
//! holds the on-disk bytes and converts at the edges, so a table written
//! from a parsed constant is what sgdisk reads back as the same text.
//!
//! Two ways to make one: [`Guid::random`] (version 4, from
//! /dev/urandom) for a machine's disk, and [`Guid::from_name`] (version
//! 8, a SHA-256 of a seed and a name) so the same inputs give a
//! byte-identical stick image.

use std::fmt;
use std::io::Read;

use sha2::{Digest, Sha256};

/// A GUID, in its on-disk byte order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Guid(pub [u8; 16]);

/// A GUID's text is not `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuidParseError(pub String);

impl fmt::Display for GuidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a GUID; write it as 8-4-4-4-12 hex digits, like C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
            self.0
        )
    }
}

impl std::error::Error for GuidParseError {}

/// The EFI System Partition (sgdisk code EF00).
pub const ESP: Guid = Guid::from_fields(0xC12A_7328, 0xF81F, 0x11D2, 0xBA4B, 0x00A0_C93E_C93B);
/// The BIOS boot partition GRUB embeds core.img in (EF02).
pub const BIOS_BOOT: Guid =
    Guid::from_fields(0x2168_6148, 0x6449, 0x6E6F, 0x744E, 0x6565_6445_4649);
/// Linux filesystem data (8300).
pub const LINUX_DATA: Guid =
    Guid::from_fields(0x0FC6_3DAF, 0x8483, 0x4772, 0x8E79, 0x3D69_D847_7DE4);

impl Guid {
    /// The all-zero GUID, which GPT reads as "unused entry".
    pub const NIL: Guid = Guid([0; 16]);

    /// Builds a GUID from the five groups of its text form.
    pub const fn from_fields(a: u32, b: u16, c: u16, d: u16, e: u64) -> Guid {
        let a = a.to_le_bytes();
        let b = b.to_le_bytes();
        let c = c.to_le_bytes();
        let d = d.to_be_bytes();
        let e = e.to_be_bytes();
        Guid([
            a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], e[2], e[3], e[4], e[5],
            e[6], e[7],
        ])
    }

    /// Parses the text form (either case).
    pub fn parse(text: &str) -> Result<Guid, GuidParseError> {
        let bad = || GuidParseError(text.to_owned());
        let groups: Vec<&str> = text.split('-').collect();
        let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        if lens != [8, 4, 4, 4, 12] || !text.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let hex = |i: usize| -> Result<u64, GuidParseError> {
            let g = groups.get(i).ok_or_else(bad)?;
            u64::from_str_radix(g, 16).map_err(|_| bad())
        };
        let (a, b, c, d, e) = (hex(0)?, hex(1)?, hex(2)?, hex(3)?, hex(4)?);
        Ok(Guid::from_fields(
            u32::try_from(a).map_err(|_| bad())?,
            u16::try_from(b).map_err(|_| bad())?,
            u16::try_from(c).map_err(|_| bad())?,
            u16::try_from(d).map_err(|_| bad())?,
            e,
        ))
    }

    /// A random version-4 GUID from /dev/urandom.
    pub fn random() -> std::io::Result<Guid> {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Guid::with_version(bytes, 4))
    }

    /// A version-8 (RFC 9562 "custom") GUID derived from `seed` and
    /// `name`: the same pair always gives the same GUID, different names
    /// under one seed give different ones. For reproducible images (the
    /// seed names the image, the name the partition or disk).
    pub fn from_name(seed: &str, name: &str) -> Guid {
        let mut h = Sha256::new();
        h.update(b"liken-disk guid\0");
        h.update((seed.len() as u64).to_le_bytes());
        h.update(seed.as_bytes());
        h.update(name.as_bytes());
        let digest = h.finalize();
        let mut bytes = [0u8; 16];
        for (out, d) in bytes.iter_mut().zip(digest.iter()) {
            *out = *d;
        }
        Guid::with_version(bytes, 8)
    }

    /// Sets the version and the RFC 4122 variant bits. `text` here means
    /// the text-order bytes: the version nibble is the high nibble of the
    /// third group, which on disk (little-endian) is byte 7.
    fn with_version(mut bytes: [u8; 16], version: u8) -> Guid {
        if let Some(b) = bytes.get_mut(7) {
            *b = (*b & 0x0F) | (version << 4);
        }
        if let Some(b) = bytes.get_mut(8) {
            *b = (*b & 0x3F) | 0x80;
        }
        Guid(bytes)
    }

    /// Whether this is the nil GUID.
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        let [
            b0,
            b1,
            b2,
            b3,
            b4,
            b5,
            b6,
            b7,
            b8,
            b9,
            b10,
            b11,
            b12,
            b13,
            b14,
            b15,
        ] = b;
        write!(
            f,
            "{b3:02X}{b2:02X}{b1:02X}{b0:02X}-{b5:02X}{b4:02X}-{b7:02X}{b6:02X}-{b8:02X}{b9:02X}-\
             {b10:02X}{b11:02X}{b12:02X}{b13:02X}{b14:02X}{b15:02X}"
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_disk_bytes() {
        assert_eq!(ESP.to_string(), "C12A7328-F81F-11D2-BA4B-00A0C93EC93B");
        assert_eq!(
            ESP.0,
            [
                0x28, 0x73, 0x2A, 0xC1, 0x1F, 0xF8, 0xD2, 0x11, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E,
                0xC9, 0x3B
            ]
        );
        assert_eq!(
            BIOS_BOOT.to_string(),
            "21686148-6449-6E6F-744E-656564454649"
        );
        assert_eq!(
            LINUX_DATA.to_string(),
            "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
        );
        for g in [ESP, BIOS_BOOT, LINUX_DATA] {
            assert_eq!(Guid::parse(&g.to_string()).unwrap(), g);
            assert_eq!(Guid::parse(&g.to_string().to_lowercase()).unwrap(), g);
        }
        for bad in [
            "",
            "C12A7328F81F11D2BA4B00A0C93EC93B",
            "G12A7328-F81F-11D2-BA4B-00A0C93EC93B",
        ] {
            assert!(Guid::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn made_guids_carry_version_and_variant() {
        let r = Guid::random().unwrap();
        let t = r.to_string();
        assert_eq!(&t[14..15], "4", "{t}");
        assert!("89AB".contains(&t[19..20]), "{t}");
        assert_ne!(r, Guid::random().unwrap());
        let n = Guid::from_name("stick", "disk");
        assert_eq!(n, Guid::from_name("stick", "disk"));
        assert_ne!(n, Guid::from_name("stick", "esp"));
        assert_ne!(n, Guid::from_name("stic", "kdisk"));
        let t = n.to_string();
        assert_eq!(&t[14..15], "8", "{t}");
        assert!("89AB".contains(&t[19..20]), "{t}");
    }
}
