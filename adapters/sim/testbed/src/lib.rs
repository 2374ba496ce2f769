//! The test bed: the world the demo and the end-to-end tests run the
//! operator in, built one way for both.
//!
//! - [`KubeBed`]: SimKube serving every CRD the operator touches on a
//!   loopback port, and a kube client to it.
//! - [`Tenant`]: a namespace's consumed resources (a ready Identity with its
//!   OpenstackIdentity, Networks, SecurityGroups, SSH CAs), seeded through
//!   SimKube's store so the API request counters see only the operator.
//! - [`CloudBed`]: SimCloud handed to the operator either directly as its
//!   port ([`CloudPath::Direct`]) or through the OpenStack simulator and the
//!   real OpenStack adapter ([`CloudPath::OpenStack`]).
//! - [`control_plane::ControlPlane`]: the reference API server, etcd and
//!   kube-apiserver built by `.ci/build-control-plane`, for the tests and
//!   `bench --api-server real`.
//! - [`go_controller::GoController`]: the Go controller this operator
//!   replaces, and what it needs seeded, for the takeover test and
//!   `bench --controller go`.
//! - [`supervised::Supervised`]: a process under a watchdog, stopped however
//!   its owner ends.
//!
//! ```no_run
//! # async fn doc() -> Result<(), server_sim_testbed::Error> {
//! use server_sim_testbed::{CloudBed, CloudPath, KubeBed, Tenant};
//! use server_simcloud::{CloudConfig, SimCloud};
//!
//! let kube = KubeBed::serve(server_simkube::SimKube::new(), "127.0.0.1:0".parse().unwrap(), "ns").await?;
//! let tenant = Tenant::new("ns", "region-a", "identity-a");
//! kube.seed_tenant(&tenant, true)?;
//! kube.seed(&tenant, "networks", "net-a", serde_json::json!({"prefix": "10.0.0.0/24"}))?;
//! let cloud = CloudBed::start(CloudPath::OpenStack, SimCloud::new(CloudConfig::reliable(1)), &tenant, None).await?;
//! let port = cloud.port()?; // a fresh OpenStack adapter, as a restarted process has
//! # drop(port);
//! # Ok(()) }
//! ```

mod apiserver_bed;
mod cloud;
pub mod control_plane;
pub mod go_controller;
mod kube_bed;
pub mod supervised;
mod tenant;

pub use apiserver_bed::{ApiServerBed, ServerMirror};
pub use cloud::{CloudBed, CloudPath};
pub use kube_bed::KubeBed;
pub use server_sim_openstack::{
    Fault as OpenStackFault, Op as OpenStackOp, OpenStackCounters, OpenStackSimConfig,
    RequestRecord as OpenStackRequest, Target as OpenStackTarget,
};
pub use tenant::{API_VERSION, Tenant};

/// Why the test bed could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SimKube refused the CRD {name}: {source}")]
    Crd { name: String, source: Box<server_simkube::ApiError> },
    #[error("a CRD does not encode as JSON: {0}")]
    CrdEncoding(serde_json::Error),
    #[error("cannot serve {what} on a loopback port: {source}")]
    Serve { what: &'static str, source: std::io::Error },
    #[error("cannot build a kube client for SimKube at {url}: {source}")]
    Client { url: String, source: Box<kube::Error> },
    #[error("SimKube's URL {url} is not a URI")]
    Url { url: String },
    #[error("cannot seed {resource}/{name}: {source}")]
    Seed { resource: String, name: String, source: Box<server_simkube::ApiError> },
    #[error("the reference control plane: {0}")]
    ControlPlane(Box<control_plane::ControlPlaneError>),
    #[error("the API server refused {resource}/{name}: {source}")]
    Api { resource: String, name: String, source: Box<kube::Error> },
    #[error("{resource}/{name} is not an object to create: {reason}")]
    Object { resource: String, name: String, reason: String },
    #[error("the OpenStack adapter refused its configuration: {0}")]
    OpenStack(#[from] Box<server_openstack::ConfigError>),
}
