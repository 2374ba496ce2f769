//! Walks one Server through a failed create, a retry and a launch, printing
//! each decision. Run: `cargo run -p server-core --example retry_walkthrough`.

use jiff::Timestamp;
use server_core::model::{
    ConditionReason, ConditionStatus, ConditionType, Consumed, Detail, IDENTITY_LABEL, ImageSpec, NetworkAttachment,
    REGION_LABEL, ResourceKind, Server, ServerSpec, ServerStatus, reference_finalizer, set_condition,
};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::{Action, Decision, Facts, Options, ProviderView};
use server_core::{observe, reconcile};

/// The walkthrough's cloud: at most one provider server, scripted by hand.
struct Walkthrough {
    server: Server,
    vm: Option<ProviderServer>,
    facts: Facts,
    clock: i64,
    pass: u32,
}

impl Walkthrough {
    fn now(&mut self) -> Timestamp {
        self.clock += 10;
        Timestamp::from_second(1_700_000_000 + self.clock).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn reconcile(&mut self) {
        self.pass += 1;
        let now = self.now();
        self.facts.provider = self.vm.clone().map_or(ProviderView::Absent, ProviderView::Present);
        let decision = reconcile(&self.server, &self.facts, &Options::default(), now);
        print_decision(self.pass, &decision);
        self.execute(&decision);
    }

    fn execute(&mut self, decision: &Decision) {
        let finalizer = reference_finalizer(&self.server.meta.name);
        for action in &decision.actions {
            // The Server's own writes (finalizer, annotations, status).
            server_core::pass::fold_landed(&mut self.server, action, &decision.status);
            match action {
                Action::AddReference(r) => {
                    if let Some(consumed) = self.facts.find_mut(r.kind, &r.name) {
                        consumed.finalizers.push(finalizer.clone());
                    }
                }
                Action::CreateProviderServer(request) => {
                    self.vm = Some(ProviderServer {
                        id: format!("vm-{}", self.pass),
                        server_uid: request.server.uid.clone(),
                        status: ProviderStatus::Build,
                        ..Default::default()
                    });
                }
                Action::DeleteProviderServer(_) => self.vm = None,
                _ => {}
            }
        }
    }

    fn provider_reports(&mut self, status: ProviderStatus, power_state: PowerState, launched: bool) {
        let now = self.now();
        if let Some(vm) = &mut self.vm {
            vm.status = status;
            vm.power_state = power_state;
            vm.launched_at = launched.then_some(now);
            vm.mac_address = Some("fa:16:3e:12:34:56".into());
        }
        let observed = observe(&self.server.status, self.vm.as_ref(), now);
        println!(
            "  monitor: provider says {:?}; status now {}",
            self.vm.as_ref().map(|v| &v.status),
            summary(&observed)
        );
        self.server.status = observed;
    }
}

fn print_decision(pass: u32, decision: &Decision) {
    println!("pass {pass}: outcome {:?}", decision.outcome);
    for action in &decision.actions {
        let line = match action {
            Action::WriteStatus(patch) => format!("WriteStatus {patch}"),
            Action::CreateProviderServer(request) => format!("CreateProviderServer {}", request.name),
            Action::Emit(event) => format!("Emit {:?} {}: {}", event.type_, event.reason.as_str(), event.note),
            other => format!("{other:?}"),
        };
        println!("  - {line}");
    }
    println!("  status: {}", summary(&decision.status));
}

fn summary(status: &ServerStatus) -> String {
    let condition =
        |t| status.condition(t).map_or_else(|| "-".to_string(), |c| format!("{:?}/{:?}", c.status, c.reason));
    format!(
        "phase={:?} Available={} Healthy={} failures={} retrying={} provisionedAt={:?}",
        status.phase,
        condition(ConditionType::Available),
        condition(ConditionType::Healthy),
        status.provider_create_failures,
        status.provider_create_retrying,
        status.provisioned_at,
    )
}

fn main() {
    let mut server = Server::default();
    server.meta.name = "web-1".into();
    server.meta.namespace = "org-a".into();
    server.meta.uid = "0b5c6f7e".into();
    server.meta.generation = 1;
    server.meta.labels.insert(REGION_LABEL.into(), "region-a".into());
    server.meta.labels.insert(IDENTITY_LABEL.into(), "identity-a".into());
    server.spec = ServerSpec {
        flavor_id: "flavor-small".into(),
        image: ImageSpec { id: "ubuntu-24.04".into() },
        networks: vec![NetworkAttachment { id: "net-a".into(), allowed_address_pairs: vec![] }],
        ..Default::default()
    };
    let mut conditions = vec![];
    set_condition(
        &mut conditions,
        ConditionType::Available,
        ConditionStatus::True,
        ConditionReason::Provisioned,
        "Provisioned",
        Timestamp::UNIX_EPOCH,
    );
    let facts = Facts::default()
        .with(
            ResourceKind::Identity,
            Consumed::new("identity-a").with(Detail::Identity { conditions, deleting: false }),
        )
        .with(ResourceKind::Network, Consumed::new("net-a"));
    let mut walk = Walkthrough { server, vm: None, facts, clock: 0, pass: 0 };

    println!("== a new Server: finalizer, references, create");
    walk.reconcile();
    println!("== the provider create lands in ERROR before launch");
    walk.provider_reports(ProviderStatus::Error, PowerState::NoState, false);
    println!("== the rising ProviderCreateFailure edge wakes the reconciler: count, delete");
    walk.reconcile();
    println!("== the failed server is gone: retry armed");
    walk.reconcile();
    println!("== second attempt");
    walk.reconcile();
    println!("== the provider boots it: provisionedAt latches");
    walk.provider_reports(ProviderStatus::Active, PowerState::Running, true);
    walk.reconcile();
    println!("== later it errors after launch: it holds data, so it is never recreated");
    walk.provider_reports(ProviderStatus::Error, PowerState::Running, true);
    walk.reconcile();
}
