//! The simulator's own bookkeeping: tokens, what Nova was asked to create
//! per Server uid, Neutron ports and floating IPs. Servers themselves live in
//! the SimCloud model.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;
use serde::Serialize;

use super::faults::FaultRules;
use super::indexed::{FloatingIps, Ports};
use super::{Flavor, Image, OpenStackCounters, RequestRecord};

#[derive(Debug, Default)]
pub(super) struct State {
    serial: u64,
    /// user id -> password (empty: any password is accepted).
    pub(super) users: BTreeMap<String, String>,
    /// application credential id -> (secret, project id).
    pub(super) application_credentials: BTreeMap<String, (String, String)>,
    pub(super) tokens: HashMap<String, IssuedToken>,
    /// Server uid -> what Nova was last asked to create for it. The model
    /// keeps at most one live server per uid, so the last request describes it.
    pub(super) books: BTreeMap<String, ServerBook>,
    /// Nova id -> Server uid, learnt from creates and lists.
    pub(super) ids: HashMap<String, String>,
    pub(super) ports: Ports,
    pub(super) floating_ips: FloatingIps,
    /// Tenant networks by id (external ones come from the configuration).
    pub(super) networks: BTreeMap<String, SimNamed>,
    pub(super) security_groups: BTreeMap<String, SimNamed>,
    /// Security group rules by id.
    pub(super) security_group_rules: BTreeMap<String, SimRule>,
    /// Nova keypairs by name (Nova keeps them per user; one user here).
    pub(super) keypairs: BTreeMap<String, SimKeypair>,
    /// Keystone projects: id -> name (none: any project ID is accepted).
    pub(super) projects: BTreeMap<String, String>,
    /// (user id, project id) role assignments.
    pub(super) grants: BTreeSet<(String, String)>,
    /// (user id, domain id) role assignments.
    pub(super) domain_grants: BTreeSet<(String, String)>,
    /// Glance images by id, with when they were added.
    pub(super) images: BTreeMap<String, (Image, Timestamp)>,
    pub(super) flavors: BTreeMap<String, Flavor>,
    /// Nova server name -> the fate of every server created under that name
    /// without a Server uid in its metadata (the Go controller's).
    pub(super) fates_by_name: BTreeMap<String, server_simcloud::Fate>,
    /// Nova metadata `serverID` -> the Server uid a create without a uid is
    /// attributed to (see `OpenStackSim::attribute_server_id`).
    pub(super) uids_by_server_id: BTreeMap<String, String>,
    /// Tenant network id -> its one subnet's id.
    pub(super) subnets: BTreeMap<String, String>,
    pub(super) faults: FaultRules,
    pub(super) counters: OpenStackCounters,
    pub(super) log: Vec<RequestRecord>,
}

#[derive(Clone, Debug)]
pub(super) struct IssuedToken {
    pub(super) project_id: Option<String>,
    pub(super) expires_at: Timestamp,
    /// The token's body as issued (`GET /v3/auth/tokens` shows it again).
    pub(super) body: serde_json::Value,
}

#[derive(Clone, Debug)]
pub(super) struct SimKeypair {
    pub(super) public_key: String,
    pub(super) fingerprint: String,
    /// `ssh` or `x509` (2.2).
    pub(super) kind: String,
    pub(super) created: Timestamp,
}

#[derive(Clone, Debug)]
pub(super) struct ServerBook {
    pub(super) id: Option<String>,
    pub(super) project_id: String,
    pub(super) name: String,
    pub(super) flavor_id: String,
    pub(super) image_id: String,
    pub(super) port_id: Option<String>,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) user_data: Option<Vec<u8>>,
    pub(super) key_name: Option<String>,
    /// 2.19's `description` (null when never given).
    pub(super) description: Option<String>,
    /// 2.90's `OS-EXT-SRV-ATTR:hostname`.
    pub(super) hostname: String,
    /// 2.26's server tags.
    pub(super) tags: BTreeSet<String>,
    /// When the book was last changed (Nova's `updated`).
    pub(super) updated: Option<Timestamp>,
    /// A delete was accepted (Nova shows task_state `deleting`).
    pub(super) deleting: bool,
    /// Deleted on a soft-delete cloud: listed as `SOFT_DELETED`.
    pub(super) soft_deleted: bool,
}

