//! The adapter driven over HTTP through the OpenStack simulator (server-sim-openstack):
//! auth and token refresh, idempotent create, record mapping, delete
//! sequencing and every error class.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use server_core::baremetal::ProvisionState;
use server_core::listing::ListedServers;
use server_core::model::{AllowedAddressPair, NetworkAttachment, Tag};
use server_core::port::{
    AttachedResource, CloudError, CloudPort, CreateRequest, CreateStep, Credentials, DeleteProgress, FloatingIpRequest,
    IdentityContext, LIST_PAGE_ATTEMPTS, ListScope, NetworkingQuery, NetworkingSource, PowerState, ProviderServer,
    ProviderStatus, RegionSettings, RequestGate, ServerRef, Term,
};
use server_openstack::{FailureStreakHook, NetworkSelector, OpenStackCloud, OpenStackConfig, port_name};
use server_sim_openstack::{Fault, KeystoneUrl, Op, OpenStackSim, OpenStackSimConfig, ServeHandle, Target};
use server_simcloud::{CloudConfig, Fate, ManualClock, SimCloud};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const PROJECT: &str = "project-1";

struct Harness {
    sim: OpenStackSim,
    clock: Arc<ManualClock>,
    served: ServeHandle,
    cloud: OpenStackCloud,
    identity: IdentityContext,
    /// Neutron ids of `network-net-1`, `securitygroup-sg-web`, `securitygroup-sg-ssh`.
    network_id: String,
    group_ids: [String; 2],
}

impl Harness {
    async fn new() -> Result<Self, Box<dyn std::error::Error>> {
        Harness::with(OpenStackSimConfig::default(), |_| {}).await
    }

    async fn with(
        sim_config: OpenStackSimConfig,
        configure: impl FnOnce(&mut OpenStackConfig),
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let clock = Arc::new(ManualClock::starting_at(start()));
        let cloud = SimCloud::with_clock(CloudConfig::reliable(7), clock.clone());
        let sim = OpenStackSim::with_config(cloud, sim_config);
        let served = sim.serve("127.0.0.1:0".parse()?).await?;
        let mut config = OpenStackConfig::new(served.auth_url(), "RegionOne");
        config.request_timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_secs(1);
        configure(&mut config);
        let cloud = OpenStackCloud::new(config)?;
        // As the unikorn network controllers name them (network-<id>, securitygroup-<id>).
        let network_id = sim.add_network(PROJECT, "network-net-1");
        let group_ids = [
            sim.add_security_group(PROJECT, "securitygroup-sg-web"),
            sim.add_security_group(PROJECT, "securitygroup-sg-ssh"),
        ];
        let identity = IdentityContext {
            region_id: "region-a".into(),
            identity_id: "identity-1".into(),
            project_id: PROJECT.into(),
            credentials: Credentials::Password { user_id: "user-1".into(), password: "s3cret".into() },
            ssh_key_name: None,
        };
        Ok(Harness { sim, clock, served, cloud, identity, network_id, group_ids })
    }

    /// Another adapter instance (no token cache, no remembered ids).
    fn fresh_cloud(&self) -> Result<OpenStackCloud, Box<dyn std::error::Error>> {
        Ok(OpenStackCloud::new(self.cloud.config().clone())?)
    }

    /// A create, then what the core asks of the next pass for a public
    /// Server: read the port, and give it a floating IP if it has none.
    async fn create(&self, cloud: &OpenStackCloud, req: &CreateRequest) -> Result<ProviderServer, CloudError> {
        let created = cloud.create(&self.identity, req).await?;
        if req.public_ip {
            self.ensure_public_ip(cloud, req, &created.id).await?;
        }
        Ok(created)
    }

    async fn ensure_public_ip(
        &self,
        cloud: &OpenStackCloud,
        req: &CreateRequest,
        provider_id: &str,
    ) -> Result<(), CloudError> {
        let query = NetworkingQuery {
            server: req.server.clone(),
            provider_id: provider_id.to_owned(),
            security_groups: req.security_group_ids.clone(),
        };
        let networking = cloud.networking(&self.identity, &query).await?;
        let port = networking.port.ok_or(CloudError::NotReady { message: "no port".into() })?;
        if port.floating_ip.is_none() {
            let request = FloatingIpRequest { server: req.server.clone(), port_id: port.id };
            cloud.ensure_floating_ip(&self.identity, &request).await?;
        }
        Ok(())
    }

    fn ops(&self, op: Op) -> usize {
        self.sim.requests().iter().filter(|r| r.op == op).count()
    }
}

fn start() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn server_ref(uid: &str) -> ServerRef {
    ServerRef { namespace: "ns".into(), name: format!("server-{uid}"), uid: uid.into() }
}

fn request(uid: &str, public_ip: bool) -> CreateRequest {
    CreateRequest {
        server: server_ref(uid),
        name: format!("vm-{uid}"),
        flavor_id: "flavor-small".into(),
        image_id: "image-ubuntu".into(),
        networks: vec![NetworkAttachment {
            id: "net-1".into(),
            allowed_address_pairs: vec![
                AllowedAddressPair { cidr: "10.9.0.0/16".into(), mac_address: None },
                AllowedAddressPair { cidr: "10.8.0.1".into(), mac_address: Some("fa:16:3e:aa:bb:cc".into()) },
            ],
        }],
        security_group_ids: vec!["sg-web".into(), "sg-ssh".into()],
        network_ids: Default::default(),
        public_ip,
        user_data: Some(b"#cloud-config\nruncmd: [echo hi]\n\xff\x00binary".to_vec()),
        tags: vec![Tag { name: "team".into(), value: "blue".into() }],
        identity_ssh_key: true,
        owner: Default::default(),
        first_create: false,
    }
}

// ---------------------------------------------------------------- auth

#[tokio::test]
async fn token_is_cached_then_refreshed_once_on_401() -> TestResult {
    let h = Harness::new().await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(h.sim.counters().token_requests, 1, "the token is reused");

    // Keystone forgot every token: one 401, one new token, the call succeeds.
    h.sim.revoke_tokens();
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    let counters = h.sim.counters();
    assert_eq!((counters.token_requests, counters.unauthorized), (2, 1));

    // A 401 that survives the refresh is an auth failure, after one retry only.
    h.sim.inject(Target::Compute, Fault::Status(401), 2);
    let error = h.cloud.list(&h.identity, ListScope::Complete).await.err();
    assert!(matches!(error, Some(CloudError::Auth { .. })), "{error:?}");
    assert_eq!(h.sim.counters().token_requests, 3);
    assert!(!error.is_some_and(|e| e.is_transient()));
    Ok(())
}

#[tokio::test]
async fn token_is_renewed_shortly_before_expiry() -> TestResult {
    let sim_config = OpenStackSimConfig { token_ttl: Duration::from_secs(2), ..Default::default() };
    let h = Harness::with(sim_config, |c| c.token_refresh_margin = Duration::from_secs(1)).await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(h.sim.counters().token_requests, 1);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(h.sim.counters().token_requests, 2, "renewed a margin before expiry");
    assert_eq!(h.sim.counters().unauthorized, 0, "never sent an expired token");
    Ok(())
}

#[tokio::test]
async fn a_token_keystone_considers_expired_is_replaced() -> TestResult {
    let h = Harness::new().await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    // Keystone's clock runs two hours ahead of ours: its token lapsed early.
    h.clock.advance(Duration::from_secs(7_200));
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    let counters = h.sim.counters();
    assert_eq!((counters.token_requests, counters.unauthorized), (2, 1));
    Ok(())
}

#[tokio::test]
async fn tokens_are_per_identity() -> TestResult {
    let h = Harness::new().await?;
    let other = IdentityContext {
        identity_id: "identity-2".into(),
        project_id: "project-2".into(),
        credentials: Credentials::Password { user_id: "user-2".into(), password: "pw2".into() },
        ..h.identity.clone()
    };
    h.sim.add_network("project-2", "network-net-1");
    h.sim.add_security_group("project-2", "securitygroup-sg-web");
    h.sim.add_security_group("project-2", "securitygroup-sg-ssh");
    h.cloud.create(&h.identity, &request("uid-a", false)).await?;
    h.cloud.create(&other, &request("uid-b", false)).await?;
    assert_eq!(h.sim.counters().token_requests, 2);
    let mine = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    let theirs = h.cloud.list(&other, ListScope::Complete).await?.servers;
    assert_eq!(mine.iter().map(|s| s.server_uid.as_str()).collect::<Vec<_>>(), ["uid-a"]);
    assert_eq!(theirs.iter().map(|s| s.server_uid.as_str()).collect::<Vec<_>>(), ["uid-b"]);
    assert_eq!(h.sim.counters().token_requests, 2);
    Ok(())
}

#[tokio::test]
async fn application_credentials_authenticate_for_their_project() -> TestResult {
    let h = Harness::new().await?;
    h.sim.add_application_credential("ac-1", "ac-secret", PROJECT);
    h.sim.add_application_credential("ac-other", "x", "project-elsewhere");
    let identity = IdentityContext {
        credentials: Credentials::ApplicationCredential { id: "ac-1".into(), secret: "ac-secret".into() },
        ..h.identity.clone()
    };
    h.cloud.list(&identity, ListScope::Complete).await?;

    let wrong_secret = IdentityContext {
        credentials: Credentials::ApplicationCredential { id: "ac-1".into(), secret: "nope".into() },
        ..h.identity.clone()
    };
    let error = h.cloud.list(&wrong_secret, ListScope::Complete).await.err();
    assert!(matches!(&error, Some(CloudError::Auth { message }) if message.contains("request id req-")), "{error:?}");

    // A credential of another project must not be used to list this one.
    let wrong_project = IdentityContext {
        credentials: Credentials::ApplicationCredential { id: "ac-other".into(), secret: "x".into() },
        ..h.identity.clone()
    };
    let error = h.cloud.list(&wrong_project, ListScope::Complete).await.err();
    assert!(matches!(&error, Some(CloudError::Auth { message }) if message.contains("project-elsewhere")), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn bad_or_missing_credentials_are_auth_errors() -> TestResult {
    let h = Harness::new().await?;
    h.sim.add_user("user-1", "the-real-one");
    let error = h.cloud.list(&h.identity, ListScope::Complete).await.err();
    assert!(matches!(error, Some(CloudError::Auth { .. })), "{error:?}");
    let none = IdentityContext { credentials: Credentials::None, ..h.identity.clone() };
    let error = h.cloud.list(&none, ListScope::Complete).await.err();
    assert!(matches!(&error, Some(CloudError::Auth { message }) if message.contains("no OpenStack credentials")));
    // Nothing went to Keystone for the identity without credentials.
    assert_eq!(h.sim.counters().token_requests, 1);
    Ok(())
}

#[tokio::test]
async fn a_refused_login_is_remembered_per_credential_and_retried_with_backoff() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| {
        c.login_backoff = Duration::from_millis(400);
        c.login_backoff_max = Duration::from_millis(700);
    })
    .await?;
    let streaks = Arc::new(AtomicUsize::new(0));
    let counted = streaks.clone();
    let hook: FailureStreakHook = Arc::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let cloud = OpenStackCloud::with_login_failure_hook(h.cloud.config().clone(), Some(hook))?;
    h.sim.add_user("user-1", "s3cret");
    // The password was rotated in Keystone; the OpenstackIdentity still has the old one.
    let stale = IdentityContext {
        credentials: Credentials::Password { user_id: "user-1".into(), password: "old".into() },
        ..h.identity.clone()
    };
    let logins = || h.sim.counters().token_requests;
    // Ten Servers' passes: one login refused, the nine others not sent.
    for _ in 0..10 {
        let error = cloud.list(&stale, ListScope::Complete).await.err();
        assert!(matches!(error, Some(CloudError::Auth { .. })), "{error:?}");
    }
    assert_eq!(logins(), 1, "one refused login, none more during the backoff");
    assert_eq!(streaks.load(Ordering::SeqCst), 1);
    // The backoff over: one more try, refused, and the backoff doubles (to its cap).
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(cloud.list(&stale, ListScope::Complete).await.is_err());
    assert_eq!(logins(), 2);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(cloud.list(&stale, ListScope::Complete).await.is_err());
    assert_eq!(logins(), 2, "the second backoff is longer than the first");
    assert_eq!(streaks.load(Ordering::SeqCst), 1, "one streak, counted once");
    // The fixed password is another credential: tried at once.
    cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(logins(), 3);
    Ok(())
}

