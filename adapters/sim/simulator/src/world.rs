//! The simulated world's objects: the Servers the users create, each
//! tenant's consumed resources (identity, networks, security groups, SSH CA)
//! whose finalizers are the reference edges, a replica's lagging copy of a
//! Server and a create pass in flight, and how Servers are copied without
//! cloning. [`ApiServer`] holds them, each Server as a [`TrackedServer`].
//!
//! [`ApiServer`]: super::api_server::ApiServer
//! [`TrackedServer`]: super::api_server::TrackedServer

use std::collections::BTreeMap;

use jiff::Timestamp;
use server_core::model::{
    Condition, ConditionReason, ConditionStatus, ConditionType, Consumed, Detail, IDENTITY_LABEL, ImageSpec,
    NAME_LABEL, NetworkAttachment, ObjectMeta, REGION_LABEL, ResourceKind, SecurityGroupRef, UserData,
};
use server_core::port::IdentityContext;
use server_core::{AttachmentsView, Facts, Pass, ProviderView, Server, ServerSpec, ServerStatus};

use super::checker::PassRead;

/// Controller replicas the model has room for.
pub(crate) const REPLICAS: usize = 2;

/// Servers per tenant (namespace + identity + cloud project). Small, so the
/// reference finalizer lists on shared resources stay short.
pub(crate) const TENANT_SIZE: usize = 8;

pub(crate) const REGION: &str = "region-sim";

/// A valid OpenSSH public key for the SSH CA resources.
const CA_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@sim";

/// `u64::MAX` as "no reconcile pending".
pub(crate) const NOT_PENDING: u64 = u64::MAX;

/// A pass between reading its facts and its create call.
#[derive(Debug)]
pub(crate) struct CreatePassInFlight {
    pub(crate) pass: Pass,
    pub(crate) read: PassRead,
    /// When its actions run.
    pub(crate) at: u64,
}

/// A cache that lags behind the API server for one Server.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "always held boxed, in `TrackedServer::lagging`")]
pub(crate) enum Lagging {
    /// It holds an older copy, with its resourceVersion.
    Stale(Server, u64),
    /// It holds none: the Server was created while the watch was cut (a pass
    /// triggered now finds it "not in the local store").
    Absent,
}

impl Lagging {
    /// The copy the cache holds, if any.
    pub(crate) fn copy(&self) -> Option<&Server> {
        match self {
            Lagging::Stale(server, _) => Some(server),
            Lagging::Absent => None,
        }
    }
}

/// One tenant: a namespace with an identity, its consumed resources, and the
/// cloud project its servers live in.
#[derive(Debug)]
pub(crate) struct Tenant {
    /// Identity, networks, security groups and SSH CA as reconcile facts. The
    /// provider view is filled in per pass.
    pub(crate) facts: Facts,
    pub(crate) identity: IdentityContext,
    /// The Servers of this tenant: `first..first + len`.
    pub(crate) first: usize,
    pub(crate) len: usize,
}

impl Tenant {
    pub(crate) fn new(index: usize, first: usize, len: usize, now: Timestamp) -> Self {
        let ready = Condition {
            type_: ConditionType::Available,
            status: ConditionStatus::True,
            reason: ConditionReason::Provisioned,
            message: "Provisioned".into(),
            last_transition_time: now,
        };
        let identity =
            Consumed::new(identity_name(index)).with(Detail::Identity { conditions: vec![ready], deleting: false });
        let ca = Consumed::new("ca").with(Detail::SshCertificateAuthority { public_key: CA_KEY.into() });
        // SimCloud's model holds nothing of a Server besides its server (its
        // addresses are the server's own): every attachments read is "none".
        let facts = Facts {
            provider: ProviderView::Absent,
            attachments: AttachmentsView::Known(Vec::new()),
            ..Facts::default()
        }
        .with(ResourceKind::Identity, identity)
        .with(ResourceKind::Network, Consumed::new("net-a"))
        .with(ResourceKind::Network, Consumed::new("net-b"))
        .with(ResourceKind::SecurityGroup, Consumed::new("sg-a"))
        .with(ResourceKind::SecurityGroup, Consumed::new("sg-b"))
        .with(ResourceKind::SshCertificateAuthority, ca);
        let identity = IdentityContext {
            region_id: REGION.into(),
            identity_id: identity_name(index),
            project_id: format!("project-{index}"),
            ..Default::default()
        };
        Tenant { facts, identity, first, len }
    }

    /// Every consumed resource with its finalizers.
    pub(crate) fn resources(&self) -> impl Iterator<Item = &Consumed> {
        self.facts.consumed.values().flatten()
    }
}

fn identity_name(tenant: usize) -> String {
    format!("identity-{tenant}")
}

/// The user data of Server `index`: a shell script cloud-init runs.
pub(crate) fn user_data(index: usize) -> UserData {
    UserData(format!("#!/bin/sh\necho server-{index}\n").into_bytes())
}

/// The same script without its `#!` line: cloud-init would ignore it, so the
/// core refuses it.
pub(crate) fn refused_user_data(index: usize) -> UserData {
    UserData(format!("echo server-{index}\n").into_bytes())
}

