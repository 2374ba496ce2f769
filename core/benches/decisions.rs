//! Cost of one reconcile pass and of the predicate, on the paths that matter.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use server_core::model::{
    ConditionReason, ConditionStatus, ConditionType, Consumed, Detail, IDENTITY_LABEL, ImageSpec, NetworkAttachment,
    REGION_LABEL, ResourceKind, SERVER_FINALIZER, SecurityGroupRef, Server, ServerSpec, reference_finalizer,
    set_condition,
};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::{Facts, Options, ProviderView};
use server_core::{provider_create_failure, reconcile};

fn server() -> Server {
    let mut server = Server::default();
    server.meta.name = "web".into();
    server.meta.namespace = "org".into();
    server.meta.uid = "uid".into();
    server.meta.generation = 1;
    server.meta.finalizers.push(SERVER_FINALIZER.into());
    server.meta.labels.insert(REGION_LABEL.into(), "r".into());
    server.meta.labels.insert(IDENTITY_LABEL.into(), "i".into());
    server.spec = ServerSpec {
        flavor_id: "f".into(),
        image: ImageSpec { id: "img".into() },
        networks: vec![NetworkAttachment { id: "net".into(), allowed_address_pairs: vec![] }],
        security_groups: vec![SecurityGroupRef { id: "sg".into() }],
        ..Default::default()
    };
    server
}

fn facts(server: &Server, provider: ProviderView) -> Facts {
    let finalizer = reference_finalizer(&server.meta.name);
    let referenced = |name: &str| Consumed { finalizers: vec![finalizer.clone()], ..Consumed::new(name) };
    let mut conditions = vec![];
    let t = Timestamp::UNIX_EPOCH;
    set_condition(
        &mut conditions,
        ConditionType::Available,
        ConditionStatus::True,
        ConditionReason::Provisioned,
        "",
        t,
    );
    Facts { provider, ..Facts::default() }
        .with(ResourceKind::Identity, referenced("i").with(Detail::Identity { conditions, deleting: false }))
        .with(ResourceKind::Network, referenced("net"))
        .with(ResourceKind::SecurityGroup, referenced("sg"))
}

fn benches(c: &mut Criterion) {
    let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let options = Options::default();
    let running = ProviderView::Present(ProviderServer {
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        ..Default::default()
    });

    // The steady state: a converged server re-reconciled on resync.
    let mut steady = server();
    let first = reconcile(&steady, &facts(&steady, running.clone()), &options, now);
    steady.status = first.status;
    let steady_facts = facts(&steady, running.clone());
    c.bench_function("reconcile/steady_state", |b| {
        b.iter(|| reconcile(black_box(&steady), black_box(&steady_facts), &options, now))
    });

    let fresh = server();
    let fresh_facts = facts(&fresh, ProviderView::Absent);
    c.bench_function("reconcile/create", |b| {
        b.iter(|| reconcile(black_box(&fresh), black_box(&fresh_facts), &options, now))
    });

    let mut failed = server();
    set_condition(
        &mut failed.status.conditions,
        ConditionType::Healthy,
        ConditionStatus::False,
        ConditionReason::Errored,
        "",
        now,
    );
    let failed_facts = facts(&failed, running);
    c.bench_function("reconcile/retry_start", |b| {
        b.iter(|| reconcile(black_box(&failed), black_box(&failed_facts), &options, now))
    });

    c.bench_function("provider_create_failure", |b| b.iter(|| provider_create_failure(black_box(&failed))));
}

criterion_group!(decisions, benches);
criterion_main!(decisions);
