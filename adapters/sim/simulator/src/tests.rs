//! The simulator: a clean run, determinism, and a checker that can fail.

use jiff::Timestamp;
use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase};
use server_core::port::ProviderServer;
use server_core::{Action, Decision, Facts, Options, Server, ServerStatus, StatusPatch};

use super::*;

fn config(servers: usize, seed: u64) -> SimConfig {
    SimConfig { shard_size: 96, threads: 2, ..SimConfig::new(servers, seed) }
}

#[test]
fn default_mix_runs_without_violations() {
    let report = run(&config(300, 1));
    assert!(report.passed(), "{report}");
    assert!(report.steps > 3_000, "{report}");
    assert_eq!(report.outcomes.values().sum::<u64>(), 300);
    // The mix reaches every kind of fate and every kind of fault.
    assert!(report.fates.len() >= 5, "{report}");
    assert!(report.kube.events.contains_key("ProviderCreateRetrying"), "{report}");
    assert!(report.kube.write_conflicts > 0 && report.kube.stale_watch_deliveries > 0, "{report}");
    assert!(report.cloud.injected_failures > 0 && report.kube.controller_restarts > 0, "{report}");
    assert!(report.outcomes.get("running").copied().unwrap_or(0) > 150, "{report}");
    // Users pause and unpause, operators request retries, some provider
    // servers are taken over from another controller, and passes decide on
    // listed views.
    let k = &report.kube;
    assert!(k.pauses > 0 && k.unpauses == k.pauses && k.retry_requests > 0, "{report}");
    assert!(k.adoptable_servers > 0 && k.events.contains_key("ProviderServerAdopted"), "{report}");
    assert!(k.events.contains_key("RetryRequested") && k.listed_reads() > 0, "{report}");
    // Image edits on booted servers are rebuilt; some rebuilds fail and park.
    assert!(k.rebuilds_sent > 0 && report.cloud.rebuilds_accepted > 0, "{report}");
    assert!(k.events.contains_key("ProviderServerRebuilt"), "{report}");
}

#[test]
fn no_faults_means_every_server_runs_or_is_deleted() {
    let report = run(&SimConfig { shard_size: 96, ..SimConfig::with_fault_rate(200, 3, 0.0) });
    assert!(report.passed(), "{report}");
    let settled = ["running", "deleted"].iter().map(|k| report.outcomes.get(k).copied().unwrap_or(0)).sum::<u64>();
    assert_eq!(settled, 200, "{report}");
    // One create per Server, but for those running on a server taken over
    // from another controller.
    let adopted_running = report.kube.adoptable_servers - report.kube.adoptable_vanishing;
    assert_eq!(report.create_attempts, 200 - adopted_running, "{report}");
}

#[test]
fn same_seed_same_trace_and_another_seed_another() {
    let first = run(&config(200, 42));
    let again = run(&config(200, 42));
    assert_eq!(first.trace_hash, again.trace_hash);
    assert_eq!((first.steps, &first.outcomes), (again.steps, &again.outcomes));
    assert_ne!(first.trace_hash, run(&config(200, 43)).trace_hash);
}

#[test]
fn the_thread_count_does_not_change_the_run() {
    let one = run(&SimConfig { threads: 1, ..config(250, 5) });
    let three = run(&SimConfig { threads: 3, ..config(250, 5) });
    assert_eq!(one.trace_hash, three.trace_hash);
    assert_eq!(one.steps, three.steps);
}

#[test]
fn replay_check_finds_the_run_deterministic() {
    let report = run(&SimConfig { replay_check: true, ..config(120, 9) });
    assert!(report.passed(), "{report}");
}

#[test]
fn explain_logs_one_server() {
    let report = run(&SimConfig { explain: Some(7), ..config(60, 2) });
    assert!(report.explain.iter().any(|line| line.contains("created by the user")), "{:?}", report.explain);
    assert!(report.explain.iter().any(|line| line.contains("pass on")));
}

