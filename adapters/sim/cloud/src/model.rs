//! The cloud's state, deterministic and advanced only by the `now` each call
//! passes in. Every provider server carries a timeline fixed at create time
//! (launch, error, vanish, gone), so its record at any instant is a pure
//! function of that timeline and `now`: the simulator drives it with virtual
//! time, the async port with a real clock, and both see the same behaviour.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use server_core::model::AllowedAddressPair;
use server_core::port::{
    CloudError, CreateRequest, DeleteProgress, FloatingIp, PowerState, ProviderServer, ProviderStatus, ServerPort,
};

use super::counters::{Counters, UidTruth};
use super::fate::{Fate, FateMix};
use super::list_order::{ListOrder, Listed, Walk};
use super::rng::{FnvBuild, SplitMix64};

/// The longest base64 `user_data` Nova accepts.
const NOVA_USER_DATA_MAX: usize = 65_535;

/// How a simulated cloud behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CloudConfig {
    pub seed: u64,
    /// Fates of Servers that were not scripted.
    pub mix: FateMix,
    /// Share of get/list calls that fail (timeout or 503).
    pub read_failure_rate: f64,
    /// Share of create/delete calls answered 503 without effect.
    pub write_failure_rate: f64,
    /// Share of accepted creates whose answer is lost (the server exists, the
    /// caller sees a timeout, or a 502/504 from a gateway that gave up on
    /// Nova): the idempotent create must absorb the retry, and the attempt
    /// must stay counted.
    pub lost_create_rate: f64,
    /// Share of create calls answered 401 without effect (a token that
    /// expired in flight, Keystone restarting): proves nothing was created.
    pub auth_failure_rate: f64,
    /// A provider outage: every call in `[from, until)` fails unsent
    /// (connection refused). Set by the caller for a window it chooses (the
    /// simulator puts one over its controller restart, so parked Servers are
    /// re-read while the provider is unreachable).
    pub outage: Option<Outage>,
}

/// A window in which the provider cannot be reached, in milliseconds since
/// the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub from: i64,
    pub until: i64,
}

impl Outage {
    fn covers(&self, now: i64) -> bool {
        (self.from..self.until).contains(&now)
    }
}

impl CloudConfig {
    /// The default fault mix.
    pub fn new(seed: u64) -> Self {
        CloudConfig::with_fault_rate(seed, FateMix::DEFAULT_FAULT_RATE)
    }

    /// `rate` of the servers get a faulty fate; call failures scale with it.
    pub fn with_fault_rate(seed: u64, rate: f64) -> Self {
        let mix = FateMix::with_fault_rate(rate);
        let rate = if rate.is_finite() { rate.clamp(0.0, 1.0) } else { 0.0 };
        CloudConfig {
            seed,
            mix,
            read_failure_rate: rate * 0.1,
            write_failure_rate: rate * 0.03,
            lost_create_rate: rate * 0.03,
            auth_failure_rate: rate * 0.01,
            outage: None,
        }
    }

    /// Every server boots cleanly and no call fails (fates can still be scripted).
    pub fn reliable(seed: u64) -> Self {
        CloudConfig::with_fault_rate(seed, 0.0)
    }
}

/// A cheap reference to one Server uid's state in a [`CloudModel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServerHandle(usize);

/// The deterministic cloud. See the module docs.
#[derive(Debug)]
pub struct CloudModel {
    config: CloudConfig,
    /// Call-level fault draws, in call order.
    faults: SplitMix64,
    slots: HashMap<String, usize, FnvBuild>,
    servers: Vec<UidState>,
    /// Project ids, interned: the index of each in `project_slots`.
    projects: HashMap<String, usize, FnvBuild>,
    /// The slots of the servers created in each project.
    project_slots: Vec<Vec<usize>>,
    /// The slots of each project whose fate still fails reads.
    scripted_reads: Vec<Vec<usize>>,
    /// Each project's servers in Nova's list order.
    list_order: ListOrder,
    counters: Counters,
    /// Serial number of the next provider server: its id, addresses and MAC.
    next_number: u64,
}

/// Everything the cloud knows about one Server uid.
#[derive(Debug)]
struct UidState {
    uid: String,
    fate: Fate,
    /// Every provider server ever made for this uid, oldest first. Creates are
    /// idempotent, so only the last one can exist.
    instances: Vec<Instance>,
    truth: UidTruth,
    reads_failed: u32,
}

