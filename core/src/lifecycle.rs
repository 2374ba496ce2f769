//! Where a Server stands, read from the Server alone: one classifier for the
//! demo, the simulator, the end-to-end tests and the `servers` metric, and
//! the rules' own notion of "already parked". Structural: it reads counters,
//! annotations, latches and condition reasons, never message text.

use std::collections::BTreeSet;

use crate::model::{
    CREATE_FORBIDDEN_ANNOTATION, CREATE_REFUSED_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION, ConditionReason,
    ConditionStatus, ConditionType, RETRY_ANNOTATION, RebuildState, ResourceKind, Server, USER_DATA_REFUSED_ANNOTATION,
};
use crate::options::Options;
use crate::predicate::{booted_server_unseen, ever_booted};

/// Why a Server is parked: it waits for a person (a spec change, a counter
/// reset, a look at a lost server) and is never requeued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParkKind {
    /// Every create attempt is spent (`providerCreateFailures` at the cap).
    AtCap,
    /// The provider refused this generation's create (quota, invalid request).
    Refused,
    /// This generation's user data cannot be sent (not cloud-config cloud-init
    /// runs, too large): the provider never saw a create.
    UserDataRefused,
    /// The server booted and the provider no longer has it.
    MissingAfterBoot,
    /// The spec cannot be acted on as written (a repeated ID).
    InvalidSpec,
    /// The spec pins the server to a physical host (`infrastructureRef`),
    /// which this controller does not do; the CRD makes the pin immutable.
    HostPinned,
    /// The cloud's policy forbade this generation's create: a person must
    /// grant what it asks for, then request a retry.
    Forbidden,
    /// A rebuild onto the spec's image ended in an error: the server is kept
    /// as it is until another image is asked for, or it is replaced.
    RebuildFailed,
}

impl ParkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkKind::AtCap => "parked-at-cap",
            ParkKind::Refused => "refused",
            ParkKind::UserDataRefused => "user-data-refused",
            ParkKind::MissingAfterBoot => "missing-after-boot",
            ParkKind::InvalidSpec => "invalid-spec",
            ParkKind::HostPinned => "host-pinned",
            ParkKind::Forbidden => "forbidden",
            ParkKind::RebuildFailed => "rebuild-failed",
        }
    }

    /// What a person does to un-park a Server of this park, ending with the
    /// one command that does it for `namespace/name`.
    pub fn unpark(self, namespace: &str, name: &str) -> String {
        let retry = format!("kubectl annotate server {name} -n {namespace} {RETRY_ANNOTATION}=now");
        let edit = format!("kubectl edit server {name} -n {namespace}");
        match self {
            ParkKind::AtCap => format!("fix the cause (image, flavor, capacity), then request a retry: {retry}"),
            ParkKind::Refused => {
                format!("change the spec, or remove the cause (e.g. free quota) and request a retry: {retry}")
            }
            ParkKind::UserDataRefused => {
                format!("fix spec.userData (a retry alone is refused again): {edit}")
            }
            ParkKind::MissingAfterBoot => format!(
                "it is never recreated (it may have held data); find out what deleted it, then delete the Server and \
                 create a new one: kubectl delete server {name} -n {namespace}"
            ),
            ParkKind::InvalidSpec => format!("fix the spec: {edit}"),
            ParkKind::HostPinned => format!(
                "the pin cannot be edited away (the CRD makes spec.infrastructureRef immutable): delete the Server \
                 and create it again without the pin, or have a controller that places servers on hosts serve it: \
                 kubectl delete server {name} -n {namespace}"
            ),
            ParkKind::Forbidden => format!(
                "no spec change fixes a policy: have the identity's cloud user granted the role the policy asks \
                 for, then request a retry: {retry}"
            ),
            ParkKind::RebuildFailed => format!(
                "select another image (the same one is not rebuilt again), or replace the server by deleting the \
                 Server and creating it again: {edit}"
            ),
        }
    }
}

