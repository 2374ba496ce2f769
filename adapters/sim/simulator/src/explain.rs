//! `--explain`: a step-by-step log of one Server (what the controller read,
//! decided and did, and what happened to it), to understand a violation the
//! seed reproduces. Free when off: every note is built lazily.

use server_core::model::{ConditionType, ServerStatus};
use server_core::port::ProviderServer;
use server_core::{Action, Decision, ProviderView, Server};

/// The log of the one Server explained, if any.
#[derive(Debug, Default)]
pub(crate) struct Explain {
    /// Its index in the shard.
    server: Option<usize>,
    log: Vec<String>,
}

impl Explain {
    /// Explains the shard's Server `server`, or none.
    pub(crate) fn new(server: Option<usize>) -> Self {
        Explain { server, log: Vec::new() }
    }

    /// Whether Server `i` is the one explained.
    #[inline]
    pub(crate) fn is_on(&self, i: usize) -> bool {
        self.server == Some(i)
    }

    /// Records a line about Server `i`, at step `step` and virtual time
    /// `now`, if it is the one explained.
    #[inline]
    pub(crate) fn note(&mut self, i: usize, step: u64, now: u64, line: impl FnOnce() -> String) {
        if self.is_on(i) {
            self.push(step, now, &line());
        }
    }

    #[cold]
    fn push(&mut self, step: u64, now: u64, line: &str) {
        self.log.push(format!("step {step} t={:.1}s: {line}", now as f64 / 1000.0));
    }

    pub(crate) fn log(&self) -> &[String] {
        &self.log
    }
}

pub(crate) fn server(server: &Server, rv: u64) -> String {
    let meta = &server.meta;
    let annotations: Vec<String> =
        meta.annotations.iter().map(|(k, v)| format!("{}={v}", k.rsplit('/').next().unwrap_or(k))).collect();
    format!(
        "rv={rv} gen={} deleting={} finalizers={:?} annotations={annotations:?} status[{}]",
        meta.generation,
        meta.deleting,
        meta.finalizers,
        status(&server.status)
    )
}

pub(crate) fn status(status: &ServerStatus) -> String {
    let condition = |type_| {
        status
            .condition(type_)
            .map(|c| format!("{:?}/{:?} {:?}", c.status, c.reason, c.message))
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "phase={:?} launchedAt={} provisionedAt={} failures={} retrying={} Available={} Healthy={}",
        status.phase,
        status.launched_at.is_some(),
        status.provisioned_at.is_some(),
        status.provider_create_failures,
        status.provider_create_retrying,
        condition(ConditionType::Available),
        condition(ConditionType::Healthy)
    )
}

pub(crate) fn record(record: Option<&ProviderServer>) -> String {
    match record {
        Some(r) => format!("{} {:?} launched={}", r.id, r.status, r.launched_at.is_some()),
        None => "absent".into(),
    }
}

pub(crate) fn view(view: &ProviderView) -> String {
    match view {
        ProviderView::Present(r) => format!("present({})", record(Some(r))),
        ProviderView::Absent => "absent".into(),
        ProviderView::Unknown(reason) => format!("unknown({reason})"),
        ProviderView::NoIdentity => "no-identity".into(),
        ProviderView::RegionUnserved(unserved) => format!("region-unserved({})", unserved.region()),
    }
}

pub(crate) fn decision(decision: &Decision) -> String {
    let actions: Vec<String> = decision.actions.iter().map(action).collect();
    format!("{:?} {actions:?}", decision.outcome)
}

pub(crate) fn action(action: &Action) -> String {
    match action {
        Action::WriteStatus(patch) => format!("WriteStatus({patch})"),
        Action::Emit(event) => format!("Emit({})", event.reason.as_str()),
        Action::CreateProviderServer(_) => "CreateProviderServer".into(),
        Action::DeleteProviderServer(_) => "DeleteProviderServer".into(),
        Action::RebuildProviderServer(request) => format!("RebuildProviderServer({})", request.image_id),
        Action::ReleaseAttachment(resource) => format!("ReleaseAttachment({resource})"),
        Action::UpdatePort(update) => format!("UpdatePort({})", update.port_id),
        Action::EnsureFloatingIp(request) => format!("EnsureFloatingIp({})", request.port_id),
        Action::AddReference(r) => format!("AddReference({})", r.name),
        Action::RemoveReference(r) => format!("RemoveReference({})", r.name),
        Action::Annotate { key, value } => format!("Annotate({key}={value:?})"),
        Action::Record(changes) => format!("Record({changes:?})"),
        Action::AddFinalizer { annotations } if annotations.is_empty() => "AddFinalizer".into(),
        Action::AddFinalizer { annotations } => format!("AddFinalizer({annotations:?})"),
        Action::RemoveFinalizer => "RemoveFinalizer".into(),
    }
}
