//! The monitor projection (DESIGN §11): which Servers a poll projects, and
//! the provider's record of a server folded into the status the monitor
//! owns. Pure; both monitors (server-kube's poll loop, the simulator's)
//! call [`projects`] and [`project`] and only list and patch.

use jiff::Timestamp;

use crate::status_patch::StatusPatch;

/// The rule that folds a record into a status: [`observe`] unless a test
/// swaps in another (the simulator checks its checker with broken rules).
pub type ObserveRule = fn(&ServerStatus, Option<&ProviderServer>, Timestamp) -> ServerStatus;

/// Whether a monitor poll projects a Server: not one being deleted (its
/// status is the reconciler's until it goes) nor a paused one (no work at
/// all, as for the reconciler).
pub fn projects(deleting: bool, paused: bool) -> bool {
    !deleting && !paused
}

/// Whether a poll projects a Server, given whether its provider's list
/// shows it (`listed`) and whether it carries a create-issued note
/// (`create_noted`). A listed one always; an unlisted one not while no pass
/// has begun to create it (`reconcile::never_created`): its status is the
/// first pass's to write, and the monitor's "not found" would only be
/// written over by it (at scale, every Server queued for its first pass
/// would cost a write). A server taken over from another controller is
/// listed, and projected.
pub fn projects_as_listed(status: &ServerStatus, listed: bool, create_noted: bool) -> bool {
    listed || !crate::reconcile::no_create_begun(status, create_noted)
}

/// The status patch a monitor poll writes for a Server it projects, given
/// the record its list shows (`None`: not listed); `None` when nothing
/// changes, so an unchanged Server costs no write.
pub fn project(status: &ServerStatus, record: Option<&ProviderServer>, now: Timestamp) -> Option<StatusPatch> {
    project_with(observe, status, record, now)
}

/// As [`project`], folding with `rule`.
pub fn project_with(
    rule: ObserveRule,
    status: &ServerStatus,
    record: Option<&ProviderServer>,
    now: Timestamp,
) -> Option<StatusPatch> {
    StatusPatch::between(status, &rule(status, record, now))
}

/// Whether a projection the monitor did not get written (skipped for a
/// newer copy or a pass acting on the Server, or refused) wakes a pass at
/// once rather than waiting for the next poll: one that would first latch
/// `provisionedAt`. The boot is in the list the pass takes its view from, so
/// the pass latches it now; a poll later, the server may be gone and its
/// create's grace count it lost, and a server that booted would be created
/// again.
pub fn unwritten_wakes(status: &ServerStatus, projected: &ServerStatus) -> bool {
    status.provisioned_at.is_none() && projected.provisioned_at.is_some()
}

use crate::model::{ConditionReason, ConditionStatus, ConditionType, Phase, ServerStatus, set_condition};
use crate::port::{PowerState, ProviderServer, ProviderStatus};
use crate::predicate::record_shows_boot;
use crate::reconcile::advance_rebuild_from as advance_from;

/// Projects a provider record (or its absence from the provider's list) onto
/// a status. Touches only monitor-owned fields; `provisionedAt` is latched,
/// and a rebuild marker's state only advances (never created or cleared).
///
/// A server being cleared for retry (`providerCreateRetrying`) keeps the
/// status the reconciler reset it to while the record shows no boot: that
/// record describes the failed server on its way out, and projecting it would
/// undo the reset on every poll and wake the reconciler each time. A record
/// that shows a boot is always projected (the latch comes first).
pub fn observe(status: &ServerStatus, record: Option<&ProviderServer>, now: Timestamp) -> ServerStatus {
    if status.provider_create_retrying && !record.is_some_and(record_shows_boot) {
        return status.clone();
    }
    let mut next = status.clone();
    project_health(&mut next, record, now);

    let Some(record) = record else {
        return next;
    };
    if let Some(marker) = next.rebuild.as_mut() {
        advance_from(marker, record);
    }
    next.phase = match (&record.status, record.power_state) {
        // A baremetal server's phase is its Ironic node's; without one read,
        // a VM's (Nova's task state).
        (ProviderStatus::Build, _) => Some(match record.ironic {
            Some(state) => crate::baremetal::build_phase(state),
            None if record.queued => Phase::Queued,
            None => Phase::Building,
        }),
        (ProviderStatus::Rebuild, _) => Some(Phase::Building),
        (_, PowerState::Running) => Some(Phase::Running),
        (_, PowerState::Shutdown) => Some(Phase::Stopped),
        _ => next.phase.or(Some(Phase::Pending)),
    };
    if record.created.is_some() {
        next.scheduled_at = record.created;
    }
    if record.launched_at.is_some() {
        next.launched_at = record.launched_at;
    }
    // The latch: written once, from the launched-at signal, never changed.
    if next.provisioned_at.is_none() {
        next.provisioned_at = record.launched_at;
    }
    next.private_ip = record.private_ip.clone();
    next.public_ip = record.public_ip.clone();
    // The MAC is trustworthy only once ACTIVE (baremetal rebinds it during
    // deploy), and is never cleared.
    if record.status == ProviderStatus::Active && record.mac_address.is_some() {
        next.mac_address = record.mac_address.clone();
    }
    next
}

