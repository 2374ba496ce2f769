//! The Helm chart (`charts/server-controller`), with the real helm
//! (`.ci/build-helm`): it lints strictly, its values are checked against
//! values.schema.json, and it renders the objects of the kustomize base (and
//! of the example overlay, for the equivalent values) with the same RBAC
//! rules, args, env and probes. `real_apiserver.rs` installs it on a real
//! API server and runs the operator as it configures it.
//!
//! Without helm these tests skip with a message naming the script; under
//! `CI=true` they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::{chart_dir, helm_command, helm_or_skip};

/// The release name that gives the chart's objects the base's names.
const RELEASE: &str = "server-controller";
const NAMESPACE: &str = "server-controller";
const OVERLAY_VALUES: &str = "ci/example-overlay-values.yaml";

fn scratch() -> PathBuf {
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("server-controller-helm-{}-{unique}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn documents(text: &str) -> Vec<Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template` with extra arguments: the objects, or helm's error.
fn template(helm: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    let home = scratch();
    let output = helm_command(helm, &home)
        .args(["template", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE])
        .args(args)
        .output()
        .expect("helm runs");
    let _ = std::fs::remove_dir_all(&home);
    if output.status.success() {
        Ok(documents(&String::from_utf8(output.stdout).unwrap()))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn kustomize(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(dir))
        .output()
        .expect("kubectl runs (.ci/run-kubectl-deps installs it)");
    assert!(output.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&output.stderr));
    documents(&String::from_utf8(output.stdout).unwrap())
}

/// Labels and annotations that only say the object is Helm's: the release,
/// the chart and app versions, the keep policy.
const HELM_ONLY_KEYS: [&str; 5] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
    "helm.sh/resource-policy",
];

/// The object without what only says it is Helm's (empty maps left by that dropped).
fn without_helm_keys(value: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut kept = serde_json::Map::new();
            for (key, field) in fields {
                if HELM_ONLY_KEYS.contains(&key.as_str()) {
                    continue;
                }
                let field = without_helm_keys(field);
                let emptied = field.as_object().is_some_and(serde_json::Map::is_empty)
                    && matches!(key.as_str(), "labels" | "annotations");
                if !emptied {
                    kept.insert(key.clone(), field);
                }
            }
            Value::Object(kept)
        }
        Value::Array(items) => Value::Array(items.iter().map(without_helm_keys).collect()),
        other => other.clone(),
    }
}

fn by_kind_and_name(objects: &[Value]) -> BTreeMap<(String, String), Value> {
    objects
        .iter()
        .map(|o| {
            let key = (o["kind"].as_str().unwrap().to_owned(), o["metadata"]["name"].as_str().unwrap().to_owned());
            (key, without_helm_keys(o))
        })
        .collect()
}

/// Where two values differ, as paths.
fn differences(left: &Value, right: &Value, path: &str, found: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            for key in l.keys().chain(r.keys()).collect::<BTreeSet<_>>() {
                match (l.get(key), r.get(key)) {
                    (Some(a), Some(b)) => differences(a, b, &format!("{path}.{key}"), found),
                    (a, b) => found.push(format!("{path}.{key}: {a:?} against {b:?}")),
                }
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (index, (a, b)) in l.iter().zip(r).enumerate() {
                differences(a, b, &format!("{path}[{index}]"), found);
            }
        }
        (a, b) if a == b => {}
        (a, b) => found.push(format!("{path}: {a} against {b}")),
    }
}

/// The object's own labels taken out: the chart labels every object, the
/// base some.
fn split_labels(mut object: Value) -> (Value, serde_json::Map<String, Value>) {
    let labels = object["metadata"].as_object_mut().and_then(|m| m.remove("labels"));
    (object, labels.and_then(|l| l.as_object().cloned()).unwrap_or_default())
}

