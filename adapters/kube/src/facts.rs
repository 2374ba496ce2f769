//! Gathers the facts of one pass: the Identity, the consumed resources with
//! the Server's identity label, the SSH CAs of its namespace (from the caches,
//! confirmed live where a lagging cache could mislead), and the provider's
//! view through the cloud port, read on every pass. Reads only; it decides
//! nothing.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::{Api, Client};
use server_core::model::{Consumed, IDENTITY_LABEL, REGION_LABEL, ResourceKind, Server, reference_finalizer};
use server_core::{Facts, ProviderView};

use crate::cache::{Caches, ConsumedKind};
use crate::cloud::{CloudHandle, CloudRegistry};
use crate::convert::{consumed, core_identity, core_ssh_ca};
use crate::crd::{Identity, Network, OpenstackIdentity, SSHCertificateAuthority, SecurityGroup};
use crate::error::Error;
use crate::references::{ReferenceWriter, Target};

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
/// from the caches (live when they must be confirmed), whether each holds
/// this Server's reference as the reference writer last wrote it (fresher
/// than a cache), the provider's view from its cloud, always live.
pub(crate) async fn gather(
    client: &Client,
    caches: &Caches,
    references: &ReferenceWriter,
    clouds: &CloudRegistry,
    cloud_timeout: Duration,
    server: &Server,
) -> Result<Gathered, Error> {
    let mut gathered = Gathered::cached(caches, server);
    if must_confirm(server, &gathered.facts) {
        gathered = Gathered::live(client, server).await?;
    } else {
        prefer_written(&mut gathered.facts, references, server);
    }

    let namespace = server.meta.namespace.as_str();
    if let (Some(region_id), Some(identity_id)) = (server.meta.label(REGION_LABEL), server.meta.label(IDENTITY_LABEL)) {
        let identity = caches.openstack_identity(namespace, identity_id);
        gathered.cloud = clouds
            .handle(namespace, region_id, identity_id, identity.as_deref(), cloud_timeout)
            .map_err(|e| e.to_string());
    }
    gathered.facts.provider = match &gathered.cloud {
        Err(_) if server.meta.deleting && identity_gone(client, server, &gathered.facts).await? => {
            ProviderView::NoIdentity
        }
        Err(reason) => ProviderView::Unknown(reason.clone()),
        Ok(handle) => handle.provider_view(server).await,
    };
    Ok(gathered)
}

/// Whether a deleting Server's Identity or OpenstackIdentity is gone, read
/// live (a cache too new to hold it must not release the Server).
pub(crate) async fn identity_gone(client: &Client, server: &Server, facts: &Facts) -> Result<bool, Error> {
    let Some(identity_id) = server.meta.label(IDENTITY_LABEL) else {
        return Ok(false);
    };
    if facts.identity.is_none() {
        return Ok(true);
    }
    let all = list::<OpenstackIdentity>(client, &server.meta.namespace, &ListParams::default()).await?;
    Ok(!all.iter().any(|identity| identity.metadata.name.as_deref() == Some(identity_id)))
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
    let spec = &server.spec;
    let lacks = |found: &[Consumed], id: &str| !found.iter().any(|c| c.name == id);
    facts.identity.is_none()
        || spec.networks.iter().any(|n| lacks(&facts.networks, &n.id))
        || spec.security_groups.iter().any(|g| lacks(&facts.security_groups, &g.id))
        || spec
            .ssh_certificate_authority_id
            .as_deref()
            .is_some_and(|id| !facts.ssh_certificate_authorities.iter().any(|ca| ca.resource.name == id))
}

impl Gathered {
    fn empty() -> Self {
        Gathered { facts: Facts::default(), cloud: Err("the server has no region or identity label".into()) }
    }

    /// The consumed resources as the caches hold them.
    fn cached(caches: &Caches, server: &Server) -> Self {
        let namespace = server.meta.namespace.as_str();
        let mut gathered = Gathered::empty();
        let finalizer = reference_finalizer(&server.meta.name);
        if let Some(identity_id) = server.meta.label(IDENTITY_LABEL) {
            for network in caches.networks(namespace, identity_id) {
                gathered.add_network(&network, &finalizer);
            }
            for group in caches.security_groups(namespace, identity_id) {
                gathered.add_security_group(&group, &finalizer);
            }
            if let Some(identity) = caches.identity(namespace, identity_id) {
                gathered.add_identity(&identity, &finalizer);
            }
            for (kind, name) in caches.held_under_other_identities(namespace, identity_id, &finalizer) {
                gathered.add_other_identity(kind, name, &finalizer);
            }
        }
        for ca in caches.ssh_certificate_authorities(namespace) {
            gathered.add_ssh_certificate_authority(&ca, &finalizer);
        }
        gathered
    }

