//! What only the OpenStack path has, end to end through the adapter and the
//! strict simulator: taking over the servers the Go controller made, Neutron
//! quota, and tags Nova would refuse as they are.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use server_e2e::cloud::Fate;
use server_e2e::openstack::{Fault, Op, OpenStackSim, OpenStackSimConfig, SeededServer, Target};
use server_e2e::*;
use server_kube::ControllerConfig;

fn openstack(env: &Env) -> OpenStackSim {
    env.openstack().cloned().unwrap_or_else(|| panic!("the OpenStack path has a simulator"))
}

/// A server as the Go controller leaves it: named after the Server's name
/// label, its system metadata, its port `server-<name>` on the Network's
/// Neutron network with the SecurityGroup's group.
fn seed_go_server(env: &Env, model_uid: &str, server_name: &str) -> String {
    let sim = openstack(env);
    let network_id = sim.network_id(&format!("network-{NETWORK}")).unwrap_or_else(|| panic!("no network"));
    let group_id =
        sim.security_group_id(&format!("securitygroup-{SECURITY_GROUP}")).unwrap_or_else(|| panic!("no group"));
    let metadata: BTreeMap<String, String> = [
        ("serverID", server_name),
        ("organizationID", "org-1"),
        ("projectID", "proj-1"),
        ("regionID", REGION),
        ("region:server_id", server_name),
        ("identity:organization_id", "org-1"),
        ("identity:project_id", "proj-1"),
        ("region:region_id", REGION),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let seed = SeededServer {
        uid: model_uid.to_owned(),
        name: server_name.to_owned(),
        flavor_id: FLAVOR.to_owned(),
        image_id: IMAGE.to_owned(),
        metadata,
        port_name: format!("server-{server_name}"),
        network_id,
        security_group_ids: vec![group_id],
    };
    sim.seed_server(PROJECT, seed).unwrap_or_else(|e| panic!("seeding {server_name}: {e}"))
}

/// Adoption on SimKube and on kube-apiserver (the OpenStack path only: the
/// Go controller's servers are Nova's).
mod a_go_made_world_is_adopted_with_no_create_or_delete {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn openstack() {
        server_e2e::within(super::a_go_made_world_is_adopted_with_no_create_or_delete()).await
    }

    // On kube-apiserver the watch lags the operator's own writes: a pass on
    // the older copy would report the adoption a second time. Passes wait for
    // the watch to bring their own writes (adapters/kube/src/own_writes.rs);
    // without that this variant fails about one run in two.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn openstack_real() {
        server_e2e::on_the_real_server(super::a_go_made_world_is_adopted_with_no_create_or_delete()).await
    }
}