/// A Keystone that answers 503 (or cannot be reached) backs off per
/// credential as a refused login does: twenty Servers' passes make one token
/// request, each an error whose effect is none (no service request was
/// sent), and once the backoff is over and Keystone is back, the next call
/// logs in. (Before: one token request per pass, 602 in 29 s for 20 Servers.)
#[tokio::test]
async fn a_failing_keystone_is_retried_with_backoff_per_credential() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| {
        c.login_backoff = Duration::from_millis(400);
        c.login_backoff_max = Duration::from_millis(700);
    })
    .await?;
    h.sim.inject(Target::Keystone, Fault::Status(503), u32::MAX);
    for _ in 0..20 {
        let error = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
        assert!(error.is_transient(), "{error:?}");
        assert_eq!(error.effect(), server_core::port::CallEffect::None, "no service request was sent: {error:?}");
    }
    assert_eq!(h.sim.counters().token_requests, 1, "one token request during the backoff");
    h.sim.clear_faults();
    tokio::time::sleep(Duration::from_millis(450)).await;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(h.sim.counters().token_requests, 2);
    Ok(())
}

#[tokio::test]
async fn endpoints_come_from_the_configured_region() -> TestResult {
    // The simulator's catalog lists a decoy region first: picking it would fail
    // to connect; the configured region is used.
    let h = Harness::new().await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    let elsewhere = Harness::with(OpenStackSimConfig::default(), |c| c.region = "Atlantis".into()).await?;
    let error = elsewhere.cloud.list(&elsewhere.identity, ListScope::Complete).await.err();
    assert!(
        matches!(&error, Some(CloudError::Auth { message }) if message.contains("no public compute endpoint in region Atlantis")),
        "{error:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------- create

#[tokio::test]
async fn create_makes_port_server_and_floating_ip() -> TestResult {
    let h = Harness::new().await?;
    let req = request("uid-1", true);
    let created = h.create(&h.cloud, &req).await?;
    assert_eq!(created.server_uid, "uid-1");
    assert_eq!(created.status, ProviderStatus::Build);

    let ports = h.sim.ports();
    assert_eq!(ports.len(), 1);
    let port = &ports[0];
    assert_eq!(port.name, port_name("server-uid-1"));
    assert_eq!(port.project_id, PROJECT);
    assert_eq!(port.network_id, h.network_id, "the Neutron id of network-net-1");
    assert_eq!(port.security_groups, h.group_ids, "the Neutron ids of securitygroup-sg-web and -ssh");
    assert_eq!(
        port.allowed_address_pairs,
        [("10.9.0.0/16".to_owned(), port.mac_address.clone()), ("10.8.0.1".to_owned(), "fa:16:3e:aa:bb:cc".to_owned())]
    );
    assert_eq!(port.server_uid.as_deref(), Some("uid-1"));

    let servers = h.sim.servers();
    assert_eq!(servers.len(), 1);
    let server = &servers[0];
    assert_eq!(server.id.as_deref(), Some(created.id.as_str()));
    assert_eq!(
        (server.name.as_str(), server.flavor_id.as_str(), server.image_id.as_str()),
        ("vm-uid-1", "flavor-small", "image-ubuntu")
    );
    assert_eq!(server.port_id.as_deref(), Some(port.id.as_str()));
    assert_eq!(server.user_data, req.user_data, "user data reaches Nova byte for byte");
    assert_eq!(server.metadata.get("unikorn:server-uid").map(String::as_str), Some("uid-1"));
    assert_eq!(server.metadata.get("unikorn:server-namespace").map(String::as_str), Some("ns"));
    assert_eq!(server.metadata.get("unikorn:server-name").map(String::as_str), Some("server-uid-1"));
    assert_eq!(server.metadata.get("team").map(String::as_str), Some("blue"));

    // No floatingNetworkID configured: the project's only external network.
    let ips = h.sim.floating_ips();
    assert_eq!(ips.len(), 1);
    assert_eq!(ips[0].port_id.as_deref(), Some(port.id.as_str()));
    assert_eq!(ips[0].network_id, "external");
    Ok(())
}

#[tokio::test]
async fn the_identity_keypair_goes_to_nova_only_where_it_is_used() -> TestResult {
    let h = Harness::new().await?;
    let with_key = IdentityContext { ssh_key_name: Some("identity-1-key".into()), ..h.identity.clone() };
    // Nova refuses a keypair it does not know (400): the create is refused.
    let refused = h.cloud.create(&with_key, &request("uid-1", false)).await.err();
    assert!(matches!(refused, Some(CloudError::Refused { status: 400, .. })), "{refused:?}");
    h.sim.add_keypair("identity-1-key");
    h.cloud.create(&with_key, &request("uid-1", false)).await?;
    let ca_path = CreateRequest { identity_ssh_key: false, ..request("uid-2", false) };
    h.cloud.create(&with_key, &ca_path).await?;
    let key_of = |uid: &str| h.sim.servers().into_iter().find(|s| s.server_uid == uid).and_then(|s| s.key_name);
    assert_eq!(key_of("uid-1").as_deref(), Some("identity-1-key"));
    assert_eq!(key_of("uid-2"), None, "a Server on the CA path boots without the keypair");
    Ok(())
}

#[tokio::test]
async fn create_is_idempotent_per_server_uid() -> TestResult {
    let h = Harness::new().await?;
    let req = request("uid-1", true);
    let first = h.create(&h.cloud, &req).await?;
    let again = h.create(&h.cloud, &req).await?;
    // A restarted controller remembers nothing but finds it by metadata.
    let restarted = h.create(&h.fresh_cloud()?, &req).await?;
    assert_eq!((again.id.as_str(), restarted.id.as_str()), (first.id.as_str(), first.id.as_str()));
    let counters = h.sim.counters();
    assert_eq!(counters.server_creates, 1, "one POST /servers");
    assert_eq!(counters.duplicate_server_creates, 0);
    assert_eq!((counters.port_creates, counters.floating_ip_creates), (1, 1));
    assert_eq!(h.sim.cloud().truth("uid-1").creates_accepted, 1);
    Ok(())
}

#[tokio::test]
async fn a_lost_create_answer_is_absorbed_by_the_next_create() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| c.request_timeout = Duration::from_millis(400)).await?;
    h.sim.inject(Target::Op(Op::ServerCreate), Fault::LoseAnswer(Duration::from_secs(2)), 1);
    let req = request("uid-1", false);
    let error = h.cloud.create(&h.identity, &req).await.err();
    assert!(matches!(error, Some(CloudError::Timeout { .. })), "{error:?}");
    assert!(error.is_some_and(|e| e.is_transient()));

    let record = h.cloud.create(&h.identity, &req).await?;
    assert_eq!(record.server_uid, "uid-1");
    let counters = h.sim.counters();
    assert_eq!((counters.server_creates, counters.duplicate_server_creates, counters.port_creates), (1, 0, 1));
    assert_eq!(h.sim.cloud().truth("uid-1").live, 1);
    Ok(())
}

#[tokio::test]
async fn a_port_left_by_a_failed_attempt_is_updated_and_reused() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::refused(1));
    let error = h.cloud.create(&h.identity, &request("uid-1", false)).await.err();
    assert!(
        matches!(&error, Some(CloudError::Refused { status: 403, message }) if message.contains("Quota exceeded") && message.contains("request id req-")),
        "{error:?}"
    );
    assert_eq!(h.sim.ports().len(), 1);

    // The spec changed in between: the port follows it.
    let new_group = h.sim.add_security_group(PROJECT, "securitygroup-sg-new");
    let mut req = request("uid-1", false);
    req.security_group_ids = vec!["sg-new".into()];
    h.cloud.create(&h.identity, &req).await?;
    let ports = h.sim.ports();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].security_groups, [new_group]);
    assert_eq!(h.sim.counters().port_creates, 1);
    assert_eq!(h.sim.counters().port_updates, 1);
    Ok(())
}

/// A Server created again under the name of one whose server still runs
/// (abandoned with its identity, or made by another replica) finds that
/// server's port by name and description: bound to a server, it is neither
/// reused nor released, on the same network or another.
#[tokio::test]
async fn a_port_bound_to_a_live_server_is_never_reused_or_released_by_a_create() -> TestResult {
    let h = Harness::new().await?;
    let net_2 = h.sim.add_network(PROJECT, "network-net-2");
    let first = h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    let bound = h.sim.ports();
    assert_eq!(bound.len(), 1);

    let successor = |uid: &str, network: &str| {
        let mut req = request(uid, false);
        req.server = ServerRef { uid: uid.into(), ..server_ref("uid-1") };
        req.networks[0].id = network.into();
        req.security_group_ids = vec!["sg-web".into()];
        req
    };
    h.cloud.create(&h.identity, &successor("uid-2", "net-2")).await?;
    h.fresh_cloud()?.create(&h.identity, &successor("uid-3", "net-1")).await?;

    let ports = h.sim.ports();
    let kept = ports.iter().find(|p| p.id == bound[0].id);
    assert_eq!(kept, Some(&bound[0]), "the live server's port is untouched: {ports:?}");
    assert!(ports.iter().any(|p| p.network_id == net_2 && p.server_uid.as_deref() == Some("uid-2")), "{ports:?}");
    assert!(ports.iter().any(|p| p.id != bound[0].id && p.server_uid.as_deref() == Some("uid-3")), "{ports:?}");
    let counters = h.sim.counters();
    assert_eq!((counters.port_deletes, counters.port_updates), (0, 0));
    assert_eq!(h.sim.cloud().truth("uid-1").live, 1, "{first:?} lives on");
    Ok(())
}

