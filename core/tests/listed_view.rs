//! The live-read rule (`live_read_needed`): when a pass may act on the
//! monitor's latest list (or its own create answer) instead of asking the
//! provider, as proptest properties.
//!
//! Each property is a function over a rule, so the same property runs
//! against server-core's rule (it must hold) and against deliberately
//! broken ones (it must catch them): a property that cannot fail proves nothing.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use server_core::model::{CREATE_ISSUED_ANNOTATION, Server};
use server_core::port::{
    CloudError, FloatingIp, Networking, NetworkingSource, PowerState, ProviderServer, ProviderStatus,
};
use server_core::reconcile::{
    Action, ActionFailure, Decision, Facts, LiveRead, NetworkingView, Options, ProviderRead, ProviderView,
    action_failed, live_read_needed,
};
use server_core::{ever_booted, lifecycle, observe, reconcile, should_wake};
use support::strategies::*;
use support::*;

/// The rule under test. Production wires server-core's.
type Rule = fn(&Server, &Facts, &Decision, &Options, Timestamp) -> Option<LiveRead>;

const CORE: Rule = live_read_needed;

/// A create-issued note as the core writes it (attempt, time in seconds).
fn note(server: &mut Server, attempt: i32, second: i64) {
    let value = serde_json::json!({ "attempt": attempt, "at": at(second).to_string() }).to_string();
    server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), value);
}

fn the_note(server: &Server) -> Option<(i32, Timestamp)> {
    let value: serde_json::Value = serde_json::from_str(server.meta.annotations.get(CREATE_ISSUED_ANNOTATION)?).ok()?;
    let attempt = i32::try_from(value.get("attempt")?.as_i64()?).ok()?;
    Some((attempt, value.get("at")?.as_str()?.parse().ok()?))
}

const MAX_AGE: Duration = Duration::from_secs(60);

fn options(max: i32) -> Options {
    // Steps are 10 s apart: a grace of three steps, lists valid for six.
    Options::with_max_attempts(max).with_create_grace(Duration::from_secs(30)).with_listed_view_max_age(MAX_AGE)
}

// --- One decision: what a listed view may decide -----------------------------

