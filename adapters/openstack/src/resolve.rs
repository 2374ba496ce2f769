//! Neutron IDs of the networks and security groups a Server names by their
//! Kubernetes resource names. The unikorn controllers that provision them
//! name the Neutron network `network-<Network name>` and the security group
//! `securitygroup-<SecurityGroup name>` (uni-region, openstack/network.go),
//! so that is how they are found, as the Go Server controller finds them.
//!
//! Both lists are read once per identity and kept: names do not move between
//! IDs. A name not in the kept lists triggers one refresh (shared by
//! concurrent callers); if it is still missing, the resource may still be
//! provisioning: a wait, not a refusal, and that name triggers no other
//! refresh for [`REFRESH_MIN`], however many Servers wait for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use server_core::port::{CloudError, IdentityContext};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::client::Session;
use crate::mapping::ResolvedNetworking;
use crate::network::{self as neutron, Named};

/// A refresh to find a missing name happens at most this often per identity.
const REFRESH_MIN: Duration = Duration::from_secs(10);

pub(crate) fn network_name(network: &str) -> String {
    format!("network-{network}")
}

pub(crate) fn security_group_name(group: &str) -> String {
    format!("securitygroup-{group}")
}

/// Name caches per identity.
#[derive(Debug, Default)]
pub(crate) struct NeutronNames {
    slots: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Snapshot>>>;

#[derive(Debug)]
struct Snapshot {
    networks: HashMap<String, String>,
    security_groups: HashMap<String, String>,
    /// Names a refresh did not find, and when.
    missing: HashMap<String, Instant>,
}

impl Snapshot {
    /// The IDs of `groups`, or the Neutron name of the first one missing.
    fn groups(&self, groups: &[String]) -> Result<Vec<String>, String> {
        groups
            .iter()
            .map(|group| {
                let name = security_group_name(group);
                self.security_groups.get(&name).cloned().ok_or(name)
            })
            .collect()
    }

    fn resolve(&self, network: &str, known: Option<&str>, groups: &[String]) -> Result<ResolvedNetworking, String> {
        let network_id = match known {
            Some(id) => id.to_owned(),
            None => self.networks.get(&network_name(network)).ok_or_else(|| network_name(network))?.clone(),
        };
        let mut security_group_ids = Vec::with_capacity(groups.len());
        for group in groups {
            let name = security_group_name(group);
            security_group_ids.push(self.security_groups.get(&name).ok_or(name)?.clone());
        }
        Ok(ResolvedNetworking { network_id, security_group_ids })
    }
}

impl NeutronNames {
    /// The Neutron IDs of `network` and `groups` (Kubernetes names) as the
    /// identity's project sees them; the network's is `known` when its
    /// Network's status records it (no lookup by name then).
    pub(crate) async fn resolve(
        &self,
        session: &Session<'_>,
        network: &str,
        known: Option<&str>,
        groups: &[String],
    ) -> Result<ResolvedNetworking, CloudError> {
        let slot = self.slot(session.identity);
        let mut cached = slot.lock().await;
        if let Some(snapshot) = cached.as_ref() {
            match snapshot.resolve(network, known, groups) {
                Ok(resolved) => return Ok(resolved),
                Err(name) if snapshot.missing.get(&name).is_some_and(|at| at.elapsed() < REFRESH_MIN) => {
                    return Err(not_ready(&name, session.identity));
                }
                Err(_) => {}
            }
        }
        let mut snapshot = fetch(session).await?;
        if let Some(previous) = cached.take() {
            snapshot.missing = previous.missing;
            snapshot.missing.retain(|_, at| at.elapsed() < REFRESH_MIN);
        }
        let resolved = snapshot.resolve(network, known, groups);
        if let Err(name) = &resolved {
            snapshot.missing.insert(name.clone(), Instant::now());
        }
        *cached = Some(snapshot);
        resolved.map_err(|name| not_ready(&name, session.identity))
    }

