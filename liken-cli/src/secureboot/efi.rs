//! The UEFI structures Secure Boot's key variables travel in, written
//! and read in Rust (pure: bytes in, bytes out).
//!
//! - An EFI signature list (`.esl`, UEFI 2.10 §32.4.1): one
//!   `EFI_SIGNATURE_LIST` of type `EFI_CERT_X509_GUID` holding one
//!   `EFI_SIGNATURE_DATA`, the owner GUID and the certificate's DER,
//!   byte for byte what efitools' `cert-to-efi-sig-list -g <owner>` writes.
//! - A time-based authenticated variable (`.auth`, §8.2.2): an
//!   `EFI_VARIABLE_AUTHENTICATION_2` (an `EFI_TIME` and a
//!   `WIN_CERTIFICATE_UEFI_GUID` whose data is a PKCS#7 SignedData) and
//!   the signature list after it. The signature is made by openssl over
//!   [`to_be_signed`]'s bytes; only its SignedData is kept
//!   ([`signed_data`]): the UEFI spec asks for SignedData, efitools'
//!   `sign-efi-sig-list` writes it so, and some firmware (HP's) refuses
//!   the full ContentInfo that `openssl smime` wraps it in.
//!
//! [`parse_auth`] reads one back, for `liken stick -secureboot`, which
//! checks what it puts on a stick; [`signed_with`] tells whether a PE
//! image (systemd-boot, a kernel) carries an Authenticode signature
//! holding a given certificate. Neither verifies a signature: the
//! firmware does that.

use std::fmt;

use liken_disk::guid::Guid;

/// `EFI_GLOBAL_VARIABLE`: the vendor of PK and KEK (and SecureBoot).
pub const GLOBAL_VARIABLE: Guid =
    Guid::from_fields(0x8BE4_DF61, 0x93CA, 0x11D2, 0xAA0D, 0x00E0_9803_2B8C);
/// `EFI_IMAGE_SECURITY_DATABASE_GUID`: the vendor of db.
pub const IMAGE_SECURITY_DATABASE: Guid =
    Guid::from_fields(0xD719_B2CB, 0x3D3A, 0x4596, 0xA3BC, 0xDAD0_0E67_656F);
/// `EFI_CERT_X509_GUID`: a signature list of DER certificates.
pub const CERT_X509: Guid =
    Guid::from_fields(0xA5C0_59A1, 0x94E4, 0x4AA7, 0x87B5, 0xAB15_5C2B_F072);
/// `EFI_CERT_TYPE_PKCS7_GUID`: a `WIN_CERTIFICATE_UEFI_GUID` holding
/// PKCS#7 SignedData.
pub const CERT_TYPE_PKCS7: Guid =
    Guid::from_fields(0x4AAF_D29D, 0x68DF, 0x49EE, 0x8AA9, 0x347D_3756_65A7);

/// NON_VOLATILE | BOOTSERVICE_ACCESS | RUNTIME_ACCESS |
/// TIME_BASED_AUTHENTICATED_WRITE_ACCESS: the attributes PK, KEK and db
/// are written with (systemd-boot's `sb_vars_opts`).
pub const ATTRIBUTES: u32 = 0x01 | 0x02 | 0x04 | 0x20;
/// `WIN_CERTIFICATE.wRevision`.
const WIN_CERT_REVISION: u16 = 0x0200;
/// `WIN_CERT_TYPE_EFI_GUID`.
const WIN_CERT_TYPE_EFI_GUID: u16 = 0x0EF1;
/// Bytes of an `EFI_TIME`.
pub const TIME_LEN: usize = 16;
/// Bytes of a `WIN_CERTIFICATE_UEFI_GUID` before its data.
const WIN_CERT_HEADER: usize = 4 + 2 + 2 + 16;
/// Bytes of an `EFI_SIGNATURE_LIST` header (type, list size, header
/// size, signature size).
const ESL_HEADER: usize = 16 + 4 + 4 + 4;

/// One of the three variables that hold Secure Boot's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// The platform key: its owner may change KEK (and PK).
    Pk,
    /// The key exchange key: its owner may change db.
    Kek,
    /// The signature database: what it holds may boot.
    Db,
}

impl Var {
    /// All three, in the order keygen makes them.
    pub const ALL: [Var; 3] = [Var::Pk, Var::Kek, Var::Db];

