//! What a pass reads before it decides, and in which order: the needs a
//! driver answers (its caches, the API server, the provider, the user data)
//! and the rules that say when one more read is needed. Every driver (the
//! kube executor, the simulator, `explain`) answers the same needs in the
//! order the pass asks them; none of them decides what to read.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::model::{Consumed, IDENTITY_LABEL, ResourceKind, Server, UserData};
use crate::reconcile::{
    Action, AttachmentsView, Decision, Facts, LiveRead, NetworkingView, ProviderRead, ProviderView,
};

/// A read the pass asks of its driver before it can decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// The consumed resources of the Server's namespace as the driver's
    /// caches hold them (a driver without caches reads them live), answered
    /// with [`Fact::Consumed`].
    Consumed,
    /// The consumed resources read from the API server now: the cached ones
    /// lack something whose absence must be confirmed before it is acted on
    /// (see [`confirms_consumed_live`]). Answered with [`Fact::Consumed`].
    ConsumedLive,
    /// The consumed resources holding every write acknowledged before the
    /// pass began: its decision releases a deleting Server (see
    /// [`confirms_release_live`]), and a reference the answer lacked would
    /// leak for good. Read live, or from a cache the driver can show has
    /// caught up with every such write (each reference write of its term,
    /// and a live read made in its term). Answered with [`Fact::Consumed`].
    ConsumedBeforeRelease,
    /// The provider server: from the driver's latest listing of the Server's
    /// provider group when it holds one ([`ProviderRead::Listed`]), else read
    /// live. Answered with [`Fact::Provider`].
    Provider,
    /// The provider server read live: the listed view cannot decide this
    /// pass, for the reason given. Answered with [`Fact::Provider`].
    ProviderLive(LiveRead),
    /// The Server's ports and floating IPs at the provider (a deleting
    /// Server whose server is gone). Answered with [`Fact::Attachments`].
    Attachments,
    /// The port and floating IP of the present provider server
    /// `provider_id`. Answered with [`Fact::Networking`].
    Networking { provider_id: String },
    /// The Server's user data, read live: the driver's copy of the Server
    /// withholds it, and the pass creates. Answered with [`Fact::UserData`].
    UserData,
}

impl Need {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Need::Consumed => "Consumed",
            Need::ConsumedLive => "ConsumedLive",
            Need::ConsumedBeforeRelease => "ConsumedBeforeRelease",
            Need::Provider => "Provider",
            Need::ProviderLive(_) => "ProviderLive",
            Need::Attachments => "Attachments",
            Need::Networking { .. } => "Networking",
            Need::UserData => "UserData",
        }
    }
}

/// A driver's answer to a [`Need`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    /// The consumed resources found (see [`Facts::consumed`] and
    /// [`Facts::other_identity_references`]).
    Consumed {
        consumed: BTreeMap<ResourceKind, Vec<Consumed>>,
        other_identity_references: Vec<(ResourceKind, Consumed)>,
    },
    /// The provider server as read, where the view came from, and when it
    /// booted if another read of the term showed that (see
    /// [`crate::port::CloudPort::boot_read`]).
    Provider {
        view: ProviderView,
        read: ProviderRead,
        boot_read: Option<Timestamp>,
    },
    Attachments(AttachmentsView),
    Networking(NetworkingView),
    /// The Server's user data as read live; `None` when the Server changed
    /// since the pass read it (its generation moved), which ends the pass:
    /// the change brings the next one.
    UserData(Option<UserData>),
}

impl Fact {
    /// The consumed part of `facts`, as one answer.
    pub fn consumed_of(facts: Facts) -> Fact {
        Fact::Consumed { consumed: facts.consumed, other_identity_references: facts.other_identity_references }
    }
}

/// Whether consumed resources read from a cache must be confirmed by a live
/// read before the pass decides. What a lagging cache holds may be
/// outdated, which every write's resourceVersion precondition catches (a
/// Conflict, and the pass retries). What it lacks may only be new, so
/// absence is confirmed before it is acted on: here, a resource the spec
/// names (else a spurious "unknown resource ID" error). A deleting Server's
/// references are confirmed once its decision would release it
/// ([`confirms_release_live`]), not on every pass that waits for the cloud.
pub fn confirms_consumed_live(server: &Server, facts: &Facts) -> bool {
    if server.meta.deleting {
        return false;
    }
    // Without the label the core refuses the Server before any reference.
    if server.meta.label(IDENTITY_LABEL).is_none() {
        return false;
    }
    ResourceKind::ALL.into_iter().any(|kind| kind.named(server).any(|id| facts.find(kind, id).is_none()))
}

