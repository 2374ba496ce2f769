//! Against the reference: a real kube-apiserver and etcd (`.ci/build-control-plane`),
//! driven as a cluster admin and a user drive it, with kubectl and the
//! operator's own binary.
//!
//! - the install of `deploy/overlays/example` with `kubectl apply
//!   --server-side` (validation on), and our Server CRD refusing every
//!   invalid Server with the same error as the upstream CRD;
//! - the operator running as the ServiceAccount of `deploy/base` (a token
//!   from `kubectl create token`, never admin) through a Server's life, with
//!   no request of its refused (the audit log).
//!
//! Without the binaries these tests skip with a message naming the script;
//! under `CI=true` they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_e2e::control_plane::{ControlPlane, control_plane_or_skip, expect_success};
use support::{free_port, get, wait_for};

/// region-a served by the in-process simulated cloud: clean servers that
/// build in seconds (the scenarios script no failures).
const SIMULATED_REGION: [&str; 6] = ["--sim-region", "region-a", "--sim-fault-rate", "0", "--sim-timing", "fast"];
const SSH_CA: &str = "ca-1";
const SSH_CA_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl e2e-ca@unikorn";
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:server-controller:server-controller";
const UPSTREAM_CRDS: &str = "fixtures/unikorn-crds";
const NETWORK: &str = "0c6f8a9e-5b1d-4d8e-9f3a-2b7c1e4d5a60";
const SECURITY_GROUP: &str = "7d2e4f1a-8c3b-4e5d-a6f7-1b2c3d4e5f60";
const FLAVOR: &str = "8c2b1d54-2a56-4bb3-9b0c-1d2f6e1f4a01";
const IMAGE: &str = "0e8d4f4c-58a4-4d55-93b5-0b65e1c7c3f2";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The install a cluster admin does: the namespaces the README names, then
/// the example overlay, server-side, with validation on.
fn install(plane: &ControlPlane) {
    for namespace in ["server-controller", "unikorn-region", "tenant"] {
        plane.kubectl_ok(&["create", "namespace", namespace]);
    }
    let overlay = repository().join("deploy/overlays/example");
    plane.kubectl_ok(&["apply", "--server-side", "--validate=strict", "-k", &overlay.display().to_string()]);
    wait_established(plane, "servers.region.unikorn-cloud.org");
}

fn wait_established(plane: &ControlPlane, crd: &str) {
    plane.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=60s", &format!("crd/{crd}")]);
}

/// The upstream CRDs of the kinds a Server consumes (all but Server).
fn install_consumed_kinds(plane: &ControlPlane) {
    for entry in std::fs::read_dir(repository().join(UPSTREAM_CRDS)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name.ends_with("_servers") {
            continue;
        }
        plane.kubectl_ok(&["apply", "--server-side", "-f", &path.display().to_string()]);
        let (group, plural) = name.split_once('_').unwrap();
        wait_established(plane, &format!("{plural}.{group}"));
    }
}

fn server(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "region.unikorn-cloud.org/v1alpha1",
        "kind": "Server",
        "metadata": {
            "name": name,
            "namespace": "tenant",
            "labels": {
                "unikorn-cloud.org/name": name,
                "regions.unikorn-cloud.org/region-id": "region-a",
                "regions.unikorn-cloud.org/identity-id": "identity-1",
            },
        },
        "spec": spec,
    })
}

fn minimal_spec() -> Value {
    json!({ "flavorID": FLAVOR, "image": { "id": IMAGE } })
}

/// Servers users write, each valid under the upstream CRD.
fn valid_servers() -> Vec<Value> {
    let full = json!({
        "flavorID": FLAVOR,
        "image": { "id": IMAGE },
        "provider": "openstack",
        "networks": [{
            "id": NETWORK,
            "allowedAddressPairs": [{ "cidr": "10.1.0.0/16", "macAddress": "fa:16:3e:00:00:01" }],
        }],
        "securityGroups": [{ "id": SECURITY_GROUP }],
        "publicIPAllocation": { "enabled": true },
        "sshInjection": "ca",
        "sshCertificateAuthorityID": "ca-1",
        "tags": [{ "name": "team", "value": "storage" }],
        "userData": "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtbZWNobywgaGldXQo=",
        "volumes": [{ "id": "v1" }, { "id": "v2" }],
        "pause": false,
    });
    vec![server("minimal", minimal_spec()), server("full", full)]
}