#[tokio::test]
async fn the_floating_ip_network_is_the_first_external_one_the_regions_selector_picks() -> TestResult {
    let sim_config = OpenStackSimConfig {
        external_networks: vec!["ext-a".into(), "ext-b".into(), "ext-c".into()],
        external_network_tags: [
            ("ext-b".to_owned(), vec!["public".to_owned(), "ipv4".to_owned()]),
            ("ext-c".to_owned(), vec!["public".to_owned(), "ipv4".to_owned()]),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    // Several external networks, no selector: the first Neutron lists, as
    // the Go controller takes it.
    let h = Harness::with(sim_config.clone(), |_| {}).await?;
    h.create(&h.cloud, &request("uid-1", true)).await?;
    assert_eq!(h.sim.floating_ips().first().map(|ip| ip.network_id.clone()).as_deref(), Some("ext-a"));
    // By tags: the first listed network carrying all of them.
    let h = Harness::with(sim_config.clone(), |c| {
        c.external_networks = Some(NetworkSelector { ids: None, tags: Some(vec!["public".into(), "ipv4".into()]) });
    })
    .await?;
    h.create(&h.cloud, &request("uid-1", true)).await?;
    assert_eq!(h.sim.floating_ips().first().map(|ip| ip.network_id.clone()).as_deref(), Some("ext-b"));
    // By IDs and tags together.
    let h = Harness::with(sim_config.clone(), |c| {
        c.external_networks = Some(NetworkSelector {
            ids: Some(vec!["ext-a".into(), "ext-c".into()]),
            tags: Some(vec!["public".into()]),
        });
    })
    .await?;
    h.create(&h.cloud, &request("uid-1", true)).await?;
    assert_eq!(h.sim.floating_ips().first().map(|ip| ip.network_id.clone()).as_deref(), Some("ext-c"));
    // The Region resource's selector, when the configuration gives none;
    // the configuration's wins over it.
    let from_region =
        RegionSettings { external_networks: Some(NetworkSelector { ids: Some(vec!["ext-c".into()]), tags: None }) };
    let h = Harness::with(sim_config.clone(), |_| {}).await?;
    h.cloud.apply_region_settings(&from_region);
    h.create(&h.cloud, &request("uid-1", true)).await?;
    assert_eq!(h.sim.floating_ips().first().map(|ip| ip.network_id.clone()).as_deref(), Some("ext-c"));
    let h = Harness::with(sim_config.clone(), |c| {
        c.external_networks = Some(NetworkSelector { ids: None, tags: Some(vec!["public".into()]) });
    })
    .await?;
    h.cloud.apply_region_settings(&from_region);
    h.create(&h.cloud, &request("uid-1", true)).await?;
    assert_eq!(h.sim.floating_ips().first().map(|ip| ip.network_id.clone()).as_deref(), Some("ext-b"));
    // Nothing selected: refused with the selector in the message.
    let h = Harness::with(sim_config, |c| {
        c.external_networks = Some(NetworkSelector { ids: None, tags: Some(vec!["private".into()]) });
    })
    .await?;
    let refused = h.create(&h.cloud, &request("uid-1", true)).await.err();
    assert!(
        matches!(&refused, Some(CloudError::Refused { status: 400, message }) if message.contains("private")),
        "{refused:?}"
    );
    // ... before anything is made: no port, no server.
    let counters = h.sim.counters();
    assert_eq!((counters.port_creates, counters.server_creates), (0, 0), "{counters:?}");
    Ok(())
}

#[tokio::test]
async fn a_floating_ip_that_failed_once_is_made_by_the_next_ensure() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| c.floating_network_id = Some("external".into())).await?;
    h.sim.inject(Target::Op(Op::FloatingIpCreate), Fault::Status(503), 1);
    let req = request("uid-1", true);
    // The create makes the port and the server alone.
    let created = h.cloud.create(&h.identity, &req).await?;
    assert!(h.sim.floating_ips().is_empty());
    let error = h.ensure_public_ip(&h.cloud, &req, &created.id).await.err();
    assert!(matches!(error, Some(CloudError::Unavailable { status: 503, .. })), "{error:?}");
    assert!(h.sim.floating_ips().is_empty());
    h.ensure_public_ip(&h.cloud, &req, &created.id).await?;
    h.ensure_public_ip(&h.cloud, &req, &created.id).await?;
    assert_eq!(h.sim.floating_ips().len(), 1, "made once, then kept");
    assert_eq!(h.sim.counters().server_creates, 1);
    Ok(())
}

/// Public Servers share one list of the external networks while the choice
/// is kept; a floating-IP create refused drops it, so the next one lists
/// again (a network that went away is not chosen for long), while one left
/// unanswered keeps it.
#[tokio::test]
async fn the_external_network_is_listed_once_for_many_public_servers() -> TestResult {
    let h = Harness::new().await?;
    h.create(&h.cloud, &request("uid-1", true)).await?;
    let lists = h.ops(Op::NetworkList);
    for uid in ["uid-2", "uid-3", "uid-4"] {
        h.create(&h.cloud, &request(uid, true)).await?;
    }
    assert_eq!(h.sim.floating_ips().len(), 4);
    assert_eq!(h.ops(Op::NetworkList), lists, "the kept choice served three more Servers");
    h.sim.inject(Target::Op(Op::FloatingIpCreate), Fault::Status(503), 1);
    let req = request("uid-5", true);
    let created = h.cloud.create(&h.identity, &req).await?;
    assert!(h.ensure_public_ip(&h.cloud, &req, &created.id).await.is_err());
    h.ensure_public_ip(&h.cloud, &req, &created.id).await?;
    assert_eq!(h.ops(Op::NetworkList), lists, "an unanswered create keeps the choice");
    h.sim.inject(Target::Op(Op::FloatingIpCreate), Fault::Status(404), 1);
    let req = request("uid-6", true);
    let created = h.cloud.create(&h.identity, &req).await?;
    assert!(h.ensure_public_ip(&h.cloud, &req, &created.id).await.is_err());
    h.ensure_public_ip(&h.cloud, &req, &created.id).await?;
    assert_eq!(h.ops(Op::NetworkList), lists + 1, "chosen again after the refused create");
    Ok(())
}

/// A port that got a floating IP after the pass read it refuses another
/// (Neutron's 409): a conflict the next pass reads the port again for, and
/// never a second floating IP.
#[tokio::test]
async fn a_floating_ip_made_since_the_read_refuses_another() -> TestResult {
    let h = Harness::new().await?;
    let req = request("uid-1", true);
    let created = h.create(&h.cloud, &req).await?;
    let port = h.sim.ports().into_iter().next().ok_or("no port")?;
    let request = FloatingIpRequest { server: req.server.clone(), port_id: port.id };
    let error = h.cloud.ensure_floating_ip(&h.identity, &request).await.err();
    assert!(matches!(&error, Some(CloudError::Conflict { .. })), "{error:?}");
    assert!(error.is_some_and(|e| e.is_transient()));
    assert_eq!(h.sim.floating_ips().len(), 1);
    h.ensure_public_ip(&h.cloud, &req, &created.id).await?;
    assert_eq!(h.sim.floating_ips().len(), 1, "the next pass finds it");
    Ok(())
}

/// The pass after a create reads the port the term just made from Neutron's
/// answers to its own writes (the port's create, then the floating IP's):
/// no port or floating-IP list, and a source that never counts as a read of
/// the server. A failed write, a release or a new term reads again.
#[tokio::test]
async fn a_port_the_term_made_is_known_from_its_writes_until_one_fails() -> TestResult {
    let h = Harness::new().await?;
    let req = request("uid-1", true);
    let created = h.cloud.create(&h.identity, &req).await?;
    let query = NetworkingQuery {
        server: req.server.clone(),
        provider_id: created.id.clone(),
        security_groups: req.security_group_ids.clone(),
    };
    let reads = || h.ops(Op::PortList) + h.ops(Op::FloatingIpList);
    let before = reads();
    let known = h.cloud.networking(&h.identity, &query).await?;
    assert_eq!(known.source, NetworkingSource::OwnWrites);
    let port = known.port.clone().ok_or("no port")?;
    let made = h.sim.ports().into_iter().next().ok_or("no port made")?;
    assert_eq!((port.id.as_str(), &port.security_groups), (made.id.as_str(), &made.security_groups));
    assert_eq!(port.mac_address.as_deref(), Some(made.mac_address.as_str()));
    assert_eq!(port.allowed_address_pairs.len(), 2);
    assert_eq!(known.wanted_security_groups, h.group_ids);
    assert!(port.floating_ip.is_none());
    h.cloud
        .ensure_floating_ip(&h.identity, &FloatingIpRequest { server: req.server.clone(), port_id: port.id })
        .await?;
    let with_ip = h.cloud.networking(&h.identity, &query).await?;
    let ip = with_ip.port.and_then(|port| port.floating_ip).ok_or("the floating IP made is not known")?;
    assert_eq!(Some(ip.id), h.sim.floating_ips().first().map(|ip| ip.id.clone()));
    assert_eq!(reads(), before, "known without a list");
    assert!(ip.address.is_some());

    // Another term knows nothing of it.
    let next = h.cloud.for_term(&Term::unfenced());
    assert_eq!(next.networking(&h.identity, &query).await?.source, NetworkingSource::Read);
    assert_eq!(reads(), before + 2, "one port list and one floating-IP list");

    // A write that fails (another floating IP is there: 409) ends what is known.
    let again = FloatingIpRequest { server: req.server.clone(), port_id: made.id.clone() };
    assert!(h.cloud.ensure_floating_ip(&h.identity, &again).await.is_err());
    let read = h.cloud.networking(&h.identity, &query).await?;
    assert_eq!(read.source, NetworkingSource::Read);
    assert_eq!(read.port.and_then(|port| port.bound_to), Some(created.id.clone()), "read bound to its server");

    // So does a release of what it carried.
    let other = request("uid-2", true);
    let created = h.create(&h.cloud, &other).await?;
    let query = NetworkingQuery { server: other.server.clone(), provider_id: created.id, ..query };
    let ip = h.cloud.networking(&h.identity, &query).await?.port.and_then(|port| port.floating_ip).ok_or("no ip")?;
    h.cloud.release(&h.identity, &AttachedResource::FloatingIp { id: ip.id }).await?;
    let read = h.cloud.networking(&h.identity, &query).await?;
    assert_eq!(read.source, NetworkingSource::Read);
    assert!(read.port.is_some_and(|port| port.floating_ip.is_none()), "the release shows");
    Ok(())
}

