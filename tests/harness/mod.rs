//! The end-to-end harness: a SimKube served on a loopback port with the
//! operator's CRDs, a SimCloud, and the real controller and monitor of
//! server-kube running against them with short intervals.
//!
//! Every scenario runs once per [`CloudKind`] (see [`cloud_scenarios!`]):
//! with SimCloud's port handed to the controller directly, and with the
//! OpenStack simulator serving the same SimCloud over loopback HTTP to
//! server-openstack's adapter. SimCloud's truth and counters count model
//! calls either way, so the scenarios assert the same ground truth.
//!
//! Fixtures are seeded through SimKube's store (no API requests, so the
//! request counters only see the operator); what a user or an operator does
//! during a test (spec changes, resets, deletes) goes through the API.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use server_core::model::{IDENTITY_LABEL, REGION_LABEL};
use server_core::port::CloudPort;
use server_kube::crd::Server;
use server_kube::{CloudRegistry, ControllerConfig, Operator, RegionCloud};
use server_openstack::port_name;
use server_sim_openstack::{Op, OpenStackCounters, OpenStackSim};
use server_sim_testbed::{CloudBed, KubeBed, Tenant};
use server_simcloud::{CloudConfig, Fate, SimCloud, UidTruth};
use server_simkube::SimKube;
use server_simkube::{CounterSnapshot, Verb};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use server_sim_testbed::control_plane;
pub mod apiserver;
pub mod go_controller;
pub mod ha;
pub mod real;

use apiserver::block_on;
pub use apiserver::{ApiServer, RealApi, api_server, on_the_real_server, on_the_real_server_within};

pub use server_sim_openstack as openstack;
/// How the controller reaches SimCloud (the test bed's paths).
pub use server_sim_testbed::CloudPath as CloudKind;
pub use server_simcloud as cloud;
pub use server_simkube as simkube;

pub const NAMESPACE: &str = "e2e";
pub const REGION: &str = "region-1";
pub const IDENTITY: &str = "identity-1";
pub const PROJECT: &str = "project-1";
/// The OpenstackIdentity's credentials, the only ones the simulated Keystone accepts.
pub const OPENSTACK_USER: &str = "user-1";
pub const OPENSTACK_PASSWORD: &str = "not-a-real-password";
pub const NETWORK: &str = "0c6f8a9e-5b1d-4d8e-9f3a-2b7c1e4d5a60";
pub const SECURITY_GROUP: &str = "7d2e4f1a-8c3b-4e5d-a6f7-1b2c3d4e5f60";
pub const FLAVOR: &str = "8c2b1d54-2a56-4bb3-9b0c-1d2f6e1f4a01";
pub const IMAGE: &str = "0e8d4f4c-58a4-4d55-93b5-0b65e1c7c3f2";
/// How long any one condition may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// The requeue interval the tests run the controller with.
pub const YIELD: Duration = Duration::from_millis(100);

/// A fast fate: builds in 300 ms, fails in 200 ms, deletes at once.
pub fn fast(fate: Fate) -> Fate {
    fate.with_build_time(Duration::from_millis(300)).with_fail_time(Duration::from_millis(200))
}

/// The configuration the tests run the operator with.
pub fn test_config() -> ControllerConfig {
    ControllerConfig {
        namespace: Some(NAMESPACE.into()),
        yield_interval: YIELD,
        monitor_interval: Duration::from_millis(100),
        resync_interval: None,
        watch_retry_interval: Duration::from_millis(100),
        // Small pages, so every relist of more than two Servers spans pages.
        watch_page_size: 2,
        cloud_timeout: Duration::from_secs(2),
        reporting_instance: Some("e2e".into()),
        ..ControllerConfig::default()
    }
}

/// The test configuration with a periodic resync.
pub fn config_with_resync(every: Duration) -> ControllerConfig {
    ControllerConfig { resync_interval: Some(every), ..test_config() }
}

