//! The demo's world: SimKube serving the operator's CRDs on a loopback port,
//! a kube client to it, and the resources Servers consume. The demo's own
//! writes go straight to SimKube's store, so the API request counters count
//! the operator's requests only.

use std::net::SocketAddr;

use anyhow::Context as _;
use serde_json::{Value, json};
use server_core::model::{IDENTITY_LABEL, NAME_LABEL, ORGANIZATION_LABEL, REGION_LABEL};
use server_simkube::SimKube;
use server_simkube::{ServeHandle, StoreHandle};

pub(crate) const NAMESPACE: &str = "demo";
pub(crate) const REGION: &str = "region-a";
pub(crate) const IDENTITY: &str = "identity-a";
pub(crate) const NETWORKS: [&str; 2] = ["net-a", "net-b"];
pub(crate) const SECURITY_GROUP: &str = "sg-web";
/// The OpenStack project of the demo's identity.
pub(crate) const OPENSTACK_PROJECT: &str = "project-a";
pub(crate) const SSH_CA: &str = "ca-ops";
/// The demo identity's OpenStack user (known to the OpenStack simulator only).
pub(crate) const OPENSTACK_USER: &str = "demo-user";
pub(crate) const OPENSTACK_PASSWORD: &str = "demo-password";
/// A throwaway ed25519 public key: the demo's SSH certificate authority.
const SSH_CA_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl demo-ca@unikorn";

pub(crate) struct World {
    pub(crate) sim: SimKube,
    pub(crate) served: ServeHandle,
    pub(crate) client: kube::Client,
}

impl World {
    /// Starts SimKube on `addr` (port 0 picks one), serving every CRD the
    /// operator touches, and seeds the consumed resources.
    pub(crate) async fn start(seed: u64, addr: SocketAddr) -> anyhow::Result<Self> {
        // As on a real cluster, objects go only into namespaces that exist.
        let sim = SimKube::builder().seed(seed).strict_namespaces().build();
        sim.store().ensure_namespace(NAMESPACE);
        for crd in server_kube::crd::all_crds() {
            let crd = serde_json::to_value(&crd).context("cannot encode a CRD")?;
            sim.install_crd(crd).map_err(|e| anyhow::anyhow!("SimKube refused a CRD: {e:?}"))?;
        }
        let served = sim.serve(addr).await.context("cannot serve SimKube on a loopback port")?;
        let url = served.url().parse().context("SimKube's URL")?;
        let mut config = kube::Config::new(url);
        config.default_namespace = NAMESPACE.into();
        let client = kube::Client::try_from(config).context("cannot build a kube client for SimKube")?;
        let world = World { sim, served, client };
        world.seed_consumed_resources()?;
        Ok(world)
    }

    pub(crate) fn store(&self) -> StoreHandle {
        self.sim.store()
    }

    fn seed_consumed_resources(&self) -> anyhow::Result<()> {
        let store = self.store();
        let labelled = |name: &str| json!({"name": name, "namespace": NAMESPACE, "labels": {IDENTITY_LABEL: IDENTITY, REGION_LABEL: REGION}});
        let object = |kind: &str, name: &str, spec: Value| json!({"apiVersion": "region.unikorn-cloud.org/v1alpha1", "kind": kind, "metadata": labelled(name), "spec": spec});
        let mut identity = object("Identity", IDENTITY, json!({"provider": "openstack"}));
        identity["status"] = json!({"conditions": [{
            "type": "Available", "status": "True", "reason": "Provisioned", "message": "Provisioned",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]});
        let seeds = [
            ("identities", identity),
            (
                "openstackidentities",
                object(
                    "OpenstackIdentity",
                    IDENTITY,
                    json!({"projectID": OPENSTACK_PROJECT, "userID": OPENSTACK_USER, "password": OPENSTACK_PASSWORD}),
                ),
            ),
            ("networks", object("Network", NETWORKS[0], json!({"prefix": "10.0.0.0/24"}))),
            ("networks", object("Network", NETWORKS[1], json!({"prefix": "10.1.0.0/24"}))),
            ("securitygroups", object("SecurityGroup", SECURITY_GROUP, json!({}))),
            ("sshcertificateauthorities", object("SSHCertificateAuthority", SSH_CA, json!({"publicKey": SSH_CA_KEY}))),
        ];
        for (resource, object) in seeds {
            store.insert(resource, object).map_err(|e| anyhow::anyhow!("cannot seed {resource}: {e:?}"))?;
        }
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
