//! The pass asks for its facts: which reads, in which order, and when a
//! listed view or a cached copy is enough. Every driver answers these needs;
//! none of them decides what to read.
#![allow(clippy::unwrap_used)]

mod support;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use server_core::model::{ResourceKind, UserData};
use server_core::pass::{Fact, Need, ProviderSource, Rules, UserDataCopy};
use server_core::reconcile::{Action, Facts, LiveRead, Options, Outcome, ProviderRead, ProviderView, Wait};
use server_core::{Decision, Pass, Server, ever_booted};
use support::strategies::*;
use support::*;

/// A driver that answers every need from `facts` (the provider as listed
/// at `listed_at`, and `live` when read live), recording what it was asked.
struct Answerer {
    facts: Facts,
    /// The consumed resources a live read finds, when not those of `facts`.
    consumed_live: Option<Facts>,
    live: ProviderView,
    listed_at: Option<i64>,
    user_data: Option<Option<UserData>>,
    asked: Vec<Need>,
}

impl Answerer {
    fn new(facts: Facts) -> Self {
        let live = facts.provider.clone();
        Answerer { facts, consumed_live: None, live, listed_at: None, user_data: None, asked: Vec::new() }
    }

    fn listed(mut self, view: ProviderView, at: i64) -> Self {
        self.facts.provider = view;
        self.listed_at = Some(at);
        self
    }

    fn drive(&mut self, pass: &mut Pass) {
        while let Some(need) = pass.poll_need().cloned() {
            self.asked.push(need.clone());
            let fact = match need {
                Need::Consumed => Fact::consumed_of(self.facts.clone()),
                Need::ConsumedLive | Need::ConsumedBeforeRelease => {
                    Fact::consumed_of(self.consumed_live.clone().unwrap_or_else(|| self.facts.clone()))
                }
                Need::Provider => match self.listed_at {
                    Some(second) => Fact::Provider {
                        view: self.facts.provider.clone(),
                        read: ProviderRead::Listed { at: at(second) },
                        boot_read: None,
                    },
                    None => Fact::Provider { view: self.live.clone(), read: ProviderRead::Live, boot_read: None },
                },
                Need::ProviderLive(_) => {
                    Fact::Provider { view: self.live.clone(), read: ProviderRead::Live, boot_read: None }
                }
                Need::Attachments => Fact::Attachments(self.facts.attachments.clone()),
                Need::Networking { .. } => Fact::Networking(self.facts.networking.clone()),
                Need::UserData => Fact::UserData(self.user_data.clone().unwrap()),
            };
            pass.handle_fact(fact).unwrap();
        }
    }
}

fn names(needs: &[Need]) -> Vec<&'static str> {
    needs.iter().map(Need::name).collect()
}

fn creates(pass: &Pass) -> bool {
    pass.decision().is_some_and(|d| d.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_))))
}

#[test]
fn a_new_server_reads_its_resources_then_the_provider_then_creates() {
    let mut pass = Pass::start(server(), Options::default(), at(10));
    let mut driver = Answerer::new(facts());
    driver.drive(&mut pass);
    assert_eq!(names(&driver.asked), ["Consumed", "Provider"]);
    assert_eq!(pass.provider_source(), Some(ProviderSource::Live));
    assert!(pass.poll_action().is_some(), "decided");
}

#[test]
fn a_listed_absence_is_read_live_before_anything_is_decided_from_it() {
    let mut pass = Pass::start(server(), Options::default(), at(10));
    let mut driver = Answerer::new(facts()).listed(ProviderView::Absent, 9);
    driver.drive(&mut pass);
    assert_eq!(driver.asked[..2], [Need::Consumed, Need::Provider]);
    assert!(matches!(driver.asked[2], Need::ProviderLive(_)), "{:?}", driver.asked);
    assert!(matches!(pass.provider_source(), Some(ProviderSource::LiveAfterListed(_))));
    assert_eq!(pass.facts().provider_read, ProviderRead::Live);
}

