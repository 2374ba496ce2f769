//! The monitor loop (DESIGN §11): every interval, list the live Servers, ask
//! each (region, identity)'s cloud once for all its servers (with the
//! credentials of the cached OpenstackIdentity), project each Server with
//! `server_core::observe`, and patch only what changed, guarded by the
//! resourceVersion the list returned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use server_core::model::{IDENTITY_LABEL, REGION_LABEL};
use server_core::port::ProviderServer;
use server_core::{observe, status_merge_patch};
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::config::ControllerConfig;
use crate::controller::servers_api;
use crate::convert::core_server;
use crate::crd::Server;
use crate::error::{Error, api_code, short_message};
use crate::executor::now;
use crate::facts::CloudHandle;
use crate::identity::identity_context;
use crate::metrics::Metrics;
use crate::registry::CloudRegistry;
use crate::shutdown::Shutdown;

/// What one poll did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
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
    /// Only the leader polls; `client` and `clouds` enforce it too.
    pub(crate) fence: crate::Fence,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").field("clouds", &self.clouds).finish_non_exhaustive()
    }
}

type GroupKey = (String, String, String);

impl Monitor {
    /// Polls every interval until `shutdown` resolves.
    pub(crate) async fn run(&self, caches: &Caches, shutdown: Shutdown) -> Result<(), Error> {
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
            match self.poll(caches).await {
                Ok(report) => {
                    self.metrics.monitor_poll_finished(started.elapsed(), report.patched);
                    debug!(?report, elapsed = ?started.elapsed(), "monitor poll finished");
                }
                Err(error) => warn!(%error, "monitor poll failed"),
            }
        }
        info!("monitor stopped");
        Ok(())
    }

    /// One poll. Servers are listed before the clouds are asked, so a status
    /// computed from them is written only if the Server has not changed since
    /// (a reconciler write in between makes the patch conflict, not regress).
    pub(crate) async fn poll(&self, caches: &Caches) -> Result<PollReport, Error> {
        let api = servers_api(self.client.clone(), self.config.namespace.as_deref());
        let servers =
            api.list(&ListParams::default()).await.map_err(|e| Error::kube("listing Servers for the monitor", e))?;
        let mut phases: BTreeMap<String, usize> = BTreeMap::new();
        let mut groups: BTreeMap<GroupKey, Vec<Server>> = BTreeMap::new();
        let mut report = PollReport::default();
        for server in servers.items {
            // Deleting Servers are the reconciler's; paused ones get no work at all.
            if server.metadata.deletion_timestamp.is_some() || server.spec.spec.pause {
                continue;
            }
            let phase = server.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}")).unwrap_or_default();
            *phases.entry(phase).or_default() += 1;
            let labels = server.labels();
            let (Some(region), Some(identity)) = (label(labels, REGION_LABEL), label(labels, IDENTITY_LABEL)) else {
                continue;
            };
            let key = (server.namespace().unwrap_or_default(), region.to_owned(), identity.to_owned());
            groups.entry(key).or_default().push(server);
            report.servers += 1;
        }
        self.metrics.servers_by_phase(&phases);

        for ((namespace, region, identity), members) in groups {
            let Some(records) = self.list_group(caches, &namespace, &region, &identity).await else {
                report.groups_failed += 1;
                self.metrics.monitor_group_failed(&region);
                continue;
            };
            report.groups += 1;
            let by_uid: HashMap<&str, &ProviderServer> = records.iter().map(|r| (r.server_uid.as_str(), r)).collect();
            for server in &members {
                self.project(server, &by_uid, &mut report).await;
            }
        }
        Ok(report)
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
        let Some(cloud) = self.clouds.get(region) else {
            warn!(%region, "monitor: no cloud is configured for the region");
            return None;
        };
        let context = match identity_context(caches, namespace, region, identity) {
            Ok(context) => context,
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: no identity to ask the cloud as");
                return None;
            }
        };
        let handle = CloudHandle { cloud: cloud.clone(), identity: context, timeout: self.config.cloud_timeout };
        match handle.call(|c| c.list(&handle.identity)).await {
            Ok(records) => Some(records),
            Err(error) => {
                warn!(%region, %identity, %error, "monitor: listing provider servers failed");
                None
            }
        }
    }

    async fn project(&self, server: &Server, by_uid: &HashMap<&str, &ProviderServer>, report: &mut PollReport) {
        let core = core_server(server);
        let record = by_uid.get(core.meta.uid.as_str()).copied();
        let next = observe(&core.status, record, now());
        let Some(patch) = status_merge_patch(&core.status, &next) else {
            return;
        };
        let body = json!({
            "metadata": { "resourceVersion": server.resource_version().unwrap_or_default() },
            "status": patch,
        });
        let api: Api<Server> = Api::namespaced(self.client.clone(), &core.meta.namespace);
        match api.patch_status(&core.meta.name, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(_) => report.patched += 1,
            // The Server changed since the list; the next poll sees it fresh.
            Err(error) if api_code(&error) == Some(409) => report.conflicts += 1,
            Err(error) => warn!(
                server = %core.meta.name,
                namespace = %core.meta.namespace,
                error = %short_message(&error),
                "monitor: status patch failed"
            ),
        }
    }
}

fn label<'a>(labels: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    labels.get(key).map(String::as_str).filter(|v| !v.is_empty())
}
