//! The bench's world, one per size: SimKube serving the operator's CRDs on a
//! loopback port (or the real kube-apiserver and etcd), the OpenStack simulator over SimCloud with the demo's fate
//! mix, the demo tenant with 10 Networks and 10 SecurityGroups (each shared
//! by a tenth of the Servers) and an SSH CA, and N Servers carrying 32 KB of
//! user data each. Everything is seeded through the stores, so every request
//! the API server and the cloud count is the operator's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::{Value, json};
use server_core::model::{ConditionReason, ConditionType, Phase};
use server_core::model::{IDENTITY_LABEL, NAME_LABEL, ORGANIZATION_LABEL, REGION_LABEL};
use server_sim_testbed::{
    ApiServerBed, CloudBed, CloudPath, KubeBed, OpenStackSimConfig, ServerMirror, Tenant, go_controller,
};
use server_simcloud::{CloudConfig, Fate, SimCloud, UidTruth};
use server_simkube::{CounterSnapshot, SimKube};

use crate::commands::demo::scenario::{self, Planned, Role};
use crate::commands::demo::world::{IDENTITY, NAMESPACE, REGION, SSH_CA, SSH_CA_KEY, World};
use crate::commands::demo::{self, Tracked};

/// Shared consumed resources of each kind.
pub(crate) const SHARED_RESOURCES: usize = 10;
/// Default size of each Server's user data, base64 as the API stores it.
pub(crate) const USER_DATA_BYTES: usize = 32 * 1024;
/// The largest user data the bench makes: within Nova's 65,535 bytes of
/// base64 and the CRD's bound.
pub(crate) const MAX_USER_DATA_BYTES: usize = 48 * 1024;
/// The smallest: room for the cloud-config it carries.
pub(crate) const MIN_USER_DATA_BYTES: usize = 128;

/// Network `i` (0-based), named by UUID as the region service names them.
pub(crate) fn network(i: usize) -> String {
    format!("2f1c0b6e-7d4a-4c1e-9a53-0d6f1b2c3b{:02}", i % SHARED_RESOURCES)
}

/// SecurityGroup `i` (0-based).
pub(crate) fn security_group(i: usize) -> String {
    format!("5b7e9d21-3c4f-4a8b-8e6d-1f2a3b4c5e{:02}", i % SHARED_RESOURCES)
}

/// How the world's Servers are spread over Identities: each Identity is an
/// OpenStack project with its own SSH CA, and owns the Networks and
/// SecurityGroups `j` with `j mod identities` its index, so Server `i`
/// belongs to Identity `(i mod 10) mod identities`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identities(usize);

impl Identities {
    /// At most one Identity per shared Network, so every Network has one owner.
    pub(crate) const MAX: usize = SHARED_RESOURCES;

    pub(crate) fn new(count: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (1..=Self::MAX).contains(&count),
            "--identities must be 1 to {} (each Identity owns at least one of the {} shared Networks), not {count}",
            Self::MAX,
            SHARED_RESOURCES
        );
        Ok(Identities(count))
    }

    pub(crate) fn count(self) -> usize {
        self.0
    }

    /// The Identity of Server `i`, and of Network and SecurityGroup `i`.
    pub(crate) fn of(self, i: usize) -> usize {
        i % SHARED_RESOURCES % self.0
    }

    /// Identity `k`'s tenant: the demo's for the first, a project and user
    /// of its own for each other.
    pub(crate) fn tenant(k: usize) -> Tenant {
        match k {
            0 => World::tenant(),
            k => Tenant::new(NAMESPACE, REGION, &format!("{IDENTITY}{k}")),
        }
    }

    /// Identity `k`'s SSH certificate authority.
    pub(crate) fn ssh_ca(k: usize) -> String {
        match k {
            0 => SSH_CA.to_owned(),
            k => format!("{SSH_CA}-{k}"),
        }
    }

    fn tenants(self) -> impl Iterator<Item = (usize, Tenant)> {
        (0..self.0).map(|k| (k, Self::tenant(k)))
    }
}

/// A cloud-config of exactly `bytes` (a multiple of 4) once base64-encoded:
/// a file to write, padded with a comment so the operator carries real bulk.
pub(crate) fn user_data(bytes: usize) -> String {
    let raw_len = bytes / 4 * 3;
    let mut text = String::from("#cloud-config\nwrite_files:\n- path: /etc/bench\n  content: bench\n# ");
    while text.len() < raw_len - 1 {
        text.push('x');
    }
    text.push('\n');
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The API server the operator under measurement talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ApiServer {
    /// SimKube in this process, seeded through its store.
    Simkube,
    /// kube-apiserver and etcd built by `.ci/build-control-plane`, seeded
    /// through the API as an admin; the operator runs as the ServiceAccount
    /// of deploy/base under its RBAC, and the audit log counts its requests.
    Real,
}

/// The controller under measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Controller {
    /// This operator, `server-controller run`.
    Ours,
    /// The Go controller it replaces (`unikorn-server-controller` and
    /// `unikorn-region-monitor`, built by `.ci/build-go-controller`), under
    /// its own Server CRD; on the real API server only.
    Go,
}

