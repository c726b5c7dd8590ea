//! The clock against the cluster's CA certificates: k3s is not started
//! while the clock reads earlier than a CA's notBefore, and the NTP step
//! does not move the clock past the last of their notAfter
//! ([`crate::ntp::decide_ceiling`]).
//!
//! Every TLS peer of k3s (its own apiserver, etcd, the kubelet, the
//! agent's tunnel) checks certificates against the clock, and a CA that
//! is "not yet valid" fails every handshake with messages about the
//! certificate rather than the clock. A machine whose clock runs behind
//! (no RTC battery, no NTP server answering) would start k3s into that.
//! So init reads the notBefore of each CA certificate this machine has,
//! and holds k3s, saying why on the console, until the clock has passed
//! the latest of them.
//!
//! init has no X.509 parser, and needs none for this: notBefore sits at
//! a fixed place in the DER (RFC 5280 section 4.1: Certificate ->
//! tbsCertificate -> [0] version, serialNumber, signature, issuer,
//! validity -> notBefore, notAfter), so [`validity`] walks the few TLV
//! headers in front of it and reads two UTCTime or GeneralizedTime. That reads
//! the certificate k3s will use, whoever minted it (`liken mint`,
//! `adopt` of an existing k3s, a CA k3s rotated), where having the CLI
//! write the date into the layer would trust the layer's packer and
//! miss the adopted and rotated ones. Signatures, extensions and the
//! rest are not looked at: this is a clock check, not validation.

use std::path::Path;

use liken_api::Time;

/// The largest certificate file read.
const MAX_PEM: u64 = 64 * 1024;

/// Decodes standard base64 (with padding, whitespace skipped).
fn base64(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len());
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for c in text.bytes() {
        if c == b'=' {
            break;
        }
        if c.is_ascii_whitespace() {
            continue;
        }
        let v = ALPHABET.iter().position(|a| *a == c)?;
        acc = (acc << 6) | u32::try_from(v).ok()?;
        bits = bits.checked_add(6)?;
        if bits >= 8 {
            bits = bits.checked_sub(8)?;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
pub fn pem_certificate(pem: &str) -> Option<Vec<u8>> {
    let begin = "-----BEGIN CERTIFICATE-----";
    let start = pem.find(begin)?.checked_add(begin.len())?;
    let rest = pem.get(start..)?;
    let end = rest.find("-----END CERTIFICATE-----")?;
    base64(rest.get(..end)?)
}

/// One DER header at the start of `der`: the tag, and the content and
/// what follows it.
fn tlv(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, rest) = rest.split_at_checked(n)?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    let (content, after) = rest.split_at_checked(len)?;
    Some((tag, content, after))
}

/// A certificate's validity, notBefore and notAfter, from its DER.
pub fn validity(der: &[u8]) -> Option<(Time, Time)> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut rest = tbs;
    // [0] EXPLICIT version, absent in v1 certificates.
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    // serialNumber, signature, issuer.
    for want in [0x02, SEQUENCE, SEQUENCE] {
        let (tag, _, after) = tlv(rest)?;
        if tag != want {
            return None;
        }
        rest = after;
    }
    let (SEQUENCE, validity, _) = tlv(rest)? else {
        return None;
    };
    let (tag, time, after) = tlv(validity)?;
    let not_before = der_time(tag, time)?;
    let (tag, time, _) = tlv(after)?;
    Some((not_before, der_time(tag, time)?))
}

/// A certificate's notBefore, from its DER.
pub fn not_before(der: &[u8]) -> Option<Time> {
    validity(der).map(|(from, _)| from)
}

/// A certificate's notAfter, from its DER.
pub fn not_after(der: &[u8]) -> Option<Time> {
    validity(der).map(|(_, until)| until)
}

/// A UTCTime (tag 0x17) or GeneralizedTime (0x18) content.
fn der_time(tag: u8, time: &[u8]) -> Option<Time> {
    let text = std::str::from_utf8(time).ok()?;
    // UTCTime YYMMDDHHMMSSZ (years 1950-2049, RFC 5280 4.1.2.5.1) or
    // GeneralizedTime YYYYMMDDHHMMSSZ.
    let full = match (tag, text.len()) {
        (0x17, 13) => {
            let yy: u32 = text.get(..2)?.parse().ok()?;
            format!("{}{text}", if yy < 50 { "20" } else { "19" })
        }
        (0x18, 15) => text.to_owned(),
        _ => return None,
    };
    let d = |r: std::ops::Range<usize>| full.get(r);
    if d(14..15)? != "Z" {
        return None;
    }
    format!(
        "{}-{}-{}T{}:{}:{}Z",
        d(0..4)?,
        d(4..6)?,
        d(6..8)?,
        d(8..10)?,
        d(10..12)?,
        d(12..14)?
    )
    .parse()
    .ok()
}

/// The latest notBefore among the certificates at `paths` that exist,
/// with the file it came from. A file that is there but cannot be read
/// as a certificate is an error: k3s would fail on it too.
pub fn latest_not_before(paths: &[&Path]) -> Result<Option<(Time, String)>, String> {
    latest(paths, not_before)
}

/// The latest notAfter among the certificates at `paths` that exist,
/// with the file it came from: when the last of them expires. Errors as
/// [`latest_not_before`].
pub fn latest_not_after(paths: &[&Path]) -> Result<Option<(Time, String)>, String> {
    latest(paths, not_after)
}

