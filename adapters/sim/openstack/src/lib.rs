//! An OpenStack HTTP simulator over [`SimCloud`]'s deterministic model:
//! Keystone v3 tokens, Nova servers, Neutron ports, floating IPs and
//! networks, Glance's image list and Ironic's node list, answering as the OpenStack API reference documents them, with
//! scripted fault injection.
//!
//! Servers live in the SimCloud model, so its fates (failing boots, refusals,
//! vanishing, slow deletes, lost create answers, read faults) apply to them
//! exactly as to the in-process port. Ports, floating IPs and tokens are this
//! module's own bookkeeping. Addresses in a server record come from its
//! Neutron port (fixed IP and MAC) and the floating IP associated with it.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use server_simcloud::{CloudConfig, SimCloud};
//! use server_sim_openstack::{KeystoneUrl, OpenStackSim};
//! let sim = OpenStackSim::new(SimCloud::new(CloudConfig::reliable(7)));
//! let served = sim.serve("127.0.0.1:0".parse().map_err(std::io::Error::other)?).await?;
//! println!("Keystone at {}", served.auth_url()); // hand it to server-openstack
//! # Ok(())
//! # }
//! ```
//!
//! Real clients are its judge: openstacksdk and the `openstack` CLI run the
//! checks of `tests/conformance/openstack/` against it with a stock
//! `clouds.yaml` (`tests/conformance.rs`), and gophercloud, called as the Go
//! controller calls it, those of `tests/conformance/gophercloud/`
//! (`tests/gophercloud_conformance.rs`; docs/TESTING.md).
//!
//! # Behaviours and their sources
//!
//! Discovery and identity:
//! - Version documents without a token: `GET /identity` 300 with
//!   `versions.values` and `GET /identity/v3` (keystone/api/discovery.py);
//!   `GET /compute/` both versions with v2.1's microversion range and
//!   `GET /compute/v2.1/` (nova/api/openstack/compute/versions.py,
//!   views/versions.py); `GET /network/` and `GET /network/v2.0/`'s core
//!   collections, `/network/v2.0` without the slash 404
//!   (neutron/pecan_wsgi/controllers/root.py).
//! - `POST /v3/auth/tokens`: password by user ID, or by name with its
//!   domain (400 without: keystone/auth/plugins/core.py); scope by project
//!   ID or by name with its domain (keystone/auth/core.py `_lookup_project`),
//!   or to the domain by ID or name (`_lookup_domain`; both 400); with
//!   projects registered, a project scope without a role assignment is 401,
//!   a domain scope always needs one ([`OpenStackSim::grant_domain`])
//!   (keystone/models/token_model.py "has no access to project/domain"); a
//!   domain-scoped token carries its `domain`, roles and catalog
//!   (keystone/common/render_token.py), and serves identity calls only;
//!   the catalog's `image` entry is unversioned (`/image`, as devstack
//!   registers Glance; clients append `/v2`), and a `block-storage`
//!   entry, not served, when configured;
//!   application credentials refuse a scope. `GET|HEAD /v3/auth/tokens`
//!   shows the `X-Subject-Token`, `DELETE` revokes it (204; service calls
//!   with it 401 from then on), 404 for an unknown one
//!   (keystone/api/auth.py), asked with any valid token. Service calls with a bad token get
//!   keystonemiddleware's 401 (auth_token `_reject_request`).
//!
//! Nova (the create, list and show shapes of the api-ref and the
//! `v2.90_*` samples in `fixtures/openstack-api-samples/nova/`):
//! - Microversions 2.1 to 2.90 (Nova's maximum in Yoga): read from
//!   `OpenStack-API-Version: compute X`, else `X-OpenStack-Nova-API-Version`;
//!   `latest` is 2.90; not `Major.Minor` is 400, out of range 406; every
//!   answer names its version in both headers with `Vary` on both
//!   (nova/api/openstack/wsgi.py `set_api_version_request`,
//!   `Resource.__call__`, `Fault.__call__`; api_version_request.py).
//! - Server records by microversion: 2.9 `locked`, 2.19 `description`,
//!   2.26 `tags`, 2.47 the flavor embedded, 2.63
//!   `trusted_image_certificates`, 2.71 `server_groups`, 2.73
//!   `locked_reason`, 2.90 `OS-EXT-SRV-ATTR:hostname` (views/servers.py);
//!   UUID ids; security groups by name; `addresses` keyed by network name.
//! - `POST /servers`: the schema's keys by microversion, others 400
//!   (schemas/servers.py `create*`, `additionalProperties: False`);
//!   `networks` required from 2.37 (`auto`/`none` accepted); metadata keys
//!   and values (parameter_types.py `metadata`); user data base64 and at
//!   most 65,535 characters; an unknown keypair 400; with flavors
//!   registered, an unknown flavor 400, with images registered, an image
//!   the project does not see 400 (servers.py `create`, `ImageNotFound`); a network (not a port) gets a port
//!   Nova makes and deletes with the server (nova/network/neutron.py
//!   `deallocate_for_instance`, `preserve_on_delete`), in the project's
//!   default group or the groups named.
//! - `GET /servers[/detail]`: newest first, `osapi_max_limit`
//!   ([`OpenStackSimConfig::page_size`]) a page, a `next` link whenever a
//!   page is full, keeping the query (common.py `_get_collection_links`);
//!   a marker not found 400; filters `name` and `ip` (regex), `status` (an
//!   unknown one 400 from 2.38, an empty list before), `changes-since` and
//!   `changes-before` (not a date-time: 400), `flavor`, `image`, `tags`,
//!   `tags-any`, `not-tags`, `not-tags-any` (2.26); from 2.75 a key outside
//!   the schema is 400 (schemas/servers.py `index_query_v275`). Keys in
//!   the schema but not modelled (`host`, `sort_key`, ...) are accepted and
//!   not applied.
//! - `PUT /servers/{id}` (`name`, 2.19 `description`, 2.90 `hostname`);
//!   `GET|PUT|POST /servers/{id}/metadata`, `GET|PUT|DELETE
//!   .../metadata/{key}` (server_metadata.py); `GET|PUT|DELETE
//!   /servers/{id}/tags[/{tag}]` from 2.26, 404 before (server_tags.py;
//!   at most 50 tags of 60 characters without `/` or `,`);
//!   `GET /servers/{id}/os-interface` (attach_interfaces.py);
//!   `DELETE` asynchronous (nova/compute/api.py `_delete` casts
//!   `terminate_instance`), deferred for launched servers with
//!   [`OpenStackSimConfig::soft_delete`], `forceDelete`.
//! - `/os-keypairs` list, create (200 before 2.2, 201 from it; 409 for a
//!   name in use; a generated pair without `public_key`, its private key a
//!   placeholder; an unreadable key 400), show, delete (keypairs.py); the
//!   fingerprint has MD5's shape, not its value.
//! - `GET /flavors[/detail]`, `/flavors/{id}` (flavors.py; 2.55
//!   `description`, 2.61 `extra_specs`); lists filtered by `minRam` and
//!   `minDisk`, sorted by `sort_key`/`sort_dir` (default `flavorid` `asc`;
//!   outside the schema's enums 400: schemas/flavors.py `index_query`),
//!   paged as servers are (`flavors_links`); `GET /limits` with Nova's default
//!   quotas (views/limits.py; 2.36 and 2.57 drop keys).
//! - Faults `{"itemNotFound"|"badRequest"|...: {code, message}}`; rate
//!   limits 413 `overLimit` and 429 with `Retry-After` (wsgi.py
//!   `RateLimitFault`).
//!
//! Neutron (the `neutron/` samples; neutron-lib api definitions):
//! - Lists: filters on each collection's `is_filter` attributes and the tag
//!   filters, repeated values as alternatives, `fixed_ips=ip_address=X`; any
//!   other key 400 "[...] is invalid attribute for filtering"
//!   (neutron/api/api_common.py `get_filters_from_dict`, `filter-validation`).
//! - Paging with [`OpenStackSimConfig::pagination_max_limit`] set:
//!   sorted by ID, `limit` capped by the maximum (the maximum when none),
//!   `marker`, absolute `next` (whenever a page is full) and `previous`
//!   links keeping the query; a bad `limit` 400 (api_common.py
//!   `get_limit_and_marker`, `get_pagination_links`).
//! - Bodies: attributes outside those modelled 400 "Unrecognized
//!   attribute(s)" (neutron-lib `AttributeInfo.verify_attributes`); a port
//!   on an unknown network 404 `NetworkNotFound`, with an unknown group
//!   404 `SecurityGroupNotFound`; `fixed_ips` (one per port): another
//!   network's subnet 400 `InvalidInput`, outside the subnet 400
//!   `InvalidIpForSubnet`, in use 409 `IpAddressAlreadyAllocated`
//!   (ipam_backend_mixin.py); without `security_groups` the project's
//!   `default` group, made on first use with its four rules
//!   (securitygroups_db.py `_ensure_default_security_group`).
//! - Floating IPs: create on an external network (else 404
//!   `NetworkNotFound`), `PUT` to associate or disassociate (`port_id`
//!   null), a port that has one 409 `FloatingIPPortAlreadyAssociated`
//!   (l3_db.py `_check_and_get_fip_assoc`); a deleted port's floating IP
//!   stays allocated, disassociated (l3_db.py `disassociate_floatingips`).
//! - Security groups (securitygroups_db.py): `POST /security-groups` (two
//!   egress rules; `default` again 409), `DELETE` (the default group or
//!   one in use 409); `GET|POST /security-group-rules`,
//!   `GET|DELETE /security-group-rules/{id}`, a rule validated as
//!   `_validate_security_group_rule` does (see `create_security_group_rule`),
//!   a duplicate 409 `SecurityGroupRuleExists`.
//! - `GET /networks[/{id}]`, `/subnets[/{id}]` (one subnet a network),
//!   `/routers` (one, gatewayed to the first external network),
//!   `/security-groups[/{id}]`, `/extensions` (those whose behaviour is
//!   here), `/quotas/{project}` (Neutron's defaults; another project's 403).
//! - Errors `{"NeutronError": {type, message, detail}}` with the exception's
//!   type: `PortNotFound`, `FloatingIPNotFound`, `NetworkNotFound`,
//!   `SubnetNotFound`, `SecurityGroupNotFound`, `SecurityGroupRuleNotFound`,
//!   `HTTPBadRequest`, ...
//!
//! Glance (glance/api/v2/images.py; the api-ref's image samples), read-only:
//! - `GET /v2/images/{id}`: the image with `self`, `file`, `schema`, its
//!   additional properties as top-level keys; unknown or not visible 404
//!   (`show`). Public and community images are visible to every project,
//!   private ones to their owner (glance/db `is_image_visible`).
//! - `GET /v2/images`: without `visibility` public, shared and own images
//!   (not community), `all` every visible one, another value 400; `name`,
//!   `status` (an unknown one 400), `owner`, `id` exact, any other key a
//!   filter on the additional property of that name
//!   (`RequestDeserializer.index`); sorted by `sort_key`/`sort_dir`
//!   (default `created_at` `desc`, then id; unknown 400); `limit` (25 by
//!   default, at most 1,000: `limit_param_default`, `api_limit_max`;
//!   negative or not an integer 400), `marker` (unknown 400), a relative
//!   `next` link whenever a page is full, `first` and `schema`
//!   (`ResponseSerializer.index`).
//! - Errors in webob's JSON shape `{code: "404 Not Found", title, message}`.
//!
//! Ironic (ironic/api/controllers/v1/node.py), read-only, listed in the
//! catalog (`baremetal`) only when `baremetal_flavors` names flavors:
//! - `GET /v1/nodes`: a node for each of the project's servers of those
//!   flavors (the project as the node's lessee: Ironic's project-scoped node
//!   policy), its `provision_state` following the server (`available` while
//!   Nova schedules, `wait call-back` while it deploys, `active`, `deploy
//!   failed` on ERROR); `associated`, `instance_uuid` and `fields` applied,
//!   an unknown argument 400; one page.
//! - Errors as Ironic's WSME fault: `{"error_message": "{\"faultstring\": ...}"}`.
//!
//! Not modelled: image uploads and changes, volumes, server actions other than
//! `forceDelete`, several fixed IPs a port, Neutron resources' own tags.

