//! Restart backoff for the supervised service.
//!
//! A service that keeps dying is restarted after 1 s, then 2, 4, 8 ...
//! up to 30 s between attempts, so a k3s that cannot start does not
//! spin the machine, yet one that recovers is back within half a
//! minute. A run that lasted [`Backoff::reset_after`] counts as healthy
//! and the next failure starts again at 1 s.

use std::time::Duration;

/// Capped exponential backoff that resets after a healthy run.
#[derive(Clone, Debug)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay.
    pub cap: Duration,
    /// A run this long resets the delay to `initial`.
    pub reset_after: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    /// A backoff with these bounds.
    pub fn new(initial: Duration, cap: Duration, reset_after: Duration) -> Backoff {
        Backoff {
            initial,
            cap,
            reset_after,
            next: initial,
        }
    }

    /// The delay before restarting a service that ran for `ran_for`.
    pub fn after_exit(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= self.reset_after {
            self.next = self.initial;
        }
        let delay = self.next.min(self.cap);
        self.next = self.next.saturating_mul(2).min(self.cap);
        delay
    }

    /// Forgets past failures (a requested restart is not a failure).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets_after_a_healthy_run() {
        let mut b = Backoff::default();
        let quick = Duration::from_millis(200);
        let delays: Vec<u64> = (0..8).map(|_| b.after_exit(quick).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(
            b.after_exit(Duration::from_secs(120)),
            Duration::from_secs(1)
        );
        assert_eq!(b.after_exit(quick), Duration::from_secs(2));
        b.reset();
        assert_eq!(b.after_exit(quick), Duration::from_secs(1));
    }
}