/// The ProviderCreateFailure predicate with the boot guard left out: Healthy
/// False/Errored alone, whatever provisionedAt, launchedAt or the phase say.
fn pcf_ignoring_boot(server: &Server) -> bool {
    server
        .status
        .condition(ConditionType::Healthy)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason == ConditionReason::Errored)
}

/// server-core's reconcile, fed a status with every sign of a boot hidden, so
/// its retry machine decides with `pcf_ignoring_boot`. What it writes is
/// re-derived from the real stored status (the broken rule ignores the latch;
/// it does not erase it).
fn reconcile_ignoring_boot(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut blinded = server.clone();
    blinded.status.provisioned_at = None;
    blinded.status.launched_at = None;
    if blinded.status.phase.is_some_and(Phase::is_post_launch) {
        blinded.status.phase = Some(Phase::Building);
    }
    let mut decision = server_core::reconcile(&blinded, facts, options, now);
    let status = &mut decision.status;
    if status.launched_at == blinded.status.launched_at {
        status.launched_at = server.status.launched_at;
    }
    if status.phase == blinded.status.phase {
        status.phase = server.status.phase;
    }
    status.provisioned_at = server.status.provisioned_at;
    let patch = StatusPatch::between(&server.status, &decision.status);
    let at = decision.actions.iter().position(|a| matches!(a, Action::WriteStatus(_)));
    match (at, patch) {
        (Some(at), Some(patch)) => decision.actions[at] = Action::WriteStatus(patch),
        (Some(at), None) => {
            decision.actions.remove(at);
        }
        (None, Some(patch)) => decision.actions.insert(0, Action::WriteStatus(patch)),
        (None, None) => {}
    }
    decision
}

#[test]
fn a_predicate_ignoring_provisioned_at_is_caught_with_its_seed() {
    let broken = DecisionRules {
        reconcile: reconcile_ignoring_boot,
        provider_create_failure: pcf_ignoring_boot,
        should_wake: |old, new| {
            old.is_none_or(|old| old.meta.generation != new.meta.generation)
                || old.is_some_and(|old| !pcf_ignoring_boot(old) && pcf_ignoring_boot(new))
        },
        ..DecisionRules::CORE
    };
    let seed = 11;
    let report = run_with(&config(300, seed), broken);
    assert!(!report.passed(), "the broken predicate went unnoticed:\n{report}");
    let first = report.violations.first().cloned();
    let Some(first) = first else { panic!("violations counted but none reported") };
    assert_eq!(first.seed, seed);
    assert!(report.violations.iter().any(|v| v.invariant == "1"), "{report}");
    assert!(report.violations.iter().all(|v| v.seed == seed));
    // The seed (and server count) reproduce it: same violation, same step.
    let again = run_with(&config(300, seed), broken);
    assert_eq!(again.violations.first(), Some(&first));
}

/// A monitor that drops the latch when the provider no longer lists the server.
fn observe_forgetting_the_latch(
    status: &ServerStatus,
    record: Option<&ProviderServer>,
    now: Timestamp,
) -> ServerStatus {
    let mut next = server_core::observe(status, record, now);
    if record.is_none() {
        next.provisioned_at = None;
    }
    next
}

#[test]
fn a_monitor_that_clears_provisioned_at_is_caught() {
    let broken = DecisionRules { observe: observe_forgetting_the_latch, ..DecisionRules::CORE };
    let report = run_with(&config(300, 4), broken);
    assert!(report.violations.iter().any(|v| v.invariant == "3"), "{report}");
}

/// A monitor that takes a task under way for a rebuild begun, whatever the
/// marker said (no rank check).
fn observe_without_the_rank_check(
    status: &ServerStatus,
    record: Option<&ProviderServer>,
    now: Timestamp,
) -> ServerStatus {
    let mut next = server_core::observe(status, record, now);
    if let (Some(marker), Some(record)) = (next.rebuild.as_mut(), record)
        && server_core::rebuild_task_in_flight(record)
    {
        marker.state = server_core::model::RebuildState::Initiated;
    }
    next
}