/// A tenant network or a security group: what the API shows of either.
#[derive(Clone, Debug)]
pub(super) struct SimNamed {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) project_id: String,
    pub(super) description: String,
}

/// A security group rule (neutron-lib api/definitions/security_groups.py).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SimRule {
    pub(super) id: String,
    pub(super) security_group_id: String,
    pub(super) project_id: String,
    /// `ingress` or `egress`.
    pub(super) direction: String,
    /// `IPv4` or `IPv6`.
    pub(super) ethertype: String,
    pub(super) protocol: Option<String>,
    pub(super) port_range_min: Option<u32>,
    pub(super) port_range_max: Option<u32>,
    pub(super) remote_ip_prefix: Option<String>,
    pub(super) remote_group_id: Option<String>,
    pub(super) description: String,
}

impl SimRule {
    /// A rule of `group` with nothing but a direction and an ethertype.
    pub(super) fn open(group: &SimNamed, direction: &str, ethertype: &str) -> SimRule {
        SimRule {
            id: String::new(),
            security_group_id: group.id.clone(),
            project_id: group.project_id.clone(),
            direction: direction.to_owned(),
            ethertype: ethertype.to_owned(),
            protocol: None,
            port_range_min: None,
            port_range_max: None,
            remote_ip_prefix: None,
            remote_group_id: None,
            description: String::new(),
        }
    }

    /// Whether two rules allow the same traffic (ids and descriptions aside),
    /// as neutron/db/securitygroups_db.py `_check_for_duplicate_rules` compares.
    pub(super) fn same_as(&self, other: &SimRule) -> bool {
        SimRule { id: String::new(), description: String::new(), ..self.clone() }
            == SimRule { id: String::new(), description: String::new(), ..other.clone() }
    }
}

#[derive(Clone, Debug)]
pub(super) struct SimPort {
    pub(super) id: String,
    pub(super) project_id: String,
    pub(super) name: String,
    pub(super) description: String,
    pub(super) network_id: String,
    pub(super) mac_address: String,
    pub(super) ip_address: String,
    pub(super) security_groups: Vec<String>,
    /// (ip_address, mac_address); Neutron fills a missing MAC with the port's.
    pub(super) allowed_address_pairs: Vec<(String, String)>,
    /// The Server uid whose Nova server boots with it.
    pub(super) bound_uid: Option<String>,
    /// Made by Nova for a server booted on a network: deleted with it
    /// (nova/network/neutron.py `deallocate_for_instance`: ports without
    /// `preserve_on_delete`).
    pub(super) nova_made: bool,
    pub(super) created: Timestamp,
    pub(super) revision: u64,
}

#[derive(Clone, Debug)]
pub(super) struct SimFloatingIp {
    pub(super) id: String,
    pub(super) project_id: String,
    pub(super) address: String,
    pub(super) network_id: String,
    pub(super) port_id: Option<String>,
    pub(super) description: String,
    pub(super) created: Timestamp,
}

/// A Neutron port, as tests inspect it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PortView {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub network_id: String,
    pub mac_address: String,
    pub ip_address: String,
    pub security_groups: Vec<String>,
    pub allowed_address_pairs: Vec<(String, String)>,
    pub server_uid: Option<String>,
}

/// A floating IP, as tests inspect it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FloatingIpView {
    pub id: String,
    pub project_id: String,
    pub address: String,
    pub network_id: String,
    pub port_id: Option<String>,
}

