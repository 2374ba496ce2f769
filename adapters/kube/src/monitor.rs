//! The monitor loop (DESIGN §11): every interval, read the live Servers from
//! the operator's cache (no list of the API), ask each (region, identity)'s
//! cloud once for its servers (as the identity the region's identity source
//! finds in the caches): what changed since the last list, merged into the
//! term's view of them, or all of them, as `server_core::listing` decides;
//! project each Server the core's
//! `monitor::projects` and `monitor::projects_as_listed` name as
//! `monitor::project` does (`observe`, then the
//! patch between), and patch only what changed, guarded by the
//! resourceVersion the cache holds, a bounded number of patches at a time.
//! The projected statuses feed the server metrics: the counts by state,
//! region and flavor, and each Server's first launch
//! (`server_core::observations`), reported once its write is accepted. The
//! merged view is kept (`listings`) so passes can take their provider view
//! from it instead of asking the cloud.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures_util::{StreamExt, stream};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde::Serialize;
use serde_json::value::RawValue;
use server_core::ServerStatus;
use server_core::StatusPatch;
use server_core::model::{CREATE_ISSUED_ANNOTATION, IDENTITY_LABEL, REGION_LABEL};
use server_core::monitor::{observe, projects, projects_as_listed, unwritten_wakes};
use server_core::observations::{FirstLaunch, first_launch, state_label};
use server_core::port::{ListScope, ProviderListing, ProviderServer};
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::cached::CachedServer;
use crate::cloud::GroupKey;
use crate::config::ControllerConfig;
use crate::error::{api_code, short_message};
use crate::kube_api::now;
use crate::metrics::{Metrics, ServerLabels, ServerStateKey};
use crate::server_writes::{Part, patch_server};
use crate::shutdown::Shutdown;
use crate::term::{Term, Terms};

/// What one poll did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PollReport {
    /// Live (not deleting, not paused) Servers with region and identity labels.
    pub servers: usize,
    /// (namespace, region, identity) groups whose cloud was asked.
    pub groups: usize,
    /// Groups skipped because their cloud or identity could not be used.
    pub groups_failed: usize,
    /// Status patches sent and accepted.
    pub patched: usize,
    /// Status patches refused with a conflict (retried next poll).
    pub conflicts: usize,
}

pub(crate) struct Monitor {
    /// Only the leader polls, through its current term's client and clouds,
    /// and keeps each group's list in that term's listings for its passes.
    pub(crate) terms: Arc<Terms>,
    pub(crate) config: ControllerConfig,
    pub(crate) metrics: Arc<dyn Metrics>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("terms", &self.terms).finish_non_exhaustive()
    }
}

