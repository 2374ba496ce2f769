//! Which Nova servers belong to which Server, per identity, from the last
//! complete list of the project's servers, so a lookup never lists Nova per
//! Server (issue 16: one full list per Server made the OpenStack path
//! quadratic).
//!
//! Nova cannot filter servers by metadata, so a uid is found by listing.
//! A complete list that started at tick `L` and did not show a uid proves
//! that no server tied to it existed at `L`. Since then only this process
//! could have made one (the uid is ours): a create it issued is marked
//! uncertain at tick `U` before it is sent and settled when its answer
//! names the new server. So the uid is authoritatively absent while
//! `U < L` (or it was never marked); otherwise one new list, shared by
//! every caller waiting on the identity, decides. A list with down-cell
//! records (microversion >= 2.69) proves nothing about absence.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use server_core::port::IdentityContext;

use crate::mapping::NovaServer;

/// What the index can say about a uid without asking Nova.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Known {
    /// Nova ids last known to carry the uid, oldest first: read them to confirm.
    Ids(Vec<String>),
    /// No server carries the uid.
    Absent,
    /// Only a new complete list can tell.
    MustList,
}

/// The index of every identity the adapter has served.
#[derive(Debug, Default)]
pub(crate) struct ServerIndex {
    ticks: AtomicU64,
    projects: Mutex<HashMap<String, Arc<Project>>>,
}

/// One identity's servers, and the lock one list at a time is taken under.
#[derive(Debug, Default)]
pub(crate) struct Project {
    state: Mutex<ProjectState>,
    pub(crate) listing: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug, Default)]
struct ProjectState {
    by_uid: HashMap<String, Entry>,
    /// Servers the Go controller made and no Server has adopted yet, by the
    /// Server name it recorded (`serverID`).
    go_made: HashMap<String, Vec<String>>,
    /// Start tick of the last complete list.
    listed: Option<u64>,
    /// When the last complete list ended.
    listed_at: Option<Instant>,
    /// That list held records of a Nova cell that did not answer.
    down_cells: usize,
    /// uid -> tick of its last create with an unknown answer.
    uncertain: HashMap<String, u64>,
    /// uid -> when its server booted, as a read of this term showed it.
    /// Never cleared in the term: a boot stays a fact when the server goes.
    booted: HashMap<String, Timestamp>,
}

/// What the index keeps of one listed server: a list's servers are read
/// page by page and kept as these, never whole (a Nova server's record is
/// kilobytes; a list of 10,000 held them all at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    id: String,
    created: Option<String>,
    owner: Owner,
}

/// Whose a listed server is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owner {
    /// A record of a Nova cell that did not answer: whose cannot be told.
    DownCell,
    /// A Server's, by its uid.
    Server(String),
    /// The Go controller's, by the Server name it recorded.
    GoMade(String),
    /// Neither's.
    Other,
}

impl Listed {
    pub(crate) fn of(server: &NovaServer) -> Self {
        let owner = if server.down_cell() {
            Owner::DownCell
        } else if let Some(uid) = server.server_uid() {
            Owner::Server(uid.to_owned())
        } else if let Some(name) = server.go_server_name() {
            Owner::GoMade(name.to_owned())
        } else {
            Owner::Other
        };
        Listed { id: server.id.clone(), created: server.created.clone(), owner }
    }
}

#[derive(Debug, Default)]
struct Entry {
    ids: Vec<String>,
    /// When this process last learnt an id: a list that started earlier
    /// cannot have seen it, so does not erase it.
    learnt: u64,
}

impl ServerIndex {
    pub(crate) fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn project(&self, identity: &IdentityContext) -> Arc<Project> {
        let key = format!("{}\n{}", identity.identity_id, identity.project_id);
        let mut projects = self.projects.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        projects.entry(key).or_default().clone()
    }
}

