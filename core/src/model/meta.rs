//! The slice of Kubernetes object metadata the rules read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Region the server lives in; selects the cloud.
pub const REGION_LABEL: &str = "regions.unikorn-cloud.org/region-id";
/// Identity (cloud project and credentials) the server belongs to.
pub const IDENTITY_LABEL: &str = "regions.unikorn-cloud.org/identity-id";
/// Human name of the server, used to name the provider server.
pub const NAME_LABEL: &str = "unikorn-cloud.org/name";
pub const ORGANIZATION_LABEL: &str = "unikorn-cloud.org/organization";
/// The unikorn project the server belongs to (not the OpenStack project).
pub const PROJECT_LABEL: &str = "unikorn-cloud.org/project";

/// The finalizer that guards deprovisioning of a Server.
pub const SERVER_FINALIZER: &str = "unikorn";

/// Records, on the Server, the generation whose create the provider refused, so
/// the server stays parked across restarts until its spec changes.
pub const CREATE_REFUSED_ANNOTATION: &str = "server-controller.unikorn-cloud.org/create-refused-generation";

/// Records, on the Server, the generation whose user data the controller
/// refused to send (not cloud-config it can run, too large), so the server
/// stays parked across restarts until its spec changes. Its own record, not
/// [`CREATE_REFUSED_ANNOTATION`]: the provider never saw this create, and
/// only a change to the user data helps.
pub const USER_DATA_REFUSED_ANNOTATION: &str = "server-controller.unikorn-cloud.org/user-data-refused-generation";

/// Records, on the Server, the generation whose create the cloud's policy
/// forbade (HTTP 403 `PolicyNotAuthorized`): parked until a person grants
/// what the policy asks and requests a retry (or the spec changes). Its
/// words are in [`CREATE_REFUSED_MESSAGE_ANNOTATION`].
pub const CREATE_FORBIDDEN_ANNOTATION: &str = "server-controller.unikorn-cloud.org/create-forbidden-generation";

/// The words of the refusal [`CREATE_REFUSED_ANNOTATION`],
/// [`USER_DATA_REFUSED_ANNOTATION`] or [`CREATE_FORBIDDEN_ANNOTATION`] records
/// (bounded), so a parked Server keeps saying why even if the status write
/// that reported it was lost.
pub const CREATE_REFUSED_MESSAGE_ANNOTATION: &str = "server-controller.unikorn-cloud.org/create-refused-message";

/// Records, on the Server, the provider server taken over from another
/// controller whose adoption event was sent, so it is sent once.
pub const ADOPTED_ANNOTATION: &str = "server-controller.unikorn-cloud.org/adopted-provider-server";

/// Records, on the Server, that a create was issued for the attempt whose
/// failure count is the value, before the create runs. If that provider server
/// is later absent without a sign of boot, the attempt is counted as spent, so
/// creates stay bounded even when the provider drops a server unobserved.
pub const CREATE_ISSUED_ANNOTATION: &str = "server-controller.unikorn-cloud.org/create-issued-attempt";

/// An operator's request, on the Server, to un-park it: any value (e.g. the
/// time, or a ticket). The next pass consumes it once: it resets what the
/// park rests on (the failure count, the recorded refusal), removes the
/// annotation and says what it did in an event. A server that booted is
/// never recreated, retry or not.
pub const RETRY_ANNOTATION: &str = "server-controller.unikorn-cloud.org/retry";

/// Whether an operator asked for a retry that no pass has consumed yet.
pub fn retry_requested(meta: &ObjectMeta) -> bool {
    meta.annotations.contains_key(RETRY_ANNOTATION)
}

/// The finalizer a Server places on each resource it consumes.
pub fn reference_finalizer(server_name: &str) -> String {
    format!("servers.region.unikorn-cloud.org/{server_name}")
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub generation: i64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub finalizers: Vec<String>,
    /// Whether a deletionTimestamp is set.
    pub deleting: bool,
}

impl ObjectMeta {
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}
