use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::model::{Consumed, ResourceKind};
use crate::port::{AttachedResource, Networking, ProviderServer};

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
    /// There is no cloud account to ask as: the Server's Identity, or what
    /// its region's identity source reads (e.g. an OpenstackIdentity), is
    /// not found. Like `Unknown` it never leads to a create or a delete. A
    /// deleting Server is released without one only when the Identity
    /// itself is gone or being deleted (its project goes with it); a missing
    /// OpenstackIdentity under an Identity that stays is no evidence that the
    /// project is gone, and the Server waits.
    NoIdentity,
    /// This controller has no cloud for the Server's region (why is typed).
    /// Like `Unknown` it never leads to a create or a delete, and a deleting
    /// Server is not released: its provider server may live in a cloud this
    /// controller cannot reach.
    RegionUnserved(RegionUnserved),
}

/// Why this controller cannot ask the provider of a Server's region. The
/// names come from the controller's configuration and the Region resource
/// (`spec.provider`, at most 63 characters in uni-region's schema).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionUnserved {
    /// No cloud is configured for the region here; `provider` is what its
    /// Region resource names, when one is known.
    NotConfigured { region: String, provider: Option<String> },
    /// The Region resource names a provider this controller cannot act on.
    UnsupportedProvider { region: String, provider: String },
    /// The Region resource names another provider than the cloud this
    /// controller is configured with for the region.
    ProviderMismatch { region: String, declared: String, configured: String },
}

impl RegionUnserved {
    pub fn region(&self) -> &str {
        match self {
            RegionUnserved::NotConfigured { region, .. }
            | RegionUnserved::UnsupportedProvider { region, .. }
            | RegionUnserved::ProviderMismatch { region, .. } => region,
        }
    }

    /// What is wrong and what to fix, in one sentence.
    pub fn message(&self) -> String {
        match self {
            RegionUnserved::NotConfigured { region, provider: None } => {
                format!("no cloud is configured for region {region} in this controller; configure one for it")
            }
            RegionUnserved::NotConfigured { region, provider: Some(provider) } => format!(
                "region {region}'s Region resource names provider {provider:?}, but no cloud is configured for it in \
                 this controller; configure one for it"
            ),
            RegionUnserved::UnsupportedProvider { region, provider } => format!(
                "region {region}'s Region resource names provider {provider:?}, which this controller does not \
                 support; a controller for that provider must serve it"
            ),
            RegionUnserved::ProviderMismatch { region, declared, configured } => format!(
                "region {region}'s Region resource names provider {declared:?}, but this controller is configured \
                 with a {configured} cloud for it; correct the Region or the controller's configuration"
            ),
        }
    }
}

impl ProviderView {
    /// Whether the provider was asked and answered (present or absent).
    pub fn is_known(&self) -> bool {
        matches!(self, ProviderView::Present(_) | ProviderView::Absent)
    }
}

/// What the provider says about the Server's resources besides its server
/// (ports, floating IPs). Read only when the core asks for it
/// ([`reads_attachments`](super::reads_attachments)); a deleting Server is
/// released only on `Known` with nothing in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AttachmentsView {
    /// Not read in this pass: nothing is known (never taken for "none").
    #[default]
    NotRead,
    /// The provider listed them with authority: these, and no others.
    Known(Vec<AttachedResource>),
    /// The read failed; the reason is for status.
    Unknown(String),
}

/// What the provider says about the port a present server boots with and
/// the floating IP on it. Read only when the core asks for it
/// ([`reads_networking`](super::reads_networking)); the floating IP and the
/// port's security groups and address pairs follow the spec on every pass
/// that reads it (DESIGN "The port and the floating IP follow the spec").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NetworkingView {
    /// Not read in this pass: nothing is known (never taken for "none").
    #[default]
    NotRead,
    /// The provider listed them with authority.
    Known(Networking),
    /// The read failed; the reason is for status.
    Unknown(String),
}

/// How the pass came by its [`ProviderView`]. A view read in the pass is
/// live; a listed one is what the provider said earlier without being asked
/// about this Server: the monitor's latest list of the Server's (region,
/// identity), or this controller's own create answer since. Whether a
/// listed view is enough to act on is the core's rule,
/// [`live_read_needed`](super::live_read_needed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProviderRead {
    /// Asked in this pass.
    #[default]
    Live,
    /// Remembered from `at`: no later than the list started (what it shows
    /// existed then or later; what it lacks did not exist then), in whole
    /// seconds as create notes are; or when a create's answer arrived.
    Listed { at: Timestamp },
}