// The helpers' `Err` is the HTTP answer itself, made at most once per
// request and returned straight to the client: boxing it buys nothing.
#![allow(clippy::result_large_err)]

mod faults;
mod glance;
mod handlers;
mod indexed;
mod ironic;
mod keystone;
mod neutron;
mod nova;
mod reply;
mod state;
mod versions;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use server_core::model::NetworkAttachment;
use server_core::port::{CloudError, CreateRequest, ServerRef};
pub use server_sim_serve::ServeHandle;

use server_simcloud::SimCloud;

pub use faults::{Fault, NeutronErrorKind, Target};
pub use state::{FloatingIpView, PortView, ServerView};

use state::State;

/// How the simulated OpenStack behaves beyond the model's fates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenStackSimConfig {
    /// The region the catalog's endpoints are in.
    pub region: String,
    /// Whether the catalog lists, before each real endpoint, one in a decoy
    /// region that leads nowhere: a client that ignores the region filter
    /// fails loudly. Off for a client that names no region, as the Go
    /// controller does (gophercloud then takes each type's first public
    /// endpoint: openstack/endpoint_location.go `V3EndpointURL`).
    pub decoy_region: bool,
    /// Whether the catalog lists a block-storage (Cinder v3) endpoint, which
    /// is not served. The Go controller builds a block-storage client at
    /// start and exits without one; the `openstack` CLI asks it for limits
    /// when listed, so it is off by default.
    pub block_storage_in_catalog: bool,
    pub token_ttl: Duration,
    /// Nova's `osapi_max_limit`: servers per list page.
    pub page_size: usize,
    /// Neutron's `pagination_max_limit` (neutron.conf; `-1`, unlimited, by
    /// default): at most this many items per list page, the next page named
    /// by a `<collection>_links` `next` link with the last item's ID as
    /// `marker` (neutron/api/api_common.py `PaginationNativeHelper`,
    /// `get_pagination_links`). `None`: every list is one page.
    pub pagination_max_limit: Option<usize>,
    /// External networks (IDs) floating IPs may come from, listed in this order.
    pub external_networks: Vec<String>,
    /// Neutron tags of external networks, by ID (none when absent).
    pub external_network_tags: BTreeMap<String, Vec<String>>,
    /// Base URL put in the catalog; by default the `Host` of the token request.
    pub public_url: Option<String>,
    /// When the model loses a create's answer (the server exists, the caller
    /// sees no answer): `None` answers 504 at once as a proxy would; `Some(d)`
    /// holds the answer back `d` first, for client timeouts to fire.
    pub lost_answer_hang: Option<Duration>,
    /// Nova's deferred delete (`reclaim_instance_interval`): a deleted server
    /// stays listed as `SOFT_DELETED` until force-deleted.
    pub soft_delete: bool,
    /// How long at least a deleted server stays visible (`task_state:
    /// deleting`) after its `DELETE` was answered 204. Nova deletes
    /// asynchronously: the API casts `terminate_instance` to the compute host
    /// and answers at once (nova/compute/api.py `_delete` ->
    /// `compute_rpcapi.terminate_instance`, a cast), so a GET right after a
    /// DELETE still finds the server. The model's fate may make it longer.
    pub delete_delay: Duration,
    /// The highest compute microversion served (`latest`, the version
    /// document's `version`); at most [`MAX_MICROVERSION`], the newest whose
    /// shapes the simulator renders. A request above it is refused 406.
    pub max_microversion: (u32, u32),
    /// Flavor IDs whose servers are baremetal: an Ironic node deploys each
    /// (`GET /baremetal/v1/nodes`), and the catalog lists Ironic. None by
    /// default (no Ironic in the catalog).
    pub baremetal_flavors: Vec<String>,
}

