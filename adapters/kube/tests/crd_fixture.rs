//! The generated Server CRD against the Go implementation's (DESIGN §3): same
//! identity, and every object the operator writes validates against the real
//! `openAPIV3Schema`. The fixtures are copied into the repository's
//! `fixtures/unikorn-crds/`; a missing fixture fails the test.

use std::path::PathBuf;

use jiff::Timestamp;
use serde_json::{Value, json};
use server_core::model::{
    ConditionReason, ConditionStatus, ConditionType, Consumed, Detail, IDENTITY_LABEL, ImageSpec, NetworkAttachment,
    REGION_LABEL, ResourceKind, SERVER_FINALIZER, Server as CoreServer, ServerSpec, set_condition,
};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::Outcome;
use server_core::status_patch::apply_merge_patch;
use server_core::{Action, Facts, Options, Pass, ProviderView, observe};
use server_kube::crd::{self, Server, ServerResourceSpec};

fn fixture(file: &str) -> Option<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("fixtures/unikorn-crds").join(file);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => panic!("fixture {} is unreadable: {error}", path.display()),
    };
    match serde_saphyr::from_str::<Value>(&text) {
        Ok(value) => Some(value),
        Err(error) => panic!("fixture {} does not parse: {error}", path.display()),
    }
}

fn generated(crd: &impl serde::Serialize) -> Value {
    serde_json::to_value(crd).unwrap_or_else(|e| panic!("CRD does not serialize: {e}"))
}

