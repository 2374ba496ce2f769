//! How many reference finalizers one shared object can hold, on the real
//! kube-apiserver and etcd: every Server on a Network or SecurityGroup puts
//! a finalizer of its own on it (DESIGN, reference edges), and etcd refuses
//! a write of more than `--max-request-bytes` (1.5 MiB by default), so a
//! shared object's references are bounded by their names' length.
//!
//! Needs the control plane of `.ci/build-control-plane` (skipped without it
//! outside CI).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use server_core::model::reference_finalizer;
use server_sim_testbed::control_plane::control_plane_or_skip;

/// A Network holding the references of `servers` Servers named like the
/// bench's (`server-00001`: 47 bytes a finalizer).
fn network_referenced_by(servers: usize) -> String {
    let finalizers: Vec<String> = (0..servers).map(|i| reference_finalizer(&format!("server-{i:05}"))).collect();
    json!({
        "apiVersion": "region.unikorn-cloud.org/v1alpha1",
        "kind": "Network",
        "metadata": {"name": format!("shared-{servers}"), "namespace": "limit", "finalizers": finalizers},
        "spec": {"prefix": "10.0.0.0/24"},
    })
    .to_string()
}

#[test]
fn a_shared_object_holds_30_000_references_and_etcd_refuses_40_000() {
    let Some(plane) = control_plane_or_skip() else { return };
    plane.install_crds().unwrap();
    plane.kubectl_checked(&["create", "namespace", "limit"], None).unwrap();
    let held = plane.kubectl_checked(&["create", "-f", "-"], Some(&network_referenced_by(30_000)));
    assert!(held.is_ok(), "30,000 references (1.44 MB): {held:?}");
    let refused = plane.kubectl_checked(&["create", "-f", "-"], Some(&network_referenced_by(40_000)));
    let refusal = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refusal.contains("request is too large"), "40,000 references (1.92 MB): {refusal}");
}