impl Project {
    fn state(&self) -> MutexGuard<'_, ProjectState> {
        // Plain maps updated in single statements: a panic cannot tear them.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn known(&self, uid: &str) -> Known {
        let state = self.state();
        if let Some(entry) = state.by_uid.get(uid).filter(|e| !e.ids.is_empty()) {
            return Known::Ids(entry.ids.clone());
        }
        match state.listed {
            Some(listed) if state.down_cells == 0 && state.uncertain.get(uid).is_none_or(|&u| u < listed) => {
                Known::Absent
            }
            _ => Known::MustList,
        }
    }

    /// Whether a complete list ended less than `gap` ago.
    pub(crate) fn listed_within(&self, gap: Duration) -> bool {
        self.state().listed_at.is_some_and(|at| at.elapsed() < gap)
    }

    /// Records of a Nova cell that did not answer in the last list.
    pub(crate) fn down_cells(&self) -> usize {
        self.state().down_cells
    }

    /// Replaces what is known by a complete list that started at `started`.
    pub(crate) fn record_list(&self, started: u64, mut servers: Vec<Listed>) {
        let mut state = self.state();
        let mut by_uid: HashMap<String, Entry> = HashMap::new();
        let mut go_made: HashMap<String, Vec<String>> = HashMap::new();
        let mut down_cells = 0;
        servers.sort_by(|a, b| (a.created.as_deref(), &a.id).cmp(&(b.created.as_deref(), &b.id)));
        for server in servers {
            match server.owner {
                Owner::DownCell => down_cells += 1,
                Owner::Server(uid) => by_uid.entry(uid).or_default().ids.push(server.id),
                Owner::GoMade(name) => go_made.entry(name).or_default().push(server.id),
                Owner::Other => {}
            }
        }
        for (uid, entry) in state.by_uid.drain() {
            if entry.learnt >= started {
                let kept = by_uid.entry(uid).or_default();
                for id in entry.ids {
                    if !kept.ids.contains(&id) {
                        kept.ids.push(id);
                    }
                }
                kept.learnt = entry.learnt;
            }
        }
        state.by_uid = by_uid;
        state.go_made = go_made;
        state.down_cells = down_cells;
        state.listed = Some(state.listed.map_or(started, |l| l.max(started)));
        state.listed_at = Some(Instant::now());
        // Marks older than the list are answered by it.
        state.uncertain.retain(|_, marked| *marked >= started);
    }

    /// Takes in a list of the changes since a time, started at `started`:
    /// the servers it shows are learnt, and nothing else is concluded (it
    /// proves no absence; a server it shows deleted stays known until a read
    /// of it answers 404, as any id the index holds).
    pub(crate) fn record_changes(&self, started: u64, servers: Vec<Listed>) {
        for server in servers {
            if let Owner::Server(uid) = server.owner {
                self.remember(&uid, &server.id, started);
            }
        }
    }

    pub(crate) fn remember(&self, uid: &str, id: &str, tick: u64) {
        let mut state = self.state();
        let entry = state.by_uid.entry(uid.to_owned()).or_default();
        if !entry.ids.iter().any(|known| known == id) {
            entry.ids.push(id.to_owned());
        }
        entry.learnt = entry.learnt.max(tick);
        for ids in state.go_made.values_mut() {
            ids.retain(|known| known != id);
        }
    }

    /// Nova said `id` is gone (404) or is not the uid's.
    pub(crate) fn forget(&self, uid: &str, id: &str) {
        let mut state = self.state();
        if let Some(entry) = state.by_uid.get_mut(uid) {
            entry.ids.retain(|known| known != id);
        }
    }

    /// A create for `uid` is about to be sent (or its answer was lost).
    pub(crate) fn mark_uncertain(&self, uid: &str, tick: u64) {
        self.state().uncertain.insert(uid.to_owned(), tick);
    }

    /// A create for `uid` was answered with the server's id.
    pub(crate) fn settle(&self, uid: &str) {
        self.state().uncertain.remove(uid);
    }

    /// A read showed the uid's server booted at `at` (its launch, or when
    /// read); the first boot read is kept.
    pub(crate) fn record_boot(&self, uid: &str, at: Timestamp) {
        let mut state = self.state();
        if !state.booted.contains_key(uid) {
            state.booted.insert(uid.to_owned(), at);
        }
    }

    /// Whether the uid's server booted, as a read of this term showed.
    pub(crate) fn boot_read(&self, uid: &str) -> Option<Timestamp> {
        self.state().booted.get(uid).copied()
    }

    /// Go-made servers that recorded `server_name`, not adopted yet.
    pub(crate) fn go_made(&self, server_name: &str) -> Vec<String> {
        self.state().go_made.get(server_name).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::NovaMetadata;

    fn server(id: &str, metadata: &[(&str, &str)]) -> NovaServer {
        let metadata = NovaMetadata::from_pairs(metadata.iter().map(|(k, v)| (*k, (*v).to_owned())));
        NovaServer { id: id.into(), status: "ACTIVE".into(), metadata, ..NovaServer::default() }
    }

    #[test]
    fn a_list_decides_absence_until_a_later_create_is_in_doubt() {
        let index = ServerIndex::default();
        let project = index.project(&IdentityContext::default());
        assert_eq!(project.known("u1"), Known::MustList);
        let started = index.tick();
        project.record_list(started, vec![Listed::of(&server("a", &[("unikorn:server-uid", "u1")]))]);
        assert_eq!(project.known("u1"), Known::Ids(vec!["a".into()]));
        assert_eq!(project.known("u2"), Known::Absent);
        project.mark_uncertain("u2", index.tick());
        assert_eq!(project.known("u2"), Known::MustList);
        project.remember("u2", "b", index.tick());
        project.settle("u2");
        assert_eq!(project.known("u2"), Known::Ids(vec!["b".into()]));
        project.forget("u1", "a");
        assert_eq!(project.known("u1"), Known::Absent);
    }

    #[test]
    fn a_list_that_started_before_a_create_keeps_what_the_create_taught() {
        let index = ServerIndex::default();
        let project = index.project(&IdentityContext::default());
        let started = index.tick();
        project.mark_uncertain("u1", index.tick());
        project.remember("u1", "new", index.tick());
        project.record_list(started, Vec::new());
        assert_eq!(project.known("u1"), Known::Ids(vec!["new".into()]));
        // The mark is younger than the list: absence stays in doubt.
        project.forget("u1", "new");
        assert_eq!(project.known("u1"), Known::MustList);
    }

    #[test]
    fn down_cells_make_absence_unknowable_and_go_made_servers_are_kept_by_name() {
        let index = ServerIndex::default();
        let project = index.project(&IdentityContext::default());
        let down = NovaServer { id: "d".into(), status: "UNKNOWN".into(), ..NovaServer::default() };
        let go = server("g", &[("serverID", "web"), ("organizationID", "o")]);
        project.record_list(index.tick(), vec![Listed::of(&down), Listed::of(&go)]);
        assert_eq!(project.known("u1"), Known::MustList);
        assert_eq!(project.down_cells(), 1);
        assert_eq!(project.go_made("web"), vec!["g".to_owned()]);
        project.remember("u1", "g", index.tick());
        assert!(project.go_made("web").is_empty());
    }
}