/// Every object of kustomize's build is rendered by the chart, the same but
/// for labels the chart adds (Helm's own, and the name label on every
/// object); the Namespace is Helm's (`--create-namespace`), a Secret of the
/// overlay is the user's.
fn assert_same_objects(chart: &[Value], kustomized: &[Value], skip: &[&str], what: &str) {
    let chart = by_kind_and_name(chart);
    let kustomized = by_kind_and_name(kustomized);
    for ((kind, name), object) in &kustomized {
        if skip.contains(&kind.as_str()) {
            continue;
        }
        let rendered = chart.get(&(kind.clone(), name.clone())).unwrap_or_else(|| {
            panic!("{what}: the chart renders no {kind} {name}; it renders {:?}", chart.keys().collect::<Vec<_>>())
        });
        let (rendered, rendered_labels) = split_labels(rendered.clone());
        let (object, labels) = split_labels(object.clone());
        for (key, value) in &labels {
            assert_eq!(rendered_labels.get(key), Some(value), "{what}: {kind} {name}: label {key}");
        }
        let mut found = Vec::new();
        differences(&rendered, &object, "", &mut found);
        assert!(
            found.is_empty(),
            "{what}: {kind} {name} differs between the chart and kustomize:\n{}",
            found.join("\n")
        );
    }
}

#[test]
fn the_chart_lints_strictly_with_default_and_other_values() {
    let Some(helm) = helm_or_skip() else { return };
    let home = scratch();
    for values in [None, Some(OVERLAY_VALUES)] {
        let mut command = helm_command(&helm, &home);
        command.args(["lint", "--strict"]).arg(chart_dir());
        if let Some(values) = values {
            command.arg("--values").arg(chart_dir().join(values));
        }
        let output = command.output().expect("helm runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "helm lint --strict ({values:?}):\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!stdout.contains("[WARNING]") && !stdout.contains("[ERROR]"), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn default_values_render_the_kustomize_base() {
    let Some(helm) = helm_or_skip() else { return };
    let chart = template(&helm, &[]).unwrap();
    assert_same_objects(&chart, &kustomize("base"), &["Namespace"], "default values against deploy/base");
    // Nothing more than the base: no Secret, no monitoring objects by default.
    let kinds: BTreeSet<&str> = chart.iter().filter_map(|o| o["kind"].as_str()).collect();
    let base: BTreeSet<String> =
        kustomize("base").iter().filter_map(|o| o["kind"].as_str().map(str::to_owned)).collect();
    assert_eq!(
        kinds,
        base.iter().map(String::as_str).filter(|k| *k != "Namespace").collect(),
        "kinds the chart renders by default"
    );
    assert_eq!(chart.len(), kustomize("base").len() - 1);
}

#[test]
fn the_example_overlay_values_render_the_example_overlay() {
    let Some(helm) = helm_or_skip() else { return };
    let values = chart_dir().join(OVERLAY_VALUES);
    let chart = template(&helm, &["--values", values.to_str().unwrap()]).unwrap();
    assert_same_objects(&chart, &kustomize("overlays/example"), &["Namespace", "Secret"], "the example overlay");
    let kinds: Vec<&str> = chart.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(kinds.contains(&"ServiceMonitor") && kinds.contains(&"PrometheusRule"), "{kinds:?}");

    // The PrometheusRule carries the rule file promtool tests, unchanged.
    let rule = chart.iter().find(|o| o["kind"] == "PrometheusRule").unwrap();
    let file: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart_dir().join("files/alerts.yaml")).unwrap()).unwrap();
    assert_eq!(rule["spec"], file, "the PrometheusRule's groups are files/alerts.yaml's");
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);

    // The ServiceMonitor scrapes the metrics Service's port.
    let monitor = chart.iter().find(|o| o["kind"] == "ServiceMonitor").unwrap();
    let service = chart.iter().find(|o| o["kind"] == "Service").unwrap();
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][key], value, "the ServiceMonitor selects the Service");
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"]);
}

/// The CRD the chart installs is `server-controller crd`'s, and
/// `crds.install=false` leaves it out.
#[test]
fn the_crd_is_the_operators_and_optional() {
    let Some(helm) = helm_or_skip() else { return };
    let output = Command::new(env!("CARGO_BIN_EXE_server-controller")).arg("crd").output().expect("crd runs");
    assert!(output.status.success());
    let printed = documents(&String::from_utf8(output.stdout).unwrap());
    let crd = |objects: &[Value]| objects.iter().find(|o| o["kind"] == "CustomResourceDefinition").cloned();

    let chart = template(&helm, &[]).unwrap();
    let rendered = crd(&chart).expect("the chart renders the CRD by default");
    assert_eq!(rendered["metadata"]["annotations"]["helm.sh/resource-policy"], "keep", "uninstall keeps the CRD");
    let (rendered, _) = split_labels(without_helm_keys(&rendered));
    let mut found = Vec::new();
    differences(&rendered, &printed[0], "", &mut found);
    assert!(
        found.is_empty(),
        "charts/server-controller/files/crd.yaml is stale; regenerate it with\n  cargo run -p server-controller -- crd > charts/server-controller/files/crd.yaml\n{}",
        found.join("\n")
    );

    let without = template(&helm, &["--set", "crds.install=false"]).unwrap();
    assert!(crd(&without).is_none(), "crds.install=false still renders the CRD");
    assert_eq!(without.len(), chart.len() - 1, "crds.install=false leaves out the CRD only");
}