/// Servers the upstream CRD refuses, each breaking one of its rules.
fn invalid_servers() -> Vec<(&'static str, Value)> {
    let with = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut object = server(name, minimal_spec());
        edit(&mut object["spec"]);
        object
    };
    vec![
        ("flavor not a uuid", with("bad-flavor", &|s| s["flavorID"] = json!("m1.small"))),
        ("image id not a uuid", with("bad-image", &|s| s["image"]["id"] = json!("ubuntu"))),
        ("network id not a uuid", with("bad-network", &|s| s["networks"] = json!([{ "id": "net-1" }]))),
        ("unknown field", with("unknown-field", &|s| s["flavourID"] = json!(FLAVOR))),
        ("missing image", with("no-image", &|s| drop(s.as_object_mut().unwrap().remove("image")))),
        ("missing flavorID", with("no-flavor", &|s| drop(s.as_object_mut().unwrap().remove("flavorID")))),
        (
            "bad CIDR",
            with("bad-cidr", &|s| {
                s["networks"] = json!([{ "id": NETWORK, "allowedAddressPairs": [{ "cidr": "10.0.0.0/33" }] }])
            }),
        ),
        ("duplicate volume ids", with("dup-volumes", &|s| s["volumes"] = json!([{ "id": "v1" }, { "id": "v1" }]))),
        ("provider not in the enum", with("bad-provider", &|s| s["provider"] = json!("aws"))),
        ("sshInjection not in the enum", with("bad-injection", &|s| s["sshInjection"] = json!("password"))),
        ("userData not base64", with("bad-user-data", &|s| s["userData"] = json!("not base64!"))),
        ("wrong type", with("bad-type", &|s| s["publicIPAllocation"] = json!({ "enabled": "yes" }))),
    ]
}

/// What the API server answers `kubectl create --dry-run=server` with
/// validation on: `Ok` or kubectl's error text.
fn dry_run_create(plane: &ControlPlane, object: &Value) -> Result<(), String> {
    let output = plane.kubectl_with_input(
        &["create", "--dry-run=server", "--validate=strict", "-o", "name", "-f", "-"],
        &object.to_string(),
    );
    if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).trim().to_owned()) }
}

/// The answers to every valid and invalid Server, in order.
fn answers(plane: &ControlPlane) -> Vec<(String, Result<(), String>)> {
    let valid = valid_servers().into_iter().map(|object| (format!("valid {}", object["metadata"]["name"]), object));
    let invalid = invalid_servers().into_iter().map(|(what, object)| (what.to_owned(), object));
    valid.chain(invalid).map(|(what, object)| (what, dry_run_create(plane, &object))).collect()
}

#[test]
fn install_with_kubectl_and_validate_servers_as_the_upstream_crd_does() {
    let Some(plane) = control_plane_or_skip() else { return };
    eprintln!("control plane: {} ({})", plane.version, plane.url);
    install(&plane);

    let ours = answers(&plane);
    for (what, answer) in &ours {
        if what.starts_with("valid ") {
            assert!(answer.is_ok(), "{what} refused by our CRD: {answer:?}");
        } else {
            assert!(answer.is_err(), "{what} accepted by our CRD");
        }
    }

    // The same objects under the upstream CRD, installed in place of ours.
    let upstream = repository().join(UPSTREAM_CRDS).join("region.unikorn-cloud.org_servers.yaml");
    plane.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", &upstream.display().to_string()]);
    wait_established(&plane, "servers.region.unikorn-cloud.org");
    wait_for("the upstream CRD to serve", Duration::from_secs(30), || {
        let schema = plane.kubectl_ok(&["get", "crd", "servers.region.unikorn-cloud.org", "-o", "json"]);
        !schema.contains("server-controller")
    });
    let theirs = answers(&plane);
    for ((what, ours), (_, theirs)) in ours.iter().zip(&theirs) {
        assert_eq!(ours, theirs, "{what}: our CRD and the upstream CRD answer differently");
    }
}

