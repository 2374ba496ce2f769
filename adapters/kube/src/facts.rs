//! Answers a pass's needs (`server_core::pass::Need`): each consumed kind
//! as the core's `ResourceKind::scope` says (from the caches, or read live
//! when the pass asks), the provider's view (from the monitor's latest list
//! when one is held, else through the cloud port), the server's ports and
//! networking, and the user data the cache leaves out. Reads only; what to
//! read and when is the pass's.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client};
use server_core::model::{IDENTITY_LABEL, REGION_LABEL, ResourceKind, Scope, Server, UserData, reference_finalizer};
use server_core::pass::{Fact, Need};
use server_core::{AttachmentsView, Facts, NetworkingView, ProviderRead, ProviderView};

use crate::cache::Caches;
use crate::cloud::{CloudHandle, CloudRegistry, NoCloud, ProviderListings, group_of};
use crate::consumed::{CONSUMED_KINDS, Finalizers, Found};
use crate::crd::Server as ServerObject;
use crate::error::Error;
use crate::freshness::TermFloors;

/// Where a reader finds what it reads besides the API server: a running
/// controller's caches and listings, or nothing (a one-shot command reads
/// everything live).
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    Controller { caches: &'a Caches, listings: &'a ProviderListings, floors: &'a TermFloors },
    OneShot,
}

/// Answers the needs of one pass over one Server.
pub(crate) struct Reader<'a> {
    client: &'a Client,
    clouds: &'a CloudRegistry,
    source: Source<'a>,
    cloud_timeout: Duration,
    /// The cloud to call, resolved at the first provider need.
    cloud: Option<Result<CloudHandle, NoCloud>>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(
        client: &'a Client,
        clouds: &'a CloudRegistry,
        source: Source<'a>,
        cloud_timeout: Duration,
    ) -> Self {
        Reader { client, clouds, source, cloud_timeout, cloud: None }
    }

    /// The answer to `need` for `server`, given what the pass read so far
    /// (`facts`). `Err` when the API server could not be read: the pass is
    /// abandoned and the controller's error policy requeues it.
    pub(crate) async fn read(&mut self, need: &Need, server: &Server, facts: &Facts) -> Result<Fact, Error> {
        Ok(match need {
            Need::Consumed => match self.source {
                Source::Controller { caches, .. } => Fact::consumed_of(cached(caches, server)),
                Source::OneShot => Fact::consumed_of(live(self.client, server, None).await?),
            },
            Need::ConsumedLive => Fact::consumed_of(live(self.client, server, self.floors()).await?),
            Need::ConsumedBeforeRelease => Fact::consumed_of(match self.source {
                Source::Controller { caches, floors, .. } => match release_from_cache(caches, floors, server) {
                    Some(facts) => facts,
                    None => live(self.client, server, Some(floors)).await?,
                },
                Source::OneShot => live(self.client, server, None).await?,
            }),
            Need::Provider => {
                let has_cloud = self.cloud(server).await?.is_ok();
                let listed = match self.source {
                    Source::Controller { listings, .. } if has_cloud => {
                        group_of(server).and_then(|group| listings.view(&group, &server.meta.uid))
                    }
                    _ => None,
                };
                let (view, read) = match listed {
                    Some((view, at)) => (view, ProviderRead::Listed { at }),
                    None => (self.provider_live(server, facts).await?, ProviderRead::Live),
                };
                Fact::Provider { view, read, boot_read: self.boot_read(server).await? }
            }
            Need::ProviderLive(_) => {
                let view = self.provider_live(server, facts).await?;
                Fact::Provider { view, read: ProviderRead::Live, boot_read: self.boot_read(server).await? }
            }
            Need::Attachments => Fact::Attachments(match self.cloud(server).await? {
                Ok(handle) => handle.attachments_view(server).await,
                Err(_) => AttachmentsView::NotRead,
            }),
            Need::Networking { provider_id } => Fact::Networking(match self.cloud(server).await? {
                Ok(handle) => handle.networking_view(server, provider_id).await,
                Err(_) => NetworkingView::NotRead,
            }),
            Need::UserData => Fact::UserData(self.live_user_data(server).await?),
        })
    }

    /// When another read of the term showed the Server's server booted
    /// (asked after the live read, which may be that read).
    async fn boot_read(&mut self, server: &Server) -> Result<Option<Timestamp>, Error> {
        Ok(match self.cloud(server).await? {
            Ok(handle) => handle.cloud.boot_read(&handle.identity, &server.meta.uid),
            Err(_) => None,
        })
    }

    /// The term's floors, when a controller reads.
    fn floors(&self) -> Option<&'a TermFloors> {
        match self.source {
            Source::Controller { floors, .. } => Some(floors),
            Source::OneShot => None,
        }
    }

    /// The cloud of the Server's region and identity, resolved once per
    /// pass, or why there is none.
    pub(crate) async fn cloud(&mut self, server: &Server) -> Result<&Result<CloudHandle, NoCloud>, Error> {
        if self.cloud.is_none() {
            let namespace = server.meta.namespace.as_str();
            let resolved = match (server.meta.label(REGION_LABEL), server.meta.label(IDENTITY_LABEL)) {
                (Some(region_id), Some(identity_id)) => match self.source {
                    Source::Controller { caches, .. } => {
                        self.clouds.cached_handle(caches, namespace, region_id, identity_id, self.cloud_timeout)
                    }
                    Source::OneShot => {
                        self.clouds
                            .live_handle(self.client, namespace, region_id, identity_id, self.cloud_timeout)
                            .await?
                    }
                },
                _ => Err(NoCloud::Unlabelled),
            };
            self.cloud = Some(resolved);
        }
        Ok(self.cloud.get_or_insert_with(|| Err(NoCloud::Unlabelled)))
    }

    /// The cloud the pass acts on, or why there is none.
    pub(crate) fn into_cloud(self) -> Result<CloudHandle, String> {
        match self.cloud {
            Some(Ok(handle)) => Ok(handle),
            Some(Err(no_cloud)) => Err(no_cloud.to_string()),
            None => Err("not read".into()),
        }
    }

    /// The provider server read through the cloud now, or what stands for
    /// it when there is no cloud to call.
    async fn provider_live(&mut self, server: &Server, facts: &Facts) -> Result<ProviderView, Error> {
        let (client, clouds) = (self.client, self.clouds);
        Ok(match self.cloud(server).await? {
            Ok(handle) => handle.provider_view(server).await,
            Err(no_cloud) => {
                let no_cloud = no_cloud.clone();
                let gone = server.meta.deleting && identity_gone(client, clouds, server, facts).await?;
                no_cloud.view(gone)
            }
        })
    }

    /// The Server's user data, read live, if its spec is still the one the
    /// pass decided on (`None` when it changed since).
    async fn live_user_data(&self, server: &Server) -> Result<Option<UserData>, Error> {
        let api: Api<ServerObject> = Api::namespaced(self.client.clone(), &server.meta.namespace);
        let live = api
            .get(&server.meta.name)
            .await
            .map_err(|e| Error::kube(format!("reading the user data of Server {}", server.meta.name), e))?;
        Ok((live.metadata.generation == Some(server.meta.generation)).then_some(live.spec.spec.user_data).flatten())
    }
}

