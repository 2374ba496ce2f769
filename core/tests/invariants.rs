//! DESIGN §12 invariants 1–6, 8, 10 and 15 as proptest properties.
//!
//! Each property is a function over a set of [`Rules`], so the same property
//! runs against server-core's rules (it must hold) and against deliberately
//! broken ones (it must catch them): a property that cannot fail proves nothing.
#![allow(clippy::unwrap_used)]

mod support;

use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use server_core::model::{
    ConditionReason, ConditionType, Detail, ResourceKind, Server, ServerStatus, UserData, set_condition,
};
use server_core::port::{CloudError, PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::{
    Action, ActionFailure, Decision, EventReason, Facts, Options, Outcome, ProviderView, action_failed,
};
use server_core::status_patch::apply_merge_patch;
use server_core::{StatusPatch, ever_booted, observe, provider_create_failure, reconcile, record_shows_boot};
use support::strategies::*;
use support::*;

/// The rules under test. Production wires server-core's.
#[derive(Clone, Copy)]
struct Rules {
    reconcile: fn(&Server, &Facts, &Options, Timestamp) -> Decision,
    observe: fn(&ServerStatus, Option<&ProviderServer>, Timestamp) -> ServerStatus,
    /// The predicate the watch trigger uses.
    watch_pcf: fn(&Server) -> bool,
    action_failed: fn(&Server, &Action, &ActionFailure, Timestamp) -> Decision,
}

const CORE: Rules = Rules { reconcile, observe, watch_pcf: provider_create_failure, action_failed };

fn facts_with(server: &Server, view: ProviderView) -> Facts {
    let mut facts = referenced_facts(server);
    facts.provider = view;
    facts
}

// --- Single-pass properties over arbitrary servers and views ----------------

/// Invariant 1: no delete on the retry path once the server ever booted, as
/// status tells or as the record read in the same pass shows (which latches).
fn no_retry_delete_after_boot(rules: Rules) -> Result<(), String> {
    run((arb_server(), arb_view(), 1i32..5), |(mut server, view, max)| {
        server.meta.deleting = false;
        let booted_now = matches!(&view, ProviderView::Present(record) if record_shows_boot(record));
        let decision =
            (rules.reconcile)(&server, &facts_with(&server, view), &Options::with_max_attempts(max), at(2_000));
        if ever_booted(&server.status) || booted_now {
            prop_assert_eq!(deletes(&decision), 0, "deleted a server that booted");
        }
        if booted_now && server.meta.label(server_core::model::REGION_LABEL).is_some() {
            prop_assert!(decision.status.provisioned_at.is_some(), "a boot in hand was not latched");
        }
        Ok(())
    })
}

/// Invariant 2 (single pass): whatever the input, the counter leaves at most
/// max, and a failed server at the cap is parked with no provider call.
fn counter_bounded_and_cap_terminal(rules: Rules) -> Result<(), String> {
    run((arb_server(), arb_view(), 1i32..5), |(mut server, view, max)| {
        server.meta.deleting = false;
        let known = view.is_known();
        // A fresh record that shows a boot overrides what status says (§7).
        let booted_now = matches!(&view, ProviderView::Present(record) if record_shows_boot(record));
        let decision =
            (rules.reconcile)(&server, &facts_with(&server, view), &Options::with_max_attempts(max), at(2_000));
        prop_assert!(
            decision.status.provider_create_failures <= max,
            "failures {} > max {max}",
            decision.status.provider_create_failures
        );
        let at_cap = server.status.provider_create_failures >= max
            && provider_create_failure(&server)
            && !server.status.provider_create_retrying;
        if at_cap && known && !booted_now && server.meta.label(server_core::model::REGION_LABEL).is_some() {
            prop_assert!(matches!(decision.outcome, Outcome::Terminal(_)), "at the cap but {:?}", decision.outcome);
            prop_assert_eq!(creates(&decision) + deletes(&decision), 0);
        }
        Ok(())
    })
}

/// Invariant 3 (single pass): neither a reconcile nor an observation changes
/// a set provisionedAt.
fn provisioned_at_latched(rules: Rules) -> Result<(), String> {
    run((arb_server(), arb_view(), prop::option::of(arb_record())), |(server, view, record)| {
        let decision = (rules.reconcile)(&server, &facts_with(&server, view), &Options::default(), at(2_000));
        let observed = (rules.observe)(&server.status, record.as_ref(), at(2_000));
        if let Some(latched) = server.status.provisioned_at {
            prop_assert_eq!(decision.status.provisioned_at, Some(latched), "reconcile moved the latch");
            prop_assert_eq!(observed.provisioned_at, Some(latched), "observe moved the latch");
        } else if let Some(launched) = record.as_ref().and_then(|r| r.launched_at) {
            prop_assert_eq!(observed.provisioned_at, Some(launched), "observe did not backfill the latch");
        }
        Ok(())
    })
}

/// Invariant 5: the watch trigger and the retry decision agree on pcf. The
/// retry machine acts on a server (counts a failure, or parks it at the cap)
/// exactly when the watch's predicate says it failed — for a record that
/// shows no boot (one that does latches provisionedAt first, §7).
fn watch_and_retry_agree(rules: Rules) -> Result<(), String> {
    run(
        (arb_server(), arb_record().prop_filter("no boot", |r| !record_shows_boot(r)), 1i32..5),
        |(mut server, record, max)| {
            server.meta.deleting = false;
            server.meta.annotations.clear();
            server.status.provider_create_retrying = false;
            server.status.provider_create_failures = server.status.provider_create_failures.clamp(0, max);
            let facts = facts_with(&server, ProviderView::Present(record));
            let decision = (rules.reconcile)(&server, &facts, &Options::with_max_attempts(max), at(2_000));
            let parked_before = server.status.provider_create_failures == max
                && matches!(&decision.outcome, Outcome::Terminal(server_core::Park::AtCap { .. }));
            let retry_acts = decision
                .events()
                .any(|e| matches!(e.reason, EventReason::ProviderCreateRetrying | EventReason::ProviderCreateFailed))
                || parked_before;
            prop_assert_eq!((rules.watch_pcf)(&server), retry_acts, "watch and retry disagree");
            Ok(())
        },
    )
}

/// Invariant 8: any bytes as user data or CA key give a result, never a panic.
fn any_user_data_is_handled(rules: Rules) -> Result<(), String> {
    run((arb_user_data(), prop::option::of(".{0,200}"), any::<bool>()), |(user_data, key, gzip)| {
        let mut server = adopted();
        server.spec.user_data = user_data.map(|mut u| {
            if gzip {
                u.0.splice(0..0, [0x1f, 0x8b]);
            }
            u
        });
        let mut facts = referenced_facts(&server);
        if let Some(key) = key {
            server.spec.ssh_certificate_authority_id = Some("ca-x".into());
            let ca =
                server_core::model::Consumed::new("ca-x").with(Detail::SshCertificateAuthority { public_key: key });
            facts.insert(ResourceKind::SshCertificateAuthority, ca);
        }
        let decision = (rules.reconcile)(&server, &facts, &Options::default(), at(10));
        let created = creates(&decision) == 1;
        // Refused user data parks (Terminal), a bad CA key requeues (Error);
        // either way with a bounded message.
        match (&decision.outcome, decision.outcome.message()) {
            (Outcome::Error(_) | Outcome::Terminal(_), Some(message)) => {
                prop_assert!(!created);
                prop_assert!(message.len() <= 1100, "{} bytes", message.len());
            }
            other => prop_assert!(created, "{:?}", other),
        }
        Ok(())
    })
}

/// Invariant 10: an unknown provider view never creates or deletes.
fn unknown_view_is_inert(rules: Rules) -> Result<(), String> {
    let unknown = prop_oneof![Just(ProviderView::Unknown("read timed out".into())), Just(ProviderView::NoIdentity)];
    run((arb_server(), 1i32..5, unknown), |(server, max, view)| {
        let facts = facts_with(&server, view);
        let decision = (rules.reconcile)(&server, &facts, &Options::with_max_attempts(max), at(2_000));
        prop_assert_eq!(creates(&decision) + deletes(&decision), 0);
        Ok(())
    })
}

// --- Sequences of passes against a model provider ---------------------------

#[derive(Clone, Copy, Debug)]
enum VmState {
    Build,
    ErrorBeforeLaunch,
    Active,
    ErrorAfterLaunch,
}

#[derive(Clone, Debug)]
struct Vm {
    state: VmState,
    launched_at: Option<Timestamp>,
    /// Polls a delete still takes.
    delete_polls: u8,
    /// Made by another controller (the Go one) and taken over.
    adopted: bool,
}

#[derive(Clone, Debug)]
enum Step {
    /// A reconcile pass: the provider read may fail, the status write may be
    /// lost (409/500, the executor stops), and the controller may crash after
    /// running only some of the actions (a restart: only what was persisted
    /// survives).
    Reconcile {
        read_fails: bool,
        write_lost: bool,
        crash_after: Option<u8>,
        /// How the provider answers a create this pass sends.
        answer: CreateAnswer,
        /// The follow-up's status write conflicts (the monitor patched the
        /// status between the create and its follow-up).
        follow_up_write_lost: bool,
    },
    /// The user edits the spec (a new generation: re-arms a refusal).
    SpecChange,
    /// A monitor poll; a flaky provider may omit launched-at from the record.
    Monitor {
        write_lost: bool,
        list_fails: bool,
        lacks_launched_at: bool,
    },
    /// Runtime status lost by another writer (an older controller, a manual
    /// edit): launchedAt and phase gone, the provisionedAt latch kept.
    RuntimeStatusLost,
    Boot,
    FailBeforeLaunch,
    FailAfterLaunch,
    Vanish,
    DroppedInBuild,
    OperatorReset,
    /// A running server the Go controller made for this Server shows up.
    GoMadeAppears,
    /// A create whose answer was lost lands now (before its grace is over).
    LateCreateLands,
    /// The user deletes the Server.
    Delete,
}

/// A create's answer: each fault class the provider produces, by what it
/// proves about the create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreateAnswer {
    Created,
    /// Landed, and the answer timed out.
    LandedTimeout,
    /// Landed, and a gateway answered 504.
    Landed5xx,
    /// A 503 from Nova itself: nothing landed (its fate is unknown to the caller).
    NotLanded5xx,
    /// 401: proves nothing landed.
    AuthFailure,
    /// 403 quota: proves nothing landed; parks until the spec changes.
    Refused,
    /// Timed out, and Nova is still working on it: its server lands later,
    /// within the create's grace.
    LandsLater,
}