    /// The Neutron IDs of `groups` (Kubernetes names), in order, as
    /// [`NeutronNames::resolve`] finds them (without a network).
    pub(crate) async fn security_group_ids(
        &self,
        session: &Session<'_>,
        groups: &[String],
    ) -> Result<Vec<String>, CloudError> {
        let slot = self.slot(session.identity);
        let mut cached = slot.lock().await;
        if let Some(snapshot) = cached.as_ref() {
            match snapshot.groups(groups) {
                Ok(ids) => return Ok(ids),
                Err(name) if snapshot.missing.get(&name).is_some_and(|at| at.elapsed() < REFRESH_MIN) => {
                    return Err(not_ready(&name, session.identity));
                }
                Err(_) => {}
            }
        }
        let mut snapshot = fetch(session).await?;
        if let Some(previous) = cached.take() {
            snapshot.missing = previous.missing;
            snapshot.missing.retain(|_, at| at.elapsed() < REFRESH_MIN);
        }
        let ids = snapshot.groups(groups);
        if let Err(name) = &ids {
            snapshot.missing.insert(name.clone(), Instant::now());
        }
        *cached = Some(snapshot);
        ids.map_err(|name| not_ready(&name, session.identity))
    }

    /// Forgets what is known for the identity (Neutron said a kept ID is gone).
    pub(crate) async fn invalidate(&self, identity: &IdentityContext) {
        let slot = self.slot(identity);
        *slot.lock().await = None;
    }

    fn slot(&self, identity: &IdentityContext) -> Slot {
        let key = format!("{}\n{}", identity.identity_id, identity.project_id);
        self.slots().entry(key).or_default().clone()
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A map of handles: a panic elsewhere cannot leave it inconsistent.
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn not_ready(name: &str, identity: &IdentityContext) -> CloudError {
    CloudError::NotReady {
        message: format!(
            "Neutron has no {name} in the project of identity {} yet (it may still be provisioning)",
            identity.identity_id
        ),
    }
}

async fn fetch(session: &Session<'_>) -> Result<Snapshot, CloudError> {
    let networks = by_name("network", neutron::networks(session).await?);
    let security_groups = by_name("security group", neutron::security_groups(session).await?);
    debug!(networks = networks.len(), security_groups = security_groups.len(), "read Neutron names");
    Ok(Snapshot { networks, security_groups, missing: HashMap::new() })
}

/// Name -> ID. Neutron names are not unique; the first in Neutron's order
/// wins, as in the Go controller, and the ambiguity is logged once per read.
fn by_name(kind: &'static str, items: Vec<Named>) -> HashMap<String, String> {
    let mut map = HashMap::with_capacity(items.len());
    for item in items {
        if item.name.is_empty() {
            continue;
        }
        if let Some(kept) = map.get(&item.name) {
            warn!(kind, name = %item.name, kept = %kept, ignored = %item.id, "several Neutron resources share a name");
            continue;
        }
        map.insert(item.name, item.id);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(id: &str, name: &str) -> Named {
        Named { id: id.into(), name: name.into(), tags: Vec::new() }
    }

    #[test]
    fn names_follow_the_unikorn_scheme_and_the_first_of_a_name_wins() {
        let snapshot = Snapshot {
            networks: by_name("network", vec![named("n1", "network-net"), named("n2", "network-net")]),
            security_groups: by_name("security group", vec![named("g1", "securitygroup-web"), named("g2", "")]),
            missing: HashMap::new(),
        };
        assert_eq!(
            snapshot.resolve("net", None, &["web".into()]),
            Ok(ResolvedNetworking { network_id: "n1".into(), security_group_ids: vec!["g1".into()] })
        );
        assert_eq!(snapshot.resolve("other", None, &[]), Err("network-other".into()));
        assert_eq!(snapshot.resolve("net", None, &["db".into()]), Err("securitygroup-db".into()));
        // The Network's status names its Neutron network: no name needed.
        assert_eq!(snapshot.resolve("other", Some("neutron-9"), &[]).map(|r| r.network_id), Ok("neutron-9".into()));
    }
}