impl Monitor {
    /// Polls every interval until `shutdown` resolves.
    pub(crate) async fn run(&self, caches: &Caches, wake: &LatchWakes, shutdown: Shutdown) {
        // The first poll waits one interval: at start-up the controller's
        // initial passes go first instead of racing the monitor's writes.
        let first = tokio::time::Instant::now() + self.config.monitor_interval;
        let mut ticks = tokio::time::interval_at(first, self.config.monitor_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        info!(interval = ?self.config.monitor_interval, "monitor started");
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = ticks.tick() => {}
            }
            let Some(term) = self.terms.current() else {
                continue;
            };
            let started = Instant::now();
            let report = self.poll(&term, caches, wake).await;
            self.metrics.monitor_poll_finished(started.elapsed(), report.patched);
            debug!(?report, elapsed = ?started.elapsed(), "monitor poll finished");
        }
        info!("monitor stopped");
    }

    /// One poll over the Servers of the cache. They are read before the
    /// clouds are asked, so a status computed from them is written only if
    /// the Server has not changed since (its resourceVersion guards the
    /// patch: a reconciler write in between makes it conflict, not regress).
    /// Patches go out concurrently, a bounded number at a time.
    pub(crate) async fn poll(&self, term: &Term, caches: &Caches, wake: &LatchWakes) -> PollReport {
        let mut phases: BTreeMap<String, usize> = BTreeMap::new();
        // The cache's own objects, shared: a poll copies no Server (at
        // 10,000 Servers a copy of each was the operator's largest peak).
        let mut groups: BTreeMap<GroupKey, Vec<Arc<CachedServer>>> = BTreeMap::new();
        let mut report = PollReport::default();
        for cached in caches.servers.state() {
            // Unreadable Servers are reported by the controller.
            let Ok(content) = &cached.content else { continue };
            if !projects(cached.metadata.deletion_timestamp.is_some(), content.spec.spec.pause) {
                continue;
            }
            let phase = content.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}")).unwrap_or_default();
            *phases.entry(phase).or_default() += 1;
            let (Some(region), Some(identity)) = (cached.label(REGION_LABEL), cached.label(IDENTITY_LABEL)) else {
                continue;
            };
            let key = (cached.namespace().unwrap_or_default(), region.to_owned(), identity.to_owned());
            groups.entry(key).or_default().push(cached);
            report.servers += 1;
        }
        self.metrics.servers_by_phase(&phases);

        let mut states: BTreeMap<ServerStateKey, usize> = BTreeMap::new();
        for (key, members) in groups {
            let (namespace, region, identity) = &key;
            // Before the list is sent, in whole seconds: no later than its start.
            let listed_at = now();
            // The list asks for what changed since the last (`server_core::listing`).
            let mut merged = term.listings.take_merged(&key);
            let scope = merged.next_scope(jiff::Timestamp::now());
            let list_started = jiff::Timestamp::now();
            let listing = self.list_group(term, caches, namespace, region, identity, scope).await;
            let taken = listing.is_some_and(|listing| merged.apply(listing, list_started, jiff::Timestamp::now()));
            let records: Vec<Arc<ProviderServer>> =
                if taken { merged.shared_servers().cloned().collect() } else { Vec::new() };
            term.listings.keep_merged(key.clone(), merged);
            if !taken {
                report.groups_failed += 1;
                self.metrics.monitor_group_failed(region);
                continue;
            }
            report.groups += 1;
            let by_uid: HashMap<&str, &ProviderServer> =
                records.iter().map(|r| (r.server_uid.as_str(), &**r)).collect();
            let unset = ServerStatus::default();
            // The group's counts by (state, flavor ID, flavor name), borrowed
            // from the Servers and the records: no copy per Server.
            let mut counted: BTreeMap<(&'static str, &str, &str), usize> = BTreeMap::new();
            let mut patches = Vec::new();
            for cached in &members {
                let Ok(content) = &cached.content else { continue };
                let status = content.status.as_ref().unwrap_or(&unset);
                let record = cached.metadata.uid.as_deref().and_then(|uid| by_uid.get(uid)).copied();
                let create_noted = cached.annotations().get(CREATE_ISSUED_ANNOTATION).is_some();
                if !projects_as_listed(status, record.is_some(), create_noted) {
                    continue;
                }
                // `monitor::project`, with the projected status kept for the metrics.
                let next = observe(status, record, now());
                let flavor_name = record.and_then(|r| r.flavor_name.as_deref()).unwrap_or_default();
                if record.is_some() {
                    *counted
                        .entry((state_label(next.phase), &content.spec.spec.flavor_id, flavor_name))
                        .or_default() += 1;
                }
                let created = cached.metadata.creation_timestamp.as_ref().map(|time| time.0);
                let launch = created.and_then(|created| first_launch(status, &next, created));
                let projected = StatusPatch::between(status, &next);
                // Collected only for the debug log, when it is on.
                let fields = match &projected {
                    Some(patch) if tracing::enabled!(tracing::Level::DEBUG) => patch.keys().collect(),
                    _ => Vec::new(),
                };
                if let Some(patch) = projected.and_then(json_text) {
                    patches.push(StatusWrite {
                        name: cached.name_any(),
                        uid: cached.metadata.uid.clone().unwrap_or_default(),
                        resource_version: cached.resource_version().unwrap_or_default(),
                        patch,
                        fields,
                        phase: next.phase,
                        wakes_unwritten: unwritten_wakes(status, &next),
                        launch: launch
                            .map(|launch| (content.spec.spec.flavor_id.clone(), flavor_name.to_owned(), launch)),
                    });
                }
            }
            let region_name = term.clouds.region_name(region);
            for ((state, flavor_id, flavor_name), count) in counted {
                let labels = ServerLabels {
                    region_id: region.clone(),
                    region_name: region_name.clone(),
                    flavor_id: flavor_id.to_owned(),
                    flavor_name: flavor_name.to_owned(),
                };
                *states.entry(ServerStateKey { state, labels }).or_default() += count;
            }
            drop(members);
            drop(by_uid);
            term.listings.record_list(key.clone(), listed_at, records);
            // The group's patches go out before the next group is listed:
            // a poll holds one group's patches at a time.
            let group = PatchGroup { namespace, region, region_name: &region_name };
            self.send(term, caches, wake, &group, patches, &mut report).await;
        }
        self.metrics.servers_by_state(&states);
        report
    }

    /// Sends a group's patches, a bounded number at a time, and counts what
    /// became of them in `report`.
    async fn send(
        &self,
        term: &Term,
        caches: &Caches,
        wake: &LatchWakes,
        group: &PatchGroup<'_>,
        patches: Vec<StatusWrite>,
        report: &mut PollReport,
    ) {
        let results: Vec<PatchResult> = stream::iter(patches)
            .map(|write| async {
                let (object, wakes) = (ObjectRef::new(&write.name).within(group.namespace), write.wakes_unwritten);
                let result = self.patch(term, caches, group, write).await;
                if wakes && !matches!(result, PatchResult::Patched) {
                    // Nobody takes them when only the monitor runs.
                    let _ = wake.send(object);
                }
                result
            })
            .buffer_unordered(PATCHES_AT_ONCE)
            .collect()
            .await;
        for result in results {
            match result {
                PatchResult::Patched => report.patched += 1,
                PatchResult::Conflict => report.conflicts += 1,
                PatchResult::Failed => {}
            }
        }
    }

    /// The group's provider servers, or `None` (logged) when the group cannot
    /// be asked this poll.
    async fn list_group(
        &self,
        term: &Term,
        caches: &Caches,
        namespace: &str,
        region: &str,
        identity: &str,
        scope: ListScope,
    ) -> Option<ProviderListing> {
        let handle = match term.clouds.cached_handle(caches, namespace, region, identity, self.config.cloud_timeout) {
            Ok(handle) => handle,
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: the cloud cannot be asked");
                return None;
            }
        };
        match handle.list(scope).await {
            Ok(records) => Some(records),
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: listing provider servers failed");
                None
            }
        }
    }

    async fn patch(&self, term: &Term, caches: &Caches, group: &PatchGroup<'_>, write: StatusWrite) -> PatchResult {
        let StatusWrite { name, uid, resource_version, patch, launch, fields, phase, .. } = write;
        let namespace = group.namespace;
        // A Server the cache already holds a newer version of was written
        // since this poll read it (a pass, at scale often while the poll
        // listed the cloud): its patch would only earn a 409. The next poll
        // reads it fresh.
        let cached = caches.servers.get(&ObjectRef::new(&name).within(namespace));
        if cached.is_some_and(|server| server.resource_version().as_deref() != Some(resource_version.as_str())) {
            return PatchResult::Conflict;
        }
        // Nor one this term wrote over since (a pass's write the watch has
        // yet to bring).
        if term.own_writes.cache_is_behind(&uid, &resource_version, std::time::Instant::now()) {
            return PatchResult::Conflict;
        }
        // Nor one a pass is acting on: the pass writes what it decides.
        if term.passes.acting_on(&uid) {
            return PatchResult::Conflict;
        }
        let body = PatchBody { metadata: VersionGuard { resource_version: &resource_version }, status: &patch };
        match patch_server(&term.client, namespace, &name, Part::Status, &body).await {
            Ok(written) => {
                let made = written.resource_version.unwrap_or_default();
                term.own_writes.wrote(&uid, Some(&resource_version), &made, false, std::time::Instant::now());
                debug!(server = %name, %namespace, ?fields, ?phase, "monitor wrote status");
                // Observed on the accepted write only: a refused one leaves
                // launchedAt unset, and the next poll observes it then.
                if let Some((flavor_id, flavor_name, launch)) = launch {
                    let labels = ServerLabels {
                        region_id: group.region.clone(),
                        region_name: group.region_name.to_owned(),
                        flavor_id,
                        flavor_name,
                    };
                    self.metrics.server_launched(&labels, launch);
                }
                PatchResult::Patched
            }
            // The Server changed since it was read; the next poll sees it fresh.
            Err(error) if api_code(&error) == Some(409) => PatchResult::Conflict,
            Err(error) => {
                warn!(
                    server = %name,
                    %namespace,
                    error = %short_message(&error),
                    "monitor: status patch failed"
                );
                PatchResult::Failed
            }
        }
    }
}

