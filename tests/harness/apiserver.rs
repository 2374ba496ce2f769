//! The API-server axis of [`crate::Env`]: SimKube (served in-process, seeded
//! through its store) or the reference kube-apiserver and etcd, where
//! everything goes through the API.
//!
//! On the real server one control plane serves every test of a test binary
//! (started by the first, stopped by its watchdog when the process ends),
//! each test in a namespace of its own with its own tenant. The operator
//! authenticates as deploy/base's ServiceAccount under deploy/base's RBAC,
//! confined to its test's namespace, so its requests are counted from the
//! audit log by user and namespace; the test seeds, edits and reads as the
//! admin, whose requests are not counted.
//!
//! A scenario picks nothing: [`crate::cloud_scenarios!`] runs each one with
//! [`API_SERVER`] scoped to its variant, and [`crate::Env::build_with`]
//! reads it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use server_sim_testbed::Tenant;
use server_simkube::CounterSnapshot;

use crate::control_plane::{ControlPlane, control_plane_or_skip};

/// Which API server an [`crate::Env`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiServer {
    /// SimKube, in-process (its fault injection, compaction and store edits
    /// available).
    SimKube,
    /// kube-apiserver v1.34 and etcd, shared by the tests of a binary.
    Real,
}

tokio::task_local! {
    /// The API server of the scenario being run (SimKube when unset).
    pub static API_SERVER: ApiServer;
}

/// The API server the running scenario asked for.
pub fn api_server() -> ApiServer {
    API_SERVER.try_with(|api| *api).unwrap_or(ApiServer::SimKube)
}

/// Runs `scenario` on the real API server under the test-wide deadline, or
/// skips it (with a message) when the control plane is not built, outside CI.
pub async fn on_the_real_server<T>(scenario: impl Future<Output = T>) {
    if shared().is_none() {
        return;
    }
    API_SERVER.scope(ApiServer::Real, crate::within(scenario)).await;
}

/// [`on_the_real_server`] under a deadline of its own, for a scenario that
/// waits on another process (the Go controller) longer than [`crate::within`] allows.
pub async fn on_the_real_server_within<T>(deadline: std::time::Duration, scenario: impl Future<Output = T>) {
    if shared().is_none() {
        return;
    }
    let bounded = async move {
        match tokio::time::timeout(deadline, scenario).await {
            Ok(_) => {}
            Err(_) => panic!("the test did not finish within {deadline:?}"),
        }
    };
    API_SERVER.scope(ApiServer::Real, bounded).await;
}

/// The operator's ServiceAccount as deploy/base ships it.
const OPERATOR_NAMESPACE: &str = "server-controller";
const OPERATOR_ACCOUNT: &str = "server-controller";
const RBAC: &str = include_str!("../../deploy/base/rbac.yaml");
const LEADER_ELECTION_RBAC: &str = include_str!("../../deploy/base/leader-election-rbac.yaml");

/// The control plane of this test binary, its CRDs and the operator's RBAC
/// installed, and the kubeconfig of the operator's ServiceAccount.
struct Shared {
    plane: ControlPlane,
    operator_kubeconfig: PathBuf,
    operator_user: String,
}

fn shared() -> Option<&'static Shared> {
    static SHARED: OnceLock<Option<Shared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let plane = control_plane_or_skip()?;
            plane.install_crds().unwrap_or_else(|e| panic!("installing the CRDs: {e}"));
            for manifest in [RBAC, LEADER_ELECTION_RBAC] {
                plane
                    .kubectl_checked(&["apply", "--server-side", "-f", "-"], Some(manifest))
                    .unwrap_or_else(|e| panic!("applying deploy/base's RBAC: {e}"));
            }
            let operator_kubeconfig = plane.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT);
            let operator_user = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}");
            Some(Shared { plane, operator_kubeconfig, operator_user })
        })
        .as_ref()
}

/// One test's namespace on the shared control plane.
pub struct RealApi {
    shared: &'static Shared,
    pub namespace: String,
    /// The admin, default namespace the test's.
    pub admin: kube::Client,
    /// deploy/base's ServiceAccount.
    pub operator: kube::Client,
}

