//! The errors a request can end in, typed by what the caller does next.
//!
//! A controller branches on a handful of answers: the object is not there
//! (NotFound), someone wrote first (Conflict), the resourceVersion is too
//! old to resume from (Gone), the credentials are wrong (Unauthorized) or
//! lack a permission (Forbidden). Everything else keeps the HTTP code and
//! the server's own `Status` message, which is what a person needs to read
//! (a CRD validation failure names the field and the rule).
//!
//! Two refusals get variants of their own because callers act on them
//! differently from any other failure: an eviction refused by a
//! PodDisruptionBudget (`DisruptionBudget`: wait and try the next pod, the
//! budget is doing its job) and the server asking the client to slow down
//! (`TooManyRequests`, API Priority and Fairness: wait `retry_after`). Both
//! arrive as HTTP 429; the PodDisruptionBudget one carries a
//! `DisruptionBudget` cause in the Status details
//! (pkg/registry/core/pod/storage/eviction.go in kubernetes/kubernetes).
//!
//! Failures before an answer arrives (DNS, TLS, a timeout, a dropped
//! connection) are `Transport`; an answer liken cannot read is `Decode`.
//! Each variant names the request (`GET /apis/...`) it belongs to.

use std::fmt;
use std::time::Duration;

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
    /// 504 with a `ResourceVersionTooLarge` cause: the apiserver has not
    /// caught up with the resourceVersion asked for (after an etcd restore,
    /// or behind a load balancer, another apiserver's newer revision). A
    /// watcher lists afresh, as for Gone (client-go's reflector:
    /// `isTooLargeResourceVersionError` in tools/cache/reflector.go).
    ResourceVersionTooLarge {
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
    /// An eviction refused by a PodDisruptionBudget: the Status carries
    /// a `DisruptionBudget` cause (429, or 403 when the budget's own status
    /// is unusable). The pod stays; try again later or another pod.
    DisruptionBudget {
        /// The request.
        what: String,
        /// The HTTP status code (429 or 403).
        code: u16,
        /// The server's message and the budget's own words (which budget,
        /// how many healthy pods it needs and has).
        message: String,
    },
    /// 429 for any other reason: the server's priority and fairness
    /// limits. Wait `retry_after` (the `Retry-After` header) and retry.
    TooManyRequests {
        /// The request.
        what: String,
        /// The server's message.
        message: String,
        /// How long the server asked the client to wait.
        retry_after: Option<Duration>,
    },
    /// Any other non-success answer, with the server's Status message.
    Other {
        /// The request.
        what: String,
        /// The HTTP status code.
        code: u16,
        /// The Status reason (`Invalid`, `InternalError`, ...), if any.
        reason: String,
        /// The server's message.
        message: String,
        /// The `Retry-After` the server sent with a 5xx, if any.
        retry_after: Option<Duration>,
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
            Error::ResourceVersionTooLarge { .. } => Some(504),
            Error::Forbidden { .. } => Some(403),
            Error::Unauthorized { .. } => Some(401),
            Error::TooManyRequests { .. } => Some(429),
            Error::DisruptionBudget { code, .. } | Error::Other { code, .. } => Some(*code),
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

    /// Whether a watch must list afresh: the resourceVersion it resumes
    /// from is gone (410) or not reached yet (504 ResourceVersionTooLarge).
    pub fn needs_relist(&self) -> bool {
        matches!(
            self,
            Error::Gone { .. } | Error::ResourceVersionTooLarge { .. }
        )
    }

    /// Whether the server asked the client to slow down (429 that is not
    /// a PodDisruptionBudget refusal).
    pub fn is_too_many_requests(&self) -> bool {
        matches!(self, Error::TooManyRequests { .. })
    }

    /// Whether an eviction was refused by a PodDisruptionBudget.
    pub fn is_disruption_budget(&self) -> bool {
        matches!(self, Error::DisruptionBudget { .. })
    }

    /// How long the server asked the client to wait before retrying
    /// (its `Retry-After` header), if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::TooManyRequests { retry_after, .. } | Error::Other { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// The server's message, where there is one.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound { message, .. }
            | Error::AlreadyExists { message, .. }
            | Error::Conflict { message, .. }
            | Error::Gone { message, .. }
            | Error::ResourceVersionTooLarge { message, .. }
            | Error::Forbidden { message, .. }
            | Error::Unauthorized { message, .. }
            | Error::DisruptionBudget { message, .. }
            | Error::TooManyRequests { message, .. }
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
            Error::ResourceVersionTooLarge { what, message } => write!(
                f,
                "{what}: the API server has not reached the resourceVersion asked for ({message}); list again"
            ),
            Error::Forbidden { what, message } => write!(
                f,
                "{what}: forbidden: {message}; grant this identity the permission in its Role or ClusterRole"
            ),
            Error::Unauthorized { what, message } => write!(
                f,
                "{what}: the API server refused the credentials ({message}); check the kubeconfig's user or the service-account token"
            ),
            Error::DisruptionBudget {
                what,
                code,
                message,
            } => write!(
                f,
                "{what}: HTTP {code}: refused by a PodDisruptionBudget: {message}; the pod stays, try again once the budget allows"
            ),
            Error::TooManyRequests {
                what,
                message,
                retry_after,
            } => {
                write!(
                    f,
                    "{what}: the API server is throttling this client: {message}"
                )?;
                match retry_after {
                    Some(d) => write!(f, "; retry after {}s", d.as_secs()),
                    None => f.write_str("; retry later"),
                }
            }
            Error::Other {
                what,
                code,
                reason,
                message,
                ..
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
    /// What the failure was about and its causes, when the server said.
    #[serde(default)]
    pub details: Option<StatusDetails>,
}

/// `metav1.StatusDetails`: the object a failure concerns and its causes.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The object's kind.
    #[serde(default)]
    pub kind: String,
    /// Each cause (a field that failed validation, a disruption budget).
    #[serde(default)]
    pub causes: Vec<StatusCause>,
    /// The server's suggested wait before a retry, seconds.
    #[serde(default)]
    pub retry_after_seconds: u32,
}

/// `metav1.StatusCause`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct StatusCause {
    /// The cause's type (`DisruptionBudget`, `FieldValueInvalid`, ...);
    /// `reason` on the wire.
    #[serde(default)]
    pub reason: String,
    /// What the cause says.
    #[serde(default)]
    pub message: String,
    /// The field it concerns, if any.
    #[serde(default)]
    pub field: String,
}

