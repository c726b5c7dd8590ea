//! A reader of the OCI distribution API: manifests and blobs by digest,
//! each checked against the digest that named it, with the bearer-token
//! challenge registries use for access control.
//!
//! Anonymous pulls only: when a registry answers 401 with
//! `WWW-Authenticate: Bearer realm=...,service=...,scope=...`, a token is
//! asked of the realm with no credentials (what public images need) and
//! the request is sent again with it; tokens are kept per repository for
//! the run. A registry that wants a password (Basic, or a token realm
//! that refuses anonymous requests) gets a message saying so.
//!
//! Nothing read is trusted before its digest is checked: a manifest asked
//! for by digest must hash to it, one asked for by tag must hash to the
//! `Docker-Content-Digest` the registry names when it names one, and a
//! blob must have exactly its descriptor's size and digest. Blobs go to a
//! file while they are hashed, so a layer of any size never sits in
//! memory, and the caller reads the file only after [`Registry::blob_to`]
//! has verified it.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use liken_api::Digest;
use sha2::{Digest as _, Sha256};

use super::oci::{self, Descriptor, DocumentKind};
use super::reference::{Reference, is_loopback};

/// The largest manifest or index read (the distribution spec lets
/// registries refuse manifests over 4 MiB).
pub const MAX_MANIFEST: u64 = 4 << 20;
/// The largest token answer read.
const MAX_TOKEN: u64 = 1 << 20;
/// The largest error body kept for its message.
const MAX_ERROR: u64 = 64 << 10;

/// Why a registry request failed.
#[derive(Debug)]
pub enum RegistryError {
    /// The request did not complete.
    Transport {
        /// The URL.
        url: String,
        /// ureq's description.
        error: String,
    },
    /// The registry answered with an unexpected status.
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The registry's own error message, when it gave one.
        message: String,
    },
    /// The image or tag does not exist.
    NotFound {
        /// The image.
        image: String,
    },
    /// The registry wants credentials this pull does not have.
    Unauthorized {
        /// The URL.
        url: String,
        /// What the registry said.
        detail: String,
    },
    /// The token realm did not give a token.
    Token {
        /// The realm.
        realm: String,
        /// Why.
        detail: String,
    },
    /// The content does not hash to the digest that named it.
    Digest {
        /// What was read.
        what: String,
        /// The digest that named it.
        expected: String,
        /// What it hashes to.
        actual: String,
    },
    /// A blob is not the size its descriptor says.
    Size {
        /// What was read.
        what: String,
        /// The descriptor's size.
        expected: u64,
    },
    /// A manifest or token answer over its cap.
    TooLarge {
        /// What was read.
        what: String,
        /// The cap.
        limit: u64,
    },
    /// A manifest response of a type this pull does not read.
    MediaType {
        /// What was read.
        what: String,
        /// Its Content-Type.
        media_type: String,
    },
    /// Writing a blob to its file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Transport { url, error } => write!(
                f,
                "GET {url}: {error}; check that the registry is reachable from this workstation"
            ),
            RegistryError::Status {
                url,
                status,
                message,
            } => {
                write!(f, "GET {url}: the registry answered {status}")?;
                if !message.is_empty() {
                    write!(f, " ({message})")?;
                }
                Ok(())
            }
            RegistryError::NotFound { image } => write!(
                f,
                "the registry has no image {image}; the operator's CLI image must be published \
                 beside its image with the same tag"
            ),
            RegistryError::Unauthorized { url, detail } => write!(
                f,
                "GET {url}: the registry refused an anonymous pull ({detail}); liken pulls plugin \
                 CLIs without credentials, so the CLI image must be public"
            ),
            RegistryError::Token { realm, detail } => {
                write!(f, "asking {realm} for a pull token: {detail}")
            }
            RegistryError::Digest {
                what,
                expected,
                actual,
            } => write!(
                f,
                "{what} hashes to {actual}, not {expected}: it is not what the image names, so \
                 it was refused; the registry or something between it and you altered it"
            ),
            RegistryError::Size { what, expected } => write!(
                f,
                "{what} is not the {expected} bytes its descriptor says, so it was refused"
            ),
            RegistryError::TooLarge { what, limit } => {
                write!(f, "{what} is larger than {limit} bytes, so it was refused")
            }
            RegistryError::MediaType { what, media_type } => write!(
                f,
                "{what} is a {media_type:?}, not an OCI or Docker v2 image index or manifest"
            ),
            RegistryError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for RegistryError {}

/// A `WWW-Authenticate: Bearer` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The token endpoint.
    pub realm: String,
    /// The service the token is for.
    pub service: Option<String>,
    /// The scope the registry asks for.
    pub scope: Option<String>,
}