/// Defines each scenario `async fn name(kind: CloudKind)` as three tests
/// under the test-wide deadline: `name::direct` and `name::openstack` on
/// SimKube, and `name::openstack_real` on the reference kube-apiserver (see
/// [`apiserver`]; skipped outside CI when it is not built). The same body
/// and assertions each time: [`Env`] takes the API server from the variant.
/// Separate tests (not a loop) so a failure names its variant and they run
/// in parallel.
#[macro_export]
macro_rules! cloud_scenarios {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn direct() {
                $crate::within(super::$scenario($crate::CloudKind::Direct)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn openstack() {
                $crate::within(super::$scenario($crate::CloudKind::OpenStack)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn openstack_real() {
                $crate::on_the_real_server(super::$scenario($crate::CloudKind::OpenStack)).await
            }
        }
    )+};
}

/// [`cloud_scenarios!`] for scenarios that need SimKube's own tools (fault
/// injection into the API, compaction, store-level edits): `direct` and
/// `openstack` on SimKube only. docs/TESTING.md lists them and why.
#[macro_export]
macro_rules! simkube_scenarios {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn direct() {
                $crate::within(super::$scenario($crate::CloudKind::Direct)).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn openstack() {
                $crate::within(super::$scenario($crate::CloudKind::OpenStack)).await
            }
        }
    )+};
}

/// What runs: both loops, only the controller, or only the monitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loops {
    Both,
    ControllerOnly,
    MonitorOnly,
}

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), server_kube::Error>>,
}

/// The API server of an [`Env`].
enum Backend {
    /// SimKube served; seeds, edits and reads go through its store.
    SimKube(KubeBed),
    /// A namespace on the reference kube-apiserver; everything through the API.
    Real(RealApi),
}

