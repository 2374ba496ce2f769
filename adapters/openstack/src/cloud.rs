//! The cloud port over Nova and Neutron: the create, get, list and delete
//! flows, each idempotent and each keyed by the Server's uid.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use server_core::port::{
    CloudError, CloudPort, CreateRequest, DeleteProgress, IdentityContext, PortFuture, ProviderServer, ProviderStatus,
    ServerRef,
};
use tracing::{debug, info, warn};

use crate::auth::Auth;
use crate::client::{Http, Session};
use crate::compute;
use crate::config::{ConfigError, OpenStackConfig};
use crate::mapping::{self, NovaServer, port_name};
use crate::network::{self as neutron, Port};

/// The cloud port of one OpenStack region. Cheap to clone (shared state).
#[derive(Clone)]
pub struct OpenStackCloud {
    inner: Arc<Inner>,
}

struct Inner {
    config: OpenStackConfig,
    http: Http,
    auth: Auth,
    /// Server uid -> Nova id, learnt from creates and lists, so a get is one
    /// `GET /servers/{id}`. Only a hint: a miss falls back to the full list,
    /// which alone may answer "absent".
    known: Mutex<HashMap<String, String>>,
}

impl fmt::Debug for OpenStackCloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenStackCloud").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl OpenStackCloud {
    /// Validates the configuration and builds the HTTP client. Nothing is
    /// sent until the first call: credentials come with each call.
    pub fn new(config: OpenStackConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let http = Http::new(&config)?;
        let auth = Auth::new(&config);
        Ok(OpenStackCloud { inner: Arc::new(Inner { config, http, auth, known: Mutex::new(HashMap::new()) }) })
    }

    /// The port for the controller's per-region registry.
    pub fn port(&self) -> Arc<dyn CloudPort> {
        Arc::new(self.clone())
    }

    pub fn config(&self) -> &OpenStackConfig {
        &self.inner.config
    }

    fn session<'a>(&'a self, identity: &'a IdentityContext) -> Session<'a> {
        Session { http: &self.inner.http, auth: &self.inner.auth, identity }
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, String>> {
        // A plain map: a panic elsewhere cannot leave it inconsistent.
        self.inner.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn remember(&self, uid: &str, id: &str) {
        self.known().insert(uid.to_owned(), id.to_owned());
    }

    fn forget(&self, uid: &str) {
        self.known().remove(uid);
    }

    /// Every Nova server tied to `uid`, oldest first, from one full list: the
    /// only answer that may say "none".
    async fn servers_of(&self, session: &Session<'_>, uid: &str) -> Result<Vec<NovaServer>, CloudError> {
        let mut servers: Vec<NovaServer> =
            compute::list_servers(session).await?.into_iter().filter(|s| s.server_uid() == Some(uid)).collect();
        servers.sort_by(|a, b| (a.created.as_deref(), &a.id).cmp(&(b.created.as_deref(), &b.id)));
        if servers.len() > 1 {
            let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
            warn!(server_uid = uid, ?ids, "more than one provider server carries this Server's uid");
        }
        Ok(servers)
    }

    /// The Server's provider server: by the remembered id when there is one,
    /// else from the full list.
    async fn lookup(&self, session: &Session<'_>, uid: &str) -> Result<Option<NovaServer>, CloudError> {
        let hint = self.known().get(uid).cloned();
        if let Some(id) = hint {
            match compute::get_server(session, &id).await? {
                Some(server) if server.server_uid() == Some(uid) => return Ok(Some(server)),
                _ => self.forget(uid),
            }
        }
        let found = self.servers_of(session, uid).await?.into_iter().next();
        if let Some(server) = &found {
            self.remember(uid, &server.id);
        }
        Ok(found)
    }

    async fn create_flow(
        &self,
        identity: &IdentityContext,
        request: &CreateRequest,
    ) -> Result<ProviderServer, CloudError> {
        let session = self.session(identity);
        let uid = request.server.uid.as_str();
        let Some(network) = request.networks.first() else {
            return Err(CloudError::Refused {
                status: 400,
                message: format!(
                    "server {}/{} names no network to attach",
                    request.server.namespace, request.server.name
                ),
            });
        };
        if let Some(existing) = self.lookup(&session, uid).await? {
            debug!(server_uid = uid, provider_id = %existing.id, "provider server exists; create is a no-op");
            if request.public_ip {
                // A previous create may have stopped between server and floating IP.
                if let Some(port) = self.find_port(&session, uid, &network.id).await? {
                    self.ensure_floating_ip(&session, request, &port).await?;
                }
            }
            return Ok(mapping::provider_server(&existing));
        }
        let port = self.ensure_port(&session, request, network).await?;
        let id = compute::create_server(&session, mapping::server_body(request, &port.id)).await?;
        self.remember(uid, &id);
        info!(
            server_uid = uid,
            namespace = %request.server.namespace,
            name = %request.server.name,
            provider_id = %id,
            port_id = %port.id,
            "created provider server"
        );
        if request.public_ip {
            self.ensure_floating_ip(&session, request, &port).await?;
        }
        // Nova answered 202: the server exists and is being scheduled.
        Ok(ProviderServer {
            id,
            server_uid: uid.to_owned(),
            status: ProviderStatus::Build,
            queued: true,
            ..ProviderServer::default()
        })
    }

    /// The Server's port on `network_id`, if a previous attempt made one.
    async fn find_port(&self, session: &Session<'_>, uid: &str, network_id: &str) -> Result<Option<Port>, CloudError> {
        let ports = neutron::ports_named(session, &port_name(uid)).await?;
        Ok(ports.into_iter().find(|p| p.network_id == network_id))
    }

    /// The port the new server boots with: a leftover of an earlier attempt on
    /// the same network is brought up to date and reused; one on a network the
    /// spec no longer names is deleted (no server uses it: none exists).
    async fn ensure_port(
        &self,
        session: &Session<'_>,
        request: &CreateRequest,
        network: &server_core::model::NetworkAttachment,
    ) -> Result<Port, CloudError> {
        let uid = request.server.uid.as_str();
        let body = mapping::port_body(request, network);
        let mut reusable = None;
        for port in neutron::ports_named(session, &port_name(uid)).await? {
            if reusable.is_none() && port.network_id == network.id {
                reusable = Some(port);
            } else {
                self.release_port(session, &port).await?;
            }
        }
        if let Some(port) = reusable {
            let mut update = body;
            // Name and network are fixed; refresh what the spec may have changed.
            if let Some(fields) = update.get_mut("port").and_then(|p| p.as_object_mut()) {
                fields.remove("network_id");
                fields.remove("name");
            }
            neutron::update_port(session, &port.id, update).await?;
            debug!(server_uid = uid, port_id = %port.id, "reusing port of an earlier attempt");
            return Ok(port);
        }
        let port = neutron::create_port(session, body).await?;
        info!(server_uid = uid, port_id = %port.id, network_id = %network.id, "created port");
        Ok(port)
    }

    async fn ensure_floating_ip(
        &self,
        session: &Session<'_>,
        request: &CreateRequest,
        port: &Port,
    ) -> Result<(), CloudError> {
        if !neutron::floating_ips_of(session, &port.id).await?.is_empty() {
            return Ok(());
        }
        let network_id = self.floating_network(session).await?;
        let description = format!("Server {}/{}", request.server.namespace, request.server.name);
        let ip = neutron::create_floating_ip(session, &network_id, &port.id, &description).await?;
        info!(
            server_uid = %request.server.uid,
            floating_ip_id = %ip.id,
            address = ip.floating_ip_address.as_deref().unwrap_or(""),
            "created floating IP"
        );
        Ok(())
    }

    /// The configured external network, else the project's only one.
    async fn floating_network(&self, session: &Session<'_>) -> Result<String, CloudError> {
        if let Some(id) = self.inner.config.floating_network_id.as_deref().filter(|id| !id.is_empty()) {
            return Ok(id.to_owned());
        }
        let mut networks = neutron::external_networks(session).await?;
        match networks.len() {
            1 => Ok(networks.remove(0)),
            n => Err(CloudError::Refused {
                status: 400,
                message: format!(
                    "a public IP was requested but no floatingNetworkID is configured and the project sees {n} \
                     external networks"
                ),
            }),
        }
    }

    /// Floating IPs first (they hold the port), then the port itself.
    async fn release_port(&self, session: &Session<'_>, port: &Port) -> Result<(), CloudError> {
        for ip in neutron::floating_ips_of(session, &port.id).await? {
            neutron::delete_floating_ip(session, &ip.id).await?;
            info!(floating_ip_id = %ip.id, port_id = %port.id, "released floating IP");
        }
        neutron::delete_port(session, &port.id).await?;
        info!(port_id = %port.id, "released port");
        Ok(())
    }

    async fn delete_flow(&self, identity: &IdentityContext, server: &ServerRef) -> Result<DeleteProgress, CloudError> {
        let session = self.session(identity);
        let uid = server.uid.as_str();
        let servers = self.servers_of(&session, uid).await?;
        if !servers.is_empty() {
            for nova in &servers {
                if nova.soft_deleted() {
                    compute::force_delete_server(&session, &nova.id).await?;
                    info!(server_uid = uid, provider_id = %nova.id, "force-deleted soft-deleted provider server");
                } else if !nova.deleting() {
                    compute::delete_server(&session, &nova.id).await?;
                    info!(server_uid = uid, provider_id = %nova.id, "requested provider server deletion");
                }
            }
            self.forget(uid);
            // Nova deletes asynchronously; a quick look spares a pass when it
            // was fast. Any doubt (still there, or no answer) is "in progress".
            for nova in &servers {
                match compute::get_server(&session, &nova.id).await {
                    Ok(None) => {}
                    Ok(Some(_)) | Err(_) => return Ok(DeleteProgress::InProgress),
                }
            }
        }
        // Nova no longer has it: give back what the create allocated.
        for port in neutron::ports_named(&session, &port_name(uid)).await? {
            self.release_port(&session, &port).await?;
        }
        Ok(DeleteProgress::Gone)
    }

    async fn get_flow(
        &self,
        identity: &IdentityContext,
        server: &ServerRef,
    ) -> Result<Option<ProviderServer>, CloudError> {
        let session = self.session(identity);
        Ok(self.lookup(&session, &server.uid).await?.as_ref().map(mapping::provider_server))
    }

    async fn list_flow(&self, identity: &IdentityContext) -> Result<Vec<ProviderServer>, CloudError> {
        let session = self.session(identity);
        let servers = compute::list_servers(&session).await?;
        let mut records = Vec::with_capacity(servers.len());
        // Servers this operator did not make (no uid) are not its business.
        for server in servers.iter().filter(|s| s.server_uid().is_some()) {
            let record = mapping::provider_server(server);
            self.remember(&record.server_uid, &record.id);
            records.push(record);
        }
        Ok(records)
    }
}

impl CloudPort for OpenStackCloud {
    fn create<'a>(
        &'a self,
        identity: &'a IdentityContext,
        request: &'a CreateRequest,
    ) -> PortFuture<'a, ProviderServer> {
        Box::pin(self.create_flow(identity, request))
    }

    fn delete<'a>(&'a self, identity: &'a IdentityContext, server: &'a ServerRef) -> PortFuture<'a, DeleteProgress> {
        Box::pin(self.delete_flow(identity, server))
    }

    fn get<'a>(
        &'a self,
        identity: &'a IdentityContext,
        server: &'a ServerRef,
    ) -> PortFuture<'a, Option<ProviderServer>> {
        Box::pin(self.get_flow(identity, server))
    }

    fn list<'a>(&'a self, identity: &'a IdentityContext) -> PortFuture<'a, Vec<ProviderServer>> {
        Box::pin(self.list_flow(identity))
    }
}
