//! The errors a request can end in, typed by what the caller does next.
//!
//! A controller branches on a handful of answers: the object is not there
//! (NotFound), someone wrote first (Conflict), the resourceVersion is too
//! old to resume from (Gone), the credentials are wrong (Unauthorized) or
//! lack a permission (Forbidden). Everything else keeps the HTTP code and
//! the server's own `Status` message, which is what a person needs to read
//! (a CRD validation failure names the field and the rule).
//!
//! Failures before an answer arrives (DNS, TLS, a timeout, a dropped
//! connection) are `Transport`; an answer liken cannot read is `Decode`.
//! Each variant names the request (`GET /apis/...`) it belongs to.

use std::fmt;

use serde::Deserialize;

/// Why a request to the API server did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// 404: the object (or the resource type) does not exist.
    NotFound {
        /// The request, as `METHOD /path`.
        what: String,
        /// The server's message.
        message: String,
    },
    /// 409 with reason AlreadyExists: a create found the name taken.
    AlreadyExists {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
    },
    /// 409: the write named an old resourceVersion; someone else wrote
    /// first. Read again and retry.
    Conflict {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
    },
    /// 410: the resourceVersion is older than the server keeps; a watch
    /// must list again.
    Gone {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
    },
    /// 403: the identity is known but RBAC does not allow this.
    Forbidden {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
    },
    /// 401: the server did not accept the credentials.
    Unauthorized {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
    },
    /// Any other non-success answer, with the server's Status message.
    Other {
        /// The request.
        what: String,
        /// The HTTP status code.
        code: u16,
        /// The Status reason (`Invalid`, `TooManyRequests`, ...), if any.
        reason: String,
        /// The server's message.
        message: String,
    },
    /// No answer: connection, TLS, timeout, or a stream cut short.
    Transport {
        /// The request.
        what: String,
        /// What went wrong underneath.
        message: String,
    },
    /// An answer arrived but could not be read as what was asked for.
    Decode {
        /// The request.
        what: String,
        /// The decoder's message.
        message: String,
    },
    /// The answer was larger than this client reads.
    TooLarge {
        /// The request.
        what: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A write was refused before it was sent: this process does not hold
    /// the leader Lease.
    NotLeader {
        /// The request.
        what: String,
    },
    /// The request could not be built (an empty or malformed name).
    InvalidRequest {
        /// What was wrong.
        message: String,
    },
}

impl Error {
    /// The HTTP status this error carries, if the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::NotFound { .. } => Some(404),
            Error::AlreadyExists { .. } | Error::Conflict { .. } => Some(409),
            Error::Gone { .. } => Some(410),
            Error::Forbidden { .. } => Some(403),
            Error::Unauthorized { .. } => Some(401),
            Error::Other { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether this is a 409 Conflict (not AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether this is a 410 Gone.
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }

    /// The server's message, where there is one.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound { message, .. }
            | Error::AlreadyExists { message, .. }
            | Error::Conflict { message, .. }
            | Error::Gone { message, .. }
            | Error::Forbidden { message, .. }
            | Error::Unauthorized { message, .. }
            | Error::Other { message, .. }
            | Error::Transport { message, .. }
            | Error::Decode { message, .. }
            | Error::InvalidRequest { message } => message,
            Error::TooLarge { .. } | Error::NotLeader { .. } => "",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound { what, message } => write!(f, "{what}: not found: {message}"),
            Error::AlreadyExists { what, message } => {
                write!(f, "{what}: already exists: {message}")
            }
            Error::Conflict { what, message } => write!(
                f,
                "{what}: conflict, the object changed since it was read ({message}); read it again and retry"
            ),
            Error::Gone { what, message } => write!(
                f,
                "{what}: the resourceVersion is no longer kept ({message}); list again"
            ),
            Error::Forbidden { what, message } => write!(
                f,
                "{what}: forbidden: {message}; grant this identity the permission in its Role or ClusterRole"
            ),
            Error::Unauthorized { what, message } => write!(
                f,
                "{what}: the API server refused the credentials ({message}); check the kubeconfig's user or the service-account token"
            ),
            Error::Other {
                what,
                code,
                reason,
                message,
            } => {
                if reason.is_empty() {
                    write!(f, "{what}: HTTP {code}: {message}")
                } else {
                    write!(f, "{what}: HTTP {code} {reason}: {message}")
                }
            }
            Error::Transport { what, message } => write!(
                f,
                "{what}: no answer from the API server: {message}; check that the server address is reachable"
            ),
            Error::Decode { what, message } => {
                write!(f, "{what}: could not read the answer: {message}")
            }
            Error::TooLarge { what, limit } => write!(
                f,
                "{what}: the answer is larger than {limit} bytes; page the request with a limit"
            ),
            Error::NotLeader { what } => write!(
                f,
                "{what}: refused before sending: this process does not hold the leader Lease"
            ),
            Error::InvalidRequest { message } => write!(f, "invalid request: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// The `metav1.Status` body the API server sends with a failure, and in a
/// watch's ERROR event.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always `Status`.
    #[serde(default)]
    pub kind: String,
    /// `Success` or `Failure`.
    #[serde(default)]
    pub status: String,
    /// The human-readable explanation.
    #[serde(default)]
    pub message: String,
    /// The machine-readable reason (`NotFound`, `Conflict`, `Expired`...).
    #[serde(default)]
    pub reason: String,
    /// The HTTP code the failure maps to.
    #[serde(default)]
    pub code: u16,
}

impl Status {
    /// Reads a Status body, if the bytes are one.
    pub fn parse(body: &[u8]) -> Option<Status> {
        let s: Status = serde_json::from_slice(body).ok()?;
        (s.kind == "Status").then_some(s)
    }
}

/// Classifies a non-success answer: `code` is the HTTP status, `body` the
/// (capped) response body, `what` the request for messages.
pub fn decide_error(what: &str, code: u16, body: &[u8]) -> Error {
    let status = Status::parse(body);
    let message = match &status {
        Some(s) if !s.message.is_empty() => s.message.clone(),
        _ => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                format!("HTTP {code} with an empty body")
            } else {
                // A proxy's HTML page or a bare string: keep a readable slice.
                text.chars().take(512).collect()
            }
        }
    };
    let reason = status.map(|s| s.reason).unwrap_or_default();
    status_error(what.to_owned(), code, reason, message)
}

