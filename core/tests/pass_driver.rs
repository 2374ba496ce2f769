//! The pass driver against a scripted store: every action runs in order, a
//! failure switches to the follow-up decided from the Server as last
//! persisted, a follow-up's failure ends the pass, and a write whose answer
//! was lost is neither folded nor counted twice by the next pass.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::VecDeque;

use server_core::model::{
    CREATE_ISSUED_ANNOTATION, CREATE_REFUSED_ANNOTATION, ConditionReason, ConditionStatus, ResourceKind,
    SERVER_FINALIZER, Server, reference_finalizer,
};
use server_core::pass::{Rules, UserDataCopy, fold_landed_meta};
use server_core::port::CloudError;
use server_core::reconcile::{
    Action, ActionFailure, ApiCause, ApiFailure, Decision, EventReason, Facts, Options, Outcome, Reference,
};
use server_core::{Lifecycle, ParkKind, Pass, apply_status_patch, lifecycle};
use support::*;

/// What the script does to the next action of a kind.
#[derive(Clone, Debug)]
enum Fault {
    /// Applied and answered (to let an earlier action of a kind through).
    Lands,
    /// Not applied; the answer is this failure.
    Fail(ActionFailure),
    /// Applied, but its answer was lost (a timeout after the write landed).
    AnswerLost,
}

/// The API server and the cloud as the pass's actions see them: the stored
/// Server, what reached the cloud and the events sent, and a script of
/// faults by action kind, each used once.
#[derive(Debug)]
struct Store {
    server: Server,
    creates: usize,
    deletes: usize,
    events: Vec<EventReason>,
    script: VecDeque<(&'static str, Fault)>,
    ran: Vec<&'static str>,
}

impl Store {
    fn new(server: &Server) -> Self {
        Store {
            server: server.clone(),
            creates: 0,
            deletes: 0,
            events: Vec::new(),
            script: VecDeque::new(),
            ran: Vec::new(),
        }
    }

    fn fault(mut self, kind: &'static str, fault: Fault) -> Self {
        self.script.push_back((kind, fault));
        self
    }

    /// One action: the scripted fault for its kind, if any, else applied.
    fn apply(&mut self, action: &Action) -> Result<(), ActionFailure> {
        let kind = kind(action);
        self.ran.push(kind);
        let fault = self.script.iter().position(|(k, _)| *k == kind).and_then(|at| self.script.remove(at));
        match fault {
            Some((_, Fault::Fail(failure))) => Err(failure),
            Some((_, Fault::Lands)) | None => {
                self.land(action);
                Ok(())
            }
            Some((_, Fault::AnswerLost)) => {
                self.land(action);
                Err(api_failure(ApiCause::NoAnswer("timed out; the write may have been applied".into())))
            }
        }
    }

    /// What the API server and the cloud do with an action, modelled apart
    /// from the driver's fold: the status is the stored one with the patch
    /// applied.
    fn land(&mut self, action: &Action) {
        let meta = &mut self.server.meta;
        match action {
            Action::AddFinalizer | Action::RemoveFinalizer | Action::Annotate { .. } | Action::Record(_) => {
                fold_landed_meta(meta, action)
            }
            // By its patch, as the API server applies it.
            Action::WriteStatus(patch) => apply_status_patch(&mut self.server.status, patch).unwrap(),
            Action::CreateProviderServer(_) => self.creates += 1,
            Action::DeleteProviderServer(_) | Action::ReleaseAttachment(_) => self.deletes += 1,
            Action::Emit(event) => self.events.push(event.reason),
            Action::AddReference(_)
            | Action::RemoveReference(_)
            | Action::UpdatePort(_)
            | Action::EnsureFloatingIp(_)
            | Action::RebuildProviderServer(_) => {}
        }
    }

