//! Time and ids as values passed in: every store decision about time (timestamps, lease
//! expiry) comes from a [`Clock`] and every id it makes (sessions, runs, messages) from an
//! [`IdGen`]. The pair ([`Seams`]) is handed to the store when it opens and passed on to the
//! runtime and server above it, so a test that fixes both replays a run byte for byte.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// Where new ids come from: each call returns an id never returned before by this generator,
/// made of 32 lowercase hex digits (callers add their own prefix: `chat-…`, `chatcmpl-…`).
pub trait IdGen: Send + Sync + std::fmt::Debug {
    /// A fresh id.
    fn next_id(&self) -> String;
}

/// Time-ordered random ids (UUID v7), for production: unique across processes and restarts.
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidV7Ids;

impl IdGen for UuidV7Ids {
    fn next_id(&self) -> String {
        uuid::Uuid::now_v7().simple().to_string()
    }
}

/// Ids 1, 2, 3 … written as 32 hex digits, for tests: two runs given fresh generators make the
/// same ids in the same order.
#[derive(Debug, Default)]
pub struct SequentialIds {
    last: AtomicU64,
}

impl IdGen for SequentialIds {
    fn next_id(&self) -> String {
        format!("{:032x}", self.last.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Where a store — and the runtime and server above it — read "now" and get new ids: one pair,
/// chosen once and passed down. A plain clock converts into seams with UUID v7 ids.
#[derive(Debug, Clone)]
pub struct Seams {
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// Where new ids come from.
    pub ids: Arc<dyn IdGen>,
}

impl Seams {
    /// `clock` and `ids`.
    pub fn new(clock: Arc<dyn Clock>, ids: Arc<dyn IdGen>) -> Self {
        Self { clock, ids }
    }
}

impl<C: Clock + 'static> From<Arc<C>> for Seams {
    fn from(clock: Arc<C>) -> Self {
        Self::new(clock, Arc::new(UuidV7Ids))
    }
}

impl From<Arc<dyn Clock>> for Seams {
    fn from(clock: Arc<dyn Clock>) -> Self {
        Self::new(clock, Arc::new(UuidV7Ids))
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