/// Where the Servers live and how they are read and counted.
enum Kube {
    Sim(KubeBed),
    // The mirror stops watching before the API server stops.
    Real { mirror: ServerMirror, bed: Box<ApiServerBed>, operator: OperatorIdentity },
}

/// How the controller authenticates to the real API server.
struct OperatorIdentity {
    kubeconfig: PathBuf,
    /// Its user names in the audit log (the Go controller's two processes
    /// run as two ServiceAccounts).
    users: Vec<String>,
    /// The Go monitor's ServiceAccount token (it knows only the in-cluster
    /// configuration); none for this operator.
    monitor_token: Option<String>,
}

/// The operator's RBAC as deploy/base ships it: the bench's operator runs under it.
const OPERATOR_RBAC: [&str; 2] = [
    include_str!("../../../../deploy/base/rbac.yaml"),
    include_str!("../../../../deploy/base/leader-election-rbac.yaml"),
];
/// The ServiceAccount those manifests grant, `namespace/name`.
const OPERATOR_ACCOUNT: (&str, &str) = ("server-controller", "server-controller");
/// Creates in flight while the bench seeds the real API server.
const SEEDING_CONCURRENCY: usize = 16;

pub(crate) struct BenchWorld {
    kube: Kube,
    pub(crate) cloud: CloudBed,
    pub(crate) tracked: Vec<Tracked>,
    pub(crate) controller: Controller,
    /// Each Server's `provisionedAt` as first seen, and whether it changed since.
    latches: Vec<Latch>,
}

/// One Server's `provisionedAt` as first seen: it must never change after.
#[derive(Clone, Debug, Default)]
pub(crate) struct Latch {
    first: Option<String>,
    changed: bool,
}

impl Latch {
    /// Notes the value seen now; whether it differs from the first one seen
    /// (cleared or rewritten).
    pub(crate) fn observe(&mut self, now: Option<&str>) -> bool {
        match (&self.first, now) {
            (None, Some(now)) => self.first = Some(now.to_owned()),
            (Some(first), now) if now != Some(first.as_str()) => self.changed = true,
            _ => {}
        }
        self.changed
    }
}

/// What a world holds.
pub(crate) struct Shape {
    pub(crate) servers: usize,
    pub(crate) seed: u64,
    /// Share of Servers with a faulty fate in the demo's mix.
    pub(crate) create_failure_rate: f64,
    /// Share of Servers asking for a public IP.
    pub(crate) public_ip_share: f64,
    pub(crate) user_data_bytes: usize,
    pub(crate) identities: Identities,
}

impl BenchWorld {
    /// The API server and the OpenStack simulator on loopback ports, the
    /// tenants' shared resources, and the shape's Servers.
    pub(crate) async fn start(api_server: ApiServer, controller: Controller, shape: &Shape) -> anyhow::Result<Self> {
        let Shape { servers, seed, create_failure_rate, public_ip_share, user_data_bytes, identities } = *shape;
        anyhow::ensure!(
            controller == Controller::Ours || identities.count() == 1,
            "the Go controller's world has one Identity: drop --identities"
        );
        let tenant = World::tenant();
        let mut config = CloudConfig::with_fault_rate(seed, create_failure_rate);
        config.mix = scenario::mix(create_failure_rate);
        let mix = config.mix;
        let sim_config = match controller {
            Controller::Ours => OpenStackSimConfig::default(),
            // gophercloud takes each type's first endpoint (no region named),
            // and the Go controller builds a Cinder client at start.
            Controller::Go => {
                OpenStackSimConfig { decoy_region: false, block_storage_in_catalog: true, ..Default::default() }
            }
        };
        let cloud =
            CloudBed::start_with(CloudPath::OpenStack, SimCloud::new(config), &tenant, None, sim_config).await?;
        let openstack = cloud.openstack().context("the bench's cloud is not on the OpenStack path")?;
        for (_, other) in identities.tenants().skip(1) {
            openstack.add_user(&other.openstack_user, &other.openstack_password);
        }
        for i in 0..SHARED_RESOURCES {
            let owner = Identities::tenant(identities.of(i));
            cloud.seed_neutron(&owner, "networks", &network(i));
            cloud.seed_neutron(&owner, "securitygroups", &security_group(i));
        }
        let user_data = user_data(user_data_bytes);
        let servers = Servers { count: servers, user_data: &user_data, public_ip_share, identities };
        let (kube, uids) = match api_server {
            ApiServer::Simkube => Self::seed_simkube(&servers, seed).await?,
            ApiServer::Real => Self::seed_real(&tenant, &cloud, controller, &servers).await?,
        };
        let tracked = uids
            .into_iter()
            .enumerate()
            .map(|(i, uid)| {
                let name = server_name(i);
                let fate = match api_server {
                    ApiServer::Simkube => cloud.cloud.with_model(|model| model.fate(&uid)),
                    // kube-apiserver's uids differ from run to run: the fate
                    // is drawn by name, so both controllers meet the same.
                    ApiServer::Real => {
                        let fate = mix.draw(seed, &name);
                        cloud.cloud.script(&uid, fate.clone());
                        fate
                    }
                };
                if let (Controller::Go, Some(openstack)) = (controller, cloud.openstack()) {
                    // The Go controller's creates carry `serverID=<name>`, no uid.
                    openstack.attribute_server_id(&name, &uid);
                }
                let planned = Planned { name, role: Role::Drawn, unmodelled_fields: false };
                Tracked { planned, uid, fate, rearmed: false, public: is_public(i, public_ip_share) }
            })
            .collect::<Vec<_>>();
        let latches = vec![Latch::default(); tracked.len()];
        Ok(BenchWorld { kube, cloud, tracked, controller, latches })
    }