/// What Nova was last asked to create for a Server uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerView {
    pub server_uid: String,
    /// The Nova id, when the create was answered.
    pub id: Option<String>,
    pub project_id: String,
    pub name: String,
    pub flavor_id: String,
    pub image_id: String,
    pub port_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Decoded from the request's base64.
    pub user_data: Option<Vec<u8>>,
    pub key_name: Option<String>,
}

impl State {
    pub(super) fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// A UUID-shaped id; `kind` keeps ids of different resources apart.
    pub(super) fn next_id(&mut self, kind: u16) -> String {
        let n = self.next_serial();
        format!("5e5e{kind:04x}-0000-4000-8000-{n:012x}")
    }

    pub(super) fn port_views(&self) -> Vec<PortView> {
        self.ports
            .values()
            .map(|p| PortView {
                id: p.id.clone(),
                project_id: p.project_id.clone(),
                name: p.name.clone(),
                network_id: p.network_id.clone(),
                mac_address: p.mac_address.clone(),
                ip_address: p.ip_address.clone(),
                security_groups: p.security_groups.clone(),
                allowed_address_pairs: p.allowed_address_pairs.clone(),
                server_uid: p.bound_uid.clone(),
            })
            .collect()
    }

    pub(super) fn floating_ip_views(&self) -> Vec<FloatingIpView> {
        self.floating_ips
            .values()
            .map(|f| FloatingIpView {
                id: f.id.clone(),
                project_id: f.project_id.clone(),
                address: f.address.clone(),
                network_id: f.network_id.clone(),
                port_id: f.port_id.clone(),
            })
            .collect()
    }

    pub(super) fn server_views(&self) -> Vec<ServerView> {
        self.books
            .iter()
            .map(|(uid, b)| ServerView {
                server_uid: uid.clone(),
                id: b.id.clone(),
                project_id: b.project_id.clone(),
                name: b.name.clone(),
                flavor_id: b.flavor_id.clone(),
                image_id: b.image_id.clone(),
                port_id: b.port_id.clone(),
                metadata: b.metadata.clone(),
                user_data: b.user_data.clone(),
                key_name: b.key_name.clone(),
            })
            .collect()
    }

    /// The name Nova keys a server's addresses by: its port's network's.
    pub(super) fn network_name(&self, network_id: &str) -> String {
        self.networks.get(network_id).map_or_else(|| network_id.to_owned(), |n| n.name.clone())
    }

    /// The id of the one subnet of a network.
    pub(super) fn subnet_id(&self, network_id: &str) -> String {
        self.subnets.get(network_id).cloned().unwrap_or_else(|| format!("{network_id}-subnet"))
    }

    /// The project's `default` security group, made on first use as
    /// Neutron makes it (neutron/db/securitygroups_db.py
    /// `_ensure_default_security_group`).
    pub(super) fn default_group(&mut self, project_id: &str) -> String {
        let existing = self.security_groups.values().find(|g| g.project_id == project_id && g.name == "default");
        if let Some(group) = existing {
            return group.id.clone();
        }
        let id = self.next_id(0x05e6);
        let group = SimNamed {
            id: id.clone(),
            name: "default".into(),
            project_id: project_id.to_owned(),
            description: "Default security group".into(),
        };
        // Its four rules: in from members of the group, out to anywhere,
        // for IPv4 and IPv6 (securitygroups_db.py `create_security_group`
        // with `default_sg`).
        for (direction, ethertype) in [("ingress", "IPv4"), ("ingress", "IPv6"), ("egress", "IPv4"), ("egress", "IPv6")]
        {
            let mut rule = SimRule::open(&group, direction, ethertype);
            if direction == "ingress" {
                rule.remote_group_id = Some(id.clone());
            }
            self.add_rule(rule);
        }
        self.security_groups.insert(id.clone(), group);
        id
    }

    /// Stores a rule under a new id; returns the id.
    pub(super) fn add_rule(&mut self, mut rule: SimRule) -> String {
        rule.id = self.next_id(0x05e7);
        let id = rule.id.clone();
        self.security_group_rules.insert(id.clone(), rule);
        id
    }