/// The first create of a Server makes its port without looking for one of
/// an earlier attempt (there was none); any other create looks, and reuses
/// what an earlier attempt left.
#[tokio::test]
async fn only_a_first_create_makes_its_port_without_looking() -> TestResult {
    let h = Harness::new().await?;
    let first = CreateRequest { first_create: true, ..request("uid-1", false) };
    h.cloud.create(&h.identity, &first).await?;
    assert_eq!(h.ops(Op::PortList), 0, "no port list before the first create's port");
    h.sim.cloud().script("uid-2", Fate::refused(1));
    let refused = CreateRequest { first_create: true, ..request("uid-2", false) };
    assert!(h.cloud.create(&h.identity, &refused).await.is_err());
    h.cloud.create(&h.identity, &request("uid-2", false)).await?;
    assert_eq!(h.ops(Op::PortList), 1);
    assert_eq!(h.sim.counters().port_creates, 2, "the refused attempt's port was reused");
    Ok(())
}

#[tokio::test]
async fn a_create_without_network_is_refused_before_any_call() -> TestResult {
    let h = Harness::new().await?;
    let req = CreateRequest { networks: vec![], ..request("uid-1", false) };
    let error = h.cloud.create(&h.identity, &req).await.err();
    assert!(matches!(error, Some(CloudError::Refused { status: 400, .. })), "{error:?}");
    assert!(h.sim.requests().is_empty());
    Ok(())
}

// ---------------------------------------------------------------- get and list

#[tokio::test]
async fn records_map_queued_launch_time_addresses_and_mac() -> TestResult {
    let h = Harness::new().await?;
    let uid = "uid-1";
    h.sim.cloud().script(uid, Fate::clean().with_build_time(Duration::from_secs(30)));
    h.create(&h.cloud, &request(uid, true)).await?;
    let port = h.sim.ports().into_iter().next().ok_or("no port")?;
    let ip = h.sim.floating_ips().into_iter().next().ok_or("no floating IP")?;

    let queued = h.cloud.get(&h.identity, &server_ref(uid)).await?.ok_or("absent")?;
    assert_eq!(queued.status, ProviderStatus::Build);
    assert!(queued.queued, "scheduling is pre-deploy");
    assert_eq!(queued.created, Some(start()));
    assert_eq!((queued.launched_at, queued.private_ip.as_deref(), queued.mac_address.as_deref()), (None, None, None));

    h.clock.advance(Duration::from_secs(5));
    let building = h.cloud.get(&h.identity, &server_ref(uid)).await?.ok_or("absent")?;
    assert_eq!(building.status, ProviderStatus::Build);
    assert!(!building.queued, "spawning");
    assert_eq!(building.launched_at, None);

    h.clock.advance(Duration::from_secs(25));
    let active = h.cloud.get(&h.identity, &server_ref(uid)).await?.ok_or("absent")?;
    assert_eq!(active.status, ProviderStatus::Active);
    assert_eq!(active.power_state, PowerState::Running);
    assert_eq!(active.launched_at, start().checked_add(jiff::SignedDuration::from_secs(30)).ok());
    assert_eq!(active.private_ip.as_deref(), Some(port.ip_address.as_str()));
    assert_eq!(active.public_ip.as_deref(), Some(ip.address.as_str()));
    assert_eq!(active.mac_address.as_deref(), Some(port.mac_address.as_str()));

    let listed = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    assert_eq!(listed, vec![active]);
    Ok(())
}

#[tokio::test]
async fn a_failed_boot_shows_as_error() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::failing_boots(1).with_fail_time(Duration::from_secs(10)));
    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    h.clock.advance(Duration::from_secs(11));
    let record = h.cloud.get(&h.identity, &server_ref("uid-1")).await?.ok_or("absent")?;
    assert_eq!(record.status, ProviderStatus::Error);
    assert_eq!(record.launched_at, None);
    Ok(())
}

#[tokio::test]
async fn get_uses_the_known_id_and_says_absent_from_one_list_per_identity() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    assert_eq!(h.cloud.get(&h.identity, &server_ref("nobody")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), 1, "absence comes from a list");
    assert_eq!(h.cloud.get(&h.identity, &server_ref("nobody-else")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), 1, "the same list answers for every Server of the identity");

    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    let lists = h.ops(Op::ServerListDetail);
    assert_eq!(lists, 1, "the create's idempotency check needed no list either");
    h.cloud.get(&h.identity, &server_ref("uid-1")).await?.ok_or("absent")?;
    assert_eq!(h.ops(Op::ServerListDetail), lists, "one GET /servers/{{id}}, no list");
    assert_eq!(h.ops(Op::ServerGet), 1);

    // The server vanished behind the operator's back: the known id 404s; no
    // create is in doubt since the list, so it is absent without another.
    h.sim.cloud().with_model(|m| m.delete(start(), "uid-1"))?;
    assert_eq!(h.cloud.get(&h.identity, &server_ref("uid-1")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), lists);

    // A create whose answer was lost leaves the uid in doubt: only a new
    // list can say absent, and a list that fails is not absence.
    h.sim.inject(Target::Op(Op::ServerCreate), Fault::Status(504), 1);
    h.cloud.create(&h.identity, &request("uid-2", false)).await.err().ok_or("the create should fail")?;
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Status(500), LIST_PAGE_ATTEMPTS);
    let error = h.cloud.get(&h.identity, &server_ref("uid-2")).await.err();
    assert!(matches!(error, Some(CloudError::Unavailable { status: 500, .. })), "{error:?}");
    assert_eq!(h.cloud.get(&h.identity, &server_ref("uid-2")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), lists + LIST_PAGE_ATTEMPTS as usize + 1, "the page asked 3 times");
    Ok(())
}

#[tokio::test]
async fn with_a_lookup_list_gap_a_create_in_doubt_waits_for_the_next_list_instead_of_listing() -> TestResult {
    let h = Harness::new().await?;
    let cloud = h.fresh_cloud()?.with_lookup_list_gap(Duration::from_millis(600));
    h.sim.cloud().script("uid-1", Fate::clean());
    h.sim.inject(Target::Op(Op::ServerCreate), Fault::Status(504), 1);
    cloud.create(&h.identity, &request("uid-1", false)).await.err().ok_or("the create should fail")?;
    let lists = h.ops(Op::ServerListDetail);
    assert_eq!(lists, 1, "the create's idempotency check listed once");

    // A list ended moments ago: the lookup is left to the next one.
    let error = cloud.get(&h.identity, &server_ref("uid-1")).await.err();
    let Some(CloudError::Unavailable { status: 503, message }) = &error else {
        return Err(format!("{error:?}").into());
    };
    assert!(message.contains("next list"), "{message}");
    assert_eq!(h.ops(Op::ServerListDetail), lists, "no list of its own");

    // The monitor's list answers it (the create in doubt had failed: absent).
    cloud.list(&h.identity, ListScope::Complete).await?;
    assert_eq!(cloud.get(&h.identity, &server_ref("uid-1")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), lists + 1);

    // Once the gap has passed with no list, a lookup lists for itself.
    h.sim.inject(Target::Op(Op::ServerCreate), Fault::Status(504), 1);
    cloud.create(&h.identity, &request("uid-1", false)).await.err().ok_or("the create should fail")?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(cloud.get(&h.identity, &server_ref("uid-1")).await?, None);
    assert_eq!(h.ops(Op::ServerListDetail), lists + 2);
    Ok(())
}

#[tokio::test]
async fn a_boot_a_lookup_list_showed_is_remembered_for_the_term_after_the_server_goes() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::clean().with_build_time(Duration::from_secs(30)));
    h.sim.cloud().script("uid-2", Fate::clean().with_build_time(Duration::from_secs(600)));
    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    h.cloud.create(&h.identity, &request("uid-2", false)).await?;
    h.clock.advance(Duration::from_secs(40));

    // A new term knows nothing: uid-2's lookup lists the whole project,
    // which shows uid-1 booted; its caller is shown uid-2 alone.
    let term = h.cloud.port().for_term(&server_core::port::Term::unfenced());
    let before = h.ops(Op::ServerListDetail);
    let building = term.get(&h.identity, &server_ref("uid-2")).await?.ok_or("absent")?;
    assert_eq!(building.status, ProviderStatus::Build);
    assert_eq!(h.ops(Op::ServerListDetail), before + 1, "the lookup listed the project");
    let launched = start().checked_add(jiff::SignedDuration::from_secs(30)).ok();
    assert_eq!(term.boot_read(&h.identity, "uid-1"), launched);
    assert_eq!(term.boot_read(&h.identity, "uid-2"), None, "still building");

    // The booted server vanishes: the boot stays read for the term, and
    // the next term starts knowing none.
    h.sim.cloud().with_model(|m| m.delete(start(), "uid-1"))?;
    assert_eq!(term.get(&h.identity, &server_ref("uid-1")).await?, None);
    assert_eq!(term.boot_read(&h.identity, "uid-1"), launched);
    let next = h.cloud.port().for_term(&server_core::port::Term::unfenced());
    assert_eq!(next.boot_read(&h.identity, "uid-1"), None);
    Ok(())
}

/// A list that fails on a later page has still shown the boots on the
/// pages before: they are noted as each page comes, so a Server whose
/// booted server then vanishes is never created again.
#[tokio::test]
async fn a_boot_a_list_showed_before_a_page_failed_is_remembered() -> TestResult {
    let sim_config = OpenStackSimConfig { page_size: 2, ..Default::default() };
    let h = Harness::with(sim_config, |_| {}).await?;
    for (uid, build) in [("uid-1", 30), ("uid-3", 600), ("uid-2", 30)] {
        h.sim.cloud().script(uid, Fate::clean().with_build_time(Duration::from_secs(build)));
        h.cloud.create(&h.identity, &request(uid, false)).await?;
    }
    h.clock.advance(Duration::from_secs(40));
    let term = h.cloud.port().for_term(&server_core::port::Term::unfenced());
    // The first page answers; the second fails every try.
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Delay(Duration::ZERO), 1);
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Status(503), LIST_PAGE_ATTEMPTS);
    let before = h.ops(Op::ServerListDetail);
    assert!(term.get(&h.identity, &server_ref("uid-3")).await.is_err(), "the list failed");
    assert_eq!(
        h.ops(Op::ServerListDetail) - before,
        1 + LIST_PAGE_ATTEMPTS as usize,
        "one page, then the second's tries"
    );
    // Two of the three on the first page, the building one among them.
    let noted = ["uid-1", "uid-2"].into_iter().filter(|uid| term.boot_read(&h.identity, uid).is_some()).count();
    assert_eq!(noted, 1, "the booted server on the page that came");
    Ok(())
}