    /// Drives `pass` to its end, as an executor does.
    fn drive(&mut self, mut pass: Pass) -> (Outcome, Server) {
        while let Some(action) = pass.poll_action() {
            match self.apply(action) {
                Ok(()) => pass.handle_done(),
                Err(failure) => pass.handle_failed(failure),
            }
        }
        let persisted = pass.server().clone();
        (pass.into_outcome(), persisted)
    }

    /// A pass over the stored Server.
    fn pass(&mut self, facts: &Facts, t: i64) -> (Outcome, Server) {
        let pass = Pass::with_facts(self.server.clone(), facts, &Options::default(), at(t));
        self.drive(pass)
    }
}

fn kind(action: &Action) -> &'static str {
    action.name()
}

fn refused() -> ActionFailure {
    ActionFailure::Cloud(CloudError::Refused { status: 403, message: "Quota exceeded for instances".into() })
}

fn conflict() -> ActionFailure {
    let modified =
        ApiCause::Answered { code: 409, reason: "Conflict".into(), message: "the object has been modified".into() };
    ActionFailure::Conflict(ApiFailure::new("writing the Server", modified))
}

fn api_failure(cause: ApiCause) -> ActionFailure {
    ActionFailure::Api(ApiFailure::new("writing the Server", cause))
}

#[test]
fn a_clean_pass_runs_every_action_in_order_and_knows_what_it_persisted() {
    let server = server();
    let mut store = Store::new(&server);
    let pass = Pass::with_facts(server.clone(), &facts(), &Options::default(), at(10));
    let decided = pass.decision().cloned().unwrap();
    let (outcome, persisted) = store.drive(pass);

    assert_eq!(store.ran, decided.actions.iter().map(kind).collect::<Vec<_>>());
    assert_eq!(outcome, decided.outcome);
    assert_eq!(store.creates, 1);
    // The fold agrees with the store: finalizer, the issued-create note and
    // the status (the store applied the patch; the driver took the status).
    assert_eq!(persisted, store.server);
    assert!(persisted.meta.has_finalizer(SERVER_FINALIZER));
    assert!(persisted.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION));
}

/// The refused create's follow-up releases the issued create that this same
/// pass noted: the follow-up is decided from the Server with the pass's own
/// writes, not as it was read (which had no note to release).
#[test]
fn a_failed_action_hands_over_to_a_follow_up_decided_from_the_server_as_last_persisted() {
    let server = adopted();
    let mut store = Store::new(&server).fault("CreateProviderServer", Fault::Fail(refused()));
    let mut pass = Pass::with_facts(server.clone(), &referenced_facts(&server), &Options::default(), at(10));
    while let Some(action) = pass.poll_action() {
        match store.apply(action) {
            Ok(()) => pass.handle_done(),
            Err(failure) => pass.handle_failed(failure),
        }
        if pass.is_following_up() {
            break;
        }
    }
    let Some(Action::Record(changes)) = pass.poll_action().cloned() else {
        panic!("the follow-up starts with its record: {:?}", pass.decision().unwrap().actions);
    };
    assert!(changes.contains(&(CREATE_ISSUED_ANNOTATION, None)), "{changes:?}");
    let (outcome, persisted) = store.drive(pass);

    assert!(matches!(outcome, Outcome::Terminal(_)), "{outcome:?}");
    assert_eq!(persisted, store.server);
    assert!(!store.server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION));
    assert_eq!(lifecycle(&store.server, &Options::default()), Lifecycle::Parked(ParkKind::Refused));
    assert_eq!(store.events, [EventReason::ProviderCreateRefused]);
}

