//! The server CA hash that every k3s token carries, computed the way k3s
//! computes it, so a token liken writes is one k3s accepts.
//!
//! k3s's rule (pkg/clientaccess/token.go, `hashCA`): parse every
//! certificate in the bundle. One certificate: hash the file's raw bytes
//! (the usual self-signed cluster CA, and what `liken mint` writes).
//! Several: verify the first against the rest with Go's `x509.Verify`,
//! where a later certificate with no authority key id, or one equal to its
//! subject key id, is a root and any other is an intermediate; when a
//! chain verifies, hash the DER of that chain's root, so the hash survives
//! renewing an intermediate cluster CA under the same root. When no chain
//! verifies, the raw bytes are hashed after all.
//!
//! The chain search follows Go's `crypto/x509` (verify.go: `buildChains`,
//! `isValid`, `CheckSignatureFrom`, `checkChainForKeyUsage`) closely
//! enough to pick the same root: parents are looked up by issuer name,
//! roots before intermediates, key-id matches first; a parent must be a CA
//! that may sign certificates; every certificate must be valid at the time
//! given; path length limits hold; SHA-1 signatures are refused; unknown
//! critical extensions fail; and, as `Verify` asks for server
//! authentication by default, a certificate with an extended key usage
//! must allow it. Not followed: name constraints (a CA bundle's first
//! certificate carries no names to check) and curves ring cannot verify
//! (P-521), for which a chain is not found and the raw bytes are hashed.
//! Both are cases where Go would verify and this code would not; the
//! token's hash then names the bytes, and `adopt` reports the mismatch
//! against the harvested token rather than writing a wrong token.

use sha2::Digest;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::time::ASN1Time;

use super::keys::hex;

/// Go's limit on signature checks while building chains
/// (crypto/x509 verify.go, maxChainSignatureChecks).
const MAX_SIGNATURE_CHECKS: usize = 100;

/// Signature algorithms Go no longer verifies: sha1WithRSAEncryption and
/// the OIW sha1WithRSA.
const SHA1_SIGNATURES: [&str; 2] = ["1.2.840.113549.1.1.5", "1.3.14.3.2.29"];

/// The current time as seconds since the epoch, for [`hash_ca`].
pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// k3s's hash of a CA bundle file's bytes, in lower-case hex, checking
/// certificate validity at `now` (seconds since the epoch). A bundle with
/// no certificate is an error, as in k3s (whose FormatToken then fails).
pub fn hash_ca(bundle: &[u8], now: i64) -> Result<String, String> {
    let ders = certificates(bundle)?;
    let mut parsed = Vec::with_capacity(ders.len());
    for (i, der) in ders.iter().enumerate() {
        match x509_parser::parse_x509_certificate(der) {
            Ok((_, c)) => parsed.push(c),
            Err(e) => {
                return Err(format!(
                    "certificate {} of the bundle is not X.509: {e}",
                    i + 1
                ));
            }
        }
    }
    let hashed: &[u8] = match parsed.as_slice() {
        [leaf, rest @ ..] if !rest.is_empty() => {
            let time = ASN1Time::from_timestamp(now).map_err(|e| e.to_string())?;
            match root_of_first_chain(leaf, rest, time) {
                Some(root) => root.as_raw(),
                None => bundle,
            }
        }
        _ => bundle,
    };
    Ok(hex(&sha2::Sha256::digest(hashed)))
}

/// The DER of every CERTIFICATE block without headers, as Go's
/// certutil.ParseCertsPEM takes them (other blocks are skipped).
fn certificates(bundle: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let blocks = pem::parse_many(bundle).map_err(|e| format!("not PEM: {e}"))?;
    let ders: Vec<Vec<u8>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE" && b.headers().iter().next().is_none())
        .map(|b| b.into_contents())
        .collect();
    if ders.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(ders)
}

/// Where a candidate parent stands in the search.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Root,
    Intermediate,
}

/// One verification: the pools and the signature-check budget.
struct Search<'c, 'a> {
    roots: Vec<&'c X509Certificate<'a>>,
    intermediates: Vec<&'c X509Certificate<'a>>,
    time: ASN1Time,
    checks: usize,
}

