//! Assembles a Decision in the order the executor must run it: records of
//! what already happened and the events that announce them, then finalizer
//! (with the note of a create before Available stands) and references, then the status write, annotations and events (events
//! after the first guarded write of the Server), then provider actions, then
//! pruning and the finalizer's removal.

use jiff::Timestamp;

use super::decision::{Action, Decision, Event, Outcome};
use crate::model::{
    CREATE_ISSUED_ANNOTATION, ConditionReason, ConditionStatus, ConditionType, Server, ServerStatus, set_condition,
};
use crate::status_patch::StatusPatch;

#[derive(Debug)]
pub(crate) struct Plan {
    before: ServerStatus,
    pub(crate) status: ServerStatus,
    pub(crate) now: Timestamp,
    records: Vec<(&'static str, Option<String>)>,
    leading: Vec<Action>,
    events: Vec<Event>,
    annotations: Vec<Action>,
    provider: Vec<Action>,
    trailing: Vec<Action>,
    deleting: bool,
    /// The Server's namespace and name: a park's message names the command
    /// that un-parks this Server.
    namespace: String,
    name: String,
    /// Said after "Provisioned" in Available's message of a finished pass.
    provisioned_note: Option<String>,
    /// The status write and events follow the provider actions: they say
    /// what the provider accepted (a rebuild), so none is written unless it did.
    status_after_provider: bool,
}

impl Plan {
    pub(crate) fn new(server: &Server, deleting: bool, now: Timestamp) -> Self {
        Plan {
            before: server.status.clone(),
            status: server.status.clone(),
            now,
            records: Vec::new(),
            leading: Vec::new(),
            events: Vec::new(),
            annotations: Vec::new(),
            provider: Vec::new(),
            trailing: Vec::new(),
            deleting,
            namespace: server.meta.namespace.clone(),
            name: server.meta.name.clone(),
            provisioned_note: None,
            status_after_provider: false,
        }
    }

    /// Finalizer and reference additions: before anything else.
    pub(crate) fn lead(&mut self, action: Action) {
        self.leading.push(action);
    }

    pub(crate) fn emit(&mut self, event: Event) {
        self.events.push(event);
    }

    /// Sets or removes a controller annotation, after the status write and
    /// before the provider actions it guards.
    pub(crate) fn annotate(&mut self, key: &'static str, value: Option<String>) {
        // A later change of the same annotation in the pass supersedes an
        // earlier one (a retry's count notes the failed create, its create
        // the new one).
        self.annotations.retain(|planned| !matches!(planned, Action::Annotate { key: planned, .. } if *planned == key));
        self.annotations.push(Action::Annotate { key, value });
    }

    /// The change of annotation `key` this pass plans, if any (`Some(None)`:
    /// its removal).
    pub(crate) fn planned_annotation(&self, key: &str) -> Option<Option<&str>> {
        self.annotations.iter().rev().find_map(|planned| match planned {
            Action::Annotate { key: planned, value } if *planned == key => Some(value.as_deref()),
            _ => None,
        })
    }

    /// Records what already happened at the provider as an annotation change
    /// written first, in one unguarded patch (see [`Action::Record`]), so no
    /// concurrent write can lose it.
    pub(crate) fn record(&mut self, key: &'static str, value: Option<String>) {
        self.records.push((key, value));
    }

    /// Provider create or delete: after the status that accounts for it.
    pub(crate) fn provider(&mut self, action: Action) {
        self.provider.push(action);
    }

    /// Writes the status, and says the events, only once the provider
    /// actions succeeded.
    pub(crate) fn write_status_after_provider(&mut self) {
        self.status_after_provider = true;
    }

    /// Reference pruning and finalizer removal: last.
    pub(crate) fn trail(&mut self, action: Action) {
        self.trailing.push(action);
    }

    /// Something a person should know about a provisioned server (e.g. a
    /// spec change it does not get): added to Available's message when the
    /// pass finishes Done.
    pub(crate) fn note_provisioned(&mut self, note: String) {
        self.provisioned_note = Some(note);
    }

    /// Available's message this pass sets, were it to finish Done.
    pub(crate) fn provisioned_message(&self) -> String {
        let (_, _, message) = self.available_for(&Outcome::Done);
        match &self.provisioned_note {
            Some(note) if !self.deleting => format!("{message}; {note}"),
            _ => message,
        }
    }

    /// Closes the pass: sets Available from the outcome and orders the actions.
    pub(crate) fn finish(mut self, outcome: Outcome) -> Decision {
        let (status, reason, mut message) = self.available_for(&outcome);
        if outcome == Outcome::Done {
            message = self.provisioned_message();
        }
        set_condition(&mut self.status.conditions, ConditionType::Available, status, reason, message, self.now);
        self.into_decision(outcome)
    }

    /// Ends the pass in `outcome` with Available as it stands: for a pass
    /// that learnt nothing new about a settled Server (its provider could
    /// not be read), so a transient failure never flips its conditions.
    pub(crate) fn finish_keeping_available(self, outcome: Outcome) -> Decision {
        self.into_decision(outcome)
    }

