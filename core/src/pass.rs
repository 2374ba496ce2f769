//! The protocol of one pass, sans I/O: which action runs next, what a
//! failure switches to, and the Server as last persisted. Both executors
//! (server-kube's and the simulator's) drive it the same way:
//!
//! ```text
//! let mut pass = Pass::start(server, &facts, &options, now);
//! while let Some(action) = pass.poll_action() {
//!     match apply(action) {               // the adapter's I/O, one action
//!         Ok(()) => pass.handle_done(),
//!         Err(failure) => pass.handle_failed(failure),
//!     }
//! }
//! let outcome = pass.into_outcome();
//! ```
//!
//! The actions of the decision run in order. The first failure ends them:
//! [`action_failed`] judges it against the Server as last persisted and
//! returns a follow-up decision, whose actions run the same way. A failure
//! of a follow-up's action ends the pass with what [`action_failed`] says
//! about that failure (its actions are not run: the next pass decides from
//! fresh state); see DESIGN "One pass".

use jiff::Timestamp;

use crate::model::{SERVER_FINALIZER, Server, ServerStatus};
use crate::reconcile::{Action, ActionFailure, Decision, Facts, Options, Outcome, PassError, action_failed, reconcile};

/// The rule that judges a failed action: [`action_failed`] unless a test
/// swaps in another (the simulator checks its checker with broken rules).
pub type FollowUpRule = fn(&Server, &Action, &ActionFailure, Timestamp) -> Decision;

/// One pass being driven: the decision whose actions run, and the Server as
/// its successful writes left it.
#[derive(Clone, Debug)]
pub struct Pass {
    /// The Server as last persisted: as read, with every write of this pass
    /// that is known to have landed folded in.
    server: Server,
    decision: Decision,
    /// Index of the next action of `decision` to run.
    next: usize,
    stage: Stage,
    now: Timestamp,
    follow_up_rule: FollowUpRule,
}

#[derive(Clone, Debug, PartialEq)]
enum Stage {
    /// Running the pass's own decision.
    Deciding,
    /// Running the follow-up decision of a failed action.
    FollowingUp,
    /// A follow-up's action failed: the pass ended with this outcome.
    Ended(Outcome),
}

impl Pass {
    /// Decides the pass for `server` (as read) with `facts`, ready to run.
    pub fn start(server: Server, facts: &Facts, options: &Options, now: Timestamp) -> Self {
        let decision = reconcile(&server, facts, options, now);
        Pass::decided(server, decision, now)
    }

    /// A pass running `decision`, made for `server` (as read) at `now`
    /// elsewhere: an adapter that decided more than once (the kube executor
    /// re-decides with the user data it read for a create), or the rules
    /// under test in the simulator.
    pub fn decided(server: Server, decision: Decision, now: Timestamp) -> Self {
        Pass { server, decision, next: 0, stage: Stage::Deciding, now, follow_up_rule: action_failed }
    }

    /// Judges failed actions with `rule` instead of [`action_failed`].
    pub fn with_follow_up_rule(mut self, rule: FollowUpRule) -> Self {
        self.follow_up_rule = rule;
        self
    }

    /// The action to run next, or `None` when the pass is over (then
    /// [`Pass::outcome`] is its outcome).
    pub fn poll_action(&self) -> Option<&Action> {
        match self.stage {
            Stage::Ended(_) => None,
            Stage::Deciding | Stage::FollowingUp => self.decision.actions.get(self.next),
        }
    }

    /// The action from [`Pass::poll_action`] succeeded: its write, if it is
    /// one of the Server's, is now part of the Server as last persisted.
    /// Without an action to run it does nothing.
    pub fn handle_done(&mut self) {
        if matches!(self.stage, Stage::Ended(_)) {
            return;
        }
        let Some(action) = self.decision.actions.get(self.next) else { return };
        fold_landed(&mut self.server, action, &self.decision.status);
        self.next += 1;
    }

    /// The action from [`Pass::poll_action`] failed. In the pass's own
    /// decision the follow-up decision takes over; in the follow-up the pass
    /// ends. A write that may have landed (its answer lost) is not folded:
    /// the Server as last persisted is what is known to be stored, and the
    /// rules treat a write of unknown fate as not done (every action is
    /// idempotent, the next pass reads what is stored).
    /// Without an action to run it does nothing.
    pub fn handle_failed(&mut self, failure: ActionFailure) {
        let Some(action) = self.poll_action() else { return };
        let judged = (self.follow_up_rule)(&self.server, action, &failure, self.now);
        match self.stage {
            Stage::Deciding => {
                self.decision = judged;
                self.next = 0;
                self.stage = Stage::FollowingUp;
            }
            // The follow-up's own failure is judged like any other (a
            // conflict yields, an API error is an error: both requeue), but
            // nothing more runs in this pass.
            Stage::FollowingUp | Stage::Ended(_) => self.stage = Stage::Ended(judged.outcome),
        }
    }

    /// The pass's outcome once it is over (`poll_action` gives `None`).
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.stage {
            Stage::Ended(outcome) => Some(outcome),
            _ if self.next >= self.decision.actions.len() => Some(&self.decision.outcome),
            _ => None,
        }
    }

    /// The pass's outcome, consuming it. A pass dropped before its actions
    /// all ran (its adapter stopped driving it) did not do what it decided,
    /// so it is an error and requeues: the next pass finishes the work.
    pub fn into_outcome(self) -> Outcome {
        self.finish().0
    }

    /// The pass's outcome (as [`Pass::into_outcome`]) and the Server as last
    /// persisted, handed back: an executor that copies its Servers into a
    /// pass can reuse that copy's allocations for the next one.
    pub fn finish(self) -> (Outcome, Server) {
        let over = self.outcome().is_some();
        let outcome = match self.stage {
            _ if !over => Outcome::Error(PassError::Interrupted),
            Stage::Ended(outcome) => outcome,
            Stage::Deciding | Stage::FollowingUp => self.decision.outcome,
        };
        (outcome, self.server)
    }

    /// The decision whose actions run: the pass's own, or after a failure
    /// the follow-up.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Whether a failed action switched the pass to its follow-up decision.
    pub fn is_following_up(&self) -> bool {
        self.stage != Stage::Deciding
    }

    /// The Server as last persisted by this pass.
    pub fn server(&self) -> &Server {
        &self.server
    }
}

/// What an action that succeeded did to the stored Server: finalizers,
/// annotations and the status of the decision it belongs to (`status`).
/// Actions on other objects (references, the provider, Events) change
/// nothing here.
pub fn fold_landed(server: &mut Server, action: &Action, status: &ServerStatus) {
    match action {
        Action::AddFinalizer => {
            if !server.meta.has_finalizer(SERVER_FINALIZER) {
                server.meta.finalizers.push(SERVER_FINALIZER.to_owned());
            }
        }
        Action::RemoveFinalizer => server.meta.finalizers.retain(|f| f != SERVER_FINALIZER),
        // The patch took the status as read to the decision's status.
        Action::WriteStatus(_) => server.status.clone_from(status),
        Action::Annotate { .. } | Action::Record(_) => {
            for (key, value) in action.annotation_changes() {
                match value {
                    Some(value) => server.meta.annotations.insert(key.to_owned(), value.to_owned()),
                    None => server.meta.annotations.remove(key),
                };
            }
        }
        Action::AddReference(_)
        | Action::RemoveReference(_)
        | Action::CreateProviderServer(_)
        | Action::DeleteProviderServer(_)
        | Action::ReleaseAttachment(_)
        | Action::UpdatePort(_)
        | Action::EnsureFloatingIp(_)
        | Action::Emit(_) => {}
    }
}