/// Whether a decision made on cached consumed resources must be made again
/// on a live read: it releases a deleting Server (removes its finalizer).
/// The release lets the Server go, so a reference the cache has not seen
/// yet would leak for good; every earlier pass of the deletion (which waits
/// for the cloud) decides on the cache, so a shared object is listed once
/// per deleted Server, not once per pass.
pub fn confirms_release_live(server: &Server, decision: &Decision) -> bool {
    server.meta.deleting && decision.actions.iter().any(|action| matches!(action, Action::RemoveFinalizer))
}

/// Where the provider view a pass decided on came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderSource {
    /// The driver's listing, and the listed view was enough.
    Listed,
    /// The driver's listing could not decide; read live for this reason.
    LiveAfterListed(LiveRead),
    /// Read live: the driver held no listing of it.
    Live,
}

impl ProviderSource {
    /// A label for metrics: `listed`, the live read's reason, or `unlisted`.
    pub fn label(self) -> &'static str {
        match self {
            ProviderSource::Listed => "listed",
            ProviderSource::LiveAfterListed(why) => why.label(),
            ProviderSource::Live => "unlisted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NetworkAttachment, SecurityGroupRef};

    /// A Server naming network n1, group g1 and CA ca1, and facts holding all three.
    fn named_and_found() -> (Server, Facts) {
        let mut server = Server::default();
        server.meta.labels.insert(IDENTITY_LABEL.into(), "id1".into());
        server.spec.networks.push(NetworkAttachment { id: "n1".into(), ..Default::default() });
        server.spec.security_groups.push(SecurityGroupRef { id: "g1".into() });
        server.spec.ssh_certificate_authority_id = Some("ca1".into());
        let facts = Facts::default()
            .with(ResourceKind::Identity, Consumed::new("id1"))
            .with(ResourceKind::Network, Consumed::new("n0"))
            .with(ResourceKind::Network, Consumed::new("n1"))
            .with(ResourceKind::SecurityGroup, Consumed::new("g1"))
            .with(ResourceKind::SshCertificateAuthority, Consumed::new("ca1"));
        (server, facts)
    }

    #[test]
    fn a_cache_holding_everything_the_spec_names_is_enough() {
        let (server, facts) = named_and_found();
        assert!(!confirms_consumed_live(&server, &facts));
    }

    #[test]
    fn whatever_the_spec_names_and_the_cache_lacks_is_confirmed() {
        let (server, facts) = named_and_found();
        let lacking: [fn(&mut Facts); 4] = [
            |f| f.remove(ResourceKind::Identity),
            |f| f.consumed.entry(ResourceKind::Network).or_default().retain(|n| n.name != "n1"),
            |f| f.remove(ResourceKind::SecurityGroup),
            |f| f.remove(ResourceKind::SshCertificateAuthority),
        ];
        for (i, lack) in lacking.iter().enumerate() {
            let mut facts = facts.clone();
            lack(&mut facts);
            assert!(confirms_consumed_live(&server, &facts), "case {i}");
        }
    }

    #[test]
    fn a_deleting_server_confirms_its_references_only_when_it_is_released() {
        let (mut server, mut facts) = named_and_found();
        server.meta.deleting = true;
        facts.remove(ResourceKind::Network);
        assert!(!confirms_consumed_live(&server, &facts), "a pass waiting for the cloud decides on the cache");
        let deciding = |actions: Vec<Action>| Decision {
            status: server.status.clone(),
            actions,
            outcome: crate::reconcile::Outcome::Done,
        };
        assert!(confirms_release_live(&server, &deciding(vec![Action::RemoveFinalizer])));
        assert!(!confirms_release_live(&server, &deciding(Vec::new())));
        server.meta.deleting = false;
        assert!(!confirms_release_live(&server, &deciding(vec![Action::RemoveFinalizer])));
    }

    #[test]
    fn without_an_identity_label_nothing_is_confirmed() {
        let (mut server, mut facts) = named_and_found();
        server.meta.labels.clear();
        facts.remove(ResourceKind::Network);
        assert!(!confirms_consumed_live(&server, &facts));
    }
}
