//! Ground truth over time: the demo samples every Server (straight from
//! SimKube's store, so no API request is counted) and the cloud's per-Server
//! truth, and keeps what the invariants need to look back on.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;
use server_core::{Server, ever_booted, provider_create_failure};
use server_simcloud::SimCloud;

use super::world::{NAMESPACE, World};

/// What was seen of one Server over the run.
#[derive(Clone, Debug, Default)]
pub(crate) struct History {
    pub(crate) uid: String,
    pub(crate) latest: Option<Server>,
    pub(crate) latest_json: Option<Value>,
    /// The first provisionedAt seen, and any different value seen after it.
    pub(crate) provisioned_at: Option<Timestamp>,
    pub(crate) provisioned_at_changed_to: Option<Option<Timestamp>>,
    pub(crate) max_failures: i32,
    /// ProviderCreateFailure seen true while the server had not booted.
    pub(crate) create_failure_seen: bool,
    pub(crate) booted_seen: bool,
    pub(crate) max_live_provider_servers: u32,
    pub(crate) deleted_by_user: bool,
    pub(crate) gone: bool,
    /// Created with spec and status fields the operator does not model.
    pub(crate) unmodelled_fields: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Observer {
    pub(crate) servers: BTreeMap<String, History>,
}

impl Observer {
    pub(crate) fn track(&mut self, name: &str, uid: &str, unmodelled_fields: bool) {
        let history = History { uid: uid.to_owned(), unmodelled_fields, ..History::default() };
        self.servers.insert(name.to_owned(), history);
    }

    /// One sample of every tracked Server and of the cloud.
    pub(crate) fn sample(&mut self, world: &World, cloud: &SimCloud) {
        let store = world.store();
        for (name, history) in &mut self.servers {
            let truth = cloud.truth(&history.uid);
            history.max_live_provider_servers = history.max_live_provider_servers.max(truth.live);
            let Some(json) = store.get("servers", Some(NAMESPACE), name) else {
                history.gone = true;
                continue;
            };
            let Ok(object) = serde_json::from_value::<server_kube::crd::Server>(json.clone()) else {
                continue;
            };
            let server = server_kube::convert::core_server(&object);
            let status = &server.status;
            match (history.provisioned_at, status.provisioned_at) {
                (None, now) => history.provisioned_at = now,
                (Some(first), now) if now != Some(first) => history.provisioned_at_changed_to = Some(now),
                _ => {}
            }
            history.max_failures = history.max_failures.max(status.provider_create_failures);
            history.booted_seen |= ever_booted(status);
            history.create_failure_seen |= provider_create_failure(&server);
            history.latest = Some(server);
            history.latest_json = Some(json);
        }
    }
}
