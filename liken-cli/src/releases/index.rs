//! `liken index`: render a channel's HTML pages and versions.yaml.
//!
//! The channel's object keys arrive on standard input, one per line,
//! because listing a bucket needs a credential and this program holds
//! none: `aws s3 ls`, `rclone lsf -R` or `find . -type f` produce them.
//! Keys are relative to the channel root; each key of the form
//! `<version>/release.yaml` is one release, and every other key
//! (artifacts, channel.yaml, the pages themselves) is ignored.
//!
//! Each release's document is read from the channel itself: first from
//! `<output-dir>/<key>`, which is the usual case of rendering into the
//! local channel directory that bundle or fetch filled (and that is then
//! synced to the bucket), otherwise over HTTP from `<source>/<key>`, so
//! the index can be re-rendered into an empty directory from the
//! published channel alone. Every document is decoded strictly, and its
//! catalog digest is the SHA-256 of exactly those bytes.
//!
//! Beside each release.yaml, its detached signature (`release.yaml.sig`)
//! is read from the same place, and the pages and the command's output
//! name the key that signed it ([`decide_signer`]). The index holds no
//! trust root, so this says who claims to have signed, not that anyone
//! should believe it: `liken fetch -key` and init check the signature
//! itself. A signature over other bytes than the release.yaml beside it
//! is shown as such rather than under its key.
//!
//! Written, each atomically:
//! - `index.html`: every release, newest first, with its digest and key.
//! - `<version>/index.html`: the release's catalog entry (what to paste
//!   into cluster.yaml), a fetch command and its artifacts.
//! - `mirror.html`: how to mirror the channel from `-source`.
//! - `versions.yaml`: the same catalog for scripts.
//!
//! The index is derived data: rendering again over the same channel
//! rewrites whatever is stale.

use std::fmt::{self, Write as _};
use std::fs;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use liken_api::cluster::CatalogEntry;
use liken_api::release::{RELEASE_FILE, Release};
use liken_api::signing::{DetachedSignature, KeyId, signature_name};
use liken_api::{DecodeError, Digest, Version, decode};
use serde::Serialize;

use super::client::{self, ClientError};
use super::html::{escape, href_segment, page};
use super::size::human;
use super::stream;
use crate::files;

/// The file the script-readable catalog is written to.
pub const VERSIONS_FILE: &str = "versions.yaml";

/// What `index` was asked to do, already parsed.
#[derive(Clone, Debug)]
pub struct IndexRequest {
    /// The channel's public base URL.
    pub source: String,
    /// The channel's object keys.
    pub keys: Vec<String>,
    /// Where the pages go (normally the channel directory itself).
    pub output: PathBuf,
}

/// Why index failed.
#[derive(Debug)]
pub enum IndexError {
    /// The source is not an http(s) URL.
    Source(String),
    /// A key names a release directory whose version is not valid.
    BadVersion {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A release document could not be read locally or from the source.
    Read(ClientError),
    /// A release document is not valid.
    Document(DecodeError),
    /// A release document names another version than its directory.
    WrongVersion {
        /// Where it was read.
        origin: String,
        /// What it says.
        found: Version,
    },
    /// Local I/O failed.
    Io {
        /// What was being done.
        doing: String,
        /// The error.
        error: io::Error,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Source(s) => write!(
                f,
                "-source {s:?} must be the http:// or https:// URL the channel is served from"
            ),
            IndexError::BadVersion { key, reason } => write!(
                f,
                "key {key:?} names a release directory, but {reason}; the channel holds a \
                 release that no machine can use: remove or rename it"
            ),
            IndexError::Read(e) => write!(f, "{e}"),
            IndexError::Document(e) => write!(f, "{e}"),
            IndexError::WrongVersion { origin, found } => write!(
                f,
                "{origin} describes release {found}, not the version of its directory; the \
                 channel is inconsistent"
            ),
            IndexError::Io { doing, error } => write!(f, "{doing}: {error}"),
        }
    }
}

impl std::error::Error for IndexError {}

/// Reads keys, one a line, dropping blank lines and surrounding space.
pub fn read_keys(input: &mut dyn BufRead) -> io::Result<Vec<String>> {
    let mut keys = Vec::new();
    for line in input.lines() {
        let line = line?;
        let key = line.trim();
        if !key.is_empty() {
            keys.push(key.to_owned());
        }
    }
    Ok(keys)
}