/// A park and what it says: the Available message of a parked Server is
/// [`Park::message`], built from the park, never read back to classify it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Park {
    AtCap {
        max: i32,
    },
    /// The provider refused the create of this generation; `message` says why.
    Refused {
        message: String,
    },
    /// This generation's user data is refused before any create; `message`
    /// says why (never quoting the data).
    UserDataRefused {
        message: String,
    },
    MissingAfterBoot,
    /// The Server cannot be acted on as written (a repeated ID; a field an
    /// adapter cannot read); `message` says what to change.
    InvalidSpec {
        message: String,
    },
    /// The cloud's policy forbade the create of this generation; `message`
    /// says what a person must do.
    Forbidden {
        message: String,
    },
    /// The spec pins the server to a physical host.
    HostPinned,
    /// The rebuild onto `image` ended in an error.
    RebuildFailed {
        image: String,
    },
}

impl Park {
    pub fn kind(&self) -> ParkKind {
        match self {
            Park::AtCap { .. } => ParkKind::AtCap,
            Park::Refused { .. } => ParkKind::Refused,
            Park::UserDataRefused { .. } => ParkKind::UserDataRefused,
            Park::MissingAfterBoot => ParkKind::MissingAfterBoot,
            Park::InvalidSpec { .. } => ParkKind::InvalidSpec,
            Park::Forbidden { .. } => ParkKind::Forbidden,
            Park::HostPinned => ParkKind::HostPinned,
            Park::RebuildFailed { .. } => ParkKind::RebuildFailed,
        }
    }

    /// The Available condition's message for this park.
    pub fn message(&self) -> String {
        match self {
            Park::AtCap { max } => format!("Provider server create failed after {max} attempts"),
            Park::Refused { message }
            | Park::UserDataRefused { message }
            | Park::InvalidSpec { message }
            | Park::Forbidden { message } => message.clone(),
            Park::MissingAfterBoot => MISSING_AFTER_BOOT_MESSAGE.into(),
            Park::HostPinned => HOST_PINNED_MESSAGE.into(),
            Park::RebuildFailed { image } => format!(
                "the provider server's rebuild onto image {image} ended in an error; it is kept as it is (its root \
                 disk may not hold what it did)"
            ),
        }
    }

    /// The Available condition's message of `namespace/name` in this park:
    /// why, then how to un-park it, ending with the command.
    pub fn available_message(&self, namespace: &str, name: &str) -> String {
        format!("{}; to un-park, {}", self.message(), self.kind().unpark(namespace, name))
    }
}

const HOST_PINNED_MESSAGE: &str = "spec.infrastructureRef pins the server to a physical host, which this controller \
                                   does not do (it would need Nova's hypervisor_hostname and admin credentials)";
const MISSING_AFTER_BOOT_MESSAGE: &str =
    "provider server disappeared after it booted; it is not recreated automatically because it may have held data";
/// The message of a refusal recorded before its words were (an older
/// controller's record).
const REFUSED_FALLBACK_MESSAGE: &str = "provider refused to create the server";

/// The park `server` is in, with its message, if it is parked.
pub fn park(server: &Server, options: &Options) -> Option<Park> {
    Some(match lifecycle(server, options).park()? {
        ParkKind::AtCap => Park::AtCap { max: options.max_attempts() },
        ParkKind::Refused => Park::Refused { message: refusal_message(server) },
        ParkKind::UserDataRefused => Park::UserDataRefused { message: refusal_message(server) },
        ParkKind::MissingAfterBoot => Park::MissingAfterBoot,
        ParkKind::InvalidSpec => Park::InvalidSpec { message: duplicate_id(server).unwrap_or_default() },
        ParkKind::Forbidden => Park::Forbidden { message: refusal_message(server) },
        ParkKind::HostPinned => Park::HostPinned,
        ParkKind::RebuildFailed => Park::RebuildFailed {
            image: server.status.rebuild.as_ref().map(|r| r.target_image_id.clone()).unwrap_or_default(),
        },
    })
}

/// The park of a Server whose create or user data of this generation is
/// refused, from its record.
pub(crate) fn refused_park(server: &Server) -> Option<Park> {
    if forbidden_this_generation(server) {
        Some(Park::Forbidden { message: refusal_message(server) })
    } else if user_data_refused_this_generation(server) {
        Some(Park::UserDataRefused { message: refusal_message(server) })
    } else if refused_this_generation(server) {
        Some(Park::Refused { message: refusal_message(server) })
    } else {
        None
    }
}