async fn a_go_made_world_is_adopted_with_no_create_or_delete() {
    {
        let mut env = Env::new(CloudKind::OpenStack, 41).await;
        let names = ["go-a", "go-b", "go-c"];
        let mut ids = Vec::new();
        let mut uids = Vec::new();
        for name in names {
            // The uid is the API server's: the Server first (the operator
            // is not running yet), then the server the Go controller made for it.
            let uid = env.create_server(name, fast(Fate::clean()), Env::spec());
            ids.push(seed_go_server(&env, &uid, name));
            uids.push(uid);
        }
        let sim = openstack(&env);
        let before = sim.counters();
        env.start();
        for name in names {
            env.wait_server(name, "adopted, Provisioned, latched", |s| {
                available_reason(s) == "Provisioned" && status(s).provisioned_at.is_some()
            })
            .await;
        }
        env.idle(5).await;
        let after = sim.counters();
        assert_eq!(
            (after.server_creates, after.port_creates, after.server_deletes, after.port_deletes),
            (before.server_creates, before.port_creates, before.server_deletes, before.port_deletes),
            "adoption created or deleted something: {after:?}"
        );
        assert_eq!(after.server_metadata_updates - before.server_metadata_updates, 3, "each adopted once");
        for ((name, id), uid) in names.iter().zip(&ids).zip(&uids) {
            let truth = env.truth(uid);
            assert_eq!((truth.creates_accepted, truth.delete_calls, truth.live), (1, 0, 1), "{name}: {truth:?}");
            let nova = sim.servers().into_iter().find(|s| s.id.as_deref() == Some(id.as_str()));
            let metadata = nova.map(|s| s.metadata).unwrap_or_default();
            assert_eq!(metadata.get("unikorn:server-uid"), Some(uid), "{name} is tagged with its uid");
            assert_eq!(metadata.get("serverID").map(String::as_str), Some(*name), "the Go metadata stays");
            assert_eq!(env.event_count(name, "ProviderServerAdopted"), 1, "{:?}", env.events(name));
        }
        env.assert_invariants();
        env.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_go_made_candidates_are_an_error_and_nothing_is_made_or_deleted() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 42).await;
        for model_uid in ["uid-dup-1", "uid-dup-2"] {
            env.cloud.script(model_uid, fast(Fate::clean()));
            seed_go_server(&env, model_uid, "dup");
        }
        env.create_server("dup", fast(Fate::clean()), Env::spec());
        let before = openstack(&env).counters();
        env.start();
        env.wait_server("dup", "an error naming the ambiguity", |s| available_message(s).contains("serverID=dup"))
            .await;
        env.idle(5).await;
        let after = openstack(&env).counters();
        assert_eq!(
            (after.server_creates, after.port_creates, after.server_deletes, after.server_metadata_updates),
            (before.server_creates, before.port_creates, before.server_deletes, before.server_metadata_updates),
            "{after:?}"
        );
        env.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neutron_quota_parks_the_server_with_neutrons_message() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 43).await;
        let sim = openstack(&env);
        sim.inject(Target::Op(Op::PortCreate), Fault::OVER_QUOTA, u32::MAX);
        env.create_server("ports", fast(Fate::clean()), Env::spec());
        env.start();
        env.wait_server("ports", "parked with Neutron's message", |s| {
            available_reason(s) == "Errored" && available_message(s).contains("Quota exceeded for resources")
        })
        .await;
        let attempts = sim.requests().iter().filter(|r| r.op == Op::PortCreate).count();
        env.idle(10).await;
        let later = sim.requests().iter().filter(|r| r.op == Op::PortCreate).count();
        assert_eq!(later, attempts, "a refusal is not retried until the spec changes");
        assert_eq!(env.event_count("ports", "ProviderCreateRefused"), 1, "{:?}", env.events("ports"));
        assert_eq!(sim.counters().server_creates, 0);
        env.stop().await;
    })
    .await;
}