    /// A security group's name, as Nova shows a server's groups.
    pub(super) fn group_name(&self, id: &str) -> String {
        self.security_groups.get(id).map_or_else(|| id.to_owned(), |g| g.name.clone())
    }

    /// The floating IP associated with a port, if any.
    pub(super) fn floating_ip_of(&self, port_id: &str) -> Option<&SimFloatingIp> {
        self.floating_ips.on_port(port_id).next()
    }
}

/// Neutron's MAC prefix (`fa:16:3e`), then the port's serial.
pub(super) fn mac_for(n: u64) -> String {
    format!("fa:16:3e:{:02x}:{:02x}:{:02x}", 0x80 | ((n >> 16) & 0x7f), (n >> 8) & 0xff, n & 0xff)
}

pub(super) fn fixed_ip_for(n: u64) -> String {
    format!("172.{}.{}.{}", 16 + ((n >> 16) & 0x0f), (n >> 8) & 0xff, n & 0xff)
}

/// A keypair's fingerprint in Nova's shape (16 colon-separated bytes, as
/// nova/crypto.py `generate_fingerprint` prints an MD5 digest); the bytes
/// are a 128-bit FNV-1a hash of the key, not MD5.
pub(super) fn fingerprint(public_key: &str) -> String {
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for byte in public_key.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    hash.to_be_bytes().iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// The Nova id of a model server: a UUID, as Nova's ids are (the model's
/// own ids are `sim-<hex>`).
pub(super) fn nova_id(model_id: &str) -> String {
    match model_id.strip_prefix("sim-").and_then(|hex| u64::from_str_radix(hex, 16).ok()) {
        Some(n) => format!("{NOVA_ID_PREFIX}{n:012x}"),
        None => model_id.to_owned(),
    }
}

/// The model's id of a Nova id: [`nova_id`] undone.
pub(super) fn model_id(nova_id: &str) -> String {
    match nova_id.strip_prefix(NOVA_ID_PREFIX).and_then(|hex| u64::from_str_radix(hex, 16).ok()) {
        Some(n) => format!("sim-{n:08x}"),
        None => nova_id.to_owned(),
    }
}

/// The fixed head of the Nova ids of the model's servers.
const NOVA_ID_PREFIX: &str = "5e5e5e5e-0000-4000-8000-";

pub(super) fn floating_ip_for(n: u64) -> String {
    format!("100.{}.{}.{}", 64 + ((n >> 16) & 0x3f), (n >> 8) & 0xff, n & 0xff)
}

/// `2024-05-01T10:00:00Z`: Nova's `created`, Neutron's `created_at`.
pub(super) fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `2024-05-01T10:00:05.000000`: Nova's `OS-SRV-USG:launched_at` (naive UTC).
pub(super) fn naive_utc(t: Timestamp) -> String {
    let micros = t.subsec_microsecond();
    format!("{}.{micros:06}", t.strftime("%Y-%m-%dT%H:%M:%S"))
}

/// Keystone's `expires_at`: `2024-05-01T11:00:00.000000Z`.
pub(super) fn keystone_time(t: Timestamp) -> String {
    format!("{}Z", naive_utc(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_shapes() {
        let t: Timestamp = "2024-05-01T10:00:05.25Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(rfc3339(t), "2024-05-01T10:00:05Z");
        assert_eq!(naive_utc(t), "2024-05-01T10:00:05.250000");
        assert_eq!(keystone_time(t), "2024-05-01T10:00:05.250000Z");
    }

    #[test]
    fn generated_addresses() {
        assert_eq!(mac_for(1), "fa:16:3e:80:00:01");
        assert_eq!(fixed_ip_for(258), "172.16.1.2");
        assert_eq!(floating_ip_for(3), "100.64.0.3");
        let mut state = State::default();
        assert_eq!(state.next_id(1), "5e5e0001-0000-4000-8000-000000000001");
    }
}
