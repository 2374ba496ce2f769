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
            Action::AddFinalizer { .. } | Action::RemoveFinalizer | Action::Annotate { .. } | Action::Record(_) => {
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

/// A first create's note goes in the finalizer's patch (one write where two
/// would do). A failure after it and before the create (the status write
/// conflicts; an API error on a reference) leaves the Server without an
/// Available condition, and the note then stands for no create: the next
/// pass creates at once instead of waiting out the grace of a create that
/// was never sent, and counts no failure for it. A create that was sent
/// (its answer lost) keeps its note standing: it may land.
#[test]
fn a_first_create_notes_with_the_finalizer_and_a_failure_before_the_create_voids_the_note() {
    let server = server();
    let facts = facts();
    let pass = Pass::with_facts(server.clone(), &facts, &Options::default(), at(10));
    let actions = &pass.decision().unwrap().actions;
    match &actions[0] {
        Action::AddFinalizer { annotations } => {
            assert!(annotations.iter().any(|(key, value)| *key == CREATE_ISSUED_ANNOTATION && value.is_some()))
        }
        other => panic!("the first action is {other:?}"),
    }
    let notes = actions.iter().filter(|a| a.annotation_changes().iter().any(|(k, _)| *k == CREATE_ISSUED_ANNOTATION));
    assert_eq!(notes.count(), 1, "{actions:?}");

    let failures = [("WriteStatus", conflict()), ("AddReference", api_failure(ApiCause::NoAnswer("reset".into())))];
    for (kind, failure) in failures {
        let mut store = Store::new(&server).fault(kind, Fault::Fail(failure));
        store.pass(&facts, 10);
        assert_eq!(store.creates, 0, "{kind}");
        assert!(store.server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION), "{kind}");
        let (outcome, persisted) = store.pass(&facts, 11);
        assert_eq!(store.creates, 1, "{kind}: the next pass creates ({outcome:?})");
        assert_eq!(persisted.status.provider_create_failures, 0, "{kind}");
    }

    // A later pass of a Server that still has no Available condition notes
    // before its status write too: its note failing after that write landed
    // would leave the older note, of a create never sent, standing.
    let mut store = Store::new(&server)
        .fault("AddReference", Fault::Fail(api_failure(ApiCause::NoAnswer("reset".into()))))
        .fault("Annotate", Fault::Fail(conflict()));
    store.pass(&facts, 10);
    let pass = Pass::with_facts(store.server.clone(), &facts, &Options::default(), at(10));
    let names: Vec<&str> = pass.decision().unwrap().actions.iter().map(Action::name).collect();
    let (note, status) = (names.iter().position(|n| *n == "Annotate"), names.iter().position(|n| *n == "WriteStatus"));
    assert!(note.is_some() && note < status, "{names:?}");
    assert_eq!(names[status.unwrap() + 1..].first(), Some(&"CreateProviderServer"), "{names:?}");
    store.pass(&facts, 10);
    assert_eq!(store.creates, 0);
    let (outcome, persisted) = store.pass(&facts, 11);
    assert_eq!(store.creates, 1, "the third pass creates ({outcome:?})");
    assert_eq!(persisted.status.provider_create_failures, 0);

    // The create's own failure of unknown fate: its note stands, and the
    // next pass within the grace waits for it rather than creating again.
    let timeout = ActionFailure::Cloud(CloudError::Timeout { message: "no answer in 60 s".into() });
    let mut store = Store::new(&server).fault("CreateProviderServer", Fault::Fail(timeout));
    store.pass(&facts, 10);
    assert_eq!(store.creates, 0);
    let (outcome, _) = store.pass(&facts, 11);
    assert_eq!(store.creates, 0, "created again while the first may land ({outcome:?})");
}

/// No failure is counted for a create that was never sent: over any script
/// of refused writes (conflicts, 500s) across a Server's passes, and then
/// past the create's grace with its server never seen, the counter never
/// exceeds the creates that reached the provider.
fn counts_only_creates_sent(rules: Rules) -> Result<(), String> {
    use proptest::prelude::*;
    let kinds = prop::sample::select(vec!["AddFinalizer", "AddReference", "WriteStatus", "Annotate"]);
    let failure = prop::bool::ANY
        .prop_map(|conflicting| if conflicting { conflict() } else { api_failure(ApiCause::NoAnswer("reset".into())) });
    run(prop::collection::vec((kinds, failure), 0..8), |script| {
        let server = server();
        let facts = facts();
        let mut store = Store::new(&server);
        for (kind, failure) in script {
            store = store.fault(kind, Fault::Fail(failure));
        }
        let options = Options::default();
        for t in (10..20).chain(5_000..5_004) {
            let mut pass = Pass::start_with(store.server.clone(), options, at(t), rules, UserDataCopy::Held);
            pass.answer_from(&facts, |_| true);
            store.drive(pass);
            let counted = store.server.status.provider_create_failures;
            prop_assert!(
                counted as usize <= store.creates,
                "{} counted for {} creates at {}",
                counted,
                store.creates,
                t
            );
        }
        Ok(())
    })
}