/// A lookup whose caller stops waiting while the project's list pages
/// (its call's timeout) does not cut the list short: the list ends on its
/// own, and the next lookup is answered from it without listing again.
#[tokio::test]
async fn a_list_outlives_the_lookup_that_stopped_waiting_for_it() -> TestResult {
    let sim_config = OpenStackSimConfig { page_size: 1, ..Default::default() };
    let h = Harness::with(sim_config, |_| {}).await?;
    for uid in ["uid-1", "uid-2", "uid-3"] {
        h.cloud.create(&h.identity, &request(uid, false)).await?;
    }
    let term = h.cloud.port().for_term(&server_core::port::Term::unfenced());
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Delay(Duration::from_millis(150)), 3);
    let before = h.ops(Op::ServerListDetail);
    let cut = tokio::time::timeout(Duration::from_millis(200), term.get(&h.identity, &server_ref("uid-2"))).await;
    assert!(cut.is_err(), "the caller stopped waiting while the list paged");
    // Three full pages, then the empty one the third's `next` link asks for.
    let pages = || h.ops(Op::ServerListDetail) - before;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pages() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(pages(), 4, "the list went on to its last page");
    let found = term.get(&h.identity, &server_ref("uid-2")).await?.ok_or("absent")?;
    assert_eq!(found.server_uid, "uid-2");
    assert_eq!(pages(), 4, "answered from that list");
    Ok(())
}

#[tokio::test]
async fn a_restarted_adapter_lists_once_for_all_its_servers() -> TestResult {
    let h = Harness::new().await?;
    for i in 0..20 {
        h.cloud.create(&h.identity, &request(&format!("uid-{i}"), false)).await?;
    }
    let fresh = h.fresh_cloud()?;
    let before = h.ops(Op::ServerListDetail);
    let mut lookups = tokio::task::JoinSet::new();
    for i in 0..20 {
        let fresh = fresh.clone();
        let identity = h.identity.clone();
        lookups.spawn(async move { fresh.get(&identity, &server_ref(&format!("uid-{i}"))).await });
    }
    while let Some(found) = lookups.join_next().await {
        found??.ok_or("a server went missing")?;
    }
    assert!(h.ops(Op::ServerListDetail) - before <= 2, "20 concurrent lookups share a list");
    Ok(())
}

#[tokio::test]
async fn list_follows_pagination_and_skips_foreign_servers() -> TestResult {
    let sim_config = OpenStackSimConfig { page_size: 2, ..Default::default() };
    let h = Harness::with(sim_config, |_| {}).await?;
    for i in 0..5 {
        h.cloud.create(&h.identity, &request(&format!("uid-{i}"), false)).await?;
        h.clock.advance(Duration::from_secs(1));
    }
    foreign_server(&h).await?;
    let before = h.ops(Op::ServerListDetail);
    let mut uids: Vec<String> =
        h.cloud.list(&h.identity, ListScope::Complete).await?.servers.into_iter().map(|s| s.server_uid).collect();
    uids.sort();
    assert_eq!(uids, ["uid-0", "uid-1", "uid-2", "uid-3", "uid-4"]);
    // Three full pages of two, then the empty page after the last full one
    // (Nova links a next page whenever a page is full).
    assert_eq!(h.ops(Op::ServerListDetail) - before, 4, "three pages of two, then an empty one");
    Ok(())
}

/// After a complete list, a poll asks Nova for the changes since (its
/// `changes-since`): a few pages, the servers made or changed since and the
/// ones deleted since (status DELETED), and the view merged from the two
/// lists is the project as a new complete list shows it.
#[tokio::test]
async fn a_list_of_changes_shows_what_changed_and_what_was_deleted_and_merges_to_the_whole() -> TestResult {
    let sim_config = OpenStackSimConfig { page_size: 2, ..Default::default() };
    let h = Harness::with(sim_config, |_| {}).await?;
    for i in 0..6 {
        h.cloud.create(&h.identity, &request(&format!("uid-{i}"), false)).await?;
        h.clock.advance(Duration::from_secs(60));
    }
    h.clock.advance(Duration::from_secs(120));
    let mut view = ListedServers::default();
    let now = Timestamp::now;
    let complete = h.cloud.list(&h.identity, ListScope::Complete).await?;
    assert!(complete.latest_change.is_some(), "Nova dates every server");
    assert!(view.apply(complete, now(), now()));

    h.clock.advance(Duration::from_secs(120));
    let deleted_id = h.cloud.get(&h.identity, &server_ref("uid-1")).await?.map(|s| s.id).ok_or("uid-1 is missing")?;
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    h.clock.advance(Duration::from_secs(60));
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    h.cloud.create(&h.identity, &request("uid-6", false)).await?;
    h.clock.advance(Duration::from_secs(60));

    let ListScope::ChangedSince(since) = view.next_scope(now()) else {
        return Err("a list of changes follows a complete one".into());
    };
    let before = h.ops(Op::ServerListDetail);
    let changes = h.cloud.list(&h.identity, ListScope::ChangedSince(since)).await?;
    assert_eq!(changes.changed_since, Some(since));
    assert_eq!(changes.deleted, [deleted_id], "the deleted server, by its id");
    let changed: Vec<&str> = changes.servers.iter().map(|s| s.server_uid.as_str()).collect();
    assert!(changed.contains(&"uid-6"), "the new server: {changed:?}");
    assert!(changed.len() <= 2, "only the servers changed near and after the last list's latest change: {changed:?}");
    assert!(h.ops(Op::ServerListDetail) - before <= 2, "a page or two, not the project");
    assert!(view.apply(changes, now(), now()));

    let whole = h.cloud.list(&h.identity, ListScope::Complete).await?;
    let uids = |servers: Vec<&ProviderServer>| {
        let mut uids: Vec<String> = servers.into_iter().map(|s| s.server_uid.clone()).collect();
        uids.sort();
        uids
    };
    assert_eq!(uids(view.servers().collect()), uids(whole.servers.iter().collect()));
    assert_eq!(uids(view.servers().collect()), ["uid-0", "uid-2", "uid-3", "uid-4", "uid-5", "uid-6"]);
    Ok(())
}

/// A page that fails (a 503, no answer in time) is asked again, the pages
/// before it kept: one lost page of many does not lose the list.
#[tokio::test]
async fn a_failed_page_is_asked_again_and_the_list_is_whole() -> TestResult {
    let sim_config = OpenStackSimConfig { page_size: 2, ..Default::default() };
    let h = Harness::with(sim_config, |c| c.request_timeout = Duration::from_millis(300)).await?;
    for i in 0..5 {
        h.cloud.create(&h.identity, &request(&format!("uid-{i}"), false)).await?;
        h.clock.advance(Duration::from_secs(1));
    }
    let before = h.ops(Op::ServerListDetail);
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Status(503), 1);
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Delay(Duration::from_secs(1)), 1);
    assert_eq!(h.cloud.list(&h.identity, ListScope::Complete).await?.servers.len(), 5);
    // Three pages, the first asked three times: the 503 is logged, the try
    // that timed out never got its answer.
    assert_eq!(h.ops(Op::ServerListDetail) - before, 3 + 1, "three pages, the first asked three times");
    // A refusal is not asked again.
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Status(403), 1);
    let before = h.ops(Op::ServerListDetail);
    let error = h.fresh_cloud()?.list(&h.identity, ListScope::Complete).await.err();
    assert!(matches!(error, Some(CloudError::Refused { status: 403, .. })), "{error:?}");
    assert_eq!(h.ops(Op::ServerListDetail) - before, 1);
    Ok(())
}

/// A raw HTTP client of the simulator and a token of the project.
async fn raw_client(
    h: &Harness,
) -> Result<(reqwest::Client, reqwest::header::HeaderValue), Box<dyn std::error::Error>> {
    // Only this raw client needs a process default; the adapter never does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let auth = serde_json::json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"id": "admin", "password": "pw"}}},
        "scope": {"project": {"id": PROJECT}},
    }});
    let reply = client.post(format!("{}/auth/tokens", h.served.auth_url())).json(&auth).send().await?;
    let token = reply.headers().get("x-subject-token").ok_or("no token")?.clone();
    Ok((client, token))
}

/// A server someone made by hand in the project, without the operator's
/// metadata, straight through the simulator's HTTP API.
async fn foreign_server(h: &Harness) -> TestResult {
    let (client, token) = raw_client(h).await?;
    let server =
        serde_json::json!({"server": {"name": "by-hand", "flavorRef": "f", "imageRef": "i", "networks": "none"}});
    // `networks: "none"` exists from 2.37 (Nova's schema wants a list before).
    let reply = client
        .post(format!("{}/compute/v2.1/servers", h.served.url()))
        .header("x-auth-token", token)
        .header("openstack-api-version", "compute 2.37")
        .json(&server)
        .send()
        .await?;
    assert_eq!(reply.status().as_u16(), 202);
    Ok(())
}

