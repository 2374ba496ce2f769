//! Ports and floating IPs by ID, with the lookups Neutron answers from its
//! database indexes (a port by name or by its fixed address, a floating IP
//! by its port) kept beside them, so a request costs what it reads, not
//! every port of the cloud: at 30,000 Servers a scan per request made the
//! simulator, not the operator, the bench's bottleneck.
//!
//! Iteration stays in ID order, as before, so every answer is the same.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::state::{SimFloatingIp, SimPort};

/// Something kept by its ID.
pub(crate) trait Identified {
    fn id(&self) -> &str;
}

impl Identified for SimPort {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Identified for SimFloatingIp {
    fn id(&self) -> &str {
        &self.id
    }
}

/// Every port, by ID.
#[derive(Debug, Default)]
pub(crate) struct Ports {
    by_id: BTreeMap<String, SimPort>,
    by_name: HashMap<String, BTreeSet<String>>,
    /// (network ID, fixed IP) -> port ID.
    by_address: HashMap<(String, String), String>,
    /// The ports Nova made (it deletes them with their server).
    nova_made: BTreeSet<String>,
}

impl Ports {
    pub(crate) fn get(&self, id: &str) -> Option<&SimPort> {
        self.by_id.get(id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &SimPort> {
        self.by_id.values()
    }

    /// The ports named `name`, in ID order.
    pub(crate) fn named<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a SimPort> + use<'a> {
        self.by_name.get(name).into_iter().flatten().filter_map(|id| self.by_id.get(id))
    }

    /// The ports Nova made, in ID order.
    pub(crate) fn nova_made(&self) -> impl Iterator<Item = &SimPort> {
        self.nova_made.iter().filter_map(|id| self.by_id.get(id))
    }

    /// Whether a port on `network_id` holds `ip`.
    pub(crate) fn holds_address(&self, network_id: &str, ip: &str) -> bool {
        self.by_address.contains_key(&(network_id.to_owned(), ip.to_owned()))
    }

    pub(crate) fn insert(&mut self, port: SimPort) {
        self.remove(&port.id);
        self.by_name.entry(port.name.clone()).or_default().insert(port.id.clone());
        self.by_address.insert((port.network_id.clone(), port.ip_address.clone()), port.id.clone());
        if port.nova_made {
            self.nova_made.insert(port.id.clone());
        }
        self.by_id.insert(port.id.clone(), port);
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<SimPort> {
        let port = self.by_id.remove(id)?;
        self.nova_made.remove(id);
        if let Some(ids) = self.by_name.get_mut(&port.name) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_name.remove(&port.name);
            }
        }
        let address = (port.network_id.clone(), port.ip_address.clone());
        if self.by_address.get(&address).is_some_and(|holder| holder == id) {
            self.by_address.remove(&address);
        }
        Some(port)
    }

    /// Changes the port `id` and keeps the lookups true; `None` when there
    /// is none.
    pub(crate) fn update<T>(&mut self, id: &str, change: impl FnOnce(&mut SimPort) -> T) -> Option<T> {
        let mut port = self.remove(id)?;
        let answer = change(&mut port);
        self.insert(port);
        Some(answer)
    }
}

/// Every floating IP, by ID.
#[derive(Debug, Default)]
pub(crate) struct FloatingIps {
    by_id: BTreeMap<String, SimFloatingIp>,
    by_port: HashMap<String, BTreeSet<String>>,
    by_description: HashMap<String, BTreeSet<String>>,
}

impl FloatingIps {
    pub(crate) fn get(&self, id: &str) -> Option<&SimFloatingIp> {
        self.by_id.get(id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &SimFloatingIp> {
        self.by_id.values()
    }

    /// The floating IPs associated with `port_id`, in ID order.
    pub(crate) fn on_port<'a>(&'a self, port_id: &str) -> impl Iterator<Item = &'a SimFloatingIp> + use<'a> {
        self.by_port.get(port_id).into_iter().flatten().filter_map(|id| self.by_id.get(id))
    }

    /// The floating IPs whose description is exactly `description`, in ID order.
    pub(crate) fn described<'a>(&'a self, description: &str) -> impl Iterator<Item = &'a SimFloatingIp> + use<'a> {
        self.by_description.get(description).into_iter().flatten().filter_map(|id| self.by_id.get(id))
    }

