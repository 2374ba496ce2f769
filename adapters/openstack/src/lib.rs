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
//! - **delete**: `DELETE` every server carrying the uid (force-deleting one
//!   a deferred-delete cloud keeps as `SOFT_DELETED`); once Nova no longer
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
//! The port needs fourteen HTTP calls (a token; list, get, create, delete
//! and force-delete a server; list, create, update and delete a port; list,
//! create and delete a floating IP; list external networks). Both ways were
//! built as throwaway binaries making the same kind of calls (auth, list
//! servers, create port, server and floating IP, delete), release profile,
//! stripped, from a clean target on the shared 2-core machine (wall clock
//! noisy; CPU time and size are the figures to compare):
//!
//! | | thin client (reqwest 0.13 + rustls/ring) | `openstack_sdk` 0.22.8 |
//! |---|---|---|
//! | crates in the normal dependency tree | 127 | 254 |
//! | clean release build, CPU time (user) | 127 s | 486 s (461 s deps + 25 s binary) |
//! | clean release build, wall clock (load 10-15) | 5 min 36 s | about 33 min |
//! | stripped release binary | 3.7 MB | 12.6 MB |
//! | TLS crypto backends compiled | ring | aws-lc-rs (C, via aws-lc-sys) and ring |
//! | MSRV | 1.85 (reqwest) | 1.91 |
//!
//! (Measured 2026-11-29 in /tmp throwaway crates; the thin one even carried
//! two versions of rustls-platform-verifier, so its figures are, if
//! anything, high.)
//!
//! `openstack_sdk` 0.22, even trimmed to its async, compute, network and
//! identity features, compiles every microversion module of both services,
//! eight auth plugins (OIDC, TOTP, WebSSO with its own callback host, ...)
//! and reqwest's default aws-lc-rs crypto next to ring. With two rustls
//! providers in one process, code relying on rustls's process default
//! (kube's client among it) panics unless the binary installs one at
//! start-up. Its MSRV (1.91) is also above the workspace's (1.89).
//!
//! The typed calls it would give us are a few hundred lines here, and the
//! parts the port's contract is about (transient versus refused, one token
//! refresh on 401, idempotency by metadata) would have to be written either
//! way. So: hyper's client (the one kube's client is built on), with a
//! rustls config built here on ring (the backend kube's rustls feature
//! defaults to) with the platform's roots plus an optional CA bundle,
//! handed to hyper-rustls directly, so nothing depends on a process-wide
//! default provider. hyper rather than reqwest (measured above): reqwest
//! cannot bound hyper's read buffers (see `http`).

mod auth;
mod baremetal;
mod client;
mod cloud;
mod compute;
mod config;
#[cfg(test)]
mod contract;
mod error;
mod external;
mod http;
mod index;
mod mapping;
mod network;
mod own_writes;
mod proxy;
mod resolve;

pub use auth::FailureStreakHook;
pub use cloud::OpenStackCloud;
pub use config::{ConfigError, Interface, NetworkSelector, OpenStackConfig};
pub use mapping::{
    METADATA_GO_SERVER_ID, METADATA_SERVER_NAME, METADATA_SERVER_NAMESPACE, METADATA_SERVER_UID, port_name,
    resource_description,
};