/// Servers `a` and `a-2`: names one of which is a prefix of the other.
/// Nova's `name` filter is a pattern (the simulator matches it as Nova
/// does), so `name=a` lists both; Neutron's is an equality. The adapter
/// finds servers by their uid metadata, never by name, and re-checks the
/// exact name and description of the ports and floating IPs it finds by
/// them: releasing `a` leaves everything of `a-2`.
#[tokio::test]
async fn names_one_of_which_prefixes_the_other_are_told_apart() -> TestResult {
    let h = Harness::new().await?;
    let named = |uid: &str, name: &str| {
        let mut req = request(uid, true);
        req.server.name = name.into();
        req.name = name.into();
        req
    };
    let (a, a2) = (named("uid-a", "a"), named("uid-a2", "a-2"));
    for req in [&a, &a2] {
        h.sim.cloud().script(&req.server.uid, Fate::clean());
        h.create(&h.cloud, req).await?;
    }
    h.clock.advance(Duration::from_secs(40));

    let (client, token) = raw_client(&h).await?;
    let names = |body: &serde_json::Value, key: &str| -> Vec<String> {
        let mut names: Vec<String> = body[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    let nova: serde_json::Value = client
        .get(format!("{}/compute/v2.1/servers?name=a", h.served.url()))
        .header("x-auth-token", token.clone())
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(names(&nova, "servers"), ["a", "a-2"], "Nova's name filter is a pattern: {nova}");
    let neutron: serde_json::Value = client
        .get(format!("{}/network/v2.0/ports?name=server-a", h.served.url()))
        .header("x-auth-token", token)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(names(&neutron, "ports"), ["server-a"], "Neutron's name filter is an equality: {neutron}");

    assert_eq!(h.cloud.delete(&h.identity, &a.server).await?, DeleteProgress::InProgress);
    h.clock.advance(Duration::from_secs(40));
    assert_eq!(h.cloud.delete(&h.identity, &a.server).await?, DeleteProgress::Gone);
    let released = h.cloud.attachments(&h.identity, &a.server).await?;
    assert_eq!(released.len(), 2, "its port and its floating IP: {released:?}");
    for resource in &released {
        h.cloud.release(&h.identity, resource).await?;
    }
    let ports: Vec<String> = h.sim.ports().into_iter().map(|port| port.name).collect();
    assert_eq!(ports, ["server-a-2"]);
    assert_eq!(h.sim.floating_ips().len(), 1, "a-2's floating IP stays");
    assert_eq!(h.sim.cloud().truth("uid-a2").live, 1);
    assert!(h.cloud.get(&h.identity, &a2.server).await?.is_some());
    Ok(())
}

/// A baremetal server in Nova BUILD carries its Ironic node's provision
/// state (one node list per project list, only while a server builds): the
/// node `available` while Nova schedules, `wait call-back` while it
/// deploys; a VM has none, nor does a server out of BUILD; Ironic failing
/// leaves the list whole, without node states (the VM default).
#[tokio::test]
async fn a_building_baremetal_server_carries_its_ironic_node_state() -> TestResult {
    let sim_config = OpenStackSimConfig { baremetal_flavors: vec!["flavor-metal".into()], ..Default::default() };
    let h = Harness::with(sim_config, |_| {}).await?;
    let mut metal = request("uid-metal", false);
    metal.flavor_id = "flavor-metal".into();
    for (req, build) in [(&metal, 60), (&request("uid-vm", false), 60)] {
        h.sim.cloud().script(&req.server.uid, Fate::clean().with_build_time(Duration::from_secs(build)));
        h.cloud.create(&h.identity, req).await?;
    }
    let states = |records: &[ProviderServer]| -> Vec<(String, Option<ProvisionState>)> {
        let mut states: Vec<_> = records.iter().map(|r| (r.server_uid.clone(), r.ironic)).collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states
    };
    let listed = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    assert_eq!(
        states(&listed),
        [("uid-metal".into(), Some(ProvisionState::Available)), ("uid-vm".into(), None)],
        "scheduling: the node is not deploying yet"
    );
    h.clock.advance(Duration::from_secs(5));
    let listed = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    assert_eq!(states(&listed)[0], ("uid-metal".into(), Some(ProvisionState::DeployWait)));
    assert_eq!(h.ops(Op::BaremetalNodeList), 2, "one node list per project list");

    h.sim.inject(Target::Op(Op::BaremetalNodeList), Fault::Status(403), 1);
    let listed = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    assert_eq!(listed.len(), 2, "an unreadable Ironic leaves the list whole");
    assert!(listed.iter().all(|record| record.ironic.is_none()));

    h.clock.advance(Duration::from_secs(60));
    let before = h.ops(Op::BaremetalNodeList);
    let listed = h.cloud.list(&h.identity, ListScope::Complete).await?.servers;
    assert!(listed.iter().all(|record| record.status == ProviderStatus::Active && record.ironic.is_none()));
    assert_eq!(h.ops(Op::BaremetalNodeList), before, "no server builds: Ironic is not asked");
    Ok(())
}

// ---------------------------------------------------------------- delete

/// Releases what `attachments` lists, each by its ID, as the core's actions do.
async fn release_all(h: &Harness, uid: &str) -> Result<Vec<AttachedResource>, Box<dyn std::error::Error>> {
    let attachments = h.cloud.attachments(&h.identity, &server_ref(uid)).await?;
    for resource in &attachments {
        h.cloud.release(&h.identity, resource).await?;
    }
    Ok(attachments)
}

#[tokio::test]
async fn delete_removes_the_server_alone_then_its_floating_ip_and_port_go_by_id() -> TestResult {
    let h = Harness::new().await?;
    let uid = "uid-1";
    h.sim.cloud().script(uid, Fate::clean().with_delete_time(Duration::from_secs(10)));
    h.create(&h.cloud, &request(uid, true)).await?;
    h.clock.advance(Duration::from_secs(40));

    assert_eq!(h.cloud.delete(&h.identity, &server_ref(uid)).await?, DeleteProgress::InProgress);
    assert_eq!(h.ops(Op::ServerDelete), 1);
    assert_eq!((h.ops(Op::PortDelete), h.ops(Op::FloatingIpDelete)), (0, 0), "nothing released while Nova lists it");

    // Still deleting: no second DELETE (Nova would answer 409), still in progress.
    assert_eq!(h.cloud.delete(&h.identity, &server_ref(uid)).await?, DeleteProgress::InProgress);
    assert_eq!(h.ops(Op::ServerDelete), 1);

    h.clock.advance(Duration::from_secs(10));
    assert_eq!(h.cloud.delete(&h.identity, &server_ref(uid)).await?, DeleteProgress::Gone);
    // Nova keeps the port the caller made, and so its floating IP.
    assert_eq!((h.sim.ports().len(), h.sim.floating_ips().len()), (1, 1));
    let (port, ip) = (h.sim.ports()[0].id.clone(), h.sim.floating_ips()[0].id.clone());
    let listed = h.cloud.attachments(&h.identity, &server_ref(uid)).await?;
    assert_eq!(listed, [AttachedResource::FloatingIp { id: ip }, AttachedResource::Port { id: port }]);
    release_all(&h, uid).await?;
    let order: Vec<Op> = h
        .sim
        .requests()
        .into_iter()
        .map(|r| r.op)
        .filter(|op| matches!(op, Op::ServerDelete | Op::FloatingIpDelete | Op::PortDelete))
        .collect();
    assert_eq!(order, [Op::ServerDelete, Op::FloatingIpDelete, Op::PortDelete]);
    assert!(h.sim.ports().is_empty() && h.sim.floating_ips().is_empty());
    assert!(h.cloud.attachments(&h.identity, &server_ref(uid)).await?.is_empty());
    assert_eq!(h.sim.counters().ports_deleted_while_attached, 0);
    assert_eq!(h.sim.cloud().truth(uid).live, 0);

    // Deleting what is gone is done, and touches nothing; so is releasing it.
    assert_eq!(h.cloud.delete(&h.identity, &server_ref(uid)).await?, DeleteProgress::Gone);
    assert_eq!(h.ops(Op::ServerDelete), 1);
    h.cloud.release(&h.identity, &AttachedResource::Port { id: "gone".into() }).await?;
    h.cloud.release(&h.identity, &AttachedResource::FloatingIp { id: "gone".into() }).await?;
    Ok(())
}

/// Nova answers a DELETE at once and deletes later: a server with no slow
/// fate is still there right after it, and gone once the delay has passed.
#[tokio::test]
async fn nova_deletes_asynchronously_and_keeps_the_callers_port() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    let record = h.cloud.get(&h.identity, &server_ref("uid-1")).await?;
    assert!(record.is_some(), "Nova still shows a server it is deleting");
    h.clock.advance(h.sim.config().delete_delay);
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    assert_eq!(h.sim.ports().len(), 1, "a port the caller made survives its server");
    assert_eq!(release_all(&h, "uid-1").await?.len(), 1);
    assert!(h.sim.ports().is_empty());
    assert_eq!(h.sim.counters().ports_deleted_while_attached, 0);
    Ok(())
}

#[tokio::test]
async fn a_never_created_servers_leftover_port_is_an_attachment() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::refused(1));
    assert!(h.cloud.create(&h.identity, &request("uid-1", false)).await.is_err());
    assert_eq!(h.sim.ports().len(), 1);
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    assert_eq!(release_all(&h, "uid-1").await?.len(), 1);
    assert!(h.sim.ports().is_empty());
    Ok(())
}

/// A floating IP whose port went first (released by hand, or by the Go
/// controller) is found by its description and released too; a port of a
/// Server of the same name in another namespace is not the Server's.
#[tokio::test]
async fn an_orphaned_floating_ip_is_found_and_another_namespaces_port_is_not() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    h.create(&h.cloud, &request("uid-1", true)).await?;
    let mut other = request("uid-2", false);
    other.server.namespace = "elsewhere".into();
    other.server.name = server_ref("uid-1").name;
    h.sim.cloud().script("uid-2", Fate::clean());
    h.create(&h.cloud, &other).await?;
    h.clock.advance(Duration::from_secs(60));
    for uid in ["uid-1", "uid-2"] {
        h.cloud.delete(&h.identity, &server_ref(uid)).await?;
    }
    h.clock.advance(h.sim.config().delete_delay);
    let ours = h.cloud.attachments(&h.identity, &server_ref("uid-1")).await?;
    assert_eq!(ours.len(), 2, "{ours:?}");
    let port = ours.iter().find(|r| matches!(r, AttachedResource::Port { .. })).ok_or("no port")?;
    h.cloud.release(&h.identity, port).await?;
    let left = h.cloud.attachments(&h.identity, &server_ref("uid-1")).await?;
    assert!(matches!(left.as_slice(), [AttachedResource::FloatingIp { .. }]), "{left:?}");
    release_all(&h, "uid-1").await?;
    assert_eq!(h.sim.ports().len(), 1, "the other namespace's port stays: {:?}", h.sim.ports());
    assert!(h.sim.floating_ips().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_soft_deleted_server_is_force_deleted_before_its_port_is_released() -> TestResult {
    let h = Harness::with(OpenStackSimConfig { soft_delete: true, ..Default::default() }, |_| {}).await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    h.create(&h.cloud, &request("uid-1", true)).await?;
    // Deferred delete applies to a server that launched.
    h.clock.advance(Duration::from_secs(60));
    // Nova keeps listing the server as SOFT_DELETED: not gone yet.
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    let record = h.cloud.get(&h.identity, &server_ref("uid-1")).await?.ok_or("absent")?;
    assert_eq!(record.status, ProviderStatus::Other("SOFT_DELETED".into()));
    assert_eq!(h.sim.ports().len(), 1);
    // The next pass reclaims it; once Nova has, the port and IP go.
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    assert_eq!((h.ops(Op::ServerDelete), h.ops(Op::ServerAction)), (1, 1));
    h.clock.advance(h.sim.config().delete_delay);
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    assert_eq!(release_all(&h, "uid-1").await?.len(), 2);
    assert!(h.sim.ports().is_empty() && h.sim.floating_ips().is_empty());
    assert_eq!(h.sim.counters().ports_deleted_while_attached, 0);
    Ok(())
}

#[tokio::test]
async fn a_server_that_never_launched_is_deleted_outright_even_with_deferred_delete() -> TestResult {
    let h = Harness::with(OpenStackSimConfig { soft_delete: true, ..Default::default() }, |_| {}).await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    h.clock.advance(h.sim.config().delete_delay);
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    assert_eq!((h.ops(Op::ServerDelete), h.ops(Op::ServerAction)), (1, 0));
    Ok(())
}

#[tokio::test]
async fn delete_not_found_counts_as_done() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::clean());
    h.cloud.create(&h.identity, &request("uid-1", false)).await?;
    // Nova forgets the server between our list and our DELETE.
    h.sim.inject(Target::Op(Op::ServerDelete), Fault::Status(404), 1);
    let progress = h.cloud.delete(&h.identity, &server_ref("uid-1")).await?;
    assert_eq!(progress, DeleteProgress::InProgress, "Nova still lists it");
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::InProgress);
    h.clock.advance(h.sim.config().delete_delay);
    assert_eq!(h.cloud.delete(&h.identity, &server_ref("uid-1")).await?, DeleteProgress::Gone);
    Ok(())
}

