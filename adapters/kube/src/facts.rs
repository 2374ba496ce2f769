//! Gathers the facts of one pass: each consumed kind as the core's
//! `ResourceKind::scope` says (from the caches, confirmed live where a
//! lagging cache could mislead), and the provider's view: from the
//! monitor's latest list when one is held, else through the cloud port.
//! Whether a listed view is enough is the core's `live_read_needed`; when it
//! is not, [`Gathered::read_live`] asks the cloud. Reads only; it decides nothing.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use server_core::model::{IDENTITY_LABEL, REGION_LABEL, ResourceKind, Scope, Server, reference_finalizer};
use server_core::{
    AttachmentsView, Facts, NetworkingView, ProviderRead, ProviderView, reads_attachments, reads_networking,
};

use crate::cache::Caches;
use crate::cloud::{CloudHandle, CloudRegistry, ProviderListings, group_of};
use crate::consumed::{CONSUMED_KINDS, Finalizers, Found};
use crate::error::Error;

/// What one pass found.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub(crate) facts: Facts,
    /// The cloud to act on, or why there is none (the view is then unknown).
    pub(crate) cloud: Result<CloudHandle, String>,
}

impl Gathered {
    /// Facts for a Server the core will not look at (paused, released).
    pub(crate) fn skipped() -> Self {
        Gathered {
            facts: Facts { provider: ProviderView::Unknown("not read".into()), ..Facts::default() },
            cloud: Err("not read".into()),
        }
    }
}

/// Reads everything the core needs about `server`: the consumed resources
/// from the caches (live when they must be confirmed), the provider's view
/// from the latest list of its group in `listings` when there is one, else
/// from its cloud.
pub(crate) async fn gather(
    client: &Client,
    caches: &Caches,
    clouds: &CloudRegistry,
    listings: &ProviderListings,
    cloud_timeout: Duration,
    server: &Server,
) -> Result<Gathered, Error> {
    let mut gathered = Gathered::cached(caches, server);
    if must_confirm(server, &gathered.facts) {
        gathered = Gathered::live(client, server).await?;
    }

    let namespace = server.meta.namespace.as_str();
    let found = match (server.meta.label(REGION_LABEL), server.meta.label(IDENTITY_LABEL)) {
        (Some(region_id), Some(identity_id)) => {
            Some(clouds.cached_handle(caches, namespace, region_id, identity_id, cloud_timeout))
        }
        _ => None,
    };
    gathered.facts.provider = match &found {
        Some(Ok(handle)) => match group_of(server).and_then(|group| listings.view(&group, &server.meta.uid)) {
            Some((view, at)) => {
                gathered.facts.provider_read = ProviderRead::Listed { at };
                view
            }
            None => handle.provider_view(server).await,
        },
        Some(Err(no_cloud)) => {
            let gone = server.meta.deleting && identity_gone(client, clouds, server, &gathered.facts).await?;
            no_cloud.view(gone)
        }
        None if server.meta.deleting && identity_gone(client, clouds, server, &gathered.facts).await? => {
            ProviderView::NoIdentity
        }
        None => ProviderView::Unknown(NO_LABELS.into()),
    };
    if let Some(found) = found {
        gathered.cloud = found.map_err(|e| e.to_string());
    }
    gathered.read_attachments(server).await;
    Ok(gathered)
}

const NO_LABELS: &str = "the server has no region or identity label";

/// Whether a deleting Server has no identity to call its cloud as: its
/// Identity, or what its region's identity source reads (e.g. its
/// OpenstackIdentity), is not found, read live (a cache too new to hold it
/// must not release the Server). The core decides what that means: only an
/// Identity gone or being deleted (in the live facts) releases the Server.
pub(crate) async fn identity_gone(
    client: &Client,
    clouds: &CloudRegistry,
    server: &Server,
    facts: &Facts,
) -> Result<bool, Error> {
    let Some(identity_id) = server.meta.label(IDENTITY_LABEL) else {
        return Ok(false);
    };
    if facts.identity().is_none() {
        return Ok(true);
    }
    let Some(region_id) = server.meta.label(REGION_LABEL) else {
        return Ok(false);
    };
    clouds.identity_gone_live(client, &server.meta.namespace, region_id, identity_id).await
}