/// One test's world.
pub struct Env {
    pub kind: CloudKind,
    pub api: ApiServer,
    /// The test's namespace: [`NAMESPACE`] on SimKube, one of its own on
    /// the shared real control plane.
    pub namespace: String,
    pub cloud: SimCloud,
    /// The client of a user or an operator (on the real server the admin).
    pub client: Client,
    /// The operator's client (SimKube's admin; on the real server
    /// deploy/base's ServiceAccount).
    operator_client: Client,
    pub config: ControllerConfig,
    /// The API server, and SimCloud on the Env's path; dropped with the Env.
    backend: Backend,
    cloud_bed: CloudBed,
    /// Operator starts so far: each OpenStack adapter is a fresh one (a
    /// restarted process), so each may log in once.
    starts: u64,
    running: Option<Running>,
    /// Regions served besides [`REGION`], each by its own cloud.
    other_regions: Vec<(String, RegionCloud)>,
    invariant_violated: Arc<AtomicBool>,
    /// (uid, name) of every Server the test created.
    watched_uids: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl Env {
    /// A SimKube serving every CRD, a reliable SimCloud, a ready Identity with
    /// its OpenstackIdentity, one Network and one SecurityGroup.
    pub async fn new(kind: CloudKind, seed: u64) -> Env {
        Env::with_config(kind, seed, test_config()).await
    }

    pub async fn with_config(kind: CloudKind, seed: u64, config: ControllerConfig) -> Env {
        Env::build(kind, seed, config, CloudConfig::reliable(seed)).await
    }

    /// A world whose cloud misbehaves as `cloud` says.
    pub async fn with_cloud(kind: CloudKind, seed: u64, cloud: CloudConfig) -> Env {
        Env::build(kind, seed, test_config(), cloud).await
    }

    pub async fn build(kind: CloudKind, seed: u64, config: ControllerConfig, cloud: CloudConfig) -> Env {
        Env::build_with(kind, seed, config, cloud, openstack::OpenStackSimConfig::default()).await
    }

    /// [`Env::build`] with the OpenStack simulator configured (OpenStack path only).
    pub async fn build_with(
        kind: CloudKind,
        seed: u64,
        config: ControllerConfig,
        cloud: CloudConfig,
        openstack_config: openstack::OpenStackSimConfig,
    ) -> Env {
        init_tracing();
        let api = api_server();
        let (backend, namespace, client, operator_client) = match api {
            ApiServer::SimKube => {
                let sim = SimKube::builder().seed(seed).bookmark_interval(Duration::from_millis(100)).build();
                let bed = KubeBed::serve(sim, ([127, 0, 0, 1], 0).into(), NAMESPACE)
                    .await
                    .unwrap_or_else(|e| panic!("no test bed: {e}"));
                let client = bed.client.clone();
                (Backend::SimKube(bed), NAMESPACE.to_owned(), client.clone(), client)
            }
            ApiServer::Real => {
                let real = RealApi::start().await;
                let (namespace, admin, operator) = (real.namespace.clone(), real.admin.clone(), real.operator.clone());
                (Backend::Real(real), namespace, admin, operator)
            }
        };
        let mut config = config;
        for scope in [&mut config.namespace, &mut config.region_namespace] {
            if scope.as_deref() == Some(NAMESPACE) {
                *scope = Some(namespace.clone());
            }
        }
        // Each HTTP call gets half the controller's cloud timeout, so a slow
        // call fails as the adapter's timeout (transient) before the controller's.
        let timeout = Some(config.cloud_timeout / 2);
        let cloud_bed =
            CloudBed::start_with(kind, SimCloud::new(cloud), &tenant_in(&namespace), timeout, openstack_config)
                .await
                .unwrap_or_else(|e| panic!("no cloud: {e}"));
        let env = Env {
            kind,
            api,
            namespace,
            cloud: cloud_bed.cloud.clone(),
            client,
            operator_client,
            config,
            backend,
            cloud_bed,
            starts: 0,
            running: None,
            other_regions: Vec::new(),
            invariant_violated: Arc::new(AtomicBool::new(false)),
            watched_uids: Arc::new(std::sync::Mutex::new(Vec::new())),
        };
        env.seed_identity(true);
        env.seed("networks", NETWORK, json!({"prefix": "192.168.0.0/24"}));
        env.seed("securitygroups", SECURITY_GROUP, json!({}));
        env.spawn_invariant_checker();
        env
    }

    /// Starts the operator (both loops).
    pub fn start(&mut self) {
        self.start_loops(Loops::Both);
    }

    pub fn start_loops(&mut self, loops: Loops) {
        self.start_with_metrics(loops, Arc::new(server_kube::NoMetrics));
    }

    /// Starts the operator reporting to `metrics`.
    pub fn start_with_metrics(&mut self, loops: Loops, metrics: Arc<dyn server_kube::Metrics>) {
        assert!(self.running.is_none(), "the operator is already running");
        let mut registry = CloudRegistry::new();
        // Both paths stand in for an OpenStack region (the tenant has its
        // OpenstackIdentity).
        registry.insert(REGION, RegionCloud::openstack(self.cloud_port()));
        for (region, cloud) in &self.other_regions {
            registry.insert(region.clone(), cloud.clone());
        }
        self.starts += 1;
        let operator = Operator::with_metrics(self.operator_client.clone(), registry, self.config.clone(), metrics);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(async move {
            match loops {
                Loops::Both => operator.run(shutdown).await,
                Loops::ControllerOnly => operator.run_controller(shutdown).await,
                Loops::MonitorOnly => operator.run_monitor(shutdown).await,
            }
        });
        self.running = Some(Running { stop, task });
    }

    /// The client the operator runs with (its ServiceAccount on the real API server).
    pub fn operator_client(&self) -> &Client {
        &self.operator_client
    }

    /// The clouds `explain` and `run --shadow` are given: the region's, read only.
    pub fn read_only_clouds(&self) -> CloudRegistry {
        let port = self.cloud_bed.read_only_port().unwrap_or_else(|e| panic!("no cloud port: {e}"));
        let mut registry = CloudRegistry::new();
        registry.insert(REGION, RegionCloud::openstack(port));
        registry
    }

    /// Has the next start serve `region` with `cloud` too.
    pub fn serve_region(&mut self, region: &str, cloud: RegionCloud) {
        self.other_regions.push((region.to_owned(), cloud));
    }

    /// The port the controller is given: a new OpenStack adapter per start,
    /// as a restarted process would have (no cached token or server ids).
    fn cloud_port(&self) -> Arc<dyn CloudPort> {
        self.cloud_bed.port().unwrap_or_else(|e| panic!("no cloud port: {e}"))
    }

    /// Stops the operator and waits until it has (in-flight passes finish).
    pub async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.stop.send(());
            match tokio::time::timeout(PATIENCE, running.task).await {
                Ok(Ok(Ok(()))) => {}
                other => panic!("the operator did not stop cleanly: {other:?}"),
            }
        }
    }

    /// SimKube, for a scenario that uses its own tools (fault injection,
    /// compaction, its store): such a scenario runs on SimKube only.
    pub fn sim(&self) -> &SimKube {
        match &self.backend {
            Backend::SimKube(bed) => &bed.sim,
            Backend::Real(_) => panic!("a SimKube-only scenario ran on the real API server"),
        }
    }

    fn kube_bed(&self) -> &KubeBed {
        match &self.backend {
            Backend::SimKube(bed) => bed,
            Backend::Real(_) => panic!("a SimKube-only scenario ran on the real API server"),
        }
    }

    /// The test's namespace on the real API server, `None` on SimKube.
    pub fn real(&self) -> Option<&RealApi> {
        match &self.backend {
            Backend::SimKube(_) => None,
            Backend::Real(real) => Some(real),
        }
    }

    /// The address SimKube serves on.
    pub fn api_addr(&self) -> std::net::SocketAddr {
        self.kube_bed().served().addr()
    }

    /// SimKube's URL, for a client of one's own.
    pub fn api_url(&self) -> String {
        self.kube_bed().served().url()
    }

    fn tenant(&self) -> Tenant {
        tenant_in(&self.namespace)
    }

    // ---- fixtures ----------------------------------------------------------

    /// Seeds an object: through SimKube's store (no API request, status
    /// kept), or created by the admin on the real server.
    pub fn seed(&self, plural: &str, name: &str, spec: Value) {
        match &self.backend {
            Backend::SimKube(bed) => bed.seed(&self.tenant(), plural, name, spec).unwrap_or_else(|e| panic!("{e}")),
            Backend::Real(real) => drop(block_on(real.create(plural, self.tenant().object(name, spec)))),
        }
        self.cloud_bed.seed_neutron(&self.tenant(), plural, name);
    }

    /// The Identity (ready or not) and its OpenstackIdentity.
    pub fn seed_identity(&self, ready: bool) {
        match &self.backend {
            Backend::SimKube(bed) => bed.seed_tenant(&self.tenant(), ready).unwrap_or_else(|e| panic!("{e}")),
            Backend::Real(real) => block_on(real.seed_tenant(&self.tenant(), ready)),
        }
    }

    /// Makes the Identity ready without a new Server event (as its own controller would).
    pub fn make_identity_ready(&self) {
        self.edit("identities", IDENTITY, |identity| identity["status"] = Tenant::provisioned());
    }

    /// Edits a stored object as its own controller or a person with write
    /// access would: in SimKube's store, or read, edited and written back
    /// (spec and status each through its own endpoint) on the real server.
    pub fn edit(&self, plural: &str, name: &str, edit: impl Fn(&mut Value)) {
        match &self.backend {
            Backend::SimKube(bed) => bed
                .store()
                .modify(plural, Some(&self.namespace), name, edit)
                .map(drop)
                .unwrap_or_else(|e| panic!("editing {plural}/{name}: {e}")),
            Backend::Real(real) => block_on(real.edit(plural, name, edit)),
        }
    }

    /// A stored object of the test's namespace as JSON.
    pub fn object(&self, plural: &str, name: &str) -> Option<Value> {
        match &self.backend {
            Backend::SimKube(bed) => bed.store().get(plural, Some(&self.namespace), name),
            Backend::Real(real) => block_on(real.get(plural, name)),
        }
    }

    /// The objects of a kind in the test's namespace as JSON.
    pub fn objects(&self, plural: &str) -> Vec<Value> {
        match &self.backend {
            Backend::SimKube(bed) => bed.store().list(plural, Some(&self.namespace)),
            Backend::Real(real) => block_on(real.list(plural)),
        }
    }

    /// A Server spec attached to the seeded network and security group.
    pub fn spec() -> Value {
        json!({
            "flavorID": FLAVOR,
            "image": { "id": IMAGE },
            "networks": [{ "id": NETWORK }],
            "securityGroups": [{ "id": SECURITY_GROUP }],
        })
    }

    /// Creates a Server whose cloud fate is in place before the controller
    /// can act on it. On SimKube the uid is chosen (`uid-<name>`) and the
    /// fate scripted first. On the real server the API server assigns the
    /// uid: the fate is scripted right after the create when the operator is
    /// not running, else the Server is created paused, scripted, and unpaused
    /// (a Server the spec pauses stays paused).
    pub fn create_server(&self, name: &str, fate: Fate, spec: Value) -> String {
        self.create_server_with_labels(name, fate, spec, &[(REGION_LABEL, REGION), (IDENTITY_LABEL, IDENTITY)])
    }

    pub fn create_server_with_labels(&self, name: &str, fate: Fate, spec: Value, labels: &[(&str, &str)]) -> String {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let uid = match &self.backend {
            Backend::SimKube(bed) => {
                let uid = format!("uid-{name}");
                self.cloud.script(&uid, fate);
                let object = json!({
                    "apiVersion": "region.unikorn-cloud.org/v1alpha1",
                    "metadata": { "name": name, "namespace": self.namespace, "uid": uid, "labels": labels },
                    "spec": spec,
                });
                bed.store().insert("servers", object).unwrap_or_else(|e| panic!("creating server {name}: {e}"));
                uid
            }
            Backend::Real(real) => {
                let hold = self.running.is_some() && spec["pause"] != json!(true);
                let pause = spec.get("pause").cloned().unwrap_or(Value::Null);
                let mut spec = spec;
                if hold {
                    spec["pause"] = json!(true);
                }
                let object = json!({ "metadata": { "name": name, "labels": labels }, "spec": spec });
                let created = block_on(real.create("servers", object));
                let uid = created["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                self.cloud.script(&uid, fate);
                if hold {
                    block_on(real.merge_patch("servers", name, json!({ "spec": { "pause": pause } })));
                }
                uid
            }
        };
        if let Ok(mut uids) = self.watched_uids.lock() {
            uids.push((uid.clone(), name.to_owned()));
        }
        uid
    }

    // ---- what a user or an operator does, through the API ------------------

    fn servers(&self) -> Api<Server> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Merge-patches the Server's spec (a user edit: the generation moves).
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        let body = json!({ "spec": spec });
        self.servers()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patching the spec of {name}: {e}"));
    }

    /// Annotates the Server as `kubectl annotate server NAME KEY=VALUE` does
    /// (a metadata merge patch).
    pub async fn annotate(&self, name: &str, key: &str, value: &str) {
        let body = json!({ "metadata": { "annotations": { key: value } } });
        self.servers()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("annotating {name}: {e}"));
    }

    /// Merge-patches the Server's status (an operator's reset).
    pub async fn patch_status(&self, name: &str, status: Value) {
        let body = json!({ "status": status });
        self.servers()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patching the status of {name}: {e}"));
    }

    pub async fn delete_server(&self, name: &str) {
        self.servers().delete(name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    }

    /// Edits the stored Server directly (simulating lost or stale status).
    pub fn edit_server(&self, name: &str, edit: impl Fn(&mut Value)) {
        self.edit("servers", name, edit);
    }

    // ---- observations (SimKube's store, or the admin's reads: never counted) --

    pub fn server(&self, name: &str) -> Option<Server> {
        let value = self.server_json(name)?;
        Some(serde_json::from_value(value).unwrap_or_else(|e| panic!("server {name} does not parse: {e}")))
    }

    pub fn server_json(&self, name: &str) -> Option<Value> {
        self.object("servers", name)
    }

    pub fn finalizers(&self, plural: &str, name: &str) -> Vec<String> {
        self.object(plural, name)
            .and_then(|o| serde_json::from_value(o["metadata"]["finalizers"].clone()).ok())
            .unwrap_or_default()
    }

    /// Events about a Server, by reason, counting a series as its count.
    pub fn events(&self, server: &str) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for event in self.objects("events") {
            if event["regarding"]["name"] != server {
                continue;
            }
            assert_eq!(event["reportingController"], "server-controller");
            let reason = event["reason"].as_str().unwrap_or_default().to_owned();
            let count = event["series"]["count"].as_u64().unwrap_or(1);
            *counts.entry(reason).or_default() += count;
        }
        counts
    }

    /// The notes of a Server's events of one reason, as a person reads them
    /// with `kubectl describe` (a series shows its first note).
    pub fn event_notes(&self, server: &str, reason: &str) -> Vec<String> {
        let mut notes: Vec<String> = self
            .objects("events")
            .into_iter()
            .filter(|event| event["regarding"]["name"] == server && event["reason"] == reason)
            .filter_map(|event| event["note"].as_str().map(str::to_owned))
            .collect();
        notes.sort();
        notes
    }

    pub fn event_count(&self, server: &str, reason: &str) -> u64 {
        self.events(server).get(reason).copied().unwrap_or(0)
    }

    /// The operator's API requests: SimKube's counters (which count the
    /// test's own API writes too), or on the real server what the audit log
    /// has of the operator's ServiceAccount in the test's namespace.
    pub fn counters(&self) -> CounterSnapshot {
        match &self.backend {
            Backend::SimKube(bed) => bed.sim.counters(),
            Backend::Real(real) => real.counters(),
        }
    }

    pub fn truth(&self, uid: &str) -> UidTruth {
        self.cloud.truth(uid)
    }

    /// Waits until `check` holds for the Server, or fails the test.
    pub async fn wait_server(&self, name: &str, what: &str, check: impl Fn(&Server) -> bool) -> Server {
        let mut last = None;
        let found = eventually_some(what, || {
            last = self.server(name);
            last.as_ref().filter(|s| check(s)).cloned()
        })
        .await;
        match found {
            Some(server) => server,
            None => panic!("timed out waiting for {name}: {what}\nlast seen: {:#}", json_of(last.as_ref())),
        }
    }

    /// Waits until `check` holds.
    pub async fn wait(&self, what: &str, check: impl Fn() -> bool) {
        if eventually_some(what, || check().then_some(())).await.is_none() {
            panic!("timed out waiting for: {what}");
        }
    }

    /// Keeps the world running for `intervals` requeue intervals.
    pub async fn idle(&self, intervals: u32) {
        tokio::time::sleep(YIELD * intervals).await;
    }

    /// Keystone's v3 URL of the OpenStack simulator, when the Env runs through it.
    pub fn openstack_auth_url(&self) -> Option<String> {
        self.cloud_bed.openstack_config().map(|config| config.auth_url.clone())
    }

    /// The adapter's Keystone login backoff for the operator started next
    /// (OpenStack path).
    pub fn login_backoff(&mut self, first: Duration, max: Duration) {
        self.cloud_bed.set_login_backoff(first, max);
    }

    /// The OpenStack simulator, when the Env runs through it.
    pub fn openstack(&self) -> Option<&OpenStackSim> {
        self.cloud_bed.openstack()
    }

    /// Fails if a Server ever had two live provider servers (invariant 6).
    /// Through OpenStack also: Nova was never asked to create a second server
    /// for a Server that had one (the model deduplicates, a real Nova would
    /// not), no port was deleted under its server, and each adapter logged
    /// in once (tokens are cached per identity; the sim's last an hour).
    pub fn assert_invariants(&self) {
        assert!(!self.invariant_violated.load(Ordering::SeqCst), "two provider servers existed for one Server");
        let leaks = self.leaks();
        assert!(leaks.is_empty(), "cloud resources outlived their Servers: {leaks:#?}");
        if let Some(counters) = self.openstack_counters() {
            assert_eq!(counters.duplicate_server_creates, 0, "Nova was asked for a second server: {counters:?}");
            assert_eq!(counters.ports_deleted_while_attached, 0, "a port was deleted under its server: {counters:?}");
            assert!(
                counters.token_requests <= self.starts,
                "{} token requests for {} operator starts: {counters:?}",
                counters.token_requests,
                self.starts
            );
        }
    }

    pub fn openstack_counters(&self) -> Option<OpenStackCounters> {
        self.openstack().map(OpenStackSim::counters)
    }

    /// The name of the Server the test created with this uid.
    pub fn name_of(&self, uid: &str) -> String {
        let watched = self.watched_uids.lock().map(|u| u.clone()).unwrap_or_default();
        match watched.into_iter().find(|(u, _)| u == uid) {
            Some((_, name)) => name,
            // A provider server seeded by hand on SimKube, its uid `uid-<name>`.
            None if self.api == ApiServer::SimKube => uid.strip_prefix("uid-").unwrap_or(uid).to_owned(),
            None => panic!("no Server of this test has uid {uid}"),
        }
    }

    /// Neutron ports made for the Server with this uid (None for the direct
    /// path). Ports are named after the Server.
    pub fn openstack_ports_of(&self, uid: &str) -> Option<usize> {
        let name = port_name(&self.name_of(uid));
        self.openstack().map(|sim| sim.ports().iter().filter(|p| p.name == name).count())
    }

    /// The security groups (provider IDs) and allowed address pairs (CIDRs)
    /// of the Server's port as the cloud holds them, on either path; `None`
    /// while it has none.
    pub fn port_security(&self, uid: &str) -> Option<(Vec<String>, Vec<String>)> {
        if let Some(openstack) = self.openstack() {
            let name = port_name(&self.name_of(uid));
            let port = openstack.ports().into_iter().find(|p| p.name == name)?;
            return Some((port.security_groups, port.allowed_address_pairs.into_iter().map(|(ip, _)| ip).collect()));
        }
        let now = self.cloud.now();
        let port = self.cloud.with_model(|m| m.port_of(uid, now))?;
        Some((port.security_groups, port.allowed_address_pairs.into_iter().map(|p| p.cidr).collect()))
    }

    /// The Neutron ID of a security group the tests seeded (the direct
    /// path's cloud knows a group by its own ID).
    pub fn security_group_provider_id(&self, group: &str) -> String {
        match self.openstack() {
            Some(openstack) => openstack.security_group_id(&format!("securitygroup-{group}")).unwrap_or_default(),
            None => group.to_owned(),
        }
    }

    /// OpenStack requests so far by endpoint (empty for the direct path).
    pub fn openstack_requests_by_op(&self) -> BTreeMap<Op, usize> {
        let mut by_op = BTreeMap::new();
        for request in self.openstack().map(OpenStackSim::requests).unwrap_or_default() {
            *by_op.entry(request.op).or_default() += 1;
        }
        by_op
    }

    /// After a Server's deletion: no provider server of it, and through
    /// OpenStack none of its Neutron port or floating IPs either.
    pub fn assert_released(&self, uid: &str) {
        let truth = self.truth(uid);
        assert_eq!(truth.live, 0, "{uid}: the provider server outlived its Server: {truth:?}");
        if let Some(openstack) = self.openstack() {
            assert_eq!(self.openstack_ports_of(uid), Some(0), "{uid}: its port outlived it: {:?}", openstack.ports());
            // Deleting a port unbinds its floating IPs: one left unbound was
            // not released first (every floating IP here is a Server's).
            let unbound: Vec<_> = openstack.floating_ips().into_iter().filter(|ip| ip.port_id.is_none()).collect();
            assert!(unbound.is_empty(), "floating IPs outlived their ports: {unbound:?}");
        }
    }

    /// Cloud resources no Server owns: a provider server, port or floating
    /// IP of a Server that is gone from the API server (its deletion ended,
    /// so nothing will ever release them). Each is a violation, not a
    /// statistic (DESIGN "Every provider resource is released").
    pub fn leaks(&self) -> Vec<String> {
        let watched = self.watched_uids.lock().map(|u| u.clone()).unwrap_or_default();
        let gone = |name: &str| self.server_json(name).is_none();
        let mut leaks: Vec<String> = watched
            .iter()
            .filter(|(_, name)| gone(name))
            .filter(|(uid, _)| self.truth(uid).live > 0)
            .map(|(uid, name)| format!("provider server of deleted Server {name} ({uid})"))
            .collect();
        if let Some(openstack) = self.openstack() {
            let ports = openstack.ports();
            let leaked_ports: Vec<&openstack::PortView> =
                ports.iter().filter(|port| port.name.strip_prefix("server-").is_none_or(gone)).collect();
            leaks.extend(leaked_ports.iter().map(|port| format!("port {} ({})", port.id, port.name)));
            for ip in openstack.floating_ips() {
                let held = ip.port_id.as_ref().is_some_and(|id| {
                    ports.iter().any(|port| &port.id == id) && !leaked_ports.iter().any(|port| &port.id == id)
                });
                if !held {
                    leaks.push(format!("floating IP {} ({})", ip.id, ip.address));
                }
            }
        }
        leaks
    }

    fn spawn_invariant_checker(&self) {
        let (cloud, uids, flag) = (self.cloud.clone(), self.watched_uids.clone(), self.invariant_violated.clone());
        tokio::spawn(async move {
            loop {
                let watched = uids.lock().map(|u| u.clone()).unwrap_or_default();
                if watched.iter().any(|(uid, _)| cloud.truth(uid).live > 1) {
                    flag.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").field("running", &self.running.is_some()).finish_non_exhaustive()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.stop.send(());
            running.task.abort();
        }
    }
}

/// The tenant every SimKube test runs as.
pub(crate) fn tenant() -> Tenant {
    tenant_in(NAMESPACE)
}

/// The tenant of a test's namespace.
pub(crate) fn tenant_in(namespace: &str) -> Tenant {
    Tenant::new(namespace, REGION, IDENTITY).with_openstack(PROJECT, OPENSTACK_USER, OPENSTACK_PASSWORD)
}

fn json_of(server: Option<&Server>) -> Value {
    server.and_then(|s| serde_json::to_value(s).ok()).unwrap_or(Value::Null)
}

async fn eventually_some<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() > deadline {
            tracing::error!(what, "timed out");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `future` under a test-wide deadline.
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE * 4, future).await {
        Ok(value) => value,
        Err(_) => panic!("the test did not finish in time"),
    }
}

// ---- status helpers -----------------------------------------------------------

pub fn status(server: &Server) -> server_core::ServerStatus {
    server.status.clone().unwrap_or_default()
}

/// (status, reason, message) of a condition type ("Available", "Healthy").
pub fn condition(server: &Server, type_: &str) -> Option<(String, String, String)> {
    let value = serde_json::to_value(status(server)).ok()?;
    let found = value["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?.clone();
    let field = |k: &str| found[k].as_str().unwrap_or_default().to_owned();
    Some((field("status"), field("reason"), field("message")))
}

pub fn available_reason(server: &Server) -> String {
    condition(server, "Available").map(|c| c.1).unwrap_or_default()
}

pub fn available_message(server: &Server) -> String {
    condition(server, "Available").map(|c| c.2).unwrap_or_default()
}

impl Env {
    /// Where `server` stands, by the project's one classifier, under the
    /// options this Env's controller runs with.
    pub fn lifecycle(&self, server: &Server) -> server_core::Lifecycle {
        server_core::lifecycle(&server_kube::convert::core_server(server), &self.config.options)
    }

    /// The park `server` is in, if any.
    pub fn park(&self, server: &Server) -> Option<server_core::ParkKind> {
        self.lifecycle(server).park()
    }
}

pub fn phase(server: &Server) -> String {
    status(server).phase.map(|p| format!("{p:?}")).unwrap_or_default()
}

pub fn has_finalizer(server: &Server, finalizer: &str) -> bool {
    server.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Writes (patches, creates, deletes, updates) the operator sent to a resource.
pub fn writes(counters: &CounterSnapshot, resource: &str) -> u64 {
    [Verb::Patch, Verb::Create, Verb::Update, Verb::Delete].iter().map(|v| counters.count(*v, resource)).sum()
}

/// The kinds a pass reads but the operator does not own, which it caches
/// (server-kube's table of them): each is listed once when its cache fills
/// and then only watched (a live list or get confirms what a cache lacks,
/// and reads the references of a deleting Server).
pub fn consumed_kinds() -> Vec<String> {
    server_kube::read_kinds().into_iter().map(|kind| kind.plural).collect()
}

/// Lists and gets of the consumed kinds.
pub fn consumed_reads(counters: &CounterSnapshot) -> u64 {
    consumed_kinds().iter().map(|kind| counters.count(Verb::List, kind) + counters.count(Verb::Get, kind)).sum()
}

/// All writes to the Server, the kinds it references, and Events.
pub fn operator_writes(counters: &CounterSnapshot) -> u64 {
    let referenced = server_kube::read_kinds().into_iter().filter(|kind| kind.referenced).map(|kind| kind.plural);
    ["servers", "servers/status", "events"]
        .map(str::to_owned)
        .into_iter()
        .chain(referenced)
        .map(|r| writes(counters, &r))
        .sum()
}

fn init_tracing() {
    // Logs only when asked for (RUST_LOG-like filtering is not needed here).
    if std::env::var_os("E2E_LOG").is_some() {
        let _ = tracing::subscriber::set_global_default(STDERR_LOGS);
    }
}

/// A minimal subscriber, so the harness needs no logging crate: each event
/// as one line (`LEVEL target: field=value ...`) handed to `sink`, from
/// `ours` up for this project's crates (`server_*`) and `others` up for the rest.
#[derive(Debug)]
pub struct LineSubscriber {
    pub ours: tracing::Level,
    pub others: tracing::Level,
    pub sink: fn(String),
}

/// Logs to stderr at INFO, for `E2E_LOG`.
const STDERR_LOGS: LineSubscriber =
    LineSubscriber { ours: tracing::Level::INFO, others: tracing::Level::INFO, sink: |line| eprintln!("{line}") };

impl tracing::Subscriber for LineSubscriber {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        let ours = metadata.target().starts_with("server_");
        metadata.level() <= if ours { &self.ours } else { &self.others }
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        (self.sink)(format!("{} {}:{}", event.metadata().level(), event.metadata().target(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