#[tokio::test]
async fn a_failed_release_fails_and_the_next_one_releases() -> TestResult {
    let h = Harness::new().await?;
    h.sim.cloud().script("uid-1", Fate::refused(1));
    assert!(h.cloud.create(&h.identity, &request("uid-1", false)).await.is_err());
    let attachments = h.cloud.attachments(&h.identity, &server_ref("uid-1")).await?;
    let [port] = attachments.as_slice() else { return Err(format!("{attachments:?}").into()) };
    h.sim.inject(Target::Op(Op::PortDelete), Fault::Status(500), 1);
    let error = h.cloud.release(&h.identity, port).await.err();
    assert!(matches!(error, Some(CloudError::Unavailable { status: 500, .. })), "{error:?}");
    assert_eq!(h.sim.ports().len(), 1);
    h.cloud.release(&h.identity, port).await?;
    assert!(h.sim.ports().is_empty());
    // A listing that fails is an error, never "nothing left".
    h.sim.inject(Target::Op(Op::PortList), Fault::Status(503), 1);
    assert!(h.cloud.attachments(&h.identity, &server_ref("uid-1")).await.is_err());
    Ok(())
}

// ---------------------------------------------------------------- error classes

#[tokio::test]
async fn statuses_sort_into_error_classes_with_request_ids() -> TestResult {
    let h = Harness::new().await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    for (status, transient) in
        // Nova answers a 413 as its `overLimit` rate limit: transient.
        [
            (409, true),
            (429, true),
            (500, true),
            (502, true),
            (503, true),
            (400, false),
            (403, false),
            (413, true),
        ]
    {
        // A 5xx page is asked again: every try fails here.
        let tries = if (500..600).contains(&status) { LIST_PAGE_ATTEMPTS } else { 1 };
        h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Status(status), tries);
        // A fresh port each time: a rate limit's Retry-After keeps the next
        // request of the same port back (see below).
        let error = h.fresh_cloud()?.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
        assert_eq!(error.is_transient(), transient, "{status}: {error:?}");
        let expected = match status {
            409 => matches!(error, CloudError::Conflict { .. }),
            413 | 429 => matches!(error, CloudError::RateLimited { .. }),
            500..=599 => matches!(error, CloudError::Unavailable { status: s, .. } if s == status),
            _ => matches!(error, CloudError::Refused { status: s, .. } if s == status),
        };
        assert!(expected, "{status}: {error:?}");
        let message = error.to_string();
        assert!(message.contains("listing servers") && message.contains("request id req-"), "{message}");
    }
    Ok(())
}

#[tokio::test]
async fn a_slow_answer_is_a_timeout() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| c.request_timeout = Duration::from_millis(300)).await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Delay(Duration::from_secs(2)), LIST_PAGE_ATTEMPTS);
    let error = h.cloud.list(&h.identity, ListScope::Complete).await.err();
    assert!(
        matches!(&error, Some(CloudError::Timeout { message }) if message.contains("no answer in time")),
        "{error:?}"
    );
    Ok(())
}

#[tokio::test]
async fn keystone_outages_are_transient() -> TestResult {
    let h = Harness::with(OpenStackSimConfig::default(), |c| c.login_backoff = Duration::from_millis(100)).await?;
    h.sim.inject(Target::Keystone, Fault::Status(503), 1);
    let error = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
    // No token: the service request was never sent.
    assert!(matches!(&error, CloudError::Unreachable { message } if message.contains("HTTP 503")), "{error:?}");
    assert!(error.is_transient());
    tokio::time::sleep(Duration::from_millis(150)).await;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    Ok(())
}