impl std::fmt::Debug for RealApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealApi").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl RealApi {
    /// A fresh namespace on the shared control plane (started by the first
    /// test of the binary to ask).
    pub async fn start() -> RealApi {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let shared = shared().unwrap_or_else(|| panic!("no control plane: run the scenario with on_the_real_server"));
        let namespace = format!("e2e-{}", NEXT.fetch_add(1, Ordering::SeqCst));
        let admin = client(&shared.plane.kubeconfig(), &namespace).await;
        let operator = client(&shared.operator_kubeconfig, &namespace).await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        let object = serde_json::from_value(json!({ "metadata": { "name": namespace } }))
            .unwrap_or_else(|e| panic!("a namespace object: {e}"));
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {namespace}: {e}"));
        RealApi { shared, namespace, admin, operator }
    }

    /// The admin's API of `resource` (a plural of the operator's group, or
    /// `events`) in the test's namespace.
    pub fn api(&self, resource: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.admin.clone(), &self.namespace, &api_resource(resource))
    }

    /// The admin's kubeconfig, for a process of its own (the Go controller).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.shared.plane.kubeconfig()
    }

    /// A token of the ServiceAccount `namespace/name` (`kubectl create token`).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let token = self
            .shared
            .plane
            .kubectl_checked(&["create", "token", name, "-n", namespace, "--duration=2h"], None)
            .unwrap_or_else(|e| panic!("a token of {namespace}/{name}: {e}"));
        token.trim().to_owned()
    }

    /// Applies `manifest` as the admin (`kubectl apply --server-side`): a
    /// CRD of another version, say.
    pub fn apply(&self, manifest: &str) {
        self.shared
            .plane
            .kubectl_checked(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(manifest))
            .unwrap_or_else(|e| panic!("applying a manifest: {e}"));
    }

    /// What the operator requested about the test's namespace, from the audit log.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared
            .plane
            .audited_counters_in(&self.shared.operator_user, Some(&self.namespace))
            .unwrap_or_else(|e| panic!("reading the audit log: {e}"))
    }

    /// Creates an object (its `kind` from `resource`); the stored object.
    pub async fn create(&self, resource: &str, mut object: Value) -> Value {
        object["apiVersion"] = json!(api_resource(resource).api_version);
        object["kind"] = json!(api_resource(resource).kind);
        object["metadata"]["namespace"] = json!(self.namespace);
        let status = object.as_object_mut().and_then(|o| o.remove("status"));
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let dynamic: DynamicObject =
            serde_json::from_value(object).unwrap_or_else(|e| panic!("{resource}/{name} is no object: {e}"));
        let api = self.api(resource);
        let created = match api.create(&PostParams::default(), &dynamic).await {
            Ok(created) => created,
            // Seeding again replaces, spec and status, as a store insert does.
            Err(kube::Error::Api(answer)) if answer.code == 409 && answer.reason == "AlreadyExists" => {
                let mut replacement = dynamic;
                let existing = api.get(&name).await.unwrap_or_else(|e| panic!("reading {resource}/{name}: {e}"));
                replacement.metadata.resource_version = existing.metadata.resource_version;
                let mut replaced = api
                    .replace(&name, &PostParams::default(), &replacement)
                    .await
                    .unwrap_or_else(|e| panic!("replacing {resource}/{name}: {e}"));
                // A status subresource keeps the old status through a replace.
                if status.is_none() && replaced.data.get("status").is_some() {
                    replaced.data.as_object_mut().map(|data| data.remove("status"));
                    replaced = api
                        .replace_status(&name, &PostParams::default(), &replaced)
                        .await
                        .unwrap_or_else(|e| panic!("clearing the status of {resource}/{name}: {e}"));
                }
                replaced
            }
            Err(e) => panic!("creating {resource}/{name}: {e}"),
        };
        let mut created = serde_json::to_value(created).unwrap_or_default();
        // The status subresource ignores a status on create: set it after, as
        // the object's own controller would.
        if let Some(status) = status.filter(|s| !s.is_null()) {
            created = self.patch_status(resource, &name, status).await;
        }
        created
    }

    pub async fn patch_status(&self, resource: &str, name: &str, status: Value) -> Value {
        let patch = Patch::Merge(json!({ "status": status }));
        let patched = self
            .api(resource)
            .patch_status(name, &PatchParams::default(), &patch)
            .await
            .unwrap_or_else(|e| panic!("patching the status of {resource}/{name}: {e}"));
        serde_json::to_value(patched).unwrap_or_default()
    }

    pub async fn get(&self, resource: &str, name: &str) -> Option<Value> {
        let found = self.api(resource).get_opt(name).await.unwrap_or_else(|e| panic!("reading {resource}/{name}: {e}"));
        found.map(|object| serde_json::to_value(object).unwrap_or_default())
    }

    pub async fn list(&self, resource: &str) -> Vec<Value> {
        let list =
            self.api(resource).list(&Default::default()).await.unwrap_or_else(|e| panic!("listing {resource}: {e}"));
        list.items.into_iter().map(|object| serde_json::to_value(object).unwrap_or_default()).collect()
    }

    /// Edits an object as read and writes it back, its spec side and its
    /// status side each with its own update when changed (a conflict with
    /// the operator's own write retries the edit on a fresh read).
    pub async fn edit(&self, resource: &str, name: &str, edit: impl Fn(&mut Value)) {
        for _ in 0..20 {
            let Some(before) = self.get(resource, name).await else { panic!("editing {resource}/{name}: not found") };
            let mut after = before.clone();
            edit(&mut after);
            let api = self.api(resource);
            let as_object = |value: &Value| -> DynamicObject {
                serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{resource}/{name}: {e}"))
            };
            let mut result = Ok(());
            if after["status"] != before["status"] {
                match api.replace_status(name, &PostParams::default(), &as_object(&after)).await {
                    Ok(replaced) => after["metadata"]["resourceVersion"] = json!(replaced.metadata.resource_version),
                    Err(e) => result = Err(e),
                }
            }
            let main_changed = after["spec"] != before["spec"]
                || after["metadata"]["labels"] != before["metadata"]["labels"]
                || after["metadata"]["annotations"] != before["metadata"]["annotations"]
                || after["metadata"]["finalizers"] != before["metadata"]["finalizers"];
            if result.is_ok() && main_changed {
                result = api.replace(name, &PostParams::default(), &as_object(&after)).await.map(drop);
            }
            match result {
                Ok(()) => return,
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(e) => panic!("editing {resource}/{name}: {e}"),
            }
        }
        panic!("editing {resource}/{name}: conflicted 20 times");
    }

    pub async fn merge_patch(&self, resource: &str, name: &str, patch: Value) {
        self.api(resource)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patching {resource}/{name}: {e}"));
    }

    pub async fn delete(&self, resource: &str, name: &str) {
        self.api(resource)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {resource}/{name}: {e}"));
    }

    /// Seeds the tenant: its Identity (made ready through the status, as
    /// its controller would, when `ready`) and OpenstackIdentity.
    pub async fn seed_tenant(&self, tenant: &Tenant, ready: bool) {
        self.create("identities", tenant.identity(ready)).await;
        self.create("openstackidentities", tenant.openstack_identity()).await;
    }
}