impl CreateAnswer {
    fn lands(self) -> bool {
        matches!(self, CreateAnswer::Created | CreateAnswer::LandedTimeout | CreateAnswer::Landed5xx)
    }

    fn error(self) -> Option<CloudError> {
        let message = "simulated".to_string();
        match self {
            CreateAnswer::Created => None,
            CreateAnswer::LandedTimeout | CreateAnswer::LandsLater => Some(CloudError::Timeout { message }),
            CreateAnswer::Landed5xx => Some(CloudError::Unavailable { status: 504, message }),
            CreateAnswer::NotLanded5xx => Some(CloudError::Unavailable { status: 503, message }),
            CreateAnswer::AuthFailure => Some(CloudError::Auth { message }),
            CreateAnswer::Refused => Some(CloudError::Refused { status: 403, message }),
        }
    }
}

fn arb_create_answer() -> impl Strategy<Value = CreateAnswer> {
    prop_oneof![
        6 => Just(CreateAnswer::Created),
        1 => Just(CreateAnswer::LandedTimeout),
        1 => Just(CreateAnswer::Landed5xx),
        1 => Just(CreateAnswer::NotLanded5xx),
        1 => Just(CreateAnswer::AuthFailure),
        1 => Just(CreateAnswer::Refused),
        1 => Just(CreateAnswer::LandsLater),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
            prop::option::weighted(0.1, 0u8..6),
            arb_create_answer(),
            prop::bool::weighted(0.3)
        )
            .prop_map(|(read_fails, write_lost, crash_after, answer, follow_up_write_lost)| Step::Reconcile {
                read_fails,
                write_lost,
                crash_after,
                answer,
                follow_up_write_lost
            }),
        1 => Just(Step::SpecChange),
        4 => (prop::bool::weighted(0.1), prop::bool::weighted(0.1), prop::bool::weighted(0.2)).prop_map(
            |(write_lost, list_fails, lacks_launched_at)| Step::Monitor { write_lost, list_fails, lacks_launched_at }
        ),
        1 => Just(Step::RuntimeStatusLost),
        2 => Just(Step::Boot),
        3 => Just(Step::FailBeforeLaunch),
        1 => Just(Step::FailAfterLaunch),
        1 => Just(Step::Vanish),
        1 => Just(Step::DroppedInBuild),
        1 => Just(Step::OperatorReset),
        1 => Just(Step::GoMadeAppears),
        1 => Just(Step::LateCreateLands),
        1 => Just(Step::Delete),
    ]
}