#[tokio::test]
async fn an_unreachable_cloud_is_transient() -> TestResult {
    let h = Harness::new().await?;
    let addr = h.served.addr();
    h.served.shutdown();
    // Give the listener a moment to close.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut config = OpenStackConfig::new(format!("http://{addr}/identity/v3"), "RegionOne");
    config.connect_timeout = Duration::from_millis(500);
    let cloud = OpenStackCloud::new(config)?;
    let error = cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
    assert!(matches!(error, CloudError::Unreachable { .. }) && error.is_transient(), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn credentials_and_tokens_stay_out_of_errors_and_debug() -> TestResult {
    let h = Harness::new().await?;
    h.sim.add_user("user-1", "another");
    let error = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
    assert!(!error.to_string().contains("s3cret"));
    assert!(!format!("{:?}", h.cloud).contains("s3cret"));
    Ok(())
}

// ---------------------------------------------------------------- Neutron names and refusals

#[tokio::test]
async fn a_network_not_provisioned_yet_is_a_wait_and_nothing_is_made() -> TestResult {
    let h = Harness::new().await?;
    let mut req = request("uid-1", false);
    req.networks[0].id = "net-later".into();
    let error = h.cloud.create(&h.identity, &req).await.err();
    assert!(
        matches!(&error, Some(CloudError::NotReady { message }) if message.contains("network-net-later")),
        "{error:?}"
    );
    assert!(error.is_some_and(|e| e.is_transient()), "a wait, never a refusal");
    assert_eq!((h.sim.counters().port_creates, h.sim.counters().server_creates), (0, 0));
    // Names are read once per identity, not per call.
    h.cloud.create(&h.identity, &request("uid-2", false)).await?;
    h.cloud.create(&h.identity, &request("uid-3", false)).await?;
    assert_eq!((h.ops(Op::NetworkList), h.ops(Op::SecurityGroupList)), (1, 1));
    Ok(())
}

#[tokio::test]
async fn neutron_quota_and_a_full_subnet_are_refusals_with_the_providers_message() -> TestResult {
    for fault in [Fault::OVER_QUOTA, Fault::NO_ADDRESSES] {
        let h = Harness::new().await?;
        h.sim.inject(Target::Op(Op::PortCreate), fault, 1);
        let error = h.cloud.create(&h.identity, &request("uid-1", false)).await.err();
        let Some(CloudError::Refused { status: 409, message }) = &error else { panic!("{fault:?}: {error:?}") };
        let Fault::Neutron { kind, .. } = fault else { panic!("not a Neutron fault") };
        assert!(message.contains(kind.message()), "{message}");
        assert_eq!(h.sim.counters().server_creates, 0);
    }
    // Any other 409 stays a conflict to retry: the port step's, as no server
    // create was sent.
    let h = Harness::new().await?;
    h.sim.inject(Target::Op(Op::PortCreate), Fault::Status(409), 1);
    let error = h.cloud.create(&h.identity, &request("uid-1", false)).await.err();
    let Some(CloudError::BeforeCreate { step: CreateStep::Port, source }) = &error else { panic!("{error:?}") };
    assert!(matches!(**source, CloudError::Conflict { .. }), "{error:?}");
    assert!(error.as_ref().is_some_and(CloudError::is_transient), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn tags_in_the_unikorn_scheme_reach_nova_converted_and_unfit_ones_are_left_out() -> TestResult {
    let h = Harness::new().await?;
    let tags = [
        Tag { name: "compute.unikorn-cloud.org/workload-class".into(), value: "batch".into() },
        Tag { name: "owner@example.com".into(), value: "x".into() },
        Tag { name: "team".into(), value: "blue".into() },
    ];
    // A tag Nova's schema refuses fails the whole create, as on a real cloud.
    let mut raw = request("uid-0", false);
    raw.tags = tags.to_vec();
    let refused = h.cloud.create(&h.identity, &raw).await.err();
    assert!(matches!(refused, Some(CloudError::Refused { status: 400, .. })), "{refused:?}");
    // The core converts them first (and names the left-out ones in an event).
    let mut req = request("uid-1", false);
    req.tags = server_core::provider_metadata::provider_tags(&tags).tags;
    h.cloud.create(&h.identity, &req).await?;
    let servers = h.sim.servers();
    let metadata = &servers.iter().find(|s| s.server_uid == "uid-1").ok_or("no server")?.metadata;
    assert_eq!(metadata.get("compute:workload_class").map(String::as_str), Some("batch"));
    assert_eq!(metadata.get("team").map(String::as_str), Some("blue"));
    assert!(!metadata.keys().any(|k| k.contains('@')));
    Ok(())
}

// ---------------------------------------------------------------- leadership terms (issue 25)

/// A gate a test opens and closes, as the leader's fence would.
struct Switch(std::sync::atomic::AtomicBool);

impl RequestGate for Switch {
    fn admit(&self, timeout: Duration) -> Option<Duration> {
        self.0.load(Ordering::SeqCst).then_some(timeout)
    }
}

fn term(number: u64, gate: Arc<dyn RequestGate>) -> Term {
    Term { number, gate }
}

/// Replica A lists the project and finds no server for `t`; B (another
/// replica, its own adapter) creates it; A leads again. A's new term must
/// not answer `t` absent from the list of its earlier term: the running `t`
/// would be parked as missing, a deleted `t` released with its server
/// alive, and a create would send a second `POST /servers`.
#[tokio::test]
async fn a_new_term_does_not_trust_what_an_earlier_term_listed() -> TestResult {
    let h = Harness::new().await?;
    let first = h.cloud.for_term(&term(1, Arc::new(server_core::port::Unfenced)));
    assert!(first.list(&h.identity, ListScope::Complete).await?.servers.is_empty());
    assert_eq!(first.get(&h.identity, &server_ref("t")).await?, None, "absent, from the list");

    let b = h.fresh_cloud()?;
    let made = b.create(&h.identity, &request("t", false)).await?;

    let third = h.cloud.for_term(&term(3, Arc::new(server_core::port::Unfenced)));
    let seen = third.get(&h.identity, &server_ref("t")).await?;
    assert_eq!(seen.map(|s| s.id), Some(made.id.clone()), "the server B made, not the earlier term's absence");
    third.create(&h.identity, &request("t", false)).await?;
    assert_eq!(h.ops(Op::ServerCreate), 1, "no second POST /servers");
    assert_eq!(third.delete(&h.identity, &server_ref("t")).await?, DeleteProgress::InProgress);
    assert_eq!(h.ops(Op::ServerDelete), 1, "the delete reaches the live server");
    Ok(())
}

/// A's create waits on Neutron; meanwhile its fence closes (B may lead
/// next). The `POST /servers` after the port is checked on its own and
/// not sent: the call was admitted, the request is not.
#[tokio::test]
async fn a_create_whose_fence_closed_mid_call_sends_no_server_create() -> TestResult {
    let h = Harness::new().await?;
    let gate = Arc::new(Switch(true.into()));
    let port = h.cloud.for_term(&term(1, gate.clone()));
    h.sim.inject(Target::Op(Op::PortCreate), Fault::Delay(Duration::from_millis(600)), 1);
    let identity = h.identity.clone();
    let create = tokio::spawn(async move { port.create(&identity, &request("t", false)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.0.store(false, Ordering::SeqCst);
    let error = create.await?.err();
    assert!(matches!(&error, Some(CloudError::Unreachable { .. })), "not sent, so no effect: {error:?}");
    assert_eq!(h.ops(Op::PortCreate), 1, "the port was asked for before the fence closed");
    assert_eq!(h.ops(Op::ServerCreate), 0, "no POST /servers once the fence closed");
    Ok(())
}

/// A's delete waits on Nova's list; its fence closes; the DELETE and any
/// port release after it are not sent (B may be running a new server with
/// a port of the same name by then).
#[tokio::test]
async fn a_delete_whose_fence_closed_mid_call_deletes_nothing() -> TestResult {
    let h = Harness::new().await?;
    h.cloud.create(&h.identity, &request("t", false)).await?;
    let lists = h.ops(Op::ServerListDetail);
    let gate = Arc::new(Switch(true.into()));
    let port = h.cloud.for_term(&term(1, gate.clone()));
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::Delay(Duration::from_millis(600)), 1);
    let identity = h.identity.clone();
    let delete = tokio::spawn(async move {
        let deleted = port.delete(&identity, &server_ref("t")).await;
        let released = port.release(&identity, &AttachedResource::Port { id: "any".into() }).await;
        (deleted, released)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.0.store(false, Ordering::SeqCst);
    let (deleted, released) = delete.await?;
    assert!(matches!(&deleted, Err(CloudError::Unreachable { .. })), "{deleted:?}");
    assert!(matches!(&released, Err(CloudError::Unreachable { .. })), "{released:?}");
    assert_eq!(h.ops(Op::ServerListDetail), lists + 1, "the list was sent before the fence closed");
    assert_eq!((h.ops(Op::ServerDelete), h.ops(Op::PortDelete)), (0, 0), "nothing deleted once it closed");
    Ok(())
}

// ---------------------------------------------------------------- paging

/// With Neutron's `pagination_max_limit` at 2, the network, the security
/// groups and the ports a create needs are all past the first page: every
/// list is followed to its last page (`*_links` `next`, `marker`), so the
/// create resolves them, and the port and its floating IP are found after.
/// (Before: names past the first page never resolved: "Neutron has no
/// network-… yet" for ever.)
#[tokio::test]
async fn neutron_lists_are_followed_to_their_last_page() -> TestResult {
    let config = OpenStackSimConfig { pagination_max_limit: Some(2), ..OpenStackSimConfig::default() };
    let h = Harness::with(config, |_| {}).await?;
    for i in 0..4 {
        h.sim.add_network(PROJECT, &format!("network-decoy-{i}"));
        h.sim.add_security_group(PROJECT, &format!("securitygroup-decoy-{i}"));
    }
    let late_network = h.sim.add_network(PROJECT, "network-net-late");
    let late_group = h.sim.add_security_group(PROJECT, "securitygroup-late");
    let mut req = request("uid-1", true);
    req.networks[0].id = "net-late".into();
    req.security_group_ids.push("late".into());
    // Other Servers' ports fill the first pages of the port list.
    for i in 0..3 {
        let mut other = request(&format!("uid-other-{i}"), false);
        other.server.name = "server-uid-1".into();
        other.server.namespace = format!("other-{i}");
        h.cloud.create(&h.identity, &other).await?;
    }
    let created = h.create(&h.cloud, &req).await?;
    let port = h.sim.ports().into_iter().find(|p| p.server_uid.as_deref() == Some("uid-1")).ok_or("no port")?;
    assert_eq!(port.network_id, late_network);
    assert!(port.security_groups.contains(&late_group), "{:?}", port.security_groups);
    assert_eq!(h.sim.floating_ips().len(), 1);
    let query = NetworkingQuery {
        server: req.server.clone(),
        provider_id: created.id.clone(),
        security_groups: req.security_group_ids.clone(),
    };
    let networking = h.cloud.networking(&h.identity, &query).await?;
    assert_eq!(networking.port.map(|p| p.id), Some(port.id));
    assert_eq!(networking.wanted_security_groups.last(), Some(&late_group));
    let counters = h.sim.counters();
    assert!(counters.network_lists >= 4 && counters.security_group_lists >= 4, "paged: {counters:?}");
    Ok(())
}

/// After a rate limit with `Retry-After`, no request goes to that endpoint
/// for the project until the wait is over: a pass woken early (another wake,
/// another Server) gets the rate limit back, with what is left of the wait,
/// without a request. (Before: the next pass sent again whatever the
/// provider had asked.)
#[tokio::test]
async fn nothing_is_sent_to_a_provider_that_asked_to_be_left_alone() -> TestResult {
    let h = Harness::new().await?;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    h.sim.inject(Target::Op(Op::ServerListDetail), Fault::RateLimit { status: 429, retry_after: 1 }, 1);
    let first = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
    assert_eq!(first.retry_after(), Some(Duration::from_secs(1)), "{first:?}");
    let sent = h.sim.requests().len();
    let again = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("no error")?;
    assert!(again.retry_after().is_some_and(|left| left <= Duration::from_secs(1)), "{again:?}");
    assert_eq!(again.effect(), server_core::port::CallEffect::None);
    assert_eq!(h.sim.requests().len(), sent, "nothing sent while the provider asked to wait");
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    h.cloud.list(&h.identity, ListScope::Complete).await?;
    Ok(())
}

// ------------------------------------------- paging and microversion 2.90

/// Nova answering at 2.90 and paging two servers at a time, Neutron paging
/// two items at a time (`pagination_max_limit`): the adapter's list reads
/// every server from the 2.90 records (embedded flavor, tags, hostname), and
/// its port, floating IP and name lookups each walk Neutron's pages.
#[tokio::test]
async fn a_small_paging_nova_at_2_90_and_a_paging_neutron_lose_nothing() -> TestResult {
    let config = OpenStackSimConfig {
        page_size: 2,
        pagination_max_limit: Some(2),
        max_microversion: server_sim_openstack::MAX_MICROVERSION,
        ..OpenStackSimConfig::default()
    };
    let h = Harness::with(config, |_| {}).await?;
    for i in 0..3 {
        h.sim.add_network(PROJECT, &format!("network-other-{i}"));
    }
    let uids: Vec<String> = (0..5).map(|i| format!("uid-{i}")).collect();
    let mut created = Vec::new();
    for uid in &uids {
        created.push(h.create(&h.cloud, &request(uid, true)).await?);
        h.clock.advance(Duration::from_secs(1));
    }
    assert_eq!(h.sim.floating_ips().len(), 5);
    h.clock.advance(Duration::from_secs(120));
    let before = h.ops(Op::ServerListDetail);
    let mut listed: Vec<ProviderServer> = h.fresh_cloud()?.list(&h.identity, ListScope::Complete).await?.servers;
    listed.sort_by(|a, b| a.server_uid.cmp(&b.server_uid));
    assert_eq!(listed.iter().map(|s| s.server_uid.as_str()).collect::<Vec<_>>(), uids);
    // Five servers two a page: three pages, the last one short.
    assert_eq!(h.ops(Op::ServerListDetail) - before, 3);
    for (server, made) in listed.iter().zip(&created) {
        assert_eq!(server.id, made.id);
        assert!(server.private_ip.is_some() && server.mac_address.is_some(), "{server:?}");
    }
    // Each Server's port and floating IP, found through paged lists.
    for uid in &uids {
        let attachments = h.cloud.attachments(&h.identity, &server_ref(uid)).await?;
        assert_eq!(attachments.len(), 2, "{uid}: {attachments:?}");
    }
    assert!(h.ops(Op::PortList) > uids.len() && h.ops(Op::FloatingIpList) > uids.len(), "paged lists");
    Ok(())
}

/// A Nova whose newest microversion is below the adapter's 2.90 answers 406
/// to every compute call: the adapter's create fails as a refusal naming
/// the versions, and no server is made.
#[tokio::test]
async fn a_nova_older_than_2_90_refuses_the_adapter_and_nothing_is_made() -> TestResult {
    let config = OpenStackSimConfig { max_microversion: (2, 60), ..OpenStackSimConfig::default() };
    let h = Harness::with(config, |_| {}).await?;
    let error = h.create(&h.cloud, &request("uid-1", false)).await.err().ok_or("the create succeeded")?;
    let message = error.to_string();
    assert!(message.contains("406") && message.contains("maximum is 2.60"), "{message}");
    assert!(!matches!(error, CloudError::Timeout { .. }), "a 406 is no create of unknown fate: {error:?}");
    assert_eq!(h.sim.cloud().counters().create_calls, 0);
    assert!(h.sim.servers().is_empty());
    let listed = h.cloud.list(&h.identity, ListScope::Complete).await.err().ok_or("the list succeeded")?;
    assert!(listed.to_string().contains("406"), "{listed}");
    Ok(())
}

/// `explain` and `run --shadow` read through a read-only port: a server the
/// Go controller made is reported as this operator would adopt it, but
/// nothing is tagged, and every call that would change the cloud is refused
/// before it is sent.
#[tokio::test]
async fn a_read_only_port_reports_an_adoption_without_tagging_and_sends_no_change() -> TestResult {
    let h = Harness::new().await?;
    let server = server_ref("uid-go");
    let metadata =
        [("serverID", server.name.as_str())].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    let seed = server_sim_openstack::SeededServer {
        uid: "go-made".into(),
        name: "web".into(),
        flavor_id: "flavor-small".into(),
        image_id: "image-ubuntu".into(),
        metadata,
        port_name: port_name(&server.name),
        network_id: h.network_id.clone(),
        security_group_ids: vec![h.group_ids[0].clone()],
    };
    let id = h.sim.seed_server(PROJECT, seed)?;
    let reader = h.fresh_cloud()?.read_only();

    let record = reader.get(&h.identity, &server).await?;
    assert!(record.as_ref().is_some_and(|r| r.id == id && r.adopted && r.server_uid == "uid-go"), "{record:?}");
    assert_eq!(h.sim.counters().server_metadata_updates, 0, "nothing tagged");
    let refused = reader.create(&h.identity, &request("uid-new", false)).await.err();
    assert!(matches!(refused, Some(CloudError::Unreachable { .. })), "{refused:?}");
    let refused = reader.delete(&h.identity, &server).await.err();
    assert!(matches!(refused, Some(CloudError::Unreachable { .. })), "{refused:?}");
    let counters = h.sim.counters();
    assert_eq!((counters.server_creates, counters.server_deletes, counters.port_creates), (0, 0, 0));

    // The operator's own port adopts it, once.
    let adopted = h.cloud.get(&h.identity, &server).await?;
    assert!(adopted.is_some_and(|r| r.adopted), "adopted by a port that writes");
    assert_eq!(h.sim.counters().server_metadata_updates, 1);
    Ok(())
}