    /// The variable's name, which is also its files' stem (`PK.auth`).
    pub fn name(self) -> &'static str {
        match self {
            Var::Pk => "PK",
            Var::Kek => "KEK",
            Var::Db => "db",
        }
    }

    /// The variable's vendor GUID.
    pub fn vendor(self) -> Guid {
        match self {
            Var::Pk | Var::Kek => GLOBAL_VARIABLE,
            Var::Db => IMAGE_SECURITY_DATABASE,
        }
    }

    /// The key whose signature the firmware checks on an update: PK
    /// signs itself and KEK, KEK signs db.
    pub fn signer(self) -> Var {
        match self {
            Var::Pk | Var::Kek => Var::Pk,
            Var::Db => Var::Kek,
        }
    }
}

/// An `EFI_TIME` in UTC with whole seconds; the other fields (nanosecond,
/// time zone, daylight, padding) are zero, as the spec requires of an
/// authenticated variable's timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfiTime {
    /// 1900-9999.
    pub year: u16,
    /// 1-12.
    pub month: u8,
    /// 1-31.
    pub day: u8,
    /// 0-23.
    pub hour: u8,
    /// 0-59.
    pub minute: u8,
    /// 0-59.
    pub second: u8,
}

impl EfiTime {
    /// The time from an RFC 3339 UTC text with whole seconds
    /// (`2026-12-02T11:18:43Z`, liken_api::Time's Display).
    pub fn from_rfc3339(text: &str) -> Option<EfiTime> {
        let b = text.as_bytes();
        if b.len() != 20 || b.get(19) != Some(&b'Z') {
            return None;
        }
        let num = |from: usize, to: usize| -> Option<u16> { text.get(from..to)?.parse().ok() };
        let small = |from: usize, to: usize| -> Option<u8> { u8::try_from(num(from, to)?).ok() };
        Some(EfiTime {
            year: num(0, 4)?,
            month: small(5, 7)?,
            day: small(8, 10)?,
            hour: small(11, 13)?,
            minute: small(14, 16)?,
            second: small(17, 19)?,
        })
    }

    /// The 16 bytes.
    pub fn bytes(self) -> [u8; TIME_LEN] {
        let [y0, y1] = self.year.to_le_bytes();
        [
            y0,
            y1,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]
    }

    fn read(b: &[u8; TIME_LEN]) -> EfiTime {
        let [y0, y1, month, day, hour, minute, second, ..] = *b;
        EfiTime {
            year: u16::from_le_bytes([y0, y1]),
            month,
            day,
            hour,
            minute,
            second,
        }
    }
}

impl fmt::Display for EfiTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

fn u32_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An `EFI_SIGNATURE_LIST` holding one X.509 certificate (DER) owned by
/// `owner`.
pub fn signature_list(owner: Guid, cert_der: &[u8]) -> Vec<u8> {
    let signature_size = 16usize.saturating_add(cert_der.len());
    let list_size = ESL_HEADER.saturating_add(signature_size);
    let mut out = Vec::with_capacity(list_size);
    out.extend_from_slice(&CERT_X509.0);
    out.extend_from_slice(&u32_len(list_size).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&u32_len(signature_size).to_le_bytes());
    out.extend_from_slice(&owner.0);
    out.extend_from_slice(cert_der);
    out
}

/// The bytes the signer of an update to `var` signs (UEFI 2.10 §8.2.2,
/// SetVariable step 2): the name in UTF-16LE without its NUL, the vendor
/// GUID, the attributes, the timestamp, then the new value.
pub fn to_be_signed(var: Var, time: EfiTime, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for unit in var.name().encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
    }
    out.extend_from_slice(&var.vendor().0);
    out.extend_from_slice(&ATTRIBUTES.to_le_bytes());
    out.extend_from_slice(&time.bytes());
    out.extend_from_slice(value);
    out
}

/// A time-based authenticated variable: the `EFI_VARIABLE_AUTHENTICATION_2`
/// header with `signed_data` (PKCS#7 SignedData, DER), then `value`.
pub fn authenticated(time: EfiTime, signed_data: &[u8], value: &[u8]) -> Vec<u8> {
    let cert_len = WIN_CERT_HEADER.saturating_add(signed_data.len());
    let mut out = Vec::with_capacity(TIME_LEN + cert_len + value.len());
    out.extend_from_slice(&time.bytes());
    out.extend_from_slice(&u32_len(cert_len).to_le_bytes());
    out.extend_from_slice(&WIN_CERT_REVISION.to_le_bytes());
    out.extend_from_slice(&WIN_CERT_TYPE_EFI_GUID.to_le_bytes());
    out.extend_from_slice(&CERT_TYPE_PKCS7.0);
    out.extend_from_slice(signed_data);
    out.extend_from_slice(value);
    out
}

