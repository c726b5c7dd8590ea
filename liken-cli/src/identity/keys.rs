//! Reading and writing the PEM files an identity is made of, whoever
//! wrote them.
//!
//! k3s writes EC keys as SEC1 (`EC PRIVATE KEY`, Go's
//! x509.MarshalECPrivateKey), and `mint` writes the same ([`sec1_pem`]):
//! kube-apiserver reads `--service-account-key-file` with client-go's
//! keyutil.ParsePublicKeysPEM, which takes an EC private key only as SEC1
//! (PKCS#8 is tried for RSA keys alone). A harvest may also hold PKCS#8
//! keys or PKCS#1 RSA keys from a hand-made CA. rcgen on ring signs only
//! with PKCS#8 keys, so [`signing_key`] rewraps the other two forms in a
//! PKCS#8 envelope in memory: the inner structure is unchanged, only the
//! algorithm identifier around it is added. Harvested files are never
//! rewritten; `adopt` copies them byte for byte.

use rcgen::{KeyPair, PublicKeyData};

/// A PEM file's blocks did not hold what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemProblem(pub String);

/// The first certificate in a PEM file, as DER.
pub fn first_certificate(text: &[u8]) -> Result<Vec<u8>, PemProblem> {
    let blocks = pem::parse_many(text).map_err(|e| PemProblem(format!("not PEM: {e}")))?;
    blocks
        .into_iter()
        .find(|b| b.tag() == "CERTIFICATE")
        .map(|b| b.contents().to_vec())
        .ok_or_else(|| PemProblem("holds no CERTIFICATE block".into()))
}

/// The private key in a PEM file, ready to sign.
pub fn signing_key(text: &[u8]) -> Result<KeyPair, PemProblem> {
    let blocks = pem::parse_many(text).map_err(|e| PemProblem(format!("not PEM: {e}")))?;
    let pkcs8 = blocks
        .iter()
        .find_map(|b| match b.tag() {
            "PRIVATE KEY" => Some(Ok(b.contents().to_vec())),
            "EC PRIVATE KEY" => Some(sec1_to_pkcs8(b.contents())),
            "RSA PRIVATE KEY" => Some(Ok(pkcs1_to_pkcs8(b.contents()))),
            _ => None,
        })
        .ok_or_else(|| {
            PemProblem("holds no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block".into())
        })??;
    KeyPair::try_from(pkcs8.as_slice())
        .map_err(|e| PemProblem(format!("the private key cannot be used to sign: {e}")))
}

/// An ECDSA key as a SEC1 PEM block (`EC PRIVATE KEY`) with its curve
/// named in the `[0] parameters` field, as Go's x509.MarshalECPrivateKey
/// writes it: Go's ParseECPrivateKey (and so kube-apiserver) refuses a
/// SEC1 key that does not name its curve, and ring's PKCS#8 leaves the
/// curve to the outer algorithm identifier, so it is moved inside.
pub fn sec1_pem(key: &KeyPair) -> Result<String, PemProblem> {
    let bad = || PemProblem("the key is not an ECDSA PKCS#8 key".into());
    // PrivateKeyInfo: version, AlgorithmIdentifier, OCTET STRING (SEC1).
    let (tag, info, _) = read_tlv(key.serialized_der()).ok_or_else(bad)?;
    let (_, _version, rest) = read_tlv(info)
        .filter(|t| tag == 0x30 && t.0 == 0x02)
        .ok_or_else(bad)?;
    let (tag, alg, rest) = read_tlv(rest).ok_or_else(bad)?;
    let (oid_tag, alg_oid, curve) = read_tlv(alg).filter(|_| tag == 0x30).ok_or_else(bad)?;
    if oid_tag != 0x06 || der(0x06, alg_oid) != OID_EC_PUBLIC_KEY {
        return Err(bad());
    }
    let (tag, inner, _) = read_tlv(rest).ok_or_else(bad)?;
    // ECPrivateKey: version, privateKey, [0] parameters?, [1] publicKey?
    let (seq, body, _) = read_tlv(inner).filter(|_| tag == 0x04).ok_or_else(bad)?;
    let (t1, version, rest) = read_tlv(body).filter(|_| seq == 0x30).ok_or_else(bad)?;
    let (t2, private, mut rest) = read_tlv(rest).ok_or_else(bad)?;
    if t1 != 0x02 || t2 != 0x04 {
        return Err(bad());
    }
    let mut fields = vec![der(0x02, version), der(0x04, private)];
    let mut have_parameters = false;
    while !rest.is_empty() {
        let (t, value, after) = read_tlv(rest).ok_or_else(bad)?;
        if t == 0xa0 {
            have_parameters = true;
        } else if t == 0xa1 && !have_parameters {
            fields.push(der(0xa0, curve));
            have_parameters = true;
        }
        fields.push(der(t, value));
        rest = after;
    }
    if !have_parameters {
        fields.push(der(0xa0, curve));
    }
    let sec1 = der(0x30, &fields.concat());
    // Go's pem.Encode: LF line endings, 64 columns.
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    Ok(pem::encode_config(
        &pem::Pem::new("EC PRIVATE KEY", sec1),
        config,
    ))
}