/// Steps biased towards what deletion depends on: creates whose answer is
/// lost and whose server lands later, servers dropped before launch (parks
/// at the cap keep the last attempt's runtime status), operator resets, and
/// the deletion itself.
fn arb_deletion_step() -> impl Strategy<Value = Step> {
    let answer = prop_oneof![2 => Just(CreateAnswer::Created), 2 => Just(CreateAnswer::LandsLater)];
    prop_oneof![
        6 => (prop::bool::weighted(0.1), answer).prop_map(|(read_fails, answer)| Step::Reconcile {
            read_fails,
            write_lost: false,
            crash_after: None,
            answer,
            follow_up_write_lost: false,
        }),
        3 => Just(Step::Monitor { write_lost: false, list_fails: false, lacks_launched_at: false }),
        2 => Just(Step::DroppedInBuild),
        1 => Just(Step::LateCreateLands),
        1 => Just(Step::OperatorReset),
        1 => Just(Step::Delete),
    ]
}

struct World {
    rules: Rules,
    max: i32,
    server: Server,
    vm: Option<Vm>,
    now: i64,
    creates_since_reset: i32,
    /// Creates issued since the reset whose answer did not prove they never
    /// landed: the most attempts the counter may have counted.
    attempts_since_reset: i32,
    /// The generation whose create the provider refused.
    refused_generation: Option<i64>,
    booted_ever_in_status: bool,
    latch: Option<Timestamp>,
    /// A create whose answer was lost and whose server lands later: the
    /// time by which it has landed (within the grace).
    landing_by: Option<i64>,
    /// The Server's finalizer was removed while it was being deleted.
    released: bool,
}

impl World {
    fn new(rules: Rules, max: i32) -> Self {
        World {
            rules,
            max,
            server: server(),
            vm: None,
            now: 100,
            creates_since_reset: 0,
            attempts_since_reset: 0,
            refused_generation: None,
            booted_ever_in_status: false,
            latch: None,
            landing_by: None,
            released: false,
        }
    }

    fn record(&self) -> Option<ProviderServer> {
        self.vm.as_ref().map(|vm| {
            let (status, power_state) = match vm.state {
                VmState::Build => (ProviderStatus::Build, PowerState::NoState),
                VmState::ErrorBeforeLaunch | VmState::ErrorAfterLaunch => (ProviderStatus::Error, PowerState::NoState),
                VmState::Active => (ProviderStatus::Active, PowerState::Running),
            };
            ProviderServer {
                id: "vm".into(),
                server_uid: "uid-web".into(),
                status,
                power_state,
                launched_at: vm.launched_at,
                created: Some(at(1)),
                adopted: vm.adopted,
                ..Default::default()
            }
        })
    }

