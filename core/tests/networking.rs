//! A present server's port and floating IP follow the spec on every pass
//! (DESIGN "The port and the floating IP follow the spec"). Each property
//! runs against server-core's rules (it must hold) and against a
//! deliberately broken rule (it must catch it).
#![allow(clippy::unwrap_used)]

mod support;

use jiff::Timestamp;
use proptest::prelude::*;
use server_core::model::{
    AllowedAddressPair, Consumed, PublicIpAllocation, ResourceKind, SecurityGroupRef, Server, reference_finalizer,
};
use server_core::port::{
    AttachedResource, FloatingIp, Networking, PowerState, ProviderServer, ProviderStatus, ServerPort,
};
use server_core::reconcile::{Action, Decision, Facts, NetworkingView, Options, Outcome, ProviderView, Wait};
use server_core::{reads_networking, reconcile};
use support::*;

type Reconcile = fn(&Server, &Facts, &Options, Timestamp) -> Decision;

/// One pass's luck, and what the user changed before it.
#[derive(Clone, Copy, Debug)]
struct Step {
    /// Turn `publicIPAllocation` to this before the pass.
    public_ip: Option<bool>,
    /// Ask for security group `sg-b` too (or not) before the pass.
    second_group: Option<bool>,
    read_fails: bool,
    /// The floating IP create fails (503 on `POST /v2.0/floatingips`).
    ensure_fails: bool,
    release_fails: bool,
    update_fails: bool,
}

fn arb_step() -> impl Strategy<Value = Step> {
    (
        prop::option::weighted(0.3, any::<bool>()),
        prop::option::weighted(0.2, any::<bool>()),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(public_ip, second_group, read_fails, ensure_fails, release_fails, update_fails)| Step {
            public_ip,
            second_group,
            read_fails,
            ensure_fails,
            release_fails,
            update_fails,
        })
}

const CALM: Step = Step {
    public_ip: None,
    second_group: None,
    read_fails: false,
    ensure_fails: false,
    release_fails: false,
    update_fails: false,
};

/// A running server's port as Neutron keeps it: its groups, pairs and the
/// floating IPs on it (more than one would be a leak).
#[derive(Debug)]
struct Port {
    groups: Vec<String>,
    pairs: Vec<AllowedAddressPair>,
    floating_ips: Vec<String>,
    made: u32,
}

impl Port {
    fn networking(&self, server: &Server) -> Networking {
        Networking {
            port: Some(ServerPort {
                id: "port-1".into(),
                mac_address: Some("fa:16:3e:00:00:01".into()),
                security_groups: self.groups.clone(),
                allowed_address_pairs: self.pairs.clone(),
                floating_ip: self.floating_ips.first().map(|id| FloatingIp { id: id.clone(), address: None }),
                bound_to: Some("vm-1".into()),
            }),
            wanted_security_groups: server.spec.security_groups.iter().map(|g| g.id.clone()).collect(),
            source: Default::default(),
        }
    }
}

impl Port {
    /// Exactly one floating IP if and only if the spec asks for a public IP,
    /// and the spec's security groups.
    fn follows(&self, server: &Server) -> bool {
        let mut wanted: Vec<String> = server.spec.security_groups.iter().map(|g| g.id.clone()).collect();
        wanted.sort();
        let mut groups = self.groups.clone();
        groups.sort();
        self.floating_ips.len() == usize::from(wants_public_ip(server)) && groups == wanted
    }
}

fn running() -> ProviderView {
    ProviderView::Present(ProviderServer {
        id: "vm-1".into(),
        server_uid: "uid-web".into(),
        status: ProviderStatus::Active,
        power_state: PowerState::Running,
        launched_at: Some(at(5)),
        ..ProviderServer::default()
    })
}

fn wants_public_ip(server: &Server) -> bool {
    server.spec.public_ip_allocation.as_ref().is_some_and(|p| p.enabled)
}

fn apply_spec(server: &mut Server, step: Step) {
    if let Some(enabled) = step.public_ip {
        server.spec.public_ip_allocation = Some(PublicIpAllocation { enabled });
    }
    if let Some(second) = step.second_group {
        server.spec.security_groups.retain(|g| g.id != "sg-b");
        if second {
            server.spec.security_groups.push(SecurityGroupRef { id: "sg-b".into() });
        }
    }
}