    async fn seed_simkube(servers: &Servers<'_>, seed: u64) -> anyhow::Result<(Kube, Vec<String>)> {
        let sim = SimKube::builder().seed(seed).strict_namespaces().build();
        sim.store().ensure_namespace(NAMESPACE);
        let kube = KubeBed::serve(sim, ([127, 0, 0, 1], 0).into(), NAMESPACE).await?;
        for (k, tenant) in servers.identities.tenants() {
            kube.seed_tenant(&tenant, true)?;
            kube.seed(&tenant, "sshcertificateauthorities", &Identities::ssh_ca(k), json!({"publicKey": SSH_CA_KEY}))?;
        }
        for i in 0..SHARED_RESOURCES {
            let owner = Identities::tenant(servers.identities.of(i));
            kube.seed(&owner, "networks", &network(i), json!({"prefix": format!("10.{i}.0.0/16")}))?;
            kube.seed(&owner, "securitygroups", &security_group(i), json!({}))?;
        }
        let mut uids = Vec::with_capacity(servers.count);
        for i in 0..servers.count {
            let name = server_name(i);
            let created = kube
                .store()
                .create("servers", servers.object(&name, i))
                .map_err(|e| anyhow::anyhow!("cannot create {name}: {e:?}"))?;
            uids.push(created["metadata"]["uid"].as_str().context("SimKube gave no uid")?.to_owned());
        }
        kube.sim.reset_counters();
        Ok((Kube::Sim(kube), uids))
    }

    async fn seed_real(
        tenant: &Tenant,
        cloud: &CloudBed,
        controller: Controller,
        servers: &Servers<'_>,
    ) -> anyhow::Result<(Kube, Vec<String>)> {
        let bed = ApiServerBed::start(NAMESPACE).await?;
        eprintln!("bench: {} at {}", bed.plane.version, bed.plane.url);
        let apply = |manifest: &str| {
            bed.plane.kubectl_checked(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(manifest))
        };
        let operator = match controller {
            Controller::Ours => {
                let (kubeconfig, user) = bed.service_account(&OPERATOR_RBAC, OPERATOR_ACCOUNT.0, OPERATOR_ACCOUNT.1)?;
                OperatorIdentity { kubeconfig, users: vec![user], monitor_token: None }
            }
            Controller::Go => {
                apply(go_controller::GO_SERVER_CRD)?;
                bed.plane.kubectl_checked(
                    &["wait", "--for=condition=Established", "--timeout=60s", "crd/servers.region.unikorn-cloud.org"],
                    None,
                )?;
                let openstack = cloud.openstack().context("the bench's cloud is not on the OpenStack path")?;
                let auth_url = cloud.openstack_config().context("no OpenStack configuration")?.auth_url.clone();
                go_controller::prepare_cloud(openstack);
                apply(&go_controller::manifests(NAMESPACE, REGION, &auth_url, &tenant.project))?;
                let kubeconfig = bed.plane.service_account_kubeconfig(NAMESPACE, go_controller::CONTROLLER_ACCOUNT);
                let token = bed.plane.kubectl_checked(
                    &["create", "token", go_controller::MONITOR_ACCOUNT, "-n", NAMESPACE, "--duration=24h"],
                    None,
                )?;
                OperatorIdentity {
                    kubeconfig,
                    users: go_controller::audit_users(NAMESPACE).to_vec(),
                    monitor_token: Some(token.trim().to_owned()),
                }
            }
        };
        for (k, tenant) in servers.identities.tenants() {
            bed.seed_tenant(&tenant, true).await?;
            let ca = Identities::ssh_ca(k);
            bed.seed(&tenant, "sshcertificateauthorities", &ca, json!({"publicKey": SSH_CA_KEY})).await?;
        }
        for i in 0..SHARED_RESOURCES {
            let owner = Identities::tenant(servers.identities.of(i));
            bed.seed(&owner, "networks", &network(i), json!({"prefix": format!("10.{i}.0.0/16")})).await?;
            bed.seed(&owner, "securitygroups", &security_group(i), json!({})).await?;
        }
        let bed = Arc::new(bed);
        let mut uids = vec![String::new(); servers.count];
        let mut creates = tokio::task::JoinSet::new();
        for i in 0..servers.count {
            if creates.len() >= SEEDING_CONCURRENCY {
                Self::record_uid(&mut creates, &mut uids).await?;
            }
            let (bed, object) = (Arc::clone(&bed), servers.object(&server_name(i), i));
            creates.spawn(async move { (i, bed.create("servers", object).await) });
        }
        while !creates.is_empty() {
            Self::record_uid(&mut creates, &mut uids).await?;
        }
        let bed = Arc::into_inner(bed).context("a seeding task outlived the seeding")?;
        let mut mirror = ServerMirror::start(&bed, NAMESPACE);
        mirror.synced().await;
        Ok((Kube::Real { mirror, bed: Box::new(bed), operator }, uids))
    }

