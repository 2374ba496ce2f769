//! The resources a Server consumes, as facts the adapter gathers, and the
//! one table of consumed kinds: [`ResourceKind`] and its rules.

use serde::{Deserialize, Serialize};

use super::Server;
use super::condition::{Condition, ConditionReason, ConditionStatus, ConditionType, find_condition};
use super::meta::IDENTITY_LABEL;
use super::spec::{NetworkAttachment, SecurityGroupRef};

/// A kind a Server holds a reference finalizer on.
///
/// This enum and the `match`es in its `impl` are the core's table of
/// consumed kinds: everything else (facts, references, validation) walks
/// [`ResourceKind::ALL`]. Adding a kind is a variant here (the compiler then
/// asks for its arm in each `match` below) and the spec field naming it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceKind {
    Network,
    SecurityGroup,
    SshCertificateAuthority,
    Identity,
}

/// Which resources of a kind the adapter gathers for a Server (always of
/// the Server's namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Those whose identity label is the Server's.
    IdentityLabelled,
    /// The one named by the Server's identity label.
    TheIdentity,
    /// Every one of the namespace.
    Namespace,
}

impl ResourceKind {
    /// Every consumed kind, in the order a pass references and checks them.
    pub const ALL: [ResourceKind; 4] = [
        ResourceKind::Network,
        ResourceKind::SecurityGroup,
        ResourceKind::SshCertificateAuthority,
        ResourceKind::Identity,
    ];

    /// The kind in words, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Network => "network",
            ResourceKind::SecurityGroup => "security group",
            ResourceKind::SshCertificateAuthority => "SSH certificate authority",
            ResourceKind::Identity => "identity",
        }
    }

    /// Which resources of this kind the facts hold.
    pub fn scope(self) -> Scope {
        match self {
            ResourceKind::Network | ResourceKind::SecurityGroup => Scope::IdentityLabelled,
            ResourceKind::SshCertificateAuthority => Scope::Namespace,
            ResourceKind::Identity => Scope::TheIdentity,
        }
    }

    /// The IDs (= resource names) of this kind `server` names, in spec
    /// order; the Identity is named by the identity label. Each must exist
    /// and holds the Server's reference.
    pub fn named(self, server: &Server) -> Named<'_> {
        let spec = &server.spec;
        Named(match self {
            ResourceKind::Network => Ids::Networks(spec.networks.iter()),
            ResourceKind::SecurityGroup => Ids::SecurityGroups(spec.security_groups.iter()),
            ResourceKind::SshCertificateAuthority => Ids::One(spec.ssh_certificate_authority_id.as_deref()),
            ResourceKind::Identity => Ids::One(server.meta.label(IDENTITY_LABEL)),
        })
    }
}

/// The IDs a Server names of one kind ([`ResourceKind::named`]), borrowed
/// from it: a pass walks them several times, so they are never collected.
#[derive(Clone, Debug)]
pub struct Named<'a>(Ids<'a>);

#[derive(Clone, Debug)]
enum Ids<'a> {
    Networks(std::slice::Iter<'a, NetworkAttachment>),
    SecurityGroups(std::slice::Iter<'a, SecurityGroupRef>),
    One(Option<&'a str>),
}

impl<'a> Iterator for Named<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match &mut self.0 {
            Ids::Networks(networks) => networks.next().map(|n| n.id.as_str()),
            Ids::SecurityGroups(groups) => groups.next().map(|g| g.id.as_str()),
            Ids::One(id) => id.take(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = match &self.0 {
            Ids::Networks(networks) => networks.len(),
            Ids::SecurityGroups(groups) => groups.len(),
            Ids::One(id) => usize::from(id.is_some()),
        };
        (len, Some(len))
    }
}

impl ExactSizeIterator for Named<'_> {}

/// A consumed resource: its name (= the ID a spec uses), its finalizers, and
/// what else the core reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumed {
    pub name: String,
    /// The core only ever asks whether the reconciled Server's own reference
    /// finalizer is here, so facts may carry that one alone (a shared object
    /// holds one per Server using it).
    pub finalizers: Vec<String>,
    pub detail: Detail,
}

/// What the core reads of a consumed resource besides its name and
/// finalizers; which one depends on the kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Detail {
    /// Nothing else (security groups).
    #[default]
    None,
    /// A Network's provider network ID (`status.openstack.networkID`), where
    /// its status records one.
    Network { provider_id: Option<String> },
    /// An SSH certificate authority's `spec.publicKey`: what cloud-init trusts.
    SshCertificateAuthority { public_key: String },
    /// An Identity's conditions, which say whether it is ready, and whether
    /// it is being deleted (its cloud account going with it).
    Identity {
        conditions: Vec<Condition>,
        #[serde(default)]
        deleting: bool,
    },
}

impl Consumed {
    pub fn new(name: impl Into<String>) -> Self {
        Consumed { name: name.into(), finalizers: Vec::new(), detail: Detail::None }
    }

    /// The same resource with `detail`.
    pub fn with(self, detail: Detail) -> Self {
        Consumed { detail, ..self }
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// For an Identity: ready means Available with reason Provisioned, as the
    /// Go controller checks. False for any other kind.
    pub fn is_ready_identity(&self) -> bool {
        match &self.detail {
            Detail::Identity { conditions, .. } => find_condition(conditions, ConditionType::Available)
                .is_some_and(|c| c.status == ConditionStatus::True && c.reason == ConditionReason::Provisioned),
            _ => false,
        }
    }

    /// For an SSH certificate authority: its public key.
    pub fn public_key(&self) -> Option<&str> {
        match &self.detail {
            Detail::SshCertificateAuthority { public_key } => Some(public_key),
            _ => None,
        }
    }

    /// For an Identity: whether it is being deleted. False for any other kind.
    pub fn is_deleting_identity(&self) -> bool {
        matches!(self.detail, Detail::Identity { deleting: true, .. })
    }

    /// For a Network: the provider's network ID, if recorded.
    pub fn provider_id(&self) -> Option<&str> {
        match &self.detail {
            Detail::Network { provider_id } => provider_id.as_deref(),
            _ => None,
        }
    }
}
