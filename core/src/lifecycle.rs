//! Where a Server stands, read from the Server alone: one classifier for the
//! demo, the simulator, the end-to-end tests and the `servers` metric, and
//! the rules' own notion of "already parked". Structural: it reads counters,
//! annotations, latches and condition reasons, never message text.

use crate::model::{CREATE_REFUSED_ANNOTATION, ConditionReason, ConditionStatus, ConditionType, Server};
use crate::predicate::{booted_server_unseen, ever_booted};
use crate::reconcile::Options;
use crate::reconcile::validate;

/// Why a Server is parked: it waits for a person (a spec change, a counter
/// reset, a look at a lost server) and is never requeued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParkKind {
    /// Every create attempt is spent (`providerCreateFailures` at the cap).
    AtCap,
    /// The provider refused this generation's create (quota, invalid request).
    Refused,
    /// The server booted and the provider no longer has it.
    MissingAfterBoot,
    /// The spec cannot be acted on as written (a repeated ID).
    InvalidSpec,
}

impl ParkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkKind::AtCap => "parked-at-cap",
            ParkKind::Refused => "refused",
            ParkKind::MissingAfterBoot => "missing-after-boot",
            ParkKind::InvalidSpec => "invalid-spec",
        }
    }
}

/// Where a Server stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lifecycle {
    /// Working toward a running server: creating, building, retrying.
    Provisioning,
    /// Provisioned, and the provider reports it healthy.
    Running,
    /// It booted, and the provider now reports it not healthy (ERROR after
    /// launch, SHUTOFF): kept, since it may hold data.
    Unhealthy,
    /// It booted, and the provider's latest record does not show it (not
    /// listed, or status UNKNOWN), not yet reported missing.
    Unseen,
    /// The last pass failed and will be retried (Available Errored, not parked).
    Errored,
    Parked(ParkKind),
    Paused,
    Deleting,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Provisioning => "provisioning",
            Lifecycle::Running => "running",
            Lifecycle::Unhealthy => "unhealthy",
            Lifecycle::Unseen => "unseen",
            Lifecycle::Errored => "errored",
            Lifecycle::Parked(kind) => kind.as_str(),
            Lifecycle::Paused => "paused",
            Lifecycle::Deleting => "deleting",
        }
    }

    pub fn park(self) -> Option<ParkKind> {
        match self {
            Lifecycle::Parked(kind) => Some(kind),
            _ => None,
        }
    }
}

/// Classifies `server` under `options` (the cap decides what "at the cap" is).
pub fn lifecycle(server: &Server, options: &Options) -> Lifecycle {
    if server.meta.deleting {
        return Lifecycle::Deleting;
    }
    if server.spec.pause {
        return Lifecycle::Paused;
    }
    if validate::no_duplicate_ids(server).is_err() {
        return Lifecycle::Parked(ParkKind::InvalidSpec);
    }
    let status = &server.status;
    let condition = |type_| status.condition(type_).map(|c| (c.status, c.reason));
    let available = condition(ConditionType::Available);
    let errored = available.is_some_and(|(_, reason)| reason == ConditionReason::Errored);
    if !ever_booted(status) {
        if status.provider_create_failures >= options.max_attempts() && !status.provider_create_retrying {
            return Lifecycle::Parked(ParkKind::AtCap);
        }
        if refused_this_generation(server) {
            return Lifecycle::Parked(ParkKind::Refused);
        }
        return if errored { Lifecycle::Errored } else { Lifecycle::Provisioning };
    }
    if errored && booted_server_unseen(status) {
        return Lifecycle::Parked(ParkKind::MissingAfterBoot);
    }
    if errored {
        return Lifecycle::Errored;
    }
    match condition(ConditionType::Healthy).map(|(status, _)| status) {
        Some(ConditionStatus::True) if available == Some((ConditionStatus::True, ConditionReason::Provisioned)) => {
            Lifecycle::Running
        }
        Some(ConditionStatus::True) => Lifecycle::Provisioning,
        Some(ConditionStatus::False) => Lifecycle::Unhealthy,
        Some(ConditionStatus::Unknown) | None => Lifecycle::Unseen,
    }
}

/// The provider refused the create of the Server's current generation.
pub(crate) fn refused_this_generation(server: &Server) -> bool {
    server
        .meta
        .annotations
        .get(CREATE_REFUSED_ANNOTATION)
        .and_then(|g| g.parse::<i64>().ok())
        .is_some_and(|g| g == server.meta.generation)
}