/// Whatever the Server and the listed view, a decision the rule lets stand
/// leaves the provider alone, rests on a listed server (never on a listed
/// absence), of a Server neither deleted nor retried, from a list at most
/// the maximum age old that cannot predate this controller's last change to
/// that server: the server booted, or the current attempt's create was
/// noted in an earlier second than the list started. It changes a port (or
/// its floating IP) only when the pass knows it bound to the listed server:
/// read so, or made by this term's create of that server (own writes).
fn a_listed_view_decides_only_what_it_can(rule: Rule) -> Result<(), String> {
    // Notes and lists within seconds of each other, passes around the age limit.
    let note_strategy = prop::option::of((prop::bool::weighted(0.8), 998i64..1_003));
    let port_strategy = (any::<bool>(), 0u8..3, any::<bool>());
    run(
        (arb_server(), arb_view(), note_strategy, 998i64..1_003, 1_000i64..1_070, 1i32..4, port_strategy),
        |(mut server, view, issued, listed_at, now, max, (port_differs, binding, remembered))| {
            if let Some((current, second)) = issued {
                // Mostly the current attempt's note, sometimes an earlier one's.
                let failures = server.status.provider_create_failures;
                note(&mut server, if current { failures } else { failures.saturating_sub(1) }, second);
            }
            let mut facts = Facts {
                provider: view,
                provider_read: ProviderRead::Listed { at: at(listed_at) },
                ..referenced_facts(&server)
            };
            let listed_id = match &facts.provider {
                ProviderView::Present(record) => record.id.clone(),
                _ => String::new(),
            };
            if let NetworkingView::Known(networking) = &mut facts.networking
                && remembered
            {
                networking.source = NetworkingSource::OwnWrites;
            }
            if let NetworkingView::Known(Networking { port: Some(port), .. }) = &mut facts.networking {
                if port_differs {
                    port.security_groups.push("sg-stray".into());
                    port.floating_ip = match port.floating_ip {
                        Some(_) => None,
                        None => Some(FloatingIp { id: "fip-stray".into(), address: None }),
                    };
                }
                port.bound_to = match binding {
                    0 => Some(listed_id.clone()),
                    1 => Some("another-server".into()),
                    _ => None,
                };
            }
            let options = options(max);
            let decision = reconcile(&server, &facts, &options, at(now));
            if rule(&server, &facts, &decision, &options, at(now)).is_some() {
                return Ok(());
            }
            prop_assert_eq!(creates(&decision) + deletes(&decision), 0, "changed the provider from a list");
            let changes_the_port = decision.actions.iter().any(|action| {
                matches!(action, Action::UpdatePort(_) | Action::EnsureFloatingIp(_) | Action::ReleaseAttachment(_))
            });
            prop_assert!(!changes_the_port || binding == 0, "changed a port not read bound to the listed server");
            prop_assert!(matches!(facts.provider, ProviderView::Present(_)), "decided from {:?}", facts.provider);
            prop_assert!(!server.meta.deleting, "released a deleting Server from a list");
            prop_assert!(!server.status.provider_create_retrying, "decided a retry from a list");
            prop_assert!(now - listed_at <= MAX_AGE.as_secs() as i64, "a list {}s old", now - listed_at);
            let current = the_note(&server).filter(|(attempt, _)| *attempt == server.status.provider_create_failures);
            prop_assert!(
                ever_booted(&server.status) || current.is_some_and(|(_, noted)| noted < at(listed_at)),
                "a list from {listed_at} decided a Server whose create was noted {current:?}"
            );
            Ok(())
        },
    )
}

// --- Sequences: passes on lists, creates, retries, a provider that changes ---

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VmState {
    Build,
    Active,
    Error,
}

#[derive(Clone, Debug)]
struct Vm {
    state: VmState,
    launched_at: Option<Timestamp>,
    /// Passes a delete takes before the provider has removed it.
    delete_polls: u8,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A pass (woken, requeued or resynced). `answer_lost`: the create's
    /// answer times out although the create landed. `cut`: its first write
    /// of the Server's metadata fails (a conflict or a timeout ends the
    /// pass there): what it wrote before stands, nothing after is sent.
    Pass {
        answer_lost: bool,
        cut: bool,
    },
    /// A monitor poll: a list of the provider's servers; it may fail.
    List {
        fails: bool,
    },
    Boot,
    FailBeforeLaunch,
    DroppedInBuild,
    /// A booted server vanishes at the provider.
    Vanish,
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (prop::bool::weighted(0.2), prop::bool::weighted(0.1))
            .prop_map(|(answer_lost, cut)| Step::Pass { answer_lost, cut }),
        3 => prop::bool::weighted(0.3).prop_map(|fails| Step::List { fails }),
        2 => Just(Step::Boot),
        2 => Just(Step::FailBeforeLaunch),
        1 => Just(Step::DroppedInBuild),
        1 => Just(Step::Vanish),
    ]
}

struct World {
    rule: Rule,
    max: i32,
    server: Server,
    vm: Option<Vm>,
    now: i64,
    /// The latest listed view of the Server's provider server, and when: a
    /// list's result or a create's answer. Kept after a delete (the rule
    /// must be safe without the adapter forgetting it).
    listed: Option<(Option<ProviderServer>, Timestamp)>,
    requeued: bool,
    woken: bool,
    /// Provider servers that failed, or that the provider dropped: the most
    /// attempts the counter may have counted.
    spent: i32,
}

impl World {
    fn new(rule: Rule, max: i32) -> Self {
        let mut server = server();
        server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
        World { rule, max, server, vm: None, now: 1_000, listed: None, requeued: true, woken: false, spent: 0 }
    }