/// The typed error for a code, a Status reason and a message.
pub(crate) fn status_error(what: String, code: u16, reason: String, message: String) -> Error {
    match code {
        404 => Error::NotFound { what, message },
        409 if reason == "AlreadyExists" => Error::AlreadyExists { what, message },
        409 => Error::Conflict { what, message },
        410 => Error::Gone { what, message },
        403 => Error::Forbidden { what, message },
        401 => Error::Unauthorized { what, message },
        _ => Error::Other {
            what,
            code,
            reason,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn codes_map_to_kinds() {
        type Check = fn(&Error) -> bool;
        let cases: &[(u16, &str, Check)] = &[
            (404, "NotFound", |e| matches!(e, Error::NotFound { .. })),
            (409, "Conflict", |e| matches!(e, Error::Conflict { .. })),
            (409, "AlreadyExists", |e| {
                matches!(e, Error::AlreadyExists { .. })
            }),
            (410, "Expired", |e| matches!(e, Error::Gone { .. })),
            (403, "Forbidden", |e| matches!(e, Error::Forbidden { .. })),
            (401, "Unauthorized", |e| {
                matches!(e, Error::Unauthorized { .. })
            }),
        ];
        for (code, reason, check) in cases {
            let e = decide_error("GET /x", *code, &status(*code, reason, "m"));
            assert!(check(&e), "{code} {reason} gave {e:?}");
            assert_eq!(e.code(), Some(*code));
            assert_eq!(e.message(), "m");
        }
    }

    #[test]
    fn other_keeps_code_reason_and_message() {
        let e = decide_error(
            "POST /apis/liken.sh/v1alpha1/machines",
            422,
            &status(422, "Invalid", "spec.version: Invalid value"),
        );
        assert_eq!(
            e,
            Error::Other {
                what: "POST /apis/liken.sh/v1alpha1/machines".into(),
                code: 422,
                reason: "Invalid".into(),
                message: "spec.version: Invalid value".into(),
            }
        );
        assert_eq!(
            e.to_string(),
            "POST /apis/liken.sh/v1alpha1/machines: HTTP 422 Invalid: spec.version: Invalid value"
        );
    }

    #[test]
    fn a_body_that_is_not_a_status_is_kept_short() {
        let body = format!("<html>{}</html>", "x".repeat(2000));
        let e = decide_error("GET /", 502, body.as_bytes());
        assert_eq!(e.code(), Some(502));
        assert_eq!(e.message().chars().count(), 512);
        let e = decide_error("GET /", 503, b"");
        assert_eq!(e.message(), "HTTP 503 with an empty body");
    }
}