/// One provider server and its timeline, in milliseconds since the epoch.
#[derive(Debug)]
struct Instance {
    number: u64,
    /// Provider id, addresses and MAC, formatted once at create time so that
    /// reads (the simulator's hottest cloud path) only copy them.
    id: String,
    private_ip: String,
    /// The floating IP on its port, once one is allocated (never at create:
    /// as on OpenStack, the floating IP is its own step after the server).
    public_ip: Option<String>,
    mac: String,
    /// Its port's security groups (the spec's IDs: this cloud resolves
    /// each to itself) and allowed address pairs.
    security_groups: Vec<String>,
    allowed_address_pairs: Vec<AllowedAddressPair>,
    /// Interned project id.
    project: usize,
    name: String,
    created: i64,
    launch: Option<i64>,
    error: Option<i64>,
    vanish: Option<i64>,
    /// Set by the first delete request.
    gone: Option<i64>,
    /// Made by another controller and taken over for the Server.
    adopted: bool,
    /// The image it runs (the create's, then each accepted rebuild's).
    image: String,
    /// The latest accepted rebuild.
    rebuild: Option<RebuildRun>,
    /// A read (get, list, a create's answer) showed it launched: the
    /// controller could know it booted.
    boot_read: bool,
}

/// A rebuild the cloud accepted, in milliseconds since the epoch. As Nova
/// does, the image changes at acceptance, together with the task.
#[derive(Clone, Copy, Debug)]
struct RebuildRun {
    /// The cloud accepted it then.
    accepted: i64,
    /// The task runs until then.
    until: i64,
    /// It ends in ERROR.
    fails: bool,
    /// A rebuild that succeeded goes ERROR then (a fault after success).
    error_after: Option<i64>,
    /// Accepted rebuilds of this instance so far (for the record's version).
    count: u64,
}

impl Instance {
    /// Server `number` of `project`, made at `created` (ms), its identity
    /// formatted once; no boot scheduled, no port settings.
    fn new(number: u64, project: usize, name: String, created: i64) -> Self {
        let (id, private_ip, _, mac) = identity_of(number, false);
        Instance {
            number,
            id,
            private_ip,
            public_ip: None,
            mac,
            security_groups: Vec::new(),
            allowed_address_pairs: Vec::new(),
            project,
            name,
            created,
            launch: None,
            error: None,
            vanish: None,
            gone: None,
            adopted: false,
            image: String::new(),
            rebuild: None,
            boot_read: false,
        }
    }
}

impl Instance {
    fn exists(&self, now: i64) -> bool {
        self.gone.is_none_or(|t| t > now) && self.vanish.is_none_or(|t| t > now)
    }

    /// When it stopped existing, if it has by `now`: deleted, or gone
    /// without a delete.
    fn deleted_at(&self, now: i64) -> Option<i64> {
        [self.gone, self.vanish].into_iter().flatten().filter(|&t| t <= now).min()
    }

    /// The latest change of its record by `now` (Nova's `updated_at`): made,
    /// launched, failed, a rebuild accepted or ended, deleted.
    fn changed_at(&self, now: i64) -> i64 {
        let rebuild = self.rebuild.map(|r| [Some(r.accepted), Some(r.until), r.error_after]);
        [Some(self.created), self.launch, self.error, self.deleted_at(now)]
            .into_iter()
            .chain(rebuild.into_iter().flatten())
            .flatten()
            .filter(|&t| t <= now)
            .max()
            .unwrap_or(self.created)
    }

    fn launched(&self, now: i64) -> bool {
        self.launch.is_some_and(|t| t <= now)
    }

    fn rebuilding(&self, now: i64) -> bool {
        self.rebuild.is_some_and(|r| now < r.until)
    }

    fn status(&self, now: i64) -> ProviderStatus {
        if let Some(run) = self.rebuild {
            if now < run.until {
                return ProviderStatus::Rebuild;
            }
            if run.fails || run.error_after.is_some_and(|t| t <= now) {
                return ProviderStatus::Error;
            }
        }
        if self.error.is_some_and(|t| t <= now) {
            ProviderStatus::Error
        } else if self.launched(now) {
            ProviderStatus::Active
        } else {
            ProviderStatus::Build
        }
    }

    fn queued(&self, now: i64) -> bool {
        // Scheduling takes the first two seconds of a build.
        now - self.created < 2_000
    }

    /// Equal versions mean equal records: the record is a function of the
    /// instance and of these few facts about `now`.
    fn version(&self, now: i64) -> u64 {
        let status = match self.status(now) {
            ProviderStatus::Build => u64::from(self.queued(now)),
            ProviderStatus::Active => 2,
            ProviderStatus::Rebuild => 4,
            _ => 3,
        };
        let public_ip = self.public_ip.is_some() && self.launched(now);
        let rebuilds = self.rebuild.map_or(0, |r| r.count & 0xff);
        (self.number << 14)
            | (rebuilds << 6)
            | (u64::from(public_ip) << 5)
            | (status << 1)
            | u64::from(self.launched(now))
    }