    fn into_decision(mut self, outcome: Outcome) -> Decision {
        // A record is what this pass proved; it supersedes a change of the
        // same annotation planned earlier in the pass (a retry forgets a
        // refusal of the user data, and the check refuses it again).
        let records = &self.records;
        self.annotations.retain(|action| match action {
            Action::Annotate { key, .. } => !records.iter().any(|(recorded, _)| recorded == key),
            _ => true,
        });
        self.note_first_create_first();
        let mut actions = Vec::new();
        let recording = !self.records.is_empty();
        if recording {
            actions.push(Action::Record(self.records));
            // The events of a pass that records announce the record: they
            // go with it, so a status write lost after it loses neither.
            actions.extend(self.events.iter().cloned().map(Action::Emit));
        }
        actions.extend(self.leading);
        let status_write = StatusPatch::between(&self.before, &self.status);
        if self.status_after_provider {
            actions.extend(self.annotations);
            actions.extend(self.provider);
            actions.extend(status_write.map(Action::WriteStatus));
            if !recording {
                actions.extend(self.events.into_iter().map(Action::Emit));
            }
            actions.extend(self.trailing);
            return Decision { status: self.status, actions, outcome };
        }
        let writes_status = status_write.is_some();
        actions.extend(status_write.map(Action::WriteStatus));
        // Events follow the pass's first guarded write of the Server: a pass
        // that started from a stale copy (a cache that has not yet seen the
        // last pass's writes) fails that write with a conflict and announces
        // nothing twice. With a status write they go before the annotations
        // (an annotation may note that its event was sent, so a lost
        // annotation write re-sends the event); without one, after them. A
        // pass that records sent its events with the record.
        if recording {
            actions.extend(self.annotations);
        } else if writes_status {
            actions.extend(self.events.into_iter().map(Action::Emit));
            actions.extend(self.annotations);
        } else {
            actions.extend(self.annotations);
            actions.extend(self.events.into_iter().map(Action::Emit));
        }
        actions.extend(self.provider);
        actions.extend(self.trailing);
        Decision { status: self.status, actions, outcome }
    }

    /// A create of a Server with no Available condition notes first: in the
    /// finalizer's patch when the pass adds it (one write where two would
    /// do), else on its own before the references. Until the pass's status
    /// write lands the Server still has no Available condition, and its note
    /// stands for no create (`IssuedCreate::of`); that write is followed by
    /// the create with nothing that can fail between them. Noting after the
    /// status write instead, a failed note write would leave an older note
    /// of a create never sent standing beside the Available just written.
    fn note_first_create_first(&mut self) {
        if self.before.condition(ConditionType::Available).is_some() {
            return;
        }
        let note = self.annotations.iter().position(
            |action| matches!(action, Action::Annotate { key, value: Some(_) } if *key == CREATE_ISSUED_ANNOTATION),
        );
        let Some(Action::Annotate { key, value }) = note.map(|at| self.annotations.remove(at)) else { return };
        match self.leading.first_mut() {
            Some(Action::AddFinalizer { annotations }) => annotations.push((key, value)),
            _ => self.leading.insert(0, Action::Annotate { key, value }),
        }
    }

    /// Whether ending in `outcome` changes the Available message the
    /// Server holds: a park said for the first time.
    pub(crate) fn says_anew(&self, outcome: &Outcome) -> bool {
        let (_, _, message) = self.available_for(outcome);
        self.before.condition(ConditionType::Available).is_none_or(|available| available.message != message)
    }

    fn available_for(&self, outcome: &Outcome) -> (ConditionStatus, ConditionReason, String) {
        available_for(outcome, self.deleting, &self.namespace, &self.name)
    }
}

fn available_for(
    outcome: &Outcome,
    deleting: bool,
    namespace: &str,
    name: &str,
) -> (ConditionStatus, ConditionReason, String) {
    match (outcome, deleting) {
        (Outcome::Done, false) => (ConditionStatus::True, ConditionReason::Provisioned, "Provisioned".into()),
        (Outcome::Done, true) => (ConditionStatus::False, ConditionReason::Deprovisioned, "Deprovisioned".into()),
        (Outcome::Yield(wait), false) => (ConditionStatus::False, ConditionReason::Provisioning, wait.message()),
        (Outcome::Yield(wait), true) => (ConditionStatus::False, ConditionReason::Deprovisioning, wait.message()),
        (Outcome::Terminal(park), _) => {
            (ConditionStatus::False, ConditionReason::Errored, park.available_message(namespace, name))
        }
        (Outcome::Error(error), _) => (ConditionStatus::False, ConditionReason::Errored, error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note about a provisioned server (e.g. a spec change not applied)
    /// is never said of a Server being deleted: it is Deprovisioned.
    #[test]
    fn a_deleting_pass_says_deprovisioned_without_the_provisioned_note() {
        let note = "spec.flavorID is \"b\" but the server was created with \"a\"";
        for (deleting, expected) in [(false, format!("Provisioned; {note}")), (true, "Deprovisioned".to_owned())] {
            let mut plan = Plan::new(&Server::default(), deleting, Timestamp::UNIX_EPOCH);
            plan.note_provisioned(note.to_owned());
            let decision = plan.finish(Outcome::Done);
            let available = decision.status.condition(ConditionType::Available).map(|c| c.message.clone());
            assert_eq!(available, Some(expected));
        }
    }
}
