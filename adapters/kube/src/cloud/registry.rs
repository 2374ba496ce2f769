//! Clouds by region: each region's port, with the kind of cloud it is and
//! the identity source its calls are made as, built at start-up and looked
//! up by a Server's region label. What the Region resources declare is
//! checked against them on every lookup.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use server_core::RegionUnserved;
use server_core::port::CloudPort;

use super::identity::{IdentityAsProject, IdentitySource};
use super::openstack_identity::OpenstackIdentities;
use super::provider::{DeclaredProvider, ProviderKind};

/// One region's cloud: its port, what kind of cloud it is, and where the
/// identity its calls are made as comes from.
#[derive(Clone)]
pub struct RegionCloud {
    pub(crate) provider: ProviderKind,
    pub(crate) port: Arc<dyn CloudPort>,
    pub(crate) identity: Arc<dyn IdentitySource>,
}

impl RegionCloud {
    /// An OpenStack region (or a stand-in for one, such as SimCloud behind
    /// the OpenStack simulator): identities from OpenstackIdentity.
    pub fn openstack(port: Arc<dyn CloudPort>) -> Self {
        RegionCloud { provider: ProviderKind::Openstack, port, identity: Arc::new(OpenstackIdentities) }
    }

    /// A simulated region: each Identity is its own project.
    pub fn simulated(port: Arc<dyn CloudPort>) -> Self {
        RegionCloud { provider: ProviderKind::Simulated, port, identity: Arc::new(IdentityAsProject) }
    }

    pub fn provider(&self) -> ProviderKind {
        self.provider
    }

    pub fn port(&self) -> &Arc<dyn CloudPort> {
        &self.port
    }
}

impl fmt::Debug for RegionCloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionCloud")
            .field("provider", &self.provider)
            .field("identity_source", &self.identity.reads())
            .finish_non_exhaustive()
    }
}

/// Region ID → the cloud serving it, and the providers the Region resources
/// name (shared by every copy, kept current by the Region watch).
#[derive(Clone, Default)]
pub struct CloudRegistry {
    clouds: BTreeMap<String, RegionCloud>,
    /// Kinds this binary can serve, beyond those registered: a Region naming
    /// one of them without a cloud here is a configuration gap, not an
    /// unsupported provider.
    supported: BTreeSet<ProviderKind>,
    declared: Arc<RwLock<BTreeMap<String, DeclaredProvider>>>,
    /// Region ID → the display name its Region resource's
    /// `unikorn-cloud.org/name` label gives (kept current like `declared`).
    names: Arc<RwLock<BTreeMap<String, String>>>,
}