#[test]
fn no_failure_is_counted_for_a_create_never_sent() {
    must_hold(counts_only_creates_sent(Rules::CORE));
}

/// The same property catches a rule that notes a create after the status
/// write on a Server with no Available condition yet, unless the pass adds
/// the finalizer: a failed note then leaves the older note of the first
/// pass, of a create never sent, beside that Available.
#[test]
fn the_create_counting_property_catches_a_note_written_after_the_status() {
    fn note_after_status(
        server: &Server,
        facts: &Facts,
        options: &Options,
        now: jiff::Timestamp,
    ) -> server_core::Decision {
        let mut decision = server_core::reconcile(server, facts, options, now);
        let is_note =
            |a: &Action| matches!(a, Action::Annotate { key, value: Some(_) } if *key == CREATE_ISSUED_ANNOTATION);
        if let Some(at) = decision.actions.iter().position(is_note) {
            let note = decision.actions.remove(at);
            let create = decision.actions.iter().position(|a| matches!(a, Action::CreateProviderServer(_)));
            decision.actions.insert(create.unwrap_or(decision.actions.len()), note);
        }
        decision
    }
    must_catch(|| counts_only_creates_sent(Rules { reconcile: note_after_status, ..Rules::CORE }));
}

/// A boot the monitor's list showed is latched even when the pass's live
/// read, asked for because the list is too old, finds the server already
/// gone: the provider reported the boot, so the Server parks as missing
/// after boot instead of counting the create lost and creating again.
#[test]
fn a_boot_the_list_showed_is_latched_when_the_live_read_finds_the_server_gone() {
    use server_core::pass::{Fact, Need};
    use server_core::port::{PowerState, ProviderServer, ProviderStatus};
    use server_core::reconcile::{ProviderRead, ProviderView};
    let facts = facts();
    let mut store = Store::new(&server());
    store.pass(&facts, 10);
    assert_eq!(store.creates, 1);
    let booted = ProviderServer {
        id: "vm-1".into(),
        server_uid: "uid-web".into(),
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        launched_at: Some(at(20)),
        ..ProviderServer::default()
    };
    // Past the create's grace, on a list older than a listed view may be.
    let mut pass = Pass::start(store.server.clone(), Options::default(), at(5_000));
    pass.answer_from(&facts, |need| *need != Need::Provider);
    let listed = Fact::Provider {
        view: ProviderView::Present(booted),
        read: ProviderRead::Listed { at: at(4_000) },
        boot_read: None,
    };
    pass.handle_fact(listed).unwrap();
    assert!(matches!(pass.poll_need(), Some(Need::ProviderLive(_))), "{:?}", pass.poll_need());
    pass.handle_fact(Fact::Provider { view: ProviderView::Absent, read: ProviderRead::Live, boot_read: None }).unwrap();
    pass.answer_from(&facts, |_| true);
    let decision = pass.decision().unwrap().clone();
    assert_eq!(decision.status.provisioned_at, Some(at(20)), "{decision:?}");
    assert!(matches!(decision.outcome, Outcome::Terminal(server_core::Park::MissingAfterBoot)), "{decision:?}");
    assert!(!decision.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_))), "{decision:?}");
}

/// A boot another read of the term showed (a list taken for another
/// Server's lookup), with the server gone when this Server's pass reads
/// it: latched, and the Server parks as missing after boot instead of
/// counting its create lost and creating again.
#[test]
fn a_boot_another_read_of_the_term_showed_is_latched_when_the_server_is_gone() {
    use server_core::pass::{Fact, Need};
    use server_core::reconcile::{ProviderRead, ProviderView};
    let facts = facts();
    let mut store = Store::new(&server());
    store.pass(&facts, 10);
    assert_eq!(store.creates, 1);
    let mut pass = Pass::start(store.server.clone(), Options::default(), at(5_000));
    pass.answer_from(&facts, |need| *need != Need::Provider);
    let gone = Fact::Provider { view: ProviderView::Absent, read: ProviderRead::Live, boot_read: Some(at(20)) };
    pass.handle_fact(gone).unwrap();
    pass.answer_from(&facts, |_| true);
    let decision = pass.decision().unwrap().clone();
    assert_eq!(decision.status.provisioned_at, Some(at(20)), "{decision:?}");
    assert!(matches!(decision.outcome, Outcome::Terminal(server_core::Park::MissingAfterBoot)), "{decision:?}");
    assert!(!decision.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_))), "{decision:?}");
}