    /// The consumed resources as the API server has them now.
    pub(crate) async fn live(client: &Client, server: &Server) -> Result<Self, Error> {
        let namespace = server.meta.namespace.as_str();
        let mut gathered = Gathered::empty();
        let finalizer = reference_finalizer(&server.meta.name);
        if let Some(identity_id) = server.meta.label(IDENTITY_LABEL) {
            // The whole namespace, so references held under another identity
            // (from before a label change) are found and released too.
            let all = ListParams::default();
            let ours = |meta: &ObjectMeta| {
                meta.labels.as_ref().and_then(|l| l.get(IDENTITY_LABEL)).map(String::as_str) == Some(identity_id)
            };
            let held = |meta: &ObjectMeta| meta.finalizers.as_ref().is_some_and(|f| f.contains(&finalizer));
            for network in list::<Network>(client, namespace, &all).await? {
                if ours(&network.metadata) {
                    gathered.add_network(&network, &finalizer);
                } else if held(&network.metadata) {
                    gathered.add_other_identity(ResourceKind::Network, name_of(&network.metadata), &finalizer);
                }
            }
            for group in list::<SecurityGroup>(client, namespace, &all).await? {
                if ours(&group.metadata) {
                    gathered.add_security_group(&group, &finalizer);
                } else if held(&group.metadata) {
                    gathered.add_other_identity(ResourceKind::SecurityGroup, name_of(&group.metadata), &finalizer);
                }
            }
            for identity in list::<Identity>(client, namespace, &all).await? {
                if identity.metadata.name.as_deref() == Some(identity_id) {
                    gathered.add_identity(&identity, &finalizer);
                } else if held(&identity.metadata) {
                    gathered.add_other_identity(ResourceKind::Identity, name_of(&identity.metadata), &finalizer);
                }
            }
        }
        for ca in list::<SSHCertificateAuthority>(client, namespace, &ListParams::default()).await? {
            gathered.add_ssh_certificate_authority(&ca, &finalizer);
        }
        Ok(gathered)
    }

    fn add_network(&mut self, network: &Network, finalizer: &str) {
        self.facts.networks.push(consumed(&network.metadata, finalizer));
        let neutron_id = network.status.as_ref().and_then(|s| s.openstack.as_ref()).and_then(|o| o.network_id.clone());
        if let (Some(name), Some(id)) = (network.metadata.name.clone(), neutron_id.filter(|id| !id.is_empty())) {
            self.facts.network_provider_ids.insert(name, id);
        }
    }

    fn add_security_group(&mut self, group: &SecurityGroup, finalizer: &str) {
        self.facts.security_groups.push(consumed(&group.metadata, finalizer));
    }

    fn add_identity(&mut self, identity: &Identity, finalizer: &str) {
        self.facts.identity = Some(core_identity(identity, finalizer));
    }

    fn add_ssh_certificate_authority(&mut self, ca: &SSHCertificateAuthority, finalizer: &str) {
        self.facts.ssh_certificate_authorities.push(core_ssh_ca(ca, finalizer));
    }

    /// A resource of another identity that holds this Server's reference.
    fn add_other_identity(&mut self, kind: ResourceKind, name: String, finalizer: &str) {
        self.facts.other_identity_references.push((kind, Consumed::referenced(name, finalizer)));
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// Where the reference writer has written or read an object since the
/// cache did, its word on whether this Server's reference is held wins: a
/// cache that has not yet seen the writer's last batch would have the pass
/// add a reference again (a write for nothing) or miss one to remove.
fn prefer_written(facts: &mut Facts, references: &ReferenceWriter, server: &Server) {
    {
        let finalizer = reference_finalizer(&server.meta.name);
        let namespace = &server.meta.namespace;
        let settle = |kind: ResourceKind, resource: &mut Consumed| {
            let target = Target { kind, namespace: namespace.clone(), name: resource.name.clone() };
            if let Some(held) = references.holds(&target, &finalizer) {
                *resource = if held {
                    Consumed::referenced(resource.name.clone(), &finalizer)
                } else {
                    Consumed::new(resource.name.clone())
                };
            }
        };
        for network in &mut facts.networks {
            settle(ResourceKind::Network, network);
        }
        for group in &mut facts.security_groups {
            settle(ResourceKind::SecurityGroup, group);
        }
        for ca in &mut facts.ssh_certificate_authorities {
            settle(ResourceKind::SshCertificateAuthority, &mut ca.resource);
        }
        if let Some(identity) = &mut facts.identity {
            settle(ResourceKind::Identity, &mut identity.resource);
        }
        for (kind, resource) in &mut facts.other_identity_references {
            settle(*kind, resource);
        }
    }
}

async fn list<K: ConsumedKind>(client: &Client, namespace: &str, params: &ListParams) -> Result<Vec<K>, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(source) => Err(Error::kube(format!("listing {} in namespace {namespace}", K::plural(&())), source)),
    }
}

#[cfg(test)]
mod tests {
    use server_core::model::{Identity as CoreIdentity, NetworkAttachment, SecurityGroupRef, SshCertificateAuthority};

    use super::*;

    /// A Server naming network n1, group g1 and CA ca1, and facts holding all three.
    fn named_and_found() -> (Server, Facts) {
        let mut server = Server::default();
        server.meta.labels.insert(IDENTITY_LABEL.into(), "id1".into());
        server.spec.networks.push(NetworkAttachment { id: "n1".into(), ..Default::default() });
        server.spec.security_groups.push(SecurityGroupRef { id: "g1".into() });
        server.spec.ssh_certificate_authority_id = Some("ca1".into());
        let facts = Facts {
            identity: Some(CoreIdentity { resource: Consumed::new("id1"), ..Default::default() }),
            networks: vec![Consumed::new("n0"), Consumed::new("n1")],
            network_provider_ids: Default::default(),
            security_groups: vec![Consumed::new("g1")],
            ssh_certificate_authorities: vec![SshCertificateAuthority {
                resource: Consumed::new("ca1"),
                ..Default::default()
            }],
            ..Facts::default()
        };
        (server, facts)
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
            |f| f.identity = None,
            |f| f.networks.retain(|n| n.name != "n1"),
            |f| f.security_groups.clear(),
            |f| f.ssh_certificate_authorities.clear(),
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
        assert!(!must_confirm(&server, &Facts { networks: Vec::new(), ..facts }));
    }
}