#[test]
fn a_booted_listed_server_decides_from_the_list_with_its_networking_read() {
    let mut server = server();
    let mut record = match present() {
        ProviderView::Present(record) => record,
        _ => unreachable!(),
    };
    record.launched_at = Some(at(5));
    server.status.provisioned_at = Some(at(5));
    server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
    let mut pass = Pass::start(server, Options::default(), at(10));
    let mut driver = Answerer::new(referenced_facts(&support::server())).listed(ProviderView::Present(record), 9);
    driver.drive(&mut pass);
    assert_eq!(names(&driver.asked), ["Consumed", "Provider", "Networking"]);
    assert_eq!(pass.provider_source(), Some(ProviderSource::Listed));
}

/// A listed server the rule refuses whatever is decided (it never booted
/// and no create of it is noted) is read live before its ports: the ports
/// are read once, for the live view.
#[test]
fn a_listed_view_refused_anyway_is_read_live_before_the_ports() {
    let mut server = server();
    server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
    let mut pass = Pass::start(server, Options::default(), at(10));
    let mut driver = Answerer::new(referenced_facts(&support::server())).listed(present(), 8);
    driver.live = present();
    driver.drive(&mut pass);
    assert_eq!(
        driver.asked,
        [
            Need::Consumed,
            Need::Provider,
            Need::ProviderLive(LiveRead::NoCreateNoted),
            Need::Networking { provider_id: "vm-1".into() }
        ]
    );
}

#[test]
fn a_cache_lacking_a_named_network_is_confirmed_live() {
    let mut cached = facts();
    cached.remove(ResourceKind::Network);
    let mut pass = Pass::start(server(), Options::default(), at(10));
    // The first answer (the cache) lacks the network; the driver's live
    // read is the same Answerer, which then holds it.
    pass.handle_fact(Fact::consumed_of(cached)).unwrap();
    assert_eq!(pass.poll_need(), Some(&Need::ConsumedLive));
    let mut driver = Answerer::new(facts());
    driver.drive(&mut pass);
    assert_eq!(names(&driver.asked), ["ConsumedLive", "Provider"]);
}

#[test]
fn a_paused_server_needs_nothing() {
    let mut server = server();
    server.spec.pause = true;
    let pass = Pass::start(server, Options::default(), at(10));
    assert_eq!(pass.poll_need(), None);
    assert_eq!(pass.provider_source(), None);
    assert!(pass.decision().is_some());
}

#[test]
fn a_deleting_server_whose_server_is_gone_reads_its_ports_and_floating_ips() {
    let mut server = server();
    server.meta.deleting = true;
    server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
    let mut pass = Pass::start(server.clone(), Options::default(), at(10));
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let mut driver = Answerer::new(facts);
    driver.drive(&mut pass);
    // Released: the references it releases are confirmed live first.
    assert_eq!(names(&driver.asked), ["Consumed", "Provider", "Attachments", "ConsumedBeforeRelease"]);
    assert!(pass.decision().unwrap().actions.contains(&Action::RemoveFinalizer));
}

/// A deleting Server with its finalizer and its references.
fn deleting() -> (Server, Facts) {
    let mut server = server();
    server.meta.deleting = true;
    server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
    let facts = referenced_facts(&server);
    (server, facts)
}

#[test]
fn a_deleting_server_waiting_for_the_cloud_decides_on_the_cache() {
    let (server, mut facts) = deleting();
    facts.provider = present();
    let mut pass = Pass::start(server, Options::default(), at(10));
    let mut driver = Answerer::new(facts);
    driver.drive(&mut pass);
    assert_eq!(names(&driver.asked), ["Consumed", "Provider"]);
    assert!(pass.decision().unwrap().actions.iter().any(|a| matches!(a, Action::DeleteProviderServer(_))));
}

#[test]
fn a_reference_the_cache_has_not_seen_is_released_with_the_server() {
    let (server, live) = deleting();
    let mut cached = live.clone();
    cached.provider = ProviderView::Absent;
    for resource in cached.consumed.get_mut(&ResourceKind::Network).unwrap() {
        resource.finalizers.clear();
    }
    let mut pass = Pass::start(server, Options::default(), at(10));
    let mut driver = Answerer::new(cached);
    driver.consumed_live = Some(live);
    driver.drive(&mut pass);
    let actions = &pass.decision().unwrap().actions;
    let released: Vec<ResourceKind> = actions
        .iter()
        .filter_map(|a| match a {
            Action::RemoveReference(reference) => Some(reference.kind),
            _ => None,
        })
        .collect();
    assert!(released.contains(&ResourceKind::Network), "the live read's reference is released: {actions:?}");
    assert_eq!(actions.last(), Some(&Action::RemoveFinalizer));
}