    fn record(&self) -> Option<ProviderServer> {
        self.vm.as_ref().map(|vm| {
            let (status, power_state) = match vm.state {
                VmState::Build => (ProviderStatus::Build, PowerState::NoState),
                VmState::Active => (ProviderStatus::Active, PowerState::Running),
                VmState::Error => (ProviderStatus::Error, PowerState::NoState),
            };
            ProviderServer {
                id: "vm".into(),
                server_uid: "uid-web".into(),
                status,
                power_state,
                launched_at: vm.launched_at,
                ..Default::default()
            }
        })
    }

    fn live(&self) -> ProviderView {
        self.record().map_or(ProviderView::Absent, ProviderView::Present)
    }

    /// One pass: decided from the listed view when there is one, again from
    /// a live read when the rule asks for it; then its actions, each as the
    /// provider answers it.
    fn pass(&mut self, answer_lost: bool, cut: bool) -> Result<(), TestCaseError> {
        // A pass takes whatever woke it.
        self.woken = false;
        let now = at(self.now);
        let options = options(self.max);
        let mut facts = referenced_facts(&self.server);
        let decision = match &self.listed {
            Some((record, listed_at)) => {
                facts.provider = record.clone().map_or(ProviderView::Absent, ProviderView::Present);
                facts.provider_read = ProviderRead::Listed { at: *listed_at };
                let decision = reconcile(&self.server, &facts, &options, now);
                match (self.rule)(&self.server, &facts, &decision, &options, now) {
                    None => decision,
                    Some(_) => {
                        facts.provider = self.live();
                        facts.provider_read = ProviderRead::Live;
                        reconcile(&self.server, &facts, &options, now)
                    }
                }
            }
            None => {
                facts.provider = self.live();
                reconcile(&self.server, &facts, &options, now)
            }
        };
        self.requeued = decision.outcome.requeues();
        if cut {
            return self.apply_cut(decision, now);
        }
        self.apply(&decision, answer_lost, now)
    }

    /// The pass's actions up to its first metadata write, which fails: a
    /// status write before it stands, and the pass is requeued.
    fn apply_cut(&mut self, mut decision: Decision, now: Timestamp) -> Result<(), TestCaseError> {
        let Some(first_meta) = decision.actions.iter().position(|action| {
            !action.annotation_changes().is_empty() || matches!(action, Action::AddFinalizer { .. })
        }) else {
            return self.apply(&decision, false, now);
        };
        decision.actions.truncate(first_meta);
        if !decision.actions.iter().any(|action| matches!(action, Action::WriteStatus(_))) {
            decision.status = self.server.status.clone();
        }
        self.requeued = true;
        self.apply(&decision, false, now)
    }

    fn apply(&mut self, decision: &Decision, answer_lost: bool, now: Timestamp) -> Result<(), TestCaseError> {
        self.server.status = decision.status.clone();
        // Invariant 4's ground: only a create that was spent is counted.
        prop_assert!(
            self.server.status.provider_create_failures <= self.spent,
            "{} failures counted, {} servers spent",
            self.server.status.provider_create_failures,
            self.spent
        );
        for action in &decision.actions {
            match action {
                Action::CreateProviderServer(_) => {
                    // Invariant 13: never a create while a server of it exists.
                    prop_assert!(self.vm.is_none(), "created while {:?} exists", self.vm);
                    // Every other create's server takes a second delete to go.
                    let delete_polls = u8::from(self.now % 20 == 0);
                    self.vm = Some(Vm { state: VmState::Build, launched_at: None, delete_polls });
                    if answer_lost {
                        let failure = ActionFailure::Cloud(CloudError::Timeout { message: "lost".into() });
                        let follow_up = action_failed(&self.server, action, &failure, now);
                        self.requeued = follow_up.outcome.requeues();
                        return self.apply(&follow_up, false, now);
                    }
                    // The answer arrives after the note's second began.
                    let answered = Timestamp::from_millisecond(now.as_millisecond() + 500).unwrap();
                    self.listed = Some((self.record(), answered));
                }
                Action::DeleteProviderServer(_) => {
                    // Invariant 1: a booted server is never deleted to retry.
                    prop_assert!(self.vm.as_ref().is_none_or(|vm| vm.launched_at.is_none()), "deleted a booted server");
                    if let Some(vm) = &mut self.vm {
                        if vm.delete_polls == 0 {
                            self.vm = None;
                        } else {
                            vm.delete_polls -= 1;
                        }
                    }
                }
                _ => apply_meta(&mut self.server, action),
            }
        }
        Ok(())
    }

