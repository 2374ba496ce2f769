//! A tenant: the namespace, region and identity a Server names, and the
//! resources it consumes, as the objects the seeding writes.

use serde_json::{Value, json};
use server_core::model::{IDENTITY_LABEL, REGION_LABEL};

/// The API version of every kind the operator reads and writes.
pub const API_VERSION: &str = "region.unikorn-cloud.org/v1alpha1";

/// Who owns the Servers of a test or a demo: a namespace, a region, an
/// Identity and the OpenStack credentials of its OpenstackIdentity (the only
/// ones the OpenStack simulator accepts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    pub namespace: String,
    pub region: String,
    pub identity: String,
    pub project: String,
    pub openstack_user: String,
    pub openstack_password: String,
}

impl Tenant {
    /// A tenant with placeholder OpenStack project and credentials.
    pub fn new(namespace: &str, region: &str, identity: &str) -> Self {
        Tenant {
            namespace: namespace.into(),
            region: region.into(),
            identity: identity.into(),
            project: format!("project-{identity}"),
            openstack_user: format!("user-{identity}"),
            openstack_password: format!("password-{identity}"),
        }
    }

    /// The OpenStack project and credentials of the OpenstackIdentity.
    pub fn with_openstack(mut self, project: &str, user: &str, password: &str) -> Self {
        self.project = project.into();
        self.openstack_user = user.into();
        self.openstack_password = password.into();
        self
    }

    /// An object in the tenant's namespace, labelled with its identity and
    /// region as unikorn labels the resources it makes. No `kind`: the store
    /// takes the type from the resource it is inserted into (and the
    /// end-to-end tests are tuned to bodies without one; see
    /// `a_frozen_cache_only_conflicts_and_never_leaks_a_reference`).
    pub fn object(&self, name: &str, spec: Value) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": { IDENTITY_LABEL: self.identity, REGION_LABEL: self.region },
            },
            "spec": spec,
        })
    }

    /// The Identity, with the `Available` condition its own controller sets
    /// once it is provisioned when `ready`, without a status otherwise.
    pub fn identity(&self, ready: bool) -> Value {
        let mut identity = self.object(&self.identity, json!({ "provider": "openstack" }));
        if ready {
            identity["status"] = Self::provisioned();
        }
        identity
    }

    /// The status of a provisioned Identity.
    pub fn provisioned() -> Value {
        json!({ "conditions": [{
            "type": "Available", "status": "True", "reason": "Provisioned",
            "message": "Provisioned", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]})
    }

    /// The OpenstackIdentity named like the Identity.
    pub fn openstack_identity(&self) -> Value {
        self.object(
            &self.identity,
            json!({ "projectID": self.project, "userID": self.openstack_user, "password": self.openstack_password }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_carry_the_namespace_and_the_identity_and_region_labels() {
        let tenant = Tenant::new("ns", "region-a", "identity-a");
        let network = tenant.object("net-a", json!({"prefix": "10.0.0.0/24"}));
        assert_eq!(network["metadata"]["namespace"], "ns");
        assert_eq!(network["metadata"]["labels"][IDENTITY_LABEL], "identity-a");
        assert_eq!(network["metadata"]["labels"][REGION_LABEL], "region-a");
    }

    #[test]
    fn only_a_ready_identity_has_the_available_condition() {
        let tenant = Tenant::new("ns", "region-a", "identity-a");
        assert_eq!(tenant.identity(true)["status"]["conditions"][0]["status"], "True");
        assert!(tenant.identity(false).get("status").is_none());
        let credentials = tenant.with_openstack("p", "u", "pw").openstack_identity();
        assert_eq!(credentials["spec"], json!({"projectID": "p", "userID": "u", "password": "pw"}));
    }
}