    async fn record_uid(
        creates: &mut tokio::task::JoinSet<(usize, Result<kube::api::DynamicObject, server_sim_testbed::Error>)>,
        uids: &mut [String],
    ) -> anyhow::Result<()> {
        if let Some(joined) = creates.join_next().await {
            let (i, created) = joined.context("a seeding task failed")?;
            let created = created.with_context(|| format!("cannot create {}", server_name(i)))?;
            uids[i] = created.metadata.uid.context("kube-apiserver gave no uid")?;
        }
        Ok(())
    }

    /// Which API server this world runs, with its version.
    pub(crate) fn api_server(&self) -> String {
        match &self.kube {
            Kube::Sim(_) => "SimKube".into(),
            Kube::Real { bed, .. } => bed.plane.version.clone(),
        }
    }

    /// The requests the operator made, as the API server counted them.
    pub(crate) fn api_counters(&self) -> anyhow::Result<CounterSnapshot> {
        match &self.kube {
            Kube::Sim(kube) => Ok(kube.sim.counters()),
            Kube::Real { bed, operator, .. } => {
                let users: Vec<&str> = operator.users.iter().map(String::as_str).collect();
                Ok(bed.plane.audited_counters_of(&users, None)?)
            }
        }
    }

    /// kube-apiserver's and etcd's PIDs, when they run as processes.
    pub(crate) fn api_server_processes(&self) -> Vec<u32> {
        match &self.kube {
            Kube::Sim(_) => Vec::new(),
            Kube::Real { bed, .. } => {
                let (apiserver, etcd) = bed.plane.process_ids();
                apiserver.into_iter().chain(etcd).collect()
            }
        }
    }

    /// The Go monitor's ServiceAccount token, when the world is seeded for the Go controller.
    pub(crate) fn monitor_token(&self) -> Option<&str> {
        match &self.kube {
            Kube::Real { operator, .. } => operator.monitor_token.as_deref(),
            Kube::Sim(_) => None,
        }
    }

