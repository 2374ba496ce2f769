//! Neutron calls (networking API v2.0): the Server's port and floating IP.

use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use server_core::port::CloudError;

use crate::client::{Call, Service, Session};
use crate::http::segment;

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
    #[serde(default)]
    pub(crate) description: String,
}

#[derive(Deserialize)]
pub(crate) struct PortEnvelope {
    pub(crate) port: Port,
}

#[derive(Deserialize)]
pub(crate) struct FloatingIpEnvelope {
    pub(crate) floatingip: FloatingIp,
}

/// List envelopes, as the API samples show them (the contract tests read
/// them; the lists themselves go through [`list_all`]).
#[cfg(test)]
#[derive(Deserialize)]
pub(crate) struct Ports {
    pub(crate) ports: Vec<Port>,
}

#[cfg(test)]
#[derive(Deserialize)]
pub(crate) struct FloatingIps {
    pub(crate) floatingips: Vec<FloatingIp>,
}

#[cfg(test)]
#[derive(Deserialize)]
pub(crate) struct Networks {
    pub(crate) networks: Vec<Named>,
}

#[cfg(test)]
#[derive(Deserialize)]
pub(crate) struct SecurityGroups {
    pub(crate) security_groups: Vec<Named>,
}

/// A runaway pagination (a marker that does not advance) stops here.
const MAX_PAGES: usize = 1_000;

/// Every item of a Neutron list, following its pages: while the answer
/// carries a `<collection>_links` `next` link, the list is asked again after
/// the last item's ID (`marker`), with the call's filters (Networking API
/// v2.0, "Pagination"). Neutron pages only when `pagination_max_limit` is
/// set, which large clouds do; without paging, names past the first page
/// were never found.
async fn list_all<T: serde::de::DeserializeOwned>(
    session: &Session<'_>,
    call: Call<'_>,
    collection: &str,
) -> Result<Vec<T>, CloudError> {
    #[derive(Deserialize)]
    struct Link {
        rel: String,
    }
    let operation = call.operation;
    let links_key = format!("{collection}_links");
    let mut items = Vec::new();
    let mut marker: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut page_call = Call {
            query: call.query.clone(),
            body: None,
            ..Call::new(operation, call.service, call.method.clone(), call.path.clone())
        };
        if let Some(marker) = &marker {
            page_call = page_call.query("marker", marker.clone());
        }
        let mut page: serde_json::Map<String, Value> = session.send(&page_call).await?.json(operation)?;
        let page_items = page.remove(collection).unwrap_or(Value::Array(Vec::new()));
        let ids: Vec<Option<String>> = page_items
            .as_array()
            .map(|list| list.iter().map(|item| item.get("id").and_then(Value::as_str).map(str::to_owned)).collect())
            .unwrap_or_default();
        let parsed: Vec<T> =
            serde_json::from_value(page_items).map_err(|e| crate::error::malformed(operation, None, e))?;
        items.extend(parsed);
        let more = page
            .get(&links_key)
            .and_then(|links| serde_json::from_value::<Vec<Link>>(links.clone()).ok())
            .is_some_and(|links| links.iter().any(|link| link.rel == "next"));
        match ids.last().cloned().flatten() {
            Some(last) if more && marker.as_deref() != Some(last.as_str()) => marker = Some(last),
            _ => return Ok(items),
        }
    }
    Err(CloudError::Unavailable { status: 502, message: format!("{operation}: more than {MAX_PAGES} pages") })
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

/// Ports of the token's project with this exact name. Neutron's own `name`
/// filter is an equality, but OpenStack `name` filters are not all one
/// (Nova's and Octavia's match a pattern, so `server-web` also finds
/// `server-web-2`), and a proxy or backend in front of Neutron may do the
/// same: the answer is checked again here, and a port without the name
/// (one the answer left it out of) is not taken for it.
pub(crate) async fn ports_named(session: &Session<'_>, name: &str) -> Result<Vec<Port>, CloudError> {
    const OPERATION: &str = "listing ports";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/ports").query("name", name);
    Ok(exactly(list_all(session, call, "ports").await?, |port: &Port| &port.name, name))
}

/// The items whose `key` is exactly `wanted`: the re-check after a list
/// filtered by a name or a description.
pub(crate) fn exactly<T>(mut items: Vec<T>, key: impl Fn(&T) -> &str, wanted: &str) -> Vec<T> {
    items.retain(|item| key(item) == wanted);
    items
}

pub(crate) async fn create_port(session: &Session<'_>, body: Value) -> Result<Port, CloudError> {
    const OPERATION: &str = "creating port";
    let call = Call::new(OPERATION, Service::Network, Method::POST, "/ports").body(&body)?;
    Ok(session.send(&call).await?.json::<PortEnvelope>(OPERATION)?.port)
}

/// Sets the fields in `body` on an existing port.
pub(crate) async fn update_port(session: &Session<'_>, id: &str, body: Value) -> Result<(), CloudError> {
    const OPERATION: &str = "updating port";
    let call = Call::new(OPERATION, Service::Network, Method::PUT, format!("/ports/{}", segment(id))).body(&body)?;
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
    list_all(session, call, "floatingips").await
}

/// Floating IPs of the token's project with this exact description (the
/// ones this controller made for a Server carry `Server <namespace>/<name>`).
pub(crate) async fn floating_ips_described(
    session: &Session<'_>,
    description: &str,
) -> Result<Vec<FloatingIp>, CloudError> {
    const OPERATION: &str = "listing floating IPs";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/floatingips").query("description", description);
    let described: Vec<FloatingIp> = list_all(session, call, "floatingips").await?;
    Ok(exactly(described, |ip: &FloatingIp| &ip.description, description))
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
    let call = Call::new(OPERATION, Service::Network, Method::POST, "/floatingips").body(&body)?;
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
    list_all(session, call, "networks").await
}

/// Every network the project sees (its own, shared and external), with the
/// fields name resolution needs.
pub(crate) async fn networks(session: &Session<'_>) -> Result<Vec<Named>, CloudError> {
    const OPERATION: &str = "listing networks";
    let call =
        Call::new(OPERATION, Service::Network, Method::GET, "/networks").query("fields", "id").query("fields", "name");
    list_all(session, call, "networks").await
}

/// Every security group the project sees.
pub(crate) async fn security_groups(session: &Session<'_>) -> Result<Vec<Named>, CloudError> {
    const OPERATION: &str = "listing security groups";
    let call = Call::new(OPERATION, Service::Network, Method::GET, "/security-groups")
        .query("fields", "id")
        .query("fields", "name");
    list_all(session, call, "security_groups").await
}

#[cfg(test)]
mod name_tests {
    use super::*;

    fn port(name: &str) -> Port {
        serde_json::from_value(json!({ "id": format!("id-{name}"), "name": name })).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A list filtered by a pattern (`server-a` also finds `server-a-2`), or
    /// an answer without the name, yields only the exact name.
    #[test]
    fn only_the_exact_name_is_kept() {
        let listed = vec![port("server-a-2"), port("server-a"), port("server-ab"), port("")];
        let kept = exactly(listed, |port: &Port| &port.name, "server-a");
        assert_eq!(kept.iter().map(|port| port.id.as_str()).collect::<Vec<_>>(), ["id-server-a"]);
    }
}
