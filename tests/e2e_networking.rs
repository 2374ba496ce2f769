//! A present server's port and floating IP follow the spec on every pass
//! (DESIGN "The port and the floating IP follow the spec"), on both cloud
//! paths: a floating IP whose create failed once is made by a later pass, one
//! the spec no longer asks for is released, and the port's security groups
//! and allowed address pairs are set when the spec changes them. Every
//! scenario ends in `assert_invariants` (no leaked server, port or floating
//! IP).

use serde_json::json;
use server_e2e::cloud::Fate;
use server_e2e::openstack::{Fault, Op, Target};
use server_e2e::*;

cloud_scenarios!(the_public_ip_follows_the_spec_on_every_pass, the_ports_security_follows_the_spec,);

fn public(enabled: bool) -> serde_json::Value {
    let mut spec = Env::spec();
    spec["publicIPAllocation"] = json!({ "enabled": enabled });
    spec
}

/// A 503 on the first `POST /v2.0/floatingips` (OpenStack path): the Server
/// still gets its public IP, from a later pass. Turning `publicIPAllocation`
/// off releases it; on again, a new one is made. (Before: the floating IP was
/// made only inside the create, so one 503 left the Server Running without a
/// public IP for good, and turning it off released nothing.)
async fn the_public_ip_follows_the_spec_on_every_pass(kind: CloudKind) {
    let mut env = Env::new(kind, 71).await;
    if let Some(openstack) = env.openstack() {
        openstack.inject(Target::Op(Op::FloatingIpCreate), Fault::Status(503), 1);
    }
    let uid = env.create_server("public", fast(Fate::clean()), public(true));
    env.start();
    env.wait_server("public", "Running with its public IP", |s| {
        available_reason(s) == "Provisioned" && phase(s) == "Running" && status(s).public_ip.is_some()
    })
    .await;
    if let Some(openstack) = env.openstack() {
        let counters = openstack.counters();
        // The 503 is answered in place of the handler: one injected fault,
        // one floating IP made.
        assert_eq!((counters.injected_faults, counters.floating_ip_creates), (1, 1), "{counters:?}");
        assert_eq!(openstack.floating_ips().len(), 1, "{:?}", openstack.floating_ips());
        assert_eq!(counters.server_creates, 1, "{counters:?}");
    }
    assert_eq!(status(&env.server("public").unwrap_or_default()).provider_create_failures, 0);

    env.patch_spec("public", json!({ "publicIPAllocation": { "enabled": false } })).await;
    env.wait_server("public", "Provisioned without a public IP", |s| {
        available_reason(s) == "Provisioned" && status(s).public_ip.is_none()
    })
    .await;
    if let Some(openstack) = env.openstack() {
        assert!(openstack.floating_ips().is_empty(), "released: {:?}", openstack.floating_ips());
    }

    env.patch_spec("public", json!({ "publicIPAllocation": { "enabled": true } })).await;
    env.wait_server("public", "its public IP again", |s| {
        available_reason(s) == "Provisioned" && status(s).public_ip.is_some()
    })
    .await;
    if let Some(openstack) = env.openstack() {
        assert_eq!(openstack.floating_ips().len(), 1, "{:?}", openstack.floating_ips());
    }
    env.delete_server("public").await;
    env.wait("public is gone", || env.server("public").is_none()).await;
    env.assert_released(&uid);
    env.assert_invariants();
    env.stop().await;
}

/// A running Server's spec gains a security group and an allowed address
/// pair: the port is updated to carry them, with no new server. (Before: they
/// were applied only to the port a create made.)
async fn the_ports_security_follows_the_spec(kind: CloudKind) {
    let mut env = Env::new(kind, 72).await;
    let second = "5b1c7e20-0c4d-4f0e-9a55-7a1b2c3d4e5f";
    env.seed("securitygroups", second, json!({}));
    let uid = env.create_server("guarded", fast(Fate::clean()), Env::spec());
    env.start();
    env.wait_server("guarded", "Provisioned and running", |s| {
        available_reason(s) == "Provisioned" && phase(s) == "Running"
    })
    .await;
    let first = env.security_group_provider_id(SECURITY_GROUP);
    let (groups, pairs) = env.port_security(&uid).unwrap_or_default();
    assert_eq!((groups, pairs.len()), (vec![first.clone()], 0));

    let mut spec = Env::spec();
    spec["securityGroups"] = json!([{ "id": SECURITY_GROUP }, { "id": second }]);
    spec["networks"][0]["allowedAddressPairs"] = json!([{ "cidr": "192.168.0.250/32" }]);
    env.patch_spec("guarded", spec).await;
    let wanted = {
        let mut groups = vec![first, env.security_group_provider_id(second)];
        groups.sort();
        groups
    };
    env.wait("the port carries the spec's groups and pair", || {
        env.port_security(&uid).is_some_and(|(mut groups, pairs)| {
            groups.sort();
            groups == wanted && pairs == ["192.168.0.250/32"]
        })
    })
    .await;
    env.wait_server("guarded", "Provisioned again", |s| available_reason(s) == "Provisioned").await;
    assert_eq!(env.truth(&uid).create_calls, 1, "the server was not made again");
    env.delete_server("guarded").await;
    env.wait("guarded is gone", || env.server("guarded").is_none()).await;
    env.assert_invariants();
    env.stop().await;
}