    pub(crate) fn insert(&mut self, ip: SimFloatingIp) {
        self.remove(&ip.id);
        if let Some(port_id) = &ip.port_id {
            self.by_port.entry(port_id.clone()).or_default().insert(ip.id.clone());
        }
        self.by_description.entry(ip.description.clone()).or_default().insert(ip.id.clone());
        self.by_id.insert(ip.id.clone(), ip);
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<SimFloatingIp> {
        let ip = self.by_id.remove(id)?;
        if let Some(port_id) = &ip.port_id {
            unfile(&mut self.by_port, port_id, id);
        }
        unfile(&mut self.by_description, &ip.description, id);
        Some(ip)
    }

    /// Changes the floating IP `id` and keeps the lookups true.
    pub(crate) fn update<T>(&mut self, id: &str, change: impl FnOnce(&mut SimFloatingIp) -> T) -> Option<T> {
        let mut ip = self.remove(id)?;
        let answer = change(&mut ip);
        self.insert(ip);
        Some(answer)
    }

    /// Leaves every floating IP on `port_id` allocated and unassociated.
    pub(crate) fn disassociate(&mut self, port_id: &str) {
        let ids: Vec<String> = self.by_port.remove(port_id).into_iter().flatten().collect();
        for id in ids {
            if let Some(ip) = self.by_id.get_mut(&id) {
                ip.port_id = None;
            }
        }
    }
}

/// Takes `id` out of the lookup entry `key`, and the entry once empty.
fn unfile(lookup: &mut HashMap<String, BTreeSet<String>>, key: &str, id: &str) {
    if let Some(ids) = lookup.get_mut(key) {
        ids.remove(id);
        if ids.is_empty() {
            lookup.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(id: &str, name: &str, ip: &str) -> SimPort {
        SimPort {
            id: id.into(),
            project_id: "p".into(),
            name: name.into(),
            description: String::new(),
            network_id: "n".into(),
            mac_address: String::new(),
            ip_address: ip.into(),
            security_groups: Vec::new(),
            allowed_address_pairs: Vec::new(),
            bound_uid: None,
            nova_made: false,
            created: jiff::Timestamp::UNIX_EPOCH,
            revision: 0,
        }
    }

    fn ip(id: &str, port: Option<&str>) -> SimFloatingIp {
        SimFloatingIp {
            id: id.into(),
            project_id: "p".into(),
            address: String::new(),
            network_id: "external".into(),
            port_id: port.map(Into::into),
            description: String::new(),
            created: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn ids<'a>(found: impl Iterator<Item = &'a SimPort>) -> Vec<&'a str> {
        found.map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn port_lookups_follow_every_change() {
        let mut ports = Ports::default();
        ports.insert(port("b", "server-a", "172.16.0.2"));
        ports.insert(port("a", "server-a", "172.16.0.1"));
        assert_eq!(ids(ports.named("server-a")), ["a", "b"], "in ID order");
        assert!(ports.holds_address("n", "172.16.0.1"));
        ports.update("a", |p| p.name = "server-z".into());
        assert_eq!(ids(ports.named("server-a")), ["b"]);
        assert_eq!(ids(ports.named("server-z")), ["a"]);
        assert!(ports.holds_address("n", "172.16.0.1"), "renaming keeps the address");
        ports.remove("a");
        assert!(!ports.holds_address("n", "172.16.0.1"));
        assert_eq!(ids(ports.named("server-z")), Vec::<&str>::new());
        assert_eq!(ports.update("a", |_| ()), None);
        assert_eq!(ids(ports.values()), ["b"]);
        ports.insert(SimPort { nova_made: true, ..port("c", "", "172.16.0.3") });
        assert_eq!(ids(ports.nova_made()), ["c"]);
        ports.remove("c");
        assert_eq!(ids(ports.nova_made()), Vec::<&str>::new());
    }

    #[test]
    fn floating_ips_are_found_by_their_port_until_it_goes() {
        let mut ips = FloatingIps::default();
        ips.insert(ip("f2", Some("port-1")));
        ips.insert(ip("f1", Some("port-1")));
        ips.insert(ip("f3", None));
        let on = |ips: &FloatingIps, port: &str| ips.on_port(port).map(|f| f.id.clone()).collect::<Vec<_>>();
        assert_eq!(on(&ips, "port-1"), ["f1", "f2"]);
        ips.update("f2", |f| f.port_id = Some("port-2".into()));
        assert_eq!(on(&ips, "port-2"), ["f2"]);
        ips.disassociate("port-1");
        assert!(on(&ips, "port-1").is_empty());
        assert_eq!(ips.get("f1").and_then(|f| f.port_id.clone()), None, "kept, unassociated");
        ips.remove("f2");
        assert!(on(&ips, "port-2").is_empty());
        assert_eq!(ips.values().count(), 2);
    }

    #[test]
    fn floating_ips_are_found_by_their_exact_description_until_it_changes() {
        let mut ips = FloatingIps::default();
        let described = |id: &str, description: &str| SimFloatingIp { description: description.into(), ..ip(id, None) };
        ips.insert(described("f2", "Server ns/a"));
        ips.insert(described("f1", "Server ns/a"));
        ips.insert(described("f3", "Server ns/ab"));
        let found = |ips: &FloatingIps, d: &str| ips.described(d).map(|f| f.id.clone()).collect::<Vec<_>>();
        assert_eq!(found(&ips, "Server ns/a"), ["f1", "f2"]);
        ips.update("f1", |f| f.description = "Server ns/b".into());
        assert_eq!(found(&ips, "Server ns/a"), ["f2"]);
        assert_eq!(found(&ips, "Server ns/b"), ["f1"]);
        ips.remove("f2");
        assert!(found(&ips, "Server ns/a").is_empty());
        assert_eq!(found(&ips, "Server ns/ab"), ["f3"]);
    }
}