#[test]
fn a_release_judged_on_a_cache_lacking_the_identity_is_judged_again_on_the_live_read() {
    let (server, live) = deleting();
    let mut cached = live.clone();
    cached.remove(ResourceKind::Identity);
    cached.provider = ProviderView::NoIdentity;
    let mut pass = Pass::start(server, Options::default(), at(10));
    let mut driver = Answerer::new(cached);
    driver.consumed_live = Some(live);
    driver.drive(&mut pass);
    // The driver's provider answer stays NoIdentity; the live Identity, not
    // being deleted, makes the pass wait for the cloud account instead.
    assert_eq!(names(&driver.asked), ["Consumed", "Provider", "ConsumedBeforeRelease", "Provider"]);
    let decision = pass.decision().unwrap();
    assert!(!decision.actions.contains(&Action::RemoveFinalizer), "{decision:?}");
    assert_eq!(decision.outcome, Outcome::Yield(Wait::NoCloudAccount));
}

fn sent_user_data(actions: &[Action]) -> Option<String> {
    actions.iter().find_map(|a| match a {
        Action::CreateProviderServer(request) => {
            Some(String::from_utf8_lossy(request.user_data.as_deref()?).into_owned())
        }
        _ => None,
    })
}

fn issued_note(server: &Server) -> Option<&String> {
    server.meta.annotations.get(server_core::model::CREATE_ISSUED_ANNOTATION)
}

/// Runs the pass's actions, each succeeding; the create's note whose answer
/// the pass awaits is answered with `user_data`, as the Server written. The
/// actions run, in order.
fn run_actions(pass: &mut Pass, user_data: Option<&UserData>) -> Vec<Action> {
    let mut ran = Vec::new();
    while let Some(action) = pass.poll_action().cloned() {
        ran.push(action);
        match user_data.filter(|_| pass.awaits_user_data()) {
            Some(user_data) => pass.handle_done_with_user_data(Some(user_data.clone())),
            None => pass.handle_done(),
        }
    }
    ran
}

const CLOUD_CONFIG: &[u8] = b"#cloud-config\nruncmd: [echo hi]\n";

#[test]
fn withheld_user_data_of_a_first_create_comes_with_its_note_write() {
    let mut pass = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    let mut driver = Answerer::new(facts());
    driver.drive(&mut pass);
    assert_eq!(names(&driver.asked), ["Consumed", "Provider"], "nothing read for the user data");
    assert!(pass.awaits_user_data());
    assert!(matches!(pass.poll_action(), Some(Action::AddFinalizer { annotations }) if !annotations.is_empty()));
    let ran = run_actions(&mut pass, Some(&UserData(CLOUD_CONFIG.to_vec())));
    assert!(sent_user_data(&ran).unwrap().contains("echo hi"), "the create sends the user data written");
    let notes =
        ran.iter().filter(|a| a.annotation_changes().iter().any(|(key, _)| key.ends_with("create-issued-attempt")));
    assert_eq!(notes.count(), 1, "the note is written once: {ran:?}");
    assert_eq!(pass.into_outcome(), Outcome::Yield(Wait::Creating));
}

/// A pass holds its decision while it waits on reference writes (during a
/// burst of new Servers, hundreds of passes at once): once the create's
/// request carries the user data, the pass's copy of the Server leaves it
/// out, whichever way the pass got it.
#[test]
fn a_pass_that_creates_holds_its_user_data_once_in_the_request() {
    let mut held = server();
    held.spec.user_data = Some(UserData(CLOUD_CONFIG.to_vec()));
    let mut pass = Pass::start(held, Options::default(), at(10));
    Answerer::new(facts()).drive(&mut pass);
    assert!(creates(&pass));
    assert_eq!(pass.server().spec.user_data, None, "the copy leaves it out");
    let ran = run_actions(&mut pass, None);
    assert!(sent_user_data(&ran).unwrap().contains("echo hi"), "the create still sends it");

    let mut pass = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    Answerer::new(facts()).drive(&mut pass);
    pass.handle_done_with_user_data(Some(UserData(CLOUD_CONFIG.to_vec())));
    assert!(creates(&pass));
    assert_eq!(pass.server().spec.user_data, None, "the copy leaves out what the note's answer brought");
    let ran = run_actions(&mut pass, None);
    assert!(sent_user_data(&ran).unwrap().contains("echo hi"));
    assert_eq!(pass.into_outcome(), Outcome::Yield(Wait::Creating));
}

