use std::collections::BTreeMap;

use crate::model::{Consumed, Identity, ResourceKind, SshCertificateAuthority};
use crate::port::ProviderServer;

/// What the provider says about the Server's provider server. The three
/// kinds are load-bearing: only `Absent` may lead to a create, and `Unknown`
/// never leads to a create or a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderView {
    Present(ProviderServer),
    /// The provider authoritatively said the server does not exist.
    Absent,
    /// The read failed or timed out; the reason is for logs and status.
    Unknown(String),
    /// There is no cloud account to ask as: the Server's Identity (or its
    /// OpenstackIdentity) is gone, so no provider project can hold a server
    /// of it. Like `Unknown` it never leads to a create or a delete; a
    /// deleting Server is then released without one.
    NoIdentity,
}

impl ProviderView {
    /// Whether the provider was asked and answered (present or absent).
    pub fn is_known(&self) -> bool {
        matches!(self, ProviderView::Present(_) | ProviderView::Absent)
    }
}

/// Everything one reconcile pass needs to know besides the Server itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The Identity named by the identity label, if it exists.
    pub identity: Option<Identity>,
    /// Networks in the Server's namespace carrying its identity label.
    pub networks: Vec<Consumed>,
    /// The provider's network ID of a Network, by name, where its status
    /// records one (`status.openstack.networkID`).
    pub network_provider_ids: BTreeMap<String, String>,
    /// Security groups in the Server's namespace carrying its identity label.
    pub security_groups: Vec<Consumed>,
    /// SSH certificate authorities in the Server's namespace.
    pub ssh_certificate_authorities: Vec<SshCertificateAuthority>,
    /// Resources of the Server's namespace that carry its reference but
    /// belong to another identity than its label names (left from before an
    /// identity label change). Every one is released.
    pub other_identity_references: Vec<(ResourceKind, Consumed)>,
    pub provider: ProviderView,
}

impl Default for Facts {
    fn default() -> Self {
        Facts {
            identity: None,
            networks: Vec::new(),
            network_provider_ids: BTreeMap::new(),
            security_groups: Vec::new(),
            ssh_certificate_authorities: Vec::new(),
            other_identity_references: Vec::new(),
            provider: ProviderView::Absent,
        }
    }
}