/// Everything one reconcile pass needs to know besides the Server itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The consumed resources found, by kind, each kind as its
    /// [`ResourceKind::scope`] says (the Identity of the label, the Networks
    /// and security groups carrying it, the namespace's SSH certificate
    /// authorities). A kind with nothing found may be missing.
    pub consumed: BTreeMap<ResourceKind, Vec<Consumed>>,
    /// Resources of the Server's namespace that carry its reference but
    /// belong to another identity than its label names (left from before an
    /// identity label change). Every one is released.
    pub other_identity_references: Vec<(ResourceKind, Consumed)>,
    pub provider: ProviderView,
    /// Where `provider` came from.
    pub provider_read: ProviderRead,
    /// The Server's ports and floating IPs, when the core asked for them.
    pub attachments: AttachmentsView,
    /// The present server's port and floating IP, when the core asked for them.
    pub networking: NetworkingView,
    /// A boot an earlier read of this pass showed (a listed record read again
    /// live): the provider reported it, so it is latched whatever the later
    /// read says (the server may have vanished in between).
    pub boot_seen: Option<Timestamp>,
}

impl Default for Facts {
    fn default() -> Self {
        Facts {
            consumed: BTreeMap::new(),
            other_identity_references: Vec::new(),
            provider: ProviderView::Absent,
            provider_read: ProviderRead::Live,
            attachments: AttachmentsView::NotRead,
            networking: NetworkingView::NotRead,
            boot_seen: None,
        }
    }
}

impl Facts {
    /// The resources of `kind` found.
    pub fn of(&self, kind: ResourceKind) -> &[Consumed] {
        self.consumed.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// The resource of `kind` named `name`, if found.
    pub fn find(&self, kind: ResourceKind, name: &str) -> Option<&Consumed> {
        self.of(kind).iter().find(|resource| resource.name == name)
    }

    /// The resource of `kind` named `name`, to change it (for fakes that
    /// keep their world as facts).
    pub fn find_mut(&mut self, kind: ResourceKind, name: &str) -> Option<&mut Consumed> {
        self.consumed.get_mut(&kind)?.iter_mut().find(|resource| resource.name == name)
    }

    /// Adds a resource of `kind`.
    pub fn insert(&mut self, kind: ResourceKind, resource: Consumed) {
        self.consumed.entry(kind).or_default().push(resource);
    }

    /// Builder form of [`Facts::insert`].
    pub fn with(mut self, kind: ResourceKind, resource: Consumed) -> Self {
        self.insert(kind, resource);
        self
    }

    /// The Identity named by the identity label, if it exists.
    pub fn identity(&self) -> Option<&Consumed> {
        self.of(ResourceKind::Identity).first()
    }

    /// Removes every resource of `kind`.
    pub fn remove(&mut self, kind: ResourceKind) {
        self.consumed.remove(&kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unserved_ways(region: &str) -> [RegionUnserved; 3] {
        [
            RegionUnserved::NotConfigured { region: region.into(), provider: None },
            RegionUnserved::UnsupportedProvider { region: region.into(), provider: "kubernetes".into() },
            RegionUnserved::ProviderMismatch {
                region: region.into(),
                declared: "simulated".into(),
                configured: "openstack".into(),
            },
        ]
    }

    /// Only an answer of the provider (the server is there, or it is not) is
    /// a known view; a failed read, a missing identity or an unserved region
    /// is not.
    #[test]
    fn only_an_answer_present_or_absent_is_a_known_view() {
        assert!(ProviderView::Present(ProviderServer::default()).is_known());
        assert!(ProviderView::Absent.is_known());
        assert!(!ProviderView::Unknown("read timed out".into()).is_known());
        assert!(!ProviderView::NoIdentity.is_known());
        for unserved in unserved_ways("region-a") {
            assert!(!ProviderView::RegionUnserved(unserved).is_known());
        }
    }

    /// Whichever way a region is unserved, it is named by `region()` and in
    /// the message that says what to fix.
    #[test]
    fn an_unserved_region_is_named_whatever_the_reason() {
        for unserved in unserved_ways("region-a") {
            assert_eq!(unserved.region(), "region-a");
            assert!(unserved.message().contains("region region-a"), "{}", unserved.message());
        }
    }
}
