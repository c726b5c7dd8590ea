//! Retrying: what the client repeats by itself, and what it leaves to the
//! caller.
//!
//! The client repeats a request as client-go's rest client does
//! (rest/request.go and rest/with_retry.go): an answer of 429 or any 5xx
//! that carries `Retry-After` is retried after that many seconds, up to
//! ten times; a GET whose connection was reset or cut short is retried
//! after a second (client-go's artificial `Retry-After: 1`); nothing else
//! is, and no write is retried on a transport error, because it may have
//! been applied. All retries fit in the request's own timeout, and a
//! PodDisruptionBudget's 429 is never retried: the caller decides.
//! [`decide_retry`] is that rule as a pure function.
//!
//! A read-modify-write that lost a race is the caller's to repeat:
//! [`retry_on_conflict`] is client-go's `retry.RetryOnConflict`
//! (util/retry/util.go), with its `DefaultRetry` backoff (five steps from
//! 10 ms, ×1, 10% jitter).

use std::time::Duration;

use crate::error::Error;
use crate::request::Method;

/// How many times and how long the client waits on a server's
/// `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (client-go's `maxRetries`, 10).
    pub max_retries: u32,
    /// The longest single wait, whatever the server asks.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 10,
            max_wait: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            max_wait: Duration::ZERO,
        }
    }
}

/// Whether to repeat a request that ended in `error`, and after how
/// long. `transient` says a transport failure was a reset or cut-short
/// connection; `retries` is how many retries were made already;
/// `time_left` what remains of the request's timeout.
pub fn decide_retry(
    error: &Error,
    transient: bool,
    method: Method,
    retries: u32,
    time_left: Duration,
    policy: &RetryPolicy,
) -> Option<Duration> {
    if retries >= policy.max_retries {
        return None;
    }
    let wait = match error {
        // The eviction was refused on purpose; trying again at once
        // would only ask the budget the same question.
        Error::DisruptionBudget { .. } => return None,
        Error::Transport { .. } if transient && method == Method::Get => Duration::from_secs(1),
        _ => match (error.code(), error.retry_after()) {
            (Some(code), Some(after)) if code == 429 || code >= 500 => after.min(policy.max_wait),
            _ => return None,
        },
    };
    (wait < time_left).then_some(wait)
}

/// How many attempts [`retry_on_conflict`] makes in all.
pub const CONFLICT_ATTEMPTS: u32 = 5;

/// Runs `attempt` until it returns anything but `Error::Conflict`, at most
/// [`CONFLICT_ATTEMPTS`] times, sleeping about 10 ms between tries. The
/// last Conflict is returned if every attempt lost. `attempt` must read
/// the object afresh each time.
pub fn retry_on_conflict<T>(mut attempt: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let mut rng = crate::random::seed();
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt() {
            Err(e) if e.is_conflict() && tries < CONFLICT_ATTEMPTS => {
                let jitter = (crate::random::next(&mut rng) % 1000) as f64 / 10_000.0;
                std::thread::sleep(Duration::from_millis(10).mul_f64(1.0 + jitter));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> Error {
        Error::Conflict {
            what: "PUT /x".into(),
            message: "the object has been modified".into(),
        }
    }

    #[test]
    fn the_retry_table() {
        let s = Duration::from_secs;
        let p = RetryPolicy::default();
        let other = |code: u16, after: Option<u64>| Error::Other {
            what: "w".into(),
            code,
            reason: String::new(),
            message: String::new(),
            retry_after: after.map(s),
        };
        let throttled = |after: Option<u64>| Error::TooManyRequests {
            what: "w".into(),
            message: String::new(),
            retry_after: after.map(s),
        };
        let transport = Error::Transport {
            what: "w".into(),
            message: "connection reset".into(),
        };
        let budget = Error::DisruptionBudget {
            what: "w".into(),
            code: 429,
            message: String::new(),
        };
        let cases = [
            (
                throttled(Some(2)),
                false,
                Method::Post,
                0,
                s(30),
                Some(s(2)),
            ),
            (throttled(None), false, Method::Get, 0, s(30), None),
            (
                other(503, Some(1)),
                false,
                Method::Put,
                0,
                s(30),
                Some(s(1)),
            ),
            (other(500, None), false, Method::Get, 0, s(30), None),
            (other(409, Some(1)), false, Method::Get, 0, s(30), None),
            // Capped, and only within the request's time.
            (
                throttled(Some(600)),
                false,
                Method::Get,
                0,
                s(300),
                Some(s(30)),
            ),
            (throttled(Some(5)), false, Method::Get, 0, s(5), None),
            (throttled(Some(1)), false, Method::Get, 10, s(30), None),
            (throttled(Some(1)), false, Method::Get, 9, s(30), Some(s(1))),
            // Transport failures: a GET whose connection broke, only.
            (transport.clone(), true, Method::Get, 0, s(30), Some(s(1))),
            (transport.clone(), true, Method::Post, 0, s(30), None),
            (transport, false, Method::Get, 0, s(30), None),
            (budget, false, Method::Post, 0, s(30), None),
        ];
        for (e, transient, method, retries, left, want) in cases {
            assert_eq!(
                decide_retry(&e, transient, method, retries, left, &p),
                want,
                "{e:?} transient {transient} {method} after {retries} retries with {left:?} left"
            );
        }
    }

    #[test]
    fn conflicts_are_retried_then_given_up() {
        let mut calls = 0;
        let r: Result<u32, Error> = retry_on_conflict(|| {
            calls += 1;
            if calls < 3 {
                Err(conflict())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r, Ok(3));
        let mut calls = 0;
        let r: Result<(), Error> = retry_on_conflict(|| {
            calls += 1;
            Err(conflict())
        });
        assert!(r.unwrap_err().is_conflict());
        assert_eq!(calls, CONFLICT_ATTEMPTS);
        // Anything else ends it at once.
        let mut calls = 0;
        let r: Result<(), Error> = retry_on_conflict(|| {
            calls += 1;
            Err(Error::InvalidRequest {
                message: "no".into(),
            })
        });
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }
}