    fn persist_status(&mut self, status: ServerStatus) -> Result<(), TestCaseError> {
        self.server.status = status;
        if ever_booted(&self.server.status) {
            self.booted_ever_in_status = true;
        }
        // Invariant 3 across the whole history.
        match (self.latch, self.server.status.provisioned_at) {
            (Some(latched), now) => prop_assert_eq!(Some(latched), now, "provisionedAt changed"),
            (None, now) => self.latch = now,
        }
        // Invariant 2 across the whole history.
        prop_assert!(self.server.status.provider_create_failures <= self.max, "failures above max");
        // A create proven not to have landed (refused, 401) is never counted.
        prop_assert!(
            self.server.status.provider_create_failures <= self.attempts_since_reset,
            "{} failures counted for {} attempts",
            self.server.status.provider_create_failures,
            self.attempts_since_reset
        );
        Ok(())
    }

    fn options(&self) -> Options {
        // Steps are 10 s apart: a grace of three steps.
        Options::with_max_attempts(self.max).with_create_grace(std::time::Duration::from_secs(30))
    }

    /// Runs a decision's first `limit` actions as an executor does, stopping
    /// at the first failure: a lost status write, or a create answered with
    /// an error, after which the rules' follow-up runs. `write_lost`: whether
    /// the pass's status write is lost, and whether the follow-up's is.
    fn run(
        &mut self,
        decision: &Decision,
        limit: usize,
        (write_lost, follow_up_write_lost): (bool, bool),
        answer: CreateAnswer,
        now: Timestamp,
    ) -> Result<(), TestCaseError> {
        prop_assert!(
            events_follow_a_write(decision),
            "an event before any write of the Server: {:?}",
            decision.actions
        );
        for action in decision.actions.iter().take(limit) {
            match action {
                Action::WriteStatus(patch) => {
                    if write_lost {
                        break;
                    }
                    let mut stored = serde_json::to_value(&self.server.status).unwrap();
                    apply_merge_patch(&mut stored, patch);
                    let status: ServerStatus = serde_json::from_value(stored).unwrap();
                    prop_assert_eq!(&status, &decision.status, "merge patch lost a change");
                    self.persist_status(status)?;
                }
                Action::CreateProviderServer(_) => {
                    prop_assert!(!self.server.meta.deleting, "a create for a Server being deleted");
                    prop_assert!(self.landing_by.is_none(), "a create sent while another may still land");
                    prop_assert_ne!(
                        self.refused_generation,
                        Some(self.server.meta.generation),
                        "a refused create was sent again"
                    );
                    // An answer that proves the create never landed takes
                    // back the attempt its issued note stood for.
                    match answer {
                        CreateAnswer::AuthFailure => self.attempts_since_reset -= 1,
                        CreateAnswer::Refused => {
                            self.attempts_since_reset -= 1;
                            self.refused_generation = Some(self.server.meta.generation);
                        }
                        _ => {}
                    }
                    if answer.lands() && self.vm.is_none() {
                        self.creates_since_reset += 1;
                        self.vm =
                            Some(Vm { state: VmState::Build, launched_at: None, delete_polls: 1, adopted: false });
                    }
                    if answer == CreateAnswer::LandsLater && self.vm.is_none() {
                        // Accepted now (counted in this window, invariant 4);
                        // its server appears before the grace (three steps) is over.
                        self.creates_since_reset += 1;
                        self.landing_by = Some(now.as_second() + 25);
                    }
                    // Invariant 4.
                    prop_assert!(self.creates_since_reset <= self.max, "more creates than max");
                    if let Some(error) = answer.error() {
                        let follow_up =
                            (self.rules.action_failed)(&self.server, action, &ActionFailure::Cloud(error), now);
                        prop_assert_eq!(creates(&follow_up) + deletes(&follow_up), 0);
                        let lost = (follow_up_write_lost, false);
                        return self.run(&follow_up, usize::MAX, lost, CreateAnswer::Created, now);
                    }
                }
                Action::DeleteProviderServer(_) => {
                    // Invariant 1, against everything status ever showed
                    // (deleting the Server deletes whatever it has).
                    prop_assert!(
                        self.server.meta.deleting || !self.booted_ever_in_status,
                        "deleted a server that booted"
                    );
                    if let Some(vm) = &mut self.vm {
                        if vm.delete_polls == 0 {
                            self.vm = None;
                        } else {
                            vm.delete_polls -= 1;
                        }
                    }
                }
                // Invariant 6: released only once no provider server is left
                // and none can still land.
                Action::RemoveFinalizer => {
                    prop_assert!(self.vm.is_none(), "released with its provider server in place");
                    prop_assert!(self.landing_by.is_none(), "released while a create may still land");
                    self.released = true;
                    return Ok(());
                }
                // An issued note is an attempt of unknown fate (the pass may
                // crash before its create, or the create may land unseen).
                // (The note may go with the finalizer's addition.)
                _ => {
                    let notes = action
                        .annotation_changes()
                        .iter()
                        .any(|(key, value)| *key == server_core::model::CREATE_ISSUED_ANNOTATION && value.is_some());
                    if notes {
                        self.attempts_since_reset += 1;
                    }
                    apply_meta(&mut self.server, action);
                }
            }
        }
        Ok(())
    }

