use super::api_failure::ApiFailure;
use super::facts::RegionUnserved;
use crate::lifecycle::Park;
use crate::model::{ResourceKind, ServerStatus};
use crate::port::{
    AttachedResource, CloudError, CreateRequest, FloatingIpRequest, PortUpdate, RebuildRequest, ServerRef,
};
use crate::status_patch::StatusPatch;
use crate::user_data::UserDataError;

/// The result of one pass: the status the Server should have, the ordered
/// idempotent actions that get it there, and what to do next. An adapter runs
/// the actions in order, stops at the first failure, and decides nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: ServerStatus,
    pub actions: Vec<Action>,
    pub outcome: Outcome,
}

impl Decision {
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.actions.iter().filter_map(|a| match a {
            Action::Emit(event) => Some(event),
            _ => None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Add the `unikorn` finalizer to the Server, with these annotation
    /// changes in the same guarded metadata patch (a first create's note:
    /// one write where two would do).
    AddFinalizer {
        annotations: Vec<(&'static str, Option<String>)>,
    },
    /// Remove the `unikorn` finalizer: the Server may go.
    RemoveFinalizer,
    /// Place the Server's reference finalizer on a consumed resource.
    AddReference(Reference),
    /// Remove the Server's reference finalizer from a consumed resource.
    RemoveReference(Reference),
    /// Persist the status as this merge patch, with the Server's
    /// resourceVersion as precondition. Comes before any provider action it
    /// accounts for, so a crash never loses a counted attempt.
    WriteStatus(StatusPatch),
    /// Set (`Some`) or remove (`None`) one of the controller's own
    /// annotations on the Server: durable notes the status schema has no
    /// field for (a refused generation, an issued create).
    Annotate {
        key: &'static str,
        value: Option<String>,
    },
    /// Set (`Some`) or remove (`None`) controller annotations in one
    /// metadata merge patch that a concurrent write does not make fail (no
    /// resourceVersion precondition). For records of what already happened
    /// (a refused create, a create proven not to have landed): they stay true
    /// whatever else changed since the pass read the Server, and a lost one
    /// would make the next pass count a create that never was, or send a
    /// refused one again. It does not adopt what it did not see: the pass's
    /// later guarded writes still fail if another writer got in before it.
    Record(Vec<(&'static str, Option<String>)>),
    CreateProviderServer(Box<CreateRequest>),
    DeleteProviderServer(ServerRef),
    /// Rebuild the present provider server onto another image: the one
    /// destructive step of an image change, sent only under an intent read
    /// back durable (see `rebuild`).
    RebuildProviderServer(RebuildRequest),
    /// Release (delete) one of the Server's provider resources besides its
    /// server, by its ID; idempotent (one already gone is released).
    ReleaseAttachment(AttachedResource),
    /// Set the present server's port's security groups and allowed address
    /// pairs to the spec's.
    UpdatePort(Box<PortUpdate>),
    /// Give the present server's port a floating IP (idempotent).
    EnsureFloatingIp(FloatingIpRequest),
    Emit(Event),
}

impl Action {
    /// A short name for logs, metrics and traces; never its payload (a
    /// create request carries user data).
    pub fn name(&self) -> &'static str {
        match self {
            Action::AddFinalizer { .. } => "AddFinalizer",
            Action::RemoveFinalizer => "RemoveFinalizer",
            Action::AddReference(_) => "AddReference",
            Action::RemoveReference(_) => "RemoveReference",
            Action::WriteStatus(_) => "WriteStatus",
            Action::Annotate { .. } => "Annotate",
            Action::Record(_) => "Record",
            Action::CreateProviderServer(_) => "CreateProviderServer",
            Action::DeleteProviderServer(_) => "DeleteProviderServer",
            Action::RebuildProviderServer(_) => "RebuildProviderServer",
            Action::ReleaseAttachment(_) => "ReleaseAttachment",
            Action::UpdatePort(_) => "UpdatePort",
            Action::EnsureFloatingIp(_) => "EnsureFloatingIp",
            Action::Emit(_) => "Emit",
        }
    }

    /// The reference this action adds or removes, if it is one.
    pub fn reference(&self) -> Option<&Reference> {
        self.reference_change().map(|(reference, _)| reference)
    }

    /// The reference this action changes and whether it adds it (`true`)
    /// or removes it.
    pub fn reference_change(&self) -> Option<(&Reference, bool)> {
        match self {
            Action::AddReference(reference) => Some((reference, true)),
            Action::RemoveReference(reference) => Some((reference, false)),
            _ => None,
        }
    }

    /// The annotation changes this action makes (Annotate, Record, a
    /// finalizer's addition), in order.
    pub fn annotation_changes(&self) -> Vec<(&'static str, Option<&str>)> {
        match self {
            Action::Annotate { key, value } => vec![(*key, value.as_deref())],
            Action::Record(changes) | Action::AddFinalizer { annotations: changes } => {
                changes.iter().map(|(key, value)| (*key, value.as_deref())).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// A finalizer edge from a Server to a resource it consumes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    pub kind: ResourceKind,
    /// The resource's name (its ID).
    pub name: String,
    /// The finalizer string, `servers.region.unikorn-cloud.org/<server>`.
    pub finalizer: String,
}

/// What a pass ends in. Each carries a typed reason; its message (the
/// Available condition's, on the wire) is built from it, never parsed back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Converged; wake again only on a watch trigger.
    Done,
    /// Waiting on something outside; requeue after the fixed interval.
    Yield(Wait),
    /// Parked; not requeued until a watch trigger (spec change, reset).
    Terminal(Park),
    /// Failed; requeue after the fixed interval.
    Error(PassError),
}

impl Outcome {
    pub fn requeues(&self) -> bool {
        matches!(self, Outcome::Yield(_) | Outcome::Error(_))
    }

    /// The longest a provider's `Retry-After` holds a Server back.
    pub const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

    /// When the next pass runs after this outcome, given the fixed yield
    /// interval: none for Done and Terminal; for a provider that asked to be
    /// left alone for a while (`Retry-After` on a 429 or a 413 `overLimit`),
    /// that long, at least the yield interval and at most
    /// [`Outcome::MAX_RETRY_AFTER`]; else the yield interval.
    pub fn requeue_after(&self, yield_interval: std::time::Duration) -> Option<std::time::Duration> {
        let asked = match self {
            Outcome::Yield(Wait::Provider(error)) | Outcome::Error(PassError::Cloud(error)) => error.retry_after(),
            Outcome::Yield(_) | Outcome::Error(_) => None,
            Outcome::Done | Outcome::Terminal(_) => return None,
        };
        Some(
            asked.map_or(yield_interval, |asked| {
                asked.max(yield_interval).min(Self::MAX_RETRY_AFTER.max(yield_interval))
            }),
        )
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Yield(_) => "yield",
            Outcome::Terminal(_) => "terminal",
            Outcome::Error(_) => "error",
        }
    }

    /// What the outcome says (the Available message of a pass that ends in
    /// it; a park's adds how to un-park the Server, [`Park::available_message`]);
    /// `None` for Done, whose message depends on the direction.
    pub fn message(&self) -> Option<String> {
        match self {
            Outcome::Done => None,
            Outcome::Yield(wait) => Some(wait.message()),
            Outcome::Terminal(park) => Some(park.message()),
            Outcome::Error(error) => Some(error.to_string()),
        }
    }
}

/// What a yielding pass waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The Server's Identity is not ready yet.
    IdentityNotReady,
    /// The provider could not be asked about the server (`reason` says why).
    ProviderUnknown { reason: String },
    /// There is no cloud account to ask as (the identity is gone).
    NoCloudAccount,
    /// This controller has no cloud for the Server's region; nothing is
    /// created or deleted until one serves it (passes go on, so a Region or
    /// configuration fix is picked up).
    RegionUnserved(RegionUnserved),
    /// Deleting: the provider could not be asked whether the server exists.
    ProviderUnknownBeforeDelete { reason: String },
    /// A create was sent; its server is expected to appear.
    Creating,
    /// The last create's server has not appeared, within its grace.
    IssuedCreate,
    /// Deleting: a create of unknown fate may still land.
    IssuedCreateBeforeRelease,
    /// The failed provider server is being deleted before the retry.
    DeletingFailedServer,
    /// Deleting: the provider server's deletion is under way.
    DeletingProviderServer,
    /// Deleting: the provider server is gone, but whether the Server's ports
    /// and floating IPs are could not be told (`reason` says why).
    AttachmentsUnknownBeforeRelease { reason: String },
    /// Deleting: the provider server is gone; these resources of the Server
    /// are being released, and the Server goes once none is left.
    ReleasingAttachments { remaining: Vec<AttachedResource> },
    /// The present server's port and floating IP could not be read
    /// (`reason` says why): whether they follow the spec is not known.
    NetworkingUnknown { reason: String },
    /// A provider call failed in a way that passes (busy, rate limited,
    /// unavailable, a create answer that proves nothing landed).
    Provider(CloudError),
    /// A write met a concurrent writer (409).
    Conflict(ApiFailure),
    /// The Server changed between the pass's read and its create (an
    /// adapter's re-read found a new generation).
    ServerChanged,
    /// An image change is on its way to the provider server.
    Rebuild(RebuildWait),
}

/// Where an image change waits (see `rebuild`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebuildWait {
    /// The intent was recorded; a later pass that reads it back sends it.
    IntentRecorded,
    /// The server has not booted yet: its image is still a create
    /// parameter, and an image change waits for the first boot.
    FirstBoot,
    /// The provider server is busy with a task; the rebuild waits for rest.
    ProviderBusy,
    /// The provider could not be asked which image the server runs.
    ImageUnreadable,
    /// The finished rebuild's marker was cleared; the next pass reads that back.
    Settling,
    /// The rebuild's failure was recorded; the next pass reads it back and parks.
    FailureRecorded,
    /// The marker's end is recorded and the provider still works on the server.
    Converging,
}

impl RebuildWait {
    pub fn message(self) -> &'static str {
        match self {
            RebuildWait::IntentRecorded => "Image change recorded; rebuilding the provider server onto it",
            RebuildWait::FirstBoot => "Image change waits until the provider server first boots",
            RebuildWait::ProviderBusy => "Image change waits until the provider server is at rest",
            RebuildWait::ImageUnreadable => {
                "Waiting for the provider to tell which image the server runs before changing it"
            }
            RebuildWait::Settling => "Provider server rebuilt onto the new image; confirming",
            RebuildWait::FailureRecorded => "Provider server rebuild failed; recording it",
            RebuildWait::Converging => "Waiting for the provider server rebuild to settle",
        }
    }
}

impl Wait {
    pub fn message(&self) -> String {
        match self {
            Wait::IdentityNotReady => "Waiting for the identity to become ready".into(),
            Wait::ProviderUnknown { reason } => format!("Waiting for the provider to answer: {reason}"),
            Wait::NoCloudAccount => "Waiting for the identity's cloud account to act on the provider".into(),
            Wait::RegionUnserved(unserved) => {
                format!("Waiting for a cloud for region {}: {}", unserved.region(), unserved.message())
            }
            Wait::ProviderUnknownBeforeDelete { reason } => {
                format!("Waiting for the provider to answer before deleting: {reason}")
            }
            Wait::Creating => CREATING_MESSAGE.into(),
            Wait::IssuedCreate => AWAITING_CREATE_MESSAGE.into(),
            Wait::IssuedCreateBeforeRelease => AWAITING_CREATE_BEFORE_RELEASE_MESSAGE.into(),
            Wait::DeletingFailedServer => DELETING_FAILED_MESSAGE.into(),
            Wait::DeletingProviderServer => "Deleting provider server".into(),
            Wait::AttachmentsUnknownBeforeRelease { reason } => format!(
                "Waiting for the provider to tell the server's ports and floating IPs before releasing the server: \
                 {reason}"
            ),
            Wait::ReleasingAttachments { remaining } => {
                let named: Vec<String> = remaining.iter().map(ToString::to_string).collect();
                format!("Releasing the provider server's {}", named.join(", "))
            }
            Wait::NetworkingUnknown { reason } => {
                format!("Waiting for the provider to tell the server's port and floating IP: {reason}")
            }
            Wait::Provider(error) => format!("Waiting for the provider: {error}"),
            Wait::Conflict(failure) => format!("Conflicting write, retrying: {failure}"),
            Wait::ServerChanged => "the Server changed since it was read; deciding again".into(),
            Wait::Rebuild(wait) => wait.message().into(),
        }
    }
}

pub(crate) const CREATING_MESSAGE: &str = "Creating provider server";
pub(crate) const RETRY_READY_MESSAGE: &str = "Retrying provider server create";
pub(crate) const DELETING_FAILED_MESSAGE: &str = "Deleting failed provider server before retrying create";
const AWAITING_CREATE_MESSAGE: &str =
    "Waiting for the provider server of the last create to appear (its answer may have been lost)";
const AWAITING_CREATE_BEFORE_RELEASE_MESSAGE: &str =
    "Waiting for the fate of the last create before releasing the server (a late create would be orphaned)";

/// Why a pass failed (it is requeued); the message says what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("server is missing required label {label}; set it to add the server")]
    MissingLabel { label: &'static str },
    #[error("attempt to reference unknown resource ID {id} ({})", kind.as_str())]
    UnknownReference { kind: ResourceKind, id: String },
    /// The user data cannot be built for a reason that can pass without a
    /// spec change (the SSH CA's key).
    #[error("cannot build user data: {0}")]
    UserData(UserDataError),
    /// The provider refused the credentials or a call in a way that does not pass.
    #[error("{0}")]
    Cloud(CloudError),
    /// The server exists, but a step after it (its public IP, its port's
    /// security) failed in a way that does not pass by itself.
    #[error("the provider server exists, but {}: {error}; {}", what.failed(), what.remedy())]
    AfterCreate { what: ServerPart, error: CloudError },
    #[error("Kubernetes API request failed: {0}")]
    Api(ApiFailure),
    /// The Server was deleted from the API server while the pass acted.
    #[error("the Server no longer exists")]
    ServerGone,
    /// The adapter stopped driving the pass before its actions all ran.
    #[error("the pass stopped before its actions ran")]
    Interrupted,
}

/// What of a Server's provider resources a step after its create sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerPart {
    /// The floating IP on its port.
    PublicIp,
    /// Its port's security groups and allowed address pairs.
    PortSecurity,
}

impl ServerPart {
    fn failed(self) -> &'static str {
        match self {
            ServerPart::PublicIp => "its public IP could not be allocated",
            ServerPart::PortSecurity => "its port's security groups and address pairs could not be set",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            ServerPart::PublicIp => {
                "an operator must fix the cause (the floating-IP quota, a router from the server's network to the \
                 external network, the policy); it is tried again on every pass"
            }
            ServerPart::PortSecurity => {
                "an operator must fix the cause (the security groups, the policy); it is tried again on every pass"
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

/// Event reasons, as the Go controller names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventReason {
    ProviderCreateRetrying,
    ProviderCreateRetryReady,
    ProviderCreateFailed,
    ProviderCreateRefused,
    ProviderServerMissing,
    /// A deleting Server released without looking for its provider server,
    /// because its identity is gone (this controller's own reason).
    ProviderServerAbandoned,
    /// The user data cannot be sent (refused before any create).
    UserDataRefused,
    /// An operator's retry annotation was consumed (this controller's own).
    RetryRequested,
    /// An operator's retry annotation was consumed and refused: the server
    /// booted before, so it is never recreated (this controller's own).
    RetryRefused,
    /// A provider server another controller made for the Server (the Go
    /// controller, before this one took the region over) is now its own.
    ProviderServerAdopted,
    /// Tags the provider would refuse were left out of the create (this
    /// controller's own; the Go controller sent them and the create failed).
    ProviderTagsDropped,
    /// A spec change the controller does not apply to an existing provider
    /// server (its flavor): the server keeps what it was created with.
    SpecChangeNotApplied,
    /// The Server holds something this controller cannot read (this
    /// controller's own): named by field, never by value.
    ServerUnreadable,
    /// The provider accepted a rebuild of the server onto the spec's image.
    ProviderServerRebuilding,
    /// The provider server runs the spec's image after a rebuild.
    ProviderServerRebuilt,
    /// A rebuild ended in an error; the Server is parked until another image.
    ProviderServerRebuildFailed,
    /// The spec asks for what this controller does not do (a host pin,
    /// `spec.infrastructureRef`): parked before anything is touched (this
    /// controller's own).
    SpecNotSupported,
    /// The API server refused a reference write on a consumed object (a
    /// shared Network whose references fill what etcd takes, a quota, a
    /// webhook): the pass retries, and no status is written before the
    /// create, so the event is what tells why (this controller's own).
    ReferenceNotWritten,
}

impl EventReason {
    /// Every reason, for metrics that show each from the start.
    pub const ALL: [EventReason; 18] = [
        EventReason::ProviderCreateRetrying,
        EventReason::ProviderCreateRetryReady,
        EventReason::ProviderCreateFailed,
        EventReason::ProviderCreateRefused,
        EventReason::ProviderServerMissing,
        EventReason::ProviderServerAbandoned,
        EventReason::UserDataRefused,
        EventReason::RetryRequested,
        EventReason::RetryRefused,
        EventReason::ProviderServerAdopted,
        EventReason::ProviderTagsDropped,
        EventReason::SpecChangeNotApplied,
        EventReason::ServerUnreadable,
        EventReason::ProviderServerRebuilding,
        EventReason::ProviderServerRebuilt,
        EventReason::ProviderServerRebuildFailed,
        EventReason::SpecNotSupported,
        EventReason::ReferenceNotWritten,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::ProviderCreateRetrying => "ProviderCreateRetrying",
            EventReason::ProviderCreateRetryReady => "ProviderCreateRetryReady",
            EventReason::ProviderCreateFailed => "ProviderCreateFailed",
            EventReason::ProviderCreateRefused => "ProviderCreateRefused",
            EventReason::ProviderServerMissing => "ProviderServerMissing",
            EventReason::ProviderServerAbandoned => "ProviderServerAbandoned",
            EventReason::UserDataRefused => "UserDataRefused",
            EventReason::RetryRequested => "RetryRequested",
            EventReason::RetryRefused => "RetryRefused",
            EventReason::ProviderServerAdopted => "ProviderServerAdopted",
            EventReason::ProviderTagsDropped => "ProviderTagsDropped",
            EventReason::SpecChangeNotApplied => "SpecChangeNotApplied",
            EventReason::ServerUnreadable => "ServerUnreadable",
            EventReason::ProviderServerRebuilding => "ProviderServerRebuilding",
            EventReason::ProviderServerRebuilt => "ProviderServerRebuilt",
            EventReason::ProviderServerRebuildFailed => "ProviderServerRebuildFailed",
            EventReason::SpecNotSupported => "SpecNotSupported",
            EventReason::ReferenceNotWritten => "ReferenceNotWritten",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: EventReason,
    /// What the controller did, for events.k8s.io `action`.
    pub action: &'static str,
    pub note: String,
}

#[cfg(test)]
mod tests {
    use super::EventReason;

    #[test]
    fn all_holds_every_event_reason_once() {
        // Exhaustive: a new reason does not compile here until it is listed,
        // and then must be in ALL.
        let position = |reason: EventReason| match reason {
            EventReason::ProviderCreateRetrying
            | EventReason::ProviderCreateRetryReady
            | EventReason::ProviderCreateFailed
            | EventReason::ProviderCreateRefused
            | EventReason::ProviderServerMissing
            | EventReason::ProviderServerAbandoned
            | EventReason::UserDataRefused
            | EventReason::RetryRequested
            | EventReason::RetryRefused
            | EventReason::ProviderServerAdopted
            | EventReason::ProviderTagsDropped
            | EventReason::SpecChangeNotApplied
            | EventReason::ServerUnreadable
            | EventReason::ProviderServerRebuilding
            | EventReason::ProviderServerRebuilt
            | EventReason::ProviderServerRebuildFailed
            | EventReason::SpecNotSupported
            | EventReason::ReferenceNotWritten => EventReason::ALL.iter().position(|listed| *listed == reason),
        };
        let names: std::collections::BTreeSet<&str> = EventReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), EventReason::ALL.len(), "a reason listed twice");
        for reason in EventReason::ALL {
            assert!(position(reason).is_some());
        }
    }
}
