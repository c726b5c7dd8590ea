//! Jittered exponential backoff that forgets after a quiet spell.
//!
//! The watcher waits between failed attempts so a sick API server is not
//! hammered by every operator at once: 0.8 s, doubling to a 30 s cap, each
//! delay scaled by a random factor in [0.75, 1.25) so many clients spread
//! out. After 120 s without a failure the next one starts from 0.8 s
//! again, as kube-rs's reset timer does. The state lives here, outside the
//! watcher's state machine, and the clock is passed in so tests need not
//! sleep.

use std::time::{Duration, Instant};

/// A resettable backoff.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    quiet_reset: Duration,
    next: Duration,
    last_failure: Option<Instant>,
    rng: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    /// A backoff from `initial`, doubling to `max`, reset after
    /// `quiet_reset` without failures.
    pub fn new(initial: Duration, max: Duration, quiet_reset: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            quiet_reset,
            next: initial,
            last_failure: None,
            rng: crate::random::seed(),
        }
    }

    /// The delay before the next attempt after a failure at `now`.
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        if let Some(last) = self.last_failure
            && now.saturating_duration_since(last) >= self.quiet_reset
        {
            self.next = self.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        // Jitter in [0.75, 1.25): never zero, never more than 25% off.
        let r = crate::random::next(&mut self.rng);
        let factor = 0.75 + (r >> 11) as f64 / (1u64 << 53) as f64 * 0.5;
        base.mul_f64(factor)
    }

    /// Forgets past failures now (a watch that delivered events).
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last_failure = None;
    }

    /// The undithered delay the next failure would get.
    pub fn peek_base(&self) -> Duration {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_with_bounded_jitter() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let mut expected = 0.8f64;
        for i in 0..12 {
            let d = b.next_delay(t + Duration::from_secs(i)).as_secs_f64();
            assert!(
                d >= expected * 0.75 - 1e-9 && d < expected * 1.25 + 1e-9,
                "attempt {i}: {d} not within jitter of {expected}"
            );
            expected = (expected * 2.0).min(30.0);
        }
        assert_eq!(b.peek_base(), Duration::from_secs(30));
    }

    #[test]
    fn resets_after_quiet() {
        let mut b = Backoff::default();
        let t = Instant::now();
        for i in 0..6 {
            b.next_delay(t + Duration::from_secs(i));
        }
        assert_eq!(b.peek_base(), Duration::from_secs(30));
        // 119 s later is not quiet enough...
        b.next_delay(t + Duration::from_secs(5 + 119));
        assert_eq!(b.peek_base(), Duration::from_secs(30));
        // ...120 s after the last failure is.
        let d = b.next_delay(t + Duration::from_secs(5 + 119 + 120));
        assert!(d < Duration::from_secs(1), "{d:?}");
        assert_eq!(b.peek_base(), Duration::from_millis(1600));
    }

    #[test]
    fn jitter_spreads_clients() {
        let t = Instant::now();
        let delays: Vec<Duration> = (0..16).map(|_| Backoff::default().next_delay(t)).collect();
        let first = delays[0];
        assert!(delays.iter().any(|d| *d != first), "{delays:?}");
    }
}
