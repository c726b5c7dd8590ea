//! Image references (`registry/path:tag`), as a pod spec names an
//! operator's image, and the CLI image derived from one.
//!
//! The grammar is the distribution project's: the first path component is
//! a registry host when it has a dot or a port or is `localhost`;
//! otherwise the image is on Docker Hub, whose API host is
//! `registry-1.docker.io` and whose one-component names live under
//! `library/`. A reference pinned by digest names no version, so no CLI
//! can be derived from it: the CLI is found by the operator's tag.

use std::fmt;

/// A parsed `host/path:tag` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The registry as written (`127.0.0.1:5000`, `ghcr.io`, `docker.io`).
    pub registry: String,
    /// The repository path (`liken-sh/audio-operator`).
    pub repository: String,
    /// The tag (`2026.07.11-001`).
    pub tag: String,
}

/// Why a reference cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReferenceError {
    /// Pinned by digest: no tag to take the version from.
    Digest(String),
    /// Not in the reference grammar.
    Invalid(String),
}

impl fmt::Display for ReferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReferenceError::Digest(r) => write!(
                f,
                "the operator image {r:?} is pinned by digest and names no version tag, so \
                 there is no CLI image to match it; give the workload's image a tag"
            ),
            ReferenceError::Invalid(r) => write!(
                f,
                "{r:?} is not an image reference of the form registry/path:tag"
            ),
        }
    }
}

impl std::error::Error for ReferenceError {}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.registry, self.repository, self.tag)
    }
}

fn is_component(c: &str) -> bool {
    // [a-z0-9]+ separated by one of . _ __ or any run of -.
    let bytes = c.as_bytes();
    if bytes.is_empty()
        || !bytes[0].is_ascii_alphanumeric()
        || !bytes[bytes.len() - 1].is_ascii_alphanumeric()
    {
        return false;
    }
    c.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
        && !c.contains("..")
        && !c.contains("___")
}

fn is_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && !t.starts_with(['.', '-'])
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_host(h: &str) -> bool {
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
}

impl Reference {
    /// Parses a tagged reference. A reference without a tag means
    /// `latest`, as every container runtime reads it.
    pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
        if text.contains('@') {
            return Err(ReferenceError::Digest(text.to_owned()));
        }
        let invalid = || ReferenceError::Invalid(text.to_owned());
        let (registry, rest) = match text.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                if !is_host(first) {
                    return Err(invalid());
                }
                (first.to_owned(), rest)
            }
            _ => ("docker.io".to_owned(), text),
        };
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (path, tag) = match rest[last_slash..].rsplit_once(':') {
            Some((_, tag)) => (&rest[..rest.len() - tag.len() - 1], tag),
            None => (rest, "latest"),
        };
        if !is_tag(tag) || !path.split('/').all(is_component) {
            return Err(invalid());
        }
        let repository = if registry == "docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_owned()
        };
        Ok(Reference {
            registry,
            repository,
            tag: tag.to_owned(),
        })
    }

    /// The CLI image an operator image ships beside it: the repository
    /// with `-cli` appended, the same tag, so the CLI is the very version
    /// of the operator it talks to.
    pub fn cli(&self) -> Reference {
        Reference {
            registry: self.registry.clone(),
            repository: format!("{}-cli", self.repository),
            tag: self.tag.clone(),
        }
    }

    /// The host the distribution API is served from.
    pub fn api_host(&self) -> &str {
        if self.registry == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }

    /// `https://host`, or `http://host` for a registry on this machine's
    /// loopback, which container runtimes also reach without TLS.
    pub fn base_url(&self) -> String {
        let host = self.api_host();
        let scheme = if is_loopback(host) { "http" } else { "https" };
        format!("{scheme}://{host}")
    }
}

/// Whether a `host[:port]` is this machine: `localhost`, 127.0.0.0/8 or
/// `[::1]`.
pub fn is_loopback(host_port: &str) -> bool {
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Reference {
        Reference::parse(text).unwrap()
    }

    #[test]
    fn registry_path_and_tag() {
        assert_eq!(
            r("127.0.0.1:5000/liken/audio-operator:2026.07.11-001"),
            Reference {
                registry: "127.0.0.1:5000".into(),
                repository: "liken/audio-operator".into(),
                tag: "2026.07.11-001".into()
            }
        );
        assert_eq!(r("ghcr.io/liken-sh/media-operator").tag, "latest");
        assert_eq!(r("localhost/x:1").registry, "localhost");
        let hub = r("busybox:1.36");
        assert_eq!(
            (hub.registry.as_str(), hub.repository.as_str()),
            ("docker.io", "library/busybox")
        );
        assert_eq!(hub.api_host(), "registry-1.docker.io");
        assert_eq!(r("someone/tool:v1").repository, "someone/tool");
    }

    #[test]
    fn the_cli_image_sits_beside_the_operator_at_the_same_tag() {
        let cli = r("ghcr.io/liken-sh/audio-operator:v1.2.0").cli();
        assert_eq!(
            cli.to_string(),
            "ghcr.io/liken-sh/audio-operator-cli:v1.2.0"
        );
        assert_eq!(cli.base_url(), "https://ghcr.io");
        assert_eq!(r("127.0.0.1:5000/a:1").base_url(), "http://127.0.0.1:5000");
        assert_eq!(r("localhost:5000/a:1").base_url(), "http://localhost:5000");
    }

    #[test]
    fn bad_and_pinned_references_are_refused() {
        assert!(matches!(
            Reference::parse("ghcr.io/a/b@sha256:0000"),
            Err(ReferenceError::Digest(_))
        ));
        for bad in [
            "",
            "Upper/case:1",
            "ghcr.io/a/../b:1",
            "ghcr.io/a/b:",
            "ghcr.io/a/b:-x",
            "host:port/a:1",
            "a//b:1",
            "ghcr.io/a b:1",
        ] {
            assert!(
                matches!(Reference::parse(bad), Err(ReferenceError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.3.0.1",
            "[::1]:5000",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["ghcr.io", "10.0.0.1:5000", "localhost.example"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
