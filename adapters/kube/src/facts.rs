//! Gathers the facts of one pass: the Identity, the consumed resources listed
//! by the Server's identity label, the SSH CAs of its namespace, and the
//! provider's view through the cloud port. Reads only; it decides nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::ListParams;
use kube::{Api, Client, Resource, ResourceExt};
use server_core::model::{IDENTITY_LABEL, REGION_LABEL, ResourceKind, Server};
use server_core::port::{CloudError, CloudPort, IdentityContext, PortFuture, ServerRef};
use server_core::{Facts, ProviderView};

use crate::convert::{consumed, core_identity, core_ssh_ca};
use crate::crd::{Identity, Network, SSHCertificateAuthority, SecurityGroup};
use crate::error::{Error, is_not_found};
use crate::identity::identity_context;
use crate::registry::CloudRegistry;

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
}

/// A consumed resource as last read: its resourceVersion (the precondition of
/// a finalizer write) and its finalizers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadResource {
    pub(crate) resource_version: String,
    pub(crate) finalizers: Vec<String>,
}

/// What one pass found.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub(crate) facts: Facts,
    /// Consumed resources by kind and name, for write preconditions.
    pub(crate) resources: BTreeMap<(ResourceKind, String), ReadResource>,
    /// The cloud to act on, or why there is none (the view is then unknown).
    pub(crate) cloud: Result<CloudHandle, String>,
}

impl Gathered {
    /// Facts for a Server the core will not look at (paused, released).
    pub(crate) fn skipped() -> Self {
        Gathered {
            facts: Facts { provider: ProviderView::Unknown("not read".into()), ..Facts::default() },
            resources: BTreeMap::new(),
            cloud: Err("not read".into()),
        }
    }
}

/// Reads everything the core needs about `server`.
pub(crate) async fn gather(
    client: &Client,
    clouds: &CloudRegistry,
    cloud_timeout: Duration,
    server: &Server,
) -> Result<Gathered, Error> {
    let namespace = server.meta.namespace.as_str();
    let mut gathered = Gathered {
        facts: Facts::default(),
        resources: BTreeMap::new(),
        cloud: Err("the server has no region or identity label".into()),
    };
    let identity_id = server.meta.label(IDENTITY_LABEL);
    if let Some(identity_id) = identity_id {
        let selector = ListParams::default().labels(&format!("{IDENTITY_LABEL}={identity_id}"));
        for network in list::<Network>(client, namespace, &selector).await? {
            gathered.remember(ResourceKind::Network, &network);
            gathered.facts.networks.push(consumed(&network.metadata));
        }
        for group in list::<SecurityGroup>(client, namespace, &selector).await? {
            gathered.remember(ResourceKind::SecurityGroup, &group);
            gathered.facts.security_groups.push(consumed(&group.metadata));
        }
        if let Some(identity) = get::<Identity>(client, namespace, identity_id).await? {
            gathered.remember(ResourceKind::Identity, &identity);
            gathered.facts.identity = Some(core_identity(&identity));
        }
    }
    for ca in list::<SSHCertificateAuthority>(client, namespace, &ListParams::default()).await? {
        gathered.remember(ResourceKind::SshCertificateAuthority, &ca);
        gathered.facts.ssh_certificate_authorities.push(core_ssh_ca(&ca));
    }

    if let (Some(region_id), Some(identity_id)) = (server.meta.label(REGION_LABEL), identity_id) {
        gathered.cloud = match clouds.get(region_id) {
            None => Err(format!("no cloud is configured for region {region_id}")),
            Some(cloud) => identity_context(client, namespace, region_id, identity_id)
                .await
                .map(|identity| CloudHandle { cloud: cloud.clone(), identity, timeout: cloud_timeout })
                .map_err(|e| e.to_string()),
        };
    }
    gathered.facts.provider = match &gathered.cloud {
        Err(reason) => ProviderView::Unknown(reason.clone()),
        Ok(handle) => provider_view(handle, &server_ref(server)).await,
    };
    Ok(gathered)
}

/// The provider's view: a record, an authoritative absence, or unknown.
pub(crate) async fn provider_view(handle: &CloudHandle, server: &ServerRef) -> ProviderView {
    match handle.call(|cloud| cloud.get(&handle.identity, server)).await {
        Ok(Some(record)) => ProviderView::Present(record),
        Ok(None) => ProviderView::Absent,
        Err(error) => ProviderView::Unknown(error.to_string()),
    }
}

pub(crate) fn server_ref(server: &Server) -> ServerRef {
    ServerRef { namespace: server.meta.namespace.clone(), name: server.meta.name.clone(), uid: server.meta.uid.clone() }
}

impl Gathered {
    fn remember<K: Resource>(&mut self, kind: ResourceKind, object: &K) {
        let read = ReadResource {
            resource_version: object.resource_version().unwrap_or_default(),
            finalizers: object.finalizers().to_vec(),
        };
        self.resources.insert((kind, object.name_any()), read);
    }
}

async fn list<K>(client: &Client, namespace: &str, params: &ListParams) -> Result<Vec<K>, Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(source) => Err(Error::kube(format!("listing {} in namespace {namespace}", K::plural(&())), source)),
    }
}

async fn get<K>(client: &Client, namespace: &str, name: &str) -> Result<Option<K>, Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(source) => Err(Error::kube(format!("reading {} {namespace}/{name}", K::kind(&())), source)),
    }
}