/// Keystone refuses the identity's login (its password was changed
/// elsewhere): each Server says what to fix, logins back off per credential
/// however many passes run, nothing is created or counted, and once the
/// password is right again the Servers provision with no retry requested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_says_what_to_fix_backs_off_and_resumes_once_fixed() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 47).await;
        env.login_backoff(Duration::from_millis(500), Duration::from_secs(2));
        let sim = openstack(&env);
        sim.add_user(OPENSTACK_USER, "changed-elsewhere");
        let names = ["login-0", "login-1", "login-2", "login-3", "login-4"];
        for name in names {
            env.create_server(name, fast(Fate::clean()), Env::spec());
        }
        env.start();
        for name in names {
            env.wait_server(name, "says the login was refused and what to fix", |s| {
                available_message(s).contains("Keystone refused the credentials (HTTP 401)")
                    && available_message(s).contains("update the OpenstackIdentity's password")
            })
            .await;
        }
        let logins = || sim.requests().iter().filter(|r| r.op == Op::Token).count();
        let before = logins();
        env.idle(40).await;
        let during = logins() - before;
        // 4 s at 100 ms requeues is about 200 passes; the backoff (0.5 s,
        // doubling to 2 s) allows at most 4 logins in it.
        assert!(during <= 4, "{during} logins in 4 s");
        assert_eq!(sim.counters().server_creates, 0);

        sim.add_user(OPENSTACK_USER, OPENSTACK_PASSWORD);
        for name in names {
            let server = env
                .wait_server(name, "provisioned once the password is right", |s| status(s).provisioned_at.is_some())
                .await;
            assert_eq!(status(&server).provider_create_failures, 0, "a refused login is no create attempt");
            assert_eq!(env.event_count(name, "ProviderCreateFailed"), 0, "{:?}", env.events(name));
        }
        assert_eq!(sim.counters().server_creates, names.len() as u64);
        env.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_in_the_unikorn_scheme_are_converted_and_unfit_ones_left_out() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 44).await;
        let mut spec = Env::spec();
        spec["tags"] = json!([
            {"name": "compute.unikorn-cloud.org/workload-class", "value": "batch"},
            {"name": "owner@example.com", "value": "alice"},
            {"name": "team", "value": "blue"},
        ]);
        let uid = env.create_server("tagged", fast(Fate::clean()), spec);
        env.start();
        env.wait_server("tagged", "Running", |s| phase(s) == "Running").await;
        let nova = openstack(&env).servers().into_iter().find(|s| s.server_uid == uid);
        let metadata = nova.map(|s| s.metadata).unwrap_or_default();
        assert_eq!(metadata.get("compute:workload_class").map(String::as_str), Some("batch"));
        assert_eq!(metadata.get("team").map(String::as_str), Some("blue"));
        assert!(!metadata.keys().any(|k| k.contains('@') || k.contains('/')), "{metadata:?}");
        // The left-out tag is named in one event; its value is not.
        let notes = env.event_notes("tagged", "ProviderTagsDropped");
        assert!(
            matches!(notes.as_slice(), [note] if note.contains("\"owner@example.com\"") && !note.contains("alice")),
            "{notes:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        env.stop().await;
    })
    .await;
}

/// uni-region's rule, from the Region resource: floating IPs come from the
/// first external network its selector picks, and an edit of the Region
/// applies to the next create without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floating_ip_network_is_the_one_the_region_resource_selects() {
    within(async {
        let sim_config = OpenStackSimConfig {
            external_networks: vec!["ext-a".into(), "ext-b".into(), "ext-c".into()],
            external_network_tags: [("ext-b".to_owned(), vec!["public".to_owned()])].into_iter().collect(),
            ..Default::default()
        };
        let config = ControllerConfig { region_namespace: Some(NAMESPACE.into()), ..test_config() };
        let mut env =
            Env::build_with(CloudKind::OpenStack, 47, config, cloud::CloudConfig::reliable(47), sim_config).await;
        let selector = |selector: serde_json::Value| {
            json!({"provider": "openstack", "openstack": {"network": {"externalNetworks": {"selector": selector}}}})
        };
        env.seed("regions", REGION, selector(json!({"tags": ["public"]})));
        let mut spec = Env::spec();
        spec["publicIPAllocation"] = json!({ "enabled": true });
        let first = env.create_server("first", fast(Fate::clean()), spec.clone());
        env.start();
        env.wait_server("first", "Running with a public IP", |s| phase(s) == "Running" && status(s).public_ip.is_some())
            .await;
        let network_of = |env: &Env, uid: &str| {
            let sim = openstack(env);
            let port = sim.ports().into_iter().find(|p| p.server_uid.as_deref() == Some(uid)).map(|p| p.id);
            sim.floating_ips().into_iter().find(|ip| port.is_some() && ip.port_id == port).map(|ip| ip.network_id)
        };
        assert_eq!(network_of(&env, &first).as_deref(), Some("ext-b"));

        env.sim()
            .store()
            .modify("regions", Some(NAMESPACE), REGION, |region| {
                region["spec"] = selector(json!({"ids": ["ext-c"]}));
            })
            .unwrap_or_else(|e| panic!("{e}"));
        // The watch delivers the edit (within a bookmark interval here; the
        // margin is for a loaded machine); a create after it uses it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = env.create_server("second", fast(Fate::clean()), spec);
        env.wait_server("second", "Running with a public IP", |s| {
            phase(s) == "Running" && status(s).public_ip.is_some()
        })
        .await;
        assert_eq!(network_of(&env, &second).as_deref(), Some("ext-c"));
        env.stop().await;
    })
    .await;
}