/// One pass as an executor runs it; returns whether it ended Done.
fn pass(rules: Reconcile, server: &mut Server, port: &mut Port, step: Step) -> Result<bool, TestCaseError> {
    apply_spec(server, step);
    let mut facts = referenced_facts(server);
    let mut second = Consumed::new("sg-b");
    second.finalizers.push(reference_finalizer(&server.meta.name));
    facts.insert(ResourceKind::SecurityGroup, second);
    facts.provider = running();
    facts.networking = NetworkingView::NotRead;
    if reads_networking(server, &facts) {
        facts.networking = if step.read_fails {
            NetworkingView::Unknown("listing ports: 503".into())
        } else {
            NetworkingView::Known(port.networking(server))
        };
    }
    let decision = rules(server, &facts, &Options::default(), at(1_000));
    server.status = decision.status.clone();
    let mut failed = false;
    for action in &decision.actions {
        match action {
            Action::EnsureFloatingIp(request) => {
                prop_assert!(wants_public_ip(server), "a floating IP made that the spec does not ask for");
                prop_assert_eq!(&request.port_id, "port-1");
                if step.ensure_fails {
                    failed = true;
                    break;
                }
                if port.floating_ips.is_empty() {
                    port.made += 1;
                    port.floating_ips.push(format!("fip-{}", port.made));
                }
            }
            Action::ReleaseAttachment(AttachedResource::FloatingIp { id }) => {
                prop_assert!(!wants_public_ip(server), "the public IP released while the spec asks for it");
                if step.release_fails {
                    failed = true;
                    break;
                }
                port.floating_ips.retain(|ip| ip != id);
            }
            Action::ReleaseAttachment(other) => {
                return Err(TestCaseError::fail(format!("released {other} of a running server")));
            }
            Action::UpdatePort(update) => {
                if step.update_fails {
                    failed = true;
                    break;
                }
                port.groups.clone_from(&update.security_groups);
                port.pairs.clone_from(&update.allowed_address_pairs);
            }
            Action::CreateProviderServer(_) | Action::DeleteProviderServer(_) => {
                return Err(TestCaseError::fail("a running server created or deleted"));
            }
            _ => {}
        }
    }
    // A failed action hands the pass to its follow-up decision, never Done.
    let done = !failed && decision.outcome == Outcome::Done;
    if done && reads_networking(server, &facts) && !step.read_fails {
        prop_assert!(port.follows(server), "a pass ended Done with the port not as the spec asks: {port:?}");
    }
    Ok(done)
}

/// Whatever the user turns on and off and whatever fails on the way, a
/// floating IP is made only while the spec asks for one and released only
/// while it does not; once the faults stop, within a few passes the port
/// carries exactly one floating IP if and only if the spec asks for a public
/// IP, its security groups and pairs are the spec's, and the pass is Done.
fn networking_follows_the_spec(rules: Reconcile) -> Result<(), String> {
    let strategy = (any::<bool>(), any::<bool>(), prop::collection::vec(arb_step(), 0..12));
    run(strategy, |(public_at_start, had_fip, steps)| {
        let mut server = adopted();
        server.status = booted_status();
        server.spec.public_ip_allocation = Some(PublicIpAllocation { enabled: public_at_start });
        server.spec.networks[0].allowed_address_pairs =
            vec![AllowedAddressPair { cidr: "10.0.0.9/32".into(), mac_address: None }];
        // As a create left it: the spec's groups and pairs, with or without
        // its floating IP (a 503 on the floating IP create, say).
        let mut port = Port {
            groups: vec!["sg-a".into()],
            pairs: server.spec.networks[0].allowed_address_pairs.clone(),
            floating_ips: if had_fip { vec!["fip-0".into()] } else { Vec::new() },
            made: 0,
        };
        for step in steps {
            pass(rules, &mut server, &mut port, step)?;
        }
        let mut done = false;
        for _ in 0..4 {
            if pass(rules, &mut server, &mut port, CALM)? {
                done = true;
                break;
            }
        }
        prop_assert!(done, "no Done pass once the faults stopped: {port:?}");
        prop_assert_eq!(port.floating_ips.len(), usize::from(wants_public_ip(&server)), "{:?}", port);
        let mut wanted: Vec<String> = server.spec.security_groups.iter().map(|g| g.id.clone()).collect();
        wanted.sort();
        let mut groups = port.groups.clone();
        groups.sort();
        prop_assert_eq!(groups, wanted);
        Ok(())
    })
}

fn booted_status() -> server_core::ServerStatus {
    server_core::ServerStatus { provisioned_at: Some(at(5)), launched_at: Some(at(5)), ..Default::default() }
}

#[test]
fn the_port_and_the_floating_ip_follow_the_spec_on_every_pass() {
    must_hold(networking_follows_the_spec(reconcile));
}

