//! SimKube serving the operator's CRDs on a loopback port, and a client to it.

use std::net::SocketAddr;

use serde_json::Value;
use server_simkube::{ServeHandle, SimKube, StoreHandle};

use crate::{Error, Tenant};

/// SimKube with every CRD the operator touches (the Server and the kinds it
/// consumes), served on a loopback port, and a kube client to it. Dropping
/// it stops serving.
pub struct KubeBed {
    pub sim: SimKube,
    pub client: kube::Client,
    served: Option<ServeHandle>,
}

impl KubeBed {
    /// Installs the CRDs into `sim`, serves it on `addr` (port 0 picks a free
    /// port) and builds a client whose default namespace is `namespace`.
    pub async fn serve(sim: SimKube, addr: SocketAddr, namespace: &str) -> Result<Self, Error> {
        for crd in server_kube::all_crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let crd = serde_json::to_value(&crd).map_err(Error::CrdEncoding)?;
            sim.install_crd(crd).map_err(|source| Error::Crd { name, source: Box::new(source) })?;
        }
        let served = sim.serve(addr).await.map_err(|source| Error::Serve { what: "SimKube", source })?;
        let url = served.url();
        let uri = url.parse().map_err(|_| Error::Url { url: url.clone() })?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = namespace.into();
        let client =
            kube::Client::try_from(config).map_err(|source| Error::Client { url, source: Box::new(source) })?;
        Ok(KubeBed { sim, client, served: Some(served) })
    }

    /// The served API server's handle (its address and URL).
    pub fn served(&self) -> &ServeHandle {
        // Only `Drop` takes it.
        self.served.as_ref().unwrap_or_else(|| unreachable!("the KubeBed is serving until dropped"))
    }

    /// SimKube's store: reads and writes that bypass the API (and its counters).
    pub fn store(&self) -> StoreHandle {
        self.sim.store()
    }

    /// Seeds the tenant's Identity (ready or not) and its OpenstackIdentity,
    /// replacing earlier ones.
    pub fn seed_tenant(&self, tenant: &Tenant, identity_ready: bool) -> Result<(), Error> {
        self.insert("identities", &tenant.identity, tenant.identity(identity_ready))?;
        self.insert("openstackidentities", &tenant.identity, tenant.openstack_identity())
    }

    /// Seeds a consumed resource of the tenant (`networks`, `securitygroups`,
    /// `sshcertificateauthorities`, ...) with `spec`, through the store.
    pub fn seed(&self, tenant: &Tenant, resource: &str, name: &str, spec: Value) -> Result<(), Error> {
        self.insert(resource, name, tenant.object(name, spec))
    }

    fn insert(&self, resource: &str, name: &str, object: Value) -> Result<(), Error> {
        self.store().insert(resource, object).map(drop).map_err(|source| Error::Seed {
            resource: resource.into(),
            name: name.into(),
            source: Box::new(source),
        })
    }
}

impl std::fmt::Debug for KubeBed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBed").field("sim", &self.sim).field("served", &self.served).finish_non_exhaustive()
    }
}

impl Drop for KubeBed {
    fn drop(&mut self) {
        if let Some(served) = self.served.take() {
            served.shutdown();
        }
    }
}