/// Reads a Bearer challenge (`Bearer realm="...",service="...",...`);
/// `None` for another scheme or a challenge without a realm.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let (scheme, mut rest) = header.trim().split_once(char::is_whitespace)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params: HashMap<String, String> = HashMap::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        params.insert(key.trim().to_ascii_lowercase(), value.to_owned());
        rest = after;
    }
    Some(Challenge {
        realm: params.remove("realm")?,
        service: params.remove("service"),
        scope: params.remove("scope"),
    })
}

/// The token request URL for a challenge, for `repository`.
pub fn token_url(c: &Challenge, repository: &str) -> String {
    let scope = c
        .scope
        .clone()
        .unwrap_or_else(|| format!("repository:{repository}:pull"));
    let mut url = c.realm.clone();
    let mut sep = if url.contains('?') { '&' } else { '?' };
    if let Some(service) = &c.service {
        url.push_str(&format!(
            "{sep}service={}",
            liken_kube::request::encode(service)
        ));
        sep = '&';
    }
    url.push_str(&format!(
        "{sep}scope={}",
        liken_kube::request::encode(&scope)
    ));
    url
}

/// A manifest or index as read and verified.
#[derive(Clone, Debug)]
pub struct Document {
    /// Index or manifest.
    pub kind: DocumentKind,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// One registry session: an agent and the tokens it was given.
pub struct Registry {
    agent: ureq::Agent,
    tokens: HashMap<String, String>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

impl Registry {
    /// A session with liken's timeouts. Statuses are answers, and
    /// redirects (to blob storage) are followed without the token.
    pub fn new() -> Registry {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(Duration::from_secs(30)))
            .user_agent(format!("liken/{}", liken_api::BUILD_VERSION))
            .build()
            .into();
        Registry {
            agent,
            tokens: HashMap::new(),
        }
    }

    /// GETs `path` of `image`'s registry, answering a Bearer challenge
    /// once. Returns the response with a 2xx, or the error.
    fn get(
        &mut self,
        image: &Reference,
        path: &str,
        accept: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, RegistryError> {
        let url = format!("{}/v2/{}/{path}", image.base_url(), image.repository);
        let mut asked_for_token = false;
        loop {
            let mut req = self.agent.get(&url);
            if let Some(a) = accept {
                req = req.header("Accept", a);
            }
            if let Some(t) = self.tokens.get(&image.repository) {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            let resp = req.call().map_err(|e| RegistryError::Transport {
                url: url.clone(),
                error: e.to_string(),
            })?;
            let status = resp.status().as_u16();
            if (200..300).contains(&status) {
                return Ok(resp);
            }
            let challenge = resp
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let message = error_message(resp);
            match status {
                401 if !asked_for_token => {
                    let Some(c) = challenge.as_deref().and_then(parse_challenge) else {
                        return Err(RegistryError::Unauthorized {
                            url,
                            detail: challenge.unwrap_or_else(|| "no challenge".to_owned()),
                        });
                    };
                    let token = self.token(&c, &image.repository)?;
                    self.tokens.insert(image.repository.clone(), token);
                    asked_for_token = true;
                }
                401 => {
                    return Err(RegistryError::Unauthorized {
                        url,
                        detail: format!("the token it issued was refused: {message}"),
                    });
                }
                404 => {
                    return Err(RegistryError::NotFound {
                        image: image.to_string(),
                    });
                }
                _ => {
                    return Err(RegistryError::Status {
                        url,
                        status,
                        message,
                    });
                }
            }
        }
    }

    fn token(&self, c: &Challenge, repository: &str) -> Result<String, RegistryError> {
        let fail = |detail: String| RegistryError::Token {
            realm: c.realm.clone(),
            detail,
        };
        if !(c.realm.starts_with("https://")
            || c.realm.starts_with("http://")
                && is_loopback(c.realm["http://".len()..].split('/').next().unwrap_or("")))
        {
            return Err(fail(
                "the realm is not an https URL (or http on this machine's loopback)".to_owned(),
            ));
        }
        let url = token_url(c, repository);
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(fail(format!(
                "the realm answered {status}; the CLI image must be public, because liken pulls \
                 plugin CLIs without credentials"
            )));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_TOKEN)
            .read_to_vec()
            .map_err(|e| fail(e.to_string()))?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let a: Answer = serde_json::from_slice(&body).map_err(|e| fail(e.to_string()))?;
        a.token
            .or(a.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| fail("the answer holds no token".to_owned()))
    }

    /// Reads a manifest or index by tag or digest. By digest, it must hash
    /// to it; by tag, to the Docker-Content-Digest the registry names.
    pub fn manifest(
        &mut self,
        image: &Reference,
        by: &str,
        expect: Option<&Digest>,
    ) -> Result<Document, RegistryError> {
        let what = format!("the manifest {}@{by}", image.repository);
        let mut resp = self.get(image, &format!("manifests/{by}"), Some(oci::ACCEPT))?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let media_type = header("content-type");
        let named = header("docker-content-digest");
        let bytes = match resp
            .body_mut()
            .with_config()
            .limit(MAX_MANIFEST)
            .read_to_vec()
        {
            Ok(b) => b,
            Err(ureq::Error::BodyExceedsLimit(_)) => {
                return Err(RegistryError::TooLarge {
                    what,
                    limit: MAX_MANIFEST,
                });
            }
            Err(e) => {
                return Err(RegistryError::Transport {
                    url: what,
                    error: e.to_string(),
                });
            }
        };
        let actual = sha256_hex(&bytes);
        let expected = match expect {
            Some(d) => Some(d.to_string()),
            None if !named.is_empty() => Some(named),
            None => None,
        };
        if let Some(expected) = expected
            && expected != actual
        {
            return Err(RegistryError::Digest {
                what,
                expected,
                actual,
            });
        }
        // The Content-Type decides, and a registry that leaves it generic
        // still has the document's own mediaType field.
        let kind = oci::decide_kind(&media_type).or_else(|| {
            #[derive(serde::Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Typed {
                media_type: Option<String>,
            }
            serde_json::from_slice::<Typed>(&bytes)
                .ok()
                .and_then(|t| t.media_type)
                .and_then(|m| oci::decide_kind(&m))
        });
        let Some(kind) = kind else {
            return Err(RegistryError::MediaType { what, media_type });
        };
        Ok(Document { kind, bytes })
    }

