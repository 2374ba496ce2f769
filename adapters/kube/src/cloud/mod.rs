//! Cloud access: the cloud port of each region, the identity a Server calls
//! it as, the provider's view of one Server through them, and the latest
//! lists the monitor took (`listings`). The pass's facts, the monitor and
//! `explain` reach a cloud only through here.

mod listings;
mod openstack_identity;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use server_core::ProviderView;
use server_core::model::Server;
use server_core::port::{CloudError, CloudPort, IdentityContext, PortFuture, ServerRef};

pub(crate) use listings::{GroupKey, ProviderListings};
pub use registry::CloudRegistry;

use crate::crd::OpenstackIdentity;

/// The cloud of a Server's region, with the identity to call it as.
#[derive(Clone)]
pub(crate) struct CloudHandle {
    pub(crate) cloud: Arc<dyn CloudPort>,
    pub(crate) identity: IdentityContext,
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for CloudHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudHandle").field("identity", &self.identity).finish_non_exhaustive()
    }
}

impl CloudHandle {
    /// Runs one cloud call under the configured timeout; an expired call is
    /// a provider timeout, whose outcome is unknown.
    pub(crate) async fn call<'a, T>(
        &'a self,
        call: impl FnOnce(&'a dyn CloudPort) -> PortFuture<'a, T>,
    ) -> Result<T, CloudError> {
        match tokio::time::timeout(self.timeout, call(self.cloud.as_ref())).await {
            Ok(result) => result,
            Err(_) => Err(CloudError::Timeout { message: format!("no answer within {:?}", self.timeout) }),
        }
    }

    /// The provider's view of `server`: a record, an authoritative absence,
    /// or unknown.
    pub(crate) async fn provider_view(&self, server: &Server) -> ProviderView {
        let server = server_ref(server);
        match self.call(|cloud| cloud.get(&self.identity, &server)).await {
            Ok(Some(record)) => ProviderView::Present(record),
            Ok(None) => ProviderView::Absent,
            Err(error) => ProviderView::Unknown(error.to_string()),
        }
    }
}

/// Why a Server's cloud cannot be called; the provider's view is then
/// unknown and the pass yields (so an identity too new for the cache only
/// delays it).
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum NoCloud {
    #[error("no cloud is configured for region {region}")]
    NoRegion { region: String },
    #[error("OpenstackIdentity {namespace}/{name} not found")]
    NoIdentity { namespace: String, name: String },
}

impl CloudRegistry {
    /// The cloud of `region_id`, called as the identity `identity_id` of
    /// `namespace`, whose OpenstackIdentity (the cached or live copy the
    /// caller read) is `identity`. Credentials go to the cloud port only,
    /// never into logs; outdated ones make the cloud refuse the call, and
    /// the provider's view is then unknown.
    pub(crate) fn handle(
        &self,
        namespace: &str,
        region_id: &str,
        identity_id: &str,
        identity: Option<&OpenstackIdentity>,
        timeout: Duration,
    ) -> Result<CloudHandle, NoCloud> {
        let cloud = self.get(region_id).ok_or_else(|| NoCloud::NoRegion { region: region_id.to_owned() })?;
        let identity = identity
            .map(|identity| openstack_identity::context_from(identity, region_id, identity_id))
            .ok_or_else(|| NoCloud::NoIdentity { namespace: namespace.to_owned(), name: identity_id.to_owned() })?;
        Ok(CloudHandle { cloud: cloud.clone(), identity, timeout })
    }
}

/// The monitor group a Server's provider server is listed in: its
/// (namespace, region, identity), `None` without both labels.
pub(crate) fn group_of(server: &Server) -> Option<GroupKey> {
    let region = server.meta.label(server_core::model::REGION_LABEL)?;
    let identity = server.meta.label(server_core::model::IDENTITY_LABEL)?;
    Some((server.meta.namespace.clone(), region.to_owned(), identity.to_owned()))
}

/// How the cloud port names a Server.
pub(crate) fn server_ref(server: &Server) -> ServerRef {
    ServerRef { namespace: server.meta.namespace.clone(), name: server.meta.name.clone(), uid: server.meta.uid.clone() }
}
