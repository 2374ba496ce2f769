//! One operator, several regions: each served by the kind of cloud it is
//! configured with, with that kind's identity source, as long as its Region
//! resource names that provider; a region whose provider this controller
//! does not serve is reported on its Servers, which wait (never a crash,
//! never a create, never a release).

use std::time::Duration;

use serde_json::json;
use server_core::model::{IDENTITY_LABEL, REGION_LABEL};
use server_core::port::IdentityContext;
use server_core::{RegionUnserved, Wait};
use server_e2e::cloud::{CloudConfig, Fate, SimCloud};
use server_e2e::openstack::OpenStackSimConfig;
use server_e2e::*;
use server_kube::{ControllerConfig, RegionCloud};

/// Served by an in-process SimCloud, as a `simulated` region.
const SIMULATED: &str = "region-sim";
/// Named by no configuration; its Region says `kubernetes`, which this
/// controller has no cloud for.
const KUBERNETES: &str = "region-kube";

fn in_region(region: &'static str) -> [(&'static str, &'static str); 2] {
    [(REGION_LABEL, region), (IDENTITY_LABEL, IDENTITY)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_operator_serves_each_region_with_the_cloud_its_region_resource_names() {
    within(async {
        let sim_config = OpenStackSimConfig {
            external_networks: vec!["ext-a".into(), "ext-b".into()],
            external_network_tags: [("ext-b".to_owned(), vec!["public".to_owned()])].into_iter().collect(),
            ..Default::default()
        };
        let config = ControllerConfig { region_namespace: Some(NAMESPACE.into()), ..test_config() };
        let mut env =
            Env::build_with(CloudKind::OpenStack, 48, config, CloudConfig::reliable(48), sim_config).await;
        env.seed(
            "regions",
            REGION,
            json!({"provider": "openstack", "openstack": {"network": {"externalNetworks": {"selector": {"tags": ["public"]}}}}}),
        );
        // The simulated region's Region names the wrong provider at first.
        env.seed("regions", SIMULATED, json!({"provider": "openstack"}));
        env.seed("regions", KUBERNETES, json!({"provider": "kubernetes"}));
        let simulated = SimCloud::new(CloudConfig::reliable(49));
        env.serve_region(SIMULATED, RegionCloud::simulated(simulated.port()));

        let mut spec = Env::spec();
        spec["publicIPAllocation"] = json!({ "enabled": true });
        let on_openstack = env.create_server("on-openstack", fast(Fate::clean()), spec);
        simulated.script("uid-on-simulated", fast(Fate::clean()));
        let on_simulated =
            env.create_server_with_labels("on-simulated", fast(Fate::clean()), Env::spec(), &in_region(SIMULATED));
        let on_kubernetes =
            env.create_server_with_labels("on-kubernetes", fast(Fate::clean()), Env::spec(), &in_region(KUBERNETES));
        env.start();

        // The OpenStack region: its Region's selector picks the floating-IP network.
        env.wait_server("on-openstack", "Running with a public IP", |s| {
            phase(s) == "Running" && status(s).public_ip.is_some()
        })
        .await;
        let sim = env.openstack().cloned().unwrap_or_else(|| panic!("the OpenStack path runs the simulator"));
        let port = sim.ports().into_iter().find(|p| p.server_uid.as_deref() == Some(on_openstack.as_str()));
        let network = sim
            .floating_ips()
            .into_iter()
            .find(|ip| port.as_ref().is_some_and(|port| ip.port_id.as_deref() == Some(port.id.as_str())))
            .map(|ip| ip.network_id);
        assert_eq!(network.as_deref(), Some("ext-b"));

        // A Region naming a provider this controller does not support.
        let unsupported = Wait::RegionUnserved(RegionUnserved::UnsupportedProvider {
            region: KUBERNETES.into(),
            provider: "kubernetes".into(),
        })
        .message();
        env.wait_server("on-kubernetes", "reported unsupported", |s| available_message(s) == unsupported).await;
        // A Region naming another provider than the region's cloud.
        let mismatch = Wait::RegionUnserved(RegionUnserved::ProviderMismatch {
            region: SIMULATED.into(),
            declared: "openstack".into(),
            configured: "simulated".into(),
        })
        .message();
        env.wait_server("on-simulated", "reported mismatched", |s| available_message(s) == mismatch).await;
        assert_eq!(simulated.counters().create_calls, 0, "nothing is created in a region not served");

        // The Region is corrected: served on a later pass, without a restart.
        env.sim()
            .store()
            .modify("regions", Some(NAMESPACE), SIMULATED, |region| region["spec"]["provider"] = json!("simulated"))
            .unwrap_or_else(|e| panic!("{e}"));
        env.wait_server("on-simulated", "Running", |s| phase(s) == "Running").await;

        // Each cloud holds its own region's server, in the project its
        // identity source gives: the OpenstackIdentity's project on
        // OpenStack, the Identity itself on the simulated cloud.
        assert_eq!(env.truth(&on_openstack).live, 1);
        assert_eq!(simulated.truth(&on_simulated).live, 1);
        assert_eq!(simulated.truth(&on_openstack).create_calls, 0);
        assert_eq!(env.truth(&on_simulated).create_calls, 0);
        let as_identity = IdentityContext {
            region_id: SIMULATED.into(),
            identity_id: IDENTITY.into(),
            project_id: IDENTITY.into(),
            ..IdentityContext::default()
        };
        let listed = simulated.port().list(&as_identity, server_core::port::ListScope::Complete).await.unwrap_or_default().servers;
        assert_eq!(listed.iter().map(|s| s.server_uid.as_str()).collect::<Vec<_>>(), [on_simulated.as_str()]);

        // The unsupported region's Server was never created anywhere, and
        // deleting it keeps its finalizer: its provider server may be in a
        // cloud this controller cannot reach.
        assert_eq!(env.truth(&on_kubernetes).create_calls + simulated.truth(&on_kubernetes).create_calls, 0);
        env.delete_server("on-kubernetes").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held = env.server("on-kubernetes").unwrap_or_else(|| panic!("released without its provider's word"));
        assert!(has_finalizer(&held, server_core::model::SERVER_FINALIZER));
        assert_eq!(available_message(&held), unsupported);
        env.stop().await;
    })
    .await;
}
