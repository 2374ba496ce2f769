//! The resources a Server consumes, as facts the adapter gathers.

use serde::{Deserialize, Serialize};

use super::condition::{Condition, ConditionReason, ConditionStatus, ConditionType, find_condition};

/// A kind a Server holds a reference finalizer on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceKind {
    Network,
    SecurityGroup,
    SshCertificateAuthority,
    Identity,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Network => "network",
            ResourceKind::SecurityGroup => "security group",
            ResourceKind::SshCertificateAuthority => "SSH certificate authority",
            ResourceKind::Identity => "identity",
        }
    }
}

/// A consumed resource: its name (= the ID a spec uses) and finalizers.
/// The rules read only whether the Server's own reference is among them, so
/// an adapter need not copy the rest (a shared Network holds one per Server
/// on it): [`Consumed::referenced`] gives that alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumed {
    pub name: String,
    pub finalizers: Vec<String>,
}

impl Consumed {
    pub fn new(name: impl Into<String>) -> Self {
        Consumed { name: name.into(), finalizers: Vec::new() }
    }

    /// A resource known to hold this reference `finalizer` (and whatever
    /// else, which the rules do not read).
    pub fn referenced(name: impl Into<String>, finalizer: &str) -> Self {
        Consumed { name: name.into(), finalizers: vec![finalizer.to_owned()] }
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }
}

/// An SSH certificate authority: `spec.publicKey` is what cloud-init trusts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshCertificateAuthority {
    pub resource: Consumed,
    pub public_key: String,
}

/// The Identity a Server belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub resource: Consumed,
    pub conditions: Vec<Condition>,
}

impl Identity {
    /// Ready means Available with reason Provisioned, as the Go controller checks.
    pub fn is_ready(&self) -> bool {
        find_condition(&self.conditions, ConditionType::Available)
            .is_some_and(|c| c.status == ConditionStatus::True && c.reason == ConditionReason::Provisioned)
    }
}
