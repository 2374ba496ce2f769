//! What the controller would do with a Server now, and why, in words: the
//! core's own decision for the facts at hand, rendered for the on-call
//! engineer (`server-controller explain`). It runs the same `reconcile` a
//! pass runs, so it can never disagree with the controller; and without the
//! provider's record it says so and decides nothing, rather than guess.

use std::fmt;

use jiff::Timestamp;

use crate::lifecycle::{Lifecycle, ParkKind, lifecycle};
use crate::model::{ConditionType, Server};
use crate::pass::{Need, Pass};
use crate::port::ProviderStatus;
use crate::reconcile::{Action, Decision, EventType, Facts, Options, Outcome, ProviderView};

/// Why the command did not read the provider itself: what it would need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    /// The command was given no cloud configuration for the Server's region
    /// (the operator may well have one).
    NoCloudGiven { region: String },
}

impl Unread {
    fn describe(&self) -> String {
        match self {
            Unread::NoCloudGiven { region } => format!(
                "unknown: this command was given no cloud configuration for region {region}. To read the \
                 provider's record, give it as `run` is given it: --openstack-config {region}=FILE or \
                 --openstack-secret {region}=NAMESPACE/NAME"
            ),
        }
    }
}

/// A Server, what the controller knows about it, and what it would decide.
#[derive(Clone, Debug)]
pub struct Explanation {
    pub server: Server,
    pub facts: Facts,
    pub options: Options,
    pub lifecycle: Lifecycle,
    /// What the pass asked to read, in order, each answered.
    pub reads: Vec<Need>,
    /// Why the provider's view is not known here; `facts.provider` then
    /// says nothing.
    pub unread: Option<Unread>,
    /// What a pass would decide; `None` when that depends on the provider's
    /// record and the record was not read.
    pub decision: Option<Decision>,
}

/// What a decision would change, counted as a migration report says it
/// (`run --shadow`): provider servers created and deleted, other changes to
/// the cloud (a port's security, a floating IP, a port or floating IP
/// released), and writes to the API server (the Server, references, Events).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Intent {
    pub creates: usize,
    pub deletes: usize,
    /// Provider server rebuilds (an image change: the root disk is made anew).
    pub rebuilds: usize,
    pub cloud_changes: usize,
    pub api_writes: usize,
}

impl Intent {
    /// What `decision`'s actions would do (its follow-ups are not known
    /// before its actions run, so they are not counted).
    pub fn of(decision: &Decision) -> Intent {
        let mut intent = Intent::default();
        for action in &decision.actions {
            match action {
                Action::CreateProviderServer(_) => intent.creates += 1,
                Action::DeleteProviderServer(_) => intent.deletes += 1,
                Action::RebuildProviderServer(_) => intent.rebuilds += 1,
                Action::ReleaseAttachment(_) | Action::UpdatePort(_) | Action::EnsureFloatingIp(_) => {
                    intent.cloud_changes += 1;
                }
                Action::AddFinalizer { .. }
                | Action::RemoveFinalizer
                | Action::AddReference(_)
                | Action::RemoveReference(_)
                | Action::WriteStatus(_)
                | Action::Annotate { .. }
                | Action::Record(_)
                | Action::Emit(_) => intent.api_writes += 1,
            }
        }
        intent
    }

    /// Nothing would change.
    pub fn is_idle(&self) -> bool {
        *self == Intent::default()
    }
}

impl std::ops::AddAssign for Intent {
    /// Sums field by field (destructured, so a new field cannot be left out).
    fn add_assign(&mut self, other: Intent) {
        let Intent { creates, deletes, rebuilds, cloud_changes, api_writes } = other;
        self.creates += creates;
        self.deletes += deletes;
        self.rebuilds += rebuilds;
        self.cloud_changes += cloud_changes;
        self.api_writes += api_writes;
    }
}

impl fmt::Display for Intent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_idle() {
            return f.write_str("nothing");
        }
        let parts = [
            (self.creates, "provider server create"),
            (self.deletes, "provider server delete"),
            (self.rebuilds, "provider server rebuild"),
            (self.cloud_changes, "other cloud change"),
            (self.api_writes, "API write"),
        ];
        let said: Vec<String> = parts
            .iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, what)| format!("{count} {what}{}", if *count == 1 { "" } else { "s" }))
            .collect();
        f.write_str(&said.join(", "))
    }
}

/// What `pass` would do, as far as a read-only driver took it: `reads` are
/// the needs it answered; `unread` says why it stopped before deciding, if
/// it did. A pass that has not decided gives no decision: it is not guessed.
pub fn explain_pass(pass: &Pass, reads: Vec<Need>, unread: Option<Unread>) -> Explanation {
    let (server, facts, options) = (pass.server().clone(), pass.facts().clone(), *pass.options());
    let lifecycle = lifecycle(&server, &options);
    Explanation { server, facts, options, lifecycle, reads, unread, decision: pass.decision().cloned() }
}