/// The releases named by `keys`, newest first, each once.
pub fn release_versions(keys: &[String]) -> Result<Vec<Version>, IndexError> {
    let mut versions = Vec::new();
    for key in keys {
        let k = key.trim_start_matches("./").trim_start_matches('/');
        let Some((dir, file)) = k.split_once('/') else {
            continue;
        };
        if file != RELEASE_FILE {
            continue;
        }
        match Version::parse(dir) {
            Ok(v) => versions.push(v),
            // A directory that is not even version-shaped is something
            // else sharing the bucket; a version-shaped one that fails
            // the calendar is a broken release.
            Err(liken_api::version::VersionError::Shape(_)) => {}
            Err(e) => {
                return Err(IndexError::BadVersion {
                    key: key.clone(),
                    reason: e.to_string(),
                });
            }
        }
    }
    versions.sort_by(|a, b| b.cmp(a));
    versions.dedup();
    Ok(versions)
}

/// Who signed a release, as far as the index can tell without a trust
/// root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signer {
    /// release.yaml.sig names this key and the bytes beside it.
    Key(KeyId),
    /// There is no release.yaml.sig.
    Unsigned,
    /// release.yaml.sig is not a signature document.
    Unreadable,
    /// release.yaml.sig is this key's, but over other bytes than the
    /// release.yaml beside it.
    OtherBytes(KeyId),
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signer::Key(id) => write!(f, "key {id}"),
            Signer::Unsigned => f.write_str("unsigned"),
            Signer::Unreadable => f.write_str("unreadable signature"),
            Signer::OtherBytes(id) => write!(f, "key {id}, over other bytes (stale signature)"),
        }
    }
}

/// Decides who signed the release.yaml of `bytes`, given the bytes of its
/// `release.yaml.sig` if there is one.
pub fn decide_signer(bytes: &[u8], signature: Option<&[u8]>) -> Signer {
    let Some(raw) = signature else {
        return Signer::Unsigned;
    };
    let text = String::from_utf8_lossy(raw);
    match decode::strict::<DetachedSignature>(&text, "release.yaml.sig") {
        Ok(sig) if sig.sha256 == stream::sha256(bytes) => Signer::Key(sig.key_id),
        Ok(sig) => Signer::OtherBytes(sig.key_id),
        Err(_) => Signer::Unreadable,
    }
}

/// One release as the pages show it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The decoded document.
    pub release: Release,
    /// `sha256:` of its bytes.
    pub digest: Digest,
    /// Who signed it.
    pub signer: Signer,
}

#[derive(Serialize)]
struct VersionsDoc<'a> {
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    latest: Option<&'a Version>,
    versions: Vec<CatalogEntry>,
}

/// versions.yaml for `entries` (newest first).
pub fn render_versions(source: &str, entries: &[Entry]) -> String {
    let doc = VersionsDoc {
        source,
        latest: entries.first().map(|e| &e.release.version),
        versions: entries
            .iter()
            .map(|e| CatalogEntry {
                version: e.release.version.clone(),
                digest: e.digest.clone(),
            })
            .collect(),
    };
    let body = decode::to_yaml(&doc).unwrap_or_default();
    format!(
        "# Every release of this channel, newest first, with the digest of its\n\
         # release.yaml: each entry is a catalog entry for a Cluster's\n\
         # spec.releases.catalog. Written by `liken index`.\n{body}"
    )
}

/// The front page.
pub fn render_front(source: &str, entries: &[Entry]) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "<h1>liken releases</h1>");
    let _ = writeln!(
        b,
        "<p>This channel is served from <code>{}</code>.",
        escape(source)
    );
    match entries.first() {
        Some(e) => {
            let v = e.release.version.as_str();
            let _ = writeln!(
                b,
                " The latest release is <a href=\"{}/\">{}</a>.</p>",
                escape(&href_segment(v)),
                escape(v)
            );
        }
        None => {
            let _ = writeln!(b, " It holds no releases yet.</p>");
        }
    }
    let _ = writeln!(
        b,
        "<p><a href=\"mirror.html\">Mirror this channel</a> · \
         <a href=\"{VERSIONS_FILE}\">{VERSIONS_FILE}</a> (for scripts)</p>"
    );
    if !entries.is_empty() {
        let _ = writeln!(
            b,
            "<table>\n<tr><th>Version</th><th>Artifacts</th><th>Size</th><th>Catalog digest</th><th>Signed by</th></tr>"
        );
        for e in entries {
            let v = e.release.version.as_str();
            let _ = writeln!(
                b,
                "<tr><td><a href=\"{}/\">{}</a></td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                escape(&href_segment(v)),
                escape(v),
                e.release.artifacts.len(),
                escape(&human(e.release.total_size())),
                escape(&e.digest.to_string()),
                escape(&e.signer.to_string())
            );
        }
        let _ = writeln!(b, "</table>");
    }
    page("liken releases", &b)
}