impl CloudRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the cloud of a region.
    pub fn insert(&mut self, region_id: impl Into<String>, cloud: RegionCloud) {
        self.supported.insert(cloud.provider);
        self.clouds.insert(region_id.into(), cloud);
    }

    /// Builder form of [`CloudRegistry::insert`].
    pub fn with(mut self, region_id: impl Into<String>, cloud: RegionCloud) -> Self {
        self.insert(region_id, cloud);
        self
    }

    /// Says this binary could serve `kind` in a region it has no cloud for.
    pub fn supporting(mut self, kind: ProviderKind) -> Self {
        self.supported.insert(kind);
        self
    }

    pub fn get(&self, region_id: &str) -> Option<&RegionCloud> {
        self.clouds.get(region_id)
    }

    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.clouds.keys().map(String::as_str)
    }

    /// The cloud of `region_id`, or why this controller cannot serve it: no
    /// cloud here, or one of another kind than its Region resource names. A
    /// region with no Region resource known is served by its cloud as
    /// configured.
    pub(crate) fn serving(&self, region_id: &str) -> Result<&RegionCloud, RegionUnserved> {
        let declared = self.declared.read().unwrap_or_else(PoisonError::into_inner).get(region_id).cloned();
        let region = region_id.to_owned();
        match (self.clouds.get(region_id), declared) {
            (Some(cloud), None) => Ok(cloud),
            (Some(cloud), Some(DeclaredProvider::Known(kind))) if kind == cloud.provider => Ok(cloud),
            (Some(cloud), Some(declared)) => Err(RegionUnserved::ProviderMismatch {
                region,
                declared: declared.name().to_owned(),
                configured: cloud.provider.as_str().to_owned(),
            }),
            (None, None) => Err(RegionUnserved::NotConfigured { region, provider: None }),
            (None, Some(DeclaredProvider::Known(kind))) if self.supported.contains(&kind) => {
                Err(RegionUnserved::NotConfigured { region, provider: Some(kind.as_str().to_owned()) })
            }
            (None, Some(declared)) => {
                Err(RegionUnserved::UnsupportedProvider { region, provider: declared.name().to_owned() })
            }
        }
    }

    /// Replaces the Region resources' display names, region by region.
    pub(crate) fn name_regions(&self, names: BTreeMap<String, String>) {
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// A region's display name (the metrics' `region_name`): empty when no
    /// Region resource gives one.
    pub(crate) fn region_name(&self, region_id: &str) -> String {
        self.names.read().unwrap_or_else(PoisonError::into_inner).get(region_id).cloned().unwrap_or_default()
    }

    /// Replaces what the Region resources name, region by region.
    pub(crate) fn declare(&self, providers: BTreeMap<String, DeclaredProvider>) {
        *self.declared.write().unwrap_or_else(PoisonError::into_inner) = providers;
    }

    /// The clouds as leadership term `number` uses them: each region's port
    /// for that term (its memory of the cloud new, [`CloudPort::for_term`]),
    /// checking the term's gate before every request and refusing every
    /// call once the term is over. The declared providers stay shared.
    pub(crate) fn for_term(&self, fence: &crate::Fence, number: u64) -> CloudRegistry {
        let gate = crate::fence::TermGate { fence: fence.clone(), term: number };
        let term = server_core::port::Term { number, gate: Arc::new(gate.clone()) };
        let clouds = self
            .clouds
            .iter()
            .map(|(region, cloud)| {
                let port: Arc<dyn CloudPort> =
                    Arc::new(crate::fence::FencedCloud { cloud: cloud.port.for_term(&term), gate: gate.clone() });
                (region.clone(), RegionCloud { port, ..cloud.clone() })
            })
            .collect();
        CloudRegistry {
            clouds,
            supported: self.supported.clone(),
            declared: self.declared.clone(),
            names: self.names.clone(),
        }
    }
}

impl fmt::Debug for CloudRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let regions: BTreeMap<&str, ProviderKind> =
            self.clouds.iter().map(|(region, cloud)| (region.as_str(), cloud.provider)).collect();
        f.debug_struct("CloudRegistry").field("regions", &regions).finish()
    }
}

#[cfg(test)]
mod tests {
    use server_core::port::{
        CloudError, CreateRequest, DeleteProgress, IdentityContext, ListScope, PortFuture, ProviderListing,
        ProviderServer, RebuildRequest, ServerRef, Term,
    };

    use super::*;

    /// A port no test calls: serving is decided without asking the cloud.
    struct NoCalls;

