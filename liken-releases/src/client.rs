//! The HTTP client side: one ureq agent shape for fetch and index.
//!
//! Statuses are answers, not errors (`http_status_as_error(false)`), so
//! a 206 or 416 reaches the caller's decision and a 404 gets a message
//! that names the URL. Every document read is capped: a channel is
//! untrusted until its bytes are hashed, and ureq's readers have no limit
//! of their own. Timeouts bound each phase and each read, never the
//! whole body, because a 1 GiB artifact over a slow link is legitimate.

use std::fmt;
use std::time::Duration;

/// The most bytes release.yaml or channel.yaml may have.
pub const MAX_DOCUMENT: u64 = 1 << 20;

/// An agent with liken's timeouts and user agent.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_response(Some(Duration::from_secs(30)))
        .timeout_per_read(Some(Duration::from_secs(30)))
        .timeout_per_write(Some(Duration::from_secs(30)))
        .user_agent(format!("liken/{}", liken_api::BUILD_VERSION))
        // Bulk reads go straight to the socket in large pieces.
        .input_buffer_size(256 << 10)
        .build()
        .into()
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

/// GETs a small document in full.
pub fn get_document(agent: &ureq::Agent, url: &str) -> Result<Vec<u8>, ClientError> {
    let mut resp = agent
        .get(url)
        .call()
        .map_err(|error| ClientError::Transport {
            url: url.to_owned(),
            error,
        })?;
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
}
