//! The demo's world: the test bed (SimKube serving the operator's CRDs on a
//! loopback port, a kube client to it) with the demo tenant's consumed
//! resources. The demo's own writes go straight to SimKube's store, so the
//! API request counters count the operator's requests only.

use std::net::SocketAddr;

use anyhow::Context as _;
use serde_json::json;
use server_core::model::{IDENTITY_LABEL, NAME_LABEL, ORGANIZATION_LABEL, REGION_LABEL};
use server_sim_testbed::{KubeBed, Tenant};
use server_simkube::{SimKube, StoreHandle};

pub(crate) const NAMESPACE: &str = "demo";
pub(crate) const REGION: &str = "region-a";
pub(crate) const IDENTITY: &str = "identity-a";
/// Network and SecurityGroup resources are named by UUID, as the region
/// service names them; the Server CRD refuses any other reference.
pub(crate) const NETWORKS: [&str; 2] = ["2f1c0b6e-7d4a-4c1e-9a53-0d6f1b2c3a01", "2f1c0b6e-7d4a-4c1e-9a53-0d6f1b2c3a02"];
pub(crate) const SECURITY_GROUP: &str = "5b7e9d21-3c4f-4a8b-8e6d-1f2a3b4c5d01";
/// The OpenStack project of the demo's identity.
pub(crate) const OPENSTACK_PROJECT: &str = "project-a";
pub(crate) const SSH_CA: &str = "ca-ops";
/// The demo identity's OpenStack user (known to the OpenStack simulator only).
pub(crate) const OPENSTACK_USER: &str = "demo-user";
pub(crate) const OPENSTACK_PASSWORD: &str = "demo-password";
/// A throwaway ed25519 public key: the demo's SSH certificate authority.
pub(crate) const SSH_CA_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl demo-ca@unikorn";

pub(crate) struct World {
    pub(crate) bed: KubeBed,
}

impl World {
    /// Starts SimKube on `addr` (port 0 picks one), serving every CRD the
    /// operator touches, and seeds the consumed resources.
    pub(crate) async fn start(seed: u64, addr: SocketAddr) -> anyhow::Result<Self> {
        // As on a real cluster, objects go only into namespaces that exist.
        let sim = SimKube::builder().seed(seed).strict_namespaces().build();
        sim.store().ensure_namespace(NAMESPACE);
        let bed = KubeBed::serve(sim, addr, NAMESPACE).await?;
        let world = World { bed };
        world.seed_consumed_resources()?;
        Ok(world)
    }

    pub(crate) fn store(&self) -> StoreHandle {
        self.bed.store()
    }

    /// The demo's tenant: its namespace, region, identity and OpenStack user.
    pub(crate) fn tenant() -> Tenant {
        Tenant::new(NAMESPACE, REGION, IDENTITY).with_openstack(OPENSTACK_PROJECT, OPENSTACK_USER, OPENSTACK_PASSWORD)
    }

    fn seed_consumed_resources(&self) -> anyhow::Result<()> {
        let tenant = Self::tenant();
        self.bed.seed_tenant(&tenant, true)?;
        self.bed.seed(&tenant, "networks", NETWORKS[0], json!({"prefix": "10.0.0.0/24"}))?;
        self.bed.seed(&tenant, "networks", NETWORKS[1], json!({"prefix": "10.1.0.0/24"}))?;
        self.bed.seed(&tenant, "securitygroups", SECURITY_GROUP, json!({}))?;
        self.bed.seed(&tenant, "sshcertificateauthorities", SSH_CA, json!({"publicKey": SSH_CA_KEY}))?;
        Ok(())
    }

    /// Creates a Server the way a user would, returning its uid.
    pub(crate) fn create_server(&self, name: &str, with_unmodelled_fields: bool) -> anyhow::Result<String> {
        let mut spec = json!({
            "flavorID": "6a2b1c3d-0000-4000-8000-000000000001",
            "image": {"id": "0f1e2d3c-0000-4000-8000-000000000002"},
            "networks": [{"id": NETWORKS[0]}],
            "securityGroups": [{"id": SECURITY_GROUP}],
            "sshCertificateAuthorityID": SSH_CA,
            "userData": "I2Nsb3VkLWNvbmZpZwpwYWNrYWdlczogW25naW54XQo=",
        });
        if with_unmodelled_fields {
            spec["volumes"] = json!([{"id": "vol-data"}]);
        }
        let server = json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1",
            "kind": "Server",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {
                    REGION_LABEL: REGION, IDENTITY_LABEL: IDENTITY, NAME_LABEL: name, ORGANIZATION_LABEL: "acme",
                },
            },
            "spec": spec,
        });
        let created =
            self.store().create("servers", server).map_err(|e| anyhow::anyhow!("cannot create {name}: {e:?}"))?;
        let uid = created["metadata"]["uid"].as_str().context("SimKube gave no uid")?.to_owned();
        if with_unmodelled_fields {
            // A status field the real CRD has and this operator does not model.
            self.store()
                .modify("servers", Some(NAMESPACE), name, |server| {
                    server["status"]["volumes"] =
                        json!([{"id": "vol-data", "message": "attached", "provisioningStatus": "Provisioned"}]);
                })
                .map_err(|e| anyhow::anyhow!("cannot seed {name}'s status: {e:?}"))?;
        }
        Ok(uid)
    }
}

/// A Server manifest a user can `kubectl apply` against the playground: it
/// consumes the resources the demo seeded.
pub(crate) fn example_server(name: &str) -> String {
    format!(
        "apiVersion: region.unikorn-cloud.org/v1alpha1
kind: Server
metadata:
  name: {name}
  namespace: {NAMESPACE}
  labels:
    {REGION_LABEL}: {REGION}
    {IDENTITY_LABEL}: {IDENTITY}
    {NAME_LABEL}: {name}
    {ORGANIZATION_LABEL}: acme
spec:
  flavorID: 6a2b1c3d-0000-4000-8000-000000000001
  image:
    id: 0f1e2d3c-0000-4000-8000-000000000002
  networks:
  - id: {network}
  securityGroups:
  - id: {SECURITY_GROUP}
  sshCertificateAuthorityID: {SSH_CA}
",
        network = NETWORKS[0],
    )
}