/// The Grafana dashboard ships as a ConfigMap only when asked for, with the
/// sidecar's label (grafana_dashboard: "1" unless set otherwise), holding
/// files/dashboard.json as it is.
#[test]
fn the_dashboard_is_a_configmap_behind_a_value() {
    let Some(helm) = helm_or_skip() else { return };
    let configmap = |objects: &[Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "server-controller-dashboard")
            .cloned()
    };
    assert!(configmap(&template(&helm, &[]).unwrap()).is_none(), "the dashboard is rendered by default");

    let rendered = template(&helm, &["--set", "metrics.grafanaDashboard.enabled=true"]).unwrap();
    let dashboard = configmap(&rendered).expect("metrics.grafanaDashboard.enabled=true renders the dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1", "{dashboard}");
    assert_eq!(dashboard["metadata"]["namespace"], NAMESPACE);
    let file = std::fs::read_to_string(chart_dir().join("files/dashboard.json")).unwrap();
    let shipped: Value = serde_json::from_str(dashboard["data"]["server-controller.json"].as_str().expect("the JSON"))
        .expect("the ConfigMap holds valid JSON");
    assert_eq!(shipped, serde_json::from_str::<Value>(&file).unwrap());

    let elsewhere = template(
        &helm,
        &[
            "--set",
            "metrics.grafanaDashboard.enabled=true",
            "--set",
            "metrics.grafanaDashboard.label=dashboards",
            "--set",
            "metrics.grafanaDashboard.labelValue=ops",
            "--set",
            "metrics.grafanaDashboard.namespace=monitoring",
        ],
    )
    .unwrap();
    let dashboard = configmap(&elsewhere).expect("rendered");
    assert_eq!(dashboard["metadata"]["labels"]["dashboards"], "ops", "{dashboard}");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert!(template(&helm, &["--set", "metrics.grafanaDashboard.namespace=Not_A_Namespace"]).is_err());
}