#[test]
fn a_note_answered_without_the_server_written_reads_the_user_data_then_creates() {
    let mut pass = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    let mut driver = Answerer::new(facts());
    driver.user_data = Some(Some(UserData(CLOUD_CONFIG.to_vec())));
    driver.drive(&mut pass);
    pass.handle_done();
    assert_eq!(pass.poll_need(), Some(&Need::UserData));
    driver.drive(&mut pass);
    let ran = run_actions(&mut pass, None);
    assert!(sent_user_data(&ran).unwrap().contains("echo hi"));
    assert_eq!(pass.into_outcome(), Outcome::Yield(Wait::Creating));
}

#[test]
fn user_data_refused_after_its_note_sets_the_note_back_and_parks() {
    let mut pass = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    Answerer::new(facts()).drive(&mut pass);
    let ran = run_actions(&mut pass, Some(&UserData(b"no sentinel cloud-init knows\n".to_vec())));
    assert_eq!(sent_user_data(&ran), None, "nothing created: {ran:?}");
    assert_eq!(issued_note(pass.server()), None, "no note of a create never sent");
    assert!(matches!(pass.into_outcome(), Outcome::Terminal(_)));
}

/// A note left by an earlier pass that stopped before its create (no
/// Available: it stands for none) is not set back beside the park's
/// Available, where it would stand for a create never sent and be counted.
#[test]
fn refused_user_data_after_a_note_that_stood_for_no_create_leaves_none() {
    let refused = UserData(b"no sentinel cloud-init knows\n".to_vec());
    let mut first = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    Answerer::new(facts()).drive(&mut first);
    first.handle_done_with_user_data(Some(refused.clone()));
    // Its set-back failed: the note stands, with no Available.
    let conflict =
        server_core::ApiFailure::new("writing an annotation", server_core::ApiCause::StillConflicting { attempts: 1 });
    first.handle_failed(server_core::ActionFailure::Conflict(conflict));
    let mut server = first.server().clone();
    server.spec.user_data = None;
    assert!(issued_note(&server).is_some());

    let mut second = Pass::start_with(server, Options::default(), at(20), Rules::CORE, UserDataCopy::Withheld);
    Answerer::new(facts()).drive(&mut second);
    let ran = run_actions(&mut second, Some(&refused));
    assert_eq!(sent_user_data(&ran), None);
    assert_eq!(issued_note(second.server()), None, "{ran:?}");
    assert!(matches!(second.into_outcome(), Outcome::Terminal(_)));
}

