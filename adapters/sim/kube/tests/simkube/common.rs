//! Shared fixtures: a test CRD made with kube-derive, clients, and polling helpers.

use std::future::Future;
use std::time::Duration;

use kube::{Client, CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use server_simkube::SimKube;

/// A namespaced test resource with a status subresource and printer columns.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "test.simkube.io",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    derive = "PartialEq",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WidgetSpec {
    pub(crate) size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) color: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) observed_generation: Option<i64>,
}

/// A cluster-scoped test resource without a status subresource.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "test.simkube.io", version = "v1", kind = "Gadget")]
pub(crate) struct GadgetSpec {
    pub(crate) mode: String,
}

/// A server serving Widgets and Gadgets, with fast bookmarks.
pub(crate) fn sim() -> SimKube {
    let sim = SimKube::builder().seed(7).bookmark_interval(Duration::from_millis(50)).build();
    for crd in [Widget::crd(), Gadget::crd()] {
        let crd = serde_json::to_value(crd).expect("CRD serializes");
        sim.install_crd(crd).expect("CRD installs");
    }
    sim
}

/// An in-process kube client over the router.
pub(crate) fn client(sim: &SimKube) -> Client {
    Client::new(sim.router(), "default")
}

pub(crate) fn widget(name: &str, size: i32) -> Widget {
    Widget::new(name, WidgetSpec { size, color: None })
}

/// The real Server CRD of the Go implementation.
pub(crate) fn server_crd() -> serde_json::Value {
    let path =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../fixtures/unikorn-crds/region.unikorn-cloud.org_servers.yaml");
    let text = std::fs::read_to_string(path).expect("Server CRD fixture is readable");
    serde_saphyr::from_str(&text).expect("Server CRD fixture is YAML")
}

/// Runs a future with a five-second limit.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}
