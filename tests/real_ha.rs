//! High availability on real Leases: two operator replicas, each on its own
//! runtime with its own client, elect a leader through kube-apiserver's
//! coordination.k8s.io Leases and share one cloud whose creates answer late.
//! The leader is killed mid-create, then a new leader is stopped as SIGTERM
//! stops it, then the next one is cut off from the API by a proxy: after
//! each, the other replica takes over, and no Server ever has two provider
//! servers or more than one accepted create. The failover times are printed.
//!
//! Needs the control plane of `.ci/build-control-plane` (skipped without it
//! outside CI).

use std::time::{Duration, Instant};

use server_core::model::CREATE_ISSUED_ANNOTATION;
use server_e2e::ha::{CutProxy, LeadershipLog, Replica, test_lease};
use server_e2e::real::{RealWorld, running, wait_api, wait_every};
use server_e2e::{Env, test_config, within};

/// Creates answer this long after they land: past several passes.
const SLOW_CREATE: Duration = Duration::from_millis(1500);
const PATIENCE: Duration = Duration::from_secs(60);

fn config() -> server_kube::ControllerConfig {
    server_kube::ControllerConfig { drain_timeout: Duration::from_secs(3), ..test_config() }
}

/// For a replica's fence: polled often, as it costs nothing.
async fn wait_until(what: &str, within: Duration, check: impl FnMut() -> bool) -> Duration {
    wait_every(Duration::from_millis(5), what, within, check).await
}

/// Creates `count` Servers; their names and uids.
fn create(world: &RealWorld, prefix: &str, count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| {
            let name = format!("{prefix}-{i:02}");
            let uid = world.create_server(&name, Env::spec());
            (name, uid)
        })
        .collect()
}

/// Waits until one of `servers` has a create noted as issued that has landed
/// in the cloud while its Server is not yet Running: a create in flight.
async fn wait_mid_create(world: &RealWorld, servers: &[(String, String)]) {
    wait_api("a create in flight", PATIENCE, || {
        servers.iter().any(|(name, uid)| {
            world.cloud.truth(uid).creates_accepted == 1
                && world
                    .server(name)
                    .is_some_and(|s| s["metadata"]["annotations"][CREATE_ISSUED_ANNOTATION].is_string() && !running(&s))
        })
    })
    .await;
}

async fn wait_all_running(world: &RealWorld, servers: &[(String, String)]) -> Duration {
    let started = Instant::now();
    for (name, _) in servers {
        wait_api(&format!("{name} Running"), PATIENCE, || world.server(name).is_some_and(|s| running(&s))).await;
    }
    started.elapsed()
}

/// Never two provider servers for one Server, and one accepted create each.
fn assert_created_once(world: &RealWorld, servers: &[(String, String)]) {
    for (name, uid) in servers {
        let truth = world.cloud.truth(uid);
        assert_eq!(truth.creates_accepted, 1, "{name}: {truth:?}");
        assert!(truth.live <= 1, "{name} has {} provider servers", truth.live);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_on_real_leases_and_no_server_is_created_twice() {
    within(async {
        let Some(world) = RealWorld::start(91) else { return };
        let api = world.plane.url.trim_start_matches("https://").parse().unwrap_or_else(|e| panic!("{e}"));
        let lease = test_lease("any");
        let direct = world.kube_config(None).await;

        // 1. A killed leader.
        let mut a = Replica::start_on(world.cloud.port(), "replica-a", direct.clone(), &config(), SLOW_CREATE);
        wait_until("replica-a to lead", PATIENCE, || a.leads()).await;
        let mut b = Replica::start_on(world.cloud.port(), "replica-b", direct.clone(), &config(), SLOW_CREATE);
        let log = LeadershipLog::start(vec![a.fence.clone(), b.fence.clone()]);
        let killed_batch = create(&world, "kill", 6);
        wait_mid_create(&world, &killed_batch).await;
        a.kill();
        let takeover = wait_until("replica-b to take over", PATIENCE, || b.leads()).await;
        let settled = wait_all_running(&world, &killed_batch).await;
        println!(
            "killed leader: replica-b led after {} ms; all Running {} ms later",
            takeover.as_millis(),
            settled.as_millis()
        );
        assert!(
            takeover <= lease.lease_duration + lease.retry_period + Duration::from_millis(500),
            "takeover took {takeover:?}: more than the lease duration and a retry"
        );
        assert!(!log.overlapped(), "two replicas acted at once");
        drop(log);

        // 2. A stopped leader hands over: its Lease is released.
        let proxy = CutProxy::start(api).await;
        let through_proxy = world.kube_config(Some(proxy.addr())).await;
        let mut c = Replica::start_on(world.cloud.port(), "replica-c", through_proxy, &config(), SLOW_CREATE);
        let log = LeadershipLog::start(vec![b.fence.clone(), c.fence.clone()]);
        let stopped = Instant::now();
        b.terminate().await;
        let handover = wait_until("replica-c to take over", PATIENCE, || c.leads()).await;
        println!("stopped leader: replica-c led {} ms after the stop began", stopped.elapsed().as_millis());
        assert!(handover <= lease.lease_duration, "a released Lease took {handover:?} to move");

        // 3. The leader cut off from the API mid-create stops acting before its
        // lease can expire for the next replica.
        let cut_batch = create(&world, "cut", 6);
        wait_mid_create(&world, &cut_batch).await;
        let mut d = Replica::start_on(world.cloud.port(), "replica-d", direct.clone(), &config(), SLOW_CREATE);
        let log_d = LeadershipLog::start(vec![c.fence.clone(), d.fence.clone()]);
        let cut = Instant::now();
        proxy.cut();
        let fenced = wait_until("replica-c to stop acting", PATIENCE, || !c.leads()).await;
        let takeover = wait_until("replica-d to take over", PATIENCE, || d.leads()).await;
        println!(
            "cut-off leader: replica-c stopped acting after {} ms, replica-d led {} ms after the cut",
            fenced.as_millis(),
            cut.elapsed().as_millis()
        );
        assert!(fenced < lease.lease_duration, "the cut-off leader acted for {fenced:?}, past its lease");
        let settled = wait_all_running(&world, &cut_batch).await;
        println!("after the cut: all Running {} ms after replica-d led ({takeover:?} to lead)", settled.as_millis());
        proxy.heal();
        tokio::time::sleep(lease.lease_duration).await;

        assert!(!log.overlapped() && !log_d.overlapped(), "two replicas acted at once");
        assert_created_once(&world, &killed_batch);
        assert_created_once(&world, &cut_batch);
        c.kill();
        d.terminate().await;
    })
    .await
}