#[test]
fn a_server_written_without_user_data_sets_the_note_back_and_ends_for_the_next_pass() {
    let mut pass = Pass::start_with(server(), Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    Answerer::new(facts()).drive(&mut pass);
    pass.handle_done_with_user_data(None);
    let ran = run_actions(&mut pass, None);
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(issued_note(pass.server()), None);
    assert_eq!(pass.into_outcome(), Outcome::Yield(Wait::ServerChanged));
}

#[test]
fn withheld_user_data_of_a_create_noted_after_other_writes_is_read_first() {
    // A retry: its status write comes before its note.
    let server = retrying_server();
    let mut pass = Pass::start_with(server, Options::default(), at(100), Rules::CORE, UserDataCopy::Withheld);
    let mut driver = Answerer::new(referenced_facts(&retrying_server()));
    driver.user_data = Some(Some(UserData(CLOUD_CONFIG.to_vec())));
    driver.drive(&mut pass);
    assert_eq!(driver.asked.last(), Some(&Need::UserData), "{:?}", driver.asked);
    assert!(!pass.awaits_user_data());
    let ran = run_actions(&mut pass, None);
    assert!(sent_user_data(&ran).unwrap().contains("echo hi"), "{ran:?}");
}

#[test]
fn withheld_user_data_of_a_server_that_changed_ends_the_pass_for_the_next() {
    let mut pass =
        Pass::start_with(retrying_server(), Options::default(), at(100), Rules::CORE, UserDataCopy::Withheld);
    let mut driver = Answerer::new(referenced_facts(&retrying_server()));
    driver.user_data = Some(None);
    driver.drive(&mut pass);
    assert_eq!(pass.poll_action(), None);
    assert_eq!(pass.into_outcome(), Outcome::Yield(Wait::ServerChanged));
}

/// A Server whose failed server is gone: its pass creates again, writing
/// its status before its note.
fn retrying_server() -> Server {
    let mut server = create_failed(1);
    server.status.provider_create_retrying = true;
    server_core::model::set_condition(
        &mut server.status.conditions,
        server_core::model::ConditionType::Available,
        server_core::model::ConditionStatus::False,
        server_core::model::ConditionReason::Provisioning,
        "retrying",
        at(50),
    );
    server
}

// --- Property: a copy without the user data acts as one with it ---------

fn arb_sent_user_data() -> impl Strategy<Value = UserData> {
    prop_oneof![
        Just(UserData(CLOUD_CONFIG.to_vec())),
        Just(UserData(b"#!/bin/sh\necho hi\n".to_vec())),
        Just(UserData(b"no sentinel cloud-init knows\n".to_vec())),
        prop::collection::vec(any::<u8>(), 1..64).prop_map(UserData),
    ]
}

/// Whatever the Server and its provider, a pass whose copy withholds the
/// user data (taken from its note's answer, or read) ends with the Server
/// persisted as a pass holding it does, having sent the provider, the
/// consumed resources and the Events the same; and when it creates, with
/// the very same writes.
#[test]
fn a_pass_without_the_user_data_acts_as_one_with_it() {
    let strategy = (arb_server(), arb_view(), arb_sent_user_data(), 20i64..60);
    must_hold(run(strategy, |(mut server, live, user_data, now)| {
        server.spec.user_data = Some(user_data.clone());
        let facts = referenced_facts(&server);
        let mut held = Pass::start_with(server.clone(), Options::default(), at(now), Rules::CORE, UserDataCopy::Held);
        let mut driver = Answerer::new(facts.clone());
        driver.live = live.clone();
        driver.drive(&mut held);
        let held_ran = run_actions(&mut held, None);

        server.spec.user_data = None;
        let mut withheld = Pass::start_with(server, Options::default(), at(now), Rules::CORE, UserDataCopy::Withheld);
        let mut driver = Answerer::new(facts);
        driver.live = live;
        driver.user_data = Some(Some(user_data.clone()));
        driver.drive(&mut withheld);
        let withheld_ran = run_actions(&mut withheld, Some(&user_data));

        prop_assert_eq!(&held.server().meta, &withheld.server().meta);
        prop_assert_eq!(&held.server().status, &withheld.server().status);
        prop_assert_eq!(held.outcome(), withheld.outcome());
        let elsewhere = |ran: &[Action]| -> Vec<Action> {
            ran.iter()
                .filter(|a| a.annotation_changes().is_empty() && !matches!(a, Action::AddFinalizer { .. }))
                .cloned()
                .collect()
        };
        prop_assert_eq!(elsewhere(&held_ran), elsewhere(&withheld_ran));
        if held_ran.iter().any(|a| matches!(a, Action::CreateProviderServer(_))) {
            prop_assert_eq!(held_ran, withheld_ran);
        }
        Ok::<(), TestCaseError>(())
    }));
}

#[test]
fn withheld_user_data_is_not_read_when_nothing_is_created() {
    let mut server = server();
    server.meta.deleting = true;
    let mut pass = Pass::start_with(server, Options::default(), at(10), Rules::CORE, UserDataCopy::Withheld);
    let mut driver = Answerer::new(facts());
    driver.drive(&mut pass);
    assert!(!driver.asked.contains(&Need::UserData));
}

#[test]
fn an_answer_to_another_need_is_refused_and_changes_nothing() {
    let mut pass = Pass::start(server(), Options::default(), at(10));
    let refused =
        pass.handle_fact(Fact::Provider { view: ProviderView::Absent, read: ProviderRead::Live, boot_read: None });
    assert_eq!(refused.unwrap_err().needed, Some(Need::Consumed));
    assert_eq!(pass.poll_need(), Some(&Need::Consumed));
}

#[test]
fn a_pass_dropped_while_gathering_is_interrupted() {
    let pass = Pass::start(server(), Options::default(), at(10));
    assert!(matches!(pass.into_outcome(), Outcome::Error(_)));
}

// --- Property: only a live read leads to a provider change ---------------

/// Whatever the Server, the listed view and the live one, a pass driven
/// through its needs creates or deletes at the provider only after reading
/// the provider live, and creates only when that live read shows no server.
fn a_provider_change_rests_on_a_live_read(rules: Rules) -> Result<(), String> {
    let strategy = (arb_server(), arb_view(), arb_view(), 0i64..30, 20i64..60);
    run(strategy, |(server, listed, live, list_at, now)| {
        let mut pass = Pass::start_with(server.clone(), Options::default(), at(now), rules, UserDataCopy::Held);
        let mut driver = Answerer::new(referenced_facts(&server)).listed(listed, list_at);
        driver.live = live.clone();
        driver.drive(&mut pass);
        let changes = pass.decision().is_some_and(|d| {
            d.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_) | Action::DeleteProviderServer(_)))
        });
        let live_read =
            matches!(pass.provider_source(), Some(ProviderSource::Live | ProviderSource::LiveAfterListed(_)));
        prop_assert!(!changes || live_read, "changed the provider from a listed view: {:?}", pass.decision());
        if creates(&pass) {
            prop_assert_eq!(&pass.facts().provider, &ProviderView::Absent, "created over a live server");
            prop_assert!(!ever_booted(&server.status), "recreated a booted server");
        }
        Ok::<(), TestCaseError>(())
    })
}