/// A follow-up's failed write ends the pass with the judgement of that
/// failure: a conflict on the park's status write yields (requeued), rather
/// than parking with the park unwritten; the next pass parks from the record.
#[test]
fn a_failed_follow_up_action_ends_the_pass_with_what_its_failure_means() {
    let server = adopted();
    let facts = referenced_facts(&server);
    // The pass's own status write lands; the follow-up's conflicts.
    let mut store = Store::new(&server)
        .fault("WriteStatus", Fault::Lands)
        .fault("CreateProviderServer", Fault::Fail(refused()))
        .fault("WriteStatus", Fault::Fail(conflict()));
    let mut pass = Pass::with_facts(server.clone(), &facts, &Options::default(), at(10));
    while let Some(action) = pass.poll_action() {
        match store.apply(action) {
            Ok(()) => pass.handle_done(),
            Err(failure) => pass.handle_failed(failure),
        }
    }
    assert_eq!(store.ran.last(), Some(&"WriteStatus"), "{:?}", store.ran);
    assert_eq!(pass.poll_action(), None);
    let outcome = pass.into_outcome();
    assert!(matches!(outcome, Outcome::Yield(_)), "a conflict requeues: {outcome:?}");
    assert!(outcome.requeues());
    assert_eq!(store.server.meta.annotations.get(CREATE_REFUSED_ANNOTATION).map(String::as_str), Some("1"));

    let (next, _) = store.pass(&facts, 20);
    assert!(matches!(next, Outcome::Terminal(_)), "{next:?}");
    assert_eq!(store.creates, 0, "the refused create was not sent again");
    assert_eq!(store.events, [EventReason::ProviderCreateRefused], "the refusal is announced once");
    assert_eq!(lifecycle(&store.server, &Options::default()), Lifecycle::Parked(ParkKind::Refused));
}

/// An API error on the follow-up's record stops the follow-up there: its
/// event is not sent and the pass errs (requeued).
#[test]
fn a_follow_up_stops_at_its_first_failure() {
    let server = adopted();
    let mut store = Store::new(&server).fault("CreateProviderServer", Fault::Fail(refused())).fault(
        "Record",
        Fault::Fail(api_failure(ApiCause::Answered {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: String::new(),
        })),
    );
    let (outcome, _) = store.pass(&referenced_facts(&server), 10);
    assert!(matches!(outcome, Outcome::Error(_)), "{outcome:?}");
    assert_eq!(store.ran.last(), Some(&"Record"));
    assert!(store.events.is_empty(), "{:?}", store.events);
}

/// The retry pass counts the failed attempt in its status write; the answer
/// to that write is lost after it landed. The pass stops (no delete on an
/// unconfirmed count), does not fold the write, and requeues; the next pass
/// reads the stored count and does not count the attempt again.
#[test]
fn a_write_that_landed_with_its_answer_lost_is_not_folded_and_not_counted_twice() {
    let server = create_failed(1);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let mut store = Store::new(&server).fault("WriteStatus", Fault::AnswerLost);

    let (outcome, persisted) = store.pass(&facts, 10);
    assert!(outcome.requeues(), "{outcome:?}");
    assert_eq!(store.deletes, 0, "nothing after the lost write ran");
    assert_eq!(store.server.status.provider_create_failures, 2, "the write landed");
    assert_eq!(persisted.status.provider_create_failures, 1, "the driver does not assume it did");

    let (next, persisted) = store.pass(&facts, 20);
    assert!(next.requeues(), "{next:?}");
    assert_eq!(store.deletes, 1, "the next pass clears the failed server");
    assert_eq!(store.server.status.provider_create_failures, 2, "counted once");
    assert!(store.server.status.provider_create_retrying);
    assert_eq!(persisted, store.server);
}

/// A successful pass's fold holds with a condition the monitor set, too: the
/// status taken is the decision's whole status.
#[test]
fn the_fold_of_a_status_write_is_the_decisions_status() {
    let mut server = adopted();
    set_healthy(&mut server, ConditionStatus::True, ConditionReason::Healthy);
    let mut facts = referenced_facts(&server);
    facts.provider = present();
    let mut store = Store::new(&server);
    let pass = Pass::with_facts(server, &facts, &Options::default(), at(10));
    let decided = pass.decision().unwrap().status.clone();
    let (outcome, persisted) = store.drive(pass);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(persisted.status, decided);
    assert_eq!(persisted, store.server);
}

