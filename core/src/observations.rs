//! What the monitor's metrics count (the Go controller's
//! `unikorn_region_server_*` families; DESIGN, "The monitor"): the state label of a
//! Server and the one observation of its provision and scheduling durations.
//! Pure; server-kube's monitor calls these and the app counts.

use std::time::Duration;

use jiff::Timestamp;

use crate::model::{Phase, ServerStatus};

/// The `state` label of a Server counted by phase: the phase in lower case
/// (`running`, `building`, ...), empty while it has none.
pub fn state_label(phase: Option<Phase>) -> &'static str {
    match phase {
        None => "",
        Some(Phase::Pending) => "pending",
        Some(Phase::Queued) => "queued",
        Some(Phase::Building) => "building",
        Some(Phase::Running) => "running",
        Some(Phase::Stopping) => "stopping",
        Some(Phase::Stopped) => "stopped",
    }
}

/// The durations a Server's first launch observes, each from the Server's
/// creation: to Nova `launched_at` (provision) and to Nova `created`
/// (scheduling). The creation (Kubernetes `Time`) and Nova's `created` have
/// second precision, so a duration less than two seconds below zero is
/// observed as zero; one further below (the API server's and the cloud's
/// clocks apart) is not observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirstLaunch {
    pub provision: Option<Duration>,
    pub scheduling: Option<Duration>,
}

/// What a status write from `before` to `after` observes: the first launch
/// when it records `launchedAt` on a Server that had none. `launchedAt` is
/// written by the monitor only and, once set, never cleared (a pass resets
/// it only on a server that never booted), so counted on the write the API
/// server accepts, each Server is observed once in its life (not per poll,
/// not again after a restart or a takeover, whose status already holds it). The scheduling duration is observed with it, so both
/// histograms count the same Servers.
pub fn first_launch(before: &ServerStatus, after: &ServerStatus, created: Timestamp) -> Option<FirstLaunch> {
    if before.launched_at.is_some() {
        return None;
    }
    let launched = after.launched_at?;
    Some(FirstLaunch {
        provision: since(created, launched),
        scheduling: after.scheduled_at.and_then(|at| since(created, at)),
    })
}

fn since(from: Timestamp, to: Timestamp) -> Option<Duration> {
    let elapsed = to.duration_since(from);
    if elapsed.is_negative() && elapsed > jiff::SignedDuration::from_secs(-2) {
        return Some(Duration::ZERO);
    }
    Duration::try_from(elapsed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn launched(launched: Option<i64>, scheduled: Option<i64>) -> ServerStatus {
        ServerStatus { launched_at: launched.map(at), scheduled_at: scheduled.map(at), ..ServerStatus::default() }
    }

    #[test]
    fn the_first_launch_is_observed_once_from_the_creation() {
        let created = at(1_000);
        let observed = first_launch(&launched(None, Some(1_004)), &launched(Some(1_090), Some(1_004)), created);
        assert_eq!(
            observed,
            Some(FirstLaunch { provision: Some(Duration::from_secs(90)), scheduling: Some(Duration::from_secs(4)) })
        );
        // A later poll (or a reboot that moves launched_at) observes nothing.
        assert_eq!(
            first_launch(&launched(Some(1_090), Some(1_004)), &launched(Some(1_090), Some(1_004)), created),
            None
        );
        assert_eq!(
            first_launch(&launched(Some(1_090), Some(1_004)), &launched(Some(2_000), Some(1_004)), created),
            None
        );
        // No launch yet: nothing.
        assert_eq!(first_launch(&launched(None, None), &launched(None, Some(1_004)), created), None);
    }

    #[test]
    fn a_negative_duration_is_not_observed_unless_within_the_creation_precision() {
        let observed = first_launch(&launched(None, None), &launched(Some(998), None), at(1_000));
        assert_eq!(observed, Some(FirstLaunch { provision: None, scheduling: None }));
        let created = Timestamp::from_millisecond(1_000_400).unwrap_or_default();
        let scheduled = Timestamp::from_millisecond(999_000).unwrap_or_default();
        let after =
            ServerStatus { launched_at: Some(at(1_002)), scheduled_at: Some(scheduled), ..ServerStatus::default() };
        let observed = first_launch(&launched(None, None), &after, created);
        assert_eq!(observed.and_then(|launch| launch.scheduling), Some(Duration::ZERO));
    }

    #[test]
    fn the_state_label_is_the_phase_in_lower_case() {
        assert_eq!(state_label(None), "");
        for phase in [Phase::Pending, Phase::Queued, Phase::Building, Phase::Running, Phase::Stopping, Phase::Stopped] {
            assert_eq!(state_label(Some(phase)), format!("{phase:?}").to_lowercase());
        }
    }
}
