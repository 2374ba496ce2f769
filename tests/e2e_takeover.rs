//! The takeover from the Go controller, for real: the Go controller
//! (`unikorn-server-controller` and `unikorn-region-monitor`, built by
//! `.ci/build-go-controller`) makes the servers of six Servers on the
//! reference kube-apiserver through the OpenStack simulator, under its own
//! Server CRD; it is stopped, this operator starts on the same API server
//! and cloud under its CRD and adopts every one of them, creating and
//! deleting nothing; then the way back, the takeover runbook's step 5 (docs/OPERATIONS.md): this
//! operator stopped, the Go controller started again, nothing recreated.
//!
//! Skips without the Go build (`GO_CONTROLLER_BIN`) or the control plane,
//! outside CI; fails under `CI=true` (see
//! [`server_e2e::go_controller::go_controller_or_skip`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server_e2e::cloud::Fate;
use server_e2e::go_controller::{GO_SERVER_CRD, GoBuild, GoController, go_controller_or_skip};
use server_e2e::openstack::{OpenStackCounters, OpenStackSim, OpenStackSimConfig};
use server_e2e::*;

const NAME_LABEL: &str = "unikorn-cloud.org/name";
/// How often the Go monitor polls (its default is a minute).
const MONITOR_POLL: Duration = Duration::from_secs(1);

/// One Server of the world the Go controller makes.
struct Made {
    /// The object's name (`serverID` in Nova, `server-<name>` the port).
    name: &'static str,
    /// Its name label: the Nova server's name.
    display: &'static str,
    public_ip: bool,
    boots: bool,
}

const WORLD: [Made; 6] = [
    Made { name: "srv-a", display: "web-a", public_ip: true, boots: true },
    Made { name: "srv-b", display: "web-b", public_ip: true, boots: true },
    Made { name: "srv-c", display: "db-c", public_ip: false, boots: true },
    Made { name: "srv-d", display: "db-d", public_ip: false, boots: true },
    Made { name: "srv-e", display: "job-e", public_ip: false, boots: true },
    Made { name: "srv-f", display: "broken-f", public_ip: false, boots: false },
];

/// The Server created while this operator runs.
const LATE: Made = Made { name: "srv-g", display: "new-g", public_ip: true, boots: true };

/// The Go controller's metrics bind `:8080` with no flag to move them: the
/// tests that run it take turns.
static GO_METRICS_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_controllers_servers_are_adopted_and_it_takes_them_back_unchanged() {
    let Some(build) = go_controller_or_skip() else { return };
    let _port = GO_METRICS_PORT.lock().await;
    on_the_real_server_within(Duration::from_secs(420), takeover(build)).await;
}

