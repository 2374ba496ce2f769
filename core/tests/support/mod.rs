//! Builders shared by the core's integration tests.
#![allow(dead_code, unreachable_pub)]

use jiff::Timestamp;
use server_core::model::{
    Condition, ConditionReason, ConditionStatus, ConditionType, Consumed, Detail, IDENTITY_LABEL, ImageSpec,
    NetworkAttachment, REGION_LABEL, ResourceKind, SERVER_FINALIZER, SecurityGroupRef, Server, ServerSpec,
    reference_finalizer, set_condition,
};
use server_core::port::{FloatingIp, Networking, ProviderServer, ServerPort};
use server_core::reconcile::{Action, AttachmentsView, Decision, Facts, NetworkingView, ProviderView};

pub const CA_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ca@example";

pub fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap_or_default()
}

/// A valid Server named `web` consuming one network and one security group.
pub fn server() -> Server {
    let mut server = Server::default();
    server.meta.name = "web".into();
    server.meta.namespace = "org".into();
    server.meta.uid = "uid-web".into();
    server.meta.generation = 1;
    server.meta.labels.insert(REGION_LABEL.into(), "region-a".into());
    server.meta.labels.insert(IDENTITY_LABEL.into(), "identity-a".into());
    server.spec = ServerSpec {
        flavor_id: "flavor".into(),
        image: ImageSpec { id: "image".into() },
        networks: vec![NetworkAttachment { id: "net-a".into(), allowed_address_pairs: vec![] }],
        security_groups: vec![SecurityGroupRef { id: "sg-a".into() }],
        ..Default::default()
    };
    server
}

/// Facts with the resources `server()` names, a ready identity, provider absent.
pub fn facts() -> Facts {
    let mut conditions = vec![];
    set_condition(
        &mut conditions,
        ConditionType::Available,
        ConditionStatus::True,
        ConditionReason::Provisioned,
        "Provisioned",
        at(0),
    );
    // The provider holds nothing of the Server besides its server (a
    // deleting Server's ports and floating IPs are confirmed gone).
    // A present server's port follows `server()`'s spec (one group, no
    // public IP).
    Facts {
        attachments: AttachmentsView::Known(Vec::new()),
        networking: settled_networking(&server()),
        ..Facts::default()
    }
    .with(ResourceKind::Identity, Consumed::new("identity-a").with(Detail::Identity { conditions, deleting: false }))
    .with(ResourceKind::Network, Consumed::new("net-a"))
    .with(ResourceKind::Network, Consumed::new("net-old"))
    .with(ResourceKind::SecurityGroup, Consumed::new("sg-a"))
    .with(
        ResourceKind::SshCertificateAuthority,
        Consumed::new("ca-a").with(Detail::SshCertificateAuthority { public_key: CA_KEY.into() }),
    )
}

/// The port of a present server as `server`'s spec asks for it: its
/// security groups (each spec ID resolving to itself), its address pairs, and
/// a floating IP exactly when the spec asks for a public IP.
pub fn settled_networking(server: &Server) -> NetworkingView {
    let groups: Vec<String> = server.spec.security_groups.iter().map(|g| g.id.clone()).collect();
    let public = server.spec.public_ip_allocation.as_ref().is_some_and(|p| p.enabled);
    NetworkingView::Known(Networking {
        port: Some(ServerPort {
            id: "port-1".into(),
            mac_address: Some("fa:16:3e:00:00:01".into()),
            security_groups: groups.clone(),
            allowed_address_pairs: server
                .spec
                .networks
                .first()
                .map(|n| n.allowed_address_pairs.clone())
                .unwrap_or_default(),
            floating_ip: public.then(|| FloatingIp { id: "fip-1".into(), address: Some("203.0.113.1".into()) }),
            bound_to: Some("vm-1".into()),
        }),
        wanted_security_groups: groups,
        source: Default::default(),
    })
}

/// The Identity's conditions in `facts`, to change them.
pub fn identity_conditions(facts: &mut Facts) -> &mut Vec<Condition> {
    match facts.consumed.get_mut(&ResourceKind::Identity).and_then(|i| i.first_mut()).map(|i| &mut i.detail) {
        Some(Detail::Identity { conditions, .. }) => conditions,
        _ => panic!("the facts hold an Identity"),
    }
}