/// The rule as it was: the floating IP is made only inside the create, so a
/// failed one is never made again.
fn floating_ip_only_at_create(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    strip(reconcile(server, facts, options, now), |a| matches!(a, Action::EnsureFloatingIp(_)))
}

/// Turning `publicIPAllocation` off releases nothing.
fn never_released(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    strip(reconcile(server, facts, options, now), |a| {
        matches!(a, Action::ReleaseAttachment(AttachedResource::FloatingIp { .. }))
    })
}

/// Security groups applied only at create.
fn port_set_only_at_create(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    strip(reconcile(server, facts, options, now), |a| matches!(a, Action::UpdatePort(_)))
}

/// The decision without the actions `drop` names.
fn strip(mut decision: Decision, drop: impl Fn(&Action) -> bool) -> Decision {
    decision.actions.retain(|a| !drop(a));
    decision
}

/// Changes the port and ends Done before they were made: the status says
/// Provisioned while the floating IP or the groups are still missing.
fn done_before_the_changes(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let decision = reconcile(server, facts, options, now);
    let changes = |a: &Action| matches!(a, Action::EnsureFloatingIp(_) | Action::UpdatePort(_));
    if !decision.actions.iter().any(changes) {
        return decision;
    }
    let mut done = Decision { actions: Vec::new(), ..decision.clone() };
    done.actions.extend(decision.actions.iter().filter(|a| !changes(a)).cloned());
    done
}

#[test]
fn the_networking_property_catches_broken_rules() {
    must_catch(|| networking_follows_the_spec(floating_ip_only_at_create));
    must_catch(|| networking_follows_the_spec(never_released));
    must_catch(|| networking_follows_the_spec(port_set_only_at_create));
    must_catch(|| networking_follows_the_spec(done_before_the_changes));
}

/// A pass that makes the floating IP is Done, and writes the status that
/// says Provisioned only after the floating IP was made.
#[test]
fn a_pass_that_makes_the_floating_ip_is_done_and_says_so_after_it() {
    let mut server = adopted();
    server.status = booted_status();
    server.spec.public_ip_allocation = Some(PublicIpAllocation { enabled: true });
    let mut facts = referenced_facts(&server);
    facts.provider = running();
    let port = Port { groups: vec!["sg-a".into()], pairs: Vec::new(), floating_ips: Vec::new(), made: 0 };
    facts.networking = NetworkingView::Known(port.networking(&server));
    let decision = reconcile(&server, &facts, &Options::default(), at(1_000));
    assert_eq!(decision.outcome, Outcome::Done);
    let ensure = decision.actions.iter().position(|a| matches!(a, Action::EnsureFloatingIp(_)));
    let status = decision.actions.iter().position(|a| matches!(a, Action::WriteStatus(_)));
    assert!(matches!((ensure, status), (Some(e), Some(s)) if e < s), "{:?}", decision.actions);
}

/// A failed read of the port yields, names why, and changes nothing; a port
/// not read is never taken as one that follows the spec.
#[test]
fn a_port_that_could_not_be_read_changes_nothing_and_is_said() {
    let mut server = adopted();
    server.spec.public_ip_allocation = Some(PublicIpAllocation { enabled: true });
    let mut facts = referenced_facts(&server);
    facts.provider = running();
    for view in [NetworkingView::Unknown("listing ports: 503".into()), NetworkingView::NotRead] {
        facts.networking = view;
        let decision = reconcile(&server, &facts, &Options::default(), at(1_000));
        assert!(matches!(decision.outcome, Outcome::Yield(Wait::NetworkingUnknown { .. })), "{:?}", decision.outcome);
        assert!(
            !decision.actions.iter().any(|a| matches!(
                a,
                Action::EnsureFloatingIp(_) | Action::UpdatePort(_) | Action::ReleaseAttachment(_)
            ))
        );
    }
}

/// Only a present server not being deleted or retried has its port read.
#[test]
fn the_port_is_read_only_for_a_present_server_that_stays() {
    let server = adopted();
    let facts = |provider| Facts { provider, ..referenced_facts(&server) };
    assert!(reads_networking(&server, &facts(running())));
    assert!(!reads_networking(&server, &facts(ProviderView::Absent)));
    assert!(!reads_networking(&server, &facts(ProviderView::Unknown("timeout".into()))));
    let mut deleting = server.clone();
    deleting.meta.deleting = true;
    assert!(!reads_networking(&deleting, &facts(running())));
    let mut retrying = server.clone();
    retrying.status.provider_create_retrying = true;
    assert!(!reads_networking(&retrying, &facts(running())));
}