async fn takeover(build: GoBuild) {
    let started = Instant::now();
    let GoWorld { mut env, sim, kubeconfig, token } = GoWorld::prepare(30).await;
    for made in &WORLD {
        let fate = if made.boots { Fate::clean() } else { Fate::failing_forever() };
        sim.script_by_name(made.display, fast(fate));
        let mut spec = Env::spec();
        if made.public_ip {
            spec["publicIPAllocation"] = json!({ "enabled": true });
        }
        let labels = [
            (server_core::model::REGION_LABEL, REGION),
            (server_core::model::IDENTITY_LABEL, IDENTITY),
            (NAME_LABEL, made.display),
            ("unikorn-cloud.org/organization", "org-1"),
            ("unikorn-cloud.org/project", "proj-1"),
        ];
        env.create_server_with_labels(made.name, Fate::clean(), spec, &labels);
    }

    // The Go controller makes them: booted ones latched by its monitor, the
    // failing one retried to its cap of 3 and parked.
    let go_started = Instant::now();
    let mut go = GoController::start(&build, &kubeconfig, &token, &env.namespace, MONITOR_POLL, "make");
    wait_for(&mut go, Duration::from_secs(240), "the Go controller to make every server", || {
        WORLD.iter().all(|made| {
            let Some(server) = env.server_json(made.name) else { return false };
            if made.boots {
                server["status"]["provisionedAt"].is_string()
                    && (!made.public_ip || server["status"]["publicIP"].is_string())
            } else {
                server["status"]["providerCreateFailures"] == 3 && reason(&server, "Available") == "Errored"
            }
        })
    })
    .await;
    let go_took = go_started.elapsed();

    // `run --shadow` beside the running Go controller, on the region it has
    // converged: this operator would create and delete nothing, and writes
    // nothing while it says so.
    let before_shadow = Snapshot::take(&env, &sim);
    let round = server_kube::shadow(env.operator_client(), &env.read_only_clouds(), &env.config, Some(&env.namespace))
        .await
        .unwrap_or_else(|e| panic!("a shadow round: {e}"));
    let total = round.total();
    assert_eq!(round.entries.len(), WORLD.len(), "{round}");
    assert_eq!((total.creates, total.deletes, round.undecided()), (0, 0, 0), "{round}");
    let after_shadow = Snapshot::take(&env, &sim);
    assert_eq!(before_shadow.changes(&after_shadow), (0, 0), "{round}");
    assert_eq!(
        after_shadow.counters.server_metadata_updates, before_shadow.counters.server_metadata_updates,
        "the shadow tagged a server"
    );
    eprintln!("shadow beside the Go controller:\n{round}");
    let go_restarts = go.monitor_restarts();
    go.stop();
    let go_refusals = refusals(&sim.requests()[..]);
    let made_by_go = Snapshot::take(&env, &sim);
    assert_eq!(made_by_go.live.len(), WORLD.len(), "one live server per Server: {:#?}", made_by_go.live);
    for made in &WORLD {
        let nova = made_by_go.nova(made.name);
        assert_eq!(nova.name, made.display, "the Go controller names a server after the Server's name label");
        assert_eq!(nova.metadata.get("serverID").map(String::as_str), Some(made.name));
    }
    made_by_go.assert_nothing_leaked_or_doubled(WORLD.iter());
    let go_creates = made_by_go.counters.server_creates;

    // This operator takes over under its own CRD.
    if let Some(real) = env.real() {
        real.apply(&our_crd());
    }
    let takeover_started = Instant::now();
    env.start();
    wait_for_env(Duration::from_secs(90), "every Go-made server adopted", || {
        WORLD.iter().all(|made| adoptions(&env, made.name) >= 1)
    })
    .await;
    wait_for_env(Duration::from_secs(60), "every booted Server Provisioned", || {
        WORLD
            .iter()
            .filter(|made| made.boots)
            .all(|made| env.server_json(made.name).is_some_and(|server| reason(&server, "Available") == "Provisioned"))
    })
    .await;
    let takeover_took = takeover_started.elapsed();
    env.idle(30).await;
    let adopted = Snapshot::take(&env, &sim);
    let (adopt_creates, adopt_deletes) = made_by_go.changes(&adopted);
    assert_eq!((adopt_creates, adopt_deletes), (0, 0), "the takeover created or deleted: {:#?}", adopted.counters);
    assert_eq!(
        adopted.counters.server_metadata_updates - made_by_go.counters.server_metadata_updates,
        WORLD.len() as u64,
        "each Go-made server tagged once"
    );
    adopted.assert_nothing_leaked_or_doubled(WORLD.iter());
    assert_eq!(adopted.ids(), made_by_go.ids(), "the same servers live");
    for made in &WORLD {
        let server = env.server_json(made.name).unwrap_or_default();
        let uid = server["metadata"]["uid"].as_str().unwrap_or_default();
        assert_eq!(adoptions(&env, made.name), 1, "{}: one ProviderServerAdopted", made.name);
        let nova = adopted.nova(made.name);
        assert_eq!(nova.metadata.get("unikorn:server-uid").map(String::as_str), Some(uid), "{} is tagged", made.name);
        assert_eq!(
            server["status"]["provisionedAt"], made_by_go.statuses[made.name]["provisionedAt"],
            "{}: provisionedAt stays as latched",
            made.name
        );
        if !made.boots {
            assert_eq!(server["status"]["providerCreateFailures"], 3, "{}: still parked at the cap", made.name);
        }
    }

    // A Server made while this operator runs: the Go controller must find
    // its server on the way back too.
    let all: Vec<&Made> = WORLD.iter().chain([&LATE]).collect();
    let mut spec = Env::spec();
    spec["publicIPAllocation"] = json!({ "enabled": true });
    let labels = [
        (server_core::model::REGION_LABEL, REGION),
        (server_core::model::IDENTITY_LABEL, IDENTITY),
        (NAME_LABEL, LATE.display),
    ];
    env.create_server_with_labels(LATE.name, fast(Fate::clean()), spec, &labels);
    wait_for_env(Duration::from_secs(60), "the new Server Provisioned with its public IP", || {
        env.server_json(LATE.name).is_some_and(|server| {
            reason(&server, "Available") == "Provisioned" && server["status"]["publicIP"].is_string()
        })
    })
    .await;
    env.idle(10).await;
    let ours = Snapshot::take(&env, &sim);
    env.stop().await;
    assert_eq!(adopted.changes(&ours), (3, 0), "a server, its port and floating IP: {:#?}", ours.counters);
    ours.assert_nothing_leaked_or_doubled(all.iter().copied());
    assert_eq!(ours.nova(LATE.name).name, LATE.display, "named after the name label, as the Go controller names");
    let ours_requests = sim.requests().len();

    // The way back: the Go controller again, under its CRD.
    if let Some(real) = env.real() {
        real.apply(GO_SERVER_CRD);
    }
    let back_started = Instant::now();
    let mut go = GoController::start(&build, &kubeconfig, &token, &env.namespace, MONITOR_POLL, "back");
    let log = go.dir().join("unikorn-server-controller.log");
    wait_for(&mut go, Duration::from_secs(90), "the Go controller to reconcile every booted server again", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        all.iter()
            .filter(|made| made.boots)
            .all(|made| text.lines().any(|line| line.contains("server already exists") && line.contains(made.name)))
    })
    .await;
    tokio::time::sleep(MONITOR_POLL * 5).await;
    go.assert_running();
    let back_restarts = go.monitor_restarts();
    go.stop();
    let back_refusals = refusals(&sim.requests()[ours_requests..]);
    let back = Snapshot::take(&env, &sim);
    let back_took = back_started.elapsed();
    let (back_creates, back_deletes) = ours.changes(&back);
    assert_eq!((back_creates, back_deletes), (0, 0), "the Go controller recreated or deleted: {:#?}", back.counters);
    back.assert_nothing_leaked_or_doubled(all.iter().copied());
    assert_eq!(back.ids(), ours.ids(), "the same servers live");
    for made in all.iter().filter(|made| made.boots) {
        assert_eq!(back.statuses[made.name]["provisionedAt"], ours.statuses[made.name]["provisionedAt"]);
    }

    // The API server is the test binary's and the Go controller watches every
    // namespace: the next test's Go controller must find none of these.
    for made in &all {
        env.edit_server(made.name, |server| server["metadata"]["finalizers"] = json!([]));
        env.delete_server(made.name).await;
    }
    wait_for_env(Duration::from_secs(30), "the Servers gone", || {
        all.iter().all(|made| env.server_json(made.name).is_none())
    })
    .await;

    eprintln!(
        "takeover: the Go controller made {} Servers' servers in {go_took:.1?} ({go_creates} Nova creates; \
         the simulator refused it {go_refusals:?}; its monitor restarted {go_restarts} times); \
         this operator adopted {} in {takeover_took:.1?} with {adopt_creates} creates and {adopt_deletes} deletes, \
         then made 1; the Go controller back for {back_took:.1?}: {back_creates} creates, {back_deletes} deletes \
         (refused {back_refusals:?}, monitor restarted {back_restarts} times); {} ports and {} floating IPs at \
         the end; whole test {:.1?}",
        WORLD.len(),
        WORLD.iter().map(|made| adoptions(&env, made.name)).sum::<u64>(),
        back.ports.len(),
        back.floating_ips.len(),
        started.elapsed(),
    );
}