/// The Server the user creates: labels for region and identity, one network
/// and security group of its tenant, the SSH CA on every tenth server, and
/// user data (refused by the core when `refused`).
pub(crate) fn new_server(index: usize, tenant: usize, refused: bool) -> Server {
    let name = format!("server-{index}");
    let labels = BTreeMap::from([
        (REGION_LABEL.to_owned(), REGION.to_owned()),
        (IDENTITY_LABEL.to_owned(), identity_name(tenant)),
        (NAME_LABEL.to_owned(), name.clone()),
    ]);
    let meta = ObjectMeta {
        namespace: format!("tenant-{tenant}"),
        uid: format!("uid-{index:08}"),
        name,
        generation: 1,
        labels,
        ..Default::default()
    };
    let spec = ServerSpec {
        flavor_id: "m1.small".into(),
        image: ImageSpec { id: "image-1".into() },
        networks: vec![NetworkAttachment { id: "net-a".into(), allowed_address_pairs: Vec::new() }],
        security_groups: vec![SecurityGroupRef { id: "sg-a".into() }],
        ssh_certificate_authority_id: index.is_multiple_of(10).then(|| "ca".to_owned()),
        user_data: Some(if refused { refused_user_data(index) } else { user_data(index) }),
        ..Default::default()
    };
    Server { meta, spec, status: ServerStatus::default() }
}

/// Makes `to` equal to `from`, reusing `to`'s allocations: a pass holds
/// its own copy of the Server it read (server-core's `Pass` folds its writes
/// into it), and the simulator recycles those copies rather than cloning a
/// Server per pass. The destructuring names every field, so a field added
/// to the model must be added here.
pub(crate) fn copy_server(to: &mut Server, from: &Server) {
    copy_meta(&mut to.meta, &from.meta);
    // Specs rarely differ between two Servers here.
    if to.spec != from.spec {
        to.spec.clone_from(&from.spec);
    }
    copy_status(&mut to.status, &from.status);
    debug_assert!(to == from, "copy_server missed a field");
}

/// [`copy_server`] for the metadata.
pub(crate) fn copy_meta(to: &mut ObjectMeta, from: &ObjectMeta) {
    let ObjectMeta { name, namespace, uid, generation, labels, annotations, finalizers, deleting } = to;
    name.clone_from(&from.name);
    namespace.clone_from(&from.namespace);
    uid.clone_from(&from.uid);
    *generation = from.generation;
    copy_map(labels, &from.labels);
    copy_map(annotations, &from.annotations);
    finalizers.clone_from(&from.finalizers);
    *deleting = from.deleting;
}

/// [`copy_server`] for the status.
pub(crate) fn copy_status(to: &mut ServerStatus, from: &ServerStatus) {
    let ServerStatus {
        conditions,
        phase,
        private_ip,
        public_ip,
        mac_address,
        launched_at,
        scheduled_at,
        provisioned_at,
        provider_create_failures,
        provider_create_retrying,
        rebuild,
    } = to;
    conditions.truncate(from.conditions.len());
    for (to, from) in conditions.iter_mut().zip(&from.conditions) {
        let Condition { type_, status, reason, message, last_transition_time } = to;
        (*type_, *status, *reason, *last_transition_time) =
            (from.type_, from.status, from.reason, from.last_transition_time);
        message.clone_from(&from.message);
    }
    let copied = conditions.len();
    conditions.extend(from.conditions.iter().skip(copied).cloned());
    *phase = from.phase;
    private_ip.clone_from(&from.private_ip);
    public_ip.clone_from(&from.public_ip);
    mac_address.clone_from(&from.mac_address);
    (*launched_at, *scheduled_at, *provisioned_at) = (from.launched_at, from.scheduled_at, from.provisioned_at);
    *provider_create_failures = from.provider_create_failures;
    *provider_create_retrying = from.provider_create_retrying;
    rebuild.clone_from(&from.rebuild);
}

/// A map made equal to another in place when both have the same keys (a
/// Server's labels, mostly), cloned otherwise.
fn copy_map(to: &mut BTreeMap<String, String>, from: &BTreeMap<String, String>) {
    if to.len() == from.len() && to.keys().eq(from.keys()) {
        for (to, from) in to.values_mut().zip(from.values()) {
            to.clone_from(from);
        }
    } else {
        to.clone_from(from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_servers_reference_their_tenant() {
        let server = new_server(10, 1, false);
        assert_eq!(server.meta.label(IDENTITY_LABEL), Some("identity-1"));
        assert_eq!(server.spec.ssh_certificate_authority_id.as_deref(), Some("ca"));
        let tenant = Tenant::new(0, 0, 8, Timestamp::UNIX_EPOCH);
        assert_eq!(tenant.resources().count(), 6);
    }

    #[test]
    fn a_recycled_copy_equals_the_server_it_copies() {
        let mut running = new_server(3, 0, false);
        running.meta.annotations.insert("a".into(), "1".into());
        running.status.private_ip = Some("10.0.0.3".into());
        let now = Timestamp::UNIX_EPOCH;
        server_core::model::set_condition(
            &mut running.status.conditions,
            ConditionType::Healthy,
            ConditionStatus::True,
            ConditionReason::Healthy,
            "ok",
            now,
        );
        let mut copy = Server::default();
        for from in [&running, &new_server(10, 1, false), &running, &Server::default()] {
            copy_server(&mut copy, from);
            assert_eq!(&copy, from);
        }
    }
}