    /// The late create lands.
    fn land(&mut self) -> Result<(), TestCaseError> {
        if self.landing_by.take().is_some() {
            prop_assert!(self.vm.is_none(), "two provider servers for one Server");
            self.vm = Some(Vm { state: VmState::Build, launched_at: None, delete_polls: 1, adopted: false });
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        self.now += 10;
        let now = at(self.now);
        if self.landing_by.is_some_and(|by| self.now >= by) {
            self.land()?;
        }
        match step {
            Step::Reconcile { read_fails, write_lost, crash_after, answer, follow_up_write_lost } => {
                let view = match (read_fails, self.record()) {
                    (true, _) => ProviderView::Unknown("timeout".into()),
                    (false, Some(record)) => ProviderView::Present(record),
                    (false, None) => ProviderView::Absent,
                };
                let facts = facts_with(&self.server, view);
                let options = self.options();
                let park = server_core::lifecycle(&self.server, &options).park();
                // Reported: Available already says this park (it may still
                // say an earlier error, e.g. an auth failure before a taken-over
                // server booted and vanished; writing the park then is right).
                let said = server_core::park(&self.server, &options).map(|park| park.message());
                let reported = self
                    .server
                    .status
                    .condition(ConditionType::Available)
                    .is_some_and(|c| c.reason == ConditionReason::Errored && Some(&c.message) == said.as_ref());
                let decision = (self.rules.reconcile)(&self.server, &facts, &options, now);
                if *read_fails && park.is_some() {
                    // An outage during a park changes nothing about it: it
                    // stays parked, and a park the status reports is not rewritten.
                    prop_assert!(matches!(decision.outcome, Outcome::Terminal(_)), "unparked: {:?}", decision.outcome);
                    let mut decided = self.server.clone();
                    decided.status = decision.status.clone();
                    prop_assert_eq!(server_core::lifecycle(&decided, &options).park(), park);
                    let writes = decision.actions.iter().any(|a| matches!(a, Action::WriteStatus(_)));
                    prop_assert!(!(reported && writes), "a reported park was rewritten during an outage");
                }
                let limit = crash_after.map_or(usize::MAX, usize::from);
                self.run(&decision, limit, (*write_lost, *follow_up_write_lost), *answer, now)?;
            }
            Step::SpecChange => self.server.meta.generation += 1,
            Step::LateCreateLands => self.land()?,
            Step::Delete => self.server.meta.deleting = true,
            Step::Monitor { write_lost, list_fails, lacks_launched_at } => {
                if !list_fails {
                    let mut record = self.record();
                    if *lacks_launched_at && let Some(record) = &mut record {
                        record.launched_at = None;
                    }
                    let observed = (self.rules.observe)(&self.server.status, record.as_ref(), now);
                    if !write_lost {
                        self.persist_status(observed)?;
                    }
                }
            }
            Step::Boot => {
                if let Some(vm @ Vm { state: VmState::Build, .. }) = &mut self.vm {
                    vm.state = VmState::Active;
                    vm.launched_at = Some(now);
                }
            }
            Step::FailBeforeLaunch => {
                if let Some(vm @ Vm { state: VmState::Build, .. }) = &mut self.vm {
                    vm.state = VmState::ErrorBeforeLaunch;
                }
            }
            Step::FailAfterLaunch => {
                if let Some(vm @ Vm { state: VmState::Active, .. }) = &mut self.vm {
                    vm.state = VmState::ErrorAfterLaunch;
                }
            }
            // The provider drops a server still building (a failed schedule).
            Step::DroppedInBuild => {
                if matches!(self.vm, Some(Vm { state: VmState::Build, .. })) {
                    self.vm = None;
                }
            }
            Step::Vanish => {
                if self.vm.as_ref().is_some_and(|vm| vm.launched_at.is_some()) {
                    self.vm = None;
                }
            }
            // Only the latch is assumed to survive another writer; without it
            // nothing in status could remember the boot.
            Step::RuntimeStatusLost if self.server.status.provisioned_at.is_none() => {}
            Step::RuntimeStatusLost => {
                let mut status = self.server.status.clone();
                status.launched_at = None;
                status.phase = Some(server_core::model::Phase::Pending);
                self.persist_status(status)?;
            }
            // Only where no create of ours may be in flight: one server per uid.
            Step::GoMadeAppears => {
                let issued = self.server.meta.annotations.contains_key(server_core::model::CREATE_ISSUED_ANNOTATION);
                if self.vm.is_none() && !issued && self.landing_by.is_none() {
                    // Not a create of ours (invariant 4 counts those), but a
                    // server in place the retry machine may count as a failure.
                    self.attempts_since_reset += 1;
                    self.vm =
                        Some(Vm { state: VmState::Active, launched_at: Some(now), delete_polls: 1, adopted: true });
                }
            }
            Step::OperatorReset => {
                let mut status = self.server.status.clone();
                status.provider_create_failures = 0;
                self.creates_since_reset = 0;
                // What the new window may still count from the old one: the
                // failed server in place, a create of unknown fate.
                let issued = self.server.meta.annotations.contains_key(server_core::model::CREATE_ISSUED_ANNOTATION);
                // A failure the status shows counts too, even with its server
                // gone since (a taken-over server that errored and vanished).
                let failed_in_place = self.vm.is_some() || provider_create_failure(&self.server);
                self.attempts_since_reset = i32::from(failed_in_place) + i32::from(issued);
                self.persist_status(status)?;
            }
        }
        Ok(())
    }
}

/// A pass announces nothing before its first write of the Server: a pass
/// that started from a stale copy fails that write (its resourceVersion is
/// old) and must not repeat an event the last pass already sent. A record is
/// sent whatever changed, so its events may go with it.
fn events_follow_a_write(decision: &Decision) -> bool {
    let writes = |a: &Action| {
        matches!(a, Action::Record(_) | Action::WriteStatus(_) | Action::Annotate { .. } | Action::AddFinalizer { .. })
    };
    let first_write = decision.actions.iter().position(writes);
    let first_event = decision.actions.iter().position(|a| matches!(a, Action::Emit(_)));
    match (first_event, first_write) {
        (None, _) => true,
        (Some(event), Some(write)) => write < event,
        (Some(_), None) => false,
    }
}

/// Invariants 1–4 and 6 over sequences of passes, monitor polls, provider
/// changes, lost writes, crashes mid-pass, operator resets, creates that land
/// after their answer was lost, and the Server's deletion.
fn sequences_keep_the_invariants(rules: Rules) -> Result<(), String> {
    run((prop::collection::vec(arb_step(), 1..80), 1i32..5), |(steps, max)| {
        let mut world = World::new(rules, max);
        for step in &steps {
            world.step(step)?;
            if world.released {
                break;
            }
        }
        Ok(())
    })
}

/// Invariant 15: one owner per field. A monitor poll and a pass that read
/// the same provider record never rewrite each other's Healthy: once two
/// rounds of a poll and a pass have settled it, the next poll of that record
/// changes no Healthy, nor does the pass after it. A pass that sends a
/// rebuild changes the record: the provider shows the rebuild it accepted
/// (Nova: REBUILD, the target image, a task under way).
fn monitor_and_pass_agree_on_health(rules: Rules) -> Result<(), String> {
    run((arb_server(), arb_record(), 1i32..5), |(mut server, mut record, max)| {
        server.meta.deleting = false;
        let options = Options::with_max_attempts(max);
        let healthy = |status: &ServerStatus| status.condition(ConditionType::Healthy).cloned();
        // Two rounds of a poll and a pass settle whatever the status was
        // before (the first pass may end a retry the monitor waited on).
        for t in [10, 20] {
            server.status = (rules.observe)(&server.status, Some(&record), at(t));
            let facts = facts_with(&server, ProviderView::Present(record.clone()));
            let decision = (rules.reconcile)(&server, &facts, &options, at(t + 1));
            for action in &decision.actions {
                if let Action::RebuildProviderServer(request) = action {
                    record.status = ProviderStatus::Rebuild;
                    record.image_id = Some(request.image_id.clone());
                    record.task_in_flight = true;
                }
            }
            server.status = decision.status;
        }
        let facts = facts_with(&server, ProviderView::Present(record.clone()));
        let settled = healthy(&server.status);
        server.status = (rules.observe)(&server.status, Some(&record), at(30));
        prop_assert_eq!(healthy(&server.status), settled.clone(), "the poll rewrote the pass's Healthy");
        let pass = (rules.reconcile)(&server, &facts, &options, at(31));
        prop_assert_eq!(healthy(&pass.status), settled, "the pass rewrote the poll's Healthy");
        Ok(())
    })
}

/// Invariant 6, one pass: whatever the status says (an old `scheduledAt`,
/// any phase, any conditions), a deleting Server whose create-issued note is
/// still within the grace (a create that may still land) is not released on
/// an absent view, and one whose grace is over is. A note on a Server without
/// an Available condition stands for no create (each create is sent after
/// its pass wrote Available; the sequences below check that ordering).
fn no_release_while_a_create_may_land(rules: Rules) -> Result<(), String> {
    run((arb_status(), 0i64..200, any::<bool>()), |(status, issued_ago, with_note)| {
        let options = Options::with_max_attempts(3).with_create_grace(std::time::Duration::from_secs(100));
        let now = 1_000;
        let mut server = adopted();
        server.status = status;
        server.meta.deleting = true;
        if with_note {
            let note =
                format!(r#"{{"attempt":{},"at":"{}"}}"#, server.status.provider_create_failures, at(now - issued_ago));
            server.meta.annotations.insert(server_core::model::CREATE_ISSUED_ANNOTATION.into(), note);
        }
        let decision = (rules.reconcile)(&server, &facts_with(&server, ProviderView::Absent), &options, at(now));
        let released = decision.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer));
        let available = server.status.condition(server_core::model::ConditionType::Available).is_some();
        let may_land = with_note && issued_ago < 100 && available;
        prop_assert_eq!(released, !may_land, "released: {}, a create may land: {}", released, may_land);
        Ok(())
    })
}

