//! A Server's provider resources besides its server (ports, floating IPs):
//! DESIGN "Every provider resource is released". Each property runs against
//! server-core's rules (it must hold) and against a deliberately broken rule
//! (it must catch it).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;

use jiff::Timestamp;
use proptest::prelude::*;
use server_core::model::{SERVER_FINALIZER, Server};
use server_core::port::{AttachedResource, ProviderServer};
use server_core::reconcile::{Action, AttachmentsView, Decision, Facts, Options, Outcome, ProviderView, Wait};
use server_core::{reads_attachments, reconcile};
use support::*;

type Reconcile = fn(&Server, &Facts, &Options, Timestamp) -> Decision;

/// One pass's luck: which reads fail, and whether the first release does.
#[derive(Clone, Copy, Debug)]
struct Step {
    server_read_fails: bool,
    attachments_read_fail: bool,
    release_fails: bool,
}

fn arb_step() -> impl Strategy<Value = Step> {
    (prop::bool::weighted(0.2), prop::bool::weighted(0.3), prop::bool::weighted(0.2)).prop_map(
        |(server_read_fails, attachments_read_fail, release_fails)| Step {
            server_read_fails,
            attachments_read_fail,
            release_fails,
        },
    )
}

/// A provider like Nova and Neutron: the server goes some reads after its
/// delete is accepted (Nova deletes asynchronously), and the Server's port
/// and floating IP stay until each is deleted (Nova keeps a port the caller
/// made; Neutron keeps a floating IP whose port goes).
#[derive(Debug)]
struct Cloud {
    /// `None`: no server. `Some(None)`: present, no delete asked.
    /// `Some(Some(n))`: deleting, visible for `n` more passes.
    server: Option<Option<u8>>,
    delete_lag: u8,
    attachments: BTreeSet<AttachedResource>,
}

impl Cloud {
    fn view(&self) -> ProviderView {
        match self.server {
            Some(_) => ProviderView::Present(ProviderServer {
                id: "vm-1".into(),
                server_uid: "uid-web".into(),
                ..ProviderServer::default()
            }),
            None => ProviderView::Absent,
        }
    }

    fn tick(&mut self) {
        self.server = match self.server {
            Some(Some(0)) => None,
            Some(Some(n)) => Some(Some(n - 1)),
            other => other,
        };
    }
}

fn deleting_server() -> Server {
    let mut server = server();
    server.meta.deleting = true;
    server.meta.finalizers.push(SERVER_FINALIZER.into());
    server
}

fn attachments(ports: u8, floating_ips: u8) -> BTreeSet<AttachedResource> {
    let ports = (0..ports).map(|i| AttachedResource::Port { id: format!("port-{i}") });
    let ips = (0..floating_ips).map(|i| AttachedResource::FloatingIp { id: format!("fip-{i}") });
    ports.chain(ips).collect()
}

/// One pass as an executor runs it: the facts the core asks for, the
/// decision, its actions in order until the first failure. Checks, at every
/// action, that nothing is released while the server may still exist and
/// that the Server goes only once the provider holds nothing of it.
fn pass(rules: Reconcile, server: &mut Server, cloud: &mut Cloud, step: Step) -> Result<bool, TestCaseError> {
    let mut facts = referenced_facts(server);
    facts.attachments = AttachmentsView::NotRead;
    facts.provider = if step.server_read_fails { ProviderView::Unknown("read timed out".into()) } else { cloud.view() };
    if reads_attachments(server, &facts) {
        facts.attachments = if step.attachments_read_fail {
            AttachmentsView::Unknown("listing ports: 503".into())
        } else {
            AttachmentsView::Known(cloud.attachments.iter().cloned().collect())
        };
    }
    let decision = rules(server, &facts, &Options::default(), at(1_000));
    server.status = decision.status.clone();
    let mut released = false;
    for action in &decision.actions {
        match action {
            Action::DeleteProviderServer(_) => {
                if let Some(None) = cloud.server {
                    cloud.server = Some(Some(cloud.delete_lag));
                }
            }
            Action::ReleaseAttachment(resource) => {
                // A port deleted under its server would be torn off a
                // running machine; nothing goes before the server has.
                prop_assert!(cloud.server.is_none(), "released {resource} while the server exists");
                if step.release_fails && !released {
                    break;
                }
                released = true;
                cloud.attachments.remove(resource);
            }
            Action::RemoveFinalizer => {
                prop_assert!(cloud.server.is_none(), "the Server went while its provider server exists");
                prop_assert!(
                    cloud.attachments.is_empty(),
                    "the Server went while the provider holds {:?}",
                    cloud.attachments
                );
                server.meta.finalizers.retain(|f| f != SERVER_FINALIZER);
                return Ok(true);
            }
            _ => {}
        }
    }
    cloud.tick();
    Ok(false)
}

