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
use server_e2e::ha::{CutProxy, LeadershipLog, MidCallBlock, Replica, test_lease};
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

/// Moves the lead from `from` to `to`: `to`'s API connection healed,
/// `from`'s cut, and `to` leading (a new term of `to`).
async fn hand_over(from: (&Replica, &CutProxy), to: (&Replica, &CutProxy)) {
    to.1.heal();
    from.1.cut();
    wait_until(&format!("{} to lead", to.0.name), PATIENCE, || to.0.leads() && !from.0.leads()).await;
}

fn spec_on(network: &str) -> serde_json::Value {
    let mut spec = Env::spec();
    spec["networks"] = serde_json::json!([{ "id": network }]);
    spec
}

/// Issue 25 item 2: the reference writer's memory of a Network's
/// finalizers is its term's. `s`: term 1 (A) moves it from N to N2 (A
/// removes its reference from N), term 2 (B) moves it back (B adds it),
/// term 3 (A) deletes it: A must remove the reference from N although its
/// memory of term 1 says N has none. `m`, the mirror: term 1 (A) adds its
/// reference to N3, term 2 (B) moves it to N4, term 3 (A) moves it back:
/// A must add it although its memory says N3 has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_term_trusts_the_reference_writers_memory_of_an_earlier_one() {
    within(async {
        use server_core::model::reference_finalizer;
        let env = Env::new(CloudKind::Direct, 75).await;
        let (n, n2, n3, n4) = (
            NETWORK,
            "3a1c5e7f-0b2d-4f6a-8c9e-1d3f5a7b9c20",
            "4b2d6f8a-1c3e-4a7b-9d0f-2e4a6b8c0d31",
            "5c3e7a9b-2d4f-4b8c-8e1a-3f5b7c9d1e42",
        );
        for network in [n2, n3, n4] {
            env.seed("networks", network, serde_json::json!({"prefix": "192.168.7.0/24"}));
        }
        let (pa, pb) = (CutProxy::start(env.api_addr()).await, CutProxy::start(env.api_addr()).await);
        let mut a = Replica::start(&env, "replica-a", &pa.url(), &config(), Duration::ZERO);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start(&env, "replica-b", &pb.url(), &config(), Duration::ZERO);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);
        let has =
            |network: &str, server: &str| env.finalizers("networks", network).contains(&reference_finalizer(server));

        // Term 1, A.
        let s = env.create_server("s", fast(Fate::clean()), spec_on(n));
        let m = env.create_server("m", fast(Fate::clean()), spec_on(n3));
        wait_running(&env, &["s".to_owned(), "m".to_owned()]).await;
        env.patch_spec("s", spec_on(n2)).await;
        env.wait("A to move s's reference from N to N2", || has(n2, "s") && !has(n, "s")).await;
        assert!(has(n3, "m"));

        // Term 2, B.
        hand_over((&a, &pa), (&b, &pb)).await;
        env.patch_spec("s", spec_on(n)).await;
        env.patch_spec("m", spec_on(n4)).await;
        env.wait("B to move s's reference back to N", || has(n, "s") && !has(n2, "s")).await;
        env.wait("B to move m's reference to N4", || has(n4, "m") && !has(n3, "m")).await;

        // Term 3, A again.
        hand_over((&b, &pb), (&a, &pa)).await;
        env.idle(5).await;
        env.delete_server("s").await;
        env.wait("s to be gone", || env.server("s").is_none()).await;
        assert!(!has(n, "s"), "N keeps the reference of a deleted Server: it can never be deleted");
        env.patch_spec("m", spec_on(n3)).await;
        env.wait("A to move m's reference back to N3", || has(n3, "m") && !has(n4, "m")).await;
        assert_eq!((env.truth(&s).creates_accepted, env.truth(&m).creates_accepted), (1, 1));
        assert!(!log.overlapped(), "two replicas acted at once");
        env.assert_invariants();
        a.terminate().await;
        b.kill();
    })
    .await
}

/// Issue 25 item 3: the fence is checked before each request, not once per
/// cloud call. A's create of `t` and its delete of `d`'s server are held
/// midway (a slow Neutron, a slow Nova) when A is cut off from the API;
/// once A's fence has closed they go on, and must send neither the
/// `POST /servers` nor the `DELETE` (B may lead by then, and may have made
/// what A would delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_mid_call_sends_nothing_once_its_fence_closed() {
    within(async {
        let env = Env::new(CloudKind::Direct, 76).await;
        let pa = CutProxy::start(env.api_addr()).await;
        let port = MidCallBlock::new(env.cloud.port());
        let (armed, blocked, sent) = (port.armed.clone(), port.blocked.clone(), port.sent.clone());
        let url = pa.url().parse().unwrap_or_else(|e| panic!("bad url: {e}"));
        let port = std::sync::Arc::new(port);
        let mut a = Replica::start_on(port.clone(), "replica-a", kube::Config::new(url), &config(), Duration::ZERO);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start(&env, "replica-b", &env.api_url(), &config(), Duration::ZERO);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);
        let d = env.create_server("d", fast(Fate::clean()), Env::spec());
        wait_running(&env, &["d".to_owned()]).await;

        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let t = env.create_server("t", fast(Fate::clean()), Env::spec());
        env.delete_server("d").await;
        let both = || blocked.lock().map(|b| b.len() >= 2).unwrap_or(false);
        wait_until("A's create and delete to be held midway", PATIENCE, both).await;
        let before = sent.lock().map(|s| s.len()).unwrap_or_default();
        pa.cut();
        wait_until("A's fence to close", PATIENCE, || !a.leads()).await;
        port.unblock();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after: Vec<&str> = sent.lock().map(|s| s[before..].to_vec()).unwrap_or_default();
        assert_eq!(after, Vec::<&str>::new(), "the old leader sent requests after its fence closed");
        assert_eq!(env.truth(&t).creates_accepted, 0, "t's create is B's to make, after its grace");
        assert_eq!(env.truth(&d).creates_accepted, 1);
        assert!(!log.overlapped(), "two replicas acted at once");
        a.kill();
        b.terminate().await;
    })
    .await
}
