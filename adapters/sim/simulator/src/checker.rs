//! Invariant checks on each decision (DESIGN §12: 2, 5, 10 here; 1, 3, 4 and
//! 6 where the writes and cloud calls happen, against the cloud's truth).

use server_core::model::{ConditionReason, ConditionType};
use server_core::{Action, Decision, Options, Outcome, ProviderView, Server};

use super::engine::Engine;
use super::rules::Rules;

/// What a pass read, kept for checking its decision after the view is gone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PassRead {
    pub(crate) view_rv: u64,
    pub(crate) deleting: bool,
    pub(crate) retrying: bool,
    /// providerCreateFailures as the pass read it.
    pub(crate) failures: i32,
    /// The watch's predicate on the Server this pass read.
    pub(crate) pcf: bool,
    /// The Server as read was parked (waiting for a person).
    pub(crate) parked: bool,
    /// ... and its status already said so (Available Errored).
    pub(crate) park_reported: bool,
    pub(crate) provider: ProviderKind,
    /// The provider record read shows a boot (which latches provisionedAt
    /// in the same pass, whatever the status said: §7).
    pub(crate) record_booted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProviderKind {
    Present,
    Absent,
    Unknown,
}

impl PassRead {
    pub(crate) fn new(rules: &Rules, options: &Options, view: &Server, view_rv: u64, provider: &ProviderView) -> Self {
        PassRead {
            view_rv,
            deleting: view.meta.deleting,
            retrying: view.status.provider_create_retrying,
            failures: view.status.provider_create_failures,
            pcf: (rules.provider_create_failure)(view),
            parked: server_core::lifecycle(view, options).park().is_some(),
            park_reported: view
                .status
                .condition(ConditionType::Available)
                .is_some_and(|c| c.reason == ConditionReason::Errored),
            provider: match provider {
                ProviderView::Present(_) => ProviderKind::Present,
                ProviderView::Absent => ProviderKind::Absent,
                ProviderView::Unknown(_) | ProviderView::NoIdentity | ProviderView::RegionUnserved(_) => {
                    ProviderKind::Unknown
                }
            },
            record_booted: matches!(provider, ProviderView::Present(record) if server_core::record_shows_boot(record)),
        }
    }

    pub(crate) fn provider_code(&self) -> u64 {
        self.provider as u64
    }
}

impl Engine {
    /// Checks one decision (a pass's, or the follow-up after a failed action).
    pub(crate) fn check_decision(&mut self, i: usize, pass: &PassRead, decision: &Decision, first: bool) {
        let max = self.options.max_attempts();
        let creates = decision.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_)));
        let deletes = decision.actions.iter().any(|a| matches!(a, Action::DeleteProviderServer(_)));
        let unknown = pass.provider == ProviderKind::Unknown;
        let terminal = matches!(decision.outcome, Outcome::Terminal(_));
        let at_cap = terminal && decision.status.provider_create_failures == max;
        let mut found: Vec<(&'static str, String)> = Vec::new();

        if unknown && (creates || deletes) {
            found.push(("10", format!("provider view unknown, yet the decision {}", verb(creates, deletes))));
        }
        // A park outlasts an outage: with nothing new from the provider,
        // nothing about a parked Server changes (no status write, no requeue).
        let writes_status = decision.actions.iter().any(|a| matches!(a, Action::WriteStatus(_)));
        if first && unknown && pass.parked && !pass.deleting && (!terminal || (pass.park_reported && writes_status)) {
            found.push((
                "park",
                format!("a parked Server read with no provider view was changed: {:?}", decision.outcome),
            ));
        }
        if decision.status.provider_create_failures > max {
            found.push((
                "2",
                format!(
                    "decided providerCreateFailures {} above the cap {max}",
                    decision.status.provider_create_failures
                ),
            ));
        }

        let Some(check) = self.servers.get_mut(i).map(|o| &mut o.check) else { return };
        let decisive = first && !pass.deleting && !unknown;
        // Judged on what the pass read: a reset the controller has not seen
        // yet cannot have re-armed anything.
        if decisive && pass.failures >= max && (!terminal || creates || deletes) {
            found.push(("2", format!("at the cap without a reset, yet the pass decided {:?}", decision.outcome)));
        }
        // The first pass that read the reset (a lagging cache may not show it
        // yet) must re-arm.
        if decisive && check.reset_rv.is_some_and(|rv| pass.view_rv >= rv) {
            check.reset_rv = None;
            // With one attempt allowed the failed server itself is that
            // attempt, so a reset cannot re-arm it; from two up it must.
            if max >= 2 && pass.pcf && at_cap {
                found.push(("2", "an operator reset did not re-arm the retry".into()));
            }
        }
        // Invariant 5: the watch's predicate and the retry machine agree, on
        // a record that shows no boot (one that does latches first).
        if decisive && !pass.retrying {
            if deletes && !pass.pcf {
                found
                    .push(("5", "the retry machine deleted to retry while the watch predicate says no failure".into()));
            }
            if pass.pcf && !pass.record_booted && (creates || decision.outcome == Outcome::Done) {
                found.push((
                    "5",
                    "the watch predicate says create failure, yet the retry machine treated the server as fine".into(),
                ));
            }
        }
        let newly_parked = at_cap && !pass.deleting && pass.failures < max;
        for (invariant, message) in found {
            self.violation(invariant, i, message);
        }
        if newly_parked {
            self.maybe_schedule_reset(i);
        }
    }

    fn maybe_schedule_reset(&mut self, i: usize) {
        let Some(tracked) = self.servers.get_mut(i) else { return };
        if tracked.check.reset_scheduled || !self.faults.chance(self.config.kube.operator_reset) {
            return;
        }
        tracked.check.reset_scheduled = true;
        let at = self.now + self.faults.between(30_000, 120_000);
        self.queue.push(at, super::queue::EventKind::OperatorReset, i, 0);
    }
}

fn verb(creates: bool, deletes: bool) -> &'static str {
    match (creates, deletes) {
        (true, true) => "creates and deletes",
        (true, false) => "creates",
        _ => "deletes",
    }
}