fn latest(
    paths: &[&Path],
    date: fn(&[u8]) -> Option<Time>,
) -> Result<Option<(Time, String)>, String> {
    let mut latest: Option<(Time, String)> = None;
    for p in paths {
        let bytes = match crate::fsutil::read_capped(p, MAX_PEM) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", p.display())),
        };
        let t = pem_certificate(&String::from_utf8_lossy(&bytes))
            .as_deref()
            .and_then(date)
            .ok_or_else(|| format!("{} holds no certificate init can date", p.display()))?;
        if latest.as_ref().is_none_or(|(l, _)| t > *l) {
            latest = Some((t, p.display().to_string()));
        }
    }
    Ok(latest)
}

/// Whether k3s may start now: `Err` with how long to hold it and why
/// when the clock reads earlier than `not_before`.
pub fn decide_clock(now: Time, not_before: Time, from: &str) -> Result<(), (u64, String)> {
    let ahead = not_before.seconds_since(now);
    if ahead <= 0 {
        return Ok(());
    }
    Err((
        ahead.unsigned_abs(),
        format!(
            "the clock reads {now}, earlier than {from}'s notBefore {not_before}: every TLS \
             handshake k3s makes would fail, so k3s waits {ahead} s until the clock passes it; \
             set the clock (an NTP server in the Machine's spec.network.ntp, or the RTC in the \
             firmware)"
        ),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Made once with `openssl req -x509 -newkey ec -pkeyopt
    /// ec_paramgen_curve:P-256 -days 3650 -nodes -subj
    /// /CN=k3s-server-ca@1733220000` (OpenSSL 3.0, Debian 12); `openssl
    /// x509 -noout -startdate` reads notBefore=Dec  3 08:44:33 2026 GMT.
    pub(crate) const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUOZ6lbPY+j3h+vZR004haAuDJCdkwCgYIKoZIzj0EAwIw
IzEhMB8GA1UEAwwYazNzLXNlcnZlci1jYUAxNzMzMjIwMDAwMB4XDTI2MTIwMzA4
NDQzM1oXDTM2MTEzMDA4NDQzM1owIzEhMB8GA1UEAwwYazNzLXNlcnZlci1jYUAx
NzMzMjIwMDAwMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExPWw1CQ8WtbQLQ5o
81FNItdmxANkhpFfjqX0QFlLVBVWz+8A6SeeL6mXzc1BZFCN6I8LgpbvHTpbKOnQ
WAkzLKNTMFEwHQYDVR0OBBYEFMEMU0DtZXFd33g2X7GTlW9D61EsMB8GA1UdIwQY
MBaAFMEMU0DtZXFd33g2X7GTlW9D61EsMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDSAAwRQIgPuYYyxVOr5wK3U9pS8JNyP6rnMdGBZQIre5X2KL/lNACIQDm
QdZgTpNq2fCGH1mH9uOCYdqWIlXI5KLmZNanconzCw==
-----END CERTIFICATE-----
";

    /// A DER header with a short length.
    fn h(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag, u8::try_from(content.len()).unwrap()];
        v.extend_from_slice(content);
        v
    }

    #[test]
    fn reads_the_not_before_of_a_certificate() {
        let der = pem_certificate(CA).unwrap();
        assert_eq!(
            not_before(&der),
            Some("2026-12-03T08:44:33Z".parse().unwrap())
        );
        // `openssl x509 -noout -enddate`: notAfter=Nov 30 08:44:33 2036 GMT.
        assert_eq!(
            not_after(&der),
            Some("2036-11-30T08:44:33Z".parse().unwrap())
        );
        // A v1 certificate (no version) dated in GeneralizedTime, as
        // RFC 5280 asks for years from 2050.
        let dates = [h(0x18, b"20510102030405Z"), h(0x18, b"20610102030405Z")].concat();
        let tbs = [h(0x02, &[1]), h(0x30, &[]), h(0x30, &[]), h(0x30, &dates)].concat();
        let v1 = h(0x30, &h(0x30, &tbs));
        assert_eq!(
            validity(&v1),
            Some((
                "2051-01-02T03:04:05Z".parse().unwrap(),
                "2061-01-02T03:04:05Z".parse().unwrap()
            ))
        );
        // A validity with notBefore alone dates nothing.
        let half = h(
            0x30,
            &h(
                0x30,
                &[
                    h(0x02, &[1]),
                    h(0x30, &[]),
                    h(0x30, &[]),
                    h(0x30, &h(0x18, b"20510102030405Z")),
                ]
                .concat(),
            ),
        );
        assert_eq!(not_before(&half), None);
        assert!(pem_certificate("no pem here").is_none());
        assert!(not_before(&der[..40]).is_none());
        assert!(not_before(&[]).is_none());
        assert!(not_before(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
    }

    #[test]
    fn k3s_waits_for_the_clock() {
        let nb: Time = "2026-12-03T10:01:48Z".parse().unwrap();
        assert!(decide_clock(nb, nb, "server-ca.crt").is_ok());
        assert!(decide_clock(nb.plus_seconds(5), nb, "server-ca.crt").is_ok());
        let (wait, why) = decide_clock(nb.plus_seconds(-90), nb, "server-ca.crt").unwrap_err();
        assert_eq!(wait, 90);
        assert!(
            why.starts_with(
                "the clock reads 2026-12-03T10:00:18Z, earlier than server-ca.crt's notBefore \
                 2026-12-03T10:01:48Z"
            ),
            "{why}"
        );
    }
}