/// Invariant 6 over sequences biased towards deletion: a Server is released
/// only once its provider server is gone and no create of it can still land.
fn deletions_leave_nothing_behind(rules: Rules) -> Result<(), String> {
    run((prop::collection::vec(arb_deletion_step(), 1..40), 1i32..3), |(steps, max)| {
        let mut world = World::new(rules, max);
        for step in &steps {
            world.step(step)?;
            if world.released {
                break;
            }
        }
        Ok(())
    })
}

// --- The properties hold for server-core ------------------------------------

#[test]
fn invariant_1_no_retry_delete_after_boot() {
    must_hold(no_retry_delete_after_boot(CORE));
}

#[test]
fn invariant_2_counter_bounded_and_cap_terminal() {
    must_hold(counter_bounded_and_cap_terminal(CORE));
}

#[test]
fn invariant_3_provisioned_at_latched() {
    must_hold(provisioned_at_latched(CORE));
}

#[test]
fn invariant_5_watch_and_retry_agree() {
    must_hold(watch_and_retry_agree(CORE));
}

#[test]
fn invariant_8_any_user_data_is_handled() {
    must_hold(any_user_data_is_handled(CORE));
}

#[test]
fn invariant_10_unknown_view_is_inert() {
    must_hold(unknown_view_is_inert(CORE));
}

