//! The invariant checker: what it remembers about each Server between steps
//! and the violations found. It judges each decision (DESIGN §12: 2, 5, 10)
//! and each stored write (2, 3) here; the engine asks it about 1, 4, 6 and
//! 13 where the cloud calls happen, against the cloud's truth.

use server_core::model::{
    ConditionReason, ConditionType, RETRY_ANNOTATION, RebuildState, ServerStatus, retry_requested,
};
use server_core::{Action, Decision, Options, Outcome, ProviderView, Server};

use super::report::Violation;
use super::rules::DecisionRules;

/// Broken invariants found in one check: (invariant, message).
pub(crate) type Findings = Vec<(&'static str, String)>;

/// The checker of one shard.
#[derive(Debug)]
pub(crate) struct Checker {
    seed: u64,
    shard: usize,
    max_attempts: i32,
    /// Per Server of the shard, by index.
    memory: Vec<CheckState>,
    /// The first violations found, up to `keep`, and how many in all.
    violations: Vec<Violation>,
    violation_count: u64,
    keep: usize,
}

/// What the checker remembers about one Server between steps.
#[derive(Debug, Default)]
struct CheckState {
    /// A persisted status ever showed provisionedAt, launchedAt or a
    /// post-launch phase.
    ever_booted: bool,
    /// The resourceVersion an operator reset was written at, until a pass
    /// that read it (or later) with a known provider view has been checked.
    reset_rv: Option<u64>,
    /// The cloud's accepted creates for this uid at the last operator reset.
    creates_at_reset: u32,
    /// The latest wake for this Server: (the resourceVersion that woke a
    /// replica, when), until a pass reads that version or a later one.
    owed_wake: Option<(u64, u64)>,
}

impl Checker {
    pub(crate) fn new(seed: u64, shard: usize, servers: usize, max_attempts: i32, keep_violations: usize) -> Self {
        Checker {
            seed,
            shard,
            max_attempts,
            memory: (0..servers).map(|_| CheckState::default()).collect(),
            violations: Vec::new(),
            violation_count: 0,
            keep: keep_violations,
        }
    }

    /// Records a broken invariant on the Server named `server`, at step
    /// `step` and virtual time `at_ms` of this shard.
    pub(crate) fn report(&mut self, invariant: &'static str, server: String, step: u64, at_ms: u64, message: String) {
        self.violation_count += 1;
        if self.violations.len() < self.keep {
            self.violations.push(Violation {
                invariant,
                seed: self.seed,
                shard: self.shard,
                step,
                at_ms,
                server,
                message,
            });
        }
    }

    /// Violations found, including those not kept.
    pub(crate) fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// The violations kept for the report (the first ones).
    pub(crate) fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// A replica woke for Server `i` at resourceVersion `rv`, at `now`: a
    /// pass must read that version or a later one.
    #[inline]
    pub(crate) fn owe_wake(&mut self, i: usize, rv: u64, now: u64) {
        if let Some(state) = self.memory.get_mut(i) {
            state.owed_wake = Some((rv, now));
        }
    }

    /// A pass on Server `i` read resourceVersion `view_rv`: it pays a wake
    /// for that version or an older one.
    #[inline]
    pub(crate) fn pass_read(&mut self, i: usize, view_rv: u64) {
        if let Some(state) = self.memory.get_mut(i)
            && state.owed_wake.is_some_and(|(owed, _)| view_rv >= owed)
        {
            state.owed_wake = None;
        }
    }

    /// The wake on Server `i` no pass has paid yet: (resourceVersion, when).
    #[inline]
    pub(crate) fn owed_wake(&self, i: usize) -> Option<(u64, u64)> {
        self.memory.get(i).and_then(|state| state.owed_wake)
    }

    /// An operator reset of Server `i` was stored at `reset_rv` (none if the
    /// write failed), when the cloud had accepted `creates` for it.
    pub(crate) fn operator_reset(&mut self, i: usize, reset_rv: Option<u64>, creates: u32) {
        if let Some(state) = self.memory.get_mut(i) {
            state.reset_rv = reset_rv;
            state.creates_at_reset = creates;
        }
    }

    /// A stored status of Server `i` ever showed a boot.
    #[inline]
    pub(crate) fn ever_booted(&self, i: usize) -> bool {
        self.memory.get(i).is_some_and(|state| state.ever_booted)
    }

    /// The cloud's accepted creates for Server `i` at its last operator reset.
    #[inline]
    pub(crate) fn creates_at_reset(&self, i: usize) -> u32 {
        self.memory.get(i).map_or(0, |state| state.creates_at_reset)
    }

    /// Invariants 2 and 3 on a write to Server `i`'s stored status.
    #[inline]
    pub(crate) fn check_write(&mut self, i: usize, old: &ServerStatus, new: &ServerStatus) -> Findings {
        let max = self.max_attempts;
        let mut found = Vec::new();
        if let Some(latched) = old.provisioned_at
            && new.provisioned_at != Some(latched)
        {
            found.push(("3", format!("provisionedAt changed from {latched} to {:?}", new.provisioned_at)));
        }
        if let (Some(before), Some(after)) = (&old.rebuild, &new.rebuild) {
            let same_target = before.target_image_id == after.target_image_id;
            // Forward only; the one assignment over a rank is the park's
            // Failed over Succeeded, and a new target starts at Initiated.
            let backwards = after.state.rank() < before.state.rank()
                || (before.state == RebuildState::Failed && after.state != RebuildState::Failed);
            if same_target && backwards {
                found
                    .push(("rebuild", format!("the rebuild marker went from {:?} to {:?}", before.state, after.state)));
            }
            if !same_target && after.state != RebuildState::Initiated {
                found.push(("rebuild", format!("a marker retargeted at {:?}", after.state)));
            }
        }
        if new.provider_create_failures > max {
            found.push(("2", format!("providerCreateFailures {} above the cap {max}", new.provider_create_failures)));
        }
        if shows_boot(new)
            && let Some(state) = self.memory.get_mut(i)
        {
            state.ever_booted = true;
        }
        found
    }
}

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
    pub(crate) provider: ProviderViewKind,
    /// The provider record read shows a boot (which latches provisionedAt
    /// in the same pass, whatever the status said: §7).
    pub(crate) record_booted: bool,
    /// The Server as read had provisionedAt latched.
    pub(crate) latched: bool,
    /// The Server as read was paused (`spec.pause`).
    pub(crate) paused: bool,
    /// ... and its status says so, which the first pass after the pause
    /// ends must replace, whatever the provider.
    pub(crate) pause_reported: bool,
    /// ... carried an operator's retry annotation.
    pub(crate) retry_requested: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProviderViewKind {
    Present,
    Absent,
    Unknown,
}

impl PassRead {
    pub(crate) fn new(
        rules: &DecisionRules,
        options: &Options,
        view: &Server,
        view_rv: u64,
        provider: &ProviderView,
    ) -> Self {
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
                ProviderView::Present(_) => ProviderViewKind::Present,
                ProviderView::Absent => ProviderViewKind::Absent,
                ProviderView::Unknown(_) | ProviderView::NoIdentity | ProviderView::RegionUnserved(_) => {
                    ProviderViewKind::Unknown
                }
            },
            record_booted: matches!(provider, ProviderView::Present(record) if server_core::record_shows_boot(record)),
            latched: view.status.provisioned_at.is_some(),
            paused: view.spec.pause,
            pause_reported: view
                .status
                .condition(ConditionType::Available)
                .is_some_and(|c| c.message == server_core::reconcile::PAUSED_MESSAGE),
            retry_requested: retry_requested(&view.meta),
        }
    }

    pub(crate) fn provider_code(&self) -> u64 {
        self.provider as u64
    }
}