    impl CloudPort for NoCalls {
        fn create<'a>(&'a self, _: &'a IdentityContext, _: &'a CreateRequest) -> PortFuture<'a, ProviderServer> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn delete<'a>(&'a self, _: &'a IdentityContext, _: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn rebuild<'a>(&'a self, _: &'a IdentityContext, _: &'a RebuildRequest) -> PortFuture<'a, ()> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn get<'a>(&'a self, _: &'a IdentityContext, _: &'a ServerRef) -> PortFuture<'a, Option<ProviderServer>> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn boot_read(&self, _: &IdentityContext, _: &str) -> Option<jiff::Timestamp> {
            None
        }
        fn list<'a>(&'a self, _: &'a IdentityContext, _: ListScope) -> PortFuture<'a, ProviderListing> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn attachments<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a ServerRef,
        ) -> PortFuture<'a, Vec<server_core::port::AttachedResource>> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn release<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::AttachedResource,
        ) -> PortFuture<'a, ()> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn networking<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::NetworkingQuery,
        ) -> PortFuture<'a, server_core::port::Networking> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn update_port<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::PortUpdate,
        ) -> PortFuture<'a, ()> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn ensure_floating_ip<'a>(
            &'a self,
            _: &'a IdentityContext,
            _: &'a server_core::port::FloatingIpRequest,
        ) -> PortFuture<'a, ()> {
            Box::pin(async { Err(CloudError::Unreachable { message: "not called in tests".into() }) })
        }
        fn for_term(&self, _: &Term) -> Arc<dyn CloudPort> {
            Arc::new(NoCalls)
        }
    }

    fn registry() -> CloudRegistry {
        CloudRegistry::new()
            .with("region-o", RegionCloud::openstack(Arc::new(NoCalls)))
            .with("region-s", RegionCloud::simulated(Arc::new(NoCalls)))
    }

    fn declare(registry: &CloudRegistry, regions: &[(&str, &str)]) {
        registry.declare(
            regions
                .iter()
                .map(|(region, provider)| ((*region).to_owned(), DeclaredProvider::parse(provider)))
                .collect(),
        );
    }

    fn served_kind(registry: &CloudRegistry, region: &str) -> Result<ProviderKind, RegionUnserved> {
        registry.serving(region).map(RegionCloud::provider)
    }

    #[test]
    fn each_region_is_served_by_its_own_kind_of_cloud_and_identity_source() {
        let registry = registry();
        assert_eq!(served_kind(&registry, "region-o"), Ok(ProviderKind::Openstack));
        assert_eq!(served_kind(&registry, "region-s"), Ok(ProviderKind::Simulated));
        let reads = |region: &str| registry.get(region).map(|cloud| cloud.identity.reads());
        assert_eq!(reads("region-o"), Some("OpenstackIdentity"));
        assert_eq!(reads("region-s"), Some("Identity"));
        // Regions whose Region names the kind they are configured with.
        declare(&registry, &[("region-o", "openstack"), ("region-s", "simulated")]);
        assert_eq!(served_kind(&registry, "region-o"), Ok(ProviderKind::Openstack));
        assert_eq!(served_kind(&registry, "region-s"), Ok(ProviderKind::Simulated));
    }

    #[test]
    fn a_region_its_region_resource_gives_another_provider_is_not_served() {
        let registry = registry();
        declare(&registry, &[("region-o", "simulated"), ("region-s", "kubernetes")]);
        assert_eq!(
            served_kind(&registry, "region-o"),
            Err(RegionUnserved::ProviderMismatch {
                region: "region-o".into(),
                declared: "simulated".into(),
                configured: "openstack".into()
            })
        );
        assert_eq!(
            served_kind(&registry, "region-s"),
            Err(RegionUnserved::ProviderMismatch {
                region: "region-s".into(),
                declared: "kubernetes".into(),
                configured: "simulated".into()
            })
        );
        // The Region is corrected: served again, with no restart.
        declare(&registry, &[("region-o", "openstack")]);
        assert_eq!(served_kind(&registry, "region-o"), Ok(ProviderKind::Openstack));
        assert_eq!(served_kind(&registry, "region-s"), Ok(ProviderKind::Simulated));
    }

    #[test]
    fn a_region_without_a_cloud_says_whether_its_provider_is_supported() {
        let registry = CloudRegistry::new()
            .with("region-o", RegionCloud::openstack(Arc::new(NoCalls)))
            .supporting(ProviderKind::Openstack);
        declare(&registry, &[("region-k", "kubernetes"), ("region-x", "simulated"), ("region-n", "openstack")]);
        let unsupported = |region: &str, provider: &str| {
            Err(RegionUnserved::UnsupportedProvider { region: region.into(), provider: provider.into() })
        };
        assert_eq!(served_kind(&registry, "region-k"), unsupported("region-k", "kubernetes"));
        assert_eq!(served_kind(&registry, "region-x"), unsupported("region-x", "simulated"), "not in this binary");
        assert_eq!(
            served_kind(&registry, "region-n"),
            Err(RegionUnserved::NotConfigured { region: "region-n".into(), provider: Some("openstack".into()) })
        );
        assert_eq!(
            served_kind(&registry, "region-unknown"),
            Err(RegionUnserved::NotConfigured { region: "region-unknown".into(), provider: None })
        );
    }

    #[test]
    fn each_terms_copy_shares_what_the_regions_declare() {
        let registry = registry();
        let fenced = registry.for_term(&crate::Fence::open(), 0);
        declare(&registry, &[("region-o", "kubernetes")]);
        assert!(fenced.serving("region-o").is_err());
        assert_eq!(fenced.get("region-s").map(RegionCloud::provider), Some(ProviderKind::Simulated));
    }
}
