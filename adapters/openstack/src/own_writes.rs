//! What Neutron answered this leadership term's own writes of a Server's
//! port: the port as its create returned it (made with the server), and the
//! floating IP as its create returned it. The pass that follows a create
//! reads the port it just made; within [`OWN_WRITES_TRUSTED_FOR`] these
//! answers are that read (`NetworkingSource::OwnWrites`), so a Server's
//! first passes cost no port or floating-IP list. They say what the port
//! carries, bound to the server the create made (not that the server is
//! still there): on a listed view of that server the core changes the port
//! as one read bound to it.
//!
//! Anything else that touches the port ends what is known of it: a write
//! that failed (a 409 says another floating IP is there), an update or a
//! release (their answers are not kept), a delete of the server or a new
//! create. A new term starts empty.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use server_core::port::{AttachedResource, FloatingIp, IdentityContext, ServerPort};

/// How long a write's answer stands for a read: past the create-to-boot
/// time of real clouds (the pass that reads the port follows the boot), far
/// below the resync that reads every port again.
pub(crate) const OWN_WRITES_TRUSTED_FOR: Duration = Duration::from_secs(10 * 60);

/// (identity, project): one project's writes.
type ProjectKey = (String, String);

/// A Server's uid, one copy shared by the maps that name it.
type Uid = Arc<str>;

/// The term's own port writes, per Server.
#[derive(Debug)]
pub(crate) struct OwnPortWrites {
    trusted_for: Duration,
    state: Mutex<State>,
}

/// Per project, so each Server's entries hold its uid and IDs alone.
#[derive(Debug, Default)]
struct State {
    projects: HashMap<ProjectKey, Project>,
}

///
/// A project holds an entry per Server created in the last
/// [`OWN_WRITES_TRUSTED_FOR`]: the maps share each uid and box each answer,
/// so their slots stay small (at 100,000 Servers they are tens of MB).
#[derive(Debug, Default)]
struct Project {
    /// By Server uid.
    ports: HashMap<Uid, Box<Written>>,
    /// Port or floating-IP ID -> the Server uid whose known port is or
    /// carries it, so a release finds it without a scan.
    by_resource: HashMap<Box<str>, Uid>,
    /// Uids in the order they were noted, to drop what has expired when the
    /// project notes another (an expired answer is never read: `port_of`).
    noted: VecDeque<(Instant, Uid)>,
}

impl Project {
    fn insert(&mut self, uid: Uid, written: Box<Written>) {
        self.remove(&uid);
        self.by_resource.insert(written.port.id.as_str().into(), uid.clone());
        if let Some(ip) = &written.port.floating_ip {
            self.by_resource.insert(ip.id.as_str().into(), uid.clone());
        }
        self.ports.insert(uid, written);
    }

    fn remove(&mut self, uid: &str) -> Option<Box<Written>> {
        let written = self.ports.remove(uid)?;
        let ids = std::iter::once(&written.port.id).chain(written.port.floating_ip.as_ref().map(|ip| &ip.id));
        for id in ids {
            if self.by_resource.get(id.as_str()).is_some_and(|held| &**held == uid) {
                self.by_resource.remove(id.as_str());
            }
        }
        Some(written)
    }

    /// Drops the answers older than `trusted_for` at `now`.
    fn expire(&mut self, now: Instant, trusted_for: Duration) {
        while let Some((at, _)) = self.noted.front() {
            if now.saturating_duration_since(*at) < trusted_for {
                break;
            }
            if let Some((at, old)) = self.noted.pop_front()
                && self.ports.get(&old).is_some_and(|written| written.at == at)
            {
                self.remove(&old);
            }
        }
    }
}

#[derive(Debug)]
struct Written {
    /// The server the port was made for.
    server_id: String,
    port: ServerPort,
    at: Instant,
}

fn project_key(identity: &IdentityContext) -> ProjectKey {
    (identity.identity_id.clone(), identity.project_id.clone())
}