    /// Streams a blob into `file` (at `path`, for messages) while hashing
    /// it; fails unless it is exactly the descriptor's size and digest.
    pub fn blob_to(
        &mut self,
        image: &Reference,
        desc: &Descriptor,
        file: &mut dyn Write,
        path: &std::path::Path,
    ) -> Result<(), RegistryError> {
        let what = format!("the blob {}@{}", image.repository, desc.digest);
        let resp = self.get(image, &format!("blobs/{}", desc.digest), None)?;
        let mut reader = resp
            .into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader()
            .take(desc.size.saturating_add(1));
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut total: u64 = 0;
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| RegistryError::Transport {
                    url: what.clone(),
                    error: e.to_string(),
                })?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > desc.size {
                return Err(RegistryError::Size {
                    what,
                    expected: desc.size,
                });
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|source| RegistryError::Io {
                    path: path.to_owned(),
                    source,
                })?;
        }
        if total != desc.size {
            return Err(RegistryError::Size {
                what,
                expected: desc.size,
            });
        }
        let actual = format!("sha256:{:x}", hasher.finalize());
        if actual != desc.digest.to_string() {
            return Err(RegistryError::Digest {
                what,
                expected: desc.digest.to_string(),
                actual,
            });
        }
        Ok(())
    }

    /// Reads a small blob (an image config) into memory, verified.
    pub fn blob(&mut self, image: &Reference, desc: &Descriptor) -> Result<Vec<u8>, RegistryError> {
        if desc.size > MAX_MANIFEST {
            return Err(RegistryError::TooLarge {
                what: format!("the blob {}@{}", image.repository, desc.digest),
                limit: MAX_MANIFEST,
            });
        }
        let mut bytes = Vec::new();
        self.blob_to(image, desc, &mut bytes, std::path::Path::new("memory"))?;
        Ok(bytes)
    }
}

/// The registry's error message from an error body
/// (`{"errors":[{"code":..,"message":..}]}`), or empty.
fn error_message(resp: ureq::http::Response<ureq::Body>) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<One>,
    }
    #[derive(serde::Deserialize)]
    struct One {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let mut buf = Vec::new();
    let _ = resp
        .into_body()
        .into_with_config()
        .limit(u64::MAX)
        .reader()
        .take(MAX_ERROR)
        .read_to_end(&mut buf);
    serde_json::from_slice::<Errors>(&buf)
        .map(|e| {
            e.errors
                .iter()
                .map(|o| format!("{}: {}", o.code, o.message))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read_with_quoted_commas() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b-cli:pull,push""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b-cli:pull,push".into()),
            }
        );
        assert_eq!(
            token_url(&c, "a/b-cli"),
            "https://auth.example/token?service=registry.example&scope=repository%3Aa%2Fb-cli%3Apull%2Cpush"
        );
        let bare = parse_challenge("bearer realm=http://127.0.0.1:1/t").unwrap();
        assert_eq!(
            token_url(&bare, "x"),
            "http://127.0.0.1:1/t?scope=repository%3Ax%3Apull"
        );
        assert_eq!(parse_challenge(r#"Basic realm="registry""#), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
        assert_eq!(parse_challenge(r#"Bearer realm="unterminated"#), None);
    }
}