/// Whether `key` is the private half of the certificate `cert_der`.
pub fn key_matches_certificate(key: &KeyPair, cert_der: &[u8]) -> Result<bool, PemProblem> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| PemProblem(format!("not an X.509 certificate: {e}")))?;
    Ok(cert.tbs_certificate.subject_pki.raw == key.subject_public_key_info().as_slice())
}

// DER object identifiers, encoded (tag and length included).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_RSA: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];
const DER_NULL: &[u8] = &[0x05, 0x00];

/// SEC1 ECPrivateKey → PKCS#8 PrivateKeyInfo. The curve comes from the
/// key's own `[0] parameters` when present (a key without them is taken
/// as P-256, the curve k3s uses).
fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, PemProblem> {
    let curve = sec1_curve_oid(sec1)
        .ok_or_else(|| PemProblem("the EC PRIVATE KEY block is not valid DER".into()))?;
    let curve = curve.unwrap_or(OID_P256);
    let alg = der(0x30, &[OID_EC_PUBLIC_KEY, curve].concat());
    Ok(der(
        0x30,
        &[&[0x02, 0x01, 0x00][..], &alg, &der(0x04, sec1)].concat(),
    ))
}

/// PKCS#1 RSAPrivateKey → PKCS#8 PrivateKeyInfo.
fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    let alg = der(0x30, &[OID_RSA, DER_NULL].concat());
    der(
        0x30,
        &[&[0x02, 0x01, 0x00][..], &alg, &der(0x04, pkcs1)].concat(),
    )
}

/// The encoded curve OID inside a SEC1 key's `[0]` field: `Some(None)`
/// when the field is absent, `None` when the DER is malformed.
fn sec1_curve_oid(sec1: &[u8]) -> Option<Option<&[u8]>> {
    let (tag, body, rest) = read_tlv(sec1)?;
    if tag != 0x30 || !rest.is_empty() {
        return None;
    }
    let (tag, _version, body) = read_tlv(body)?;
    if tag != 0x02 {
        return None;
    }
    let (tag, _key, mut body) = read_tlv(body)?;
    if tag != 0x04 {
        return None;
    }
    while !body.is_empty() {
        let (tag, inner, rest) = read_tlv(body)?;
        if tag == 0xa0 {
            let (oid_tag, _, after) = read_tlv(inner)?;
            if oid_tag != 0x06 || !after.is_empty() {
                return None;
            }
            return Some(Some(inner));
        }
        body = rest;
    }
    Some(None)
}

/// One DER tag-length-value: (tag, value, what follows).
fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// Encodes one DER tag-length-value.
fn der(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(value);
    out
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let v = vec![7u8; len];
            let enc = der(0x04, &v);
            let (tag, body, rest) = read_tlv(&enc).unwrap();
            assert_eq!((tag, body.len(), rest.len()), (0x04, len, 0));
        }
        assert!(read_tlv(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_none());
        assert!(read_tlv(&[0x30, 0x05, 1]).is_none());
    }

    #[test]
    fn a_minted_pkcs8_key_loads_and_matches_its_certificate() {
        let key = KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let back = signing_key(key.serialize_pem().as_bytes()).unwrap();
        let der = first_certificate(cert.pem().as_bytes()).unwrap();
        assert!(key_matches_certificate(&back, &der).unwrap());
        let other = KeyPair::generate().unwrap();
        assert!(!key_matches_certificate(&other, &der).unwrap());
    }

    #[test]
    fn a_pkcs8_key_unwrapped_to_sec1_loads_again() {
        // ring's PKCS#8 holds the SEC1 structure inside its OCTET STRING:
        // take it out, as a Go-written file would hold it, and rewrap.
        let key = KeyPair::generate().unwrap();
        let (_, outer, _) = read_tlv(key.serialized_der()).unwrap();
        let (_, _, rest) = read_tlv(outer).unwrap(); // version
        let (_, _, rest) = read_tlv(rest).unwrap(); // algorithm
        let (_, sec1, _) = read_tlv(rest).unwrap();
        let pem = pem::encode(&pem::Pem::new("EC PRIVATE KEY", sec1.to_vec()));
        let back = signing_key(pem.as_bytes()).unwrap();
        assert_eq!(back.public_key_raw(), key.public_key_raw());
    }

    #[test]
    fn a_key_written_as_sec1_names_its_curve_and_loads_again() {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let text = sec1_pem(&key).unwrap();
        assert!(
            text.starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
            "{text}"
        );
        let block = pem::parse(&text).unwrap();
        assert_eq!(sec1_curve_oid(block.contents()), Some(Some(OID_P256)));
        let back = signing_key(text.as_bytes()).unwrap();
        assert_eq!(back.public_key_raw(), key.public_key_raw());
        let rsa = "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n";
        assert!(signing_key(rsa.as_bytes()).is_err());
    }

    #[test]
    fn blocks_that_are_not_keys_are_named() {
        let cert_only = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(
            signing_key(cert_only.as_bytes())
                .unwrap_err()
                .0
                .contains("no PRIVATE KEY")
        );
        assert!(first_certificate(b"hello").is_err());
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