#[test]
fn a_monitor_that_moves_the_rebuild_marker_back_is_caught() {
    let broken = DecisionRules { observe: observe_without_the_rank_check, ..DecisionRules::CORE };
    let report = run_with(&config(600, 4), broken);
    assert!(report.violations.iter().any(|v| v.invariant == "rebuild"), "{report}");
}

/// Caches that lag for minutes, half the watch deliveries held back, and a
/// resync every minute: passes act on old copies all the time. The
/// resourceVersion guards and the issued-create note must still hold every
/// invariant (this mix found a timed-out create counted as never landed).
#[test]
fn long_lagging_caches_hold_the_invariants() {
    let mut config = config(400, 6);
    config.timing.max_watch_lag = 300_000;
    config.timing.resync_interval = Some(60_000);
    config.kube.stale_watch = 0.5;
    let report = run(&config);
    assert!(report.passed(), "{report}");
    assert!(report.kube.stale_watch_deliveries > 1_000, "{report}");
}

/// Two replicas: the leader crashes and freezes while Servers are being
/// created; leadership moves, the fence refuses what the old leader still
/// tries, and no Server ever gets a second provider server.
#[test]
fn two_replicas_hand_over_without_a_duplicate_create() {
    let report = run(&config(400, 12));
    assert!(report.passed(), "{report}");
    let k = &report.kube;
    assert_eq!(k.leader_stalls, 1, "{report}");
    // The first term, one after the stall, one after the crash.
    assert!(k.leader_terms >= 3, "{report}");
    assert_eq!((k.acting_overlap_ms, k.duplicate_creates), (0, 0), "{report}");
}

/// The same world with the fence off and the Server writes sent without
/// their resourceVersion guard: the leader resumes with creates it decided
/// before it froze, beside the successor that created meanwhile, and the
/// checker sees the second creates.
#[test]
fn without_the_fence_and_the_guard_a_server_is_created_twice() {
    let seed = 12;
    let unguarded = |fence: bool, guarded_writes: bool| {
        let mut config = config(400, seed);
        // Servers arrive fast around the stall, and creates go out seconds
        // after their pass read (a slow port create first): when the leader
        // freezes, some of its creates are in flight.
        config.timing.arrival_window = 20_000;
        config.ha.max_create_lag = 3_000;
        config.ha.fence = fence;
        config.ha.guarded_writes = guarded_writes;
        run(&config)
    };
    let broken = unguarded(false, false);
    assert!(broken.kube.duplicate_creates > 0, "{broken}");
    assert!(broken.violations.iter().any(|v| v.invariant == "13"), "{broken}");
    assert!(broken.violations.iter().any(|v| v.invariant == "11"), "{broken}");
    // Either line alone holds: the guard turns the stale pass's first write
    // into a conflict; the fence keeps the resumed leader from acting.
    let fenced = unguarded(true, false);
    assert!(fenced.passed() && fenced.kube.fenced_actions > 0, "{fenced}");
    // The guard holds Server writes only: without the fence the resumed
    // leader's reference writes (guarded by the shared object's list, not
    // the Server's version) may still land after the Server is gone
    // (invariant 6), but it creates nothing twice.
    let guarded = unguarded(false, true);
    assert_eq!(guarded.kube.duplicate_creates, 0, "{guarded}");
    assert!(guarded.violations.iter().all(|v| v.invariant == "11" || v.invariant == "6"), "{guarded}");
}

/// Relists on several pages (16 Servers a page, so each shard's relist
/// takes six round trips, after a 10 s gap) while Servers arrive, fail and
/// half of them get deleted.
fn paged_relists(relist_wakes: RelistWakes, seed: u64) -> Report {
    let mut config = config(800, seed);
    config.kube.list_page_size = 16;
    config.kube.relists = 4;
    config.kube.watch_gap = 10_000;
    config.kube.user_delete = 0.5;
    config.relist_wakes = relist_wakes;
    run(&config)
}

