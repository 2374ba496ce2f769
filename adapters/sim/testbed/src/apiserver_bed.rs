//! The reference API server as a test bed: a [`ControlPlane`] with the CRDs
//! a Server touches, a tenant seeded through the API as the region's other
//! controllers would leave it, the operator's ServiceAccount under the RBAC
//! it ships with, and an admin client. Unlike [`crate::KubeBed`] nothing
//! reaches into a store: kube-apiserver assigns every uid and
//! resourceVersion, and its audit log counts the requests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::control_plane::{ControlPlane, ControlPlaneError};
use crate::{Error, Tenant};

/// The kinds of `region.unikorn-cloud.org/v1alpha1` the bed writes, by plural.
const KINDS: [(&str, &str); 6] = [
    ("servers", "Server"),
    ("identities", "Identity"),
    ("openstackidentities", "OpenstackIdentity"),
    ("networks", "Network"),
    ("securitygroups", "SecurityGroup"),
    ("sshcertificateauthorities", "SSHCertificateAuthority"),
];

/// kube-apiserver and etcd serving the operator's kinds, and an admin client.
pub struct ApiServerBed {
    pub plane: ControlPlane,
    /// The admin (`system:masters`), default namespace the tenant's.
    pub client: kube::Client,
}

impl ApiServerBed {
    /// Starts the control plane, installs the CRDs and creates `namespace`.
    pub async fn start(namespace: &str) -> Result<Self, Error> {
        let plane = ControlPlane::start()?;
        plane.install_crds()?;
        plane.kubectl_checked(&["create", "namespace", namespace], None)?;
        let client = client(&plane.kubeconfig(), namespace).await?;
        Ok(ApiServerBed { plane, client })
    }

    /// Seeds the tenant's Identity (its status set as its controller would,
    /// when `identity_ready`) and OpenstackIdentity.
    pub async fn seed_tenant(&self, tenant: &Tenant, identity_ready: bool) -> Result<(), Error> {
        self.create("identities", tenant.identity(false)).await?;
        if identity_ready {
            let status = Patch::Merge(json!({ "status": Tenant::provisioned() }));
            self.api("identities", &tenant.namespace)
                .patch_status(&tenant.identity, &PatchParams::default(), &status)
                .await
                .map_err(|source| seed_error("identities", &tenant.identity, source))?;
        }
        self.create("openstackidentities", tenant.openstack_identity()).await.map(drop)
    }

    /// Seeds a consumed resource of the tenant with `spec`.
    pub async fn seed(&self, tenant: &Tenant, resource: &str, name: &str, spec: Value) -> Result<(), Error> {
        self.create(resource, tenant.object(name, spec)).await.map(drop)
    }

    /// Creates an object of one of the operator's kinds (no `kind` needed);
    /// the object as the API server stored it.
    pub async fn create(&self, resource: &str, mut object: Value) -> Result<DynamicObject, Error> {
        let (kind, namespace, name) = identify(resource, &mut object)?;
        let object: DynamicObject = serde_json::from_value(object).map_err(|e| Error::Object {
            resource: resource.into(),
            name: name.clone(),
            reason: e.to_string(),
        })?;
        self.api(resource, &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|source| seed_error(kind, &name, source))
    }

    /// Applies a merge patch to an object's spec side (not its status).
    pub async fn merge_patch(&self, resource: &str, namespace: &str, name: &str, patch: Value) -> Result<(), Error> {
        self.api(resource, namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|source| seed_error(resource, name, source))
    }

    /// The typed API of one of the operator's kinds in `namespace`.
    pub fn api(&self, resource: &str, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &api_resource(resource))
    }

    /// Applies `manifests` (the operator's RBAC, as deploy/ ships it) and
    /// returns a kubeconfig authenticating as the ServiceAccount
    /// `namespace/name` they grant, with a token as a pod of it would have,
    /// and its user name as the audit log records it.
    pub fn service_account(&self, manifests: &[&str], namespace: &str, name: &str) -> Result<(PathBuf, String), Error> {
        for manifest in manifests {
            self.plane.kubectl_checked(&["apply", "--server-side", "-f", "-"], Some(manifest))?;
        }
        Ok((
            self.plane.service_account_kubeconfig(namespace, name),
            format!("system:serviceaccount:{namespace}:{name}"),
        ))
    }
}

