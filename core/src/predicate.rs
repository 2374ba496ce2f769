//! The ProviderCreateFailure predicate (DESIGN §5) and the watch rule built on
//! it (§6). The watch trigger and the retry machine call these same functions:
//! nothing else decides whether a server may be deleted and recreated.

use crate::issued::IssuedCreate;
use crate::model::{
    ADOPTED_ANNOTATION, ConditionReason, ConditionStatus, ConditionType, Phase, Server, ServerStatus, retry_requested,
};
use crate::port::{PowerState, ProviderServer, ProviderStatus};
use crate::reconcile::rebuild_settlement_pending;

/// Whether the provider ever booted this server, as far as status tells.
/// Fails closed: any one sign of a boot is enough.
pub fn ever_booted(status: &ServerStatus) -> bool {
    status.provisioned_at.is_some() || status.launched_at.is_some() || status.phase.is_some_and(Phase::is_post_launch)
}

/// Whether a provider record shows that the server booted: a launch time,
/// ACTIVE, or a power state the monitor would record as a post-launch phase.
/// Fails closed: any one sign is enough.
pub fn record_shows_boot(record: &ProviderServer) -> bool {
    record.launched_at.is_some()
        || record.status == ProviderStatus::Active
        || (record.status != ProviderStatus::Build
            && matches!(record.power_state, PowerState::Running | PowerState::Shutdown))
}

/// True iff the provider create landed in an error before the server ever
/// launched, so deleting and recreating it loses nothing.
pub fn provider_create_failure(server: &Server) -> bool {
    status_shows_create_failure(&server.status)
}

/// [`provider_create_failure`] over a status alone.
pub fn status_shows_create_failure(status: &ServerStatus) -> bool {
    if ever_booted(status) {
        return false;
    }
    // Only pre-launch phases (or none) remain here.
    status
        .condition(ConditionType::Healthy)
        .is_some_and(|healthy| healthy.status == ConditionStatus::False && healthy.reason == ConditionReason::Errored)
}

/// A server that booted and that the provider's latest record does not show
/// (the monitor found no record, or the provider reports UNKNOWN). The
/// reconciler must look: if the provider server is gone it is reported
/// missing, never recreated (§7).
pub fn booted_server_unseen(status: &ServerStatus) -> bool {
    ever_booted(status)
        && status
            .condition(ConditionType::Healthy)
            .is_some_and(|h| h.status == ConditionStatus::Unknown && h.reason == ConditionReason::Unknown)
}

/// A provider server this controller holds for the Server, never seen to
/// boot, that the latest record does not show (the monitor found none, or
/// the provider reports UNKNOWN): a create it issued for the current attempt
/// (the create-issued note), or a server it took over from another
/// controller (the adoption note). The case of the lost-before-launch rule,
/// e.g. a short-lived provider server that came and went between two
/// monitor polls: only a pass can count it lost (once the create's grace is
/// over) or create the Server's server again (a taken-over one has no create
/// to count); a Server whose last pass ended Done is requeued by nothing else.
pub fn unbooted_server_unseen(server: &Server) -> bool {
    let status = &server.status;
    // The notes are read last: the watch asks this of every write.
    !ever_booted(status)
        && status
            .condition(ConditionType::Healthy)
            .is_some_and(|h| h.status == ConditionStatus::Unknown && h.reason == ConditionReason::Unknown)
        && (server.meta.annotations.contains_key(ADOPTED_ANNOTATION)
            || IssuedCreate::of(server).is_some_and(|issued| issued.attempt == status.provider_create_failures))
}