/// The Servers whose rebuild the Go controller begins and this operator ends.
const REBUILT: [&str; 2] = ["rb-a", "rb-b"];
const IMAGE_2: &str = "1f9e5d4c-69b6-4e66-a4c6-1c76d2d8d403";

/// A rebuild the Go controller began (its `status.rebuild` marker, the same
/// on both sides) is continued after the takeover: the accepted one is not
/// sent again, the marker settles and is cleared, nothing is recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_the_go_controller_began_is_continued_after_the_takeover() {
    let Some(build) = go_controller_or_skip() else { return };
    let _port = GO_METRICS_PORT.lock().await;
    on_the_real_server_within(Duration::from_secs(360), rebuild_takeover(build)).await;
}

async fn rebuild_takeover(build: GoBuild) {
    let GoWorld { mut env, sim, kubeconfig, token } = GoWorld::prepare(31).await;
    for name in REBUILT {
        // Long enough a rebuild that the Go controller is stopped in it.
        sim.script_by_name(name, fast(Fate::clean()).with_rebuild_time(Duration::from_secs(40)));
        let labels = [
            (server_core::model::REGION_LABEL, REGION),
            (server_core::model::IDENTITY_LABEL, IDENTITY),
            (NAME_LABEL, name),
        ];
        env.create_server_with_labels(name, Fate::clean(), Env::spec(), &labels);
    }
    let mut go = GoController::start(&build, &kubeconfig, &token, &env.namespace, MONITOR_POLL, "rebuild");
    wait_for(&mut go, Duration::from_secs(180), "the Go controller to boot both", || {
        REBUILT.iter().all(|name| env.server_json(name).is_some_and(|s| s["status"]["provisionedAt"].is_string()))
    })
    .await;
    let latched: Vec<Value> = REBUILT
        .iter()
        .map(|name| env.server_json(name).unwrap_or_default()["status"]["provisionedAt"].clone())
        .collect();
    for name in REBUILT {
        env.patch_spec(name, json!({ "image": { "id": IMAGE_2 } })).await;
    }
    wait_for(&mut go, Duration::from_secs(120), "the Go controller's rebuilds accepted", || {
        REBUILT.iter().all(|name| {
            env.server_json(name).is_some_and(|s| {
                s["status"]["rebuild"]["state"] == "Rebuilding" && s["status"]["rebuild"]["targetImageID"] == IMAGE_2
            })
        })
    })
    .await;
    go.stop();
    let before = sim.counters();
    assert_eq!(before.server_rebuilds, REBUILT.len() as u64, "the Go controller's rebuilds, one each");

    if let Some(real) = env.real() {
        real.apply(&our_crd());
    }
    env.start();
    wait_for_env(Duration::from_secs(120), "the rebuilds settled and their markers cleared", || {
        REBUILT.iter().all(|name| {
            env.server_json(name).is_some_and(|s| {
                s["status"]["rebuild"].is_null()
                    && reason(&s, "Available") == "Provisioned"
                    && s["status"]["phase"] == "Running"
            })
        })
    })
    .await;
    env.idle(10).await;
    let after = sim.counters();
    assert_eq!(after.server_rebuilds, before.server_rebuilds, "the accepted rebuilds were not sent again");
    assert_eq!((after.server_creates, after.server_deletes), (before.server_creates, before.server_deletes));
    for (name, latched) in REBUILT.iter().zip(&latched) {
        assert_eq!(&env.server_json(name).unwrap_or_default()["status"]["provisionedAt"], latched, "{name}'s latch");
        assert_eq!(adoptions(&env, name), 1, "{name}: adopted once");
    }
    // The API server is the test binary's and the Go controller watches every
    // namespace: gone Servers leave nothing for the next test's Go controller.
    for name in REBUILT {
        env.delete_server(name).await;
    }
    wait_for_env(Duration::from_secs(60), "the rebuilt Servers released and gone", || {
        let ports: Vec<String> = REBUILT.iter().map(|name| format!("server-{name}")).collect();
        REBUILT.iter().all(|name| env.server_json(name).is_none())
            && sim.ports().iter().all(|port| !ports.contains(&port.name))
    })
    .await;
    env.stop().await;
}

