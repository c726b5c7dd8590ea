//! Releases and channels: `bundle`, `fetch`, `serve` and `index`.
//!
//! A channel is a directory of immutable releases (see [`layout`]). The
//! publisher lays a release out with [`bundle`], shares the directory
//! with [`serve`] or any static web server or object store, and renders
//! its human and script indexes with [`index`]. A workstation or a
//! mirror copies a release with [`fetch`], which trusts nothing it has
//! not hashed: release.yaml against the catalog digest (`-digest`), then
//! every artifact against release.yaml.
//!
//! Module map:
//! - [`bundle`], [`serve`], [`index`]: the publishing commands; `fetch`
//!   is [`liken_releases::fetch`].
//! - [`cli`]: from the dispatcher's parsed words to typed requests.
//! - [`http`], [`urlpath`]: serve's pure request parsing (fuzzed).
//! - [`html`]: escaping and page frames for index.
//! - From liken-releases (re-exported): [`layout`] (the channel's file
//!   layout and bundle's input table), [`channel`] (channel.yaml's
//!   latest, which only moves forward), [`client`] (the ureq agent,
//!   capped document reads), [`fetch`], and the shared mechanics
//!   [`stream`], [`progress`], [`size`].

// The reading side of a channel is a library the machine operator links
// too (liken-releases); it is re-exported here under its old paths.
pub use liken_releases::{channel, client, fetch, layout, progress, size, stream};

pub mod bundle;
pub mod cli;
pub mod html;
pub mod http;
pub mod index;
pub mod serve;
pub mod uki;
pub mod urlpath;

use std::fmt;

/// Why a release command failed; each variant's Display is the message
/// after `liken: `.
#[derive(Debug)]
pub enum Error {
    /// `liken bundle`.
    Bundle(bundle::BundleError),
    /// `liken fetch`.
    Fetch(fetch::FetchError),
    /// `liken serve`.
    Serve(serve::ServeError),
    /// `liken index`.
    Index(index::IndexError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bundle(e) => write!(f, "bundle: {e}"),
            Error::Fetch(e) => write!(f, "fetch: {e}"),
            Error::Serve(e) => write!(f, "serve: {e}"),
            Error::Index(e) => write!(f, "index: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<bundle::BundleError> for Error {
    fn from(e: bundle::BundleError) -> Error {
        Error::Bundle(e)
    }
}

impl From<fetch::FetchError> for Error {
    fn from(e: fetch::FetchError) -> Error {
        Error::Fetch(e)
    }
}

impl From<serve::ServeError> for Error {
    fn from(e: serve::ServeError) -> Error {
        Error::Serve(e)
    }
}

impl From<index::IndexError> for Error {
    fn from(e: index::IndexError) -> Error {
        Error::Index(e)
    }
}