/// Why this generation's create is refused: the recorded words; for a record
/// without them, the condition that reported them, else a generic message.
fn refusal_message(server: &Server) -> String {
    if let Some(message) = server.meta.annotations.get(CREATE_REFUSED_MESSAGE_ANNOTATION) {
        return message.clone();
    }
    server
        .status
        .condition(ConditionType::Available)
        .filter(|c| c.reason == ConditionReason::Errored)
        .map(|c| c.message.clone())
        .unwrap_or_else(|| REFUSED_FALLBACK_MESSAGE.into())
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
    if let Some(park) = spec_park(server) {
        return Lifecycle::Parked(park.kind());
    }
    let status = &server.status;
    let condition = |type_| status.condition(type_).map(|c| (c.status, c.reason));
    let available = condition(ConditionType::Available);
    let errored = available.is_some_and(|(_, reason)| reason == ConditionReason::Errored);
    if !ever_booted(status) {
        if status.provider_create_failures >= options.max_attempts() && !status.provider_create_retrying {
            return Lifecycle::Parked(ParkKind::AtCap);
        }
        if user_data_refused_this_generation(server) {
            return Lifecycle::Parked(ParkKind::UserDataRefused);
        }
        if forbidden_this_generation(server) {
            return Lifecycle::Parked(ParkKind::Forbidden);
        }
        if refused_this_generation(server) {
            return Lifecycle::Parked(ParkKind::Refused);
        }
        return if errored { Lifecycle::Errored } else { Lifecycle::Provisioning };
    }
    if errored && booted_server_unseen(status) {
        return Lifecycle::Parked(ParkKind::MissingAfterBoot);
    }
    if errored && rebuild_failed(server) {
        return Lifecycle::Parked(ParkKind::RebuildFailed);
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

/// The marker of a rebuild onto the spec's image says it failed.
pub(crate) fn rebuild_failed(server: &Server) -> bool {
    server
        .status
        .rebuild
        .as_ref()
        .is_some_and(|r| r.state == RebuildState::Failed && r.target_image_id == server.spec.image.id)
}

/// The cloud's policy forbade the create of the Server's current generation.
pub(crate) fn forbidden_this_generation(server: &Server) -> bool {
    recorded_for_this_generation(server, CREATE_FORBIDDEN_ANNOTATION)
}

/// The provider refused the create of the Server's current generation.
pub(crate) fn refused_this_generation(server: &Server) -> bool {
    recorded_for_this_generation(server, CREATE_REFUSED_ANNOTATION)
}

/// The user data of the Server's current generation was refused.
pub(crate) fn user_data_refused_this_generation(server: &Server) -> bool {
    recorded_for_this_generation(server, USER_DATA_REFUSED_ANNOTATION)
}

fn recorded_for_this_generation(server: &Server, key: &str) -> bool {
    server.meta.annotations.get(key).and_then(|g| g.parse::<i64>().ok()).is_some_and(|g| g == server.meta.generation)
}

/// The park of a spec this controller cannot act on as written.
pub(crate) fn spec_park(server: &Server) -> Option<Park> {
    // `spec.infrastructureRef` names a host to place the server on, which
    // this controller does not do (the Go controller sends it to Nova as
    // `hypervisor_hostname` with admin credentials): refused, never ignored.
    if server.spec.infrastructure_ref.is_some() {
        return Some(Park::HostPinned);
    }
    duplicate_id(server).map(|message| Park::InvalidSpec { message })
}

/// What is repeated in the spec, as the park's message.
fn duplicate_id(server: &Server) -> Option<String> {
    for kind in ResourceKind::ALL {
        let ids = kind.named(server);
        if ids.len() < 2 {
            continue;
        }
        let mut seen = BTreeSet::new();
        if let Some(repeated) = ids.into_iter().find(|id| !seen.insert(*id)) {
            return Some(format!(
                "{} ID {repeated} appears more than once in the spec; list each {} once",
                kind.as_str(),
                kind.as_str()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::model::{Phase, SecurityGroupRef, set_condition};

    fn with(
        available: Option<(ConditionStatus, ConditionReason)>,
        healthy: Option<(ConditionStatus, ConditionReason)>,
    ) -> Server {
        let mut server = Server::default();
        for (type_, condition) in [(ConditionType::Available, available), (ConditionType::Healthy, healthy)] {
            if let Some((status, reason)) = condition {
                set_condition(&mut server.status.conditions, type_, status, reason, "", Timestamp::UNIX_EPOCH);
            }
        }
        server
    }

    fn booted(mut server: Server) -> Server {
        server.status.provisioned_at = Some(Timestamp::UNIX_EPOCH);
        server.status.phase = Some(Phase::Running);
        server
    }

    const OPTIONS: Options = Options {
        provider_create_max_attempts: 3,
        create_grace: std::time::Duration::ZERO,
        listed_view_max_age: Options::DEFAULT_LISTED_VIEW_MAX_AGE,
    };
    const ERRORED: Option<(ConditionStatus, ConditionReason)> =
        Some((ConditionStatus::False, ConditionReason::Errored));
    const PROVISIONED: Option<(ConditionStatus, ConditionReason)> =
        Some((ConditionStatus::True, ConditionReason::Provisioned));

    #[test]
    fn deletion_and_pause_come_first() {
        let mut server = booted(with(PROVISIONED, Some((ConditionStatus::True, ConditionReason::Healthy))));
        assert_eq!(lifecycle(&server, &OPTIONS), Lifecycle::Running);
        server.spec.pause = true;
        assert_eq!(lifecycle(&server, &OPTIONS), Lifecycle::Paused);
        server.meta.deleting = true;
        assert_eq!(lifecycle(&server, &OPTIONS), Lifecycle::Deleting);
    }

    #[test]
    fn parks_read_from_structure() {
        let mut at_cap = with(ERRORED, ERRORED);
        at_cap.status.provider_create_failures = 3;
        assert_eq!(lifecycle(&at_cap, &OPTIONS), Lifecycle::Parked(ParkKind::AtCap));
        at_cap.status.provider_create_retrying = true;
        assert_eq!(lifecycle(&at_cap, &OPTIONS), Lifecycle::Errored, "retrying is not parked");
        at_cap.status.provider_create_retrying = false;
        at_cap.status.provider_create_failures = 2;
        assert_eq!(lifecycle(&at_cap, &OPTIONS), Lifecycle::Errored, "below the cap");

        let mut refused = with(ERRORED, None);
        refused.meta.generation = 4;
        refused.meta.annotations.insert(CREATE_REFUSED_ANNOTATION.into(), "4".into());
        assert_eq!(lifecycle(&refused, &OPTIONS), Lifecycle::Parked(ParkKind::Refused));
        refused.meta.generation = 5;
        assert_eq!(lifecycle(&refused, &OPTIONS), Lifecycle::Errored, "a spec change re-arms");

        // Refused user data is its own park: the provider never saw a create,
        // and only a change to the user data helps.
        let mut user_data = with(ERRORED, None);
        user_data.meta.generation = 2;
        user_data.meta.annotations.insert(USER_DATA_REFUSED_ANNOTATION.into(), "2".into());
        assert_eq!(lifecycle(&user_data, &OPTIONS), Lifecycle::Parked(ParkKind::UserDataRefused));
        assert_eq!(park(&user_data, &OPTIONS).map(|p| p.kind()), Some(ParkKind::UserDataRefused));
        user_data.meta.generation = 3;
        assert_eq!(lifecycle(&user_data, &OPTIONS), Lifecycle::Errored, "a spec change re-arms");

        let missing = booted(with(ERRORED, Some((ConditionStatus::Unknown, ConditionReason::Unknown))));
        assert_eq!(lifecycle(&missing, &OPTIONS), Lifecycle::Parked(ParkKind::MissingAfterBoot));
        let errored_running = booted(with(ERRORED, Some((ConditionStatus::True, ConditionReason::Healthy))));
        assert_eq!(lifecycle(&errored_running, &OPTIONS), Lifecycle::Errored);

        let mut invalid = Server::default();
        invalid.spec.security_groups = vec![SecurityGroupRef { id: "a".into() }, SecurityGroupRef { id: "a".into() }];
        assert_eq!(lifecycle(&invalid, &OPTIONS), Lifecycle::Parked(ParkKind::InvalidSpec));
    }

    #[test]
    fn booted_servers_by_health() {
        let healthy = Some((ConditionStatus::True, ConditionReason::Healthy));
        assert_eq!(lifecycle(&booted(with(PROVISIONED, healthy)), &OPTIONS), Lifecycle::Running);
        assert_eq!(lifecycle(&booted(with(None, healthy)), &OPTIONS), Lifecycle::Provisioning);
        assert_eq!(lifecycle(&booted(with(PROVISIONED, ERRORED)), &OPTIONS), Lifecycle::Unhealthy);
        let unknown = Some((ConditionStatus::Unknown, ConditionReason::Unknown));
        assert_eq!(lifecycle(&booted(with(PROVISIONED, unknown)), &OPTIONS), Lifecycle::Unseen);
        assert_eq!(lifecycle(&booted(with(PROVISIONED, None)), &OPTIONS), Lifecycle::Unseen);
        assert_eq!(lifecycle(&with(None, None), &OPTIONS), Lifecycle::Provisioning);
    }

    #[test]
    fn labels_are_distinct() {
        let all = [
            Lifecycle::Provisioning,
            Lifecycle::Running,
            Lifecycle::Unhealthy,
            Lifecycle::Unseen,
            Lifecycle::Errored,
            Lifecycle::Parked(ParkKind::AtCap),
            Lifecycle::Parked(ParkKind::Refused),
            Lifecycle::Parked(ParkKind::UserDataRefused),
            Lifecycle::Parked(ParkKind::MissingAfterBoot),
            Lifecycle::Parked(ParkKind::InvalidSpec),
            Lifecycle::Parked(ParkKind::Forbidden),
            Lifecycle::Parked(ParkKind::RebuildFailed),
            Lifecycle::Paused,
            Lifecycle::Deleting,
        ];
        let labels: std::collections::BTreeSet<_> = all.iter().map(|l| l.as_str()).collect();
        assert_eq!(labels.len(), all.len());
        assert!(all.iter().all(|l| l.park().is_some() == matches!(l, Lifecycle::Parked(_))));
    }

    /// Every park's Available message ends with the one command that
    /// un-parks it, for this Server; refused user data is never told that a
    /// retry alone helps.
    #[test]
    fn every_park_ends_with_the_command_that_unparks_it() {
        let parks = [
            Park::AtCap { max: 3 },
            Park::Refused { message: "provider refused to create the server: quota".into() },
            Park::UserDataRefused { message: "user data refused (TooLarge): too large".into() },
            Park::MissingAfterBoot,
            Park::InvalidSpec { message: "network n1 is named twice".into() },
            Park::HostPinned,
            Park::Forbidden { message: "the cloud's policy does not let this identity create".into() },
            Park::RebuildFailed { image: "img-2".into() },
        ];
        for park in parks {
            let message = park.available_message("ns", "web");
            let command = match park.kind() {
                ParkKind::AtCap | ParkKind::Refused | ParkKind::Forbidden => {
                    format!("kubectl annotate server web -n ns {RETRY_ANNOTATION}=now")
                }
                ParkKind::UserDataRefused | ParkKind::InvalidSpec | ParkKind::RebuildFailed => {
                    "kubectl edit server web -n ns".into()
                }
                ParkKind::MissingAfterBoot | ParkKind::HostPinned => "kubectl delete server web -n ns".into(),
            };
            assert!(!message.contains("  "), "no runs of spaces: {message}");
            assert!(message.starts_with(&park.message()), "{message}");
            assert!(message.ends_with(&command), "{message}");
        }
        let user_data = Park::UserDataRefused { message: String::new() }.available_message("ns", "web");
        assert!(!user_data.contains(RETRY_ANNOTATION), "{user_data}");
        // The CRD makes the pin immutable: an edit is never the advice.
        let pinned = Park::HostPinned.available_message("ns", "web");
        assert!(!pinned.contains("kubectl edit"), "{pinned}");
    }
}
