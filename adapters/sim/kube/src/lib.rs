//! SimKube: an in-process Kubernetes API server.
//!
//! Like a real API server it knows nothing of the operator's types: it serves
//! the CustomResourceDefinitions it is given ([`SimKube::install_crd`]), plus
//! `events.k8s.io/v1` Events (also served as core/v1 Events, the same
//! objects), core/v1 Namespaces and `coordination.k8s.io/v1` Leases.
//! kube-rs's `Client`, `Api`, `watcher` and `Controller` work against it
//! unchanged, either in-process (`kube::Client::new(sim.router(), "default")`)
//! or over a loopback port ([`SimKube::serve`]); so does kubectl (`apply`
//! with validation, `get -w`, `describe`, `explain`, `diff`, `delete --wait`).
//!
//! What it models faithfully: uids, creation and deletion timestamps,
//! a global resourceVersion, optimistic concurrency (409 on a stale
//! resourceVersion in PUT bodies, merge/JSON patches and delete
//! preconditions), generation bumps on spec changes and on the start of a
//! finalizer-blocked deletion, the status subresource split, finalizers
//! (no new ones once deleting), JSON patch `test` with the API server's
//! "missing equals null", label and field selectors, consistent list paging (continued pages read
//! the first page's version; 410 Expired once it is compacted), watches
//! with bookmarks, timeouts, selector transitions (relabelled out = DELETED)
//! and 410 Gone, discovery (classic and aggregated), OpenAPI v2 and v3 built
//! from the CRD schemas, pruning of fields a CRD schema does not declare with
//! `fieldValidation` (Strict refuses, Warn warns), server-side dry run
//! (`dryRun=All`), namespace lifecycle (a deleted namespace empties, then
//! goes; with [`SimKubeBuilder::strict_namespaces`] nothing is created in a
//! namespace that does not exist), `Status` error bodies, server-side
//! printing (the `meta.k8s.io` `Table` of `kubectl get`, with a CRD's
//! printer columns).
//!
//! Where it is simpler than a real API server: no schema validation of
//! values (types, formats, patterns) or defaulting; server-side apply and
//! strategic merge patch are applied as merge patches (no field ownership);
//! all served versions share one storage without conversion; request bodies
//! are JSON only (no protobuf, so kubectl's typed `create namespace` gets 415;
//! `kubectl apply` works); OpenAPI v2 is served as JSON only; lists and gets
//! read the latest state (their resourceVersion parameters are ignored, as a
//! watch cache serving `resourceVersion=0` may); deleting a CRD object does
//! not stop serving its type.
//!
//! ```no_run
//! # async fn demo(crd: serde_json::Value) -> Result<(), Box<dyn std::error::Error>> {
//! use server_simkube::{FaultConfig, FaultKind, SimKube, Verb};
//!
//! let sim = SimKube::builder().seed(42).build();
//! sim.install_crd(crd)?;
//! let served = sim.serve("127.0.0.1:0".parse()?).await?;
//! println!("kube API on {}", served.url());
//! sim.faults().set(FaultConfig::none().with_error_rate(Verb::Patch, FaultKind::Conflict, 0.1));
//! println!("{} requests so far", sim.counters().total());
//! # Ok(()) }
//! ```

mod counters;
mod discovery;
mod event_view;
mod faults;
mod handlers;
mod jsonpath;
mod object;
mod openapi;
mod paging;
mod patch;
mod representation;
mod resource;
mod router;
mod schema;
mod selector;
mod status;
mod store;
mod table;
mod validation;
mod verb;
mod watch;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
pub use server_sim_serve::ServeHandle;

pub use counters::{CounterSnapshot, RequestKey};
pub use faults::{ErrorRates, FaultConfig, FaultKind, Faults};
pub use patch::{Patch, PatchKind};
pub use resource::ResourceType;
pub use status::ApiError;
pub use store::{Clock, StoreHandle};
pub use verb::Verb;

use counters::Counters;
use store::StoreState;

/// Default bytes of object versions a type's watch history may hold: about
/// 500 changes of a Server with 32 KB of user data (each change holds the
/// version before it too), the full 1,000 changes of small objects.
pub const DEFAULT_HISTORY_BYTES: usize = 32 << 20;

/// How long a change stays in the watch history whatever the limits:
/// kube-apiserver's watch cache keeps every event younger than its
/// `eventFreshDuration` (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go),
/// so a watcher resuming, or a list paging, within that window is served.
pub const DEFAULT_HISTORY_FRESH_FOR: Duration = Duration::from_secs(75);

/// State shared by the router's handlers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: StoreHandle,
    pub(crate) faults: Faults,
    pub(crate) counters: Counters,
    pub(crate) bookmark_interval: Duration,
}

/// Builder for [`SimKube`].
pub struct SimKubeBuilder {
    seed: u64,
    history_limit: usize,
    history_bytes: usize,
    history_fresh_for: Duration,
    bookmark_interval: Duration,
    clock: Option<Clock>,
    strict_namespaces: bool,
}

impl fmt::Debug for SimKubeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimKubeBuilder")
            .field("seed", &self.seed)
            .field("history_limit", &self.history_limit)
            .field("history_bytes", &self.history_bytes)
            .field("history_fresh_for", &self.history_fresh_for)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("clock", &self.clock.as_ref().map(|_| "custom"))
            .field("strict_namespaces", &self.strict_namespaces)
            .finish()
    }
}