/// The wake filter decides a relist's wakes once its last page is in, when
/// the store holds the relisted copies: every wake is paid by a pass that
/// reads what woke it.
#[test]
fn relists_on_several_pages_lose_no_wake() {
    let report = paged_relists(RelistWakes::AtInitDone, 21);
    assert!(report.passed(), "{report}");
    let k = &report.kube;
    assert!(k.relists >= 4, "{report}");
    assert!(k.relist_pages >= 6 * k.relists, "several pages a relist: {report}");
    assert!(k.relist_wakes > 0, "{report}");
}

/// The old rule wakes each Server as its page arrives, while the store still
/// holds the copy from before the relist: a new Server's pass finds nothing
/// and a deleting one's reads it not deleting, and nothing wakes them again.
#[test]
fn wakes_decided_per_page_are_caught() {
    // Whether a lost wake happens in one run depends on timing; over a few
    // seeds the old rule always loses some, and loses nothing but wakes,
    // and what a lost wake leaves behind: a Server never passed over has
    // no finalizer, so when it is deleted a provider server another
    // controller made for it stays (6).
    let reports: Vec<Report> = (21..=26).map(|seed| paged_relists(RelistWakes::PerPage, seed)).collect();
    let caught = reports.iter().filter(|r| r.violations.iter().any(|v| v.invariant == "wake")).count();
    assert!(caught > 0, "no seed caught the per-page rule: {}", reports[0]);
    for report in &reports {
        assert!(report.violations.iter().all(|v| v.invariant == "wake" || v.invariant == "6"), "{report}");
    }
}

/// Passes decide on the term's latest list of their tenant, and read the
/// provider live only when the core's `live_read_needed` says the list
/// cannot decide (before every create and delete, and whenever the list
/// shows no server). A rule that never asks for a live read acts on lists
/// that predate a create or a deletion: creates sent while a server exists
/// (13) and Servers released while theirs lives on (6).
#[test]
fn a_listed_view_that_never_asks_for_a_live_read_is_caught() {
    let sound = run(&config(600, 1));
    assert!(sound.passed(), "{sound}");
    let k = &sound.kube;
    assert!(k.listed_reads() > 0 && k.unlisted_reads() > 0, "{sound}");
    for why in ["changes_the_provider", "not_listed"] {
        assert!(k.live_after_listed().get(why).is_some_and(|n| *n > 0), "{why}: {sound}");
    }
    let never_live = DecisionRules { live_read_needed: |_, _, _, _, _| None, ..DecisionRules::CORE };
    let broken = run_with(&config(600, 1), never_live);
    assert!(broken.kube.live_after_listed().is_empty(), "{broken}");
    for invariant in ["13", "6"] {
        assert!(broken.violations.iter().any(|v| v.invariant == invariant), "{invariant}: {broken}");
    }
}

/// Two replicas whose leadership moves back and forth within a minute: the
/// leader freezes twice, each time the other takes over, so a replica leads
/// again while the lists of its earlier term are still young enough for the
/// core's age rule.
fn leadership_back_and_forth(term_scoped_memory: bool, seed: u64) -> Report {
    let mut config = config(600, seed);
    config.ha.stalls = 2;
    config.ha.stall_duration = 20_000;
    config.ha.term_scoped_memory = term_scoped_memory;
    run(&config)
}

