//! `deploy/`: the CRD is what `server-controller crd` prints, and the
//! Deployment runs the operator with probes, resources and a locked-down
//! security context. (`rbac.rs` checks the RBAC against observed use.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

fn deploy_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base").join(name)
}

#[test]
fn crd_yaml_is_up_to_date() {
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller")).arg("crd").output().expect("crd runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let generated = String::from_utf8(output.stdout).unwrap();
    let committed = std::fs::read_to_string(deploy_file("crd.yaml")).unwrap();
    assert!(
        generated == committed,
        "deploy/base/crd.yaml is stale; regenerate it with\n  cargo run -p server-controller -- crd > deploy/base/crd.yaml"
    );
}

/// The Helm chart installs the same CRD (its template adds only labels and
/// the keep policy; `helm.rs` checks the rendering).
#[test]
fn the_charts_crd_is_the_bases() {
    let chart = std::fs::read_to_string(deploy_file("../../charts/server-controller/files/crd.yaml")).unwrap();
    let base = std::fs::read_to_string(deploy_file("crd.yaml")).unwrap();
    assert!(
        chart == base,
        "charts/server-controller/files/crd.yaml differs from deploy/base/crd.yaml; regenerate both with\n  cargo run -p server-controller -- crd > deploy/base/crd.yaml\n  cp deploy/base/crd.yaml charts/server-controller/files/crd.yaml"
    );
}

fn deployment() -> Value {
    let text = std::fs::read_to_string(deploy_file("deployment.yaml")).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents.into_iter().find(|d| d["kind"] == "Deployment").expect("a Deployment")
}

#[test]
fn deployment_runs_the_operator_locked_down() {
    let deployment = deployment();
    // Leader election: two replicas, one acting, rolled one at a time with
    // the new one up before an old one goes.
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);

    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];

    assert_eq!(container["args"], json!(["run", "--log-format", "json"]));
    let pod_name = container["env"].as_array().and_then(|env| env.iter().find(|e| e["name"] == "POD_NAME"));
    assert_eq!(pod_name.map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]), Some(&json!("metadata.name")));

    let port = container["ports"].as_array().and_then(|ports| ports.first()).expect("a port");
    assert_eq!(port["containerPort"], 8080);
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(get["port"] == 8080 || get["port"] == port["name"], "{probe} port");
    }

    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(container["resources"][kind][resource].is_string(), "resources.{kind}.{resource}");
        }
    }

    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert!(security["capabilities"].get("add").is_none());
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
}

fn documents(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(deploy_file(name)).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn replicas_spread_across_nodes_and_a_disruption_leaves_one_running() {
    let deployment = deployment();
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let pod = &deployment["spec"]["template"]["spec"];
    let terms = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .expect("pod anti-affinity");
    let term = &terms[0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&term["labelSelector"]["matchLabels"], pod_labels, "the anti-affinity selects the operator's own pods");

    let container = &pod["containers"][0];
    let namespace = container["env"].as_array().and_then(|env| env.iter().find(|e| e["name"] == "POD_NAMESPACE"));
    assert_eq!(
        namespace.map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]),
        Some(&json!("metadata.namespace")),
        "the Lease lives in the pod's namespace"
    );
    // The drain after SIGTERM fits the grace period, with room to release the Lease.
    assert!(pod["terminationGracePeriodSeconds"].as_u64().expect("a grace period") > 20);

    let budgets = documents("pdb.yaml");
    let budget = budgets.iter().find(|d| d["kind"] == "PodDisruptionBudget").expect("a PodDisruptionBudget");
    assert_eq!(budget["metadata"]["namespace"], deployment["metadata"]["namespace"]);
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], pod_labels);
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
}

/// The production image builds the operator without the `sim` feature: no
/// `demo`, `simulate` or `--cloud sim`, and no simulator crate in the binary.
#[test]
fn dockerfile_builds_without_the_simulators() {
    let dockerfile = std::fs::read_to_string(deploy_file("../Dockerfile")).unwrap();
    let builds: Vec<&str> = dockerfile.lines().filter(|line| line.contains("cargo build")).collect();
    assert_eq!(builds.len(), 1, "one cargo build in deploy/Dockerfile: {builds:?}");
    let words: Vec<&str> = builds[0].split_whitespace().collect();
    assert!(
        words.contains(&"--no-default-features"),
        "deploy/Dockerfile must build with --no-default-features: {}",
        builds[0]
    );
    assert!(
        !words.iter().any(|word| word.starts_with("--features") || *word == "-F"),
        "no features in the production build: {}",
        builds[0]
    );
}

/// Every base image of the production image is pinned by digest, so a
/// rebuild cannot pick up different bytes under the same tag.
#[test]
fn dockerfile_base_images_are_pinned_by_digest() {
    let dockerfile = std::fs::read_to_string(deploy_file("../Dockerfile")).unwrap();
    let images: Vec<&str> = dockerfile
        .lines()
        .filter_map(|line| line.strip_prefix("FROM "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert_eq!(images.len(), 2, "a builder and a runtime image: {images:?}");
    for image in images {
        let digest = image.split_once("@sha256:").map(|(_, digest)| digest).unwrap_or_default();
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "deploy/Dockerfile's base image {image} is not pinned by a sha256 digest"
        );
    }
}