/// What the Go controller runs in: the OpenStack simulator on the real API
/// server, the Go Server CRD, the accounts (the monitor's in-cluster
/// identity), the Region and its service-account Secret, and that account
/// in Keystone.
struct GoWorld {
    env: Env,
    sim: OpenStackSim,
    kubeconfig: std::path::PathBuf,
    token: String,
}

impl GoWorld {
    async fn prepare(seed: u64) -> GoWorld {
        let sim_config =
            OpenStackSimConfig { decoy_region: false, block_storage_in_catalog: true, ..OpenStackSimConfig::default() };
        let env =
            Env::build_with(CloudKind::OpenStack, seed, test_config(), cloud::CloudConfig::reliable(seed), sim_config)
                .await;
        let sim = env.openstack().cloned().unwrap_or_else(|| panic!("the OpenStack path has a simulator"));
        let real = env.real().unwrap_or_else(|| panic!("runs on the real API server"));
        let kubeconfig = real.admin_kubeconfig();
        real.apply(GO_SERVER_CRD);
        let endpoint = env.openstack_auth_url().unwrap_or_else(|| panic!("the simulator's Keystone"));
        real.apply(&server_e2e::go_controller::manifests(&env.namespace, REGION, &endpoint, PROJECT));
        server_e2e::go_controller::prepare_cloud(&sim);
        let token = real.service_account_token(&env.namespace, "unikorn-region-monitor");
        GoWorld { env, sim, kubeconfig, token }
    }
}

/// The simulator's answers of 400 and above, by endpoint and status.
fn refusals(requests: &[server_e2e::openstack::RequestRecord]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for request in requests.iter().filter(|request| request.status >= 400) {
        *counts.entry(format!("{:?} {}", request.op, request.status)).or_default() += 1;
    }
    counts
}

