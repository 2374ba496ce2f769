//! What the probes report: readiness (the Server store and the caches are
//! filled, the loops run) and liveness (a watchdog over the reconcile loop).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Passes in flight and the last time one started or finished.
#[derive(Clone, Debug, Default)]
pub(crate) struct Progress {
    inner: Arc<Mutex<ProgressState>>,
}

#[derive(Debug, Default)]
struct ProgressState {
    in_flight: usize,
    last_progress: Option<Instant>,
}

/// Marks one pass in flight until dropped (a pass cut short counts as ended).
#[derive(Debug)]
pub(crate) struct PassInFlight {
    progress: Progress,
}

impl Drop for PassInFlight {
    fn drop(&mut self) {
        self.progress.with(|state| {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.last_progress = Some(Instant::now());
        });
    }
}

impl Progress {
    fn with<R>(&self, f: impl FnOnce(&mut ProgressState) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn pass_started(&self) -> PassInFlight {
        self.with(|state| {
            state.in_flight += 1;
            state.last_progress = Some(Instant::now());
        });
        PassInFlight { progress: self.clone() }
    }

    /// How long work has been queued without progress, if at least `bound`.
    fn stalled_for(&self, bound: Duration) -> Option<Duration> {
        self.with(|state| {
            let since = state.last_progress?.elapsed();
            (state.in_flight > 0 && since >= bound).then_some(since)
        })
    }
}

/// The liveness watchdog: unhealthy when passes are in flight and none has
/// started or finished for the stall timeout (a pass hung past every
/// timeout it has, or a loop that no longer runs).
#[derive(Clone, Debug)]
pub struct Health {
    pub(crate) progress: Progress,
    pub(crate) stall_timeout: Duration,
}

impl Health {
    /// `Err` with the reason when the reconcile loop is stuck.
    pub fn check(&self) -> Result<(), String> {
        match self.progress.stalled_for(self.stall_timeout) {
            Some(since) => Err(format!("passes in flight and none started or finished for {}s", since.as_secs())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pass_in_flight_past_the_bound_without_progress_is_a_stall() {
        let health = Health { progress: Progress::default(), stall_timeout: Duration::from_secs(60) };
        assert_eq!(health.check(), Ok(()), "idle is healthy");
        let stuck = health.progress.pass_started();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(health.check(), Ok(()));
        // Another pass finishing is progress.
        drop(health.progress.pass_started());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(health.check(), Ok(()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(health.check().is_err_and(|e| e.contains("60s")));
        drop(stuck);
        assert_eq!(health.check(), Ok(()), "nothing queued is not a stall");
    }
}