#[test]
fn handling_without_an_action_changes_nothing_and_an_abandoned_pass_requeues() {
    let server = server();
    let mut pass = Pass::with_facts(server.clone(), &facts(), &Options::default(), at(10));
    assert!(pass.outcome().is_none(), "actions are pending");
    let abandoned = pass.clone().into_outcome();
    assert!(matches!(abandoned, Outcome::Error(_)) && abandoned.requeues(), "{abandoned:?}");

    let mut store = Store::new(&server);
    while let Some(action) = pass.poll_action() {
        store.apply(action).unwrap();
        pass.handle_done();
    }
    let (before, outcome) = (pass.server().clone(), pass.outcome().cloned());
    pass.handle_done();
    pass.handle_failed(conflict());
    assert_eq!(pass.server(), &before);
    assert_eq!(pass.outcome().cloned(), outcome);
    assert!(!pass.is_following_up());
}

/// A swapped follow-up rule is the one asked (the simulator checks its
/// checker with deliberately broken rules).
#[test]
fn a_swapped_follow_up_rule_judges_failures() {
    fn give_up(server: &Server, _: &Action, _: &ActionFailure, _: jiff::Timestamp) -> server_core::Decision {
        server_core::Decision { status: server.status.clone(), actions: Vec::new(), outcome: Outcome::Done }
    }
    let server = server();
    let mut store = Store::new(&server).fault("AddFinalizer", Fault::Fail(conflict()));
    let pass = Pass::with_facts(server, &facts(), &Options::default(), at(10)).with_follow_up_rule(give_up);
    let (outcome, _) = store.drive(pass);
    assert_eq!(outcome, Outcome::Done);
}

/// A deletion pass that releases the Server persists it without our
/// finalizer, and with every other controller's finalizer kept.
#[test]
fn a_released_server_is_persisted_without_our_finalizer_and_with_the_others() {
    let mut server = adopted();
    server.meta.finalizers.push("backup.example.com/protect".into());
    server.meta.deleting = true;
    let facts = referenced_facts(&server);
    let mut store = Store::new(&server);
    let (outcome, persisted) = store.pass(&facts, 10);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(store.ran.last(), Some(&"RemoveFinalizer"), "{:?}", store.ran);
    assert_eq!(persisted.meta.finalizers, ["backup.example.com/protect"]);
    assert_eq!(persisted, store.server);
}

/// The references a pass adds come as one run a driver may send at once
/// (each on its own object), between the finalizer before them and the
/// status write after; answered in order, a failure in the middle hands
/// over to the follow-up (no create), and what the later ones wrote stands:
/// the next pass adds only the reference still missing, then creates.
#[test]
fn the_references_of_a_pass_are_one_run_answered_in_order() {
    let server = server();
    let mut facts = facts();
    let mut pass = Pass::with_facts(server.clone(), &facts, &Options::default(), at(10));
    assert_eq!(pass.poll_run().iter().map(Action::name).collect::<Vec<_>>(), ["AddFinalizer"]);
    pass.handle_done();

    let run: Vec<Action> = pass.poll_run().to_vec();
    let targets: Vec<(ResourceKind, &str)> =
        run.iter().filter_map(Action::reference).map(|r| (r.kind, r.name.as_str())).collect();
    assert_eq!(
        targets,
        [
            (ResourceKind::Network, "net-a"),
            (ResourceKind::SecurityGroup, "sg-a"),
            (ResourceKind::Identity, "identity-a")
        ],
        "{run:?}"
    );
    // All three are sent; the SecurityGroup's loses its race, the others land.
    let finalizer = reference_finalizer("web");
    for (kind, name) in [(ResourceKind::Network, "net-a"), (ResourceKind::Identity, "identity-a")] {
        let resource = facts.consumed.get_mut(&kind).unwrap().iter_mut().find(|r| r.name == name).unwrap();
        resource.finalizers.push(finalizer.clone());
    }
    pass.handle_done();
    pass.handle_failed(conflict());
    assert!(pass.is_following_up());
    assert!(pass.poll_run().iter().all(|action| action.reference().is_none()), "{:?}", pass.poll_run());
    let mut store = Store::new(pass.server());
    let (outcome, persisted) = store.drive(pass);
    assert!(matches!(outcome, Outcome::Yield(_)), "{outcome:?}");
    assert_eq!(store.creates, 0);

    let next = Pass::with_facts(persisted, &facts, &Options::default(), at(11));
    let actions = &next.decision().unwrap().actions;
    let added: Vec<&str> = actions.iter().filter_map(Action::reference).map(|r| r.name.as_str()).collect();
    assert_eq!(added, ["sg-a"], "{actions:?}");
    assert!(actions.iter().any(|action| matches!(action, Action::CreateProviderServer(_))), "{actions:?}");
}