/// A throwaway ed25519 public key for an SSH certificate authority.
const CA_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl e2e-ca@unikorn";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_an_ssh_ca_boots_with_the_identitys_keypair() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 45).await;
        // The identity's keypair, as its provisioning leaves it in Nova and
        // on the OpenstackIdentity.
        openstack(&env).add_keypair("identity-1-key");
        env.sim()
            .store()
            .modify("openstackidentities", Some(NAMESPACE), IDENTITY, |identity| {
                identity["spec"]["sshKeyName"] = json!("identity-1-key");
            })
            .unwrap_or_else(|e| panic!("{e}"));
        env.seed("sshcertificateauthorities", "ca-1", json!({"publicKey": CA_KEY}));
        let keyed = env.create_server("keyed", fast(Fate::clean()), Env::spec());
        let mut with_ca = Env::spec();
        with_ca["sshCertificateAuthorityID"] = json!("ca-1");
        let ca = env.create_server("with-ca", fast(Fate::clean()), with_ca);
        let mut neither = Env::spec();
        neither["sshInjection"] = json!("none");
        let none = env.create_server("neither", fast(Fate::clean()), neither);
        env.start();
        for name in ["keyed", "with-ca", "neither"] {
            env.wait_server(name, "Running", |s| phase(s) == "Running").await;
        }
        let sim = openstack(&env);
        let nova = |uid: &str| sim.servers().into_iter().find(|s| s.server_uid == uid);
        assert_eq!(nova(&keyed).and_then(|s| s.key_name).as_deref(), Some("identity-1-key"));
        assert_eq!(nova(&ca).map(|s| s.key_name), Some(None), "the CA path boots without the keypair");
        assert_eq!(nova(&none).map(|s| s.key_name), Some(None), "sshInjection none: no keypair");
        // The Go controller's system metadata, from the Server's labels.
        let metadata = nova(&keyed).map(|s| s.metadata).unwrap_or_default();
        assert_eq!(metadata.get("serverID").map(String::as_str), Some("keyed"));
        assert_eq!(metadata.get("region:server_id").map(String::as_str), Some("keyed"));
        assert_eq!(metadata.get("regionID").map(String::as_str), Some(REGION));
        assert_eq!(metadata.get("region:region_id").map(String::as_str), Some(REGION));
        for key in ["organizationID", "projectID", "identity:organization_id", "identity:project_id"] {
            assert!(metadata.contains_key(key), "{key} missing: {metadata:?}");
        }
        env.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_networks_status_names_its_neutron_network() {
    within(async {
        let mut env = Env::new(CloudKind::OpenStack, 46).await;
        let sim = openstack(&env);
        // The seeding also makes `network-net-status`; the status names
        // another Neutron network, which wins.
        env.seed("networks", "net-status", json!({"prefix": "10.2.0.0/24"}));
        let recorded = sim.add_network(PROJECT, "made-elsewhere");
        let status = json!({"openstack": {"networkID": recorded}});
        env.sim()
            .store()
            .modify("networks", Some(NAMESPACE), "net-status", |network| network["status"] = status.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut spec = Env::spec();
        spec["networks"] = json!([{"id": "net-status"}]);
        let uid = env.create_server("by-status", fast(Fate::clean()), spec);
        env.start();
        env.wait_server("by-status", "Running", |s| phase(s) == "Running").await;
        let port = sim.ports().into_iter().find(|p| p.server_uid.as_deref() == Some(uid.as_str()));
        assert_eq!(port.map(|p| p.network_id), Some(recorded), "the port is on the network the status names");
        env.stop().await;
    })
    .await;
}

/// Nova and Neutron both paging two at a time (`osapi_max_limit`,
/// `pagination_max_limit`, as large clouds set them): every Server's server,
/// port and floating IP are found across pages by the passes and the
/// monitor, and every one is released on delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_that_span_pages_lose_nothing_and_leave_nothing() {
    within(async {
        let sim_config = OpenStackSimConfig { page_size: 2, pagination_max_limit: Some(2), ..Default::default() };
        let mut env =
            Env::build_with(CloudKind::OpenStack, 53, test_config(), cloud::CloudConfig::reliable(53), sim_config)
                .await;
        let mut spec = Env::spec();
        spec["publicIPAllocation"] = json!({ "enabled": true });
        let names: Vec<String> = (0..7).map(|i| format!("paged-{i}")).collect();
        let uids: Vec<String> =
            names.iter().map(|name| env.create_server(name, fast(Fate::clean()), spec.clone())).collect();
        env.start();
        for name in &names {
            env.wait_server(name, "Running with a public IP", |s| {
                phase(s) == "Running" && status(s).public_ip.is_some()
            })
            .await;
        }
        let sim = openstack(&env);
        assert_eq!((sim.servers().len(), sim.ports().len(), sim.floating_ips().len()), (7, 7, 7));
        assert_eq!(sim.counters().duplicate_server_creates, 0);
        for name in &names {
            env.delete_server(name).await;
        }
        env.wait("every paged Server is gone", || names.iter().all(|name| env.server(name).is_none())).await;
        let live: u32 = uids.iter().map(|uid| sim.cloud().truth(uid).live).sum();
        let left = (live, sim.ports().len(), sim.floating_ips().len());
        assert_eq!(left, (0, 0, 0), "servers, ports and floating IPs left after every delete");
        env.assert_invariants();
        env.stop().await;
    })
    .await;
}

