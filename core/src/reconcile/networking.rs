//! The port a present server boots with and the floating IP on it follow
//! the spec on every pass that reads them (DESIGN "The port and the
//! floating IP follow the spec"), as the Go controller reconciles them on
//! every pass: a floating IP is made when `publicIPAllocation` asks for one
//! and the port has none (a create that failed once is made by a later
//! pass), released when it no longer asks; the port's security groups and
//! allowed address pairs are set when they differ from the spec's. Each
//! change's answer confirms it, so a pass whose changes all succeed is Done.

use super::decision::{Action, Outcome, Wait};
use super::facts::NetworkingView;
use super::plan::Plan;
use super::provision::server_ref;
use crate::model::{AllowedAddressPair, Server};
use crate::port::{AttachedResource, FloatingIpRequest, Networking, PortUpdate, ProviderServer, ServerPort};

/// Whether the spec asks for a public IP.
pub fn wants_public_ip(server: &Server) -> bool {
    server.spec.public_ip_allocation.as_ref().is_some_and(|p| p.enabled)
}

/// Whether `port` carries what the spec asks for: the security groups the
/// spec's resolve to (as sets), and the first network's address pairs (a
/// pair without a MAC address uses the port's own).
pub fn port_follows_spec(server: &Server, networking: &Networking, port: &ServerPort) -> bool {
    let mut wanted_groups = networking.wanted_security_groups.clone();
    wanted_groups.sort();
    wanted_groups.dedup();
    let mut groups = port.security_groups.clone();
    groups.sort();
    groups.dedup();
    let own_mac = port.mac_address.as_deref();
    let normal = |pairs: &[AllowedAddressPair]| {
        let mut pairs: Vec<(String, Option<String>)> = pairs
            .iter()
            .map(|pair| {
                let mac = pair.mac_address.as_deref().filter(|mac| !mac.is_empty()).or(own_mac);
                (pair.cidr.clone(), mac.map(str::to_ascii_lowercase))
            })
            .collect();
        pairs.sort();
        pairs.dedup();
        pairs
    };
    let wanted_pairs = server.spec.networks.first().map(|n| n.allowed_address_pairs.as_slice()).unwrap_or_default();
    groups == wanted_groups && normal(&port.allowed_address_pairs) == normal(wanted_pairs)
}

/// The actions that bring the present server's port and floating IP to what
/// the spec asks, and how the pass ends: Done. A change's success answer is
/// its confirmation (Neutron answers a floating-IP create with the floating
/// IP bound to the port, a port update and a release only once they hold),
/// so the status that says Provisioned is written after the changes, and a
/// failed one is judged as any failed action (the next pass reads again).
pub(crate) fn converge(server: &Server, record: &ProviderServer, view: &NetworkingView, plan: &mut Plan) -> Outcome {
    let networking = match view {
        NetworkingView::Known(networking) => networking,
        NetworkingView::Unknown(reason) => {
            return Outcome::Yield(Wait::NetworkingUnknown { reason: reason.clone() });
        }
        // Not read is not "as the spec asks": fail closed.
        NetworkingView::NotRead => {
            return Outcome::Yield(Wait::NetworkingUnknown { reason: "they were not read in this pass".into() });
        }
    };
    let Some(port) = &networking.port else {
        // No port of the Server is bound to the server (booted otherwise):
        // nothing to converge, and the status says so.
        if wants_public_ip(server) || !server.spec.security_groups.is_empty() {
            plan.note_provisioned(format!(
                "the provider lists no port of this Server bound to server {}, so its public IP and port security \
                 are not managed",
                record.id
            ));
        }
        return Outcome::Done;
    };
    let mut changing = false;
    if !port_follows_spec(server, networking, port) {
        plan.provider(Action::UpdatePort(Box::new(PortUpdate {
            server: server_ref(server),
            port_id: port.id.clone(),
            security_groups: networking.wanted_security_groups.clone(),
            allowed_address_pairs: server
                .spec
                .networks
                .first()
                .map(|n| n.allowed_address_pairs.clone())
                .unwrap_or_default(),
        })));
        changing = true;
    }
    match (wants_public_ip(server), &port.floating_ip) {
        (true, None) => {
            plan.provider(Action::EnsureFloatingIp(FloatingIpRequest {
                server: server_ref(server),
                port_id: port.id.clone(),
            }));
            changing = true;
        }
        (false, Some(ip)) => {
            plan.provider(Action::ReleaseAttachment(AttachedResource::FloatingIp { id: ip.id.clone() }));
            changing = true;
        }
        _ => {}
    }
    if changing {
        plan.write_status_after_provider();
    }
    Outcome::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NetworkAttachment;

    fn server(pairs: Vec<AllowedAddressPair>) -> Server {
        let mut server = Server::default();
        server.spec.networks = vec![NetworkAttachment { id: "n".into(), allowed_address_pairs: pairs }];
        server
    }

    fn pair(cidr: &str, mac: Option<&str>) -> AllowedAddressPair {
        AllowedAddressPair { cidr: cidr.into(), mac_address: mac.map(str::to_owned) }
    }

    /// A pair without a MAC is the port's own MAC (Neutron fills it in);
    /// order and case do not matter, a missing or extra group does.
    #[test]
    fn a_port_follows_the_spec_as_sets_with_the_ports_own_mac_filled_in() {
        let server = server(vec![pair("10.0.0.9/32", None), pair("10.0.0.8/32", Some("AA:BB:CC:DD:EE:FF"))]);
        let networking =
            Networking { port: None, wanted_security_groups: vec!["g2".into(), "g1".into()], ..Default::default() };
        let port = ServerPort {
            id: "p".into(),
            mac_address: Some("fa:16:3e:00:00:01".into()),
            security_groups: vec!["g1".into(), "g2".into()],
            allowed_address_pairs: vec![
                pair("10.0.0.8/32", Some("aa:bb:cc:dd:ee:ff")),
                pair("10.0.0.9/32", Some("fa:16:3e:00:00:01")),
            ],
            floating_ip: None,
            bound_to: None,
        };
        assert!(port_follows_spec(&server, &networking, &port));
        let mut fewer = port.clone();
        fewer.security_groups.pop();
        assert!(!port_follows_spec(&server, &networking, &fewer));
        let mut other_mac = port.clone();
        other_mac.allowed_address_pairs[1].mac_address = Some("fa:16:3e:00:00:02".into());
        assert!(!port_follows_spec(&server, &networking, &other_mac));
        let mut extra = port;
        extra.allowed_address_pairs.push(pair("10.0.0.7/32", None));
        assert!(!port_follows_spec(&server, &networking, &extra));
    }
}