fn columns(version: &Value) -> Vec<(String, String, String)> {
    version["additionalPrinterColumns"]
        .as_array()
        .map(|columns| {
            columns
                .iter()
                .map(|c| {
                    let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (field("name"), field("type"), field("jsonPath"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_same_identity(ours: &Value, theirs: &Value) {
    for pointer in ["/spec/group", "/spec/scope", "/spec/names/kind", "/spec/names/plural", "/metadata/name"] {
        assert_eq!(ours.pointer(pointer), theirs.pointer(pointer), "{pointer}");
    }
    let (ours, theirs) = (&ours["spec"]["versions"][0], &theirs["spec"]["versions"][0]);
    assert_eq!(ours["name"], theirs["name"], "version");
    assert_eq!(ours["subresources"].get("status").is_some(), theirs["subresources"].get("status").is_some());
}

/// Our Server columns tell more than upstream's (phase, health, failures;
/// `-o wide` for addresses, flavor and image), but every path upstream's
/// columns show is still shown, with the same type, so nothing a user of the
/// Go controller's CRD saw is lost.
#[test]
fn server_columns_keep_every_upstream_path() {
    let Some(theirs) = fixture("region.unikorn-cloud.org_servers.yaml") else {
        return;
    };
    let ours = generated(&crd::server_crd());
    let ours = columns(&ours["spec"]["versions"][0]);
    for (name, kind, path) in columns(&theirs["spec"]["versions"][0]) {
        assert!(
            ours.iter().any(|(_, our_kind, our_path)| *our_path == path && *our_kind == kind),
            "upstream column {name} ({path}) is not shown: {ours:?}"
        );
    }
    let wanted = [".status.phase", ".status.providerCreateFailures", ".spec.flavorID", ".spec.image.id"];
    for path in wanted {
        assert!(ours.iter().any(|(_, _, our_path)| our_path == path), "{path} is not a column: {ours:?}");
    }
}

#[test]
fn server_crd_matches_the_real_one() {
    let Some(theirs) = fixture("region.unikorn-cloud.org_servers.yaml") else {
        return;
    };
    assert_same_identity(&generated(&crd::server_crd()), &theirs);
}

fn schema(crd: &Value) -> Value {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Paths of the properties in `ours` that `theirs` lacks, recursively.
fn missing_properties(ours: &Value, theirs: &Value, path: &str, missing: &mut Vec<String>) {
    if let Some(properties) = ours["properties"].as_object() {
        for (name, schema) in properties {
            let here = format!("{path}.{name}");
            match theirs["properties"].get(name) {
                Some(their_schema) => missing_properties(schema, their_schema, &here, missing),
                None => missing.push(here),
            }
        }
    }
    if ours.get("items").is_some() {
        missing_properties(&ours["items"], &theirs["items"], &format!("{path}[]"), missing);
    }
}

/// Every field the operator reads or writes is spelled as the real CRD
/// spells it: a misspelt one (e.g. `publicIpAllocation` for
/// `publicIPAllocation`) is pruned by the API server and never set.
#[test]
fn server_fields_are_named_as_in_the_real_schema() {
    let Some(theirs) = fixture("region.unikorn-cloud.org_servers.yaml") else {
        return;
    };
    let ours = generated(&crd::server_crd());
    let mut missing = Vec::new();
    missing_properties(&schema(&ours), &schema(&theirs), "", &mut missing);
    assert!(missing.is_empty(), "fields the real Server CRD does not have: {missing:?}");
}

/// Where `ours` differs from `theirs` in what it accepts: a property the
/// chart declares and we lack, or a validation keyword (type, format,
/// pattern, enum, required, CEL rule, list type, ...) that is not the same.
/// Descriptions are ours; `nullable` only admits a null the merge patch
/// never stores.
fn validation_differences(ours: &Value, theirs: &Value, path: &str, differences: &mut Vec<String>) {
    let ignored = ["properties", "items", "description", "nullable"];
    let keys = |schema: &Value| -> std::collections::BTreeSet<String> {
        schema
            .as_object()
            .map(|o| o.keys().filter(|k| !ignored.contains(&k.as_str())).cloned().collect())
            .unwrap_or_default()
    };
    for key in keys(ours).union(&keys(theirs)) {
        if ours.get(key) != theirs.get(key) {
            differences.push(format!("{path}: {key} is {:?}, the chart's is {:?}", ours.get(key), theirs.get(key)));
        }
    }
    if let Some(properties) = theirs["properties"].as_object() {
        for (name, their_schema) in properties {
            let here = format!("{path}.{name}");
            match ours["properties"].get(name) {
                Some(our_schema) => validation_differences(our_schema, their_schema, &here, differences),
                None => differences.push(format!("{here}: missing")),
            }
        }
    }
    if theirs.get("items").is_some() {
        validation_differences(&ours["items"], &theirs["items"], &format!("{path}[]"), differences);
    }
}

/// Properties without a description of their own (array items and
/// `metadata`, which the API server describes, excepted).
fn undescribed(schema: &Value, path: &str, found: &mut Vec<String>) {
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let here = format!("{path}.{name}");
            let described = property["description"].as_str().is_some_and(|d| !d.trim().is_empty());
            if !described && name != "metadata" {
                found.push(here.clone());
            }
            undescribed(property, &here, found);
        }
    }
    if let Some(items) = schema.get("items") {
        undescribed(items, &format!("{path}[]"), found);
    }
}

/// `deploy/base/crd.yaml` replaces the region chart's CRD on a cluster: it must
/// declare every field the chart declares (so what other region components
/// write survives pruning) and validate exactly as the chart does (formats,
/// patterns, enums, the immutability rule), so an object one admits the
/// other admits too.
#[test]
fn server_crd_validates_exactly_as_the_real_one() {
    let Some(theirs) = fixture("region.unikorn-cloud.org_servers.yaml") else {
        return;
    };
    let ours = generated(&crd::server_crd());
    let mut differences = Vec::new();
    validation_differences(&schema(&ours), &schema(&theirs), "", &mut differences);
    assert!(differences.is_empty(), "the Server schema differs from the chart's:\n{}", differences.join("\n"));
}

/// `kubectl explain server.spec.networks` answers on a real cluster.
#[test]
fn every_server_field_is_described() {
    let ours = generated(&crd::server_crd());
    let mut found = Vec::new();
    undescribed(&schema(&ours), "", &mut found);
    assert!(found.is_empty(), "fields without a description: {found:?}");
}

#[test]
fn consumed_crds_name_the_same_kinds() {
    let files = [
        "region.unikorn-cloud.org_networks.yaml",
        "region.unikorn-cloud.org_securitygroups.yaml",
        "region.unikorn-cloud.org_sshcertificateauthorities.yaml",
        "region.unikorn-cloud.org_identities.yaml",
        "region.unikorn-cloud.org_openstackidentities.yaml",
    ];
    for (ours, file) in server_kube::consumed_crds().iter().zip(files) {
        let Some(theirs) = fixture(file) else {
            return;
        };
        let ours = generated(ours);
        for pointer in ["/spec/group", "/spec/scope", "/spec/names/kind", "/spec/names/plural", "/metadata/name"] {
            assert_eq!(ours.pointer(pointer), theirs.pointer(pointer), "{file} {pointer}");
        }
        // The spec is what the operator reads (our CRDs of kinds without a
        // status in the real one may still declare an empty one).
        let spec = |crd: &Value| schema(crd)["properties"]["spec"].clone();
        let mut missing = Vec::new();
        missing_properties(&spec(&ours), &spec(&theirs), ".spec", &mut missing);
        assert!(missing.is_empty(), "{file}: fields the real CRD does not have: {missing:?}");
        let (ours, theirs) = (&ours["spec"]["versions"][0], &theirs["spec"]["versions"][0]);
        let status = |v: &Value| v["subresources"].get("status").is_some();
        assert_eq!(status(ours), status(theirs), "{file} status subresource");
        assert_eq!(columns(ours), columns(theirs), "{file} printer columns");
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap_or_default()
}

fn ready_identity() -> Consumed {
    let mut conditions = Vec::new();
    set_condition(
        &mut conditions,
        ConditionType::Available,
        ConditionStatus::True,
        ConditionReason::Provisioned,
        "ok",
        at(1),
    );
    Consumed::new("identity-1").with(Detail::Identity { conditions, deleting: false })
}

fn core_server() -> CoreServer {
    let mut server = CoreServer::default();
    server.meta.name = "server-1".into();
    server.meta.namespace = "ns".into();
    server.meta.uid = "uid-1".into();
    server.meta.generation = 1;
    server.meta.labels.insert(REGION_LABEL.into(), "region-1".into());
    server.meta.labels.insert(IDENTITY_LABEL.into(), "identity-1".into());
    server.meta.finalizers.push(SERVER_FINALIZER.into());
    server.spec = ServerSpec {
        flavor_id: "8c2b1d54-2a56-4bb3-9b0c-1d2f6e1f4a01".into(),
        image: ImageSpec { id: "0e8d4f4c-58a4-4d55-93b5-0b65e1c7c3f2".into() },
        networks: vec![NetworkAttachment {
            id: "a1f8c0a2-55a4-4f1b-8d59-0ad3b1b9d0c7".into(),
            allowed_address_pairs: Vec::new(),
        }],
        ..Default::default()
    };
    server
}

/// The Server document as the API server would hold it, with fields this
/// operator does not model, so validation sees them alongside ours.
fn stored_document(server: &CoreServer) -> Value {
    let mut object = Server::new(&server.meta.name, ServerResourceSpec { spec: server.spec.clone() });
    object.metadata.namespace = Some(server.meta.namespace.clone());
    object.metadata.labels = Some(server.meta.labels.clone());
    object.metadata.finalizers = Some(server.meta.finalizers.clone());
    let mut document = serde_json::to_value(&object).unwrap_or_else(|e| panic!("{e}"));
    document["status"] = json!({
        "volumes": [{"id": "v1", "message": "attached", "provisioningStatus": "Provisioned"}],
    });
    document
}

fn provider_record(status: ProviderStatus, power: PowerState, launched: Option<Timestamp>) -> ProviderServer {
    ProviderServer {
        id: "p1".into(),
        server_uid: "uid-1".into(),
        status,
        power_state: power,
        created: Some(at(10)),
        launched_at: launched,
        private_ip: Some("10.0.0.5".into()),
        mac_address: Some("fa:16:3e:00:00:01".into()),
        adopted: false,
        ..Default::default()
    }
}

struct Harness {
    server: CoreServer,
    document: Value,
    validator: jsonschema::Validator,
    written: usize,
}

impl Harness {
    fn facts(provider: ProviderView) -> Facts {
        // A present server's port carries what the spec asks (no groups, no
        // public IP).
        let networking = server_core::NetworkingView::Known(server_core::port::Networking {
            port: Some(server_core::port::ServerPort { id: "port-1".into(), ..Default::default() }),
            wanted_security_groups: Vec::new(),
            source: Default::default(),
        });
        Facts { provider, networking, ..Facts::default() }
            .with(ResourceKind::Identity, ready_identity())
            .with(ResourceKind::Network, Consumed::new("a1f8c0a2-55a4-4f1b-8d59-0ad3b1b9d0c7"))
    }

    /// Persists a status as the operator does: a merge patch of what changed.
    fn write(&mut self, status: server_core::ServerStatus) {
        if let Some(patch) = server_core::status_merge_patch(&self.server.status, &status) {
            apply_merge_patch(&mut self.document["status"], &patch);
            self.written += 1;
            if let Err(error) = self.validator.validate(&self.document) {
                panic!("written status does not validate: {error}\n{:#}", self.document);
            }
        }
        self.server.status = status;
    }

    /// One reconcile pass whose status write succeeds.
    fn pass(&mut self, view: ProviderView, second: i64) -> Outcome {
        let pass = Pass::with_facts(self.server.clone(), &Self::facts(view), &Options::default(), at(second));
        let Some(decision) = pass.decision().cloned() else { panic!("every fact was given: the pass decides") };
        if decision.actions.iter().any(|a| matches!(a, Action::WriteStatus(_))) {
            self.write(decision.status.clone());
        }
        decision.outcome
    }

    fn monitor(&mut self, record: &ProviderServer, second: i64) {
        let projected = observe(&self.server.status, Some(record), at(second));
        self.write(projected);
    }
}

/// Drives the core through a create, monitor projections, pre-launch failures
/// and their retries up to the cap, a reset and a boot, and a deletion,
/// applying every status patch the operator would send, and validates the
/// stored document after each.
#[test]
fn every_status_the_operator_writes_validates_against_the_real_schema() {
    let Some(theirs) = fixture("region.unikorn-cloud.org_servers.yaml") else {
        return;
    };
    let schema = theirs["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("the fixture schema does not compile: {e}"));
    let server = core_server();
    let document = stored_document(&server);
    let mut h = Harness { server, document, validator, written: 0 };

    assert!(matches!(h.pass(ProviderView::Absent, 20), Outcome::Yield(_)));
    let errored = provider_record(ProviderStatus::Error, PowerState::NoState, None);
    for attempt in 0..3 {
        h.monitor(&errored, 30 + attempt);
        h.pass(ProviderView::Present(errored.clone()), 31 + attempt);
        h.pass(ProviderView::Absent, 32 + attempt);
    }
    assert_eq!(h.document["status"]["providerCreateFailures"], json!(3), "{:#}", h.document);

    // An operator reset re-arms it; this time the server boots.
    h.server.status.provider_create_failures = 0;
    h.document["status"]["providerCreateFailures"] = json!(0);
    let active = provider_record(ProviderStatus::Active, PowerState::Running, Some(at(50)));
    h.monitor(&active, 51);
    assert!(matches!(h.pass(ProviderView::Present(active), 52), Outcome::Done));
    assert_eq!(h.document["status"]["provisionedAt"], json!("1970-01-01T00:00:50Z"));

    h.server.meta.deleting = true;
    h.pass(ProviderView::Absent, 60);
    assert!(h.written >= 8, "only {} writes were validated", h.written);
    assert_eq!(h.document["status"]["volumes"][0]["id"], "v1", "unmodelled fields survive");
}
