//! High availability: two operator replicas, each on its own runtime with
//! its own client, on one SimKube and one cloud whose creates answer late.
//! Only the Lease holder acts; a killed leader is replaced within the lease
//! duration plus a pass, a stopped one within a retry period, and a leader
//! cut off from the API stops acting before its lease can expire for the
//! other. Never two creates for one Server.
//!
//! These run on SimCloud's port directly: what is under test is who acts,
//! not the cloud's wire protocol (the other suites run both cloud paths).

use std::time::{Duration, Instant};

use server_core::model::CREATE_ISSUED_ANNOTATION;
use server_e2e::cloud::Fate;
use server_e2e::ha::{CutProxy, LeadershipLog, Replica, test_lease};
use server_e2e::*;

/// Creates answer this long after they land: past several passes.
const SLOW_CREATE: Duration = Duration::from_millis(800);

fn config() -> server_kube::ControllerConfig {
    server_kube::ControllerConfig { drain_timeout: Duration::from_secs(3), ..test_config() }
}

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i:02}")).collect()
}

async fn wait_running(env: &Env, names: &[String]) {
    for name in names {
        env.wait_server(name, "Running and Available", |s| {
            phase(s) == "Running" && available_reason(s) == "Provisioned"
        })
        .await;
    }
}

/// Exactly one accepted create per Server, no failure counted, no retry event.
fn assert_created_once(env: &Env, servers: &[(String, String)]) {
    for (name, uid) in servers {
        let truth = env.truth(uid);
        assert_eq!(truth.creates_accepted, 1, "{name}: {truth:?}");
        let server = env.server(name).unwrap_or_else(|| panic!("{name} is gone"));
        assert_eq!(status(&server).provider_create_failures, 0, "{name} counted a failed attempt");
        assert_eq!(env.event_count(name, "ProviderCreateRetrying"), 0, "{name} was retried");
    }
    env.assert_invariants();
}