/// Over any provider (the server deleting for up to 3 passes, up to two
/// ports and a floating IP) and any reads and releases failing: nothing is
/// released while the server may exist, the Server goes only when the
/// provider confirms its server, ports and floating IPs all absent, and once
/// the faults stop it does go.
fn deletion_ends_only_when_everything_is_gone(rules: Reconcile) -> Result<(), String> {
    let strategy = (0u8..3, 0u8..3, 0u8..2, prop::collection::vec(arb_step(), 0..12));
    run(strategy, |(delete_lag, ports, floating_ips, steps)| {
        let mut server = deleting_server();
        let mut cloud = Cloud { server: Some(None), delete_lag, attachments: attachments(ports, floating_ips) };
        for step in steps {
            if pass(rules, &mut server, &mut cloud, step)? {
                return Ok(());
            }
        }
        let calm = Step { server_read_fails: false, attachments_read_fail: false, release_fails: false };
        for _ in 0..8 {
            if pass(rules, &mut server, &mut cloud, calm)? {
                return Ok(());
            }
        }
        Err(TestCaseError::fail(format!("the Server was never released: {cloud:?}")))
    })
}

#[test]
fn a_deleting_server_goes_only_once_its_server_ports_and_floating_ip_are_gone() {
    must_hold(deletion_ends_only_when_everything_is_gone(reconcile));
}

/// The rule as it was: the server's absence alone released the Server.
fn server_absence_is_enough(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let facts = Facts { attachments: AttachmentsView::Known(Vec::new()), ..facts.clone() };
    reconcile(server, &facts, options, now)
}

/// A read that failed taken for "nothing left".
fn unknown_attachments_as_none(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut facts = facts.clone();
    if let AttachmentsView::Unknown(_) = facts.attachments {
        facts.attachments = AttachmentsView::Known(Vec::new());
    }
    reconcile(server, &facts, options, now)
}

/// Releases the attachments while the server is still there.
fn releases_early(server: &Server, facts: &Facts, options: &Options, now: Timestamp) -> Decision {
    let mut decision = reconcile(server, facts, options, now);
    if let (ProviderView::Present(_), true) = (&facts.provider, server.meta.deleting) {
        let early = ["port-0", "port-1"].map(|id| Action::ReleaseAttachment(AttachedResource::Port { id: id.into() }));
        decision.actions.extend(early);
    }
    decision
}

#[test]
fn the_deletion_property_catches_broken_rules() {
    must_catch(|| deletion_ends_only_when_everything_is_gone(server_absence_is_enough));
    must_catch(|| deletion_ends_only_when_everything_is_gone(unknown_attachments_as_none));
    must_catch(|| deletion_ends_only_when_everything_is_gone(releases_early));
}

/// The pass after the server is confirmed gone releases each attachment by
/// its ID, floating IPs before ports, and keeps the finalizer; the Available
/// message names what is left.
#[test]
fn attachments_are_released_by_id_floating_ips_first_and_the_finalizer_stays() {
    let server = deleting_server();
    let mut facts = referenced_facts(&server);
    facts.provider = ProviderView::Absent;
    facts.attachments = AttachmentsView::Known(vec![
        AttachedResource::Port { id: "port-1".into() },
        AttachedResource::FloatingIp { id: "fip-1".into() },
    ]);
    assert!(reads_attachments(&server, &facts));
    let decision = reconcile(&server, &facts, &Options::default(), at(1_000));
    let released: Vec<&AttachedResource> = decision
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::ReleaseAttachment(resource) => Some(resource),
            _ => None,
        })
        .collect();
    assert_eq!(
        released,
        [&AttachedResource::FloatingIp { id: "fip-1".into() }, &AttachedResource::Port { id: "port-1".into() }]
    );
    assert!(!decision.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer | Action::RemoveReference(_))));
    assert!(matches!(decision.outcome, Outcome::Yield(Wait::ReleasingAttachments { .. })));
    assert!(available(&decision).message.contains("port port-1"), "{}", available(&decision).message);

    // Not read is never "none".
    facts.attachments = AttachmentsView::NotRead;
    let decision = reconcile(&server, &facts, &Options::default(), at(1_000));
    assert!(decision.actions.iter().all(|a| !matches!(a, Action::RemoveFinalizer | Action::ReleaseAttachment(_))));
    assert!(matches!(decision.outcome, Outcome::Yield(Wait::AttachmentsUnknownBeforeRelease { .. })));
}

/// Only a deleting Server whose server is confirmed absent reads them: a
/// present or unknown server, or a Server not being deleted, costs no read.
#[test]
fn attachments_are_read_only_once_the_server_is_confirmed_absent() {
    let deleting = deleting_server();
    let facts = |provider| Facts { provider, ..referenced_facts(&deleting) };
    assert!(reads_attachments(&deleting, &facts(ProviderView::Absent)));
    assert!(!reads_attachments(&deleting, &facts(present())));
    assert!(!reads_attachments(&deleting, &facts(ProviderView::Unknown("timeout".into()))));
    assert!(!reads_attachments(&server(), &facts(ProviderView::Absent)));
}