#[test]
fn infrastructure_ref_is_immutable_under_our_crd_as_upstream() {
    let Some(plane) = control_plane_or_skip() else { return };
    install(&plane);
    let mut object = server("pinned", minimal_spec());
    object["spec"]["infrastructureRef"] = json!("host-1");
    let created = plane.kubectl_with_input(&["create", "-f", "-"], &object.to_string());
    expect_success("creating a pinned Server", &created);
    let patch = json!({ "spec": { "infrastructureRef": "host-2" } }).to_string();
    let output = plane
        .kubectl()
        .args(["-n", "tenant", "patch", "server", "pinned", "--type=merge", "-p", &patch])
        .output()
        .unwrap();
    assert!(!output.status.success(), "a changed infrastructureRef was accepted");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("infrastructureRef is immutable"), "{stderr}");
}

/// A Server through its whole life with the operator authenticated as its
/// own ServiceAccount: created, provisioned, its Network and SecurityGroup
/// referenced, deleted, released. Not one of its requests is refused.
#[test]
fn operator_does_its_job_under_the_rbac_of_deploy() {
    let Some(plane) = control_plane_or_skip() else { return };
    install(&plane);
    install_consumed_kinds(&plane);
    seed_tenant(&plane);
    let kubeconfig = plane.service_account_kubeconfig("server-controller", "server-controller");

    let metrics = free_port();
    let log = plane.dir.join("operator.log");
    let mut operator = Operator::start(&kubeconfig, metrics, &log);
    wait_for("the operator's /readyz", Duration::from_secs(90), || {
        operator.assert_running(&log);
        get(metrics, "/readyz").is_some_and(|(code, _)| code == 200)
    });

    create_run_and_delete(&plane, "web-1");
    operator.stop();
    assert_nothing_refused(&plane, &log);
    assert_every_grant_used(&plane);
}

/// Grants this scenario does not reach, each with the path that uses it.
const GRANTS_USED_ELSEWHERE: &[(&str, &str, &str)] = &[
    (
        "events.k8s.io/events",
        "patch",
        "an Event repeated with the same note continues its series (adapters/kube/src/events.rs)",
    ),
    (
        "region.unikorn-cloud.org/servers",
        "get",
        "a create whose user data the cache does not hold (a retry, or a first create past the \
         budget of adapters/kube/src/held_user_data.rs) reads the Server live; this run's first create finds it held",
    ),
];

/// Every verb `deploy/base` grants the operator was used in its run, but
/// for [`GRANTS_USED_ELSEWHERE`]: a grant nothing uses is privilege to take
/// back (read from the audit log, requests it made that were served).
fn assert_every_grant_used(plane: &ControlPlane) {
    let mut granted = std::collections::BTreeSet::new();
    for file in ["rbac.yaml", "leader-election-rbac.yaml"] {
        let text = std::fs::read_to_string(repository().join("deploy/base").join(file)).unwrap();
        for document in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            if !matches!(document["kind"].as_str(), Some("ClusterRole" | "Role")) {
                continue;
            }
            for rule in document["rules"].as_array().into_iter().flatten() {
                for group in rule["apiGroups"].as_array().into_iter().flatten() {
                    for resource in rule["resources"].as_array().into_iter().flatten() {
                        for verb in rule["verbs"].as_array().into_iter().flatten() {
                            let group = group.as_str().unwrap_or_default();
                            let resource = resource.as_str().unwrap_or_default();
                            let qualified =
                                if group.is_empty() { resource.to_owned() } else { format!("{group}/{resource}") };
                            granted.insert((qualified, verb.as_str().unwrap_or_default().to_owned()));
                        }
                    }
                }
            }
        }
    }
    let used = plane.used_by(SERVICE_ACCOUNT_USER);
    let unused: Vec<String> = granted
        .iter()
        .filter(|grant| !used.contains(*grant))
        .filter(|(resource, verb)| !GRANTS_USED_ELSEWHERE.iter().any(|(r, v, _)| r == resource && v == verb))
        .map(|(resource, verb)| format!("{verb} {resource}"))
        .collect();
    assert!(unused.is_empty(), "granted and never used by the operator: {unused:?}\nused: {used:?}");
}

