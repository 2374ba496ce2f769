//! The Kubernetes side, minimally and in memory: Servers with a
//! resourceVersion, the controller's (possibly lagging) cache of each, and the
//! consumed resources (identity, networks, security groups, SSH CA) of each
//! tenant, whose finalizers are the reference edges.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;
use server_core::model::{
    Condition, ConditionReason, ConditionStatus, ConditionType, Consumed, IDENTITY_LABEL, Identity, ImageSpec,
    NAME_LABEL, NetworkAttachment, ObjectMeta, REGION_LABEL, SecurityGroupRef, SshCertificateAuthority,
};
use server_core::port::IdentityContext;
use server_core::{Decision, Facts, ProviderView, Server, ServerSpec, ServerStatus};

use server_simcloud::{FateKind, ServerHandle};

use super::checker::Pass;

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

/// One Server object and everything the simulation tracks about it.
#[derive(Debug)]
pub(crate) struct Obj {
    /// The API server's copy.
    pub(crate) server: Server,
    /// Equal to `server` between writes; during one, the Server before it
    /// (see `Engine::commit`).
    pub(crate) shadow: Server,
    pub(crate) rv: u64,
    /// Created and not yet removed from the API server.
    pub(crate) exists: bool,
    /// Each replica's cache, when it lags: the older copy and its
    /// resourceVersion, or no copy at all (created while that replica's
    /// watch was cut). `None` means that cache is up to date.
    pub(crate) lagging: [Option<Box<Lagging>>; REPLICAS],
    pub(crate) tenant: usize,
    pub(crate) fate: FateKind,
    /// This Server's state in the cloud model.
    pub(crate) handle: ServerHandle,
    /// (resourceVersion, record version) of the last observation that
    /// changed nothing.
    pub(crate) monitor_memo: Option<(u64, u64)>,
    /// Per replica, when the next pass is due (`NOT_PENDING` if none), and
    /// the ticket that identifies that queue entry: kube-runtime keeps one
    /// pending reconcile per object, the earliest.
    pub(crate) pending_at: [u64; REPLICAS],
    pub(crate) ticket: [u32; REPLICAS],
    /// Per replica, a pass that read its facts and decided to create, whose
    /// actions run when its create call goes out (see `Engine::reconcile`).
    /// kube-runtime runs no other pass of this replica on the Server meanwhile.
    pub(crate) in_flight: [Option<Box<InFlight>>; REPLICAS],
    pub(crate) check: CheckState,
}

/// What the checker remembers about one Server between steps.
#[derive(Debug, Default)]
pub(crate) struct CheckState {
    /// A persisted status ever showed provisionedAt, launchedAt or a
    /// post-launch phase.
    pub(crate) ever_booted: bool,
    /// The resourceVersion an operator reset was written at, until a pass
    /// that read it (or later) with a known provider view has been checked.
    pub(crate) reset_rv: Option<u64>,
    /// The cloud's accepted creates for this uid at the last operator reset.
    pub(crate) creates_at_reset: u32,
    /// An operator reset is already scheduled.
    pub(crate) reset_scheduled: bool,
    /// The latest wake for this Server: (the resourceVersion that woke a
    /// replica, when), until a pass reads that version or a later one.
    pub(crate) owed_wake: Option<(u64, u64)>,
    /// ProviderServerMissing was emitted.
    pub(crate) reported_missing: bool,
}

/// A pass between reading its facts and its create call.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) decision: Decision,
    pub(crate) pass: Pass,
    /// When its actions run.
    pub(crate) at: u64,
}

/// A cache that lags behind the API server for one Server.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "always held boxed, in `Obj::lagging`")]
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