/// The watch rule (§6): wake the reconciler for a new object, a spec change
/// (generation, which deletion also bumps), the start of deletion, or a
/// rising ProviderCreateFailure edge. Status writes that leave the predicate
/// unchanged, and falling edges, do not wake it, with additions the design
/// leaves to us, each for a Server the reconciler would otherwise not see
/// again (a parked one is never requeued):
/// - an operator lowering `providerCreateFailures` (the reset that re-arms a
///   parked server, §12.2);
/// - [`booted_server_unseen`] changing, either way: a booted server deleted
///   behind the operator's back is reported within one monitor poll rather
///   than at the next resync, and one reported missing that the provider
///   shows again is provisioned again;
/// - [`unbooted_server_unseen`] rising: a create issued, or a server taken
///   over, never seen to boot, whose provider server the monitor no longer
///   finds (lost before launch);
/// - a first sign of a boot on a Server whose Available is Errored (a server
///   parked as failed whose slow create came up after all leaves its park);
/// - an operator's retry annotation appearing ([`crate::model::RETRY_ANNOTATION`]);
/// - a rebuild's end awaiting its settlement pass
///   ([`crate::reconcile::rebuild_settlement_pending`]): a level, so every
///   write while it stands wakes the reconciler, and a lost wake or a
///   dropped settlement write is recovered by the next write. Never for an
///   `Initiated` or `Rebuilding` marker: a wake there could send a rebuild
///   whose acceptance was not yet written a second time.
pub fn should_wake(old: Option<&Server>, new: &Server) -> bool {
    wakes(old.map(WakeSignals::of).as_ref(), &WakeSignals::of(new))
}

/// What the wake rule reads of a Server, and all it needs to remember of
/// one: a watch filter keeps this per Server instead of a copy of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeSignals {
    generation: i64,
    deleting: bool,
    create_failure: bool,
    create_failures: i32,
    booted_unseen: bool,
    unbooted_server_unseen: bool,
    ever_booted: bool,
    available_errored: bool,
    retry_requested: bool,
    rebuild_settlement_pending: bool,
}

impl WakeSignals {
    pub fn of(server: &Server) -> Self {
        let status = &server.status;
        WakeSignals {
            generation: server.meta.generation,
            deleting: server.meta.deleting,
            create_failure: provider_create_failure(server),
            create_failures: status.provider_create_failures,
            booted_unseen: booted_server_unseen(status),
            unbooted_server_unseen: unbooted_server_unseen(server),
            ever_booted: ever_booted(status),
            available_errored: available_errored(status),
            retry_requested: retry_requested(&server.meta),
            rebuild_settlement_pending: rebuild_settlement_pending(server),
        }
    }
}

/// [`should_wake`] over the signals of the Server as last seen and as now.
pub fn wakes(old: Option<&WakeSignals>, new: &WakeSignals) -> bool {
    let Some(old) = old else {
        return true;
    };
    new.rebuild_settlement_pending
        || old.generation != new.generation
        || (!old.deleting && new.deleting)
        || (!old.create_failure && new.create_failure)
        || new.create_failures < old.create_failures
        || old.booted_unseen != new.booted_unseen
        || (!old.unbooted_server_unseen && new.unbooted_server_unseen)
        || (!old.ever_booted && new.ever_booted && new.available_errored)
        || (!old.retry_requested && new.retry_requested)
}