impl Default for SimKubeBuilder {
    fn default() -> Self {
        Self {
            seed: 0,
            history_limit: 1000,
            history_bytes: DEFAULT_HISTORY_BYTES,
            history_fresh_for: DEFAULT_HISTORY_FRESH_FOR,
            bookmark_interval: Duration::from_secs(1),
            clock: None,
            strict_namespaces: false,
        }
    }
}

impl SimKubeBuilder {
    /// Seeds uids, generated names and fault draws.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Changes retained per resource type for watches (default 1000); a watch
    /// from before the oldest retained change gets 410 Gone.
    #[must_use]
    pub fn history_limit(mut self, changes: usize) -> Self {
        self.history_limit = changes;
        self
    }

    /// Bytes of object versions the changes retained per resource type may
    /// hold (default [`DEFAULT_HISTORY_BYTES`]): a type of large objects
    /// keeps fewer changes, as kube-apiserver's watch cache bounds what it
    /// holds; a watch from before the oldest retained change gets 410 Gone.
    #[must_use]
    pub fn history_bytes(mut self, bytes: usize) -> Self {
        self.history_bytes = bytes;
        self
    }

    /// A change younger than this stays in a type's watch history past the
    /// count and byte limits (default [`DEFAULT_HISTORY_FRESH_FOR`], as
    /// kube-apiserver's watch cache); zero applies the limits at once.
    #[must_use]
    pub fn history_fresh_for(mut self, fresh_for: Duration) -> Self {
        self.history_fresh_for = fresh_for;
        self
    }

    /// How often watches that allow bookmarks get one (default 1 s).
    #[must_use]
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Refuses, as a real API server's NamespaceLifecycle admission does,
    /// creating an object in a namespace that does not exist (404 NotFound
    /// naming the namespace). By default a namespace comes into existence
    /// with the first object created in it, so tests need not create them.
    #[must_use]
    pub fn strict_namespaces(mut self) -> Self {
        self.strict_namespaces = true;
        self
    }

    /// Overrides the wall clock used for creation and deletion timestamps.
    #[must_use]
    pub fn clock(mut self, clock: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Builds the server, serving Events, Leases and CustomResourceDefinitions.
    pub fn build(self) -> SimKube {
        let clock = self.clock.unwrap_or_else(|| Arc::new(jiff::Timestamp::now));
        let limit = store::HistoryLimit {
            changes: self.history_limit,
            bytes: self.history_bytes,
            fresh_for: self.history_fresh_for,
        };
        let mut state = StoreState::new(self.seed, limit, clock);
        state.set_strict_namespaces(self.strict_namespaces);
        let store = StoreHandle::new(state);
        store.install(ResourceType::custom_resource_definitions());
        store.install(ResourceType::events());
        store.install(ResourceType::core_events());
        store.install(ResourceType::namespaces());
        store.install(ResourceType::leases());
        // Every cluster has these (upstream: the apiserver's system namespaces controller).
        for namespace in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store.ensure_namespace(namespace);
        }
        SimKube {
            shared: Arc::new(Shared {
                store,
                // A distinct stream from the store's, so adding a create does
                // not shift which requests get faults.
                faults: Faults::new(self.seed ^ 0x5eed_fa17_5eed_fa17),
                counters: Counters::default(),
                bookmark_interval: self.bookmark_interval,
            }),
        }
    }
}

/// An in-process Kubernetes API server. Clones share one server.
#[derive(Debug, Clone)]
pub struct SimKube {
    shared: Arc<Shared>,
}

impl Default for SimKube {
    fn default() -> Self {
        Self::new()
    }
}

impl SimKube {
    /// A server with seed 0 and default settings.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configures a server.
    pub fn builder() -> SimKubeBuilder {
        SimKubeBuilder::default()
    }

    /// Serves the resource an `apiextensions.k8s.io/v1` CustomResourceDefinition
    /// describes, and stores the CRD itself (readable at
    /// `/apis/apiextensions.k8s.io/v1/customresourcedefinitions`).
    pub fn install_crd(&self, crd: Value) -> Result<ResourceType, ApiError> {
        let rtype = ResourceType::from_crd(&crd)?;
        self.shared.store.insert("customresourcedefinitions", crd)?;
        Ok(rtype)
    }

    /// Serves a resource type given directly (e.g. a core `v1` type).
    pub fn install_resource(&self, rtype: ResourceType) {
        self.shared.store.install(rtype);
    }

    /// The API as an axum `Router`: hand it to `kube::Client::new(router, "default")`
    /// for an in-process client, or serve it.
    pub fn router(&self) -> axum::Router {
        router::build(self.shared.clone())
    }

    /// Serves the API on `addr` (port 0 picks a free port) until
    /// [`ServeHandle::shutdown`] or the end of the runtime; dropping the
    /// handle leaves it running.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<ServeHandle> {
        server_sim_serve::serve(self.router(), addr).await
    }

    /// Direct access to objects, bypassing HTTP, faults and counters.
    pub fn store(&self) -> StoreHandle {
        self.shared.store.clone()
    }

    /// The fault-injection switchboard.
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Request counters so far.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared.counters.snapshot()
    }

    /// Zeroes the counters.
    pub fn reset_counters(&self) {
        self.shared.counters.reset();
    }

    /// Drops all watch history (see [`StoreHandle::compact`]).
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// Ends every open watch stream, as an API server restart does; clients
    /// resume from their last resourceVersion (410 Gone if it was compacted).
    pub fn end_watches(&self) {
        self.shared.store.end_watches();
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }
}
