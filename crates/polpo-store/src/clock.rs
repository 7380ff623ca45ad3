//! Time as a value passed in, so every store decision about time (timestamps, lease expiry)
//! is reproducible in a test that moves a manual clock forward.

use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

/// Where a store gets "now" from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The machine's wall clock, for production.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to, for tests (lease expiry, ordering by time).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Mutex::new(start) }
    }

    /// Move the clock forward (or back, with a negative duration).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }

    /// Put the clock at `at`.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// "Now" at the millisecond precision every backend stores, so a value read back equals the
/// value written whatever the backend.
pub(crate) fn now_ms(clock: &dyn Clock) -> DateTime<Utc> {
    from_millis(clock.now().timestamp_millis())
}

/// Milliseconds since the epoch back to an instant (out-of-range values clamp to the epoch).
pub(crate) fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}
