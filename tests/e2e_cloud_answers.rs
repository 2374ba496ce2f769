//! What the cloud answers is named for what it is (DESIGN "What a create's
//! answer proves", "Parks"): a rate limit is waited out as long as the
//! provider asks (a 413 `overLimit` is no refusal), a policy's 403 parks as
//! forbidden with what a person must do, and a floating IP that cannot be
//! made after the server exists never says the create was refused. The
//! direct path has no HTTP answers to give; there each scenario is the
//! plain create it checks the end of.

use std::time::{Duration, Instant};

use server_e2e::cloud::Fate;
use server_e2e::openstack::{Fault, Op, Target};
use server_e2e::*;

cloud_scenarios!(
    a_rate_limit_is_waited_out_as_long_as_the_provider_asks,
    a_policy_refusal_parks_as_forbidden,
    a_floating_ip_without_a_router_is_no_refused_create,
);

/// A 429 asking for 2 s on `POST /servers`, then a 413 `overLimit` asking
/// for 1 s on the port: the Server comes up with no failure counted and no
/// park, and not before the 3 s the provider asked for. (Before: the 413
/// parked the Server as refused, and the 429 was retried after the fixed
/// yield, 100 ms here.)
async fn a_rate_limit_is_waited_out_as_long_as_the_provider_asks(kind: CloudKind) {
    let mut env = Env::new(kind, 81).await;
    let asked = match env.openstack() {
        Some(openstack) => {
            openstack.inject(Target::Op(Op::ServerCreate), Fault::RateLimit { status: 429, retry_after: 2 }, 1);
            openstack.inject(Target::Op(Op::PortCreate), Fault::RateLimit { status: 413, retry_after: 1 }, 1);
            Duration::from_secs(3)
        }
        None => Duration::ZERO,
    };
    let started = Instant::now();
    env.create_server("limited", fast(Fate::clean()), Env::spec());
    env.start();
    let server = env
        .wait_server("limited", "Provisioned and running", |s| {
            available_reason(s) == "Provisioned" && phase(s) == "Running"
        })
        .await;
    let took = started.elapsed();
    assert!(took >= asked, "came up after {took:?}, before the {asked:?} the provider asked for");
    assert_eq!(status(&server).provider_create_failures, 0);
    assert_eq!(env.event_count("limited", "ProviderCreateRefused"), 0, "{:?}", env.events("limited"));
    if let Some(openstack) = env.openstack() {
        assert_eq!(openstack.counters().injected_faults, 2);
        assert_eq!(openstack.counters().server_creates, 1);
    }
    env.delete_server("limited").await;
    env.wait("limited is gone", || env.server("limited").is_none()).await;
    env.assert_invariants();
    env.stop().await;
}

/// Neutron's 403 `PolicyNotAuthorized` on the port: the Server parks as
/// forbidden (no create sent), and its message says no spec change fixes
/// a policy and how to retry. (Before: "change the spec to try again".)
async fn a_policy_refusal_parks_as_forbidden(kind: CloudKind) {
    let mut env = Env::new(kind, 82).await;
    let Some(openstack) = env.openstack() else {
        env.create_server("policed", fast(Fate::clean()), Env::spec());
        env.start();
        env.wait_server("policed", "Provisioned", |s| available_reason(s) == "Provisioned").await;
        env.stop().await;
        return;
    };
    openstack.inject(Target::Op(Op::PortCreate), Fault::POLICY, 1);
    env.create_server("policed", fast(Fate::clean()), Env::spec());
    env.start();
    let server = env.wait_server("policed", "parked as forbidden", |s| available_reason(s) == "Errored").await;
    assert_eq!(env.park(&server), Some(server_core::ParkKind::Forbidden));
    let message = available_message(&server);
    assert!(message.contains("no spec change can fix a policy"), "{message}");
    assert!(!message.contains("change the spec to try again"), "{message}");
    assert_eq!(env.openstack_counters().map(|c| c.server_creates), Some(0));
    env.delete_server("policed").await;
    env.wait("policed is gone", || env.server("policed").is_none()).await;
    env.assert_invariants();
    env.stop().await;
}

/// The floating IP of a running server meets Neutron's 404
/// `ExternalGatewayForFloatingIPNotFound` twice: Available says the server
/// exists and its public IP could not be allocated (never "create refused"),
/// and once the router is there the public IP comes.
async fn a_floating_ip_without_a_router_is_no_refused_create(kind: CloudKind) {
    let mut env = Env::new(kind, 83).await;
    if let Some(openstack) = env.openstack() {
        openstack.inject(Target::Op(Op::FloatingIpCreate), Fault::NO_EXTERNAL_GATEWAY, 2);
    }
    let mut spec = Env::spec();
    spec["publicIPAllocation"] = serde_json::json!({ "enabled": true });
    env.create_server("public", fast(Fate::clean()), spec);
    env.start();
    if env.openstack().is_some() {
        let server = env
            .wait_server("public", "says its public IP could not be allocated", |s| {
                available_message(s).contains("its public IP could not be allocated")
            })
            .await;
        let message = available_message(&server);
        assert!(!message.contains("refused to create"), "{message}");
        assert_eq!(env.park(&server), None);
    }
    env.wait_server("public", "Running with its public IP", |s| {
        available_reason(s) == "Provisioned" && status(s).public_ip.is_some()
    })
    .await;
    assert_eq!(env.event_count("public", "ProviderCreateRefused"), 0);
    env.delete_server("public").await;
    env.wait("public is gone", || env.server("public").is_none()).await;
    env.assert_invariants();
    env.stop().await;
}