/// Whether the cached consumed resources must be confirmed by live reads.
/// What a lagging cache holds may be outdated, which every write's
/// resourceVersion precondition catches (a Conflict, and the pass retries).
/// What it lacks may only be new, so absence is confirmed before it is acted
/// on: a resource the spec names (else a spurious "unknown resource ID"
/// error), and every reference of a deleting Server (the release lets the
/// Server go, so a reference the cache has not seen yet would leak for good).
fn must_confirm(server: &Server, facts: &Facts) -> bool {
    if server.meta.deleting {
        return true;
    }
    // Without the label the core refuses the Server before any reference.
    if server.meta.label(IDENTITY_LABEL).is_none() {
        return false;
    }
    ResourceKind::ALL.into_iter().any(|kind| kind.named(server).any(|id| facts.find(kind, id).is_none()))
}

impl Gathered {
    /// Replaces a listed provider view by one read from the cloud now.
    pub(crate) async fn read_live(&mut self, server: &Server) {
        if let Ok(handle) = &self.cloud {
            self.facts.provider = handle.provider_view(server).await;
            self.facts.provider_read = ProviderRead::Live;
        }
        self.read_attachments(server).await;
    }

    /// Reads the Server's ports and floating IPs when the core asks for them
    /// (`reads_attachments`), and a present server's port and floating IP
    /// (`reads_networking`), live; otherwise they are not read.
    async fn read_attachments(&mut self, server: &Server) {
        self.facts.attachments = match &self.cloud {
            Ok(handle) if reads_attachments(server, &self.facts) => handle.attachments_view(server).await,
            _ => AttachmentsView::NotRead,
        };
        self.facts.networking = match (&self.cloud, &self.facts.provider) {
            (Ok(handle), ProviderView::Present(record)) if reads_networking(server, &self.facts) => {
                handle.networking_view(server, &record.id).await
            }
            _ => NetworkingView::NotRead,
        };
    }

    fn empty() -> Self {
        Gathered { facts: Facts::default(), cloud: Err(NO_LABELS.into()) }
    }

    /// The consumed resources as the caches hold them.
    fn cached(caches: &Caches, server: &Server) -> Self {
        let mut gathered = Gathered::empty();
        let sort = Sorting::of(server);
        for ops in CONSUMED_KINDS {
            let kind = ops.kind();
            if sort.reads(kind) {
                let own = Finalizers::Only(&sort.finalizer);
                let keep = |meta: &ObjectMeta, holds: &dyn Fn(&str) -> bool| sort.keeps(kind, meta, holds);
                let found = caches.consumed(kind, &server.meta.namespace, &keep, own);
                gathered.add_all(kind, &sort, found);
            }
        }
        gathered
    }

    /// The consumed resources as the API server has them now. Each kind is
    /// listed over the whole namespace, so references held under another
    /// identity (from before a label change) are found and released too.
    pub(crate) async fn live(client: &Client, server: &Server) -> Result<Self, Error> {
        let mut gathered = Gathered::empty();
        let sort = Sorting::of(server);
        for ops in CONSUMED_KINDS {
            let kind = ops.kind();
            if sort.reads(kind) {
                let found = ops.list(client, &server.meta.namespace).await?;
                gathered.add_all(kind, &sort, found);
            }
        }
        Ok(gathered)
    }

    fn add_all(&mut self, kind: ResourceKind, sort: &Sorting<'_>, found: Vec<Found>) {
        for mut found in found {
            // The core reads only the Server's own reference finalizer.
            found.resource.finalizers.retain(|f| *f == sort.finalizer);
            match sort.place(kind, &found) {
                Place::Ours => self.add(kind, found, false),
                Place::OtherIdentity => self.add(kind, found, true),
                Place::None => {}
            }
        }
    }

    fn add(&mut self, kind: ResourceKind, found: Found, other_identity: bool) {
        if other_identity {
            self.facts.other_identity_references.push((kind, found.resource));
        } else {
            self.facts.insert(kind, found.resource);
        }
    }
}

/// How a pass sorts the consumed resources of its namespace, by the kind's
/// scope: its own (into the facts), another identity's that hold its
/// reference (to be released), or none of its business.
struct Sorting<'a> {
    identity_id: Option<&'a str>,
    finalizer: String,
}

enum Place {
    Ours,
    OtherIdentity,
    None,
}

