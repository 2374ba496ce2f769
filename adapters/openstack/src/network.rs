//! Neutron calls (networking API v2.0): the Server's port and floating IP.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use server_core::port::CloudError;

use crate::client::{Call, Service, Session};
use crate::compute::segment;

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Port {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) network_id: String,
    /// The Nova server the port is bound to (empty while unbound).
    #[serde(default)]
    pub(crate) device_id: String,
    #[serde(default)]
    pub(crate) mac_address: Option<String>,
    #[serde(default)]
    pub(crate) security_groups: Vec<String>,
    #[serde(default)]
    pub(crate) allowed_address_pairs: Vec<AddressPair>,
}

/// One of a port's `allowed_address_pairs`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct AddressPair {
    pub(crate) ip_address: String,
    #[serde(default)]
    pub(crate) mac_address: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct FloatingIp {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) floating_ip_address: Option<String>,
    /// The port it is associated with (none once that port is deleted:
    /// Neutron keeps the floating IP, unassociated).
    #[serde(default)]
    pub(crate) port_id: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct Ports {
    pub(crate) ports: Vec<Port>,
}

#[derive(Deserialize)]
pub(crate) struct PortEnvelope {
    pub(crate) port: Port,
}

#[derive(Deserialize)]
pub(crate) struct FloatingIps {
    pub(crate) floatingips: Vec<FloatingIp>,
}

#[derive(Deserialize)]
pub(crate) struct FloatingIpEnvelope {
    pub(crate) floatingip: FloatingIp,
}

#[derive(Deserialize)]
pub(crate) struct Networks {
    pub(crate) networks: Vec<Named>,
}

#[derive(Deserialize)]
pub(crate) struct SecurityGroups {
    pub(crate) security_groups: Vec<Named>,
}

/// A network or security group: what name resolution and external network
/// selection read.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Named {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) name: String,
    /// Neutron tags (networks have them; an external network is picked by them).
    #[serde(default)]
    pub(crate) tags: Vec<String>,
}

/// Ports of the token's project with this exact name (some Neutron
/// backends match the `name` filter as a pattern, so `server-web` would
/// also find `server-web-2`: the answer is filtered again here).
pub(crate) async fn ports_named(session: &Session<'_>, name: &str) -> Result<Vec<Port>, CloudError> {
    const OPERATION: &str = "listing ports";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/ports").query("name", name);
    let mut ports = session.send(&call).await?.json::<Ports>(OPERATION)?.ports;
    ports.retain(|port| port.name.is_empty() || port.name == name);
    Ok(ports)
}

pub(crate) async fn create_port(session: &Session<'_>, body: Value) -> Result<Port, CloudError> {
    const OPERATION: &str = "creating port";
    let call = Call::new(OPERATION, Service::Network, Method::POST, "/ports").body(body);
    Ok(session.send(&call).await?.json::<PortEnvelope>(OPERATION)?.port)
}

/// Sets the fields in `body` on an existing port.
pub(crate) async fn update_port(session: &Session<'_>, id: &str, body: Value) -> Result<(), CloudError> {
    const OPERATION: &str = "updating port";
    let call = Call::new(OPERATION, Service::Network, Method::PUT, format!("/ports/{}", segment(id))).body(body);
    session.send(&call).await?.ok(OPERATION)
}

/// Deletes a port; one already gone counts as deleted.
pub(crate) async fn delete_port(session: &Session<'_>, id: &str) -> Result<(), CloudError> {
    const OPERATION: &str = "deleting port";
    let call = Call::new(OPERATION, Service::Network, Method::DELETE, format!("/ports/{}", segment(id)));
    let reply = session.send(&call).await?;
    if reply.is_not_found() {
        return Ok(());
    }
    reply.ok(OPERATION)
}

/// Floating IPs associated with a port.
pub(crate) async fn floating_ips_of(session: &Session<'_>, port_id: &str) -> Result<Vec<FloatingIp>, CloudError> {
    const OPERATION: &str = "listing floating IPs";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/floatingips").query("port_id", port_id);
    Ok(session.send(&call).await?.json::<FloatingIps>(OPERATION)?.floatingips)
}

/// Floating IPs of the token's project with this exact description (the
/// ones this controller made for a Server carry `Server <namespace>/<name>`).
pub(crate) async fn floating_ips_described(
    session: &Session<'_>,
    description: &str,
) -> Result<Vec<FloatingIp>, CloudError> {
    const OPERATION: &str = "listing floating IPs";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/floatingips").query("description", description);
    Ok(session.send(&call).await?.json::<FloatingIps>(OPERATION)?.floatingips)
}

/// Allocates a floating IP on `network_id` and associates it with the port.
pub(crate) async fn create_floating_ip(
    session: &Session<'_>,
    network_id: &str,
    port_id: &str,
    description: &str,
) -> Result<FloatingIp, CloudError> {
    const OPERATION: &str = "creating floating IP";
    let body = json!({"floatingip": {
        "floating_network_id": network_id,
        "port_id": port_id,
        "description": description,
    }});
    let call = Call::new(OPERATION, Service::Network, Method::POST, "/floatingips").body(body);
    Ok(session.send(&call).await?.json::<FloatingIpEnvelope>(OPERATION)?.floatingip)
}

/// Releases a floating IP; one already gone counts as released.
pub(crate) async fn delete_floating_ip(session: &Session<'_>, id: &str) -> Result<(), CloudError> {
    const OPERATION: &str = "deleting floating IP";
    let call = Call::new(OPERATION, Service::Network, Method::DELETE, format!("/floatingips/{}", segment(id)));
    let reply = session.send(&call).await?;
    if reply.is_not_found() {
        return Ok(());
    }
    reply.ok(OPERATION)
}

/// The external networks visible to the project.
pub(crate) async fn external_networks(session: &Session<'_>) -> Result<Vec<Named>, CloudError> {
    const OPERATION: &str = "listing external networks";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/networks").query("router:external", "true");
    Ok(session.send(&call).await?.json::<Networks>(OPERATION)?.networks)
}

/// Every network the project sees (its own, shared and external), with the
/// fields name resolution needs.
pub(crate) async fn networks(session: &Session<'_>) -> Result<Vec<Named>, CloudError> {
    const OPERATION: &str = "listing networks";
    let call =
        Call::new(OPERATION, Service::Network, Method::GET, "/networks").query("fields", "id").query("fields", "name");
    Ok(session.send(&call).await?.json::<Networks>(OPERATION)?.networks)
}

/// Every security group the project sees.
pub(crate) async fn security_groups(session: &Session<'_>) -> Result<Vec<Named>, CloudError> {
    const OPERATION: &str = "listing security groups";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/security-groups")
        .query("fields", "id")
        .query("fields", "name");
    Ok(session.send(&call).await?.json::<SecurityGroups>(OPERATION)?.security_groups)
}
