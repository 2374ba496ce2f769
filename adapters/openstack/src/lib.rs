//! The cloud port of server-core over OpenStack: Keystone v3 for tokens,
//! Nova for servers, Neutron for ports and floating IPs.
//!
//! ```no_run
//! # fn main() -> Result<(), server_openstack::ConfigError> {
//! use server_openstack::{OpenStackCloud, OpenStackConfig};
//! let config = OpenStackConfig::from_json(r#"{"authURL": "https://keystone:5000/v3", "region": "RegionOne"}"#)?;
//! let cloud = OpenStackCloud::new(config)?;
//! let port = cloud.port(); // Arc<dyn CloudPort> for the region's registry entry
//! # drop(port);
//! # Ok(())
//! # }
//! ```
//!
//! # What the calls do
//!
//! - **create**: finds the Server's provider server by the Nova metadata
//!   `unikorn:server-uid` (idempotency); otherwise makes (or reuses) the
//!   Neutron port `unikorn-server-<uid>` on the first network with the
//!   security groups and allowed address pairs, boots the Nova server on it
//!   with the flavor, image, base64 user data and metadata, and attaches a
//!   floating IP when a public IP is asked for.
//! - **get**: the server by its remembered Nova id, else from the project's
//!   list; `Ok(None)` only from a complete list without it.
//! - **list**: `GET /servers/detail` once (following pagination), the
//!   operator's servers only.
//! - **delete**: `DELETE` every server carrying the uid; once Nova no longer
//!   has them, releases floating IPs and the port, and only then says `Gone`.
//!
//! Errors: 404 is absence where absence is an answer; 409, 429, 5xx,
//! timeouts and connection failures are transient; any other status is a
//! refusal whose message names the call, the provider's message and the
//! request id. A 401 on a service call drops the token and retries once.
//!
//! Credentials arrive with each call in the identity context, are sent only
//! to Keystone, and are never logged; tokens are marked sensitive and print
//! as `<redacted>`.
//!
//! # Why a thin client rather than `openstack_sdk`
//!
//! The port needs nine calls (token, list/get/create/delete server,
//! list/create/update/delete port, list/create/delete floating IP, list
//! external networks). Both ways were built as throwaway binaries doing the
//! same calls (auth, list servers, create port, server and floating IP,
//! delete), release profile, stripped, from a clean target on the shared
//! 2-core machine (timings noisy, the ratio is what matters):
//!
//! BENCH_TABLE
//!
//! `openstack_sdk` 0.22 (compute + network + identity features only) pulls
//! in every microversion module of both services, nine auth plugins
//! (including a browser-based WebSSO host), and reqwest's default
//! aws-lc-rs crypto next to ring, so a process holding both must install a
//! rustls default provider before any TLS; its MSRV is 1.91. The typed
//! calls it offers are a few hundred lines here, with the error mapping and
//! token handling the port's contract needs (transient vs refused, one
//! refresh on 401) written once against that contract rather than adapted
//! from a general-purpose session. So: reqwest 0.13 with
//! `rustls-no-provider`, a rustls config built here on ring (kube's backend
//! too) with the platform verifier plus an optional CA bundle.

mod auth;
mod client;
mod cloud;
mod compute;
mod config;
mod error;
mod mapping;
mod network;

pub use cloud::OpenStackCloud;
pub use config::{ConfigError, Interface, OpenStackConfig};
pub use mapping::{METADATA_SERVER_NAME, METADATA_SERVER_NAMESPACE, METADATA_SERVER_UID, port_name};