impl<'a> Sorting<'a> {
    fn of(server: &'a Server) -> Self {
        Sorting { identity_id: server.meta.label(IDENTITY_LABEL), finalizer: reference_finalizer(&server.meta.name) }
    }

    /// Whether a pass reads `kind` at all: without an identity label, only
    /// the kinds that do not depend on it (the core refuses the Server
    /// before any reference).
    fn reads(&self, kind: ResourceKind) -> bool {
        self.identity_id.is_some() || kind.scope() == Scope::Namespace
    }

    /// Where an object goes; whether it holds the Server's reference is
    /// asked only of an object that is not its own (a shared object's list
    /// holds one reference per Server using it).
    fn place_of(
        &self,
        kind: ResourceKind,
        name: Option<&str>,
        identity_label: Option<&str>,
        held: impl FnOnce() -> bool,
    ) -> Place {
        let ours = match kind.scope() {
            Scope::Namespace => true,
            Scope::IdentityLabelled => identity_label.is_some() && identity_label == self.identity_id,
            Scope::TheIdentity => name.is_some() && name == self.identity_id,
        };
        if ours {
            Place::Ours
        } else if held() {
            Place::OtherIdentity
        } else {
            Place::None
        }
    }

    fn place(&self, kind: ResourceKind, found: &Found) -> Place {
        let held = || found.resource.has_finalizer(&self.finalizer);
        self.place_of(kind, Some(&found.resource.name), found.identity_label.as_deref(), held)
    }

    /// Whether a cached object is worth converting (cheap, on metadata).
    fn keeps(&self, kind: ResourceKind, meta: &ObjectMeta, holds: &dyn Fn(&str) -> bool) -> bool {
        let label = meta.labels.as_ref().and_then(|l| l.get(IDENTITY_LABEL)).map(String::as_str);
        !matches!(self.place_of(kind, meta.name.as_deref(), label, || holds(&self.finalizer)), Place::None)
    }
}

#[cfg(test)]
mod tests {
    use server_core::model::{Consumed, NetworkAttachment, SecurityGroupRef};

    use super::*;

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
    fn another_identitys_object_is_kept_only_when_it_holds_the_servers_reference_and_only_then_asked() {
        let (server, _) = named_and_found();
        let sort = Sorting::of(&server);
        let labelled = |identity: &str| ObjectMeta {
            name: Some("n1".into()),
            labels: Some([(IDENTITY_LABEL.to_owned(), identity.to_owned())].into()),
            ..Default::default()
        };
        let asked = std::cell::Cell::new(0);
        let (asked, finalizer) = (&asked, sort.finalizer.as_str());
        let holds = |held: bool| {
            move |wanted: &str| {
                asked.set(asked.get() + 1);
                held && wanted == finalizer
            }
        };
        assert!(sort.keeps(ResourceKind::Network, &labelled("id1"), &holds(false)), "its own identity's");
        assert_eq!(asked.get(), 0, "an object of its own is not searched for the reference");
        assert!(sort.keeps(ResourceKind::Network, &labelled("id2"), &holds(true)), "holds a reference to release");
        assert!(!sort.keeps(ResourceKind::Network, &labelled("id2"), &holds(false)), "none of its business");
        assert_eq!(asked.get(), 2);
        let identity = |name: &str| ObjectMeta { name: Some(name.into()), ..Default::default() };
        assert!(sort.keeps(ResourceKind::Identity, &identity("id1"), &holds(false)));
        assert!(!sort.keeps(ResourceKind::Identity, &identity("id0"), &holds(false)));
        assert!(sort.keeps(ResourceKind::Identity, &identity("id0"), &holds(true)));
    }

    #[test]
    fn a_cache_holding_everything_the_spec_names_is_enough() {
        let (server, facts) = named_and_found();
        assert!(!must_confirm(&server, &facts));
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
            assert!(must_confirm(&server, &facts), "case {i}");
        }
    }

    #[test]
    fn a_deleting_server_reads_its_references_live() {
        let (mut server, facts) = named_and_found();
        server.meta.deleting = true;
        assert!(must_confirm(&server, &facts));
    }

    #[test]
    fn without_an_identity_label_nothing_is_confirmed() {
        let (mut server, facts) = named_and_found();
        server.meta.labels.clear();
        let mut facts = facts;
        facts.remove(ResourceKind::Network);
        assert!(!must_confirm(&server, &facts));
    }
}
