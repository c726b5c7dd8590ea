//! The release commands' side of the dispatcher: from parsed words to
//! the typed requests of [`super::bundle`], [`super::fetch`],
//! [`super::serve`] and [`super::index`].
//!
//! Each function takes the words [`crate::args::parse`] read against the
//! command's [`crate::usage`] entry, checks what the usage line promises
//! (counts, `-slot-size`, `-digest`, the version), and calls the
//! command's `run`. What is wrong with the words is the entry's usage
//! error; what goes wrong after is the command's own error.

use std::path::{Path, PathBuf};

use liken_api::signing::{TRUST_FILE, TrustRoot};
use liken_api::{Digest, Version};

use super::bundle::{self, BundleError, BundleRequest};
use super::fetch::{self, FetchError, FetchRequest, Signatures, Wanted};
use super::index::{self, IndexRequest};
use super::layout::INPUTS;
use super::progress::Style;
use super::serve;
use super::size;
use crate::args::Parsed;
use crate::{Error, Io};

fn utf8(parsed: &Parsed, i: usize) -> Result<String, Error> {
    parsed.positionals()[i]
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| parsed.usage())
}

/// `liken bundle [-slot-size 1Gi] [-microcode <file>] <eight files> <channel-dir> <version> [component=version ...]`.
pub fn bundle(parsed: &Parsed, io: &mut Io) -> Result<(), Error> {
    let words = parsed.positionals();
    let files = INPUTS.iter().filter(|i| i.flag.is_none()).count();
    if words.len() < files + 2 {
        return Err(parsed.usage());
    }
    let slot_size = match parsed.value("slot-size") {
        None => bundle::DEFAULT_SLOT_SIZE,
        Some(text) => size::parse_size(text)
            .map_err(|e| super::Error::Bundle(BundleError::Invalid(format!("-slot-size: {e}"))))?,
    };
    let version = Version::parse(&utf8(parsed, files + 1)?).map_err(|e| {
        super::Error::Bundle(BundleError::Invalid(format!(
            "{e}; the version names the release"
        )))
    })?;
    let components = words[files + 2..]
        .iter()
        .map(|w| w.to_str().map(str::to_owned).ok_or_else(|| parsed.usage()))
        .collect::<Result<Vec<String>, Error>>()?;
    let components = bundle::parse_components(&components).map_err(super::Error::Bundle)?;
    // Required inputs take the positional words in table order; an
    // optional one comes from its flag or is left out.
    let sign = match parsed.value("sign") {
        None => None,
        Some(k) => Some(crate::signing::read_signing_key(std::path::Path::new(k))?),
    };
    let channel_days = match parsed.value("channel-days") {
        None => liken_api::release::DEFAULT_CHANNEL_VALIDITY_DAYS,
        Some(text) => super::channel::parse_validity_days(text)
            .map_err(|e| super::Error::Bundle(BundleError::Invalid(e)))?,
    };
    let uki_args = parsed.values("uki-arg");
    let uki = match parsed.value("secureboot-key") {
        None if uki_args.is_empty() => None,
        None => {
            return Err(super::Error::Bundle(BundleError::Invalid(
                "-uki-arg sets the unified kernel images' command line, which only \
                 -secureboot-key <dir> makes; give both or neither"
                    .to_owned(),
            ))
            .into());
        }
        Some(dir) => {
            let Some(layer_key) = parsed.value("layer-key") else {
                return Err(super::Error::Bundle(BundleError::Invalid(
                    "-secureboot-key needs -layer-key <release.pub>: a signed image names the \
                     key that sealed the fleet's layers (`liken layer -seal-key`), or the \
                     layer on the ESP would decide what the machine trusts unchecked"
                        .to_owned(),
                ))
                .into());
            };
            let layer_key = crate::signing::read_release_key(std::path::Path::new(layer_key))?;
            Some(
                bundle::uki_signing(std::path::Path::new(dir), &layer_key, &uki_args)
                    .map_err(super::Error::Bundle)?,
            )
        }
    };
    if parsed.value("layer-key").is_some() && uki.is_none() {
        return Err(super::Error::Bundle(BundleError::Invalid(
            "-layer-key goes into the signed images' command line, which only -secureboot-key \
             <dir> makes; give both or neither"
                .to_owned(),
        ))
        .into());
    }
    let mut positional = words.iter();
    let inputs = INPUTS.map(|input| match input.flag {
        Some(flag) => parsed.value(flag).map(PathBuf::from),
        None => positional.next().map(PathBuf::from),
    });
    let req = BundleRequest {
        inputs,
        channel: PathBuf::from(&words[files]),
        version,
        slot_size,
        components,
        progress: Style::detect(),
        sign,
        channel_days,
        uki,
    };
    bundle::run(&req, io.out).map_err(|e| super::Error::Bundle(e).into())
}