/// A release's page.
pub fn render_release(source: &str, e: &Entry) -> String {
    let v = e.release.version.as_str();
    let mut b = String::new();
    let _ = writeln!(b, "<p><a href=\"../\">All releases</a></p>");
    let _ = writeln!(b, "<h1>liken {}</h1>", escape(v));
    let _ = writeln!(
        b,
        "<h2>Catalog entry</h2>\n<p>To let a fleet run this release, add this entry to \
         <code>spec.releases.catalog</code> in cluster.yaml. The digest pins \
         <a href=\"{RELEASE_FILE}\">{RELEASE_FILE}</a>, which pins every artifact below.</p>"
    );
    let _ = writeln!(
        b,
        "<pre>  - version: {}\n    digest: {}</pre>",
        escape(v),
        escape(&e.digest.to_string())
    );
    let _ = writeln!(
        b,
        "<h2>Signature</h2>\n<p>{}</p>",
        match &e.signer {
            Signer::Key(id) => format!(
                "<a href=\"{RELEASE_FILE}.sig\">{RELEASE_FILE}.sig</a> names key <code>{}</code>. \
                 Machines whose trust root lists that key take this release; get the key's \
                 <code>release.pub</code> from its publisher, not from this page.",
                escape(id.as_str())
            ),
            other => format!(
                "{}: machines that check signatures refuse this release.",
                escape(&capitalised(&other.to_string()))
            ),
        }
    );
    // The command a reader copies must be one fetch accepts: with the
    // publisher's key for a signed release, and saying -unsigned for one
    // that is not, so the choice stays visible.
    let trust = match e.signer {
        Signer::Key(_) => "-key release.pub",
        _ => "-unsigned",
    };
    let _ = writeln!(
        b,
        "<h2>Fetch</h2>\n<pre>liken fetch {trust} -digest {} {} {} ./channel</pre>",
        escape(&e.digest.to_string()),
        escape(source),
        escape(v)
    );
    let _ = writeln!(
        b,
        "<h2>Artifacts</h2>\n<table>\n<tr><th>Name</th><th>File</th><th>Size</th><th>SHA-256</th></tr>"
    );
    for a in &e.release.artifacts {
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td><a href=\"{}\">{}</a></td><td>{} ({} bytes)</td><td><code>{}</code></td></tr>",
            escape(&a.name),
            escape(&href_segment(a.file.as_str())),
            escape(a.file.as_str()),
            escape(&human(a.size)),
            a.size,
            escape(a.sha256.as_str())
        );
    }
    let _ = writeln!(b, "</table>");
    if !e.release.components.is_empty() {
        let _ = writeln!(
            b,
            "<h2>Components</h2>\n<table>\n<tr><th>Component</th><th>Version</th></tr>"
        );
        for c in &e.release.components {
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(&c.name),
                escape(&c.version)
            );
        }
        let _ = writeln!(b, "</table>");
    }
    page(&format!("liken {v}"), &b)
}

/// The page that explains mirroring.
pub fn render_mirror(source: &str) -> String {
    let s = escape(source);
    let body = format!(
        "<p><a href=\"./\">All releases</a></p>\n<h1>Mirror this channel</h1>\n\
         <p>A channel is a plain directory: <code>channel.yaml</code> names the latest release, \
         and each <code>&lt;version&gt;/release.yaml</code> names every file of one release by \
         size and SHA-256. Any static web server can share a copy, and machines verify every \
         byte they download, so a mirror needs no trust of its own.</p>\n\
         <p>Copy a release (or <code>latest</code>) from <code>{s}</code>, verifying each file \
         as it arrives. <code>-key</code> names the publisher's public key \
         (<code>release.pub</code>, from the publisher), and fetch takes only what it signed; \
         pin the release with <code>-digest</code> from its catalog entry:</p>\n\
         <pre>liken fetch -key release.pub -digest sha256:&lt;hex&gt; {s} &lt;version&gt; ./channel</pre>\n\
         <p>Share the copy on your network (port 8017 unless you name another address):</p>\n\
         <pre>liken serve ./channel :8017</pre>\n\
         <p>Point the fleet at the mirror in cluster.yaml:</p>\n\
         <pre>spec:\n  releases:\n    source: http://&lt;mirror-host&gt;:8017</pre>\n\
         <p>Scripts can read every release and its digest from \
         <a href=\"{VERSIONS_FILE}\">{VERSIONS_FILE}</a>.</p>\n"
    );
    page("Mirror this liken channel", &body)
}