/// The root of the first chain Go's `Verify` would return for `leaf`
/// with `rest` split into roots and intermediates, or `None` when no
/// chain verifies.
fn root_of_first_chain<'c, 'a>(
    leaf: &'c X509Certificate<'a>,
    rest: &'c [X509Certificate<'a>],
    time: ASN1Time,
) -> Option<&'c X509Certificate<'a>> {
    let mut search = Search {
        roots: Vec::new(),
        intermediates: Vec::new(),
        time,
        checks: 0,
    };
    for c in rest {
        // A pool holds each certificate once (Go's CertPool.AddCert).
        let seen = search
            .roots
            .iter()
            .chain(&search.intermediates)
            .any(|p| p.as_raw() == c.as_raw());
        if seen {
            continue;
        }
        let aki = authority_key_id(c);
        if aki.is_none_or(|a| Some(a) == subject_key_id(c)) {
            search.roots.push(c);
        } else {
            search.intermediates.push(c);
        }
    }
    if !valid(leaf, None, &[], &search) {
        return None;
    }
    // A leaf that is itself in the root pool is its own chain.
    let chains: Vec<Vec<&X509Certificate>> =
        if search.roots.iter().any(|r| r.as_raw() == leaf.as_raw()) {
            vec![vec![leaf]]
        } else {
            search.chains(vec![leaf])
        };
    chains
        .into_iter()
        .find(|chain| allows_server_auth(chain))
        .and_then(|chain| chain.last().copied())
}

impl<'c, 'a> Search<'c, 'a> {
    /// Every chain from the last certificate of `chain` to a root, in the
    /// order Go finds them (crypto/x509 verify.go, buildChains).
    fn chains(&mut self, chain: Vec<&'c X509Certificate<'a>>) -> Vec<Vec<&'c X509Certificate<'a>>> {
        let Some(&child) = chain.last() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let candidates: Vec<(Role, &'c X509Certificate<'a>)> = parents(child, &self.roots)
            .into_iter()
            .map(|c| (Role::Root, c))
            .chain(
                parents(child, &self.intermediates)
                    .into_iter()
                    .map(|c| (Role::Intermediate, c)),
            )
            .collect();
        for (role, parent) in candidates {
            if in_chain(parent, &chain) {
                continue;
            }
            self.checks += 1;
            if self.checks > MAX_SIGNATURE_CHECKS {
                break;
            }
            if !signed_by(child, parent) || !valid(parent, Some(role), &chain, self) {
                continue;
            }
            let mut longer = chain.clone();
            longer.push(parent);
            match role {
                Role::Root => found.push(longer),
                Role::Intermediate => found.extend(self.chains(longer)),
            }
        }
        found
    }
}

/// The certificates of `pool` whose subject is `child`'s issuer, ordered
/// as Go's CertPool.findPotentialParents orders them: key ids matching
/// (both absent counts as matching), then one of them absent, then the
/// rest.
fn parents<'c, 'a>(
    child: &X509Certificate<'_>,
    pool: &[&'c X509Certificate<'a>],
) -> Vec<&'c X509Certificate<'a>> {
    let aki = authority_key_id(child);
    let mut ranked: Vec<(u8, &'c X509Certificate<'a>)> = pool
        .iter()
        .filter(|p| p.subject().as_raw() == child.issuer().as_raw())
        .map(|&p| {
            let ski = subject_key_id(p);
            let rank = if ski == aki {
                0
            } else if ski.is_none() || aki.is_none() {
                1
            } else {
                2
            };
            (rank, p)
        })
        .collect();
    // A stable sort keeps the pool's order within a rank, as Go does.
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.into_iter().map(|(_, p)| p).collect()
}

/// Go's alreadyInChain: the same subject and public key.
fn in_chain(candidate: &X509Certificate<'_>, chain: &[&X509Certificate<'_>]) -> bool {
    chain.iter().any(|c| {
        c.subject().as_raw() == candidate.subject().as_raw()
            && c.public_key().raw == candidate.public_key().raw
    })
}