    fn record(&self, uid: &str, now: i64) -> ProviderServer {
        let launched = self.launched(now);
        let status = self.status(now);
        let active = status == ProviderStatus::Active;
        ProviderServer {
            id: self.id.clone(),
            server_uid: uid.to_owned(),
            power_state: if active { PowerState::Running } else { PowerState::NoState },
            queued: status == ProviderStatus::Build && self.queued(now),
            status,
            created: Timestamp::from_millisecond(self.created).ok(),
            launched_at: self.launch.filter(|_| launched).and_then(|t| Timestamp::from_millisecond(t).ok()),
            private_ip: Some(self.private_ip.clone()),
            public_ip: self.public_ip.clone().filter(|_| launched),
            // The port's MAC is final only once the server is ACTIVE.
            mac_address: active.then(|| self.mac.clone()),
            // SimCloud keeps no flavor catalog: the name is unknown, as Nova
            // before microversion 2.47.
            flavor_name: None,
            // SimCloud's servers are VMs; the OpenStack simulator's Ironic
            // shows nodes for its baremetal flavors.
            ironic: None,
            adopted: self.adopted,
            image_id: (!self.image.is_empty()).then(|| self.image.clone()),
            task_in_flight: self.rebuilding(now),
        }
    }
}

/// One page of a list.
#[derive(Debug, PartialEq)]
pub enum ListPage {
    Servers(Vec<Shown>),
    /// The marker names no server ever made in the project.
    MarkerNotFound,
}

/// A server as a list shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shown {
    /// As it is, or as it was when it stopped existing.
    pub record: ProviderServer,
    /// When the cloud last changed it (Nova's `updated_at`).
    pub changed: Timestamp,
    /// It no longer exists: only a list of changes shows it.
    pub deleted: bool,
}

/// How long a deleted server stays listable to a list of changes. Nova
/// keeps a deleted server's row until an operator archives it
/// (`nova-manage db archive_deleted_rows`, commonly run daily); this cloud
/// keeps it an hour, which outlasts any poll's window.
pub const DELETED_ROWS_KEPT: Duration = Duration::from_secs(3_600);

/// The number of the provider server of id `id` (see `identity_of`).
fn number_of(id: &str) -> Option<u64> {
    id.strip_prefix("sim-").and_then(|hex| u64::from_str_radix(hex, 16).ok())
}