#[test]
fn invariants_1_to_4_hold_over_sequences() {
    must_hold(sequences_keep_the_invariants(CORE));
}

#[test]
fn invariant_15_monitor_and_pass_agree_on_health() {
    must_hold(monitor_and_pass_agree_on_health(CORE));
}

#[test]
fn invariant_6_deletion_leaves_nothing_behind() {
    must_hold(no_release_while_a_create_may_land(CORE));
    must_hold(deletions_leave_nothing_behind(CORE));
}

// --- ... and each catches a deliberately broken rule ------------------------

/// A reconcile whose predicate ignores provisionedAt.
fn ignores_provisioned_at(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut blind = server.clone();
    blind.status.provisioned_at = None;
    let mut decision = reconcile(&blind, facts, options, now);
    decision.status.provisioned_at = server.status.provisioned_at;
    decision
}

/// A reconcile whose cap is off by one.
fn cap_off_by_one(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    reconcile(server, facts, &Options::with_max_attempts(options.max_attempts() + 1), now)
}

/// An observation that overwrites provisionedAt instead of latching it.
fn unlatched_observe(status: &ServerStatus, record: Option<&ProviderServer>, now: Timestamp) -> ServerStatus {
    let mut next = observe(status, record, now);
    if let Some(record) = record {
        next.provisioned_at = record.launched_at;
    }
    next
}

/// A watch predicate that forgets launchedAt.
fn watch_ignores_launched_at(server: &Server) -> bool {
    let mut blind = server.clone();
    blind.status.launched_at = None;
    provider_create_failure(&blind)
}

/// A reconcile that reads an unknown view as absent.
fn unknown_as_absent(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut facts = facts.clone();
    if !facts.provider.is_known() {
        facts.provider = ProviderView::Absent;
    }
    reconcile(server, &facts, options, now)
}

/// A reconcile that insists user data is UTF-8.
fn panics_on_binary_user_data(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    if let Some(UserData(bytes)) = &server.spec.user_data {
        let _text = std::str::from_utf8(bytes).expect("user data is text");
    }
    reconcile(server, facts, options, now)
}

/// A follow-up that reads a gateway's 5xx as proof the create did not land.
fn five_xx_as_not_landed(server: &Server, action: &Action, failure: &ActionFailure, now: Timestamp) -> Decision {
    let failure = match failure {
        ActionFailure::Cloud(CloudError::Unavailable { .. }) => {
            ActionFailure::Cloud(CloudError::Unreachable { message: "read as unsent".into() })
        }
        other => other.clone(),
    };
    action_failed(server, action, &failure, now)
}

/// A follow-up that counts an authentication failure as an attempt.
fn auth_as_attempt(server: &Server, action: &Action, failure: &ActionFailure, now: Timestamp) -> Decision {
    let failure = match failure {
        ActionFailure::Cloud(CloudError::Auth { .. }) => {
            ActionFailure::Cloud(CloudError::Timeout { message: "read as unknown".into() })
        }
        other => other.clone(),
    };
    action_failed(server, action, &failure, now)
}

/// A follow-up whose records come after its status write (so a lost status
/// write loses them).
fn records_after_the_status_write(
    server: &Server,
    action: &Action,
    failure: &ActionFailure,
    now: Timestamp,
) -> Decision {
    let mut decision = action_failed(server, action, failure, now);
    decision.actions.sort_by_key(|a| matches!(a, Action::Record(_)));
    decision
}

/// A reconcile that, with no provider view, yields before it looks at the
/// parks: a parked Server reads as provisioning during every outage.
fn unparks_during_an_outage(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    if !facts.provider.is_known() && matches!(decision.outcome, Outcome::Terminal(_)) {
        decision.outcome = Outcome::Yield(server_core::Wait::ProviderUnknown { reason: "outage".into() });
    }
    decision
}

/// A reconcile that sends its events first, as the plan once did when a
/// pass had no status to write.
fn events_first(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    decision.actions.sort_by_key(|a| !matches!(a, Action::Emit(_)));
    decision
}

/// A reconcile whose status patch leaves out the conditions it changed.
fn patch_without_conditions(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    for action in &mut decision.actions {
        if let Action::WriteStatus(patch) = action {
            let mut fields = patch.json().clone();
            if let Some(fields) = fields.as_object_mut() {
                fields.remove("conditions");
            }
            *patch = StatusPatch::from_json(&fields).unwrap();
        }
    }
    decision
}

/// A deletion that takes a `scheduledAt` as proof the last create landed,
/// as it once did: a park at the cap keeps the last attempt's, so a create
/// issued since (an operator's reset) is not waited for.
fn deletion_trusts_scheduled_at(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut blind = server.clone();
    if blind.meta.deleting && blind.status.scheduled_at.is_some() {
        blind.meta.annotations.remove(server_core::model::CREATE_ISSUED_ANNOTATION);
    }
    reconcile(&blind, facts, options, now)
}

