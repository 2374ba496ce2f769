//! Custom resource types: the owned `Server` and the kinds it consumes, as
//! kube-derive generates them from the core model.
//!
//! The Server spec and status are server-core's types; the wrappers here only
//! add the Kubernetes identity (group, version, kind, printer columns). The
//! consumed kinds model only what the controller reads; everything else in
//! them is preserved by the API server and never written by us.

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, JSONSchemaProps};
use kube::CustomResource;
use kube::core::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use server_core::model::{Condition, Tag};

mod server_schema;

/// API group of every kind here.
pub const GROUP: &str = "region.unikorn-cloud.org";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";

/// `Server.spec`: server-core's spec, flattened so the JSON is field for field
/// the real CRD's.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "Server",
    plural = "servers",
    namespaced,
    status = "ServerStatus",
    category = "unikorn",
    derive = "Default",
    derive = "PartialEq",
    shortname = "srv",
    doc = "Server defines a server beloning to an identity.",
    // What a person needs at a glance: what the provider says (health),
    // what the controller did (available: Provisioned means the create was
    // issued, not that it booted), the create failures counted against the
    // cap, age, and the provider's last word in the monitor's words
    // ("Server not found at the provider"). Phase is in `-o wide` only: its
    // values are fixed by the upstream CRD (Pending ... Stopped, no
    // "missing" or "error"), and a server the provider stopped listing keeps
    // its last phase because the ProviderCreateFailure predicate reads it
    // (a booted server must never look unbooted), so alone it can say
    // "Running" of a server that is gone. `-o wide` adds the phase, the
    // addresses and what the server runs. Every upstream column's path is
    // still shown.
    printcolumn = r#"{"name": "health", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Healthy\")].reason", "description": "The provider's view: Healthy, Errored, Degraded, Provisioning or Unknown (not found, or not read)."}"#,
    printcolumn = r#"{"name": "available", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].reason", "description": "The controller's view: Provisioning, Provisioned (the create was issued), Errored (see the condition's message: a parked Server's ends with the command that un-parks it) or Deprovisioning."}"#,
    printcolumn = r#"{"name": "failures", "type": "integer", "jsonPath": ".status.providerCreateFailures", "description": "Provider creates that failed before launch, counted against --provider-create-max-attempts."}"#,
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "provider", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Healthy\")].message", "description": "What the provider last said of the server, as of the monitor's last poll: active, not active, in an error state, not found at the provider..."}"#,
    printcolumn = r#"{"name": "phase", "type": "string", "jsonPath": ".status.phase", "priority": 1, "description": "The last phase the provider reported (Pending, Queued, Building, Running, Stopping, Stopped); kept when the provider no longer lists the server: read PROVIDER."}"#,
    printcolumn = r#"{"name": "privateIP", "type": "string", "jsonPath": ".status.privateIP", "priority": 1}"#,
    printcolumn = r#"{"name": "publicIP", "type": "string", "jsonPath": ".status.publicIP", "priority": 1}"#,
    printcolumn = r#"{"name": "flavor", "type": "string", "jsonPath": ".spec.flavorID", "priority": 1}"#,
    printcolumn = r#"{"name": "image", "type": "string", "jsonPath": ".spec.image.id", "priority": 1}"#
)]
pub struct ServerResourceSpec {
    #[serde(flatten)]
    pub spec: server_core::ServerSpec,
}

/// `Server.status` is server-core's status as is.
pub type ServerStatus = server_core::ServerStatus;

/// A network a Server attaches to; only its metadata (name = ID, finalizers)
/// matters to the controller.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "Network",
    plural = "networks",
    namespaced,
    status = "NetworkStatus",
    category = "unikorn",
    derive = "Default",
    printcolumn = r#"{"name": "status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].reason"}"#,
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

/// A security group a Server uses.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "SecurityGroup",
    plural = "securitygroups",
    namespaced,
    status = "ConditionsStatus",
    category = "unikorn",
    derive = "Default",
    printcolumn = r#"{"name": "status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].reason"}"#,
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct SecurityGroupSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