impl Obj {
    /// The Server as replica `r`'s cache holds it, with its resourceVersion;
    /// `None` when that cache does not hold it (removed, or not listed yet).
    pub(crate) fn view(&self, r: usize) -> Option<(&Server, u64)> {
        match self.lagging.get(r).and_then(Option::as_deref) {
            Some(Lagging::Stale(server, rv)) => Some((server, *rv)),
            Some(Lagging::Absent) => None,
            None if self.exists => Some((&self.server, self.rv)),
            None => None,
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
        let facts = Facts {
            identity: Some(Identity { resource: Consumed::new(identity_name(index)), conditions: vec![ready] }),
            networks: vec![Consumed::new("net-a"), Consumed::new("net-b")],
            network_provider_ids: Default::default(),
            security_groups: vec![Consumed::new("sg-a"), Consumed::new("sg-b")],
            ssh_certificate_authorities: vec![SshCertificateAuthority {
                resource: Consumed::new("ca"),
                public_key: CA_KEY.into(),
            }],
            other_identity_references: Vec::new(),
            provider: ProviderView::Absent,
        };
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
        let f = &self.facts;
        f.identity
            .iter()
            .map(|i| &i.resource)
            .chain(f.networks.iter())
            .chain(f.security_groups.iter())
            .chain(f.ssh_certificate_authorities.iter().map(|c| &c.resource))
    }
}

fn identity_name(tenant: usize) -> String {
    format!("identity-{tenant}")
}

/// The Server the user creates: labels for region and identity, one network
/// and security group of its tenant, and the SSH CA on every tenth server.
pub(crate) fn new_server(index: usize, tenant: usize) -> Server {
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
        ..Default::default()
    };
    Server { meta, spec, status: ServerStatus::default() }
}

/// Applies a status merge patch (RFC 7386) the way the API server would, onto
/// the typed status: each top-level field named is replaced, `null` clears it.
/// Fields this model lacks are ignored (the real API server keeps them).
pub(crate) fn apply_status_patch(status: &mut ServerStatus, patch: &Value) -> Result<(), String> {
    let Value::Object(fields) = patch else {
        return Err(format!("status patch is not an object: {patch}"));
    };
    for (key, value) in fields {
        let applied = match key.as_str() {
            "conditions" => set(&mut status.conditions, value),
            "phase" => set(&mut status.phase, value),
            "privateIP" => set(&mut status.private_ip, value),
            "publicIP" => set(&mut status.public_ip, value),
            "macAddress" => set(&mut status.mac_address, value),
            "launchedAt" => set(&mut status.launched_at, value),
            "scheduledAt" => set(&mut status.scheduled_at, value),
            "provisionedAt" => set(&mut status.provisioned_at, value),
            "providerCreateFailures" => set(&mut status.provider_create_failures, value),
            "providerCreateRetrying" => set(&mut status.provider_create_retrying, value),
            _ => Ok(()),
        };
        applied.map_err(|e| format!("status patch field {key}: {e}"))?;
    }
    Ok(())
}

/// One field of a merge patch: `null` resets it to its default (absent).
fn set<'a, T: Default + Deserialize<'a>>(field: &mut T, value: &'a Value) -> Result<(), serde_json::Error> {
    *field = if value.is_null() { T::default() } else { T::deserialize(value)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use server_core::model::Phase;
    use server_core::status_merge_patch;

    use super::*;

    #[test]
    fn typed_merge_patch_round_trips_core_patches() {
        let t = Timestamp::from_second(1_700_000_000).unwrap_or_default();
        let before = ServerStatus {
            phase: Some(Phase::Running),
            private_ip: Some("10.0.0.1".into()),
            launched_at: Some(t),
            provisioned_at: Some(t),
            provider_create_failures: 2,
            ..Default::default()
        };
        let after = ServerStatus {
            phase: Some(Phase::Pending),
            private_ip: None,
            launched_at: None,
            provider_create_failures: 0,
            provider_create_retrying: true,
            mac_address: Some("fa:16:3e:00:00:01".into()),
            ..before.clone()
        };
        let patch = status_merge_patch(&before, &after).unwrap_or_default();
        let mut applied = before.clone();
        assert_eq!(apply_status_patch(&mut applied, &patch), Ok(()));
        assert_eq!(applied, after);
    }

    #[test]
    fn malformed_patches_are_errors_not_panics() {
        let mut status = ServerStatus::default();
        assert!(apply_status_patch(&mut status, &serde_json::json!({"phase": 7})).is_err());
        assert!(apply_status_patch(&mut status, &serde_json::json!([1])).is_err());
        assert_eq!(apply_status_patch(&mut status, &serde_json::json!({"volumes": []})), Ok(()));
    }

    #[test]
    fn new_servers_reference_their_tenant() {
        let server = new_server(10, 1);
        assert_eq!(server.meta.label(IDENTITY_LABEL), Some("identity-1"));
        assert_eq!(server.spec.ssh_certificate_authority_id.as_deref(), Some("ca"));
        let tenant = Tenant::new(0, 0, 8, Timestamp::UNIX_EPOCH);
        assert_eq!(tenant.resources().count(), 6);
    }
}
