//! The end-to-end world on the reference API server: a [`ControlPlane`]
//! with the upstream CRDs of the kinds a Server consumes and our Server CRD,
//! the tenant a Server of [`REGION`] needs (a ready Identity with its
//! OpenstackIdentity, a Network and a SecurityGroup), seeded with kubectl as
//! the region's other controllers would leave them, and a SimCloud for the
//! operator's replicas to share.
//!
//! Unlike [`crate::Env`] nothing here reaches into a store: every write and
//! read goes through kube-apiserver, so the server assigns uids and
//! resourceVersions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use server_simcloud::{CloudConfig, Fate, SimCloud, Timing};

use crate::control_plane::{ControlPlane, control_plane_or_skip, expect_success};
use crate::{IDENTITY, NAMESPACE, NETWORK, REGION, SECURITY_GROUP, tenant};

/// A control plane serving a seeded tenant, and the cloud the operator uses.
#[derive(Debug)]
pub struct RealWorld {
    pub plane: ControlPlane,
    pub cloud: SimCloud,
}

impl RealWorld {
    /// `None` (with a message) when the control plane is not built, outside CI.
    pub fn start(seed: u64) -> Option<RealWorld> {
        let plane = control_plane_or_skip()?;
        plane.kubectl_ok(&["create", "namespace", NAMESPACE]);
        plane.install_crds().unwrap_or_else(|e| panic!("installing the CRDs: {e}"));
        // Clean servers that build in seconds: a real clock runs these tests.
        let mut cloud = CloudConfig::reliable(seed);
        cloud.mix.timing = Timing::FAST;
        let world = RealWorld { plane, cloud: SimCloud::new(cloud) };
        world.seed_tenant();
        Some(world)
    }

    /// A client configuration as the admin, through `via` (a proxy in front
    /// of the API server) when given.
    pub async fn kube_config(&self, via: Option<SocketAddr>) -> kube::Config {
        let kubeconfig = Kubeconfig::read_from(self.plane.kubeconfig())
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.plane.kubeconfig().display()));
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("the admin kubeconfig does not load: {e}"));
        if let Some(addr) = via {
            let url = format!("https://{addr}");
            config.cluster_url = url.parse().unwrap_or_else(|e| panic!("bad url {url}: {e}"));
        }
        config.default_namespace = NAMESPACE.into();
        config
    }

    /// Creates a Server of the tenant with kubectl; its uid.
    pub fn create_server(&self, name: &str, spec: Value) -> String {
        let object = json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1",
            "kind": "Server",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {
                    server_core::model::REGION_LABEL: REGION,
                    server_core::model::IDENTITY_LABEL: IDENTITY,
                },
            },
            "spec": spec,
        });
        let output = self
            .plane
            .kubectl_with_input(&["create", "-o", "jsonpath={.metadata.uid}", "-f", "-"], &object.to_string());
        expect_success(&format!("creating Server {name}"), &output)
    }

    /// Creates a Server whose cloud fate is scripted before the operator can
    /// act on it: created paused, its fate scripted by the uid the API server
    /// gave it, then unpaused (a spec change, which wakes a pass).
    pub fn create_server_with_fate(&self, name: &str, fate: Fate, spec: Value) -> String {
        let mut paused = spec;
        paused["pause"] = json!(true);
        let uid = self.create_server(name, paused);
        self.cloud.script(&uid, fate);
        let resume = json!({ "spec": { "pause": false } }).to_string();
        self.plane.kubectl_ok(&["-n", NAMESPACE, "patch", "server", name, "--type=merge", "-p", &resume]);
        uid
    }

    /// The operator's Events about a Server, by reason, a series counted as
    /// its count (events.k8s.io/v1, as `kubectl events` reads them).
    pub fn events(&self, server: &str) -> BTreeMap<String, u64> {
        let text = self.plane.kubectl_ok(&["-n", NAMESPACE, "get", "events.events.k8s.io", "-o", "json"]);
        let list: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let mut counts = BTreeMap::new();
        for event in list["items"].as_array().into_iter().flatten() {
            if event["regarding"]["name"] != server {
                continue;
            }
            let reason = event["reason"].as_str().unwrap_or_default().to_owned();
            *counts.entry(reason).or_default() += event["series"]["count"].as_u64().unwrap_or(1);
        }
        counts
    }

    /// The finalizers of a consumed object of the tenant.
    pub fn finalizers(&self, resource: &str, name: &str) -> Vec<String> {
        let text = self.plane.kubectl_ok(&["-n", NAMESPACE, "get", resource, name, "-o", "json"]);
        let object: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        serde_json::from_value(object["metadata"]["finalizers"].clone()).unwrap_or_default()
    }

    /// The Server as the API server has it, or `None` once it is gone.
    pub fn server(&self, name: &str) -> Option<Value> {
        let output = self
            .plane
            .kubectl()
            .args(["-n", NAMESPACE, "get", "server", name, "-o", "json", "--ignore-not-found"])
            .output()
            .unwrap_or_else(|e| panic!("kubectl does not run: {e}"));
        let text = expect_success(&format!("reading Server {name}"), &output);
        if text.trim().is_empty() { None } else { serde_json::from_str(&text).ok() }
    }

    fn seed_tenant(&self) {
        let tenant = tenant();
        let with_kind = |mut object: Value, kind: &str| {
            object["kind"] = json!(kind);
            if let Some(fields) = object.as_object_mut() {
                fields.remove("status");
            }
            object
        };
        let objects = [
            with_kind(tenant.identity(false), "Identity"),
            with_kind(tenant.openstack_identity(), "OpenstackIdentity"),
            with_kind(tenant.object(NETWORK, json!({ "prefix": "192.168.0.0/24" })), "Network"),
            with_kind(tenant.object(SECURITY_GROUP, json!({})), "SecurityGroup"),
        ];
        for object in objects {
            let output = self.plane.kubectl_with_input(&["create", "-f", "-"], &object.to_string());
            expect_success("seeding the tenant", &output);
        }
        let ready = json!({ "status": server_sim_testbed::Tenant::provisioned() }).to_string();
        let identity = ["-n", NAMESPACE, "patch", "identity", IDENTITY, "--subresource=status", "--type=merge", "-p"];
        self.plane.kubectl_ok(&[&identity[..], &[ready.as_str()]].concat());
    }
}

/// Whether a Server (as the API server has it) runs and has latched its boot.
pub fn running(server: &Value) -> bool {
    server["status"]["phase"] == "Running" && server["status"]["provisionedAt"].is_string()
}

/// Polls `check` every `every` until it holds, or fails the test after
/// `within`; how long it took.
pub async fn wait_every(every: Duration, what: &str, within: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(every).await;
    }
    started.elapsed()
}

/// [`wait_every`] at a pace for what kubectl reads from the API server.
pub async fn wait_api(what: &str, within: Duration, check: impl FnMut() -> bool) -> Duration {
    wait_every(Duration::from_millis(200), what, within, check).await
}