impl Checker {
    /// Checks one decision (a pass's, or the follow-up after a failed
    /// action) on Server `i`. Also says whether it newly parks the Server.
    #[inline]
    pub(crate) fn check_decision(
        &mut self,
        i: usize,
        pass: &PassRead,
        decision: &Decision,
        first: bool,
    ) -> (Findings, bool) {
        let max = self.max_attempts;
        let creates = decision.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_)));
        let deletes = decision.actions.iter().any(|a| matches!(a, Action::DeleteProviderServer(_)));
        let unknown = pass.provider == ProviderViewKind::Unknown;
        let terminal = matches!(decision.outcome, Outcome::Terminal(_));
        let at_cap = terminal && decision.status.provider_create_failures == max;
        let mut found: Vec<(&'static str, String)> = Vec::new();

        if unknown && (creates || deletes) {
            found.push(("10", format!("provider view unknown, yet the decision {}", verb(creates, deletes))));
        }
        // A paused Server gets no work: its status says so, nothing else.
        if pass.paused && decision.actions.iter().any(|a| !matches!(a, Action::WriteStatus(_) | Action::Emit(_))) {
            found.push(("pause", format!("a paused Server's pass decided {:?}", decision.actions)));
        }
        // An operator's retry request is consumed by the first pass that
        // reads it (unless it is paused or being deleted).
        let consumes_retry =
            decision.actions.iter().any(|a| a.annotation_changes().contains(&(RETRY_ANNOTATION, None)));
        if first && pass.retry_requested && !pass.paused && !pass.deleting && !consumes_retry {
            found.push(("retry", "a pass read the retry annotation and left it".into()));
        }
        // A park outlasts an outage: with nothing new from the provider,
        // nothing about a parked Server changes (no status write, no requeue),
        // unless an operator asked for a retry.
        let writes_status = decision.actions.iter().any(|a| matches!(a, Action::WriteStatus(_)));
        // ... except the latch of a boot an earlier read of the term showed
        // (a parked server whose slow create came up after all).
        let latches_a_boot = !pass.latched && decision.status.provisioned_at.is_some();
        if first
            && !latches_a_boot
            && unknown
            && pass.parked
            && !pass.deleting
            && !pass.retry_requested
            && !pass.paused
            && !(pass.pause_reported && terminal)
            && (!terminal || (pass.park_reported && writes_status))
        {
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

        let Some(check) = self.memory.get_mut(i) else { return (Vec::new(), false) };
        // A paused Server's pass does nothing whatever it holds (Done, no
        // requeue: a person said so); the retry machine's rules are judged
        // on the others.
        let decisive = first && !pass.deleting && !unknown && !pass.paused;
        // Judged on what the pass read: a reset the controller has not seen
        // yet cannot have re-armed anything.
        // A server parked as failed whose read shows it booted after all
        // (a slow create came up) leaves its park; it is never created or
        // deleted again.
        let leaves_park = pass.record_booted && !creates && !deletes;
        if decisive
            && pass.failures >= max
            && !pass.retry_requested
            && !leaves_park
            && (!terminal || creates || deletes)
        {
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
            // Treated as fine: created or settled without counting the
            // failure (a pass that counts it, or that an operator's retry
            // request re-arms, may create the next attempt itself once the
            // failed server is gone).
            let counted = decision.status.provider_create_failures > pass.failures || pass.retry_requested;
            if pass.pcf && !pass.record_booted && !counted && (creates || decision.outcome == Outcome::Done) {
                found.push((
                    "5",
                    "the watch predicate says create failure, yet the retry machine treated the server as fine".into(),
                ));
            }
        }
        let newly_parked = at_cap && !pass.deleting && pass.failures < max;
        (found, newly_parked)
    }
}

/// The checker's own reading of "booted", independent of the rules under
/// test: provisionedAt, launchedAt or a post-launch phase.
fn shows_boot(status: &ServerStatus) -> bool {
    status.provisioned_at.is_some() || status.launched_at.is_some() || status.phase.is_some_and(|p| p.is_post_launch())
}

fn verb(creates: bool, deletes: bool) -> &'static str {
    match (creates, deletes) {
        (true, true) => "creates and deletes",
        (true, false) => "creates",
        _ => "deletes",
    }
}
