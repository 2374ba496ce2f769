//! Where the async port gets `now` from. The model itself never reads a clock.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use jiff::Timestamp;

/// A source of the current time for [`super::SimCloud`].
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The wall clock, for the demo.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Tokio's clock mapped onto a fixed start time: under a paused tokio runtime
/// (`#[tokio::test(start_paused = true)]`) time moves only when the test
/// advances it, so port tests are deterministic and instant.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    start: Timestamp,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// Must be called inside a tokio runtime when its clock is paused, so the
    /// origin is the paused instant.
    pub fn starting_at(start: Timestamp) -> Self {
        TokioClock { start, origin: tokio::time::Instant::now() }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.origin);
        let elapsed = jiff::SignedDuration::try_from(elapsed).unwrap_or(jiff::SignedDuration::MAX);
        self.start.checked_add(elapsed).unwrap_or(Timestamp::MAX)
    }
}

/// A clock that moves only when told to, for synchronous tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    millis: AtomicI64,
}

impl ManualClock {
    pub fn starting_at(start: Timestamp) -> Self {
        ManualClock { millis: AtomicI64::new(start.as_millisecond()) }
    }

    pub fn advance(&self, by: std::time::Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millisecond(self.millis.load(Ordering::SeqCst)).unwrap_or(Timestamp::MAX)
    }
}
