//! Cloud access: the cloud of each region (its port, its kind, its identity
//! source), the identity a Server calls it as, the provider's view of one
//! Server through them, and the latest lists the monitor took (`listings`).
//! The pass's facts, the monitor and `explain` reach a cloud only through
//! here, and nothing outside the identity sources knows what an identity is
//! read from.

mod identity;
mod listings;
mod openstack_identity;
mod provider;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use server_core::model::Server;
use server_core::port::{CloudError, CloudPort, IdentityContext, ListScope, PortFuture, ProviderListing, ServerRef};
use server_core::{AttachmentsView, NetworkingView, ProviderView, RegionUnserved};

pub(crate) use listings::{GroupKey, ProviderListings};
pub(crate) use provider::DeclaredProvider;
pub use provider::ProviderKind;
pub use registry::{CloudRegistry, RegionCloud};

use crate::cache::Caches;
use crate::error::Error;

/// How many cloud timeouts a whole list may take: 60 pages (60,000 Nova
/// servers) at one full timeout each.
const LIST_TIMEOUTS: u32 = 60;

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

    /// The provider servers of the identity `scope` asks for. A list is many requests, one
    /// a page, each under the port's own request timeout and asked again
    /// when it fails (`server_core::port::LIST_PAGE_ATTEMPTS`); this bounds the
    /// whole at [`LIST_TIMEOUTS`] timeouts, never one for all its pages.
    pub(crate) async fn list(&self, scope: ListScope) -> Result<ProviderListing, CloudError> {
        let bound = self.timeout.saturating_mul(LIST_TIMEOUTS);
        match tokio::time::timeout(bound, self.cloud.list(&self.identity, scope)).await {
            Ok(result) => result,
            Err(_) => Err(CloudError::Timeout { message: format!("listing took longer than {bound:?}") }),
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

    /// The port `provider_id` boots with and the floating IP on it, with the
    /// provider IDs the spec's security groups resolve to, or why that
    /// could not be told.
    pub(crate) async fn networking_view(&self, server: &Server, provider_id: &str) -> NetworkingView {
        let query = server_core::port::NetworkingQuery {
            server: server_ref(server),
            provider_id: provider_id.to_owned(),
            security_groups: server.spec.security_groups.iter().map(|g| g.id.clone()).collect(),
        };
        match self.call(|cloud| cloud.networking(&self.identity, &query)).await {
            Ok(networking) => NetworkingView::Known(networking),
            Err(error) => NetworkingView::Unknown(error.to_string()),
        }
    }

    /// What the provider holds of `server` besides its server (ports,
    /// floating IPs), or why that could not be told.
    pub(crate) async fn attachments_view(&self, server: &Server) -> AttachmentsView {
        let server = server_ref(server);
        match self.call(|cloud| cloud.attachments(&self.identity, &server)).await {
            Ok(attachments) => AttachmentsView::Known(attachments),
            Err(error) => AttachmentsView::Unknown(error.to_string()),
        }
    }
}

/// Why a Server's cloud cannot be called; the provider's view is then
/// unknown and the pass yields (so an identity too new for the cache only
/// delays it), or, for a region this controller does not serve, the core's
/// typed wait.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum NoCloud {
    #[error("{}", .0.message())]
    Unserved(RegionUnserved),
    #[error("{reads} {namespace}/{name} not found")]
    NoIdentity { reads: &'static str, namespace: String, name: String },
    #[error("the server has no region or identity label")]
    Unlabelled,
}

impl NoCloud {
    /// The provider's view when the cloud cannot be called; `identity_gone`
    /// says (for a deleting Server) that its identity or its cloud account is
    /// not found: the core releases it (even in a region this controller
    /// does not serve) only when the Identity itself is gone or being deleted.
    pub(crate) fn view(&self, identity_gone: bool) -> ProviderView {
        match self {
            _ if identity_gone => ProviderView::NoIdentity,
            NoCloud::Unserved(unserved) => ProviderView::RegionUnserved(unserved.clone()),
            NoCloud::NoIdentity { .. } | NoCloud::Unlabelled => ProviderView::Unknown(self.to_string()),
        }
    }
}

impl CloudRegistry {
    /// The cloud of `region_id`, called as the identity `identity_id` of
    /// `namespace` as the region's identity source finds it in the caches.
    pub(crate) fn cached_handle(
        &self,
        caches: &Caches,
        namespace: &str,
        region_id: &str,
        identity_id: &str,
        timeout: Duration,
    ) -> Result<CloudHandle, NoCloud> {
        let region = self.serving(region_id).map_err(NoCloud::Unserved)?;
        let identity = region.identity.cached(caches, namespace, region_id, identity_id);
        handle(region, namespace, identity_id, identity, timeout)
    }

    /// [`CloudRegistry::cached_handle`] with the identity read live.
    pub(crate) async fn live_handle(
        &self,
        client: &Client,
        namespace: &str,
        region_id: &str,
        identity_id: &str,
        timeout: Duration,
    ) -> Result<Result<CloudHandle, NoCloud>, Error> {
        let region = match self.serving(region_id) {
            Ok(region) => region,
            Err(unserved) => return Ok(Err(NoCloud::Unserved(unserved))),
        };
        let identity = region.identity.live(client, namespace, region_id, identity_id).await?;
        Ok(handle(region, namespace, identity_id, identity, timeout))
    }

    /// Whether the identity source of `region_id` no longer finds
    /// `identity_id`, read live (a cache too new to hold it must not release
    /// a Server). `false` for a region this controller does not serve.
    pub(crate) async fn identity_gone_live(
        &self,
        client: &Client,
        namespace: &str,
        region_id: &str,
        identity_id: &str,
    ) -> Result<bool, Error> {
        match self.serving(region_id) {
            Ok(region) => Ok(region.identity.live(client, namespace, region_id, identity_id).await?.is_none()),
            Err(_) => Ok(false),
        }
    }
}

fn handle(
    region: &RegionCloud,
    namespace: &str,
    identity_id: &str,
    identity: Option<IdentityContext>,
    timeout: Duration,
) -> Result<CloudHandle, NoCloud> {
    let identity = identity.ok_or_else(|| NoCloud::NoIdentity {
        reads: region.identity.reads(),
        namespace: namespace.to_owned(),
        name: identity_id.to_owned(),
    })?;
    Ok(CloudHandle { cloud: region.port.clone(), identity, timeout })
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
