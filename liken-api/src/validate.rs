//! Semantic checks on decoded documents.
//!
//! Decoding proves a document has the right shape; these checks prove it
//! makes sense (an address is an address, a leader names a machine). Each
//! check reports every problem it finds with the field's path, so a person
//! fixing a manifest sees the whole list at once rather than one error per
//! attempt.

use std::fmt;
use std::net::IpAddr;

/// One thing wrong with a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field's path, as `spec.network.interfaces[0].addresses[1]`.
    pub field: String,
    /// What is wrong and what would be right.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A document that can check itself.
pub trait Validate {
    /// Every problem found; empty when the document is sound.
    fn validate(&self) -> Vec<Problem>;
}

/// Collects problems under a field path.
#[derive(Default)]
pub(crate) struct Problems(pub(crate) Vec<Problem>);

impl Problems {
    pub(crate) fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            field: field.into(),
            message: message.into(),
        });
    }
}

/// Parses `addr/len` with a prefix length that fits the address family.
pub fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = text.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((addr, len))
}

/// Parses a MAC address written as six colon-separated hex pairs.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        assert!(parse_cidr("192.168.1.10/24").is_some());
        assert!(parse_cidr("fd00::1/64").is_some());
        assert!(parse_cidr("0.0.0.0/0").is_some());
        for bad in [
            "192.168.1.10",
            "192.168.1.10/33",
            "fd00::1/129",
            "x/24",
            "1.2.3.4/",
            "1.2.3.4/+1",
        ] {
            assert!(parse_cidr(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("52:54:00:12:34:AB"),
            Some([0x52, 0x54, 0, 0x12, 0x34, 0xab])
        );
        for bad in [
            "52:54:00:12:34",
            "52:54:00:12:34:ab:cd",
            "52-54-00-12-34-ab",
            "5:54:00:12:34:ab",
        ] {
            assert!(parse_mac(bad).is_none(), "{bad}");
        }
    }
}