/// The Status cause type a PodDisruptionBudget refusal carries
/// (`policyv1.DisruptionBudgetCause`).
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";

/// The Status cause type of a read or watch at a resourceVersion the
/// server has not reached (`metav1.CauseTypeResourceVersionTooLarge`).
pub const RESOURCE_VERSION_TOO_LARGE_CAUSE: &str = "ResourceVersionTooLarge";

impl Status {
    /// Reads a Status body, if the bytes are one.
    pub fn parse(body: &[u8]) -> Option<Status> {
        let s: Status = serde_json::from_slice(body).ok()?;
        (s.kind == "Status").then_some(s)
    }
}

/// Classifies a non-success answer: `code` is the HTTP status, `body` the
/// (capped) response body, `retry_after` the `Retry-After` header, `what`
/// the request for messages.
pub fn decide_error(what: &str, code: u16, body: &[u8], retry_after: Option<Duration>) -> Error {
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
    let (reason, details) = status.map(|s| (s.reason, s.details)).unwrap_or_default();
    status_error(what.to_owned(), code, reason, message, details, retry_after)
}

/// The typed error for a code, a Status reason, message and details, and
/// the `Retry-After` header.
pub(crate) fn status_error(
    what: String,
    code: u16,
    reason: String,
    message: String,
    details: Option<StatusDetails>,
    retry_after: Option<Duration>,
) -> Error {
    let has_cause = |reason: &str| {
        details
            .iter()
            .flat_map(|d| &d.causes)
            .find(|c| c.reason == reason)
            .cloned()
    };
    // Older servers sent the message without the cause; client-go checks
    // both (apimachinery's IsTooLargeResourceVersion).
    if code == 504
        && (has_cause(RESOURCE_VERSION_TOO_LARGE_CAUSE).is_some()
            || message.contains("Too large resource version"))
    {
        return Error::ResourceVersionTooLarge { what, message };
    }
    // A generic message ("the server rejected our request due to an error
    // in our request") keeps the real reason in its causes; name them.
    let extra: Vec<&str> = details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.message.as_str())
        .filter(|m| !m.is_empty() && !message.contains(m))
        .collect();
    let message = if extra.is_empty() || has_cause(DISRUPTION_BUDGET_CAUSE).is_some() {
        message
    } else {
        format!("{message}: {}", extra.join("; "))
    };
    let budget = has_cause(DISRUPTION_BUDGET_CAUSE);
    if let Some(cause) = budget {
        let message = if cause.message.is_empty() {
            message
        } else {
            format!("{message} ({})", cause.message)
        };
        return Error::DisruptionBudget {
            what,
            code,
            message,
        };
    }
    // The header wins; the Status's own suggestion is the fallback.
    let retry_after = retry_after.or_else(|| {
        details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s)))
    });
    match code {
        404 => Error::NotFound { what, message },
        409 if reason == "AlreadyExists" => Error::AlreadyExists { what, message },
        409 => Error::Conflict { what, message },
        410 => Error::Gone { what, message },
        403 => Error::Forbidden { what, message },
        401 => Error::Unauthorized { what, message },
        429 => Error::TooManyRequests {
            what,
            message,
            retry_after,
        },
        _ => Error::Other {
            what,
            code,
            reason,
            message,
            retry_after,
        },
    }
}

