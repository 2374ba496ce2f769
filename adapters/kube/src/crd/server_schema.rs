//! The Server schema completed to the region chart's: `deploy/base/crd.yaml`
//! replaces the chart's CRD on a cluster, so it must accept exactly what the
//! chart's accepts and validate what it validates (formats, patterns, enums,
//! the immutability rule), and declare the fields other region components
//! write (volumes) that this operator does not model, and the rebuild marker, so the API
//! server keeps them. Every field carries a description of its own, so
//! `kubectl explain server.spec` on a real cluster answers.
//!
//! kube-derive generates the fields we model from server-core's types (their
//! doc comments become the descriptions); this module adds what the types
//! cannot say. `tests/crd_fixture.rs` checks the result against the chart's
//! CRD in `fixtures/unikorn-crds/`, keyword for keyword.

use serde_json::{Value, json};

/// Completes the generated `openAPIV3Schema` of the Server kind.
pub(super) fn complete(schema: &mut Value) {
    schema["description"] = json!(
        "A cloud server (a Nova server with its ports) in the cloud project of the Identity named by the \
         region.unikorn-cloud.org/identity label, reconciled by server-controller."
    );
    schema["required"] = json!(["spec"]);
    if let Some(fields) = schema.as_object_mut() {
        fields.remove("title");
    }
    let properties = &mut schema["properties"];
    properties["apiVersion"] = json!({
        "description": "The versioned schema of this object: region.unikorn-cloud.org/v1alpha1.",
        "type": "string",
    });
    properties["kind"] = json!({"description": "The kind of this object: Server.", "type": "string"});
    properties["metadata"] = json!({"type": "object"});
    complete_spec(&mut schema["properties"]["spec"]);
    complete_status(&mut schema["properties"]["status"]);
}

fn complete_spec(spec: &mut Value) {
    spec["description"] = json!(
        "What the server should be. Only pause and the fields read at create time matter: an existing server is not resized or rebuilt by this controller."
    );
    strip_preserve_unknown(spec);
    // The region chart's rule, verbatim: a server placed on a host stays there.
    spec["x-kubernetes-validations"] = json!([{
        "message": "infrastructureRef is immutable",
        "rule": "!has(oldSelf.infrastructureRef) == !has(self.infrastructureRef) && (!has(self.infrastructureRef) || self.infrastructureRef == oldSelf.infrastructureRef)",
    }]);
    let properties = &mut spec["properties"];
    for uuid in
        ["/flavorID", "/image/properties/id", "/networks/items/properties/id", "/securityGroups/items/properties/id"]
    {
        if let Some(field) = properties.pointer_mut(uuid) {
            field["format"] = json!("uuid");
        }
    }
    // Absent means disabled; a schema default would make the API server
    // write `enabled: false` into objects the chart leaves alone.
    if let Some(enabled) =
        properties.pointer_mut("/publicIPAllocation/properties/enabled").and_then(Value::as_object_mut)
    {
        enabled.remove("default");
    }
    if let Some(cidr) = properties.pointer_mut("/networks/items/properties/allowedAddressPairs/items/properties/cidr") {
        cidr["pattern"] = json!(IPV4_CIDR_PATTERN);
    }
    properties["provider"] = json!({
        "description": "Which kind of cloud serves this Server: openstack, kubernetes or simulated.",
        "type": "string",
        "enum": ["openstack", "kubernetes", "simulated"],
        "maxLength": 63,
    });
    properties["infrastructureRef"] = json!({
        "description": "Pins the server to one physical host, bypassing the provider's scheduler. Set by the region service; immutable. Not acted on by this controller.",
        "type": "string",
    });
    properties["sshInjection"] = json!({
        "description": "Which SSH access material the server gets at create time: ca (the SSH certificate authority's key in cloud-init), identityKeypair (the identity's key pair) or none.",
        "type": "string",
        "enum": ["ca", "identityKeypair", "none"],
    });
    properties["volumes"] = json!({
        "description": "Existing Volume resources to attach to the server, by ID. Written by the region service; not acted on by this controller.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["id"],
        "items": {
            "type": "object",
            "required": ["id"],
            "properties": {"id": {"description": "The Volume resource ID.", "type": "string"}},
        },
    });
}

fn complete_status(status: &mut Value) {
    status["description"] = json!("What the controller and its monitor observed. Written by server-controller only.");
    strip_preserve_unknown(status);
    let properties = &mut status["properties"];
    // The chart leaves the condition status an open string, and so must we:
    // an object with an unexpected value must still be admitted (and read).
    if let Some(fields) = properties.pointer_mut("/conditions/items/properties/status").and_then(Value::as_object_mut) {
        fields.remove("enum");
    }
    // An absent phase is omitted, never written as null.
    if let Some(phase) = properties.get_mut("phase").and_then(Value::as_object_mut) {
        phase.remove("nullable");
        if let Some(values) = phase.get_mut("enum").and_then(Value::as_array_mut) {
            values.retain(|value| !value.is_null());
        }
    }
    properties["rebuild"] = json!({
        "description": "The image rebuild under way or last failed: its target image and how far it got. Recorded before the rebuild is sent; cleared once the server runs the target image at rest.",
        "type": "object",
        "required": ["state", "targetImageID"],
        "properties": {
            "state": {
                "description": "Initiated, Rebuilding, then Succeeded or Failed.",
                "type": "string",
                "enum": ["Initiated", "Rebuilding", "Succeeded", "Failed"],
            },
            "targetImageID": {"description": "The image the rebuild moves the server to.", "type": "string", "format": "uuid"},
        },
    });
    properties["volumes"] = json!({
        "description": "The observed attachment of each desired volume. Written by the region service; not acted on by this controller.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["id"],
        "items": {
            "type": "object",
            "required": ["id", "message", "provisioningStatus"],
            "properties": {
                "device": {"description": "The guest device name the volume appears as, when known.", "type": "string"},
                "id": {"description": "The Volume resource ID.", "type": "string"},
                "message": {"description": "The attachment's state, for a person.", "type": "string"},
                "provisioningStatus": {
                    "description": "Provisioning, Provisioned, Errored or Deprovisioning.",
                    "type": "string",
                    "enum": ["Provisioning", "Provisioned", "Errored", "Deprovisioning"],
                },
            },
        },
    });
}

/// The chart's IPv4 CIDR pattern: four octets of 0–255 and a prefix of 0–32.
const IPV4_CIDR_PATTERN: &str = r"^(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\/(?:3[0-2]|[1-2]?[0-9])$";

fn strip_preserve_unknown(schema: &mut Value) {
    if let Some(fields) = schema.as_object_mut() {
        fields.remove("x-kubernetes-preserve-unknown-fields");
    }
}