/// After the term's first complete list, a poll asks Nova for the servers
/// changed since the latest change it saw (less its margin): once the
/// servers have stood still longer than that, each poll is one page, not
/// the five a complete list of these nine takes; and a change Nova does
/// not date still reaches the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_polls_ask_nova_for_what_changed_a_page_each() {
    within(async {
        let sim_config = OpenStackSimConfig { page_size: 2, ..Default::default() };
        let mut env =
            Env::build_with(CloudKind::OpenStack, 54, test_config(), cloud::CloudConfig::reliable(54), sim_config)
                .await;
        let names: Vec<String> = (0..9).map(|i| format!("steady-{i}")).collect();
        for name in &names {
            env.create_server(name, fast(Fate::clean()), Env::spec());
        }
        env.start();
        for name in &names {
            env.wait_server(name, "Running", |s| phase(s) == "Running").await;
        }
        // Past the margin the lists of changes start from.
        let margin = server_core::listing::SINCE_MARGIN + Duration::from_secs(5);
        tokio::time::sleep(margin).await;
        let sim = openstack(&env);
        let pages = || sim.requests().iter().filter(|r| r.op == Op::ServerListDetail).count();
        let before = pages();
        let window = Duration::from_secs(2);
        tokio::time::sleep(window).await;
        let polls_at_most = window.as_millis() / test_config().monitor_interval.as_millis() + 1;
        let listed = u128::try_from(pages() - before).unwrap_or(u128::MAX);
        assert!(listed >= 3, "the monitor kept polling: {listed} pages");
        assert!(listed <= polls_at_most, "{listed} pages in at most {polls_at_most} polls: more than one a poll");
        // A floating IP on a server that runs is a change Nova does not
        // date: the poll after it lists every server, so the IP reaches
        // the status at once, not at the complete list ten minutes on.
        env.patch_spec("steady-0", json!({ "publicIPAllocation": { "enabled": true } })).await;
        env.wait_server("steady-0", "its public IP", |s| status(s).public_ip.is_some()).await;
        env.assert_invariants();
        env.stop().await;
    })
    .await;
}
