//! The HTTP client side: one ureq agent shape for fetch and index.
//!
//! Statuses are answers, not errors (`http_status_as_error(false)`), so
//! a 206 or 416 reaches the caller's decision and a 404 gets a message
//! that names the URL. Every document read is capped: a channel is
//! untrusted until its bytes are hashed, and ureq's readers have no limit
//! of their own. Timeouts bound each phase and each read, never the
//! whole body, because a 1 GiB artifact over a slow link is legitimate.
//!
//! Redirects are followed here, not by ureq, so each hop is decided
//! ([`decide_redirect`]): up to [`MAX_REDIRECTS`] hops on the same host,
//! never from https down to http. What the source URL names is what the
//! person chose to trust (and, with https, what its certificate proves);
//! a hop to another host or to plain http would hand the download to a
//! party nobody chose. Digests still decide what is used, but a
//! download from the wrong place is refused before it starts.
//!
//! https is checked against the built-in Mozilla roots, or, for a
//! channel served under a private CA, against only the CA certificates a
//! person names ([`agent_with_ca`], fetch's `-ca`, as curl's `--cacert`).
//! Verification is never turned off.

use std::fmt;
use std::time::Duration;

use ureq::http::Uri;

use crate::terminal::escape;

/// The most bytes release.yaml or channel.yaml may have.
pub const MAX_DOCUMENT: u64 = 1 << 20;

/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 5;

/// An agent with liken's timeouts and user agent. It follows no
/// redirect itself: [`get`] decides each one.
pub fn agent() -> ureq::Agent {
    config().build().into()
}

/// As [`agent`], trusting for https only the CA certificates in
/// `ca_pem` (one or more PEM certificates) in place of the built-in
/// roots. Errors name what is wrong with the bundle.
pub fn agent_with_ca(ca_pem: &[u8]) -> Result<ureq::Agent, String> {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(ca_pem) {
        match item.map_err(|e| format!("is not PEM: {e}"))? {
            PemItem::Certificate(c) => certs.push(c),
            _ => return Err("holds something other than certificates".into()),
        }
    }
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build();
    Ok(config().tls_config(tls).build().into())
}

fn config() -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_response(Some(Duration::from_secs(30)))
        .timeout_per_read(Some(Duration::from_secs(30)))
        .timeout_per_write(Some(Duration::from_secs(30)))
        .user_agent(format!("liken/{}", liken_api::BUILD_VERSION))
        // Bulk reads go straight to the socket in large pieces.
        .input_buffer_size(256 << 10)
}

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// The request did not complete (DNS, connect, TLS, timeout, reset).
    Transport {
        /// The URL.
        url: String,
        /// ureq's description.
        error: ureq::Error,
    },
    /// The server answered with an unexpected status.
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The document is larger than [`MAX_DOCUMENT`].
    TooLarge {
        /// The URL.
        url: String,
    },
    /// The server redirects where liken does not follow.
    Redirect {
        /// The URL that answered with the redirect.
        url: String,
        /// Its Location, as sent.
        location: String,
        /// Why it is not followed.
        reason: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects.
    TooManyRedirects {
        /// The URL first asked for.
        url: String,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Transport { url, error } => write!(
                f,
                "GET {url}: {error}; check the source URL and that its server is reachable"
            ),
            ClientError::Status { url, status: 404 } => write!(
                f,
                "GET {url}: 404 Not Found; check the source URL and the version \
                 (the channel's versions.yaml lists what it holds)"
            ),
            ClientError::Status { url, status } => {
                write!(f, "GET {url}: the server answered {status}")
            }
            ClientError::TooLarge { url } => write!(
                f,
                "GET {url}: the document is larger than {} and is not a liken document",
                crate::size::human(MAX_DOCUMENT)
            ),
            ClientError::Redirect {
                url,
                location,
                reason,
            } => write!(
                f,
                "GET {}: the server redirects to {}, which liken does not follow ({reason}); \
                 if that is really where the channel lives, give its URL as the source",
                escape(url),
                escape(location)
            ),
            ClientError::TooManyRedirects { url } => write!(
                f,
                "GET {}: more than {MAX_REDIRECTS} redirects; give the channel's final URL as \
                 the source",
                escape(url)
            ),
        }
    }
}

impl std::error::Error for ClientError {}

/// Whether `source` is an http(s) URL; returns it without trailing `/`.
pub fn normalize_source(source: &str) -> Option<&str> {
    let rest = source
        .strip_prefix("http://")
        .or_else(|| source.strip_prefix("https://"))?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || source.contains(char::is_whitespace) {
        return None;
    }
    Some(source.trim_end_matches('/'))
}

/// Where a redirect leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// Follow it to this absolute URL.
    Follow(String),
    /// Refuse it, for this reason.
    Refuse(String),
}

