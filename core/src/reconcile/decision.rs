use serde_json::Value;

use crate::model::{ResourceKind, ServerStatus};
use crate::port::{CreateRequest, ServerRef};

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
    pub fn provider_actions(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| matches!(a, Action::CreateProviderServer(_) | Action::DeleteProviderServer(_)))
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.actions.iter().filter_map(|a| match a {
            Action::Emit(event) => Some(event),
            _ => None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Add the `unikorn` finalizer to the Server.
    AddFinalizer,
    /// Remove the `unikorn` finalizer: the Server may go.
    RemoveFinalizer,
    /// Place the Server's reference finalizer on a consumed resource.
    AddReference(Reference),
    /// Remove the Server's reference finalizer from a consumed resource.
    RemoveReference(Reference),
    /// Persist the status as this JSON merge patch, with the Server's
    /// resourceVersion as precondition. Comes before any provider action it
    /// accounts for, so a crash never loses a counted attempt.
    WriteStatus(Value),
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
    Emit(Event),
}

impl Action {
    /// The annotation changes this action makes (Annotate, Record), in order.
    pub fn annotation_changes(&self) -> Vec<(&'static str, Option<&str>)> {
        match self {
            Action::Annotate { key, value } => vec![(*key, value.as_deref())],
            Action::Record(changes) => changes.iter().map(|(key, value)| (*key, value.as_deref())).collect(),
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Converged; wake again only on a watch trigger.
    Done,
    /// Waiting on something outside; requeue after the fixed interval.
    Yield(String),
    /// Parked; not requeued until a watch trigger (spec change, reset).
    Terminal(String),
    /// Failed; requeue after the fixed interval.
    Error(String),
}

impl Outcome {
    pub fn requeues(&self) -> bool {
        matches!(self, Outcome::Yield(_) | Outcome::Error(_))
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Yield(_) => "yield",
            Outcome::Terminal(_) => "terminal",
            Outcome::Error(_) => "error",
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
    /// server (flavor, image): the server keeps what it was created with.
    SpecChangeNotApplied,
}

impl EventReason {
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