    /// Writes the kubeconfig and the region's OpenStack configuration a
    /// separate operator process connects with; returns their paths.
    pub(crate) fn write_configs(&self, dir: &Path, request_timeout: Duration) -> anyhow::Result<(PathBuf, PathBuf)> {
        let kubeconfig = match &self.kube {
            Kube::Sim(kube) => {
                let kubeconfig = dir.join("kubeconfig");
                let text = format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {url}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    user: bench\n    namespace: {NAMESPACE}\ncurrent-context: bench\nusers:\n- name: bench\n  user: {{}}\n",
                    url = kube.served().url()
                );
                std::fs::write(&kubeconfig, text).with_context(|| format!("cannot write {}", kubeconfig.display()))?;
                kubeconfig
            }
            Kube::Real { operator, .. } => operator.kubeconfig.clone(),
        };
        let openstack = self.cloud.openstack_config().context("the bench's cloud is not on the OpenStack path")?;
        let region = dir.join("openstack-region.json");
        let text = json!({
            "authURL": openstack.auth_url,
            "region": openstack.region,
            "requestTimeout": request_timeout.as_secs_f64(),
        })
        .to_string();
        std::fs::write(&region, text).with_context(|| format!("cannot write {}", region.display()))?;
        Ok((kubeconfig, region))
    }

    /// A Server as the API server has it (user data left out on the real one).
    fn stored(&self, name: &str) -> Option<Arc<Value>> {
        match &self.kube {
            Kube::Sim(kube) => kube.store().get_shared("servers", Some(NAMESPACE), name),
            Kube::Real { mirror, .. } => mirror.get(name),
        }
    }

    /// Edits a Server's spec as its user would.
    async fn edit(&self, name: &str, patch: Value) -> anyhow::Result<()> {
        match &self.kube {
            Kube::Sim(kube) => kube
                .store()
                .patch(
                    "servers",
                    Some(NAMESPACE),
                    name,
                    &server_simkube::Patch::Merge(server_simkube::PatchKind::Merge, patch),
                )
                .map(drop)
                .map_err(|e| anyhow::anyhow!("cannot edit {name}: {e:?}")),
            Kube::Real { bed, .. } => Ok(bed.merge_patch("servers", NAMESPACE, name, patch).await?),
        }
    }

    /// Deletes a Server as its user would; one already gone is fine.
    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        match &self.kube {
            Kube::Sim(kube) => {
                // Already gone is fine.
                let _ = kube.store().delete("servers", Some(NAMESPACE), name);
                Ok(())
            }
            Kube::Real { bed, .. } => {
                match bed.api("servers", NAMESPACE).delete(name, &kube::api::DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(error) => Err(anyhow::anyhow!("cannot delete {name}: {error}")),
                }
            }
        }
    }

    /// Looks at every Server not yet known settled, acts as its user would
    /// (edits a Server the provider refused), and marks those that reached
    /// the end their fate leads to. Returns how many are settled.
    pub(crate) async fn observe(&mut self, settled: &mut [bool], max_attempts: i32) -> anyhow::Result<usize> {
        for (i, done) in settled.iter_mut().enumerate().take(self.tracked.len()) {
            if *done {
                continue;
            }
            let Some(object) = self.stored(&self.tracked[i].planned.name) else { continue };
            let Some(server) = core_view(&object) else { continue };
            let truth = self.cloud.cloud.truth(&self.tracked[i].uid);
            *done = match self.controller {
                Controller::Ours => {
                    if demo::needs_rearm(&self.tracked[i], &server, max_attempts) {
                        self.edit(&self.tracked[i].planned.name, demo::rearm_patch()).await?;
                        self.tracked[i].rearmed = true;
                    }
                    let t = &self.tracked[i];
                    let history = demo::observer::History { latest: Some(server), ..Default::default() };
                    demo::is_settled(t, &history, max_attempts, &truth)
                }
                // The Go controller parks no refusal: nothing for the user to edit.
                Controller::Go => go_settled(&self.tracked[i].fate, &server, &truth, max_attempts),
            };
        }
        Ok(settled.iter().filter(|done| **done).count())
    }

    /// Notes every Server's `provisionedAt`; how many changed since first seen.
    pub(crate) fn watch_latches(&mut self) -> usize {
        for i in 0..self.tracked.len() {
            let Some(object) = self.stored(&self.tracked[i].planned.name) else { continue };
            if let Some(latch) = self.latches.get_mut(i) {
                latch.observe(object["status"]["provisionedAt"].as_str());
            }
        }
        self.latches.iter().filter(|latch| latch.changed).count()
    }

    /// What must never happen, from the cloud's truth and the latches.
    pub(crate) fn invariants(&self) -> Invariants {
        let openstack = self.cloud.openstack().map(|sim| sim.counters()).unwrap_or_default();
        let truths: Vec<_> = self.tracked.iter().map(|t| self.cloud.cloud.truth(&t.uid)).collect();
        for (tracked, truth) in self.tracked.iter().zip(&truths).filter(|(_, truth)| truth.creates_after_boot_read > 0)
        {
            eprintln!(
                "bench: {} (fate {}) was created again after its boot was read: {truth:?}",
                tracked.planned.name,
                tracked.fate.kind().as_str()
            );
        }
        Invariants {
            creates_while_one_lived: openstack.duplicate_server_creates,
            booted_servers_recreated: truths.iter().filter(|truth| truth.creates_after_boot_read > 0).count(),
            recreated_after_unread_boots: truths
                .iter()
                .filter(|truth| truth.creates_after_launch > 0 && truth.creates_after_boot_read == 0)
                .count(),
            booted_servers_deleted_to_retry: truths.iter().filter(|truth| truth.launched_deleted > 0).count(),
            provisioned_at_changed: self.latches.iter().filter(|latch| latch.changed).count(),
        }
    }

    /// The first `limit` Servers not settled, each with its fate and where it stands.
    pub(crate) fn unsettled(&self, settled: &[bool], limit: usize, max_attempts: i32) -> Vec<Unsettled> {
        self.tracked
            .iter()
            .zip(settled)
            .filter(|(_, done)| !**done)
            .take(limit)
            .map(|(t, _)| {
                let object = self.stored(&t.planned.name);
                let history = demo::observer::History {
                    latest: object.as_ref().and_then(core_view),
                    gone: object.is_none(),
                    ..Default::default()
                };
                let truth = self.cloud.cloud.truth(&t.uid);
                let outcome = match (self.controller, &history.latest) {
                    (Controller::Go, Some(server)) => go_outcome(server, &truth),
                    _ => demo::outcome(&history, max_attempts),
                };
                Unsettled { name: t.planned.name.clone(), fate: demo::describe_fate(t), outcome }
            })
            .collect()
    }
}

fn server_name(i: usize) -> String {
    format!("server-{i:05}")
}

/// Whether Server `i` asks for a public IP: `share` of them, spread evenly.
pub(crate) fn is_public(i: usize, share: f64) -> bool {
    let at = |n: usize| (n as f64 * share).floor();
    at(i + 1) > at(i)
}

/// The public Servers once settled.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(crate) struct PublicIps {
    pub(crate) servers: usize,
    pub(crate) running_with_ip: usize,
    pub(crate) running_without_ip: usize,
}

/// What deleting every Server left.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(crate) struct Deletion {
    pub(crate) seconds: f64,
    /// Servers still in the API server when the wait ended.
    pub(crate) left: usize,
    pub(crate) leaked_servers: usize,
    pub(crate) leaked_ports: usize,
    pub(crate) leaked_floating_ips: usize,
    /// The operator's API requests while deleting, per Server.
    pub(crate) api_requests_per_server: f64,
    /// Of them, lists of the consumed kinds (a release read live, or a
    /// cache's relist), per Server.
    pub(crate) consumed_lists_per_server: f64,
    /// The operator's CPU while deleting, per Server.
    pub(crate) operator_cpu_ms_per_server: f64,
}