/// What is wrong with bytes read as one of these structures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

fn bad(why: impl Into<String>) -> FormatError {
    FormatError(why.into())
}

/// One DER element at the start of `b`: its tag, its contents and what
/// follows it.
fn der_element(b: &[u8]) -> Result<(u8, &[u8], &[u8]), FormatError> {
    let (&tag, rest) = b.split_first().ok_or_else(|| bad("DER ends early"))?;
    let (&first, rest) = rest.split_first().ok_or_else(|| bad("DER ends early"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(bad("a DER length this code does not read"));
        }
        let (digits, rest) = rest
            .split_at_checked(n)
            .ok_or_else(|| bad("DER ends early"))?;
        let len = digits
            .iter()
            .fold(0usize, |acc, d| (acc << 8) | usize::from(*d));
        (len, rest)
    };
    let (contents, after) = rest
        .split_at_checked(len)
        .ok_or_else(|| bad("a DER element is longer than its input"))?;
    Ok((tag, contents, after))
}

/// `pkcs7-signedData`, 1.2.840.113549.1.7.2, as DER contents.
const OID_SIGNED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02];

/// The SignedData inside a PKCS#7 ContentInfo (what `openssl smime
/// -sign -outform DER` writes): the DER of its `[0] EXPLICIT` content.
pub fn signed_data(content_info: &[u8]) -> Result<&[u8], FormatError> {
    let (tag, body, after) = der_element(content_info)?;
    if tag != 0x30 || !after.is_empty() {
        return Err(bad("the signature is not one DER SEQUENCE"));
    }
    let (tag, oid, rest) = der_element(body)?;
    if tag != 0x06 || oid != OID_SIGNED_DATA {
        return Err(bad("the signature is not PKCS#7 signedData"));
    }
    let (tag, content, after) = der_element(rest)?;
    if tag != 0xa0 || !after.is_empty() {
        return Err(bad("the signature's ContentInfo has no [0] content"));
    }
    let (tag, _, after) = der_element(content)?;
    if tag != 0x30 || !after.is_empty() {
        return Err(bad("the signature's SignedData is not one DER SEQUENCE"));
    }
    Ok(content)
}

/// A `.auth` file read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auth<'a> {
    /// Its timestamp.
    pub time: EfiTime,
    /// The PKCS#7 SignedData.
    pub signed_data: &'a [u8],
    /// The owner of the one certificate in its list.
    pub owner: Guid,
    /// The certificate (DER).
    pub cert: &'a [u8],
    /// The signature list (what the variable will hold).
    pub list: &'a [u8],
}

fn le_u32(b: &[u8], at: usize) -> Result<usize, FormatError> {
    let four: [u8; 4] = b
        .get(at..at.saturating_add(4))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("ends early"))?;
    usize::try_from(u32::from_le_bytes(four)).map_err(|_| bad("a size too large"))
}

fn guid_at(b: &[u8], at: usize) -> Result<Guid, FormatError> {
    b.get(at..at.saturating_add(16))
        .and_then(|s| s.try_into().ok())
        .map(Guid)
        .ok_or_else(|| bad("ends early"))
}

