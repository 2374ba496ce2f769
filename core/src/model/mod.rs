//! The Server resource and the resources it consumes.

mod condition;
mod consumed;
mod display;
mod meta;
mod rebuild;
mod spec;
mod status;

pub use condition::{
    Condition, ConditionReason, ConditionStatus, ConditionType, find_condition, read_condition_statuses, set_condition,
};
pub use consumed::{Consumed, Detail, Named, ResourceKind, Scope};
pub use meta::{
    ADOPTED_ANNOTATION, CREATE_FORBIDDEN_ANNOTATION, CREATE_ISSUED_ANNOTATION, CREATE_REFUSED_ANNOTATION,
    CREATE_REFUSED_MESSAGE_ANNOTATION, IDENTITY_LABEL, NAME_LABEL, ORGANIZATION_LABEL, ObjectMeta, PROJECT_LABEL,
    REGION_LABEL, RETRY_ANNOTATION, SERVER_FINALIZER, USER_DATA_REFUSED_ANNOTATION, reference_finalizer,
    retry_requested,
};
pub use rebuild::{Rebuild, RebuildState};
pub use spec::{
    AllowedAddressPair, ImageSpec, NetworkAttachment, PublicIpAllocation, SecurityGroupRef, ServerSpec, SshInjection,
    Tag, UserData,
};
pub use status::{Phase, ServerStatus};

use serde::{Deserialize, Serialize};

/// A Server as the rules see it: metadata, spec and the persisted status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    pub meta: ObjectMeta,
    pub spec: ServerSpec,
    pub status: ServerStatus,
}