/// A word with its first letter in upper case.
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn load(
    agent: &ureq::Agent,
    source: &str,
    output: &Path,
    v: &Version,
) -> Result<Entry, IndexError> {
    let local = output.join(v.as_str()).join(RELEASE_FILE);
    let url = format!("{source}/{v}/{RELEASE_FILE}");
    let (bytes, origin) = match fs::read(&local) {
        Ok(b) => (b, local.display().to_string()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (
            client::get_document(agent, &url).map_err(IndexError::Read)?,
            url.clone(),
        ),
        Err(error) => {
            return Err(IndexError::Io {
                doing: format!("reading {}", local.display()),
                error,
            });
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let release: Release = decode::strict(&text, &origin).map_err(IndexError::Document)?;
    if &release.version != v {
        return Err(IndexError::WrongVersion {
            origin,
            found: release.version,
        });
    }
    // The signature comes from where the document came from, so a local
    // release is never shown under a signature the server holds.
    let signature = if origin == url {
        match client::get_document(agent, &signature_name(&url)) {
            Ok(b) => Some(b),
            Err(ClientError::Status { status: 404, .. }) => None,
            Err(e) => return Err(IndexError::Read(e)),
        }
    } else {
        let sig = PathBuf::from(signature_name(&local.to_string_lossy()));
        match fs::read(&sig) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(IndexError::Io {
                    doing: format!("reading {}", sig.display()),
                    error,
                });
            }
        }
    };
    Ok(Entry {
        signer: decide_signer(&bytes, signature.as_deref()),
        release,
        digest: Digest::from(stream::sha256(&bytes)),
    })
}

/// Runs `liken index`.
pub fn run(req: &IndexRequest, out: &mut dyn Write) -> Result<(), IndexError> {
    let source = client::normalize_source(&req.source)
        .ok_or_else(|| IndexError::Source(req.source.clone()))?;
    let versions = release_versions(&req.keys)?;
    let agent = client::agent();
    let entries = versions
        .iter()
        .map(|v| load(&agent, source, &req.output, v))
        .collect::<Result<Vec<_>, _>>()?;

    let write = |rel: &Path, text: &str| -> Result<(), IndexError> {
        let path = req.output.join(rel);
        let io = |error| IndexError::Io {
            doing: format!("writing {}", path.display()),
            error,
        };
        fs::create_dir_all(files::parent(&path)).map_err(io)?;
        files::replace(&path, text.as_bytes(), files::PUBLIC).map_err(io)
    };
    for e in &entries {
        write(
            &Path::new(e.release.version.as_str()).join("index.html"),
            &render_release(source, e),
        )?;
    }
    write(Path::new("mirror.html"), &render_mirror(source))?;
    write(Path::new(VERSIONS_FILE), &render_versions(source, &entries))?;
    // The front page last: once it links a release, that release's page
    // exists.
    write(Path::new("index.html"), &render_front(source, &entries))?;
    let w = |error| IndexError::Io {
        doing: "writing output".into(),
        error,
    };
    writeln!(
        out,
        "indexed {} release{} into {}: index.html, mirror.html, {VERSIONS_FILE} and a page per release",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        req.output.display()
    )
    .map_err(w)?;
    for e in &entries {
        let signer = match &e.signer {
            Signer::Key(_) | Signer::OtherBytes(_) => format!("signed by {}", e.signer),
            other => other.to_string(),
        };
        writeln!(out, "  {}: {signer}", e.release.version).map_err(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::release::{Artifact, Component};

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn picks_release_documents_from_keys() {
        let v = release_versions(&keys(&[
            "channel.yaml",
            "2026.07.11-001/release.yaml",
            "2026.07.11-001/vmlinuz",
            "./2026.08.01-001/release.yaml",
            "/2026.07.11-002/release.yaml",
            "2026.07.11-001/release.yaml",
            "stable/2026.07.11-003/release.yaml",
            "notes/release.yaml",
            "index.html",
        ]))
        .unwrap();
        let v: Vec<&str> = v.iter().map(|v| v.as_str()).collect();
        assert_eq!(v, ["2026.08.01-001", "2026.07.11-002", "2026.07.11-001"]);
        let e = release_versions(&keys(&["2026.02.30-001/release.yaml"])).unwrap_err();
        assert!(e.to_string().contains("does not name a real date"), "{e}");
        let mut input: &[u8] = b" a \n\n b\r\n";
        assert_eq!(read_keys(&mut input).unwrap(), ["a", "b"]);
    }

    #[test]
    fn pages_escape_what_the_channel_says() {
        let entry = Entry {
            release: Release::new(
                Version::parse("2026.07.11-001").unwrap(),
                vec![Artifact {
                    name: "kernel".into(),
                    file: liken_api::FileName::parse("<script>x.img").unwrap(),
                    sha256: liken_api::Sha256Hex::parse(&"a".repeat(64)).unwrap(),
                    size: 2048,
                }],
                vec![Component {
                    name: "k3s".into(),
                    version: "v1<b>".into(),
                }],
            ),
            digest: Digest::parse(&format!("sha256:{}", "b".repeat(64))).unwrap(),
            signer: Signer::Unreadable,
        };
        let page = render_release("http://h/\"><x", &entry);
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;x.img"));
        assert!(page.contains("href=\"%3Cscript%3Ex.img\""));
        assert!(page.contains("v1&lt;b&gt;"));
        assert!(page.contains("http://h/&quot;&gt;&lt;x"));
        assert!(page.contains(&format!("    digest: sha256:{}", "b".repeat(64))));
        let front = render_front("http://h", std::slice::from_ref(&entry));
        assert!(front.contains("href=\"2026.07.11-001/\""));
        let versions = render_versions("http://h", &[entry]);
        let body: serde_yaml::Value = serde_yaml::from_str(&versions).unwrap();
        assert_eq!(body["latest"].as_str(), Some("2026.07.11-001"));
        assert_eq!(
            body["versions"][0]["digest"].as_str().unwrap(),
            format!("sha256:{}", "b".repeat(64))
        );
        assert!(render_front("http://h", &[]).contains("no releases yet"));
    }

    #[test]
    fn the_signer_is_the_key_over_these_bytes() {
        let (key, _) = liken_api::signing::key_pair([4; 32]);
        let bytes = b"kind: Release\n";
        let sig = |b: &[u8]| decode::to_yaml(&key.sign(b)).unwrap().into_bytes();
        assert_eq!(decide_signer(bytes, None), Signer::Unsigned);
        assert_eq!(
            decide_signer(bytes, Some(&sig(bytes))),
            Signer::Key(key.id.clone())
        );
        assert_eq!(
            decide_signer(bytes, Some(&sig(b"other"))),
            Signer::OtherBytes(key.id.clone())
        );
        assert_eq!(decide_signer(bytes, Some(b"\xff\x00")), Signer::Unreadable);
        assert_eq!(Signer::Unreadable.to_string(), "unreadable signature");
        assert_eq!(Signer::Unsigned.to_string(), "unsigned");
        assert_eq!(
            Signer::Key(key.id.clone()).to_string(),
            format!("key {}", key.id)
        );
    }

    #[test]
    fn pages_show_who_signed_and_a_fetch_command_that_works() {
        let (key, _) = liken_api::signing::key_pair([4; 32]);
        let mut entry = Entry {
            release: Release::new(
                Version::parse("2026.07.11-001").unwrap(),
                vec![Artifact {
                    name: "kernel".into(),
                    file: liken_api::FileName::parse("vmlinuz").unwrap(),
                    sha256: liken_api::Sha256Hex::parse(&"a".repeat(64)).unwrap(),
                    size: 1,
                }],
                vec![],
            ),
            digest: Digest::parse(&format!("sha256:{}", "b".repeat(64))).unwrap(),
            signer: Signer::Key(key.id.clone()),
        };
        let page = render_release("http://h", &entry);
        assert!(
            page.contains(&format!("names key <code>{}</code>", key.id)),
            "{page}"
        );
        assert!(
            page.contains("liken fetch -key release.pub -digest sha256:"),
            "{page}"
        );
        let front = render_front("http://h", std::slice::from_ref(&entry));
        assert!(
            front.contains("<th>Signed by</th>")
                && front.contains(&format!("<td>key {}</td></tr>", key.id)),
            "{front}"
        );
        entry.signer = Signer::Unsigned;
        let page = render_release("http://h", &entry);
        assert!(page.contains("<p>Unsigned: machines that check"), "{page}");
        assert!(page.contains("liken fetch -unsigned -digest"), "{page}");
        let front = render_front("http://h", &[entry]);
        assert!(front.contains("<td>unsigned</td></tr>"), "{front}");
    }
}