/// Where fetch takes the keys it accepts from, as its flags say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustFlag<'a> {
    /// `-key release.pub`: that one key.
    Key(&'a str),
    /// `-trust trust.yaml` (or a deployment directory holding one).
    Trust(&'a str),
    /// `-unsigned`: no check.
    Unsigned,
}

/// Decides which of `-key`, `-trust` and `-unsigned` fetch runs with:
/// exactly one, because each says on its own whose signatures count,
/// and fetching unchecked is never the default.
pub fn decide_trust_flag<'a>(
    key: Option<&'a str>,
    trust: Option<&'a str>,
    unsigned: bool,
) -> Result<TrustFlag<'a>, FetchError> {
    match (key, trust, unsigned) {
        (Some(k), None, false) => Ok(TrustFlag::Key(k)),
        (None, Some(t), false) => Ok(TrustFlag::Trust(t)),
        (None, None, true) => Ok(TrustFlag::Unsigned),
        (None, None, false) => Err(FetchError::Usage(
            "fetch takes only what a trusted key signed: give -key <release.pub> (the \
             publisher's public key) or -trust <trust.yaml> (a deployment's trust root, or the \
             deployment directory), or -unsigned to fetch without checking signatures"
                .into(),
        )),
        _ => Err(FetchError::Usage(
            "-key, -trust and -unsigned each say whose signatures fetch accepts; give one of them"
                .into(),
        )),
    }
}

/// Reads the keys `flag` names.
fn signatures(flag: TrustFlag<'_>) -> Result<Signatures, FetchError> {
    let usage =
        |flag: &str, e: crate::signing::SigningError| FetchError::Usage(format!("-{flag}: {e}"));
    match flag {
        TrustFlag::Unsigned => Ok(Signatures::Unchecked),
        TrustFlag::Key(path) => {
            let key =
                crate::signing::read_release_key(Path::new(path)).map_err(|e| usage("key", e))?;
            Ok(Signatures::Verify(TrustRoot::new([key])))
        }
        TrustFlag::Trust(path) => {
            // A deployment directory stands for the trust.yaml in it, as
            // `liken layer` reads it there.
            let path = Path::new(path);
            let file = if path.is_dir() {
                path.join(TRUST_FILE)
            } else {
                path.to_owned()
            };
            let trust = crate::signing::read_trust(&file).map_err(|e| usage("trust", e))?;
            Ok(Signatures::Verify(trust))
        }
    }
}

/// `liken fetch (-key release.pub | -trust trust.yaml | -unsigned) [-digest sha256:<hex>] [-ca ca.pem] <source-url> <version|latest> <channel-dir>`.
pub fn fetch(parsed: &Parsed, io: &mut Io) -> Result<(), Error> {
    if parsed.positionals().len() != 3 {
        return Err(parsed.usage());
    }
    let flag = decide_trust_flag(
        parsed.value("key"),
        parsed.value("trust"),
        parsed.switch("unsigned"),
    )
    .map_err(super::Error::Fetch)?;
    let signatures = signatures(flag).map_err(super::Error::Fetch)?;
    let digest = match parsed.value("digest") {
        None => None,
        Some(text) => Some(Digest::parse(text).map_err(|e| {
            super::Error::Fetch(FetchError::Usage(format!(
                "-digest: {e} (the digest of release.yaml, from the catalog entry)"
            )))
        })?),
    };
    let req = FetchRequest {
        source: utf8(parsed, 0)?,
        wanted: Wanted::parse(&utf8(parsed, 1)?).map_err(super::Error::Fetch)?,
        digest,
        channel: PathBuf::from(&parsed.positionals()[2]),
        ca: parsed.value("ca").map(PathBuf::from),
        progress: Style::detect(),
        observer: None,
        signatures,
    };
    fetch::run(&req, io.out).map_err(|e| super::Error::Fetch(e).into())
}