/// A Server of region-a with the tenant's Network and SecurityGroup: the
/// operator provisions it and references both, then on delete releases
/// them and the Server goes.
fn create_run_and_delete(plane: &ControlPlane, name: &str) {
    create_and_wait_running(plane, name);
    for (kind, name) in [("networks", NETWORK), ("securitygroups", SECURITY_GROUP)] {
        let referenced =
            plane.kubectl_ok(&["-n", "tenant", "get", kind, name, "-o", "jsonpath={.metadata.finalizers}"]);
        assert!(!referenced.trim().is_empty(), "{kind}/{name} holds no reference: {referenced}");
    }

    // What a user sees with kubectl: the printer columns, explain from the
    // CRD's OpenAPI, and the operator's Events in describe.
    let listed = plane.kubectl_ok(&["-n", "tenant", "get", "servers"]);
    let header = listed.lines().next().unwrap_or_default();
    assert!(header.contains("PROVIDER") && !header.contains("PHASE"), "{listed}");
    assert!(listed.lines().any(|row| row.starts_with(name) && row.ends_with("Server is active")), "{listed}");
    let explained = plane.kubectl_ok(&["explain", "servers.spec.flavorID"]);
    assert!(explained.contains("flavorID") && explained.contains("string"), "{explained}");
    let resized = json!({ "spec": { "flavorID": "9d3c2e65-3b67-4cc4-8c1d-2e3f7a2f5b02" } }).to_string();
    plane.kubectl_ok(&["-n", "tenant", "patch", "server", name, "--type=merge", "-p", &resized]);
    wait_for("the SpecChangeNotApplied event in describe", Duration::from_secs(60), || {
        plane.kubectl_ok(&["-n", "tenant", "describe", "server", name]).contains("SpecChangeNotApplied")
    });

    plane.kubectl_ok(&["-n", "tenant", "delete", "server", name, "--wait=true", "--timeout=90s"]);
    for (kind, name) in [("networks", NETWORK), ("securitygroups", SECURITY_GROUP)] {
        wait_for(&format!("{kind}/{name} released"), Duration::from_secs(60), || {
            plane
                .kubectl_ok(&["-n", "tenant", "get", kind, name, "-o", "jsonpath={.metadata.finalizers}"])
                .trim()
                .is_empty()
        });
    }
}

fn create_and_wait_running(plane: &ControlPlane, name: &str) -> Value {
    let mut object = server(name, minimal_spec());
    object["spec"]["networks"] = json!([{ "id": NETWORK }]);
    object["spec"]["securityGroups"] = json!([{ "id": SECURITY_GROUP }]);
    // User data (read with a get, as the cache leaves it out) and the SSH CA
    // merged into it (referenced like the Network).
    object["spec"]["userData"] = json!("I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtbZWNobywgaGldXQo=");
    object["spec"]["sshInjection"] = json!("ca");
    object["spec"]["sshCertificateAuthorityID"] = json!(SSH_CA);
    expect_success("kubectl apply", &plane.kubectl_with_input(&["apply", "-f", "-"], &object.to_string()));

    let running = wait_json(plane, &["-n", "tenant", "get", "server", name], Duration::from_secs(90), |s| {
        s["status"]["phase"] == "Running" && s["status"]["provisionedAt"].is_string()
    });
    assert_eq!(running["metadata"]["finalizers"], json!([server_core::model::SERVER_FINALIZER]), "{running}");
    running
}