/// Decides for `server` as a pass would at `now`, every need answered from
/// `facts`, without acting.
pub fn explain(server: Server, facts: Facts, options: Options, now: Timestamp) -> Explanation {
    let mut pass = Pass::start(server, options, now);
    let reads = pass.answer_from(&facts, |_| true);
    explain_pass(&pass, reads, None)
}

/// As [`explain`], for a command that could not read the provider: where
/// the Server stands (read from the Server alone) and what the command would
/// need. A decision is given only when the pass needs no provider read for
/// it (a paused Server, a deletion that is not the controller's to finish);
/// any other decision depends on the record, and is not guessed.
pub fn explain_unread(server: Server, facts: Facts, options: Options, unread: Unread, now: Timestamp) -> Explanation {
    let mut pass = Pass::start(server, options, now);
    let reads = pass.answer_from(&facts, |need| !matches!(need, Need::Provider | Need::ProviderLive(_)));
    explain_pass(&pass, reads, Some(unread))
}

impl Explanation {
    /// What the decision would change; `None` when there is no decision
    /// (the provider's record was not read).
    pub fn intent(&self) -> Option<Intent> {
        self.decision.as_ref().map(Intent::of)
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let meta = &self.server.meta;
        let status = &self.server.status;
        writeln!(f, "Server {}/{} (generation {})", meta.namespace, meta.name, meta.generation)?;
        let stands = stands(self.lifecycle, &self.options, status.provider_create_failures);
        writeln!(f, "  stands:    {stands}")?;
        if let Some(park) = self.lifecycle.park() {
            writeln!(f, "  un-park:   {}", park.unpark(&meta.namespace, &meta.name))?;
        }
        for type_ in [ConditionType::Available, ConditionType::Healthy] {
            if let Some(condition) = status.condition(type_) {
                writeln!(
                    f,
                    "  {:<10} {} {}: {}",
                    format!("{type_}:"),
                    condition.status,
                    condition.reason,
                    condition.message
                )?;
            }
        }
        if let Some(at) = status.provisioned_at {
            writeln!(f, "  booted:    first at {at} (never deleted and recreated by the controller)")?;
        }
        writeln!(f, "  identity:  {}", identity(&self.facts))?;
        if !self.reads.is_empty() {
            let reads: Vec<String> = self.reads.iter().map(read).collect();
            writeln!(f, "  read:      {}", reads.join(", "))?;
        }
        match &self.unread {
            Some(unread) => writeln!(f, "  provider:  {}", unread.describe())?,
            None => writeln!(f, "  provider:  {}", provider(&self.facts.provider))?,
        }
        let Some(decision) = &self.decision else {
            return writeln!(
                f,
                "What the controller does next depends on the provider's record, which this command did not read: \
                 not guessed."
            );
        };
        if decision.actions.is_empty() {
            writeln!(f, "The controller would do nothing now.")?;
        } else {
            writeln!(f, "The controller would now:")?;
            for (index, action) in decision.actions.iter().enumerate() {
                writeln!(f, "  {}. {}", index + 1, describe(action))?;
            }
        }
        writeln!(f, "and then {}", outcome(&decision.outcome))
    }
}

fn stands(lifecycle: Lifecycle, options: &Options, failures: i32) -> String {
    let cap = options.provider_create_max_attempts.max(1);
    match lifecycle {
        Lifecycle::Parked(ParkKind::AtCap) => {
            format!("parked: {failures} of {cap} create attempts failed before launch")
        }
        Lifecycle::Parked(ParkKind::Refused) => "parked: the provider refused this generation's create".into(),
        Lifecycle::Parked(ParkKind::UserDataRefused) => {
            "parked: this generation's user data is refused, so no create was sent".into()
        }
        Lifecycle::Parked(ParkKind::MissingAfterBoot) => {
            "parked: the server booted and the provider does not have it".into()
        }
        Lifecycle::Parked(ParkKind::InvalidSpec) => "parked: the spec cannot be acted on as written".into(),
        Lifecycle::Parked(ParkKind::HostPinned) => "parked: the spec pins the server to a physical host".into(),
        Lifecycle::Parked(ParkKind::Forbidden) => "parked: the cloud's policy forbade this generation's create".into(),
        Lifecycle::Parked(ParkKind::RebuildFailed) => {
            "parked: the rebuild onto the spec's image ended in an error".into()
        }
        Lifecycle::Provisioning => format!("provisioning ({failures} of {cap} create attempts failed so far)"),
        Lifecycle::Running => "running: provisioned, and the provider reports it healthy".into(),
        Lifecycle::Unhealthy => "booted, and the provider reports it not healthy; kept, it may hold data".into(),
        Lifecycle::Unseen => "booted, and the provider's latest record does not show it".into(),
        Lifecycle::Errored => "the last pass failed; it is retried every yield interval".into(),
        Lifecycle::Paused => "paused (spec.pause): nothing is done, deletion included".into(),
        Lifecycle::Deleting => "being deleted".into(),
    }
}