/// Go's CheckSignatureFrom: the parent may sign certificates (a v3
/// parent needs basic constraints with CA set; a key usage, when
/// present, must allow certificate signing) and its key verifies the
/// child's signature, which is not SHA-1.
fn signed_by(child: &X509Certificate<'_>, parent: &X509Certificate<'_>) -> bool {
    let constraints = match parent.basic_constraints() {
        Ok(c) => c.map(|c| c.value.ca),
        Err(_) => return false,
    };
    let v3 = parent.version().0 == 2;
    if (v3 && constraints.is_none()) || constraints == Some(false) {
        return false;
    }
    match parent.key_usage() {
        Ok(Some(ku)) if ku.value.flags != 0 && !ku.value.key_cert_sign() => return false,
        Ok(_) => {}
        Err(_) => return false,
    }
    let alg = child.signature_algorithm.algorithm.to_id_string();
    if SHA1_SIGNATURES.contains(&alg.as_str()) {
        return false;
    }
    child.verify_signature(Some(parent.public_key())).is_ok()
}

/// Go's isValid for a certificate about to join `chain` (empty for the
/// leaf): no unknown critical extension, inside its validity at the
/// search's time, an intermediate is a CA, and path length limits hold.
fn valid(
    c: &X509Certificate<'_>,
    role: Option<Role>,
    chain: &[&X509Certificate<'_>],
    search: &Search<'_, '_>,
) -> bool {
    let unknown_critical = c
        .extensions()
        .iter()
        .any(|e| e.critical && e.parsed_extension().unsupported());
    if unknown_critical || !c.validity().is_valid_at(search.time) {
        return false;
    }
    let constraints = match c.basic_constraints() {
        Ok(bc) => bc.map(|bc| bc.value.clone()),
        Err(_) => return false,
    };
    if role == Some(Role::Intermediate) && !constraints.as_ref().is_some_and(|bc| bc.ca) {
        return false;
    }
    if let Some(max) = constraints.and_then(|bc| bc.path_len_constraint) {
        let intermediates = chain.len().saturating_sub(1);
        if intermediates > max as usize {
            return false;
        }
    }
    true
}

/// Go's checkChainForKeyUsage with its default, server authentication:
/// every certificate that names extended key usages names it or "any".
fn allows_server_auth(chain: &[&X509Certificate<'_>]) -> bool {
    chain.iter().all(|c| match c.extended_key_usage() {
        Ok(Some(eku)) => eku.value.any || eku.value.server_auth,
        Ok(None) => true,
        Err(_) => false,
    })
}

fn authority_key_id<'a>(c: &'a X509Certificate<'_>) -> Option<&'a [u8]> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => aki
                .key_identifier
                .as_ref()
                .map(|k| k.0)
                .filter(|k| !k.is_empty()),
            _ => None,
        })
}

fn subject_key_id<'a>(c: &'a X509Certificate<'_>) -> Option<&'a [u8]> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0).filter(|k| !k.is_empty()),
            _ => None,
        })
}