/// No request of the operator's ServiceAccount was refused, and it made some.
fn assert_nothing_refused(plane: &ControlPlane, log: &Path) {
    let refused = plane.audited(SERVICE_ACCOUNT_USER, 403);
    assert!(refused.is_empty(), "the operator was refused under its RBAC:\n{}", refused.join("\n"));
    let served = plane.audited(SERVICE_ACCOUNT_USER, 200).len() + plane.audited(SERVICE_ACCOUNT_USER, 201).len();
    assert!(served > 0, "the audit log shows no request of the operator's ServiceAccount");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    // Not a bare "403": resourceVersions and durations contain it.
    assert!(!log.to_lowercase().contains("forbidden"), "the operator logged a refusal:\n{log}");
}

/// The chart installed with helm on the real API server (every object
/// accepted with validation), then the operator run as the Deployment it
/// rendered would run it: its args and env (plus the simulated cloud's
/// region-a), as its ServiceAccount. It reads its region Secret, provisions
/// and releases a Server. On `helm uninstall` the CRD and the Servers stay,
/// each still holding the operator's finalizer.
#[test]
fn the_helm_chart_installs_and_its_operator_reconciles_a_server() {
    let Some(helm) = support::helm_or_skip() else { return };
    let Some(plane) = control_plane_or_skip() else { return };
    for namespace in ["unikorn-region", "tenant"] {
        plane.kubectl_ok(&["create", "namespace", namespace]);
    }
    install_consumed_kinds(&plane);
    // An OpenStack region the chart makes the Secret of; no call reaches it.
    let values = json!({
        "regions": [{
            "id": "region-o",
            "secret": { "name": "server-controller-region-o" },
            "config": { "authURL": "http://127.0.0.1:9/v3", "region": "RegionOne" },
        }],
        "regionNamespace": "unikorn-region",
    });
    std::fs::write(plane.dir.join("values.json"), values.to_string()).unwrap();
    let helm_run = |args: &[&str]| {
        let output = support::helm_command(&helm, &plane.dir.join("helm"))
            .args(args)
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .output()
            .expect("helm runs");
        expect_success(&format!("helm {}", args.join(" ")), &output)
    };
    let chart = support::chart_dir().display().to_string();
    let values = plane.dir.join("values.json").display().to_string();
    helm_run(
        &["install", "server-controller", &chart, "--namespace", "server-controller", "--create-namespace"]
            .into_iter()
            .chain(["--values", &values])
            .collect::<Vec<_>>(),
    );
    wait_established(&plane, "servers.region.unikorn-cloud.org");
    seed_tenant(&plane);

    let manifest = helm_run(&["get", "manifest", "server-controller", "--namespace", "server-controller"]);
    let objects: Vec<Value> = serde_saphyr::from_multiple(&manifest).unwrap();
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").expect("the release's Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mut args: Vec<String> =
        container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    assert!(args.iter().any(|a| a.starts_with("--openstack-secret=region-o=server-controller/")), "{args:?}");
    args.extend(SIMULATED_REGION.iter().map(|arg| (*arg).to_owned()));
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|variable| {
            let value = match (&variable["value"], variable["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
                (Value::String(value), _) => value.clone(),
                (_, Some("metadata.name")) => "server-controller-0".to_owned(),
                (_, Some("metadata.namespace")) => "server-controller".to_owned(),
                _ => panic!("an env variable the test cannot resolve: {variable}"),
            };
            (variable["name"].as_str().unwrap().to_owned(), value)
        })
        .collect();
    let account = pod["serviceAccountName"].as_str().unwrap();
    let kubeconfig = plane.service_account_kubeconfig("server-controller", account);

    let metrics = free_port();
    let log = plane.dir.join("operator.log");
    let mut operator = Operator::start_with(&args, &env, &kubeconfig, metrics, &log);
    wait_for("the operator's /readyz", Duration::from_secs(90), || {
        operator.assert_running(&log);
        get(metrics, "/readyz").is_some_and(|(code, _)| code == 200)
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("region-o=openstack"), "the region of the chart's Secret is served:\n{text}");
    create_run_and_delete(&plane, "web-1");
    create_and_wait_running(&plane, "web-2");
    let lease = plane.kubectl_ok(&["-n", "server-controller", "get", "lease", "-o", "name"]);
    assert!(!lease.trim().is_empty(), "the leader Lease is in the release namespace");
    operator.stop();
    assert_nothing_refused(&plane, &log);

    helm_run(&["uninstall", "server-controller", "--namespace", "server-controller"]);
    plane.kubectl_ok(&["get", "crd", "servers.region.unikorn-cloud.org"]);
    let left = plane.kubectl_ok(&["-n", "tenant", "get", "server", "web-2", "-o", "jsonpath={.metadata.finalizers}"]);
    assert!(left.contains(server_core::model::SERVER_FINALIZER), "web-2 keeps the operator's finalizer: {left}");
    let gone =
        plane.kubectl().args(["-n", "server-controller", "get", "deployment", "server-controller"]).output().unwrap();
    assert!(!gone.status.success(), "the Deployment is uninstalled");
}

/// The tenant a Server of region-a needs, as the region's other controllers
/// would leave it: a ready Identity, a Network and a SecurityGroup.
fn seed_tenant(plane: &ControlPlane) {
    let labels = json!({
        "regions.unikorn-cloud.org/region-id": "region-a",
        "regions.unikorn-cloud.org/identity-id": "identity-1",
    });
    let object = |kind: &str, name: &str, spec: Value| {
        json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1",
            "kind": kind,
            "metadata": { "name": name, "namespace": "tenant", "labels": labels },
            "spec": spec,
        })
    };
    let objects = [
        object("Identity", "identity-1", json!({ "provider": "openstack" })),
        object("Network", NETWORK, json!({ "prefix": "192.168.0.0/24" })),
        object("SecurityGroup", SECURITY_GROUP, json!({})),
        object("SSHCertificateAuthority", SSH_CA, json!({ "publicKey": SSH_CA_KEY })),
    ];
    for object in objects {
        expect_success("seeding the tenant", &plane.kubectl_with_input(&["create", "-f", "-"], &object.to_string()));
    }
    let available = json!({ "status": { "conditions": [{
        "type": "Available", "status": "True", "reason": "Provisioned",
        "message": "Provisioned", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    plane.kubectl_ok(&[
        "-n",
        "tenant",
        "patch",
        "identity",
        "identity-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        &available.to_string(),
    ]);
}

fn wait_json(plane: &ControlPlane, args: &[&str], timeout: Duration, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let output = plane.kubectl().args(args).args(["-o", "json"]).output().unwrap();
        if output.status.success() {
            last = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
            if check(&last) {
                return last;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out on kubectl {}; last seen:\n{last:#}", args.join(" "));
}

/// `server-controller run` as the ServiceAccount, with the in-process
/// simulated cloud serving region-a.
struct Operator {
    child: std::process::Child,
}

impl Operator {
    fn start(kubeconfig: &Path, metrics: std::net::SocketAddr, log: &Path) -> Operator {
        let args = ["run", "--cloud", "sim", "--log-format", "json"]
            .into_iter()
            .chain(SIMULATED_REGION)
            .chain(["--leader-election-namespace", "server-controller"])
            .map(str::to_owned)
            .collect::<Vec<_>>();
        Operator::start_with(&args, &[], kubeconfig, metrics, log)
    }

    /// `server-controller ARGS` with `ENV`, fast intervals, the metrics
    /// address and the kubeconfig.
    fn start_with(
        args: &[String],
        env: &[(String, String)],
        kubeconfig: &Path,
        metrics: std::net::SocketAddr,
        log: &Path,
    ) -> Operator {
        let log_file = std::fs::File::create(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_server-controller"))
            .args(args)
            .args(["--yield-interval", "500ms", "--monitor-interval", "500ms"])
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("the operator starts");
        Operator { child }
    }

    fn assert_running(&mut self, log: &Path) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the operator exited ({status}):\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
    }

    fn stop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