/// Whether a deleting Server has no identity to call its cloud as: its
/// Identity, or what its region's identity source reads (e.g. its
/// OpenstackIdentity), is not found, read live (a cache too new to hold it
/// must not release the Server). The core decides what that means: only an
/// Identity gone or being deleted (in the live facts) releases the Server.
async fn identity_gone(client: &Client, clouds: &CloudRegistry, server: &Server, facts: &Facts) -> Result<bool, Error> {
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

/// The consumed resources as the caches hold them.
fn cached(caches: &Caches, server: &Server) -> Facts {
    let mut found = FoundFacts::default();
    let sort = Sorting::of(server);
    for ops in CONSUMED_KINDS {
        let kind = ops.kind();
        if sort.reads(kind) {
            let own = Finalizers::Only(&sort.finalizer);
            let keep = |meta: &ObjectMeta, holds: &dyn Fn(&str) -> bool| sort.keeps(kind, meta, holds);
            found.add_all(kind, &sort, caches.consumed(kind, &server.meta.namespace, &keep, own));
        }
    }
    found.0
}

/// The consumed resources from the caches, when every kind the Server's
/// pass reads has a cache that caught up with what a release must see (see
/// `freshness`), before and after the read: a relist may take a store back
/// to an older snapshot.
fn release_from_cache(caches: &Caches, floors: &TermFloors, server: &Server) -> Option<Facts> {
    let sort = Sorting::of(server);
    let caught_up = || {
        CONSUMED_KINDS
            .iter()
            .map(|ops| ops.kind())
            .filter(|kind| sort.reads(*kind))
            .all(|kind| floors.covers(kind, &sort.finalizer, caches.applied(kind)))
    };
    if !caught_up() {
        return None;
    }
    let facts = cached(caches, server);
    caught_up().then_some(facts)
}

/// The consumed resources as the API server has them now. Each kind is
/// listed over the whole namespace, so references held under another
/// identity (from before a label change) are found and released too. Each
/// list is a floor of the term (`floors`) the caches can catch up with.
async fn live(client: &Client, server: &Server, floors: Option<&TermFloors>) -> Result<Facts, Error> {
    let mut found = FoundFacts::default();
    let sort = Sorting::of(server);
    for ops in CONSUMED_KINDS {
        let kind = ops.kind();
        if sort.reads(kind) {
            let listed = ops.list(client, &server.meta.namespace).await?;
            if let Some(floors) = floors {
                floors.listed(kind, listed.newest);
            }
            found.add_all(kind, &sort, listed.found);
        }
    }
    Ok(found.0)
}

/// Consumed resources sorted into facts.
#[derive(Default)]
struct FoundFacts(Facts);

impl FoundFacts {
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
            self.0.other_identity_references.push((kind, found.resource));
        } else {
            self.0.insert(kind, found.resource);
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
    use super::*;

    /// A Server of identity id1.
    fn of_identity_id1() -> Server {
        let mut server = Server::default();
        server.meta.labels.insert(IDENTITY_LABEL.into(), "id1".into());
        server
    }

    #[test]
    fn another_identitys_object_is_kept_only_when_it_holds_the_servers_reference_and_only_then_asked() {
        let server = of_identity_id1();
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
}