/// `liken serve <channel-dir> [address]`.
pub fn serve(parsed: &Parsed, io: &mut Io) -> Result<(), Error> {
    let (dir, address) = match parsed.positionals() {
        [dir] => (PathBuf::from(dir), serve::DEFAULT_ADDRESS.to_owned()),
        [dir, _] => (PathBuf::from(dir), utf8(parsed, 1)?),
        _ => return Err(parsed.usage()),
    };
    serve::run(&dir, &address, io.out).map_err(|e| super::Error::Serve(e).into())
}

/// `liken index -source <url> <output-dir> < keys`.
pub fn index(parsed: &Parsed, io: &mut Io) -> Result<(), Error> {
    let [output] = parsed.paths::<1>()?;
    let Some(source) = parsed.value("source") else {
        return Err(parsed.usage());
    };
    let keys = index::read_keys(io.stdin).map_err(|error| {
        super::Error::Index(index::IndexError::Io {
            doing: "reading object keys from standard input".into(),
            error,
        })
    })?;
    let req = IndexRequest {
        source: source.to_owned(),
        keys,
        output,
    };
    index::run(&req, io.out).map_err(|e| super::Error::Index(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_takes_exactly_one_source_of_trust() {
        assert_eq!(
            decide_trust_flag(Some("k.pub"), None, false).unwrap(),
            TrustFlag::Key("k.pub")
        );
        assert_eq!(
            decide_trust_flag(None, Some("home"), false).unwrap(),
            TrustFlag::Trust("home")
        );
        assert_eq!(
            decide_trust_flag(None, None, true).unwrap(),
            TrustFlag::Unsigned
        );
        let none = decide_trust_flag(None, None, false)
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("-key <release.pub>")
                && none.contains("-trust <trust.yaml>")
                && none.contains("-unsigned"),
            "{none}"
        );
        for (k, t, u) in [
            (Some("k"), Some("t"), false),
            (Some("k"), None, true),
            (None, Some("t"), true),
        ] {
            let e = decide_trust_flag(k, t, u).unwrap_err().to_string();
            assert!(e.contains("give one of them"), "{e}");
        }
    }

    #[test]
    fn a_trust_flag_reads_a_key_a_trust_root_or_a_deployment() {
        let tmp = crate::testdir::TestDir::new("fetch-trust-flag");
        let (_, public) = crate::signing::keygen(tmp.path()).unwrap();
        let trust = tmp.path().join(TRUST_FILE);
        crate::signing::trust_command(&trust, std::slice::from_ref(&public), None, &mut Vec::new())
            .unwrap();
        let key = crate::signing::read_release_key(&public).unwrap();
        let want = TrustRoot::new([key]);
        let public = public.display().to_string();
        let dir = tmp.path().display().to_string();
        let trust = trust.display().to_string();
        for flag in [
            TrustFlag::Key(&public),
            TrustFlag::Trust(&trust),
            TrustFlag::Trust(&dir),
        ] {
            match signatures(flag.clone()).unwrap() {
                Signatures::Verify(t) => assert_eq!(t, want, "{flag:?}"),
                Signatures::Unchecked => panic!("{flag:?}"),
            }
        }
        // A public key where a trust root belongs, and a missing file.
        let e = signatures(TrustFlag::Trust(&public))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("-trust: "), "{e}");
        let e = signatures(TrustFlag::Key("/nonexistent/release.pub"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("-key: /nonexistent/release.pub"), "{e}");
    }
}