#[test]
fn a_provider_change_rests_on_a_live_read_with_the_core_rules() {
    must_hold(a_provider_change_rests_on_a_live_read(Rules::CORE));
}

#[test]
fn a_provider_change_rests_on_a_live_read_catches_a_rule_that_never_reads_live() {
    fn never(_: &Server, _: &Facts, _: &Decision, _: &Options, _: jiff::Timestamp) -> Option<LiveRead> {
        None
    }
    let broken = Rules { live_read_needed: never, ..Rules::CORE };
    must_catch(|| a_provider_change_rests_on_a_live_read(broken));
}

// --- Policy the adapters used to hold -------------------------------------

#[test]
fn an_unreadable_server_is_said_once_by_event_and_parked_reading_nothing() {
    let pass = Pass::unreadable(server(), "spec.networks[0]: invalid type", Options::default(), at(10));
    assert_eq!(pass.poll_need(), None, "nothing is read");
    let decision = pass.decision().unwrap();
    assert_eq!(decision.actions.len(), 1);
    let Action::Emit(event) = &decision.actions[0] else { panic!("{:?}", decision.actions) };
    assert_eq!(event.reason.as_str(), "ServerUnreadable");
    assert!(event.note.contains("spec.networks[0]"));
    assert!(matches!(decision.outcome, Outcome::Terminal(server_core::Park::InvalidSpec { .. })));
}

/// A deleting Server whose provider server and attachments are gone: the
/// pass removes its finalizer.
fn releasing_pass() -> Pass {
    let mut server = server();
    server.meta.deleting = true;
    server.meta.finalizers.push(server_core::model::SERVER_FINALIZER.into());
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    let pass = Pass::with_facts(server, &facts, &Options::default(), at(10));
    let actions = &pass.decision().unwrap().actions;
    assert!(actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)), "{actions:?}");
    pass
}

#[test]
fn removing_the_finalizer_of_a_server_already_gone_is_done() {
    let mut pass = releasing_pass();
    while let Some(action) = pass.poll_action() {
        if matches!(action, Action::RemoveFinalizer) {
            pass.handle_failed(server_core::ActionFailure::ServerGone);
        } else {
            pass.handle_done();
        }
    }
    assert!(!pass.is_following_up());
    assert_eq!(pass.into_outcome(), Outcome::Done);
}

#[test]
fn any_other_failure_to_remove_the_finalizer_is_not_done() {
    let mut pass = releasing_pass();
    while let Some(action) = pass.poll_action() {
        if matches!(action, Action::RemoveFinalizer) {
            let timed_out = server_core::ApiCause::NoAnswer("timed out".into());
            pass.handle_failed(server_core::ActionFailure::Api(server_core::ApiFailure::new("removing", timed_out)));
        } else {
            pass.handle_done();
        }
    }
    assert!(matches!(pass.into_outcome(), Outcome::Error(_)));
}