/// The newest compute microversion the simulator answers as Nova does:
/// 2.90, Nova's maximum in the Yoga release (nova/api/openstack/
/// api_version_request.py, the version history), the one the Go controller
/// and this adapter ask for.
pub const MAX_MICROVERSION: (u32, u32) = (2, 90);

impl Default for OpenStackSimConfig {
    fn default() -> Self {
        OpenStackSimConfig {
            region: "RegionOne".into(),
            decoy_region: true,
            block_storage_in_catalog: false,
            token_ttl: Duration::from_secs(3600),
            page_size: 1000,
            pagination_max_limit: None,
            external_networks: vec!["external".into()],
            external_network_tags: BTreeMap::new(),
            public_url: None,
            lost_answer_hang: None,
            soft_delete: false,
            delete_delay: Duration::from_millis(500),
            max_microversion: MAX_MICROVERSION,
            baremetal_flavors: Vec::new(),
        }
    }
}

/// What the simulator was asked and did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpenStackCounters {
    /// `POST /v3/auth/tokens` requests, answered or not.
    pub token_requests: u64,
    pub tokens_issued: u64,
    /// Token requests refused for bad credentials.
    pub token_rejections: u64,
    /// Service calls refused 401 (no, unknown, expired or revoked token).
    pub unauthorized: u64,
    pub server_creates: u64,
    /// `POST /servers` for a Server uid whose server still existed: a real
    /// Nova would have made a second server (the model deduplicates).
    pub duplicate_server_creates: u64,
    pub server_lists: u64,
    pub server_gets: u64,
    pub server_deletes: u64,
    pub server_actions: u64,
    /// `rebuild` actions among them.
    pub server_rebuilds: u64,
    /// `POST /servers/{id}/metadata` (adopting a Go-made server tags it).
    pub server_metadata_updates: u64,
    pub port_lists: u64,
    pub port_creates: u64,
    pub port_updates: u64,
    pub port_deletes: u64,
    /// Ports deleted while the server they belong to still existed.
    pub ports_deleted_while_attached: u64,
    pub floating_ip_lists: u64,
    pub floating_ip_creates: u64,
    pub floating_ip_deletes: u64,
    pub network_lists: u64,
    pub security_group_lists: u64,
    /// Answers replaced by a scripted fault.
    pub injected_faults: u64,
}