/// Decides a redirect from `from` to `location` (absolute, scheme-relative,
/// or a path): followed only to http or https on the same host (any
/// port), and from https only to https.
pub fn decide_redirect(from: &str, location: &str) -> Redirect {
    let Ok(base) = from.parse::<Uri>() else {
        return Redirect::Refuse(format!("{from:?} is not a URL"));
    };
    let (Some(scheme), Some(authority)) = (base.scheme_str(), base.authority()) else {
        return Redirect::Refuse(format!("{from:?} is not an absolute URL"));
    };
    let location = location.trim();
    let target = if location.contains("://") {
        location.to_owned()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        // A relative path replaces the last segment of the base path.
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    };
    let Ok(to) = target.parse::<Uri>() else {
        return Redirect::Refuse("the Location is not a URL".into());
    };
    match to.scheme_str() {
        Some("https") => {}
        Some("http") if scheme == "http" => {}
        Some("http") => return Redirect::Refuse("it leaves https for plain http".into()),
        _ => return Redirect::Refuse("it is not an http or https URL".into()),
    }
    let same_host = match (base.host(), to.host()) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        _ => false,
    };
    if !same_host {
        return Redirect::Refuse(format!(
            "it leads to another host than {}",
            base.host().unwrap_or_default()
        ));
    }
    Redirect::Follow(target)
}

/// GETs `url` with the given header fields, following redirects as
/// [`decide_redirect`] allows. Returns the response, whatever its
/// status, and the URL that gave it.
pub fn get(
    agent: &ureq::Agent,
    url: &str,
    fields: &[(&str, String)],
) -> Result<(ureq::http::Response<ureq::Body>, String), ClientError> {
    let mut current = url.to_owned();
    for _ in 0..=MAX_REDIRECTS {
        let mut request = agent.get(&current);
        for (name, value) in fields {
            request = request.header(*name, value);
        }
        let resp = request.call().map_err(|error| ClientError::Transport {
            url: current.clone(),
            error,
        })?;
        let status = resp.status().as_u16();
        if !matches!(status, 301 | 302 | 303 | 307 | 308) {
            return Ok((resp, current));
        }
        let location = resp
            .headers()
            .get("location")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        match decide_redirect(&current, &location) {
            Redirect::Follow(next) => current = next,
            Redirect::Refuse(reason) => {
                return Err(ClientError::Redirect {
                    url: current,
                    location,
                    reason,
                });
            }
        }
    }
    Err(ClientError::TooManyRedirects {
        url: url.to_owned(),
    })
}

/// GETs a small document in full.
pub fn get_document(agent: &ureq::Agent, url: &str) -> Result<Vec<u8>, ClientError> {
    let (mut resp, url) = get(agent, url, &[])?;
    let url = url.as_str();
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(ClientError::Status {
            url: url.to_owned(),
            status,
        });
    }
    match resp
        .body_mut()
        .with_config()
        .limit(MAX_DOCUMENT)
        .read_to_vec()
    {
        Ok(b) => Ok(b),
        Err(ureq::Error::BodyExceedsLimit(_)) => Err(ClientError::TooLarge {
            url: url.to_owned(),
        }),
        Err(error) => Err(ClientError::Transport {
            url: url.to_owned(),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_http_urls() {
        assert_eq!(normalize_source("http://h:8017/"), Some("http://h:8017"));
        assert_eq!(
            normalize_source("https://releases.example/stable"),
            Some("https://releases.example/stable")
        );
        for bad in ["ftp://h", "h:8017", "http://", "http:///x", "http://a b"] {
            assert_eq!(normalize_source(bad), None, "{bad}");
        }
    }

    #[test]
    fn redirects_stay_on_the_host_and_never_leave_https() {
        let follow = |s: &str| Redirect::Follow(s.to_owned());
        for (from, location, want) in [
            (
                "http://h/stable/v/release.yaml",
                "http://h/mirror/v/release.yaml",
                follow("http://h/mirror/v/release.yaml"),
            ),
            (
                "http://h:8017/a/b",
                "https://h/a/b",
                follow("https://h/a/b"),
            ),
            ("https://h/a/b", "/c/d", follow("https://h/c/d")),
            ("https://h:8443/a/b", "c", follow("https://h:8443/a/c")),
            ("https://h/a", "//h/z", follow("https://h/z")),
            (
                "https://H.example/a",
                "https://h.EXAMPLE/b",
                follow("https://h.EXAMPLE/b"),
            ),
            ("http://h/a", "http://h:9000/a", follow("http://h:9000/a")),
        ] {
            assert_eq!(
                decide_redirect(from, location),
                want,
                "{from} -> {location}"
            );
        }
        for (from, location, why) in [
            ("https://h/a", "http://h/a", "plain http"),
            ("https://h/a", "//other/a", "another host"),
            ("http://h/a", "http://other/a", "another host"),
            (
                "http://127.0.0.1:1/a",
                "http://localhost:1/a",
                "another host",
            ),
            ("https://h/a", "ftp://h/a", "not an http"),
            ("https://h/a", "file:///etc/passwd", "URL"),
        ] {
            match decide_redirect(from, location) {
                Redirect::Refuse(r) => assert!(r.contains(why), "{from} -> {location}: {r}"),
                other => panic!("{from} -> {location}: {other:?}"),
            }
        }
    }
}