impl Default for OwnPortWrites {
    fn default() -> Self {
        OwnPortWrites::trusted_for(OWN_WRITES_TRUSTED_FOR)
    }
}

impl OwnPortWrites {
    pub(crate) fn trusted_for(trusted_for: Duration) -> Self {
        OwnPortWrites { trusted_for, state: Mutex::default() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Maps changed in single statements: a panic cannot tear them.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The port `server_id` was made with, as Neutron answered its create.
    pub(crate) fn note_created(&self, identity: &IdentityContext, uid: &str, server_id: &str, port: ServerPort) {
        self.note_created_at(Instant::now(), identity, uid, server_id, port);
    }

    fn note_created_at(&self, now: Instant, identity: &IdentityContext, uid: &str, server_id: &str, port: ServerPort) {
        let mut state = self.state();
        let project = state.projects.entry(project_key(identity)).or_default();
        project.expire(now, self.trusted_for);
        let uid: Uid = Arc::from(uid);
        project.noted.push_back((now, uid.clone()));
        project.insert(uid, Box::new(Written { server_id: server_id.to_owned(), port, at: now }));
    }

    /// A floating IP Neutron made on the Server's known port.
    pub(crate) fn note_floating_ip(&self, identity: &IdentityContext, uid: &str, port_id: &str, ip: FloatingIp) {
        let mut state = self.state();
        let Some(project) = state.projects.get_mut(&project_key(identity)) else { return };
        let Some(uid) = project.ports.get_key_value(uid).map(|(known, _)| known.clone()) else { return };
        if let Some(mut written) = project.remove(&uid)
            && written.port.id == port_id
        {
            written.port.floating_ip = Some(ip);
            project.insert(uid, written);
        }
    }

    /// Nothing is known of the Server's port any more.
    pub(crate) fn forget(&self, identity: &IdentityContext, uid: &str) {
        if let Some(project) = self.state().projects.get_mut(&project_key(identity)) {
            project.remove(uid);
        }
    }

    /// Nothing is known any more of a port that is, or carries, `resource`.
    pub(crate) fn forget_resource(&self, identity: &IdentityContext, resource: &AttachedResource) {
        let mut state = self.state();
        let Some(project) = state.projects.get_mut(&project_key(identity)) else { return };
        if let Some(uid) = project.by_resource.get(resource.id()).cloned() {
            project.remove(&uid);
        }
    }

    /// The port `server_id` of the Server was made with, and the floating IP
    /// made on it, while their answers stand.
    pub(crate) fn port_of(&self, identity: &IdentityContext, uid: &str, server_id: &str) -> Option<ServerPort> {
        self.port_of_at(Instant::now(), identity, uid, server_id)
    }

    fn port_of_at(&self, now: Instant, identity: &IdentityContext, uid: &str, server_id: &str) -> Option<ServerPort> {
        let state = self.state();
        let written = state.projects.get(&project_key(identity))?.ports.get(uid)?;
        let fresh = now.saturating_duration_since(written.at) < self.trusted_for;
        (written.server_id == server_id && fresh).then(|| written.port.clone())
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        let state = self.state();
        let mut held = 0;
        for project in state.projects.values() {
            let resources =
                project.ports.values().map(|w| 1 + usize::from(w.port.floating_ip.is_some())).sum::<usize>();
            assert_eq!(
                project.by_resource.len(),
                resources,
                "every known port and floating IP is indexed, nothing else"
            );
            held += project.ports.len();
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(project: &str) -> IdentityContext {
        IdentityContext { identity_id: "identity-1".into(), project_id: project.into(), ..IdentityContext::default() }
    }

    fn port(id: &str) -> ServerPort {
        ServerPort { id: id.into(), security_groups: vec!["g1".into()], ..ServerPort::default() }
    }

    fn ip(id: &str) -> FloatingIp {
        FloatingIp { id: id.into(), address: Some("203.0.113.7".into()) }
    }

    #[test]
    fn a_created_port_answers_for_its_own_server_only() {
        let writes = OwnPortWrites::default();
        let (a, b) = (identity("p1"), identity("p2"));
        writes.note_created(&a, "uid-1", "vm-1", port("port-1"));
        assert_eq!(writes.port_of(&a, "uid-1", "vm-1"), Some(port("port-1")));
        assert_eq!(writes.port_of(&a, "uid-1", "vm-2"), None, "another server of the Server");
        assert_eq!(writes.port_of(&b, "uid-1", "vm-1"), None, "another project");
        assert_eq!(writes.port_of(&a, "uid-2", "vm-1"), None, "another Server");
    }

    #[test]
    fn a_floating_ip_made_on_the_port_joins_it_and_a_release_ends_it() {
        let writes = OwnPortWrites::default();
        let a = identity("p1");
        writes.note_created(&a, "uid-1", "vm-1", port("port-1"));
        writes.note_floating_ip(&a, "uid-1", "port-1", ip("fip-1"));
        let known = writes.port_of(&a, "uid-1", "vm-1").and_then(|port| port.floating_ip);
        assert_eq!(known, Some(ip("fip-1")));
        writes.forget_resource(&identity("p2"), &AttachedResource::FloatingIp { id: "fip-1".into() });
        assert!(writes.port_of(&a, "uid-1", "vm-1").is_some(), "another project's release");
        assert_eq!(writes.held(), 1);
        writes.forget_resource(&a, &AttachedResource::FloatingIp { id: "fip-1".into() });
        assert_eq!(writes.port_of(&a, "uid-1", "vm-1"), None);
        assert_eq!(writes.held(), 0);
        writes.note_created(&a, "uid-2", "vm-2", port("port-2"));
        writes.forget_resource(&a, &AttachedResource::Port { id: "port-2".into() });
        assert_eq!(writes.held(), 0, "a released port");
    }

    #[test]
    fn a_floating_ip_on_another_port_or_a_failed_write_ends_what_is_known() {
        let writes = OwnPortWrites::default();
        let a = identity("p1");
        writes.note_created(&a, "uid-1", "vm-1", port("port-1"));
        writes.note_floating_ip(&a, "uid-1", "port-9", ip("fip-1"));
        assert_eq!(writes.port_of(&a, "uid-1", "vm-1"), None);
        writes.note_created(&a, "uid-1", "vm-1", port("port-1"));
        writes.forget(&a, "uid-1");
        assert_eq!(writes.port_of(&a, "uid-1", "vm-1"), None);
    }

    #[test]
    fn answers_expire_and_expired_ones_are_dropped_as_new_ones_come() {
        let writes = OwnPortWrites::trusted_for(Duration::from_secs(60));
        let a = identity("p1");
        let start = Instant::now();
        let after = |secs| start + Duration::from_secs(secs);
        writes.note_created_at(start, &a, "uid-1", "vm-1", port("port-1"));
        writes.note_created_at(start, &a, "uid-2", "vm-2", port("port-2"));
        assert!(writes.port_of_at(after(59), &a, "uid-1", "vm-1").is_some());
        assert_eq!(writes.port_of_at(after(60), &a, "uid-1", "vm-1"), None, "as old as the trust");
        writes.note_created_at(after(60), &a, "uid-3", "vm-3", port("port-3"));
        assert_eq!(writes.held(), 1, "the expired answers went as a new one came");
        // A Server created again: its newer answer stays past the older note.
        writes.note_created_at(after(70), &a, "uid-1", "vm-1", port("port-1"));
        writes.note_created_at(after(100), &a, "uid-1", "vm-4", port("port-4"));
        writes.note_created_at(after(135), &a, "uid-5", "vm-5", port("port-5"));
        assert_eq!(writes.port_of_at(after(135), &a, "uid-1", "vm-4"), Some(port("port-4")));
        assert_eq!(writes.held(), 2, "uid-1's newer answer and uid-5's");
    }
}