    fn list(&mut self) {
        let before = self.server.clone();
        let record = self.record();
        self.server.status = observe(&self.server.status, record.as_ref(), at(self.now));
        self.woken |= should_wake(Some(&before), &self.server);
        self.listed = Some((record, at(self.now)));
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        self.now += 10;
        match step {
            Step::Pass { answer_lost, cut } => self.pass(answer_lost, cut)?,
            Step::List { fails: true } => {}
            Step::List { fails: false } => self.list(),
            Step::Boot => {
                if let Some(vm @ Vm { state: VmState::Build, .. }) = &mut self.vm {
                    vm.state = VmState::Active;
                    vm.launched_at = Some(at(self.now));
                }
            }
            Step::FailBeforeLaunch => {
                if let Some(vm @ Vm { state: VmState::Build, .. }) = &mut self.vm {
                    vm.state = VmState::Error;
                    self.spent += 1;
                }
            }
            Step::DroppedInBuild => {
                if matches!(self.vm, Some(Vm { state: VmState::Build, .. })) {
                    self.vm = None;
                    self.spent += 1;
                }
            }
            // A boot no poll saw is, to the controller, a create lost before
            // launch: counted like one.
            Step::Vanish => {
                if self.vm.as_ref().is_some_and(|vm| vm.launched_at.is_some()) {
                    self.vm = None;
                    self.spent += 1;
                }
            }
        }
        Ok(())
    }

    /// The provider stops changing; the monitor polls and passes follow
    /// their requeues and wakes, as the controller runs them. The Server
    /// ends with a provider server, or parked for a person.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..60 {
            self.now += 10;
            self.list();
            if self.requeued || self.woken {
                self.pass(false, false)?;
            }
        }
        let parked = lifecycle(&self.server, &options(self.max)).park();
        prop_assert!(
            self.vm.is_some() || parked.is_some(),
            "settled with no provider server and no park: {:?}",
            self.server.status
        );
        Ok(())
    }
}

/// Invariants 1, 4 (no create counted that was not spent) and 13 over sequences of passes that decide from lists and
/// create answers, and every Server ends with a provider server or a park
/// once the provider stops changing (a listed view never leaves it waiting
/// on something nothing will report).
fn sequences_on_lists_stay_safe_and_settle(rule: Rule) -> Result<(), String> {
    run((prop::collection::vec(arb_step(), 1..60), 1i32..4), |(steps, max)| {
        let mut world = World::new(rule, max);
        for step in steps {
            world.step(step)?;
        }
        world.settle()
    })
}

/// A retry whose next create is not noted yet: the pass that found the
/// failed server gone wrote its status (retrying cleared), and the note
/// comes with the create, whose metadata write may fail (`cut`). The latest
/// list is from before the failed server's delete and still shows it; only
/// a rule that knows no create of this attempt is noted reads live instead
/// of trusting it.
fn a_list_from_before_the_retry_is_not_the_retrys_server(rule: Rule) -> Result<(), String> {
    let mut world = World::new(rule, 3);
    let steps = [
        Step::Pass { answer_lost: false, cut: false },
        Step::FailBeforeLaunch,
        Step::List { fails: false },
        Step::Pass { answer_lost: false, cut: false },
        Step::Pass { answer_lost: false, cut: true },
        Step::Pass { answer_lost: false, cut: false },
    ];
    let mut run = || -> Result<(), TestCaseError> {
        for step in steps {
            world.step(step)?;
        }
        world.settle()
    };
    run().map_err(|failure| failure.to_string())
}