/// A run never holds two changes of one object, nor anything but reference
/// changes; any other action is a run of its own.
#[test]
fn a_run_is_reference_changes_on_distinct_objects() {
    let server = adopted();
    let mut facts = referenced_facts(&server);
    // Held on a Network the spec no longer names, and released on delete.
    let finalizer = reference_finalizer("web");
    facts.consumed.get_mut(&ResourceKind::Network).unwrap()[1].finalizers.push(finalizer);
    let mut deleting = server.clone();
    deleting.meta.deleting = true;
    let mut pass = Pass::with_facts(deleting, &facts, &Options::default(), at(10));
    let mut runs = Vec::new();
    while !pass.poll_run().is_empty() {
        let run: Vec<&'static str> = pass.poll_run().iter().map(Action::name).collect();
        let mut targets: Vec<(ResourceKind, String)> =
            pass.poll_run().iter().filter_map(Action::reference).map(|r| (r.kind, r.name.clone())).collect();
        let count = targets.len();
        targets.sort();
        targets.dedup();
        assert_eq!(targets.len(), count, "one change per object in a run");
        assert!(run.len() == 1 || count == run.len(), "{run:?}");
        for _ in 0..run.len() {
            pass.handle_done();
        }
        runs.push(run);
    }
    assert!(runs.iter().any(|run| run.len() > 1), "the releases go as one run: {runs:?}");
}

/// A decision that changes one object twice in a row (an add, then its
/// removal) hands them out as two runs: sent at once, their order on that
/// object would be lost.
#[test]
fn two_changes_of_one_object_are_never_one_run() {
    fn add_then_remove(server: &Server, facts: &Facts, options: &Options, now: jiff::Timestamp) -> Decision {
        let mut decision = server_core::reconcile(server, facts, options, now);
        let reference = Reference { kind: ResourceKind::Network, name: "net-a".into(), finalizer: "f".into() };
        let other = Reference { kind: ResourceKind::SecurityGroup, name: "sg-a".into(), finalizer: "f".into() };
        decision.actions = vec![
            Action::AddReference(reference.clone()),
            Action::AddReference(other),
            Action::RemoveReference(reference),
        ];
        decision
    }
    let server = adopted();
    let facts = referenced_facts(&server);
    let rules = Rules { reconcile: add_then_remove, ..Rules::CORE };
    let mut pass = Pass::start_with(server, Options::default(), at(10), rules, UserDataCopy::Held);
    pass.answer_from(&facts, |_| true);
    let mut runs = Vec::new();
    while !pass.poll_run().is_empty() {
        let run: Vec<&'static str> = pass.poll_run().iter().map(Action::name).collect();
        for _ in 0..run.len() {
            pass.handle_done();
        }
        runs.push(run);
    }
    assert_eq!(runs, [vec!["AddReference", "AddReference"], vec!["RemoveReference"]]);
}
