//! The release commands' side of the dispatcher: from parsed words to
//! the typed requests of [`super::bundle`], [`super::fetch`],
//! [`super::serve`] and [`super::index`].
//!
//! Each function takes the words [`crate::args::parse`] read against the
//! command's [`crate::usage`] entry, checks what the usage line promises
//! (counts, `-slot-size`, `-digest`, the version), and calls the
//! command's `run`. What is wrong with the words is the entry's usage
//! error; what goes wrong after is the command's own error.

use std::path::PathBuf;

use liken_api::{Digest, Version};

use super::bundle::{self, BundleError, BundleRequest};
use super::fetch::{self, FetchError, FetchRequest, Wanted};
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
    };
    bundle::run(&req, io.out).map_err(|e| super::Error::Bundle(e).into())
}

/// `liken fetch [-digest sha256:<hex>] [-ca ca.pem] <source-url> <version|latest> <channel-dir>`.
pub fn fetch(parsed: &Parsed, io: &mut Io) -> Result<(), Error> {
    if parsed.positionals().len() != 3 {
        return Err(parsed.usage());
    }
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