/// A need the pass asked, as answered.
fn read(need: &Need) -> String {
    match need {
        Need::Consumed => "the consumed resources".into(),
        Need::ConsumedLive => "the consumed resources (live)".into(),
        Need::ConsumedBeforeRelease => "the consumed resources, holding every reference written so far".into(),
        Need::Provider => "the provider server".into(),
        Need::ProviderLive(why) => format!("the provider server again, live ({})", why.label().replace('_', " ")),
        Need::Attachments => "the server's ports and floating IPs".into(),
        Need::Networking { .. } => "the server's port and floating IP".into(),
        Need::UserData => "the user data".into(),
    }
}

fn identity(facts: &Facts) -> String {
    match facts.identity() {
        None => "not found (the identity label names no Identity in this namespace)".into(),
        Some(identity) if identity.is_ready_identity() => format!("{} (ready)", identity.name),
        Some(identity) => {
            format!("{} (not ready yet: its Available condition is not Provisioned)", identity.name)
        }
    }
}

fn provider(view: &ProviderView) -> String {
    match view {
        ProviderView::Present(record) => {
            let status = match &record.status {
                ProviderStatus::Active => "ACTIVE",
                ProviderStatus::Build => "BUILD",
                ProviderStatus::Error => "ERROR",
                ProviderStatus::Rebuild => "REBUILD",
                ProviderStatus::Unknown => "UNKNOWN",
                ProviderStatus::Other(other) => other.as_str(),
            };
            let booted = match record.launched_at {
                Some(at) => format!("booted at {at}"),
                None => "not booted".into(),
            };
            let image = match &record.image_id {
                Some(image) => format!(", image {image}"),
                None => String::new(),
            };
            let task = if record.task_in_flight { ", a task under way" } else { "" };
            format!("server {} is {status}, {booted}{image}{task}", record.id)
        }
        ProviderView::Absent => "has no server for this Server".into(),
        ProviderView::Unknown(reason) => format!("could not be read ({reason}): nothing is created or deleted"),
        ProviderView::NoIdentity => "no identity to ask as (Identity or its region's identity source gone)".into(),
        ProviderView::RegionUnserved(unserved) => {
            format!("cannot be asked ({}): nothing is created or deleted", unserved.message())
        }
    }
}

fn describe_changes(changes: &[(&'static str, Option<String>)]) -> String {
    let described: Vec<String> = changes
        .iter()
        .map(|(key, value)| match value {
            Some(value) => format!("{key}={value}"),
            None => format!("{key} removed"),
        })
        .collect();
    described.join(", ")
}

fn describe(action: &Action) -> String {
    match action {
        Action::AddFinalizer { annotations } if annotations.is_empty() => {
            "add the controller's finalizer to the Server".into()
        }
        Action::AddFinalizer { annotations } => {
            format!("add the controller's finalizer to the Server and note {}", describe_changes(annotations))
        }
        Action::RemoveFinalizer => "remove the controller's finalizer: the Server may go".into(),
        Action::AddReference(reference) => {
            format!("hold {} {} with a reference finalizer", reference.kind.as_str(), reference.name)
        }
        Action::RemoveReference(reference) => {
            format!("release {} {} (remove its reference finalizer)", reference.kind.as_str(), reference.name)
        }
        Action::WriteStatus(patch) => {
            let fields: Vec<&str> = patch.keys().collect();
            format!("write status ({})", fields.join(", "))
        }
        Action::Annotate { key, value: Some(value) } => format!("note {key}={value}"),
        Action::Annotate { key, value: None } => format!("remove the note {key}"),
        Action::Record(changes) => format!("record {}", describe_changes(changes)),
        Action::CreateProviderServer(request) => {
            format!(
                "create provider server {:?} (flavor {}, image {})",
                request.name, request.flavor_id, request.image_id
            )
        }
        Action::DeleteProviderServer(_) => "delete the provider server".into(),
        Action::RebuildProviderServer(request) => {
            format!("rebuild provider server {} onto image {}", request.provider_id, request.image_id)
        }
        Action::ReleaseAttachment(resource) => format!("release the provider server's {resource}"),
        Action::UpdatePort(update) => format!(
            "set port {}'s security groups ({}) and allowed address pairs ({}) to the spec's",
            update.port_id,
            update.security_groups.len(),
            update.allowed_address_pairs.len()
        ),
        Action::EnsureFloatingIp(request) => format!("allocate a floating IP on port {}", request.port_id),
        Action::Emit(event) => {
            let type_ = match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            };
            format!("emit a {type_} event {}: {}", event.reason.as_str(), event.note)
        }
    }
}

fn outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Done => "wait for the next change (nothing is requeued)".into(),
        Outcome::Yield(wait) => format!("check again after the yield interval: {}", wait.message()),
        Outcome::Terminal(park) => format!("stay parked until a person acts: {}", park.message()),
        Outcome::Error(error) => format!("retry after the yield interval: {error}"),
    }
}