/// An OpenSSH user CA whose public key the Server's cloud-init trusts.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "SSHCertificateAuthority",
    plural = "sshcertificateauthorities",
    namespaced,
    category = "unikorn",
    derive = "Default",
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SshCertificateAuthoritySpec {
    #[serde(default)]
    pub public_key: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

/// The Identity (cloud project) a Server belongs to; its Available condition
/// gates provisioning.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "Identity",
    plural = "identities",
    namespaced,
    status = "ConditionsStatus",
    category = "unikorn",
    derive = "Default",
    printcolumn = r#"{"name": "provider", "type": "string", "jsonPath": ".spec.provider"}"#,
    printcolumn = r#"{"name": "status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].reason"}"#,
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct IdentitySpec {
    #[serde(default)]
    pub provider: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

/// The status of the consumed kinds that have one: their conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConditionsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A Network's status: its conditions and, once its controller made it,
/// the Neutron network (`openstack.networkID`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetworkStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openstack: Option<NetworkOpenstackStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NetworkOpenstackStatus {
    #[serde(rename = "networkID", default, skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,
}

/// The OpenStack project and credentials of an Identity (same namespace and
/// name). Its `Debug` never prints a credential.
#[derive(CustomResource, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "OpenstackIdentity",
    plural = "openstackidentities",
    namespaced,
    category = "unikorn",
    derive = "Default",
    printcolumn = r#"{"name": "provider", "type": "string", "jsonPath": ".spec.provider"}"#,
    printcolumn = r#"{"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackIdentitySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<String>,
    #[serde(rename = "userID", default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(rename = "projectID", default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(rename = "applicationCredentialID", default, skip_serializing_if = "Option::is_none")]
    pub application_credential_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_credential_secret: Option<String>,
    /// The identity's Nova keypair, booted into servers that use it.
    #[serde(rename = "sshKeyName", default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
}

impl fmt::Debug for OpenstackIdentitySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenstackIdentitySpec")
            .field("cloud", &self.cloud)
            .field("user_id", &self.user_id)
            .field("project_id", &self.project_id)
            .field("application_credential_id", &self.application_credential_id)
            .field("ssh_key_name", &self.ssh_key_name)
            .finish_non_exhaustive()
    }
}

/// The Server CRD, as `server-controller crd` prints it: the region chart's
/// schema (every field, format and validation, see [`server_schema`]) with
/// our descriptions, our printer columns and a short name.
pub fn server_crd() -> CustomResourceDefinition {
    let mut crd = Server::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
            continue;
        };
        // JSONSchemaProps round-trips through JSON losslessly; editing it as
        // JSON keeps the completion readable.
        let Ok(mut value) = serde_json::to_value(&*schema) else { continue };
        server_schema::complete(&mut value);
        if let Ok(completed) = serde_json::from_value(value) {
            *schema = completed;
        }
    }
    crd
}

/// A consumed kind's CRD as a test or demo API server serves it: it
/// preserves unknown fields, since the controller models only what it reads.
pub(crate) fn served_consumed_crd(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    preserve_unknown_fields(&mut crd, &["spec", "status"]);
    crd
}

/// A region of the platform (uni-region's `Region`, named by the region ID,
/// in the region controller's namespace). The controller reads only which
/// provider serves the region and what its clouds act on: the floating-IP
/// network selector.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "region.unikorn-cloud.org",
    version = "v1alpha1",
    kind = "Region",
    plural = "regions",
    namespaced,
    category = "unikorn",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct RegionSpec {
    /// Which provider serves the region: `openstack`, `kubernetes` or
    /// `simulated` in uni-region's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openstack: Option<RegionOpenstackSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionOpenstackSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<RegionNetworkSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionNetworkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_networks: Option<RegionExternalNetworks>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionExternalNetworks {
    /// In none is given, every external network is selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<RegionNetworkSelector>,
}

/// `ids`: an explicit list of network IDs; `tags`: networks with all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RegionNetworkSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// The Region CRD for serving it from a test or demo API server; it
/// preserves the many fields the controller does not read.
pub fn region_crd() -> CustomResourceDefinition {
    let mut crd = Region::crd();
    preserve_unknown_fields(&mut crd, &["spec", "status"]);
    crd
}

fn preserve_unknown_fields(crd: &mut CustomResourceDefinition, fields: &[&str]) {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
            continue;
        };
        let properties = schema.properties.get_or_insert_with(Default::default);
        for field in fields {
            let prop = properties
                .entry((*field).to_owned())
                .or_insert_with(|| JSONSchemaProps { type_: Some("object".into()), ..Default::default() });
            prop.x_kubernetes_preserve_unknown_fields = Some(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_crd_identity() {
        let crd = server_crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("servers.region.unikorn-cloud.org"));
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "Server");
        assert_eq!(crd.spec.names.plural, "servers");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    }

    #[test]
    fn credentials_never_print() {
        let spec = OpenstackIdentitySpec {
            password: Some("hunter2".into()),
            application_credential_secret: Some("s3cret".into()),
            ..Default::default()
        };
        let printed = format!("{:?}", OpenstackIdentity::new("id", spec));
        assert!(!printed.contains("hunter2") && !printed.contains("s3cret"), "{printed}");
    }

    #[test]
    fn ssh_ca_kind_is_named_as_the_real_crd() {
        let crd = SSHCertificateAuthority::crd();
        assert_eq!(crd.spec.names.kind, "SSHCertificateAuthority");
        assert_eq!(crd.spec.names.plural, "sshcertificateauthorities");
    }
}
