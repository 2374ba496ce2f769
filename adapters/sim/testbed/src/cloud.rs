//! SimCloud as the operator reaches it: directly, or over HTTP through the
//! OpenStack simulator and the real OpenStack adapter.

use std::sync::Arc;
use std::time::Duration;

use server_core::port::CloudPort;
use server_openstack::{OpenStackCloud, OpenStackConfig};
use server_sim_openstack::{KeystoneUrl, OpenStackSim, OpenStackSimConfig, ServeHandle};
use server_simcloud::SimCloud;

use crate::{Error, Tenant};

/// How the operator reaches SimCloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudPath {
    /// SimCloud's in-process port.
    Direct,
    /// server-openstack's adapter over loopback HTTP to the OpenStack
    /// simulator, which serves SimCloud's model.
    OpenStack,
}

/// SimCloud and, on the OpenStack path, the OpenStack simulator serving it.
/// SimCloud's counters and truth count model calls on either path. Dropping
/// it stops the simulator serving.
#[derive(Debug)]
pub struct CloudBed {
    pub cloud: SimCloud,
    openstack: Option<OpenStackPath>,
}

#[derive(Debug)]
struct OpenStackPath {
    sim: OpenStackSim,
    served: Option<ServeHandle>,
    config: OpenStackConfig,
}

impl CloudBed {
    /// Puts `cloud` behind `path`. On the OpenStack path the simulator accepts
    /// the tenant's OpenStack credentials, and each adapter HTTP call gets
    /// `call_timeout` when given (the adapter's defaults otherwise).
    pub async fn start(
        path: CloudPath,
        cloud: SimCloud,
        tenant: &Tenant,
        call_timeout: Option<Duration>,
    ) -> Result<Self, Error> {
        Self::start_with(path, cloud, tenant, call_timeout, OpenStackSimConfig::default()).await
    }

    /// [`CloudBed::start`] with the OpenStack simulator configured as
    /// `sim_config` says (ignored on the direct path).
    pub async fn start_with(
        path: CloudPath,
        cloud: SimCloud,
        tenant: &Tenant,
        call_timeout: Option<Duration>,
        sim_config: OpenStackSimConfig,
    ) -> Result<Self, Error> {
        let openstack = match path {
            CloudPath::Direct => None,
            CloudPath::OpenStack => {
                let sim = OpenStackSim::with_config(cloud.clone(), sim_config);
                sim.add_user(&tenant.openstack_user, &tenant.openstack_password);
                let addr = ([127, 0, 0, 1], 0).into();
                let served =
                    sim.serve(addr).await.map_err(|source| Error::Serve { what: "the OpenStack simulator", source })?;
                let mut config = OpenStackConfig::new(served.auth_url(), "RegionOne");
                if let Some(timeout) = call_timeout {
                    config.request_timeout = timeout;
                    config.connect_timeout = timeout;
                }
                // Refuse a bad configuration now rather than at the first port.
                OpenStackCloud::new(config.clone()).map_err(Box::new)?;
                Some(OpenStackPath { sim, served: Some(served), config })
            }
        };
        Ok(CloudBed { cloud, openstack })
    }

    /// How long the adapter waits after a failed Keystone login before the
    /// next, doubling up to `max` (OpenStack path; the default minute is
    /// longer than a test).
    pub fn set_login_backoff(&mut self, first: std::time::Duration, max: std::time::Duration) {
        if let Some(path) = &mut self.openstack {
            path.config.login_backoff = first;
            path.config.login_backoff_max = max;
        }
    }

    /// A port that only reads (`explain`, `run --shadow`): the OpenStack
    /// adapter's read-only port; on the direct path SimCloud's own.
    pub fn read_only_port(&self) -> Result<Arc<dyn CloudPort>, Error> {
        match &self.openstack {
            None => Ok(self.cloud.port()),
            Some(path) => Ok(OpenStackCloud::new(path.config.clone()).map_err(Box::new)?.read_only().port()),
        }
    }

    /// Which path the operator takes.
    pub fn path(&self) -> CloudPath {
        if self.openstack.is_some() { CloudPath::OpenStack } else { CloudPath::Direct }
    }

    /// The port to hand the operator: SimCloud's own, or a new OpenStack
    /// adapter, as a restarted process has (no cached token or server ids).
    pub fn port(&self) -> Result<Arc<dyn CloudPort>, Error> {
        match &self.openstack {
            None => Ok(self.cloud.port()),
            Some(path) => Ok(OpenStackCloud::new(path.config.clone()).map_err(Box::new)?.port()),
        }
    }

    /// What the unikorn network controllers make in Neutron for a consumed
    /// resource the tenant seeds: the network `network-<name>` for a
    /// `networks` resource, the group `securitygroup-<name>` for a
    /// `securitygroups` one (uni-region's Neutron naming), in the tenant's
    /// project. Nothing on the direct path, where SimCloud takes the names.
    pub fn seed_neutron(&self, tenant: &Tenant, resource: &str, name: &str) {
        let Some(path) = &self.openstack else { return };
        match resource {
            "networks" => {
                path.sim.add_network(&tenant.project, &format!("network-{name}"));
            }
            "securitygroups" => {
                path.sim.add_security_group(&tenant.project, &format!("securitygroup-{name}"));
            }
            _ => {}
        }
    }

    /// The configuration the OpenStack adapter is built from, on the OpenStack
    /// path: what a separate operator process needs in its region file.
    pub fn openstack_config(&self) -> Option<&OpenStackConfig> {
        self.openstack.as_ref().map(|path| &path.config)
    }

    /// The OpenStack simulator, on the OpenStack path.
    pub fn openstack(&self) -> Option<&OpenStackSim> {
        self.openstack.as_ref().map(|path| &path.sim)
    }
}

impl Drop for CloudBed {
    fn drop(&mut self) {
        if let Some(served) = self.openstack.as_mut().and_then(|path| path.served.take()) {
            served.shutdown();
        }
    }
}