/// Runs a future to completion from synchronous code on a multi-threaded
/// runtime (every end-to-end test runs on one): the reads and seeds the
/// scenarios make without `.await` on SimKube's store go through the API here.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// `ApiResource` of a plural of the operator's group, or of `events`
/// (events.k8s.io/v1, as the operator writes them).
fn api_resource(resource: &str) -> ApiResource {
    let kinds = [
        ("servers", "Server"),
        ("identities", "Identity"),
        ("openstackidentities", "OpenstackIdentity"),
        ("networks", "Network"),
        ("securitygroups", "SecurityGroup"),
        ("sshcertificateauthorities", "SSHCertificateAuthority"),
        ("regions", "Region"),
    ];
    let gvk = if resource == "events" {
        GroupVersionKind::gvk("events.k8s.io", "v1", "Event")
    } else {
        let kind = kinds.iter().find(|(plural, _)| *plural == resource).map_or("Unknown", |(_, kind)| kind);
        GroupVersionKind::gvk("region.unikorn-cloud.org", "v1alpha1", kind)
    };
    let mut api = ApiResource::from_gvk(&gvk);
    api.plural = resource.into();
    api
}

/// A client from a kubeconfig file, its default namespace `namespace`.
async fn client(kubeconfig: &std::path::Path, namespace: &str) -> kube::Client {
    let file = Kubeconfig::read_from(kubeconfig).unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{} does not load: {e}", kubeconfig.display()));
    config.default_namespace = namespace.into();
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("a client: {e}"))
}