/// A Nova flavor, as `GET /flavors/{id}` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    /// MiB.
    pub ram: u32,
    /// GiB.
    pub disk: u32,
}

/// A Glance image, as `GET /v2/images/{id}` shows it (active, its data
/// already uploaded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub name: String,
    /// `public`, `community`, `shared` or `private`.
    pub visibility: String,
    /// The project that owns it (`owner`); a private image is seen by its
    /// owner only.
    pub owner: Option<String>,
    pub disk_format: String,
    pub container_format: String,
    /// Bytes.
    pub size: u64,
    /// GiB.
    pub min_disk: u32,
    /// MiB.
    pub min_ram: u32,
    /// Additional properties (`os_distro`, ...), shown as top-level keys.
    pub properties: BTreeMap<String, String>,
}

impl Image {
    /// A public qcow2 image of 2 GiB.
    pub fn public(id: &str, name: &str) -> Image {
        Image {
            id: id.to_owned(),
            name: name.to_owned(),
            visibility: "public".into(),
            owner: None,
            disk_format: "qcow2".into(),
            container_format: "bare".into(),
            size: 2 << 30,
            min_disk: 0,
            min_ram: 0,
            properties: BTreeMap::new(),
        }
    }

    pub fn with_properties<'a>(mut self, properties: impl IntoIterator<Item = (&'a str, &'a str)>) -> Image {
        self.properties.extend(properties.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
        self
    }
}