/// Id and addresses of the `n`-th provider server: unique, deterministic.
fn identity_of(n: u64, public_ip: bool) -> (String, String, Option<String>, String) {
    let (a, b, c) = ((n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
    (
        format!("sim-{n:08x}"),
        format!("10.{a}.{b}.{c}"),
        public_ip.then(|| format!("100.{}.{b}.{c}", 64 + (a & 0x3f))),
        format!("fa:16:3e:{a:02x}:{b:02x}:{c:02x}"),
    )
}

/// Nova's answer for a server that is not there.
fn server_not_found() -> CloudError {
    CloudError::Refused { status: 404, message: "simulated: the server could not be found".into() }
}

/// Neutron's answer for a port that is not there.
fn port_not_found() -> CloudError {
    CloudError::Refused { status: 404, message: "simulated: the server's port could not be found".into() }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl CloudModel {
    pub fn new(config: CloudConfig) -> Self {
        CloudModel {
            faults: SplitMix64::stream(config.seed, "cloud-call-faults"),
            config,
            slots: HashMap::default(),
            servers: Vec::new(),
            projects: HashMap::default(),
            project_slots: Vec::new(),
            scripted_reads: Vec::new(),
            list_order: ListOrder::default(),
            counters: Counters::default(),
            next_number: 1,
        }
    }

    /// Restarts the call-fault stream from `seed`; fates (drawn from the
    /// config's seed and each uid) are unaffected. The simulator gives each
    /// of its shards its own stream.
    pub fn reseed_faults(&mut self, seed: u64) {
        self.faults = SplitMix64::stream(seed, "cloud-call-faults");
    }

    pub fn config(&self) -> &CloudConfig {
        &self.config
    }

    /// Fixes the fate of `uid`'s provider servers, replacing the drawn one.
    /// Takes effect for creates from now on.
    pub fn script(&mut self, uid: &str, fate: Fate) {
        let slot = self.slot(uid);
        if let Some(state) = self.servers.get_mut(slot) {
            state.fate = fate;
        }
    }

    /// The fate of `uid` (drawn on first use).
    pub fn fate(&mut self, uid: &str) -> Fate {
        let slot = self.slot(uid);
        self.servers.get(slot).map(|s| s.fate.clone()).unwrap_or_default()
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Ground truth for one uid at `now`.
    pub fn truth(&self, uid: &str, now: Timestamp) -> UidTruth {
        match self.slots.get(uid) {
            Some(&slot) => self.truth_of(ServerHandle(slot), now),
            None => UidTruth::default(),
        }
    }

    /// [`CloudModel::truth`] by handle.
    pub fn truth_of(&self, handle: ServerHandle, now: Timestamp) -> UidTruth {
        let now = now.as_millisecond();
        let Some(state) = self.servers.get(handle.0) else {
            return UidTruth::default();
        };
        let live = state.instances.last().filter(|i| i.exists(now));
        UidTruth {
            live: u32::from(live.is_some()),
            live_launched: live.is_some_and(|i| i.launched(now)),
            ever_launched: state.instances.iter().any(|i| i.launched(now)),
            ..state.truth
        }
    }

    /// Provider servers that exist at `now`, across all uids.
    pub fn live_servers(&self, now: Timestamp) -> usize {
        let now = now.as_millisecond();
        self.servers.iter().filter(|s| s.instances.last().is_some_and(|i| i.exists(now))).count()
    }

    /// Makes the Server's provider server, or returns the one that exists.
    pub fn create(
        &mut self,
        now: Timestamp,
        project_id: &str,
        request: &CreateRequest,
    ) -> Result<ProviderServer, CloudError> {
        let now = now.as_millisecond();
        self.counters.create_calls += 1;
        if let Some(error) = self.outage_failure(now) {
            return Err(error);
        }
        if self.faults.chance(self.config.auth_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Auth { message: "simulated 401: the token expired".into() });
        }
        if self.faults.chance(self.config.write_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Unavailable { status: 503, message: "simulated create outage".into() });
        }
        let uid = request.server.uid.as_str();
        let slot = self.slot(uid);
        let project = self.index_project(project_id, slot);
        let number = self.next_number;
        let Some(state) = self.servers.get_mut(slot) else {
            return Err(CloudError::Unavailable { status: 500, message: "simulated cloud lost a slot".into() });
        };
        state.truth.create_calls += 1;
        // Nova's schema caps `user_data` at 65,535 base64 characters
        // (nova/api/openstack/compute/schemas/servers.py) and answers 400.
        let user_data_base64 = request.user_data.as_ref().map_or(0, |d| d.len().div_ceil(3) * 4);
        if user_data_base64 > NOVA_USER_DATA_MAX {
            state.truth.creates_refused += 1;
            self.counters.creates_refused += 1;
            return Err(CloudError::Refused {
                status: 400,
                message: format!("Invalid input for field/attribute user_data: longer than {NOVA_USER_DATA_MAX}"),
            });
        }
        if let Some(existing) = state.instances.last_mut().filter(|i| i.exists(now)) {
            self.counters.creates_deduplicated += 1;
            existing.boot_read |= existing.launched(now);
            return Ok(existing.record(uid, now));
        }
        if state.truth.creates_refused < state.fate.refused_creates {
            state.truth.creates_refused += 1;
            self.counters.creates_refused += 1;
            return Err(CloudError::Refused {
                status: 403,
                message: "Quota exceeded for instances: requested 1, but already used 10 of 10 instances".into(),
            });
        }
        if state.instances.iter().any(|i| i.launched(now)) {
            state.truth.creates_after_launch += 1;
        }
        if state.instances.iter().any(|i| i.boot_read) {
            state.truth.creates_after_boot_read += 1;
        }
        state.truth.creates_accepted += 1;
        self.counters.creates_accepted += 1;
        self.next_number += 1;
        let fate = &state.fate;
        let (launch, error, vanish) = if fate.boot_fails(state.truth.creates_accepted) {
            (None, Some(now + millis(fate.fail_time)), None)
        } else {
            let launch = now + millis(fate.build_time);
            let error = fate.error_after_launch.map(|d| launch + millis(d));
            let vanish = fate.vanish_after_launch.map(|d| launch + millis(d));
            (Some(launch), error, vanish)
        };
        if vanish.is_some() {
            self.counters.vanished += 1;
        }
        let instance = Instance {
            security_groups: request.security_group_ids.clone(),
            allowed_address_pairs: request
                .networks
                .first()
                .map(|n| n.allowed_address_pairs.clone())
                .unwrap_or_default(),
            launch,
            error,
            vanish,
            image: request.image_id.clone(),
            ..Instance::new(number, project, request.name.clone(), now)
        };
        let record = instance.record(uid, now);
        let listed = Listed { slot, instance: state.instances.len() };
        state.instances.push(instance);
        self.list_order.insert(project, number, now, listed);
        if self.faults.chance(self.config.lost_create_rate) {
            self.counters.creates_lost_answer += 1;
            self.counters.injected_failures += 1;
            // Half time out, half get a gateway's 504: the create landed either way.
            return Err(if self.faults.chance(0.5) {
                CloudError::Timeout { message: "simulated create answer lost".into() }
            } else {
                CloudError::Unavailable { status: 504, message: "simulated gateway timeout; the create landed".into() }
            });
        }
        Ok(record)
    }

    /// A provider server another controller made for `uid` in the project
    /// before this one took the region over (the Go controller's, which
    /// the port adopts): it boots at `launch` (never, if `None`) and
    /// vanishes at `vanish`, if given. It is no create of this controller:
    /// the truth's creates leave it out, and the uid's fate rules the
    /// creates that follow.
    pub fn place_adoptable(
        &mut self,
        now: Timestamp,
        project_id: &str,
        uid: &str,
        launch: Option<Timestamp>,
        vanish: Option<Timestamp>,
    ) {
        let slot = self.slot(uid);
        let project = self.index_project(project_id, slot);
        let number = self.next_number;
        self.next_number += 1;
        let instance = Instance {
            launch: launch.map(Timestamp::as_millisecond),
            vanish: vanish.map(Timestamp::as_millisecond),
            adopted: true,
            ..Instance::new(number, project, format!("go-{uid}"), now.as_millisecond())
        };
        let created = instance.created;
        if let Some(state) = self.servers.get_mut(slot) {
            let listed = Listed { slot, instance: state.instances.len() };
            state.instances.push(instance);
            self.list_order.insert(project, number, created, listed);
        }
    }

    /// Rebuilds the Server's provider server onto `image`, as Nova's
    /// `rebuild` action does: refused (409) while a task runs or before the
    /// server launched (Nova's vm_state check allows ACTIVE, SHUTOFF and
    /// ERROR only), 404 without a server; once accepted the image and the
    /// task change at once, and the task ends after the fate's rebuild time.
    pub fn rebuild(&mut self, now: Timestamp, uid: &str, image: &str) -> Result<(), CloudError> {
        let now = now.as_millisecond();
        self.counters.rebuild_calls += 1;
        if let Some(error) = self.outage_failure(now) {
            return Err(error);
        }
        if self.faults.chance(self.config.write_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Unavailable { status: 503, message: "simulated rebuild outage".into() });
        }
        let Some(state) = self.slots.get(uid).and_then(|&slot| self.servers.get_mut(slot)) else {
            return Err(server_not_found());
        };
        let Some(instance) = state.instances.last_mut().filter(|i| i.exists(now)) else {
            return Err(server_not_found());
        };
        if instance.rebuilding(now) || !instance.launched(now) {
            return Err(CloudError::Conflict {
                message: "simulated 409: cannot 'rebuild' instance while it is in task_state or vm_state building"
                    .into(),
            });
        }
        let fate = &state.fate;
        state.truth.rebuilds_accepted += 1;
        if instance.image == image {
            state.truth.rebuilds_repeated += 1;
        }
        self.counters.rebuilds_accepted += 1;
        let until = now.saturating_add(millis(fate.rebuild_time));
        let fails = state.truth.rebuilds_accepted <= fate.failed_rebuilds;
        let count = instance.rebuild.map_or(0, |r| r.count) + 1;
        let error_after = fate.error_after_rebuild.filter(|_| !fails).map(|d| until.saturating_add(millis(d)));
        instance.image = image.to_owned();
        instance.rebuild = Some(RebuildRun { accepted: now, until, fails, error_after, count });
        if self.faults.chance(self.config.lost_create_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Timeout {
                message: "simulated rebuild answer lost; the rebuild was accepted".into(),
            });
        }
        Ok(())
    }

    /// Starts (or continues) deleting the Server's provider server.
    pub fn delete(&mut self, now: Timestamp, uid: &str) -> Result<DeleteProgress, CloudError> {
        let handle = self.slots.get(uid).map(|&slot| ServerHandle(slot));
        self.delete_by(now, handle)
    }

    /// [`CloudModel::delete`] by handle (`None`: a uid the cloud never saw).
    pub fn delete_by(&mut self, now: Timestamp, handle: Option<ServerHandle>) -> Result<DeleteProgress, CloudError> {
        self.delete_taking(now, handle, Duration::ZERO)
    }

    /// [`CloudModel::delete`] for a cloud whose deletes take at least
    /// `at_least` whatever the fate says (Nova's, which answers a DELETE at
    /// once and deletes later: the server stays listed meanwhile).
    pub fn delete_after(
        &mut self,
        now: Timestamp,
        uid: &str,
        at_least: Duration,
    ) -> Result<DeleteProgress, CloudError> {
        let handle = self.slots.get(uid).map(|&slot| ServerHandle(slot));
        self.delete_taking(now, handle, at_least)
    }

    fn delete_taking(
        &mut self,
        now: Timestamp,
        handle: Option<ServerHandle>,
        at_least: Duration,
    ) -> Result<DeleteProgress, CloudError> {
        let now = now.as_millisecond();
        self.counters.delete_calls += 1;
        if let Some(error) = self.outage_failure(now) {
            return Err(error);
        }
        if self.faults.chance(self.config.write_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Unavailable { status: 503, message: "simulated delete outage".into() });
        }
        let Some(state) = handle.and_then(|h| self.servers.get_mut(h.0)) else {
            return Ok(DeleteProgress::Gone);
        };
        state.truth.delete_calls += 1;
        let Some(instance) = state.instances.last_mut().filter(|i| i.exists(now)) else {
            return Ok(DeleteProgress::Gone);
        };
        let gone = match instance.gone {
            Some(gone) => gone,
            None => {
                let gone = now.saturating_add(millis(state.fate.delete_time.max(at_least)));
                instance.gone = Some(gone);
                self.counters.deletions_started += 1;
                if instance.launched(now) {
                    state.truth.launched_deleted += 1;
                    self.counters.launched_deleted += 1;
                }
                gone
            }
        };
        Ok(if gone <= now { DeleteProgress::Gone } else { DeleteProgress::InProgress })
    }

    /// The Server's provider server; `Ok(None)` is an authoritative not-found.
    pub fn get(&mut self, now: Timestamp, uid: &str) -> Result<Option<ProviderServer>, CloudError> {
        let handle = self.slots.get(uid).map(|&slot| ServerHandle(slot));
        self.get_by(now, handle)
    }

    /// [`CloudModel::get`] by handle (`None`: a uid the cloud never saw).
    pub fn get_by(
        &mut self,
        now: Timestamp,
        handle: Option<ServerHandle>,
    ) -> Result<Option<ProviderServer>, CloudError> {
        let now = now.as_millisecond();
        self.counters.get_calls += 1;
        if let Some(error) = self.outage_failure(now) {
            return Err(error);
        }
        let slot = handle.map(|h| h.0);
        if let Some(state) = slot.and_then(|slot| self.servers.get_mut(slot))
            && state.reads_failed < state.fate.failed_reads
        {
            state.reads_failed += 1;
            self.counters.injected_failures += 1;
            return Err(CloudError::Timeout { message: "simulated read timeout (scripted)".into() });
        }
        if self.faults.chance(self.config.read_failure_rate) {
            return Err(self.read_failure());
        }
        let state = slot.and_then(|slot| self.servers.get(slot));
        Ok(state.and_then(|s| s.instances.last().filter(|i| i.exists(now)).map(|i| i.record(&s.uid, now))))
    }

    /// The controller was shown `uid`'s server as it is at `now` (a get or
    /// a list answered to it, not a read inside the cloud): from then on a
    /// boot it shows is one the controller could know of.
    pub fn mark_read(&mut self, now: Timestamp, uid: &str) {
        if let Some(&slot) = self.slots.get(uid) {
            self.mark_read_by(now, ServerHandle(slot));
        }
    }

    /// [`CloudModel::mark_read`] by handle.
    pub fn mark_read_by(&mut self, now: Timestamp, handle: ServerHandle) {
        let now = now.as_millisecond();
        let Some(state) = self.servers.get_mut(handle.0) else { return };
        if let Some(instance) = state.instances.last_mut().filter(|i| i.exists(now)) {
            instance.boot_read |= instance.launched(now);
        }
    }

    /// Every provider server of the project, ordered by uid.
    pub fn list(&mut self, now: Timestamp, project_id: &str) -> Result<Vec<ProviderServer>, CloudError> {
        let listed = self.list_versions(now, project_id)?;
        let now = now.as_millisecond();
        let mut records: Vec<ProviderServer> = listed
            .iter()
            .filter_map(|(handle, _)| self.servers.get(handle.0))
            .filter_map(|s| s.instances.last().map(|i| i.record(&s.uid, now)))
            .collect();
        records.sort_by(|a, b| a.server_uid.cmp(&b.server_uid));
        Ok(records)
    }

    /// [`CloudModel::list`] without building the records: each listed server
    /// as its handle and a version (equal versions, equal records). The
    /// simulator's monitor reads a record only when its version moved. Counted
    /// and fault-injected like `list`.
    pub fn list_versions(&mut self, now: Timestamp, project_id: &str) -> Result<Vec<(ServerHandle, u64)>, CloudError> {
        let Some(project) = self.list_admitted(now, project_id)? else {
            return Ok(Vec::new());
        };
        let now = now.as_millisecond();
        let slots: &[usize] = self.project_slots.get(project).map(Vec::as_slice).unwrap_or_default();
        Ok(slots
            .iter()
            .filter_map(|&slot| {
                let state = self.servers.get(slot)?;
                let live = state.instances.last().filter(|i| i.exists(now) && i.project == project)?;
                Some((ServerHandle(slot), live.version(now)))
            })
            .collect())
    }

    /// One page of the project's provider servers in Nova's list order
    /// (newest first, see `list_order`): those after the server `after` (a
    /// provider id), at most `limit` of those `keep` admits. With
    /// `with_deleted`, servers deleted less than [`DELETED_ROWS_KEPT`] ago
    /// are shown too (Nova's list of changes). It costs the servers it walks
    /// past, not the project's size. Counted and fault-injected like `list`.
    pub fn list_page(
        &mut self,
        now: Timestamp,
        project_id: &str,
        after: Option<&str>,
        limit: usize,
        with_deleted: bool,
        mut keep: impl FnMut(&Shown) -> bool,
    ) -> Result<ListPage, CloudError> {
        let project = self.list_admitted(now, project_id)?;
        let after = match after.map(|id| number_of(id).ok_or(())) {
            None => None,
            Some(Ok(number)) => Some(number),
            Some(Err(())) => return Ok(ListPage::MarkerNotFound),
        };
        let Some(project) = project else {
            return Ok(if after.is_some() { ListPage::MarkerNotFound } else { ListPage::Servers(Vec::new()) });
        };
        let now = now.as_millisecond();
        let kept = millis(DELETED_ROWS_KEPT);
        let servers = &self.servers;
        let mut page = Vec::new();
        let walked = self.list_order.walk(project, after, |listed| {
            if page.len() >= limit {
                return Walk::Stop;
            }
            let Some(state) = servers.get(listed.slot) else { return Walk::Unlisted };
            let Some(instance) = state.instances.get(listed.instance) else { return Walk::Unlisted };
            // A later instance of the uid means this one was deleted first.
            let superseded = state.instances.len() > listed.instance + 1;
            let deleted = if instance.exists(now) && !superseded {
                None
            } else {
                match instance.deleted_at(now).or(superseded.then_some(instance.created)) {
                    Some(at) if now - at < kept => Some(at),
                    _ => return Walk::Unlisted,
                }
            };
            if deleted.is_some() && !with_deleted {
                return Walk::Next;
            }
            let when = deleted.unwrap_or_else(|| instance.changed_at(now));
            let shown = Shown {
                record: instance.record(&state.uid, deleted.map_or(now, |at| at - 1)),
                changed: Timestamp::from_millisecond(when).unwrap_or_default(),
                deleted: deleted.is_some(),
            };
            if keep(&shown) {
                page.push(shown);
            }
            Walk::Next
        });
        Ok(match walked {
            Some(()) => ListPage::Servers(page),
            None => ListPage::MarkerNotFound,
        })
    }

    /// A list call is counted and may fail as lists do (an outage, a
    /// scripted read failure of any of the project's servers, a drawn read
    /// failure); `Ok(None)` when the project has no server.
    fn list_admitted(&mut self, now: Timestamp, project_id: &str) -> Result<Option<usize>, CloudError> {
        let now = now.as_millisecond();
        self.counters.list_calls += 1;
        if let Some(error) = self.outage_failure(now) {
            return Err(error);
        }
        let Some(&project) = self.projects.get(project_id) else {
            return if self.faults.chance(self.config.read_failure_rate) { Err(self.read_failure()) } else { Ok(None) };
        };
        let mut scripted_failure = false;
        if let Some(scripted) = self.scripted_reads.get_mut(project) {
            let servers = &mut self.servers;
            scripted.retain(|&slot| {
                let Some(state) = servers.get_mut(slot) else { return false };
                if state.reads_failed < state.fate.failed_reads {
                    state.reads_failed += 1;
                    scripted_failure = true;
                }
                state.reads_failed < state.fate.failed_reads
            });
        }
        if scripted_failure {
            self.counters.injected_failures += 1;
            return Err(CloudError::Timeout { message: "simulated list timeout (scripted)".into() });
        }
        if self.faults.chance(self.config.read_failure_rate) {
            return Err(self.read_failure());
        }
        Ok(Some(project))
    }

    /// When the cloud last changed the live server of `uid` (Nova's
    /// `updated_at`), if there is one. Not a call: what a record shows.
    pub fn changed_at(&self, uid: &str, now: Timestamp) -> Option<Timestamp> {
        let now = now.as_millisecond();
        let state = self.slots.get(uid).and_then(|&slot| self.servers.get(slot))?;
        let instance = state.instances.last().filter(|i| i.exists(now))?;
        Timestamp::from_millisecond(instance.changed_at(now)).ok()
    }

    /// The handle of `uid` (made, with its drawn fate, on first sight).
    pub fn handle(&mut self, uid: &str) -> ServerHandle {
        ServerHandle(self.slot(uid))
    }

    /// The record of a listed server at `now` (no call is counted: it comes
    /// with the list it was listed in).
    pub fn listed_record(&self, handle: ServerHandle, now: Timestamp) -> Option<ProviderServer> {
        let now = now.as_millisecond();
        let state = self.servers.get(handle.0)?;
        state.instances.last().filter(|i| i.exists(now)).map(|i| i.record(&state.uid, now))
    }

    /// The port the live server of `uid` boots with (`port-<server id>`) and
    /// the floating IP on it; `None` when no server of `uid` exists.
    pub fn port_of(&self, uid: &str, now: Timestamp) -> Option<ServerPort> {
        let now = now.as_millisecond();
        let state = self.slots.get(uid).and_then(|&slot| self.servers.get(slot))?;
        let instance = state.instances.last().filter(|i| i.exists(now))?;
        Some(ServerPort {
            id: format!("port-{}", instance.id),
            // Made with its server and gone with it: bound while it lives.
            bound_to: Some(instance.id.clone()),
            mac_address: Some(instance.mac.clone()),
            security_groups: instance.security_groups.clone(),
            allowed_address_pairs: instance.allowed_address_pairs.clone(),
            floating_ip: instance
                .public_ip
                .as_ref()
                .map(|address| FloatingIp { id: format!("fip-{}", instance.id), address: Some(address.clone()) }),
        })
    }

    /// Sets the security groups and address pairs of `uid`'s port (one of
    /// no live server: Neutron's 404).
    pub fn update_port(
        &mut self,
        now: Timestamp,
        uid: &str,
        security_groups: &[String],
        allowed_address_pairs: &[AllowedAddressPair],
    ) -> Result<(), CloudError> {
        let now_ms = now.as_millisecond();
        if let Some(error) = self.outage_failure(now_ms) {
            return Err(error);
        }
        if self.faults.chance(self.config.write_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Unavailable { status: 503, message: "simulated port update outage".into() });
        }
        let instance = self.live_instance_mut(uid, now_ms).ok_or_else(port_not_found)?;
        instance.security_groups = security_groups.to_vec();
        instance.allowed_address_pairs = allowed_address_pairs.to_vec();
        Ok(())
    }

    /// Allocates a floating IP on `uid`'s port, or (`on` false) releases it;
    /// idempotent either way. A write fault (`write_failure_rate`) fails an
    /// allocation with a 503, as Neutron's would.
    pub fn set_floating_ip(&mut self, now: Timestamp, uid: &str, on: bool) -> Result<(), CloudError> {
        let now_ms = now.as_millisecond();
        if let Some(error) = self.outage_failure(now_ms) {
            return Err(error);
        }
        if on && self.faults.chance(self.config.write_failure_rate) {
            self.counters.injected_failures += 1;
            return Err(CloudError::Unavailable { status: 503, message: "simulated floating IP outage".into() });
        }
        let Some(instance) = self.live_instance_mut(uid, now_ms) else {
            // Released with its server, or never made: nothing to release.
            return if on { Err(port_not_found()) } else { Ok(()) };
        };
        instance.public_ip = match on {
            true => instance.public_ip.take().or_else(|| identity_of(instance.number, true).2),
            false => None,
        };
        Ok(())
    }

    /// Releases the floating IP [`CloudModel::port_of`] named `fip-<server
    /// id>`; one already gone (or never made) is released.
    pub fn release_floating_ip(&mut self, now: Timestamp, floating_ip_id: &str) -> Result<(), CloudError> {
        if let Some(error) = self.outage_failure(now.as_millisecond()) {
            return Err(error);
        }
        let Some(server_id) = floating_ip_id.strip_prefix("fip-") else { return Ok(()) };
        let found = self.servers.iter_mut().filter_map(|s| s.instances.last_mut()).find(|i| i.id == server_id);
        if let Some(instance) = found {
            instance.public_ip = None;
        }
        Ok(())
    }

    fn live_instance_mut(&mut self, uid: &str, now: i64) -> Option<&mut Instance> {
        let slot = *self.slots.get(uid)?;
        self.servers.get_mut(slot)?.instances.last_mut().filter(|i| i.exists(now))
    }

    /// The provider-side name the live server of `uid` was created with.
    pub fn server_name(&self, uid: &str, now: Timestamp) -> Option<&str> {
        let now = now.as_millisecond();
        let state = self.slots.get(uid).and_then(|&slot| self.servers.get(slot))?;
        state.instances.last().filter(|i| i.exists(now)).map(|i| i.name.as_str())
    }

    /// An injected read failure (the caller drew it from `read_failure_rate`).
    /// The failure of any call made during the configured outage.
    fn outage_failure(&mut self, now: i64) -> Option<CloudError> {
        self.config.outage.filter(|o| o.covers(now))?;
        self.counters.injected_failures += 1;
        self.counters.outage_failures += 1;
        Some(CloudError::Unreachable { message: "simulated provider outage: connection refused".into() })
    }

    /// Sets (or clears) the provider outage window.
    pub fn set_outage(&mut self, outage: Option<Outage>) {
        self.config.outage = outage;
    }

    fn read_failure(&mut self) -> CloudError {
        self.counters.injected_failures += 1;
        // Half time out, half answer 503: both leave the provider's view unknown.
        if self.faults.chance(0.5) {
            CloudError::Timeout { message: "simulated read timeout".into() }
        } else {
            CloudError::Unavailable { status: 503, message: "simulated read outage".into() }
        }
    }

    /// The slot of `uid`, made (with its drawn fate) on first sight.
    fn slot(&mut self, uid: &str) -> usize {
        if let Some(&slot) = self.slots.get(uid) {
            return slot;
        }
        let slot = self.servers.len();
        self.servers.push(UidState {
            uid: uid.to_owned(),
            fate: self.config.mix.draw(self.config.seed, uid),
            instances: Vec::new(),
            truth: UidTruth::default(),
            reads_failed: 0,
        });
        self.slots.insert(uid.to_owned(), slot);
        slot
    }

    /// Interns the project and files the slot under it.
    fn index_project(&mut self, project_id: &str, slot: usize) -> usize {
        let project = match self.projects.get(project_id) {
            Some(&project) => project,
            None => {
                let project = self.project_slots.len();
                self.projects.insert(project_id.to_owned(), project);
                self.project_slots.push(Vec::new());
                project
            }
        };
        if let Some(slots) = self.project_slots.get_mut(project)
            // Retried creates come back to the same slot: the last-entry
            // check spares the scan in the common case.
            && slots.last() != Some(&slot)
            && !slots.contains(&slot)
        {
            slots.push(slot);
            if self.servers.get(slot).is_some_and(|s| s.reads_failed < s.fate.failed_reads) {
                if self.scripted_reads.len() <= project {
                    self.scripted_reads.resize_with(project + 1, Vec::new);
                }
                if let Some(scripted) = self.scripted_reads.get_mut(project) {
                    scripted.push(slot);
                }
            }
        }
        project
    }
}