impl BenchWorld {
    /// Makes the cloud answer the first `rate` of the public Servers'
    /// floating-IP creates with 503; returns how many.
    pub(crate) fn inject_floating_ip_faults(&self, rate: f64) -> u32 {
        let public = self.tracked.iter().filter(|t| t.public).count();
        let faults = u32::try_from((public as f64 * rate).round() as u64).unwrap_or(u32::MAX);
        if let Some(openstack) = self.cloud.openstack() {
            openstack.inject(
                server_sim_testbed::OpenStackTarget::Op(server_sim_testbed::OpenStackOp::FloatingIpCreate),
                server_sim_testbed::OpenStackFault::Status(503),
                faults,
            );
        }
        faults
    }

    fn public_ips(&self, max_attempts: i32) -> PublicIps {
        let mut counts = PublicIps::default();
        for t in self.tracked.iter().filter(|t| t.public) {
            counts.servers += 1;
            let Some(server) = self.stored(&t.planned.name).as_ref().and_then(core_view) else {
                continue;
            };
            let running = server_core::lifecycle(&server, &server_core::Options::with_max_attempts(max_attempts))
                == server_core::Lifecycle::Running;
            match (running, server.status.public_ip.is_some()) {
                (true, true) => counts.running_with_ip += 1,
                (true, false) => counts.running_without_ip += 1,
                _ => {}
            }
        }
        counts
    }

    /// Waits (until `timeout` from `started`) for every running public
    /// Server to show its public IP; what it found last.
    pub(crate) async fn wait_public_ips(
        &self,
        max_attempts: i32,
        started: std::time::Instant,
        timeout: Duration,
        operator: &mut super::operator::ControllerProcess,
    ) -> anyhow::Result<PublicIps> {
        loop {
            operator.check_running()?;
            let counts = self.public_ips(max_attempts);
            if counts.running_without_ip == 0 || started.elapsed() >= timeout {
                return Ok(counts);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Deletes every Server as a user would, waits (at most `timeout`)
    /// until the API server has none, and counts what the cloud still holds:
    /// live provider servers, ports and floating IPs (none of which any
    /// Server owns any more).
    pub(crate) async fn delete_all_and_count_leaks(
        &self,
        timeout: Duration,
        operator: &mut super::operator::ControllerProcess,
    ) -> anyhow::Result<Deletion> {
        let started = std::time::Instant::now();
        for t in &self.tracked {
            self.delete(&t.planned.name).await?;
        }
        let mut last_progress = std::time::Instant::now();
        let left = loop {
            operator.check_running()?;
            let left = self.tracked.iter().filter(|t| self.stored(&t.planned.name).is_some()).count();
            if left == 0 || started.elapsed() >= timeout {
                break left;
            }
            if last_progress.elapsed() >= Duration::from_secs(15) {
                let servers = self.tracked.len();
                eprintln!("bench: {servers} Servers: {left} left after {:.0} s", started.elapsed().as_secs_f64());
                last_progress = std::time::Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let seconds = started.elapsed().as_secs_f64();
        let openstack = self.cloud.openstack().context("the bench's cloud is not on the OpenStack path")?;
        Ok(Deletion {
            seconds,
            left,
            leaked_servers: self.cloud.cloud.live_servers(),
            leaked_ports: openstack.ports().len(),
            leaked_floating_ips: openstack.floating_ips().len(),
            ..Deletion::default()
        })
    }
}

/// The invariants, counted over the whole run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(crate) struct Invariants {
    /// Nova creates for a Server while a server of it existed (a real Nova
    /// makes a second server; the simulator counts it and answers with the
    /// one it has).
    pub(crate) creates_while_one_lived: u64,
    /// Servers with a create accepted after a read (get, list, a create's
    /// answer) had shown one of their servers booted.
    pub(crate) booted_servers_recreated: usize,
    /// Servers created again after a boot no read showed (the server
    /// vanished between two reads): no controller can tell that from a
    /// server that never booted, so it is reported, not a violation.
    pub(crate) recreated_after_unread_boots: usize,
    /// Servers one of whose booted servers the controller deleted (the
    /// user's deletion of the Server aside: counted before it).
    pub(crate) booted_servers_deleted_to_retry: usize,
    /// Servers whose `provisionedAt` changed or was cleared once written.
    pub(crate) provisioned_at_changed: usize,
}

impl Invariants {
    pub(crate) fn violations(&self) -> Vec<String> {
        [
            (self.creates_while_one_lived as usize, "creates while a server of the Server existed"),
            (self.booted_servers_recreated, "booted servers recreated"),
            (self.booted_servers_deleted_to_retry, "booted servers deleted"),
            (self.provisioned_at_changed, "provisionedAt changed"),
        ]
        .into_iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!("{count} {what}"))
        .collect()
    }
}

/// Whether the Go controller brought a Server to an end it leaves only by a
/// person's action: provisioned on a booted server the cloud still has
/// (`provisionedAt` latched by its monitor), or parked at its create cap
/// (`providerCreateFailures` at the cap, Available `Errored`; it requeues
/// it no more). A server that vanished after boot ends where the Go
/// controller leaves it: recreated (and counted as a booted server
/// recreated) or not, once its monitor saw the server gone.
pub(crate) fn go_settled(fate: &Fate, server: &server_core::Server, truth: &UidTruth, max_attempts: i32) -> bool {
    let reason = server.status.condition(ConditionType::Available).map(|c| c.reason);
    let cap = u32::try_from(max_attempts).unwrap_or(1);
    let parked_at_cap =
        reason == Some(ConditionReason::Errored) && server.status.provider_create_failures >= max_attempts;
    if fate.failed_boots >= cap {
        return parked_at_cap;
    }
    let provisioned = reason == Some(ConditionReason::Provisioned) && server.status.provisioned_at.is_some();
    if fate.vanish_after_launch.is_some() && truth.ever_launched && truth.live == 0 {
        // Gone from the cloud: settled once the Go side shows it, as a
        // phase other than Running, or once it made another.
        return server.status.phase != Some(Phase::Running) || truth.creates_after_launch > 0;
    }
    provisioned && truth.live_launched
}

/// Where a Server the Go controller manages stands, in words.
pub(crate) fn go_outcome(server: &server_core::Server, truth: &UidTruth) -> String {
    let reason = server.status.condition(ConditionType::Available).map_or("none".to_owned(), |c| c.reason.to_string());
    let phase = server.status.phase.map_or_else(|| "none".to_owned(), |phase| phase.to_string());
    format!(
        "Available {reason}, phase {phase}, providerCreateFailures {}, provisionedAt {}; the cloud: {} live ({}), {} accepted creates, {} refused",
        server.status.provider_create_failures,
        if server.status.provisioned_at.is_some() { "set" } else { "unset" },
        truth.live,
        if truth.live_launched { "booted" } else { "not booted" },
        truth.creates_accepted,
        truth.creates_refused,
    )
}

/// A Server that did not reach the end its fate leads to.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Unsettled {
    pub(crate) name: String,
    pub(crate) fate: String,
    pub(crate) outcome: String,
}

/// The core view of a stored Server, read without copying its user data.
fn core_view(object: &Arc<Value>) -> Option<server_core::Server> {
    let spec: serde_json::Map<String, Value> = object
        .get("spec")?
        .as_object()?
        .iter()
        .filter(|(key, _)| *key != "userData")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let view = json!({
        "apiVersion": object.get("apiVersion"),
        "kind": "Server",
        "metadata": object.get("metadata"),
        "spec": spec,
        "status": object.get("status").cloned().unwrap_or(Value::Null),
    });
    let server = serde_json::from_value::<server_kube::crd::Server>(view).ok()?;
    Some(server_kube::convert::core_server(&server))
}

/// The world's Servers, as users would create them.
struct Servers<'a> {
    count: usize,
    user_data: &'a str,
    public_ip_share: f64,
    identities: Identities,
}

impl Servers<'_> {
    /// Server `i`: network and security group `i mod 10`, its Identity's
    /// SSH CA.
    fn object(&self, name: &str, i: usize) -> Value {
        let k = self.identities.of(i);
        let identity = Identities::tenant(k).identity;
        server(name, i, self.user_data, is_public(i, self.public_ip_share), &identity, &Identities::ssh_ca(k))
    }
}

