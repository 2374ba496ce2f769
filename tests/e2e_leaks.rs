//! Nothing a Server held at the provider outlives it (DESIGN "Every
//! provider resource is released"): its server, its port and its floating
//! IP, against a Nova that deletes asynchronously and keeps the ports the
//! caller made; and only a sent server create is a create attempt (DESIGN
//! "Only a sent create is an attempt"). Every scenario ends in
//! `assert_invariants`, which counts any cloud resource no Server owns as a
//! violation.

use std::time::Duration;

use serde_json::json;
use server_e2e::cloud::Fate;
use server_e2e::openstack::{Fault, Op, Target};
use server_e2e::*;

cloud_scenarios!(
    deleted_servers_leave_no_server_port_or_floating_ip,
    blips_before_the_server_create_are_not_create_attempts,
);

fn public_spec() -> serde_json::Value {
    let mut spec = Env::spec();
    spec["publicIPAllocation"] = json!({ "enabled": true });
    spec
}

/// Four Servers, two with a public IP, one whose server takes a second to
/// delete: each is deleted once running, and each deletion ends only once its
/// server, port and floating IP are gone. (Before: the port and floating IP
/// were released only when Nova said 404 inside the delete call itself, so
/// against an asynchronous Nova every one of them leaked.)
async fn deleted_servers_leave_no_server_port_or_floating_ip(kind: CloudKind) {
    let mut env = Env::new(kind, 61).await;
    let servers = [
        ("plain-a", Env::spec(), fast(Fate::clean())),
        ("plain-b", Env::spec(), fast(Fate::clean()).with_delete_time(Duration::from_secs(1))),
        ("public-a", public_spec(), fast(Fate::clean())),
        ("public-b", public_spec(), fast(Fate::clean()).with_delete_time(Duration::from_secs(1))),
    ];
    let uids: Vec<String> =
        servers.iter().map(|(name, spec, fate)| env.create_server(name, fate.clone(), spec.clone())).collect();
    env.start();
    for (name, spec, _) in &servers {
        let public = spec.get("publicIPAllocation").is_some();
        env.wait_server(name, "Provisioned and running (with its public IP)", |s| {
            available_reason(s) == "Provisioned" && phase(s) == "Running" && (!public || status(s).public_ip.is_some())
        })
        .await;
    }
    if let Some(openstack) = env.openstack() {
        assert_eq!((openstack.ports().len(), openstack.floating_ips().len()), (4, 2));
    }
    for (name, _, _) in &servers {
        env.delete_server(name).await;
    }
    for ((name, _, _), uid) in servers.iter().zip(&uids) {
        env.wait(&format!("{name} is gone"), || env.server(name).is_none()).await;
        env.assert_released(uid);
    }
    if let Some(openstack) = env.openstack() {
        assert!(openstack.ports().is_empty(), "{:?}", openstack.ports());
        assert!(openstack.floating_ips().is_empty(), "{:?}", openstack.floating_ips());
        let counters = openstack.counters();
        assert_eq!((counters.port_deletes, counters.floating_ip_deletes), (4, 2), "{counters:?}");
        assert_eq!(counters.ports_deleted_while_attached, 0, "{counters:?}");
    }
    env.assert_invariants();
    env.stop().await;
}

/// Blips in every step before `POST /servers` (the security-group and
/// network lookups, the port) on the OpenStack path: each is that step's
/// failure, retried on the next pass. The Server comes up well inside one
/// create grace (10 cloud timeouts, 20 s here), with one server create sent,
/// no attempt counted and no event about a failed or lost create. (Before:
/// each blip was a create of unknown fate, waited out for the grace and then
/// counted, and three of them parked the Server at the cap with no server
/// create ever sent.) The direct path has no step before its create; there the
/// scenario is the plain create it always was.
async fn blips_before_the_server_create_are_not_create_attempts(kind: CloudKind) {
    let mut env = Env::new(kind, 62).await;
    if let Some(openstack) = env.openstack() {
        openstack.inject(Target::Op(Op::SecurityGroupList), Fault::Status(503), 1);
        openstack.inject(Target::Op(Op::NetworkList), Fault::Status(502), 1);
        openstack.inject(Target::Op(Op::PortCreate), Fault::Status(503), 1);
        openstack.inject(Target::Op(Op::PortList), Fault::Status(500), 1);
    }
    let started = std::time::Instant::now();
    let uid = env.create_server("blips", fast(Fate::clean()), Env::spec());
    env.start();
    let server = env
        .wait_server("blips", "Provisioned and running", |s| {
            available_reason(s) == "Provisioned" && phase(s) == "Running"
        })
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}: a blip was waited out as a create of unknown fate");
    assert_eq!(status(&server).provider_create_failures, 0);
    for reason in
        ["ProviderCreateRetrying", "ProviderCreateRetryReady", "ProviderCreateFailed", "ProviderCreateRefused"]
    {
        assert_eq!(env.event_count("blips", reason), 0, "{reason}: {:?}", env.events("blips"));
    }
    assert_eq!(env.truth(&uid).create_calls, 1);
    if let Some(openstack) = env.openstack() {
        let counters = openstack.counters();
        assert_eq!(counters.server_creates, 1, "{counters:?}");
        assert_eq!(counters.injected_faults, 4, "every step blipped once: {counters:?}");
    }
    env.delete_server("blips").await;
    env.wait("blips is gone", || env.server("blips").is_none()).await;
    env.assert_invariants();
    env.stop().await;
}
