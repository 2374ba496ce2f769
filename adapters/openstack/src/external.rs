//! The external network floating IPs come from, as last chosen per identity
//! (see `OpenStackCloud::floating_network`), kept for [`KEEP`]. A public
//! Server's create checks the choice can be made and its floating IP is made
//! on it: listing Neutron's external networks for each would cost every
//! public Server two lists of a set that rarely changes. A choice holds only
//! for the selector it was made under, and is dropped when a floating IP
//! create on it is refused, so a network that went away is chosen again at
//! once.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use server_core::port::{IdentityContext, NetworkSelector};
use tokio::time::Instant;

/// How long a choice is kept: a network added to the project (or tagged for
/// the selector) is chosen within this long, as a fresh list would.
pub(crate) const KEEP: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub(crate) struct ExternalNetworks {
    chosen: Mutex<HashMap<String, Choice>>,
}

#[derive(Debug)]
struct Choice {
    selector: Option<NetworkSelector>,
    network_id: String,
    at: Instant,
}

impl ExternalNetworks {
    /// The network chosen for `identity` under `selector` less than
    /// [`KEEP`] ago.
    pub(crate) fn kept(&self, identity: &IdentityContext, selector: &Option<NetworkSelector>) -> Option<String> {
        let chosen = self.chosen();
        let choice = chosen.get(&key(identity))?;
        (choice.selector == *selector && choice.at.elapsed() < KEEP).then(|| choice.network_id.clone())
    }

    pub(crate) fn keep(&self, identity: &IdentityContext, selector: Option<NetworkSelector>, network_id: String) {
        self.chosen().insert(key(identity), Choice { selector, network_id, at: Instant::now() });
    }

    /// Drops the identity's choice: a floating IP create on it was refused.
    pub(crate) fn forget(&self, identity: &IdentityContext) {
        self.chosen().remove(&key(identity));
    }

    fn chosen(&self) -> MutexGuard<'_, HashMap<String, Choice>> {
        // Plain values: a panic elsewhere cannot leave the map inconsistent.
        self.chosen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn key(identity: &IdentityContext) -> String {
    format!("{}\n{}", identity.identity_id, identity.project_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(id: &str) -> IdentityContext {
        IdentityContext { identity_id: id.into(), project_id: "p".into(), ..Default::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_choice_holds_for_its_identity_and_selector_until_it_is_old_or_forgotten() {
        let networks = ExternalNetworks::default();
        let tagged = Some(NetworkSelector { ids: None, tags: Some(vec!["public".into()]) });
        networks.keep(&identity("a"), tagged.clone(), "ext-1".into());
        assert_eq!(networks.kept(&identity("a"), &tagged), Some("ext-1".into()));
        assert_eq!(networks.kept(&identity("b"), &tagged), None, "another identity chooses for itself");
        assert_eq!(networks.kept(&identity("a"), &None), None, "another selector chooses again");
        tokio::time::advance(KEEP).await;
        assert_eq!(networks.kept(&identity("a"), &tagged), None, "an old choice is made again");
        networks.keep(&identity("a"), None, "ext-2".into());
        networks.forget(&identity("a"));
        assert_eq!(networks.kept(&identity("a"), &None), None);
    }
}