/// A server to put in the cloud as another controller made it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeededServer {
    /// The model's key for it (its fate is the one scripted for this uid).
    pub uid: String,
    /// The Nova server's name.
    pub name: String,
    pub flavor_id: String,
    pub image_id: String,
    /// Its Nova metadata, exactly.
    pub metadata: std::collections::BTreeMap<String, String>,
    pub port_name: String,
    pub network_id: String,
    pub security_group_ids: Vec<String>,
}

/// One request as the simulator saw it, for sequencing assertions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    pub op: Op,
    /// The `{id}` of the path, if the endpoint has one.
    pub id: Option<String>,
    pub status: u16,
}

/// The endpoints of the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Op {
    Token,
    /// `GET|HEAD|DELETE /v3/auth/tokens` (`X-Subject-Token`): show, check,
    /// revoke.
    TokenValidate,
    IdentityVersions,
    IdentityVersion,
    ComputeVersions,
    ComputeVersion,
    NetworkVersions,
    NetworkVersion,
    ServerList,
    ServerListDetail,
    ServerCreate,
    ServerGet,
    ServerDelete,
    /// `POST /servers/{id}/action` (`forceDelete` and `rebuild` are modelled).
    ServerAction,
    /// `POST /servers/{id}/metadata`.
    ServerMetadataUpdate,
    /// `PUT /servers/{id}` (name, description, hostname).
    ServerUpdate,
    /// `GET|PUT /servers/{id}/metadata`.
    ServerMetadata,
    /// `GET|PUT|DELETE /servers/{id}/metadata/{key}`.
    ServerMetadataItem,
    /// `GET|PUT|DELETE /servers/{id}/tags`.
    ServerTags,
    /// `GET|PUT|DELETE /servers/{id}/tags/{tag}`.
    ServerTag,
    /// `GET /servers/{id}/os-interface`.
    ServerInterfaces,
    KeypairList,
    KeypairCreate,
    /// `GET|DELETE /os-keypairs/{name}`.
    Keypair,
    FlavorList,
    FlavorListDetail,
    FlavorGet,
    Limits,
    PortList,
    PortCreate,
    PortGet,
    PortUpdate,
    PortDelete,
    FloatingIpList,
    FloatingIpCreate,
    FloatingIpGet,
    FloatingIpDelete,
    /// `PUT /floatingips/{id}` (associate, disassociate).
    FloatingIpUpdate,
    NetworkList,
    NetworkGet,
    SubnetList,
    SubnetGet,
    RouterList,
    SecurityGroupList,
    SecurityGroupCreate,
    SecurityGroupGet,
    SecurityGroupDelete,
    SecurityGroupRuleList,
    SecurityGroupRuleCreate,
    SecurityGroupRuleGet,
    SecurityGroupRuleDelete,
    ExtensionList,
    QuotaGet,
    /// `GET /image` (Glance's version list).
    ImageVersions,
    ImageList,
    ImageGet,
    /// `GET /baremetal/v1/nodes` (Ironic).
    BaremetalNodeList,
}