async fn wait_until(what: &str, within: Duration, check: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_create_each_of_twenty_servers_once() {
    within(async {
        let env = Env::new(CloudKind::Direct, 71).await;
        let servers: Vec<(String, String)> = names("pair", 20)
            .into_iter()
            .map(|name| {
                let uid = env.create_server(&name, fast(Fate::clean()), Env::spec());
                (name, uid)
            })
            .collect();
        let mut a = Replica::start(&env, "replica-a", &env.api_url(), &config(), SLOW_CREATE);
        let mut b = Replica::start(&env, "replica-b", &env.api_url(), &config(), SLOW_CREATE);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);

        let all: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
        wait_running(&env, &all).await;
        env.idle(10).await;

        assert_created_once(&env, &servers);
        assert!(!log.overlapped(), "two replicas acted at once");
        assert!(a.leads() != b.leads(), "exactly one replica leads");
        a.terminate().await;
        b.terminate().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_the_lease_duration_and_nothing_is_created_twice() {
    within(async {
        let env = Env::new(CloudKind::Direct, 72).await;
        let slow = Duration::from_millis(1500);
        let mut a = Replica::start(&env, "replica-a", &env.api_url(), &config(), slow);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start(&env, "replica-b", &env.api_url(), &config(), slow);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);

        let servers: Vec<(String, String)> = names("kill", 10)
            .into_iter()
            .map(|name| {
                let uid = env.create_server(&name, fast(Fate::clean()), Env::spec());
                (name, uid)
            })
            .collect();
        // Mid-create: a create has landed and its answer is still on its way.
        wait_until("a create in flight", PATIENCE, || {
            servers.iter().any(|(name, uid)| {
                env.truth(uid).creates_accepted == 1
                    && env
                        .server_json(name)
                        .is_some_and(|s| s["metadata"]["annotations"][CREATE_ISSUED_ANNOTATION].is_string())
                    && env.server(name).is_some_and(|s| phase(&s) != "Running")
            })
        })
        .await;
        let killed = Instant::now();
        a.kill();
        let takeover = wait_until("replica-b to take over", PATIENCE, || b.leads()).await;
        let all: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
        wait_running(&env, &all).await;
        let converged = killed.elapsed();
        println!(
            "killed leader: replica-b led after {} ms; all Running {} ms after the kill",
            takeover.as_millis(),
            converged.as_millis()
        );

        let lease = test_lease("any");
        assert!(
            takeover <= lease.lease_duration + lease.retry_period + Duration::from_millis(250),
            "takeover took {takeover:?}: more than the lease duration and a retry"
        );
        env.idle(10).await;
        assert_killed_creates_counted_at_most_once(&env, &servers);
        assert!(!log.overlapped(), "two replicas acted at once");
        b.terminate().await;
    })
    .await
}

/// After a kill: one accepted create per Server still, but a create the
/// killed leader noted as issued and died before sending never lands, and
/// the new leader rightly counts it as an attempt once its grace is over
/// (DESIGN §7: a noted create that is not found is spent, failing closed).
fn assert_killed_creates_counted_at_most_once(env: &Env, servers: &[(String, String)]) {
    for (name, uid) in servers {
        let truth = env.truth(uid);
        assert_eq!(truth.creates_accepted, 1, "{name}: {truth:?}");
        let server = env.server(name).unwrap_or_else(|| panic!("{name} is gone"));
        let failures = status(&server).provider_create_failures;
        assert!(failures <= 1, "{name} counted {failures} failed attempts for one lost create");
        let retried = env.event_count(name, "ProviderCreateRetrying");
        assert_eq!(retried, u64::try_from(failures).unwrap_or(u64::MAX), "{name}: one retry per counted attempt");
    }
    env.assert_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_hands_over_within_one_retry_period() {
    within(async {
        let env = Env::new(CloudKind::Direct, 73).await;
        let mut a = Replica::start(&env, "replica-a", &env.api_url(), &config(), SLOW_CREATE);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start(&env, "replica-b", &env.api_url(), &config(), SLOW_CREATE);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);
        let servers: Vec<(String, String)> = names("term", 3)
            .into_iter()
            .map(|name| {
                let uid = env.create_server(&name, fast(Fate::clean()), Env::spec());
                (name, uid)
            })
            .collect();
        let all: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
        wait_running(&env, &all).await;
        assert!(!b.leads(), "the follower acted while the leader held the Lease");

        let stopping = Instant::now();
        a.terminate().await;
        let released = stopping.elapsed();
        let takeover = wait_until("replica-b to take over", PATIENCE, || b.leads()).await;
        println!(
            "stopped leader: exited in {} ms, replica-b led {} ms later",
            released.as_millis(),
            takeover.as_millis()
        );
        let retry = test_lease("any").retry_period;
        assert!(takeover <= retry + Duration::from_millis(100), "handover took {takeover:?} after the release");

        // The new leader carries on: a new Server is created, once.
        let uid = env.create_server("term-new", fast(Fate::clean()), Env::spec());
        wait_running(&env, &["term-new".to_owned()]).await;
        let mut every = servers;
        every.push(("term-new".into(), uid));
        assert_created_once(&env, &every);
        assert!(!log.overlapped(), "two replicas acted at once");
        b.terminate().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_stops_before_its_lease_expires() {
    within(async {
        let env = Env::new(CloudKind::Direct, 74).await;
        let proxy = CutProxy::start(env.api_addr()).await;
        let mut a = Replica::start(&env, "replica-a", &proxy.url(), &config(), SLOW_CREATE);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start(&env, "replica-b", &env.api_url(), &config(), SLOW_CREATE);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);
        let before: Vec<(String, String)> = names("before", 3)
            .into_iter()
            .map(|name| {
                let uid = env.create_server(&name, fast(Fate::clean()), Env::spec());
                (name, uid)
            })
            .collect();
        wait_running(&env, &before.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()).await;

        // The leader's API connection goes; its cloud connection stays.
        proxy.cut();
        let cut = Instant::now();
        let mut stopped = None;
        while !b.leads() {
            if stopped.is_none() && !a.leads() {
                stopped = Some(cut.elapsed());
            }
            assert!(cut.elapsed() < PATIENCE, "replica-b never took over");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let took_over = cut.elapsed();
        let stopped = stopped.unwrap_or_else(|| panic!("replica-a still acted when replica-b took over"));
        println!(
            "partition: replica-a stopped {} ms after the cut, replica-b led after {} ms",
            stopped.as_millis(),
            took_over.as_millis()
        );
        let lease = test_lease("any");
        assert!(stopped <= lease.renew_deadline, "replica-a acted past its renew deadline: {stopped:?}");

        // Work during the partition is the new leader's, and done once.
        let during: Vec<(String, String)> = names("during", 3)
            .into_iter()
            .map(|name| {
                let uid = env.create_server(&name, fast(Fate::clean()), Env::spec());
                (name, uid)
            })
            .collect();
        wait_running(&env, &during.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()).await;

        // Healed, the old leader finds the Lease taken and stays a follower.
        proxy.heal();
        env.idle(20).await;
        assert!(!a.leads() && b.leads(), "the healed replica took the Lease back");
        let mut every = before;
        every.extend(during);
        assert_created_once(&env, &every);
        assert!(!log.overlapped(), "two replicas acted at once");
        a.kill();
        b.terminate().await;
    })
    .await
}