/// Facts as they are once the server holds all its references.
pub fn referenced_facts(server: &Server) -> Facts {
    let mut facts = facts();
    let finalizer = reference_finalizer(&server.meta.name);
    for kind in [ResourceKind::Network, ResourceKind::SecurityGroup, ResourceKind::Identity] {
        let named: Vec<String> = kind.named(server).map(str::to_owned).collect();
        for resource in facts.consumed.get_mut(&kind).into_iter().flatten() {
            if named.contains(&resource.name) {
                resource.finalizers.push(finalizer.clone());
            }
        }
    }
    facts.networking = settled_networking(server);
    facts
}

/// A server that has its finalizer (past the first pass).
pub fn adopted() -> Server {
    let mut s = server();
    s.meta.finalizers.push(SERVER_FINALIZER.into());
    s
}

pub fn set_healthy(server: &mut Server, status: ConditionStatus, reason: ConditionReason) {
    set_condition(&mut server.status.conditions, ConditionType::Healthy, status, reason, "from monitor", at(1));
}

/// A server whose provider create errored before launch.
pub fn create_failed(failures: i32) -> Server {
    let mut s = adopted();
    s.status.provider_create_failures = failures;
    set_healthy(&mut s, ConditionStatus::False, ConditionReason::Errored);
    s
}

pub fn present() -> ProviderView {
    ProviderView::Present(ProviderServer { id: "vm-1".into(), server_uid: "uid-web".into(), ..Default::default() })
}

/// What persisting a decision does to the Server (the executor's effects on it).
pub fn persist(server: &mut Server, decision: &Decision) {
    server.status = decision.status.clone();
    for action in &decision.actions {
        server_core::pass::fold_landed(server, action, &decision.status);
    }
}

/// What `action`'s write does to the Server's metadata (finalizer,
/// annotations), as the pass folds it.
pub fn apply_meta(server: &mut Server, action: &Action) {
    server_core::pass::fold_landed_meta(&mut server.meta, action);
}

pub fn available(decision: &Decision) -> Condition {
    decision.status.condition(ConditionType::Available).cloned().unwrap_or_else(|| panic!("no Available condition"))
}

pub fn creates(decision: &Decision) -> usize {
    decision.actions.iter().filter(|a| matches!(a, Action::CreateProviderServer(_))).count()
}

pub fn deletes(decision: &Decision) -> usize {
    decision.actions.iter().filter(|a| matches!(a, Action::DeleteProviderServer(_))).count()
}

pub fn event_reasons(decision: &Decision) -> Vec<&'static str> {
    decision.events().map(|e| e.reason.as_str()).collect()
}
pub mod strategies;

/// Runs a property over `cases()` random inputs (`PROPTEST_CASES`, 1,000 by
/// default); the failure and its minimal input as text.
pub fn run<S: proptest::strategy::Strategy>(
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), proptest::test_runner::TestCaseError>,
) -> Result<(), String>
where
    S::Value: std::fmt::Debug,
{
    use proptest::test_runner::{Config, TestError, TestRunner};
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1_000);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    match TestRunner::new(config).run(&strategy, property) {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, input)) => Err(format!("{reason}; minimal input: {input:?}")),
        Err(TestError::Abort(reason)) => Err(format!("aborted: {reason}")),
    }
}

pub fn must_hold(result: Result<(), String>) {
    if let Err(failure) = result {
        panic!("property violated: {failure}");
    }
}

/// A broken rule must be caught. A rare fault may not come up in one run of
/// random cases, so up to twenty runs are tried, stopping at the first that
/// catches it: the narrowest broken rules (a list from the create note's
/// own second) are missed by a whole run now and then, and twenty misses in
/// a row mean it is not caught.
pub fn must_catch(property: impl Fn() -> Result<(), String>) {
    const RUNS: usize = 20;
    let caught = (0..RUNS).any(|_| property().is_err());
    assert!(caught, "the property did not catch the broken rule in {RUNS} runs");
}