/// Which API an endpoint belongs to (error body shapes differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Service {
    Identity,
    Compute,
    Network,
    Image,
    Baremetal,
}

impl Op {
    /// Whether it is a Nova (compute) request: servers, keypairs, flavors, limits, versions.
    pub fn is_compute(self) -> bool {
        self.service() == Service::Compute
    }

    pub(crate) fn service(self) -> Service {
        match self {
            Op::Token | Op::TokenValidate | Op::IdentityVersions | Op::IdentityVersion => Service::Identity,
            Op::ComputeVersions
            | Op::ComputeVersion
            | Op::ServerList
            | Op::ServerListDetail
            | Op::ServerCreate
            | Op::ServerGet
            | Op::ServerDelete
            | Op::ServerAction
            | Op::ServerMetadataUpdate
            | Op::ServerUpdate
            | Op::ServerMetadata
            | Op::ServerMetadataItem
            | Op::ServerTags
            | Op::ServerTag
            | Op::ServerInterfaces
            | Op::KeypairList
            | Op::KeypairCreate
            | Op::Keypair
            | Op::FlavorList
            | Op::FlavorListDetail
            | Op::FlavorGet
            | Op::Limits => Service::Compute,
            Op::ImageVersions | Op::ImageList | Op::ImageGet => Service::Image,
            Op::BaremetalNodeList => Service::Baremetal,
            _ => Service::Network,
        }
    }
}

/// The simulated OpenStack: a handle to shared state. Clones share it, so a
/// test keeps one to script faults and read counters while the router serves.
#[derive(Clone, Debug)]
pub struct OpenStackSim {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    cloud: SimCloud,
    config: OpenStackSimConfig,
    state: Mutex<State>,
    /// Held while a request is handled: one at a time, in arrival order.
    gate: tokio::sync::Mutex<()>,
}

impl OpenStackSim {
    pub fn new(cloud: SimCloud) -> Self {
        OpenStackSim::with_config(cloud, OpenStackSimConfig::default())
    }