/// Reads a `.auth` file holding one signature list with one X.509
/// certificate, as `liken keygen -secureboot` writes them.
pub fn parse_auth(b: &[u8]) -> Result<Auth<'_>, FormatError> {
    let time: &[u8; TIME_LEN] = b
        .first_chunk()
        .ok_or_else(|| bad("shorter than an EFI_TIME"))?;
    let cert_len = le_u32(b, TIME_LEN)?;
    let revision = b.get(TIME_LEN + 4..TIME_LEN + 6);
    let kind = b.get(TIME_LEN + 6..TIME_LEN + 8);
    if revision != Some(&WIN_CERT_REVISION.to_le_bytes()[..])
        || kind != Some(&WIN_CERT_TYPE_EFI_GUID.to_le_bytes()[..])
        || guid_at(b, TIME_LEN + 8)? != CERT_TYPE_PKCS7
    {
        return Err(bad(
            "no WIN_CERTIFICATE_UEFI_GUID with a PKCS#7 signature after the timestamp",
        ));
    }
    if cert_len < WIN_CERT_HEADER {
        return Err(bad("its WIN_CERTIFICATE is shorter than its header"));
    }
    let list_at = TIME_LEN.saturating_add(cert_len);
    let signed_data = b
        .get(TIME_LEN + WIN_CERT_HEADER..list_at)
        .ok_or_else(|| bad("its signature runs past the end"))?;
    let list = b
        .get(list_at..)
        .ok_or_else(|| bad("its signature runs past the end"))?;
    if guid_at(list, 0)? != CERT_X509 {
        return Err(bad("its signature list is not of X.509 certificates"));
    }
    let list_size = le_u32(list, 16)?;
    let header_size = le_u32(list, 20)?;
    let signature_size = le_u32(list, 24)?;
    if list_size != list.len()
        || header_size != 0
        || signature_size < 16
        || ESL_HEADER.checked_add(signature_size) != Some(list_size)
    {
        return Err(bad(
            "its signature list does not hold exactly one certificate",
        ));
    }
    let owner = guid_at(list, ESL_HEADER)?;
    let cert = list
        .get(ESL_HEADER + 16..)
        .ok_or_else(|| bad("ends early"))?;
    Ok(Auth {
        time: EfiTime::read(time),
        signed_data,
        owner,
        cert,
        list,
    })
}