fn available_errored(status: &ServerStatus) -> bool {
    status.condition(ConditionType::Available).is_some_and(|c| c.reason == ConditionReason::Errored)
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::model::set_condition;

    fn errored(phase: Option<Phase>) -> Server {
        let mut server = Server::default();
        server.status.phase = phase;
        set_condition(
            &mut server.status.conditions,
            ConditionType::Healthy,
            ConditionStatus::False,
            ConditionReason::Errored,
            "boom",
            Timestamp::UNIX_EPOCH,
        );
        server
    }

    #[test]
    fn pre_launch_phases_with_errored_health_are_failures() {
        for phase in [None, Some(Phase::Pending), Some(Phase::Queued), Some(Phase::Building)] {
            assert!(provider_create_failure(&errored(phase)), "{phase:?}");
        }
    }

    #[test]
    fn post_launch_phases_never_are() {
        for phase in [Phase::Running, Phase::Stopping, Phase::Stopped] {
            assert!(!provider_create_failure(&errored(Some(phase))), "{phase:?}");
        }
    }

    #[test]
    fn provisioned_at_wins_even_when_launched_at_and_phase_are_lost() {
        let mut server = errored(Some(Phase::Pending));
        server.status.provisioned_at = Some(Timestamp::UNIX_EPOCH);
        assert!(!provider_create_failure(&server));
    }

    #[test]
    fn launched_at_alone_blocks_it() {
        let mut server = errored(None);
        server.status.launched_at = Some(Timestamp::UNIX_EPOCH);
        assert!(!provider_create_failure(&server));
    }

    #[test]
    fn health_other_than_false_errored_is_not_a_failure() {
        let mut server = Server::default();
        assert!(!provider_create_failure(&server), "no Healthy condition");
        for (status, reason) in [
            (ConditionStatus::Unknown, ConditionReason::Errored),
            (ConditionStatus::False, ConditionReason::Degraded),
            (ConditionStatus::False, ConditionReason::Provisioning),
            (ConditionStatus::True, ConditionReason::Healthy),
        ] {
            set_condition(
                &mut server.status.conditions,
                ConditionType::Healthy,
                status,
                reason,
                "",
                Timestamp::UNIX_EPOCH,
            );
            assert!(!provider_create_failure(&server), "{status:?}/{reason:?}");
        }
    }

    /// A power state shows a boot where the monitor records it as a
    /// post-launch phase: on any status but BUILD (a building server is
    /// Building whatever its power state says).
    #[test]
    fn a_power_state_shows_a_boot_unless_the_server_is_still_building() {
        let record = |status, power_state| ProviderServer { status, power_state, ..ProviderServer::default() };
        assert!(!record_shows_boot(&record(ProviderStatus::Build, PowerState::Running)));
        assert!(!record_shows_boot(&record(ProviderStatus::Build, PowerState::Shutdown)));
        assert!(record_shows_boot(&record(ProviderStatus::Error, PowerState::Running)));
        assert!(record_shows_boot(&record(ProviderStatus::Other("SHUTOFF".into()), PowerState::Shutdown)));
        assert!(!record_shows_boot(&record(ProviderStatus::Error, PowerState::NoState)));
    }

    /// A first sign of a boot wakes only a Server whose Available is
    /// Errored (a park its booted server leaves); the monitor recording the
    /// boot of any other server wakes nothing.
    #[test]
    fn a_first_boot_wakes_only_a_server_whose_available_is_errored() {
        let building = Server::default();
        let mut booted = building.clone();
        booted.status.phase = Some(Phase::Running);
        assert!(!should_wake(Some(&building), &booted));
        let mut parked = building.clone();
        set_condition(
            &mut parked.status.conditions,
            ConditionType::Available,
            ConditionStatus::False,
            ConditionReason::Errored,
            "parked",
            Timestamp::UNIX_EPOCH,
        );
        let mut parked_booted = parked.clone();
        parked_booted.status.phase = Some(Phase::Running);
        assert!(should_wake(Some(&parked), &parked_booted));
    }

    #[test]
    fn wake_rule() {
        let healthy = Server::default();
        let failed = errored(Some(Phase::Building));
        assert!(should_wake(None, &healthy), "creation");
        assert!(should_wake(Some(&healthy), &failed), "rising edge");
        assert!(!should_wake(Some(&failed), &healthy), "falling edge");
        assert!(!should_wake(Some(&failed), &failed), "unchanged predicate");
        let mut respec = healthy.clone();
        respec.meta.generation += 1;
        assert!(should_wake(Some(&healthy), &respec), "generation");
        let mut deleting = healthy.clone();
        deleting.meta.deleting = true;
        assert!(should_wake(Some(&healthy), &deleting), "deletion");
        let mut status_only = healthy.clone();
        status_only.status.private_ip = Some("10.0.0.1".into());
        assert!(!should_wake(Some(&healthy), &status_only), "status write");
        let mut parked = failed.clone();
        parked.status.provider_create_failures = 3;
        let mut reset = parked.clone();
        reset.status.provider_create_failures = 0;
        assert!(should_wake(Some(&parked), &reset), "operator reset re-arms");
        assert!(!should_wake(Some(&reset), &parked), "the counter rising is the reconciler's own write");
        let mut running = healthy.clone();
        running.status.provisioned_at = Some(Timestamp::UNIX_EPOCH);
        running.status.phase = Some(Phase::Running);
        let mut unseen = running.clone();
        set_condition(
            &mut unseen.status.conditions,
            ConditionType::Healthy,
            ConditionStatus::Unknown,
            ConditionReason::Unknown,
            "Server not found at the provider",
            Timestamp::UNIX_EPOCH,
        );
        assert!(should_wake(Some(&running), &unseen), "a booted server the provider no longer shows");
        assert!(!should_wake(Some(&unseen), &unseen.clone()), "only the edges");
        let mut never_booted = healthy.clone();
        never_booted.status.conditions = unseen.status.conditions.clone();
        assert!(!should_wake(Some(&healthy), &never_booted), "not booted: nothing to report");
    }
}