/// Reads a `Retry-After` header: whole seconds (the form the API server
/// sends); an HTTP date is not used by Kubernetes and reads as absent.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
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
            let e = decide_error("GET /x", *code, &status(*code, reason, "m"), None);
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
            None,
        );
        assert_eq!(
            e,
            Error::Other {
                what: "POST /apis/liken.sh/v1alpha1/machines".into(),
                code: 422,
                reason: "Invalid".into(),
                message: "spec.version: Invalid value".into(),
                retry_after: None,
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
        let e = decide_error("GET /", 502, body.as_bytes(), None);
        assert_eq!(e.code(), Some(502));
        assert_eq!(e.message().chars().count(), 512);
        let e = decide_error("GET /", 503, b"", None);
        assert_eq!(e.message(), "HTTP 503 with an empty body");
    }

    #[test]
    fn a_disruption_budget_refusal_is_told_apart_from_throttling() {
        // The body the eviction subresource sends when a budget says no
        // (pkg/registry/core/pod/storage/eviction.go).
        let pdb = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests", "code": 429,
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}
        });
        let e = decide_error(
            "POST /api/v1/namespaces/a/pods/p/eviction",
            429,
            pdb.to_string().as_bytes(),
            Some(Duration::from_secs(10)),
        );
        assert!(
            e.is_disruption_budget() && !e.is_too_many_requests(),
            "{e:?}"
        );
        assert_eq!(e.code(), Some(429));
        assert!(e.message().contains("needs 2 healthy pods"), "{e}");
        assert_eq!(e.retry_after(), None);

        let apf = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Too many requests, please try again later.",
            "reason": "TooManyRequests", "code": 429,
            "details": {"retryAfterSeconds": 1}
        });
        let e = decide_error("GET /x", 429, apf.to_string().as_bytes(), None);
        assert!(
            e.is_too_many_requests() && !e.is_disruption_budget(),
            "{e:?}"
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        // The header wins over the Status's suggestion.
        let e = decide_error(
            "GET /x",
            429,
            apf.to_string().as_bytes(),
            parse_retry_after(" 7 "),
        );
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert!(e.to_string().contains("retry after 7s"), "{e}");
        let e = decide_error("GET /x", 503, b"", parse_retry_after("2"));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn causes_the_message_leaves_out_are_named() {
        // A generic message whose cause says what was wrong.
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "BadRequest", "code": 400,
            "details": {"causes": [{"reason": "FieldValueNotSupported",
                                    "message": "Unsupported value: \"x\""}]}
        });
        let e = decide_error("PATCH /x", 400, body.to_string().as_bytes(), None);
        assert_eq!(
            e.message(),
            "the server rejected our request due to an error in our request: Unsupported value: \"x\""
        );
        // Causes the message already carries are not repeated.
        let body = serde_json::json!({
            "kind": "Status", "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Machine \"m\" is invalid: spec.x: Invalid value",
            "details": {"causes": [{"reason": "FieldValueInvalid", "message": "Invalid value", "field": "spec.x"}]}
        });
        let e = decide_error("PATCH /x", 422, body.to_string().as_bytes(), None);
        assert_eq!(
            e.message(),
            "Machine \"m\" is invalid: spec.x: Invalid value"
        );
    }

    #[test]
    fn a_resource_version_too_large_relists_like_gone() {
        // apimachinery's NewTooLargeResourceVersionError.
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Timeout: Too large resource version: 159, current: 140",
            "reason": "Timeout", "code": 504,
            "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version"}],
                        "retryAfterSeconds": 1}
        });
        let e = decide_error("GET /w", 504, body.to_string().as_bytes(), None);
        assert!(
            matches!(e, Error::ResourceVersionTooLarge { .. }) && e.needs_relist(),
            "{e:?}"
        );
        assert_eq!(e.code(), Some(504));
        // Without the cause, by the message, as older servers sent it.
        let old = status(504, "Timeout", "Too large resource version: 9, current: 2");
        assert!(decide_error("GET /w", 504, &old, None).needs_relist());
        // An ordinary gateway timeout is not.
        let e = decide_error(
            "GET /w",
            504,
            &status(504, "Timeout", "took too long"),
            None,
        );
        assert!(!e.needs_relist(), "{e:?}");
        assert!(decide_error("GET /w", 410, &status(410, "Expired", "old"), None).needs_relist());
    }
}