/// A pass that says a present server is being created whenever Healthy is
/// Unknown/Unknown, as it once did: for a record Nova reports UNKNOWN, the
/// monitor and the passes then rewrite each other on every poll.
fn present_unknown_reset_to_creating(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    let unseen = |status: &ServerStatus| {
        status.condition(ConditionType::Healthy).is_some_and(|h| {
            h.status == server_core::model::ConditionStatus::Unknown && h.reason == ConditionReason::Unknown
        })
    };
    if matches!(facts.provider, ProviderView::Present(_))
        && decision.outcome == Outcome::Done
        && unseen(&decision.status)
    {
        set_condition(
            &mut decision.status.conditions,
            ConditionType::Healthy,
            server_core::model::ConditionStatus::Unknown,
            ConditionReason::Provisioning,
            "Creating provider server",
            now,
        );
    }
    decision
}

/// A deletion that releases on any absence, a create in flight or not.
fn deletion_ignores_the_grace(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut blind = server.clone();
    if blind.meta.deleting {
        blind.meta.annotations.remove(server_core::model::CREATE_ISSUED_ANNOTATION);
    }
    reconcile(&blind, facts, options, now)
}

/// A follow-up that sends the create again at once after an error answer.
fn creates_again_at_once(server: &Server, action: &Action, failure: &ActionFailure, now: Timestamp) -> Decision {
    let mut decision = action_failed(server, action, failure, now);
    if matches!(action, Action::CreateProviderServer(_)) {
        decision.actions.push(action.clone());
    }
    decision
}

#[test]
fn the_sequences_catch_an_event_sent_before_any_write() {
    must_catch(|| sequences_keep_the_invariants(Rules { reconcile: events_first, ..CORE }));
}

#[test]
fn the_sequences_catch_a_park_lifted_by_an_outage() {
    must_catch(|| sequences_keep_the_invariants(Rules { reconcile: unparks_during_an_outage, ..CORE }));
}

#[test]
fn the_sequences_catch_a_status_patch_that_loses_a_change() {
    must_catch(|| sequences_keep_the_invariants(Rules { reconcile: patch_without_conditions, ..CORE }));
}

#[test]
fn the_sequences_catch_a_follow_up_that_creates_again() {
    must_catch(|| sequences_keep_the_invariants(Rules { action_failed: creates_again_at_once, ..CORE }));
}

#[test]
fn invariant_15_catches_a_pass_that_resets_an_unknown_server_to_creating() {
    must_catch(|| monitor_and_pass_agree_on_health(Rules { reconcile: present_unknown_reset_to_creating, ..CORE }));
}

#[test]
fn invariant_6_catches_a_deletion_that_trusts_an_old_scheduled_at() {
    must_catch(|| no_release_while_a_create_may_land(Rules { reconcile: deletion_trusts_scheduled_at, ..CORE }));
}

#[test]
fn invariant_6_catches_a_deletion_that_does_not_wait_for_a_create_in_flight() {
    let broken = Rules { reconcile: deletion_ignores_the_grace, ..CORE };
    must_catch(|| no_release_while_a_create_may_land(broken));
    must_catch(|| deletions_leave_nothing_behind(broken));
}

#[test]
fn invariant_4_catches_a_gateway_error_read_as_not_landed() {
    must_catch(|| sequences_keep_the_invariants(Rules { action_failed: five_xx_as_not_landed, ..CORE }));
}

#[test]
fn the_sequences_catch_an_authentication_failure_counted_as_an_attempt() {
    must_catch(|| sequences_keep_the_invariants(Rules { action_failed: auth_as_attempt, ..CORE }));
}

#[test]
fn the_sequences_catch_a_refusal_recorded_after_the_status_write() {
    must_catch(|| sequences_keep_the_invariants(Rules { action_failed: records_after_the_status_write, ..CORE }));
}

#[test]
fn invariant_1_catches_a_predicate_that_ignores_provisioned_at() {
    let broken = Rules { reconcile: ignores_provisioned_at, ..CORE };
    must_catch(|| no_retry_delete_after_boot(broken));
    must_catch(|| sequences_keep_the_invariants(broken));
}

#[test]
fn invariant_2_catches_a_cap_off_by_one() {
    let broken = Rules { reconcile: cap_off_by_one, ..CORE };
    must_catch(|| counter_bounded_and_cap_terminal(broken));
    must_catch(|| sequences_keep_the_invariants(broken));
}

#[test]
fn invariant_3_catches_an_unlatched_observation() {
    let broken = Rules { observe: unlatched_observe, ..CORE };
    must_catch(|| provisioned_at_latched(broken));
    must_catch(|| sequences_keep_the_invariants(broken));
}

#[test]
fn invariant_5_catches_a_watch_with_its_own_predicate() {
    must_catch(|| watch_and_retry_agree(Rules { watch_pcf: watch_ignores_launched_at, ..CORE }));
}

#[test]
fn invariant_8_catches_a_panic_on_binary_user_data() {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = any_user_data_is_handled(Rules { reconcile: panics_on_binary_user_data, ..CORE });
    std::panic::set_hook(hook);
    must_catch(|| result.clone());
}

#[test]
fn invariant_10_catches_unknown_read_as_absent() {
    must_catch(|| unknown_view_is_inert(Rules { reconcile: unknown_as_absent, ..CORE }));
}

#[test]
fn healthy_errored_status_is_what_the_strategies_exercise() {
    // Guards the strategies: the retry path must actually be reached.
    let mut server = adopted();
    set_condition(
        &mut server.status.conditions,
        server_core::model::ConditionType::Healthy,
        server_core::model::ConditionStatus::False,
        server_core::model::ConditionReason::Errored,
        "x",
        at(0),
    );
    assert!(provider_create_failure(&server));
}