    pub fn with_config(cloud: SimCloud, mut config: OpenStackSimConfig) -> Self {
        config.max_microversion = config.max_microversion.clamp((2, 1), MAX_MICROVERSION);
        OpenStackSim {
            shared: Arc::new(Shared {
                cloud,
                config,
                state: Mutex::new(State::default()),
                gate: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The model underneath: script fates, read its counters and ground truth.
    pub fn cloud(&self) -> &SimCloud {
        &self.shared.cloud
    }

    pub fn config(&self) -> &OpenStackSimConfig {
        &self.shared.config
    }

    /// Accepts this user's password only. While no user is registered, any
    /// user ID with a non-empty password is accepted.
    pub fn add_user(&self, user_id: &str, password: &str) {
        self.state().users.insert(user_id.to_owned(), password.to_owned());
    }

    /// A Keystone project (`name` in the `Default` domain). Once any project
    /// is registered, a token may be scoped only to a registered project on
    /// which the user holds a role ([`OpenStackSim::grant`]), as Keystone
    /// refuses a scope without a role assignment (401); while none is, any
    /// project ID is accepted and its name is its ID.
    pub fn add_project(&self, project_id: &str, name: &str) {
        self.state().projects.insert(project_id.to_owned(), name.to_owned());
    }

    /// Gives `user_id` the `member` role on `project_id`.
    pub fn grant(&self, user_id: &str, project_id: &str) {
        self.state().grants.insert((user_id.to_owned(), project_id.to_owned()));
    }

    /// Gives `user_id` the `admin` role on the domain `domain_id` (the one
    /// domain is `default`), so that it may scope a token to it.
    pub fn grant_domain(&self, user_id: &str, domain_id: &str) {
        self.state().domain_grants.insert((user_id.to_owned(), domain_id.to_owned()));
    }

    /// A Glance image. Once any image is registered, a server create naming
    /// another `imageRef` is refused 400 as Nova refuses it; while none is,
    /// any `imageRef` is accepted.
    pub fn add_image(&self, image: Image) {
        let now = self.cloud().now();
        self.state().images.insert(image.id.clone(), (image, now));
    }

    /// A Nova flavor. Once any flavor is registered, a create naming
    /// another `flavorRef` is refused 400 as Nova refuses it; while none is,
    /// any `flavorRef` is accepted.
    pub fn add_flavor(&self, flavor: Flavor) {
        self.state().flavors.insert(flavor.id.clone(), flavor);
    }

    /// Scripts the fate of every server Nova is asked to create under the
    /// name `name` with no Server uid in its metadata, as another controller
    /// (the Go one) creates them; each create gets it afresh.
    pub fn script_by_name(&self, name: &str, fate: server_simcloud::Fate) {
        self.state().fates_by_name.insert(name.to_owned(), fate);
    }

    /// Attributes every server Nova is asked to create with no Server uid
    /// but `serverID=<server_id>` in its metadata (as the Go controller
    /// records the Server's name) to the Server `uid`: its drawn or scripted
    /// fate applies, its attempts count on, and its truth is that Server's,
    /// as for a create that carries the uid.
    pub fn attribute_server_id(&self, server_id: &str, uid: &str) {
        self.state().uids_by_server_id.insert(server_id.to_owned(), uid.to_owned());
    }

    /// Registers an application credential and the project it is bound to.
    /// Unregistered application credentials are refused.
    pub fn add_application_credential(&self, id: &str, secret: &str, project_id: &str) {
        self.state().application_credentials.insert(id.to_owned(), (secret.to_owned(), project_id.to_owned()));
    }

    /// Answers the next `times` requests matching `target` with `fault`
    /// ([`u32::MAX`]: for ever). Rules fire in the order they were added.
    pub fn inject(&self, target: Target, fault: Fault, times: u32) {
        self.state().faults.add(target, fault, times);
    }

    /// A tenant network of `project_id` named `name` (the unikorn network
    /// controller names it `network-<Network name>`); returns its id. Ports
    /// may only be made on known networks.
    pub fn add_network(&self, project_id: &str, name: &str) -> String {
        let mut state = self.state();
        let id = state.next_id(0x0e7);
        let named = state::SimNamed {
            id: id.clone(),
            name: name.to_owned(),
            project_id: project_id.to_owned(),
            description: String::new(),
        };
        state.networks.insert(id.clone(), named);
        let subnet = state.next_id(0x05b7);
        state.subnets.insert(id.clone(), subnet);
        id
    }

    /// A security group of `project_id` named `name` (`securitygroup-<name>`
    /// in the unikorn scheme), with the two egress rules Neutron gives a new
    /// group; returns its id.
    pub fn add_security_group(&self, project_id: &str, name: &str) -> String {
        let mut state = self.state();
        let id = state.next_id(0x05e6);
        let named = state::SimNamed {
            id: id.clone(),
            name: name.to_owned(),
            project_id: project_id.to_owned(),
            description: String::new(),
        };
        for ethertype in ["IPv4", "IPv6"] {
            state.add_rule(state::SimRule::open(&named, "egress", ethertype));
        }
        state.security_groups.insert(id.clone(), named);
        id
    }

    /// The id of the tenant network named `name`, if one was added.
    pub fn network_id(&self, name: &str) -> Option<String> {
        self.state().networks.values().find(|n| n.name == name).map(|n| n.id.clone())
    }

    /// The id of the security group named `name`, if one was added.
    pub fn security_group_id(&self, name: &str) -> Option<String> {
        self.state().security_groups.values().find(|g| g.name == name).map(|g| g.id.clone())
    }

    /// A Nova keypair servers may be booted with (`key_name`).
    pub fn add_keypair(&self, name: &str) {
        let mut state = self.state();
        let now = self.cloud().now();
        let public_key = format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFNpbXVsYXRlZCBrZXkgb2Yg{} {name}", name.len());
        let keypair = state::SimKeypair {
            fingerprint: state::fingerprint(&public_key),
            public_key,
            kind: "ssh".into(),
            created: now,
        };
        state.keypairs.insert(name.to_owned(), keypair);
    }

    /// A server made outside this API's create (by the Go controller, say):
    /// a Nova server of `project_id` in the model under `uid` (whose scripted
    /// fate applies), carrying exactly `metadata`, booted with a new port
    /// named `port_name` on `network_id`. Returns the Nova id.
    pub fn seed_server(&self, project_id: &str, seed: SeededServer) -> Result<String, CloudError> {
        let mut state = self.state();
        let now = self.cloud().now();
        let request = CreateRequest {
            server: ServerRef { uid: seed.uid.clone(), ..ServerRef::default() },
            name: seed.name.clone(),
            networks: vec![NetworkAttachment { id: seed.network_id.clone(), ..Default::default() }],
            ..CreateRequest::default()
        };
        let record = self.cloud().with_model(|m| m.create(now, project_id, &request))?;
        let n = state.next_serial();
        let port_id = state.next_id(0x0b07);
        let mac_address = state::mac_for(n);
        let port = state::SimPort {
            id: port_id.clone(),
            project_id: project_id.to_owned(),
            name: seed.port_name,
            description: String::new(),
            network_id: seed.network_id,
            ip_address: state::fixed_ip_for(n),
            security_groups: seed.security_group_ids,
            allowed_address_pairs: Vec::new(),
            mac_address,
            bound_uid: Some(seed.uid.clone()),
            nova_made: false,
            created: now,
            revision: 1,
        };
        state.ports.insert(port);
        let id = state::nova_id(&record.id);
        state.ids.insert(id.clone(), seed.uid.clone());
        let book = state::ServerBook {
            id: Some(id.clone()),
            project_id: project_id.to_owned(),
            name: seed.name,
            flavor_id: seed.flavor_id,
            image_id: seed.image_id,
            port_id: Some(port_id),
            metadata: seed.metadata,
            user_data: None,
            key_name: None,
            description: None,
            hostname: String::new(),
            tags: Default::default(),
            updated: Some(now),
            deleting: false,
            soft_deleted: false,
        };
        state.books.insert(seed.uid, book);
        Ok(id)
    }

    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// Invalidates every token issued so far (as a Keystone restart with new
    /// fernet keys would): the next service call with one is answered 401.
    pub fn revoke_tokens(&self) {
        self.state().tokens.clear();
    }

    pub fn counters(&self) -> OpenStackCounters {
        self.state().counters
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.state().log.clone()
    }

    pub fn ports(&self) -> Vec<PortView> {
        self.state().port_views()
    }

    pub fn floating_ips(&self) -> Vec<FloatingIpView> {
        self.state().floating_ip_views()
    }

    /// What Nova was last asked to create for each Server uid.
    pub fn servers(&self) -> Vec<ServerView> {
        self.state().server_views()
    }

    /// The API as an axum `Router`.
    pub fn router(&self) -> axum::Router {
        handlers::router(self.clone())
    }

    /// Serves the API on `addr` (port 0 picks a free port) until
    /// [`ServeHandle::shutdown`] or the end of the runtime.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<ServeHandle> {
        server_sim_serve::serve(self.router(), addr).await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every mutation is a few plain writes: a panic cannot leave it torn.
        self.shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Keystone's address of an [`OpenStackSim`] served on a [`ServeHandle`].
pub trait KeystoneUrl {
    /// Keystone's v3 endpoint, for the adapter's `authURL`.
    fn auth_url(&self) -> String;
}

impl KeystoneUrl for ServeHandle {
    fn auth_url(&self) -> String {
        format!("http://{}/identity/v3", self.addr())
    }
}