/// Certificate chains for tests, made with rcgen.
#[cfg(test)]
pub(crate) mod testca {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyIdMethod, KeyPair,
        KeyUsagePurpose,
    };

    /// The time the fixtures are valid around.
    pub const NOW: i64 = 1_800_000_000;

    /// A CA: its certificate PEM and DER, its key, and an issuer for what
    /// it signs.
    pub struct Ca {
        pub pem: String,
        pub der: Vec<u8>,
        pub key_pem: String,
        pub issuer: Issuer<'static, KeyPair>,
    }

    /// CA parameters valid from `from` until `until` (seconds).
    pub fn params(cn: &str, from: i64, until: i64) -> CertificateParams {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.not_before = time::OffsetDateTime::from_unix_timestamp(from).unwrap();
        p.not_after = time::OffsetDateTime::from_unix_timestamp(until).unwrap();
        p.use_authority_key_identifier_extension = true;
        p.key_identifier_method = KeyIdMethod::Sha256;
        p
    }

    /// Self-signs `p`.
    pub fn self_signed(p: CertificateParams) -> Ca {
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A root CA valid a day before [`NOW`] and ten years after.
    pub fn root(cn: &str) -> Ca {
        self_signed(params(cn, NOW - 86_400, NOW + 86_400 * 3650))
    }

    /// A CA signed by `by`, with `edit` applied to its parameters.
    pub fn signed(cn: &str, by: &Ca, edit: impl FnOnce(&mut CertificateParams)) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = params(cn, NOW - 86_400, NOW + 86_400 * 3650);
        edit(&mut p);
        let cert = p.signed_by(&key, &by.issuer).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// The PEM files of `cas`, concatenated.
    pub fn bundle(cas: &[&Ca]) -> Vec<u8> {
        cas.iter()
            .map(|c| c.pem.as_str())
            .collect::<String>()
            .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::testca::*;
    use super::*;
    use rcgen::{BasicConstraints, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose};

    fn sha(bytes: &[u8]) -> String {
        hex(&sha2::Sha256::digest(bytes))
    }

    #[test]
    fn one_certificate_hashes_the_file_bytes() {
        let ca = root("k3s-server-ca@1");
        let mut file = ca.pem.clone().into_bytes();
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&file));
        // The bytes, not the certificate: a trailing newline changes it.
        file.push(b'\n');
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&file));
        assert_ne!(sha(&file), sha(&ca.der));
    }

    #[test]
    fn a_chain_hashes_the_der_of_its_root() {
        // k3s's custom CA layout: server-ca.crt holds the server CA, the
        // intermediate and the root (contrib/util/generate-custom-ca-certs.sh).
        let r = root("root-ca");
        let i = signed("intermediate-ca", &r, |_| {});
        let s = signed("server-ca", &i, |_| {});
        let file = bundle(&[&s, &i, &r]);
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&r.der));
        // The order after the first does not matter, nor a renewed server CA.
        assert_eq!(hash_ca(&bundle(&[&s, &r, &i]), NOW).unwrap(), sha(&r.der));
        let renewed = signed("server-ca", &i, |_| {});
        assert_eq!(
            hash_ca(&bundle(&[&renewed, &i, &r]), NOW).unwrap(),
            sha(&r.der)
        );
        // Directly under the root, without an intermediate.
        let direct = signed("server-ca", &r, |_| {});
        assert_eq!(hash_ca(&bundle(&[&direct, &r]), NOW).unwrap(), sha(&r.der));
    }

    #[test]
    fn a_bundle_whose_chain_does_not_verify_hashes_the_bytes() {
        let r = root("root-ca");
        let other = root("other-root");
        let i = signed("intermediate-ca", &r, |_| {});
        let s = signed("server-ca", &i, |_| {});
        for (why, file, at) in [
            ("another root", bundle(&[&s, &i, &other]), NOW),
            ("the intermediate missing", bundle(&[&s, &r]), NOW),
            ("two unrelated roots", bundle(&[&r, &other]), NOW),
            ("before notBefore", bundle(&[&s, &i, &r]), NOW - 2 * 86_400),
            ("after notAfter", bundle(&[&s, &i, &r]), NOW + 86_400 * 3651),
        ] {
            assert_eq!(hash_ca(&file, at).unwrap(), sha(&file), "{why}");
        }
    }

    #[test]
    fn go_constraints_on_the_chain_hold() {
        let r = root("root-ca");
        // An intermediate that is not a CA cannot carry the chain.
        let not_ca = signed("intermediate", &r, |p| {
            p.is_ca = IsCa::ExplicitNoCa;
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        });
        let s = signed("server-ca", &not_ca, |_| {});
        let file = bundle(&[&s, &not_ca, &r]);
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&file), "not a CA");

        // A server CA limited to client authentication fails Go's default
        // key usage check (server authentication).
        let client_only = signed("server-ca", &r, |p| {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        });
        let file = bundle(&[&client_only, &r]);
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&file), "client auth only");
        let server_auth = signed("server-ca", &r, |p| {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        });
        assert_eq!(
            hash_ca(&bundle(&[&server_auth, &r]), NOW).unwrap(),
            sha(&r.der)
        );

        // A root limited to no intermediates cannot sign through one.
        let mut p = params("short-root", NOW - 86_400, NOW + 86_400);
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let short = self_signed(p);
        let i = signed("intermediate-ca", &short, |_| {});
        let s = signed("server-ca", &i, |_| {});
        let file = bundle(&[&s, &i, &short]);
        assert_eq!(hash_ca(&file, NOW).unwrap(), sha(&file), "path length 0");
        let direct = signed("server-ca", &short, |_| {});
        assert_eq!(
            hash_ca(&bundle(&[&direct, &short]), NOW).unwrap(),
            sha(&short.der)
        );
    }

    #[test]
    fn no_certificate_is_an_error() {
        assert!(hash_ca(b"", NOW).is_err());
        assert!(
            hash_ca(
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                NOW
            )
            .is_err()
        );
        let e = hash_ca(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            NOW,
        )
        .unwrap_err();
        assert!(e.contains("not X.509"), "{e}");
    }
}