/// Values the schema or the templates refuse, each with helm's reason.
#[test]
fn bad_values_are_refused() {
    let Some(helm) = helm_or_skip() else { return };
    let dir = scratch();
    let cases: [(&str, Value, &str); 8] = [
        ("a negative replica count", json!({ "replicas": -1 }), "/replicas"),
        ("crds.install not a boolean", json!({ "crds": { "install": "yes" } }), "/crds/install"),
        ("an unknown value", json!({ "replica": 2 }), "replica"),
        ("a region without its Secret", json!({ "regions": [{ "id": "region-a" }] }), "/regions/0"),
        ("a region ID with '='", json!({ "regions": [{ "id": "a=b", "secret": { "name": "s" } }] }), "/regions/0/id"),
        ("a log format the operator lacks", json!({ "logFormat": "xml" }), "/logFormat"),
        (
            "a grace period shorter than the drain",
            json!({ "terminationGracePeriodSeconds": 10 }),
            "/terminationGracePeriodSeconds",
        ),
        (
            "two replicas without leader election",
            json!({ "replicas": 2, "leaderElection": { "enabled": false } }),
            "leaderElection.enabled=false runs one acting replica",
        ),
    ];
    for (what, values, reason) in cases {
        let file = dir.join("values.json");
        std::fs::write(&file, values.to_string()).unwrap();
        let error = template(&helm, &["--values", file.to_str().unwrap()])
            .err()
            .unwrap_or_else(|| panic!("{what} was accepted"));
        assert!(error.contains(reason), "{what}: helm's error does not name {reason:?}:\n{error}");
    }
    // One replica without leader election is fine, and says so in its args.
    std::fs::write(
        dir.join("single.json"),
        json!({ "replicas": 1, "leaderElection": { "enabled": false } }).to_string(),
    )
    .unwrap();
    let single = template(&helm, &["--values", dir.join("single.json").to_str().unwrap()]).unwrap();
    let deployment = single.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(args.as_array().unwrap().contains(&json!("--leader-election=false")), "{args}");
    assert!(
        !single.iter().any(|o| o["metadata"]["name"] == "server-controller-leader-election"),
        "no Lease grant without leader election"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `(apiGroup, resource, verb)` of every rule of a role.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let strings =
        |v: &Value| -> Vec<String> { v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect() };
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    assert!(
                        !group.contains('*') && !resource.contains('*') && !verb.contains('*'),
                        "a wildcard: {rule}"
                    );
                    grants.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    grants
}

/// As `rbac.rs` checks the base: the chart's grants on the kinds the
/// operator reads are server-kube's table of them (`read_kinds`), and a
/// region Secret is readable by its name only, in its own namespace.
#[test]
fn the_charts_rbac_is_the_operators_least_privilege() {
    let Some(helm) = helm_or_skip() else { return };
    let chart = template(&helm, &[]).unwrap();
    let role = chart.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    let kinds = server_kube::read_kinds();
    let groups: BTreeSet<&str> = kinds.iter().map(|kind| kind.group.as_str()).collect();
    let granted: BTreeSet<_> = grants(role)
        .into_iter()
        .filter(|(group, resource, _)| groups.contains(group.as_str()) && resource.split('/').next() != Some("servers"))
        .collect();
    let expected: BTreeSet<_> = kinds
        .iter()
        .flat_map(|kind| kind.verbs().iter().map(|verb| (kind.group.clone(), kind.plural.clone(), (*verb).to_owned())))
        .collect();
    assert_eq!(granted, expected, "the chart's ClusterRole rules for the consumed kinds and OpenstackIdentities");

    let dir = scratch();
    let values = json!({ "regions": [
        { "id": "region-a", "secret": { "name": "a" } },
        { "id": "region-b", "secret": { "name": "b", "namespace": "regions" } },
        { "id": "region-c", "secret": { "name": "c", "namespace": "regions" }, "config": { "authURL": "https://keystone.example.com/v3", "region": "RegionOne" } },
    ]});
    std::fs::write(dir.join("values.json"), values.to_string()).unwrap();
    let chart = template(&helm, &["--values", dir.join("values.json").to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let secret_rules: BTreeMap<String, Value> = chart
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .flat_map(|o| o["rules"].as_array().unwrap().iter().map(move |rule| (o, rule)))
        .filter(|(_, rule)| rule["resources"].as_array().unwrap().iter().any(|r| r == "secrets" || r == "*"))
        .map(|(o, rule)| {
            assert_eq!(o["kind"], "Role", "Secrets only through a namespaced Role");
            (o["metadata"]["namespace"].as_str().unwrap().to_owned(), rule.clone())
        })
        .collect();
    let rule =
        |names: Value| json!({ "apiGroups": [""], "resources": ["secrets"], "resourceNames": names, "verbs": ["get"] });
    assert_eq!(
        secret_rules,
        BTreeMap::from([(NAMESPACE.to_owned(), rule(json!(["a"]))), ("regions".to_owned(), rule(json!(["b", "c"])))])
    );
    let args =
        &chart.iter().find(|o| o["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"]["containers"][0]["args"];
    for flag in [
        "--openstack-secret=region-a=server-controller/a",
        "--openstack-secret=region-b=regions/b",
        "--openstack-secret=region-c=regions/c",
    ] {
        assert!(args.as_array().unwrap().contains(&json!(flag)), "{flag} in {args}");
    }
    let secret = chart.iter().find(|o| o["kind"] == "Secret").expect("the Secret of region-c's config");
    assert_eq!((&secret["metadata"]["name"], &secret["metadata"]["namespace"]), (&json!("c"), &json!("regions")));
    let data: BTreeMap<String, Vec<u8>> = secret["stringData"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, value)| (key.clone(), value.as_str().unwrap().as_bytes().to_vec()))
        .collect();
    let config = server_openstack::OpenStackConfig::from_secret_data(&data).expect("the operator reads the Secret");
    config.validate().expect("and accepts it");
}