/// A patch as its JSON text (a `Value` cannot fail to serialize).
fn json_text(patch: StatusPatch) -> Option<Box<RawValue>> {
    serde_json::value::to_raw_value(&patch.into_json()).ok()
}

/// A status patch the poll decided on, guarded by the resourceVersion it
/// was decided from. The patch is kept as its JSON text: a poll can hold
/// one for every Server of a group.
struct StatusWrite {
    name: String,
    uid: String,
    resource_version: String,
    patch: Box<RawValue>,
    /// The status fields it changes (their names, for the debug log).
    fields: Vec<&'static str>,
    /// The phase it writes.
    phase: Option<server_core::model::Phase>,
    /// Whether a pass is woken if this write is skipped or refused
    /// (`server_core::monitor::unwritten_wakes`).
    wakes_unwritten: bool,
    /// The first launch this write records, with the Server's flavor ID and
    /// name.
    launch: Option<(String, String, FirstLaunch)>,
}

/// The group a poll's patches belong to.
struct PatchGroup<'a> {
    namespace: &'a str,
    region: &'a String,
    region_name: &'a str,
}

/// A status merge patch guarded by the resourceVersion it was decided from.
#[derive(Debug, Serialize)]
struct PatchBody<'a> {
    metadata: VersionGuard<'a>,
    status: &'a RawValue,
}

#[derive(Debug, Serialize)]
struct VersionGuard<'a> {
    #[serde(rename = "resourceVersion")]
    resource_version: &'a str,
}

/// Where the monitor sends the Servers whose pass must not wait for the next
/// poll: the controller's extra trigger.
pub(crate) type LatchWakes = tokio::sync::mpsc::UnboundedSender<ObjectRef<CachedServer>>;
/// The controller's end of [`LatchWakes`].
pub(crate) type LatchWoken = tokio::sync::mpsc::UnboundedReceiver<ObjectRef<CachedServer>>;

/// Status patches in flight at once.
const PATCHES_AT_ONCE: usize = 16;

enum PatchResult {
    Patched,
    Conflict,
    Failed,
}