/// What a replica remembers belongs to its term: each term starts with no
/// list and an empty uid index, so no pass decides on what an earlier term
/// listed (another replica may have acted since). Lists that outlive their
/// term are caught, and so is the index they make.
#[test]
fn lists_that_outlive_their_term_are_caught() {
    let scoped = leadership_back_and_forth(true, 1);
    assert!(scoped.passed(), "{scoped}");
    assert!(scoped.kube.leader_terms >= 4 && scoped.kube.listed_reads() > 0, "{scoped}");
    assert!(scoped.kube.index_absent_answers > 0, "{scoped}");
    let carried = leadership_back_and_forth(false, 1);
    assert!(carried.violations.iter().any(|v| v.invariant == "term"), "{carried}");
    // The uid index of an earlier term proves absent what another replica
    // created since: a second create (13), in some seed of a dozen (the
    // other replica must have created in the gap).
    let duplicates: u64 = (1..=12).map(|seed| leadership_back_and_forth(false, seed).kube.duplicate_creates).sum();
    assert!(duplicates > 0, "no seed of 1..=12 made a duplicate create from a carried index");
}

/// The reference writer's memory belongs to its term: a replica that
/// removed a reference, lost the lease while the other added it back, and
/// leads again must not take "already removed" from its earlier term. When
/// the memory outlives its term, a deleted Server leaves its finalizer on a
/// Network (6).
#[test]
fn reference_memory_that_outlives_its_term_is_caught() {
    let mut config = config(600, 1);
    config.ha.stalls = 4;
    config.ha.stall_duration = 20_000;
    config.kube.spec_edit = 0.9;
    let scoped = run(&config);
    assert!(scoped.passed(), "{scoped}");
    config.ha.term_scoped_references = false;
    let carried = run(&config);
    assert!(carried.kube.reference_writes_spared > 0, "{carried}");
    let leaked = |v: &&Violation| v.invariant == "6" && v.message.contains("reference finalizer");
    assert!(carried.violations.iter().any(|v| leaked(&v)), "{carried}");
}

/// server-core's reconcile, leaving an operator's retry annotation in place.
fn reconcile_keeping_the_retry_request(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = server_core::reconcile(server, facts, options, now);
    let retry = server_core::model::RETRY_ANNOTATION;
    decision.actions.retain(|action| !action.annotation_changes().contains(&(retry, None)));
    decision
}

#[test]
fn a_rule_that_never_consumes_the_retry_request_is_caught() {
    let broken = DecisionRules { reconcile: reconcile_keeping_the_retry_request, ..DecisionRules::CORE };
    let report = run_with(&config(600, 2), broken);
    assert!(report.violations.iter().any(|v| v.invariant == "retry"), "{report}");
}

/// Servers that vanish within one or two monitor intervals of their boot,
/// and a third of the writes conflicting: a boot the monitor listed but
/// could not latch must be latched by a pass at once, or the next poll finds
/// the server gone and its Server is created again.
fn quick_vanishes(seed: u64) -> SimConfig {
    let mut config = config(600, seed);
    config.cloud.mix.vanish_after_launch = 0.6;
    config.cloud.mix.timing.after_launch = server_simcloud::Span::secs(5, 45);
    config.kube.write_conflict = 0.3;
    config
}

#[test]
fn a_first_latch_the_monitor_could_not_write_wakes_a_pass() {
    let never_wakes = DecisionRules { unwritten_wakes: |_, _| false, ..DecisionRules::CORE };
    let mut broken = (0, 0);
    let mut core = (0, 0);
    for seed in 1..=3 {
        let report = run_with(&quick_vanishes(seed), never_wakes);
        broken.0 += report.kube.recreated_shown_boots;
        let report = run(&quick_vanishes(seed));
        assert!(report.passed(), "{report}");
        core.0 += report.kube.recreated_shown_boots;
        core.1 += report.kube.latch_wakes;
    }
    eprintln!("recreated after a boot was shown: {} without the wake, {} with ({} wakes)", broken.0, core.0, core.1);
    assert!(broken.0 > 0, "the mix never loses a listed boot: the test shows nothing");
    assert!(core.1 > 0 && core.0 * 4 <= broken.0, "the wake saves few: {core:?} against {broken:?}");
}