/// Server `i` of `identity`: network and security group `i mod 10`.
fn server(name: &str, i: usize, user_data: &str, public: bool, identity: &str, ssh_ca: &str) -> Value {
    let mut server = json!({
        "apiVersion": "region.unikorn-cloud.org/v1alpha1",
        "kind": "Server",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                REGION_LABEL: REGION, IDENTITY_LABEL: identity, NAME_LABEL: name, ORGANIZATION_LABEL: "acme",
            },
        },
        "spec": {
            "flavorID": "6a2b1c3d-0000-4000-8000-000000000001",
            "image": {"id": "0f1e2d3c-0000-4000-8000-000000000002"},
            "networks": [{"id": network(i)}],
            "securityGroups": [{"id": security_group(i)}],
            "sshCertificateAuthorityID": ssh_ca,
            "userData": user_data,
        },
    });
    if public {
        server["spec"]["publicIPAllocation"] = json!({ "enabled": true });
    }
    server
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_is_base64_cloud_config_of_the_asked_size() {
        for bytes in [MIN_USER_DATA_BYTES, 4 * 1024, USER_DATA_BYTES, MAX_USER_DATA_BYTES] {
            let encoded = user_data(bytes);
            assert_eq!(encoded.len(), bytes);
            let decoded = base64::engine::general_purpose::STANDARD.decode(&encoded).expect("base64");
            assert!(decoded.starts_with(b"#cloud-config\n"));
        }
    }

    #[test]
    fn servers_share_ten_networks_and_ten_security_groups() {
        let networks: std::collections::BTreeSet<String> = (0..1000).map(network).collect();
        let groups: std::collections::BTreeSet<String> = (0..1000).map(security_group).collect();
        assert_eq!((networks.len(), groups.len()), (SHARED_RESOURCES, SHARED_RESOURCES));
        let s = server("server-00007", 7, "dXNlcg==", false, IDENTITY, SSH_CA);
        assert_eq!(s["spec"]["networks"][0]["id"], network(7));
        assert_eq!(s["spec"]["securityGroups"][0]["id"], security_group(17));
    }

    #[test]
    fn each_identity_owns_the_networks_its_servers_name_and_its_own_ssh_ca() {
        let identities = Identities::new(5).expect("five identities");
        let servers = Servers { count: 100, user_data: "dXNlcg==", public_ip_share: 0.0, identities };
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..servers.count {
            let s = servers.object(&server_name(i), i);
            let network_index = (0..SHARED_RESOURCES)
                .find(|&j| network(j) == s["spec"]["networks"][0]["id"])
                .expect("one of the shared networks");
            let owner = Identities::tenant(identities.of(network_index));
            assert_eq!(s["metadata"]["labels"][IDENTITY_LABEL], owner.identity.as_str());
            assert_eq!(s["spec"]["sshCertificateAuthorityID"], Identities::ssh_ca(identities.of(i)).as_str());
            seen.insert(owner.identity);
        }
        assert_eq!(seen.len(), 5);
        assert_eq!(Identities::tenant(0), World::tenant());
        assert!(Identities::new(0).is_err() && Identities::new(11).is_err());
    }

    /// A Server as the Go controller leaves it: Available's reason, its
    /// create failures, provisionedAt and phase.
    fn go_status(reason: &str, failures: i32, provisioned: bool, phase: &str) -> server_core::Server {
        let mut object = server("server-00001", 1, "dXNlcg==", false, IDENTITY, SSH_CA);
        object["metadata"]["uid"] = json!("uid-1");
        object["status"] = json!({
            "conditions": [{"type": "Available", "status": if reason == "Provisioned" { "True" } else { "False" },
                "reason": reason, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "providerCreateFailures": failures,
            "phase": phase,
        });
        if provisioned {
            object["status"]["provisionedAt"] = json!("2026-01-01T00:01:00Z");
        }
        core_view(&Arc::new(object)).expect("a readable Server")
    }

    fn truth(live: u32, launched: bool, ever: bool, after_launch: u32) -> UidTruth {
        UidTruth {
            live,
            live_launched: launched,
            ever_launched: ever,
            creates_after_launch: after_launch,
            ..UidTruth::default()
        }
    }

    #[test]
    fn the_go_controller_settles_a_boot_only_once_provisioned_on_a_booted_server() {
        let clean = Fate::clean();
        let provisioned = go_status("Provisioned", 0, true, "Running");
        assert!(go_settled(&clean, &provisioned, &truth(1, true, true, 0), 3));
        // Provisioned before the monitor latched it, or on a server not booted yet: not yet.
        assert!(!go_settled(&clean, &go_status("Provisioned", 0, false, "Pending"), &truth(1, true, true, 0), 3));
        assert!(!go_settled(&clean, &provisioned, &truth(1, false, false, 0), 3));
        // A retry under way is no end.
        let retrying = go_status("Errored", 1, false, "Pending");
        assert!(!go_settled(&Fate::failing_boots(2), &retrying, &truth(1, false, false, 0), 3));
    }

    #[test]
    fn the_go_controller_settles_a_failing_fate_only_parked_at_its_cap() {
        let forever = Fate::failing_forever();
        assert!(go_settled(&forever, &go_status("Errored", 3, false, "Pending"), &truth(1, false, false, 0), 3));
        assert!(!go_settled(&forever, &go_status("Errored", 2, false, "Pending"), &truth(1, false, false, 0), 3));
        assert!(!go_settled(&forever, &go_status("Provisioning", 3, false, "Pending"), &truth(1, false, false, 0), 3));
    }

    #[test]
    fn a_vanished_server_settles_once_the_go_side_saw_it_gone_or_made_another() {
        let vanish = Fate::vanish_after_launch(Duration::from_secs(60));
        let gone = truth(0, false, true, 0);
        assert!(!go_settled(&vanish, &go_status("Provisioned", 0, true, "Running"), &gone, 3));
        assert!(go_settled(&vanish, &go_status("Provisioned", 0, true, "Stopped"), &gone, 3));
        assert!(go_settled(&vanish, &go_status("Provisioned", 0, true, "Running"), &truth(0, false, true, 1), 3));
        // Before it vanished, a vanishing fate is a boot like any other.
        assert!(go_settled(&vanish, &go_status("Provisioned", 0, true, "Running"), &truth(1, true, true, 0), 3));
    }

    #[test]
    fn a_latch_counts_a_rewrite_and_a_clearing_never_the_first_write() {
        let mut latch = Latch::default();
        assert!(!latch.observe(None));
        assert!(!latch.observe(Some("2026-01-01T00:00:00Z")));
        assert!(!latch.observe(Some("2026-01-01T00:00:00Z")));
        assert!(latch.observe(Some("2026-01-01T00:00:01Z")));
        let mut cleared = Latch::default();
        cleared.observe(Some("2026-01-01T00:00:00Z"));
        assert!(cleared.observe(None));
    }

    #[test]
    fn invariants_name_each_violation_with_its_count() {
        let none = Invariants::default();
        assert!(none.violations().is_empty());
        let some = Invariants { booted_servers_recreated: 2, provisioned_at_changed: 1, ..Invariants::default() };
        assert_eq!(some.violations(), ["2 booted servers recreated", "1 provisionedAt changed"]);
    }

    #[test]
    fn the_core_view_leaves_the_user_data_out() {
        let object = Arc::new(server("server-00001", 1, &user_data(USER_DATA_BYTES), true, IDENTITY, SSH_CA));
        let view = core_view(&object).expect("a readable Server");
        assert_eq!(view.meta.name, "server-00001");
        assert!(view.spec.user_data.is_none());
    }
}
