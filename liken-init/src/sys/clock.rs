//! The wall clock: reading it and setting it (clock_settime(2) on
//! CLOCK_REALTIME).
//!
//! Only the NTP step sets the clock. It reads the clock through the same
//! seam it sets it through, so the offset it measures and the time it
//! sets agree, and a test can start from any made-up time (a machine
//! whose battery-backed clock died reads 1970) with [`FakeClock`].

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, clock_settime};

/// Reading and setting the wall clock.
pub trait Clock {
    /// The time now.
    fn now(&self) -> SystemTime;
    /// Sets the clock to `to`.
    fn set(&self, to: SystemTime) -> io::Result<()>;
}

/// The kernel's CLOCK_REALTIME.
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn set(&self, to: SystemTime) -> io::Result<()> {
        let since = to.duration_since(UNIX_EPOCH).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a time before 1970 cannot be set",
            )
        })?;
        clock_settime(ClockId::CLOCK_REALTIME, TimeSpec::from(since)).map_err(io::Error::from)
    }
}

/// A clock that starts at a chosen time, runs at the real pace, and
/// records each time it is set to (without moving).
#[derive(Clone)]
pub struct FakeClock {
    start: SystemTime,
    began: Instant,
    /// Every time `set` was called with, in order.
    pub set_to: Arc<Mutex<Vec<SystemTime>>>,
    /// Makes `set` fail with this errno.
    pub fail: Option<i32>,
}

impl FakeClock {
    /// A clock reading `start` now.
    pub fn starting_at(start: SystemTime) -> FakeClock {
        FakeClock {
            start,
            began: Instant::now(),
            set_to: Arc::default(),
            fail: None,
        }
    }

    /// The times set so far.
    pub fn set_to(&self) -> Vec<SystemTime> {
        self.set_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        self.start
            .checked_add(self.began.elapsed())
            .unwrap_or(self.start)
    }

    fn set(&self, to: SystemTime) -> io::Result<()> {
        self.set_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(to);
        match self.fail {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_fake_runs_from_its_start_and_records() {
        let start = UNIX_EPOCH + Duration::from_secs(10);
        let c = FakeClock::starting_at(start);
        let now = c.now();
        assert!(now >= start && now < start + Duration::from_secs(5));
        c.set(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
            .unwrap();
        assert_eq!(
            c.set_to(),
            vec![UNIX_EPOCH + Duration::from_secs(1_800_000_000)]
        );
        let mut failing = FakeClock::starting_at(start);
        failing.fail = Some(1);
        assert_eq!(
            failing.set(start).unwrap_err().raw_os_error(),
            Some(1),
            "EPERM"
        );
    }

    #[test]
    fn the_real_clock_refuses_times_before_1970() {
        let e = RealClock
            .set(UNIX_EPOCH - Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