impl std::fmt::Debug for ApiServerBed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerBed").field("plane", &self.plane).finish_non_exhaustive()
    }
}

/// `ApiResource` of one of the operator's kinds by plural.
fn api_resource(resource: &str) -> ApiResource {
    let kind = KINDS.iter().find(|(plural, _)| *plural == resource).map_or("Unknown", |(_, kind)| kind);
    let mut api = ApiResource::from_gvk(&GroupVersionKind::gvk("region.unikorn-cloud.org", "v1alpha1", kind));
    api.plural = resource.into();
    api
}

/// Sets `kind` and `apiVersion`; the kind, namespace and name.
fn identify(resource: &str, object: &mut Value) -> Result<(&'static str, String, String), Error> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let Some((_, kind)) = KINDS.iter().find(|(plural, _)| *plural == resource) else {
        return Err(Error::Object { resource: resource.into(), name, reason: "not a kind of the operator's".into() });
    };
    object["kind"] = json!(kind);
    object["apiVersion"] = json!(crate::API_VERSION);
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
    Ok((kind, namespace, name))
}

fn seed_error(resource: &str, name: &str, source: kube::Error) -> Error {
    Error::Api { resource: resource.into(), name: name.into(), source: Box::new(source) }
}

/// A client from a kubeconfig file, its default namespace `namespace`.
async fn client(kubeconfig: &std::path::Path, namespace: &str) -> Result<kube::Client, Error> {
    let url = kubeconfig.display().to_string();
    let file = Kubeconfig::read_from(kubeconfig)
        .map_err(|source| Error::Client { url: url.clone(), source: Box::new(source.into()) })?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|source| Error::Client { url: url.clone(), source: Box::new(source.into()) })?;
    config.default_namespace = namespace.into();
    kube::Client::try_from(config).map_err(|source| Error::Client { url, source: Box::new(source) })
}

impl From<ControlPlaneError> for Error {
    fn from(error: ControlPlaneError) -> Self {
        Error::ControlPlane(Box::new(error))
    }
}

/// The Servers of a namespace as the admin watches them, user data left out:
/// what a bench or test reads to see where each stands without listing
/// 10,000 objects of 32 KB again and again.
pub struct ServerMirror {
    objects: Arc<Mutex<HashMap<String, Arc<Value>>>>,
    synced: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerMirror {
    /// Starts watching the Servers of `namespace`.
    pub fn start(bed: &ApiServerBed, namespace: &str) -> Self {
        let objects: Arc<Mutex<HashMap<String, Arc<Value>>>> = Arc::default();
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let stream = watcher(bed.api("servers", namespace), watcher::Config::default()).default_backoff();
        let mirror = Arc::clone(&objects);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listing: Option<HashMap<String, Arc<Value>>> = None;
            while let Some(event) = stream.next().await {
                let lock = || mirror.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    Ok(watcher::Event::Init) => listing = Some(HashMap::new()),
                    Ok(watcher::Event::InitApply(object)) => {
                        if let (Some(listing), Some((name, value))) = (listing.as_mut(), without_user_data(&object)) {
                            listing.insert(name, value);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listing) = listing.take() {
                            *lock() = listing;
                        }
                        synced_tx.send_replace(true);
                    }
                    Ok(watcher::Event::Apply(object)) => {
                        if let Some((name, value)) = without_user_data(&object) {
                            lock().insert(name, value);
                        }
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        if let Some(name) = object.metadata.name {
                            lock().remove(&name);
                        }
                    }
                    // The backoff paces the retry; the mirror keeps what it had.
                    Err(_) => {}
                }
            }
        });
        ServerMirror { objects, synced, task }
    }

    /// Waits until the first list is in.
    pub async fn synced(&mut self) {
        // The sender lives as long as the task; a stopped task has nothing to wait for.
        let _ = self.synced.wait_for(|synced| *synced).await;
    }

    /// The Server `name` as last seen, without its user data.
    pub fn get(&self, name: &str) -> Option<Arc<Value>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }
}

impl std::fmt::Debug for ServerMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMirror").field("synced", &*self.synced.borrow()).finish_non_exhaustive()
    }
}

impl Drop for ServerMirror {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn without_user_data(object: &DynamicObject) -> Option<(String, Arc<Value>)> {
    let name = object.metadata.name.clone()?;
    let mut value = serde_json::to_value(object).ok()?;
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("userData");
    }
    Some((name, Arc::new(value)))
}