/// Sets the Healthy condition the monitor owns from a provider record (or
/// its absence). A pass that holds a record writes Healthy only through this,
/// so it writes what the monitor's next poll of the same record writes: the
/// two never rewrite each other.
pub(crate) fn project_health(status: &mut ServerStatus, record: Option<&ProviderServer>, now: Timestamp) {
    let (health, reason, message) = health_of(record);
    set_condition(&mut status.conditions, ConditionType::Healthy, health, reason, message, now);
}

fn health_of(record: Option<&ProviderServer>) -> (ConditionStatus, ConditionReason, &'static str) {
    match record.map(|r| &r.status) {
        Some(ProviderStatus::Active) => (ConditionStatus::True, ConditionReason::Healthy, "Server is active"),
        Some(ProviderStatus::Error) => {
            (ConditionStatus::False, ConditionReason::Errored, "Server is in an error state")
        }
        Some(ProviderStatus::Rebuild) => {
            (ConditionStatus::False, ConditionReason::Provisioning, "Server is rebuilding")
        }
        Some(ProviderStatus::Unknown) => {
            (ConditionStatus::Unknown, ConditionReason::Unknown, "Server status is unknown")
        }
        None => (ConditionStatus::Unknown, ConditionReason::Unknown, "Server not found at the provider"),
        Some(ProviderStatus::Build | ProviderStatus::Other(_)) => {
            (ConditionStatus::False, ConditionReason::Degraded, "Server is not active")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn record(status: ProviderStatus, power: PowerState) -> ProviderServer {
        ProviderServer { status, power_state: power, ..Default::default() }
    }

    #[test]
    fn a_deleting_or_paused_server_is_not_projected() {
        assert!(projects(false, false));
        assert!(!projects(true, false));
        assert!(!projects(false, true));
    }

    #[test]
    fn an_unlisted_server_no_pass_began_to_create_is_left_to_its_pass() {
        let unset = ServerStatus::default();
        assert!(!projects_as_listed(&unset, false, false), "a new Server: its first pass writes its status");
        assert!(projects_as_listed(&unset, true, false), "a listed Server is always projected");
        assert!(projects_as_listed(&unset, false, true), "a create was noted: its absence is news");
        let counted = ServerStatus { provider_create_failures: 1, ..ServerStatus::default() };
        assert!(projects_as_listed(&counted, false, false), "an attempt was counted");
        let mut creating = ServerStatus::default();
        set_condition(
            &mut creating.conditions,
            ConditionType::Available,
            ConditionStatus::False,
            ConditionReason::Provisioning,
            "Creating provider server",
            at(1),
        );
        assert!(projects_as_listed(&creating, false, false), "a pass wrote Available before its create");
    }

    #[test]
    fn a_projection_writes_what_changed_and_nothing_the_second_time() {
        let running = record(ProviderStatus::Active, PowerState::Running);
        let patch = project(&ServerStatus::default(), Some(&running), at(5)).expect("a new record changes the status");
        let mut status = ServerStatus::default();
        patch.apply(&mut status);
        assert_eq!(status.phase, Some(Phase::Running));
        assert_eq!(project(&status, Some(&running), at(6)), None, "a fixed point costs no write");
    }

    #[test]
    fn only_an_unwritten_first_latch_wakes_a_pass() {
        let booted = ProviderServer { launched_at: Some(at(4)), ..record(ProviderStatus::Active, PowerState::Running) };
        let building = record(ProviderStatus::Build, PowerState::NoState);
        let unset = ServerStatus::default();
        assert!(unwritten_wakes(&unset, &observe(&unset, Some(&booted), at(5))));
        assert!(!unwritten_wakes(&unset, &observe(&unset, Some(&building), at(5))), "no boot, the next poll will do");
        let latched = observe(&unset, Some(&booted), at(5));
        assert!(!unwritten_wakes(&latched, &observe(&latched, Some(&booted), at(6))), "latched already");
        assert!(!unwritten_wakes(&latched, &observe(&latched, None, at(6))), "an absence is the pass's own read");
    }

    fn healthy(status: &ServerStatus) -> (ConditionStatus, ConditionReason) {
        let c = status.condition(ConditionType::Healthy).cloned().unwrap_or_else(|| panic!("no Healthy"));
        (c.status, c.reason)
    }

    #[test]
    fn health_table() {
        let cases = [
            (Some(ProviderStatus::Active), ConditionStatus::True, ConditionReason::Healthy),
            (Some(ProviderStatus::Error), ConditionStatus::False, ConditionReason::Errored),
            (Some(ProviderStatus::Rebuild), ConditionStatus::False, ConditionReason::Provisioning),
            (Some(ProviderStatus::Unknown), ConditionStatus::Unknown, ConditionReason::Unknown),
            (None, ConditionStatus::Unknown, ConditionReason::Unknown),
            (Some(ProviderStatus::Build), ConditionStatus::False, ConditionReason::Degraded),
            (Some(ProviderStatus::Other("SHUTOFF".into())), ConditionStatus::False, ConditionReason::Degraded),
        ];
        for (provider, status, reason) in cases {
            let rec = provider.clone().map(|s| record(s, PowerState::NoState));
            let next = observe(&ServerStatus::default(), rec.as_ref(), at(1));
            assert_eq!(healthy(&next), (status, reason), "{provider:?}");
        }
    }

    #[test]
    fn phase_table() {
        let mut queued = record(ProviderStatus::Build, PowerState::NoState);
        queued.queued = true;
        let cases = [
            (record(ProviderStatus::Build, PowerState::NoState), None, Some(Phase::Building)),
            (queued, None, Some(Phase::Queued)),
            (record(ProviderStatus::Active, PowerState::Running), None, Some(Phase::Running)),
            (record(ProviderStatus::Other("SHUTOFF".into()), PowerState::Shutdown), None, Some(Phase::Stopped)),
            (record(ProviderStatus::Error, PowerState::NoState), Some(Phase::Building), Some(Phase::Building)),
            (record(ProviderStatus::Error, PowerState::NoState), None, Some(Phase::Pending)),
        ];
        for (rec, before, after) in cases {
            let status = ServerStatus { phase: before, ..Default::default() };
            assert_eq!(observe(&status, Some(&rec), at(1)).phase, after, "{rec:?}");
        }
    }

    #[test]
    fn provisioned_at_latches_and_backfills() {
        let mut active = record(ProviderStatus::Active, PowerState::Running);
        active.launched_at = Some(at(10));
        let first = observe(&ServerStatus::default(), Some(&active), at(11));
        assert_eq!(first.provisioned_at, Some(at(10)));
        // A later read without launched-at, or with another one, changes nothing.
        let lacking = record(ProviderStatus::Active, PowerState::Running);
        assert_eq!(observe(&first, Some(&lacking), at(12)).provisioned_at, Some(at(10)));
        let mut other = active.clone();
        other.launched_at = Some(at(99));
        assert_eq!(observe(&first, Some(&other), at(12)).provisioned_at, Some(at(10)));
        assert_eq!(observe(&first, None, at(12)).provisioned_at, Some(at(10)));
    }

    #[test]
    fn mac_only_from_active_and_never_cleared() {
        let mut building = record(ProviderStatus::Build, PowerState::NoState);
        building.mac_address = Some("fa:16:3e:00:00:01".into());
        assert_eq!(observe(&ServerStatus::default(), Some(&building), at(1)).mac_address, None);
        let mut active = record(ProviderStatus::Active, PowerState::Running);
        active.mac_address = Some("fa:16:3e:00:00:02".into());
        let seen = observe(&ServerStatus::default(), Some(&active), at(1));
        assert_eq!(seen.mac_address.as_deref(), Some("fa:16:3e:00:00:02"));
        let without = record(ProviderStatus::Active, PowerState::Running);
        assert_eq!(observe(&seen, Some(&without), at(2)).mac_address.as_deref(), Some("fa:16:3e:00:00:02"));
        assert_eq!(observe(&seen, None, at(2)).mac_address.as_deref(), Some("fa:16:3e:00:00:02"));
    }

    #[test]
    fn observing_the_same_record_twice_is_a_fixed_point() {
        let mut active = record(ProviderStatus::Active, PowerState::Running);
        active.launched_at = Some(at(5));
        active.created = Some(at(4));
        active.private_ip = Some("10.0.0.5".into());
        let once = observe(&ServerStatus::default(), Some(&active), at(6));
        assert_eq!(observe(&once, Some(&active), at(7)), once);
    }
}