/// The Authenticode certificate table of a PE32+ image (the data
/// directory entry IMAGE_DIRECTORY_ENTRY_SECURITY, a file range), or
/// `None` for an unsigned image or bytes that are not PE32+.
pub fn certificate_table(pe: &[u8]) -> Option<&[u8]> {
    let word = |at: usize| -> Option<usize> {
        let b: [u8; 4] = pe.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    if pe.get(..2) != Some(b"MZ") {
        return None;
    }
    let header = word(0x3c)?;
    if pe.get(header..header.checked_add(4)?) != Some(b"PE\0\0") {
        return None;
    }
    let optional = header.checked_add(24)?;
    // PE32+ (0x20b): the data directories start 112 bytes in; the
    // security entry is the fifth (index 4), 8 bytes each.
    if pe.get(optional..optional.checked_add(2)?) != Some(&[0x0b, 0x02]) {
        return None;
    }
    let entry = optional.checked_add(112 + 4 * 8)?;
    let (at, len) = (word(entry)?, word(entry.checked_add(4)?)?);
    if at == 0 || len == 0 {
        return None;
    }
    pe.get(at..at.checked_add(len)?)
}

/// Whether `pe` carries an Authenticode signature whose PKCS#7 holds
/// `cert` (DER), as `sbsign --cert` leaves one. Not a verification: it
/// tells a person their release was not signed for this fleet before the
/// firmware refuses it.
pub fn signed_with(pe: &[u8], cert: &[u8]) -> bool {
    !cert.is_empty()
        && certificate_table(pe).is_some_and(|table| table.windows(cert.len()).any(|w| w == cert))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Guid {
        Guid::parse("11111111-2222-3333-4444-555555555555").unwrap()
    }

    #[test]
    fn a_signature_list_is_header_owner_certificate() {
        let esl = signature_list(owner(), &[0xAB; 10]);
        assert_eq!(esl.len(), 28 + 16 + 10);
        assert_eq!(&esl[..16], &CERT_X509.0);
        assert_eq!(esl[16..20], 54u32.to_le_bytes());
        assert_eq!(esl[20..24], 0u32.to_le_bytes());
        assert_eq!(esl[24..28], 26u32.to_le_bytes());
        // The owner GUID's text form, mixed-endian as EFI stores it.
        assert_eq!(
            &esl[28..44],
            &[
                0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55,
                0x55, 0x55
            ]
        );
        assert_eq!(&esl[44..], &[0xAB; 10]);
    }

    #[test]
    fn the_signed_bytes_name_the_variable_vendor_attributes_and_time() {
        let t = EfiTime::from_rfc3339("2026-12-01T10:00:00Z").unwrap();
        assert_eq!(
            t.bytes(),
            [0xea, 0x07, 12, 1, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(t.to_string(), "2026-12-01T10:00:00Z");
        let tbs = to_be_signed(Var::Db, t, b"list");
        assert_eq!(&tbs[..4], &[b'd', 0, b'b', 0]);
        assert_eq!(&tbs[4..20], &IMAGE_SECURITY_DATABASE.0);
        assert_eq!(tbs[20..24], 0x27u32.to_le_bytes());
        assert_eq!(&tbs[24..40], &t.bytes());
        assert_eq!(&tbs[40..], b"list");
        assert_eq!(
            &to_be_signed(Var::Kek, t, b"")[..6],
            &[b'K', 0, b'E', 0, b'K', 0]
        );
        assert_eq!(Var::Kek.vendor(), GLOBAL_VARIABLE);
        assert_eq!(Var::Db.signer(), Var::Kek);
        assert_eq!(Var::Pk.signer(), Var::Pk);
        for bad in ["2026-12-01 10:00:00", "2026-12-01T10:00:00.5Z", ""] {
            assert_eq!(EfiTime::from_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_auth_file_reads_back() {
        let t = EfiTime::from_rfc3339("2026-12-01T10:00:00Z").unwrap();
        let esl = signature_list(owner(), b"certificate");
        let signed = [0x30, 0x03, 0x02, 0x01, 0x01];
        let auth = authenticated(t, &signed, &esl);
        let back = parse_auth(&auth).unwrap();
        assert_eq!(back.time, t);
        assert_eq!(back.signed_data, &signed);
        assert_eq!(back.owner, owner());
        assert_eq!(back.cert, b"certificate");
        assert_eq!(back.list, &esl[..]);
        // Cut anywhere, or with a list that holds more than it says: an
        // error, never a panic.
        for n in 0..auth.len() {
            assert!(parse_auth(&auth[..n]).is_err(), "{n}");
        }
        let mut longer = auth.clone();
        longer.push(0);
        assert!(parse_auth(&longer).is_err());
        assert!(parse_auth(b"-----BEGIN PRIVATE KEY-----\nMIIE\n").is_err());
    }

    #[test]
    fn signed_data_is_the_content_of_content_info() {
        // SEQUENCE { OID signedData, [0] { SEQUENCE { INTEGER 1 } } }
        let inner = [0x30, 0x03, 0x02, 0x01, 0x01];
        let mut ci = vec![0x30, 0x12, 0x06, 0x09];
        ci.extend_from_slice(OID_SIGNED_DATA);
        ci.extend_from_slice(&[0xa0, 0x05]);
        ci.extend_from_slice(&inner);
        assert_eq!(signed_data(&ci).unwrap(), &inner);
        // Cut short, with bytes after it, or pkcs7-data: refused.
        for n in 0..ci.len() {
            assert!(signed_data(&ci[..n]).is_err(), "{n}");
        }
        let mut longer = ci.clone();
        longer.push(0);
        assert!(signed_data(&longer).is_err());
        let mut data = ci.clone();
        data[12] = 0x01;
        assert!(signed_data(&data).is_err());
    }

    #[test]
    fn a_pe_certificate_table_is_found_and_searched() {
        let mut pe = vec![0u8; 0x400];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        pe[0x80..0x84].copy_from_slice(b"PE\0\0");
        let optional = 0x80 + 24;
        pe[optional..optional + 2].copy_from_slice(&[0x0b, 0x02]);
        assert_eq!(certificate_table(&pe), None);
        assert!(!signed_with(&pe, b"cert"));
        let entry = optional + 112 + 32;
        pe[entry..entry + 4].copy_from_slice(&0x300u32.to_le_bytes());
        pe[entry + 4..entry + 8].copy_from_slice(&0x100u32.to_le_bytes());
        pe[0x350..0x354].copy_from_slice(b"cert");
        assert_eq!(certificate_table(&pe).map(<[u8]>::len), Some(0x100));
        assert!(signed_with(&pe, b"cert"));
        assert!(!signed_with(&pe, b"other"));
        assert!(!signed_with(&pe, b""));
        // Past the end, or not PE32+: none.
        pe[entry + 4..entry + 8].copy_from_slice(&0x101u32.to_le_bytes());
        assert_eq!(certificate_table(&pe), None);
        assert_eq!(certificate_table(b"MZ"), None);
        assert_eq!(certificate_table(b"#!/bin/sh\n"), None);
    }
}