// --- The properties hold for server-core ------------------------------------

#[test]
fn a_listed_view_decides_only_what_it_can_for_the_core() {
    must_hold(a_listed_view_decides_only_what_it_can(CORE));
}

#[test]
fn sequences_on_lists_stay_safe_and_settle_for_the_core() {
    must_hold(sequences_on_lists_stay_safe_and_settle(CORE));
}

#[test]
fn a_list_from_before_the_retry_is_not_the_retrys_server_for_the_core() {
    must_hold(a_list_from_before_the_retry_is_not_the_retrys_server(CORE));
}

// --- ... and each catches a deliberately broken rule ------------------------

/// Every listed view is enough.
fn never_live(_: &Server, _: &Facts, _: &Decision, _: &Options, _: Timestamp) -> Option<LiveRead> {
    None
}

/// A listed absence is enough when the decision itself does not create.
fn trusts_listed_absence(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    match live_read_needed(server, facts, decision, options, now) {
        Some(LiveRead::NotListed) if creates(decision) == 0 => None,
        other => other,
    }
}

/// A listed server is enough whatever this controller did since.
fn ignores_what_the_controller_did(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    match live_read_needed(server, facts, decision, options, now) {
        Some(LiveRead::NoCreateNoted | LiveRead::PredatesTheCreate | LiveRead::Retrying) => None,
        other => other,
    }
}

/// Any age of list is fresh enough.
fn ignores_age(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    let ageless = options.with_listed_view_max_age(Duration::from_secs(u32::MAX.into()));
    live_read_needed(server, facts, decision, &ageless, now)
}

/// A list from the note's own second counts as after the create.
fn same_second_is_after(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    let mut later = facts.clone();
    if let ProviderRead::Listed { at } = facts.provider_read {
        later.provider_read = ProviderRead::Listed { at: at.checked_add(jiff::SignedDuration::from_secs(1)).unwrap() };
    }
    live_read_needed(server, &later, decision, options, now)
}

/// A port change is enough on a listed view whatever the port was read bound to.
fn trusts_any_port(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    match live_read_needed(server, facts, decision, options, now) {
        Some(LiveRead::ChangesTheProvider) if creates(decision) + deletes(decision) == 0 => None,
        other => other,
    }
}

#[test]
fn the_rule_catches_a_port_changed_on_a_listed_view_without_its_binding() {
    must_catch(|| a_listed_view_decides_only_what_it_can(trusts_any_port));
}

#[test]
fn the_rule_catches_a_rule_that_never_reads_live() {
    must_catch(|| a_listed_view_decides_only_what_it_can(never_live));
    must_catch(|| sequences_on_lists_stay_safe_and_settle(never_live));
}

#[test]
fn the_sequences_catch_a_trusted_listed_absence() {
    must_catch(|| sequences_on_lists_stay_safe_and_settle(trusts_listed_absence));
}

#[test]
fn the_sequences_catch_a_list_older_than_the_controllers_own_delete() {
    must_catch(|| sequences_on_lists_stay_safe_and_settle(ignores_what_the_controller_did));
}

#[test]
fn the_scripted_retry_catches_a_list_older_than_the_controllers_own_delete() {
    must_catch(|| a_list_from_before_the_retry_is_not_the_retrys_server(ignores_what_the_controller_did));
}

#[test]
fn the_rule_catches_an_ageless_list() {
    must_catch(|| a_listed_view_decides_only_what_it_can(ignores_age));
}

#[test]
fn the_rule_catches_a_list_from_the_notes_own_second() {
    must_catch(|| a_listed_view_decides_only_what_it_can(same_second_is_after));
}
