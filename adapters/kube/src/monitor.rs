//! The monitor loop (DESIGN §11): every interval, read the live Servers from
//! the operator's cache (no list of the API), ask each (region, identity)'s
//! cloud once for all its servers (as the identity the region's identity
//! source finds in the caches), project each Server with `server_core::observe`, and
//! patch only what changed, guarded by the resourceVersion the cache holds,
//! a bounded number of patches at a time. Each list is kept (`listings`) so
//! passes can take their provider view from it instead of asking the cloud.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures_util::{StreamExt, stream};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use server_core::model::{IDENTITY_LABEL, ObjectMeta, REGION_LABEL, Server as CoreServer};
use server_core::port::ProviderServer;
use server_core::{observe, status_merge_patch};
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::cloud::{CloudRegistry, GroupKey, ProviderListings};
use crate::config::ControllerConfig;
use crate::crd::Server;
use crate::error::{api_code, short_message};
use crate::kube_api::now;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

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
    pub(crate) client: Client,
    pub(crate) clouds: CloudRegistry,
    pub(crate) config: ControllerConfig,
    pub(crate) metrics: Arc<dyn Metrics>,
    /// Where each group's latest list is kept for the passes.
    pub(crate) listings: ProviderListings,
    /// Only the leader polls; `client` and `clouds` enforce it too.
    pub(crate) fence: crate::Fence,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("clouds", &self.clouds).finish_non_exhaustive()
    }
}

impl Monitor {
    /// Polls every interval until `shutdown` resolves.
    pub(crate) async fn run(&self, caches: &Caches, shutdown: Shutdown) {
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
            if !self.fence.holds() {
                continue;
            }
            let started = Instant::now();
            let report = self.poll(caches).await;
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
    pub(crate) async fn poll(&self, caches: &Caches) -> PollReport {
        let mut phases: BTreeMap<String, usize> = BTreeMap::new();
        let mut groups: BTreeMap<GroupKey, Vec<(CoreServer, String)>> = BTreeMap::new();
        let mut report = PollReport::default();
        for cached in caches.servers.state() {
            // Unreadable Servers are reported by the controller.
            let Some(server) = cached.core() else { continue };
            // Deleting Servers are the reconciler's; paused ones get no work at all.
            if server.meta.deleting || server.spec.pause {
                continue;
            }
            let phase = server.status.phase.map(|p| format!("{p:?}")).unwrap_or_default();
            *phases.entry(phase).or_default() += 1;
            let (Some(region), Some(identity)) = (server.meta.label(REGION_LABEL), server.meta.label(IDENTITY_LABEL))
            else {
                continue;
            };
            let key = (server.meta.namespace.clone(), region.to_owned(), identity.to_owned());
            groups.entry(key).or_default().push((server, cached.resource_version().unwrap_or_default()));
            report.servers += 1;
        }
        self.metrics.servers_by_phase(&phases);

        let mut patches = Vec::new();
        for (key, members) in groups {
            let (namespace, region, identity) = &key;
            // Before the list is sent, in whole seconds: no later than its start.
            let listed_at = now();
            let Some(records) = self.list_group(caches, namespace, region, identity).await else {
                report.groups_failed += 1;
                self.metrics.monitor_group_failed(region);
                continue;
            };
            report.groups += 1;
            let by_uid: HashMap<&str, &ProviderServer> = records.iter().map(|r| (r.server_uid.as_str(), r)).collect();
            for (server, resource_version) in members {
                let record = by_uid.get(server.meta.uid.as_str()).copied();
                let next = observe(&server.status, record, now());
                if let Some(patch) = status_merge_patch(&server.status, &next) {
                    patches.push((server.meta, resource_version, patch));
                }
            }
            drop(by_uid);
            self.listings.record_list(key, listed_at, records);
        }
        let results: Vec<PatchResult> = stream::iter(patches)
            .map(|(meta, resource_version, patch)| self.patch(meta, resource_version, patch))
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
        report
    }

    /// The group's provider servers, or `None` (logged) when the group cannot
    /// be asked this poll.
    async fn list_group(
        &self,
        caches: &Caches,
        namespace: &str,
        region: &str,
        identity: &str,
    ) -> Option<Vec<ProviderServer>> {
        let handle = match self.clouds.cached_handle(caches, namespace, region, identity, self.config.cloud_timeout) {
            Ok(handle) => handle,
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: the cloud cannot be asked");
                return None;
            }
        };
        match handle.call(|c| c.list(&handle.identity)).await {
            Ok(records) => Some(records),
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: listing provider servers failed");
                None
            }
        }
    }

    async fn patch(&self, meta: ObjectMeta, resource_version: String, patch: Value) -> PatchResult {
        let body = json!({ "metadata": { "resourceVersion": resource_version }, "status": patch });
        let api: Api<Server> = Api::namespaced(self.client.clone(), &meta.namespace);
        match api.patch_status(&meta.name, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(_) => PatchResult::Patched,
            // The Server changed since it was read; the next poll sees it fresh.
            Err(error) if api_code(&error) == Some(409) => PatchResult::Conflict,
            Err(error) => {
                warn!(
                    server = %meta.name,
                    namespace = %meta.namespace,
                    error = %short_message(&error),
                    "monitor: status patch failed"
                );
                PatchResult::Failed
            }
        }
    }
}

/// Status patches in flight at once.
const PATCHES_AT_ONCE: usize = 16;

enum PatchResult {
    Patched,
    Conflict,
    Failed,
}