fn our_crd() -> String {
    serde_json::to_string(&server_kube::crd::server_crd()).unwrap_or_else(|e| panic!("the Server CRD: {e}"))
}

fn reason(server: &Value, type_: &str) -> String {
    let conditions = server["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let condition = conditions.iter().find(|c| c["type"] == type_);
    condition.and_then(|c| c["reason"].as_str()).unwrap_or_default().to_owned()
}

/// `ProviderServerAdopted` Events about a Server, a series counted as its count.
fn adoptions(env: &Env, name: &str) -> u64 {
    env.objects("events")
        .iter()
        .filter(|event| event["regarding"]["name"] == name && event["reason"] == "ProviderServerAdopted")
        .map(|event| event["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

/// The cloud and the Servers at one moment.
struct Snapshot {
    counters: OpenStackCounters,
    /// The live Nova servers, by the Server name in their `serverID`.
    live: BTreeMap<String, server_e2e::openstack::ServerView>,
    ports: Vec<server_e2e::openstack::PortView>,
    floating_ips: Vec<server_e2e::openstack::FloatingIpView>,
    statuses: BTreeMap<String, Value>,
}

impl Snapshot {
    fn take(env: &Env, sim: &OpenStackSim) -> Snapshot {
        let live = sim
            .servers()
            .into_iter()
            .filter(|view| sim.cloud().truth(&view.server_uid).live > 0)
            .map(|view| (view.metadata.get("serverID").cloned().unwrap_or_default(), view))
            .collect();
        let statuses = WORLD
            .iter()
            .chain([&LATE])
            .map(|made| (made.name.to_owned(), env.server_json(made.name).unwrap_or_default()["status"].clone()))
            .collect();
        Snapshot { counters: sim.counters(), live, ports: sim.ports(), floating_ips: sim.floating_ips(), statuses }
    }

    /// The Nova ids of the live servers, by Server name.
    fn ids(&self) -> BTreeMap<&str, Option<&str>> {
        self.live.iter().map(|(name, view)| (name.as_str(), view.id.as_deref())).collect()
    }

    fn nova(&self, name: &str) -> &server_e2e::openstack::ServerView {
        self.live.get(name).unwrap_or_else(|| panic!("no live server has serverID={name}: {:#?}", self.live))
    }

    /// Creates and deletes in the cloud (servers, ports, floating IPs) from
    /// this snapshot to `later`.
    fn changes(&self, later: &Snapshot) -> (u64, u64) {
        let (a, b) = (&self.counters, &later.counters);
        let creates = (b.server_creates - a.server_creates)
            + (b.port_creates - a.port_creates)
            + (b.floating_ip_creates - a.floating_ip_creates);
        let deletes = (b.server_deletes - a.server_deletes)
            + (b.port_deletes - a.port_deletes)
            + (b.floating_ip_deletes - a.floating_ip_deletes);
        (creates, deletes)
    }

    /// One port per live server, each bound to it; one floating IP per
    /// Server that asks for a public IP, each on a live server's port.
    fn assert_nothing_leaked_or_doubled<'a>(&self, world: impl IntoIterator<Item = &'a Made> + Clone) {
        let mut names: Vec<&str> = self.ports.iter().map(|port| port.name.as_str()).collect();
        names.sort_unstable();
        let expected: Vec<String> = world.clone().into_iter().map(|made| format!("server-{}", made.name)).collect();
        assert_eq!(names, expected, "one port per Server: {:#?}", self.ports);
        for port in &self.ports {
            let bound = port.server_uid.as_deref().unwrap_or_default();
            assert!(self.live.values().any(|s| s.server_uid == bound), "port {} is bound to no live server", port.name);
        }
        let wanted = world.into_iter().filter(|made| made.public_ip).count();
        assert_eq!(self.floating_ips.len(), wanted, "one floating IP per public Server: {:#?}", self.floating_ips);
        for ip in &self.floating_ips {
            let port = ip.port_id.as_deref().unwrap_or_default();
            assert!(self.ports.iter().any(|p| p.id == port), "floating IP {} is on no port", ip.address);
        }
    }
}

/// Polls `check` every 250 ms for up to `within`, failing with the Go
/// controller's logs when it does not hold or a Go process exits.
async fn wait_for(go: &mut GoController, within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    loop {
        if check() {
            return;
        }
        go.assert_running();
        assert!(started.elapsed() < within, "timed out after {within:?} waiting for {what}\n{}", go.logs());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_for_env(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
