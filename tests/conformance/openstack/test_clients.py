"""Standard OpenStack operations, each a named check, run with openstacksdk
and the `openstack` CLI against the simulator. Every assertion is on what the
client itself reads (its resource objects, its exceptions, its JSON output),
so a check fails when the client and the simulator disagree.
"""

import base64
import uuid

import openstack.exceptions as exc
import pytest
from keystoneauth1 import discover

from conftest import CliError

UNKNOWN_ID = "5e5e0000-dead-4000-8000-000000000000"


def make_port(conn, fixture, network="network-a", **extra):
    return conn.network.create_port(
        network_id=fixture["networks"][network], name=f"server-{uuid.uuid4().hex[:8]}", **extra
    )


def boot(conn, fixture, name, **extra):
    """A server booted as our adapter and the Go controller boot one: a
    port made first, then the server on it, with metadata, user data and a
    keypair when given."""
    port = make_port(conn, fixture, security_groups=[fixture["security_group"]["id"]])
    server = conn.compute.create_server(
        name=name,
        flavor_id=fixture["flavor_id"],
        image_id=fixture["image_id"],
        networks=[{"port": port.id}],
        metadata={"serverID": name, "unikorn:server-uid": f"uid-{name}"},
        user_data=base64.b64encode(b"#cloud-config\n{}\n").decode(),
        **extra,
    )
    return conn.compute.wait_for_server(server, status="ACTIVE", interval=0.5, wait=60), port


def error_type(error):
    """The `NeutronError.type` of a Neutron error the SDK raised."""
    return error.response.json()["NeutronError"]["type"]


# Identity


def test_token_issue(conn, fixture, openstack_cli):
    assert conn.auth_token
    assert conn.current_project_id == fixture["project_id"]
    token = openstack_cli("token", "issue")
    assert token["project_id"] == fixture["project_id"]
    assert token["user_id"] == fixture["user"]
    assert token["id"] and token["expires"]


def test_catalog(conn, fixture, openstack_cli):
    rows = {row["Type"]: row for row in openstack_cli("catalog", "list")}
    assert {"identity", "compute", "network"} <= set(rows)
    for row in rows.values():
        urls = [e["url"] for e in row["Endpoints"] if e["region"] == "RegionOne" and e["interface"] == "public"]
        assert urls and urls[0].startswith(fixture["base_url"])
    assert conn.compute.get_endpoint().rstrip("/") == f"{fixture['base_url']}/compute/v2.1"
    assert conn.network.get_endpoint().rstrip("/") == f"{fixture['base_url']}/network/v2.0"


def test_keystone_scopes_and_token_validation(conn, fixture):
    """A project by name needs its domain; a project the user has no role on
    is refused; GET /v3/auth/tokens shows a token again."""
    url = f"{fixture['base_url']}/identity/v3/auth/tokens"
    session = conn.session

    def login(project):
        body = {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": fixture["user"], "domain": {"name": "Default"}, "password": fixture["password"]}}},
            "scope": {"project": project},
        }}
        return session.post(url, json=body, authenticated=False, raise_exc=False)

    by_name = login({"name": "conformance", "domain": {"name": "Default"}})
    assert by_name.status_code == 201
    assert by_name.json()["token"]["project"]["id"] == fixture["project_id"]
    assert by_name.json()["token"]["catalog"]
    assert login({"name": fixture["other_project"], "domain": {"id": "default"}}).status_code == 401
    assert login({"name": "conformance"}).status_code == 400
    shown = session.get(url, headers={"X-Subject-Token": by_name.headers["X-Subject-Token"]})
    assert shown.json()["token"]["project"]["id"] == fixture["project_id"]
    assert session.get(url, headers={"X-Subject-Token": "gAAAAAnot-a-token"}, raise_exc=False).status_code == 404


# Discovery and microversions


@pytest.mark.parametrize("path", ["/identity", "/identity/v3", "/compute/", "/compute/v2.1/", "/network/"])
def test_version_discovery(conn, fixture, path):
    """keystoneauth's own parser reads each version document."""
    versions = discover.Discover(conn.session, fixture["base_url"] + path, authenticated=False).version_data()
    assert versions, f"no version in {path}"
    by_major = {v["version"][0]: v for v in versions}
    if path.startswith("/identity"):
        assert by_major[3]["url"].rstrip("/") == f"{fixture['base_url']}/identity/v3"
    elif path.startswith("/compute"):
        current = by_major[2] if path.endswith("v2.1/") else next(v for v in versions if v["version"] == (2, 1))
        assert current["min_microversion"] == (2, 1)
        assert current["max_microversion"] == (2, 90)
    else:
        assert versions[0]["url"].rstrip("/") == f"{fixture['base_url']}/network/v2.0"


def test_network_v2_resources(conn, fixture):
    """`GET /network/v2.0/` lists the core collections (not a version
    document: keystoneauth reads the root's)."""
    resources = conn.session.get(fixture["base_url"] + "/network/v2.0/").json()["resources"]
    links = {r["collection"]: r["links"][0]["href"] for r in resources}
    assert links["ports"] == f"{fixture['base_url']}/network/v2.0/ports"
    missing = conn.session.get(fixture["base_url"] + "/network/v2.0", raise_exc=False)
    assert missing.status_code == 404


def test_versions_show(openstack_cli):
    rows = openstack_cli(
        "versions", "show", "--service", "compute", "--status", "CURRENT", "--region-name", "RegionOne"
    )
    assert [(r["Version"], r["Min Microversion"], r["Max Microversion"]) for r in rows] == [("2.1", "2.1", "2.90")]


def test_microversion_negotiation(conn):
    data = conn.compute.get_endpoint_data()
    assert (data.min_microversion, data.max_microversion) == ((2, 1), (2, 90))
    latest = conn.compute.get("/servers", microversion="latest")
    assert latest.headers["OpenStack-API-Version"] == "compute 2.90"
    assert latest.headers["X-OpenStack-Nova-API-Version"] == "2.90"
    vary = {v.strip() for v in latest.headers["Vary"].split(",")}
    assert {"OpenStack-API-Version", "X-OpenStack-Nova-API-Version"} <= vary
    assert conn.compute.get("/servers", microversion="2.37").headers["OpenStack-API-Version"] == "compute 2.37"
    too_high = conn.compute.get("/servers", microversion="2.999", raise_exc=False)
    assert too_high.status_code == 406
    banana = conn.compute.get("/servers", headers={"OpenStack-API-Version": "compute banana"}, raise_exc=False)
    assert banana.status_code == 400
    none = conn.compute.get("/servers", headers={"OpenStack-API-Version": None}, raise_exc=False)
    assert none.headers["OpenStack-API-Version"] == "compute 2.1"


def test_create_without_networks_needs_them_from_2_37(conn, fixture):
    body = {"server": {"name": "no-networks", "flavorRef": fixture["flavor_id"], "imageRef": fixture["image_id"]}}
    refused = conn.compute.post("/servers", json=body, microversion="2.37", raise_exc=False)
    assert refused.status_code == 400
    assert "networks" in refused.json()["badRequest"]["message"]


# Servers


def test_server_create_show_list_delete(conn, fixture):
    keypair = conn.compute.create_keypair(name=f"key-{uuid.uuid4().hex[:6]}")
    server, port = boot(
        conn, fixture, "conf-lifecycle", key_name=keypair.name, tags=["blue", "web"], description="made by the sdk"
    )
    shown = conn.compute.get_server(server.id)
    uuid.UUID(shown.id)
    assert shown.status == "ACTIVE"
    assert shown.metadata["serverID"] == "conf-lifecycle"
    assert shown.key_name == keypair.name
    assert sorted(shown.tags) == ["blue", "web"]
    assert shown.description == "made by the sdk"
    assert shown.hostname == "conf-lifecycle"
    assert shown.is_locked is False
    assert shown.flavor.original_name == "m1.tiny" and shown.flavor.ram == 512
    assert shown.server_groups == []
    assert [g["name"] for g in shown.security_groups] == [fixture["security_group"]["name"]]
    fixed = shown.addresses["network-a"][0]
    assert fixed["addr"] == port.fixed_ips[0]["ip_address"] and fixed["OS-EXT-IPS:type"] == "fixed"
    assert shown.launched_at
    interfaces = list(conn.compute.server_interfaces(server.id))
    assert [i.port_id for i in interfaces] == [port.id]
    assert server.id in [s.id for s in conn.compute.servers()]
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, interval=0.5, wait=30)
    assert conn.compute.find_server(server.id) is None
    # The caller's port outlives the server.
    assert conn.network.get_port(port.id).device_id == ""
    conn.network.delete_port(port)
    conn.compute.delete_keypair(keypair)


def test_server_on_a_network_gets_a_port_from_nova(conn, fixture):
    server = conn.compute.create_server(
        name="conf-by-network", flavor_id=fixture["flavor_id"], image_id=fixture["image_id"],
        networks=[{"uuid": fixture["networks"]["network-b"]}],
    )
    server = conn.compute.wait_for_server(server, status="ACTIVE", interval=0.5, wait=60)
    ports = list(conn.network.ports(device_id=server.id))
    assert len(ports) == 1 and ports[0].device_owner.startswith("compute:")
    assert [g["name"] for g in server.security_groups] == ["default"]
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, interval=0.5, wait=30)
    assert list(conn.network.ports(device_id=server.id)) == []


def test_server_update_and_metadata(conn, fixture):
    server, port = boot(conn, fixture, "conf-update")
    conn.compute.update_server(server, name="conf-updated", description="renamed")
    assert conn.compute.get_server(server.id).name == "conf-updated"
    conn.compute.set_server_metadata(server, team="blue")
    assert conn.compute.get_server_metadata(server).metadata["team"] == "blue"
    conn.compute.delete_server_metadata(server, ["team"])
    assert "team" not in conn.compute.get_server_metadata(server).metadata
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, interval=0.5, wait=30)
    conn.network.delete_port(port)


def test_tags(conn, fixture, openstack_cli):
    server, port = boot(conn, fixture, "conf-tags")
    server.add_tag(conn.compute, "red")
    assert server.fetch_tags(conn.compute).tags == ["red"]
    openstack_cli("server", "set", "--tag", "green", server.id, json_output=False)
    assert sorted(conn.compute.get_server(server.id).tags) == ["green", "red"]
    assert [s.id for s in conn.compute.servers(tags="green")] == [server.id]
    server.remove_tag(conn.compute, "red")
    with pytest.raises(exc.NotFoundException):
        server.remove_tag(conn.compute, "red")
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, interval=0.5, wait=30)
    conn.network.delete_port(port)


def test_nova_paging_and_filters(conn, fixture):
    """Nova pages two at a time here: the SDK follows `servers_links`."""
    made = [boot(conn, fixture, f"conf-page-{i}") for i in range(3)]
    listed = [s.name for s in conn.compute.servers()]
    for server, _ in made:
        assert listed.count(server.name) == 1
    assert [s.name for s in conn.compute.servers(name="^conf-page-1$")] == ["conf-page-1"]
    assert {s.name for s in conn.compute.servers(status="ACTIVE")} >= {s.name for s, _ in made}
    first = conn.compute.get("/servers", params={"limit": 1}, microversion="2.90").json()
    assert len(first["servers"]) == 1 and first["servers_links"][0]["rel"] == "next"
    bad_since = conn.compute.get("/servers", params={"changes-since": "yesterday"}, raise_exc=False)
    assert bad_since.status_code == 400
    bad_status = conn.compute.get("/servers", params={"status": "BANANA"}, microversion="2.90", raise_exc=False)
    assert bad_status.status_code == 400
    unknown = conn.compute.get("/servers", params={"colour": "blue"}, microversion="2.90", raise_exc=False)
    assert unknown.status_code == 400
    for server, port in made:
        conn.compute.delete_server(server)
    for server, port in made:
        conn.compute.wait_for_delete(server, interval=0.5, wait=30)
        conn.network.delete_port(port)


def test_cli_server_list_show_delete(conn, fixture, openstack_cli):
    server, port = boot(conn, fixture, "conf-cli")
    assert "conf-cli" in [row["Name"] for row in openstack_cli("server", "list")]
    shown = openstack_cli("server", "show", "conf-cli")
    assert shown["id"] == server.id and shown["status"] == "ACTIVE"
    openstack_cli("server", "delete", "--wait", "conf-cli", json_output=False)
    assert conn.compute.find_server(server.id) is None
    conn.network.delete_port(port)


def test_cli_server_create_by_image_flavor_and_network_names(conn, fixture, openstack_cli):
    """`openstack server create --image NAME --flavor NAME --network NAME`:
    the CLI finds the image in Glance, the flavor in Nova and the network in
    Neutron by name, then boots on that network."""
    created = openstack_cli(
        "server", "create", "--image", fixture["image_name"], "--flavor", "m1.tiny",
        "--network", "network-b", "--wait", "conf-cli-create",
    )
    assert created["status"] == "ACTIVE"
    assert created["image"].startswith(fixture["image_name"]) and fixture["image_id"] in created["image"]
    server = conn.compute.get_server(created["id"])
    assert server.image.id == fixture["image_id"]
    assert list(server.addresses) == ["network-b"]
    openstack_cli("server", "delete", "--wait", created["id"], json_output=False)
    assert conn.compute.find_server(created["id"]) is None


def test_images(conn, fixture, openstack_cli):
    """Glance's list and show, through the SDK and the CLI; an image Nova
    cannot find is a 400."""
    image = conn.image.find_image(fixture["image_name"], ignore_missing=False)
    assert image.id == fixture["image_id"] and image.status == "active" and image.visibility == "public"
    assert image.os_distro == "cirros"
    assert fixture["image_id"] in [i.id for i in conn.image.images(limit=1)]
    rows = openstack_cli("image", "list")
    assert {"ID": fixture["image_id"], "Name": fixture["image_name"], "Status": "active"} in rows
    assert openstack_cli("image", "show", fixture["image_name"])["id"] == fixture["image_id"]
    with pytest.raises(exc.NotFoundException):
        conn.image.get_image(UNKNOWN_ID)
    port = make_port(conn, fixture)
    with pytest.raises(exc.BadRequestException):
        conn.compute.create_server(
            name="conf-no-image", flavor_id=fixture["flavor_id"], image_id=UNKNOWN_ID, networks=[{"port": port.id}]
        )
    conn.network.delete_port(port)


def test_flavors_and_limits(conn, openstack_cli):
    assert {row["Name"] for row in openstack_cli("flavor", "list")} == {"m1.tiny", "m1.small"}
    assert conn.compute.find_flavor("m1.small").ram == 2048
    limits = {row["Name"]: row["Value"] for row in openstack_cli("limits", "show", "--absolute")}
    assert limits["instances"] == 10 and limits["keypairs"] == 100


def test_compute_error_shape(conn):
    with pytest.raises(exc.NotFoundException) as raised:
        conn.compute.get_server(UNKNOWN_ID)
    assert "itemNotFound" in raised.value.response.json()


# Networking


def test_networks_by_name(conn, fixture, openstack_cli):
    assert conn.network.find_network("network-a").id == fixture["networks"]["network-a"]
    shown = openstack_cli("network", "show", "network-b")
    assert shown["id"] == fixture["networks"]["network-b"]
    names = {row["Name"] for row in openstack_cli("network", "list")}
    assert {"network-a", "network-b", "external"} <= names
    external = [n.name for n in conn.network.networks(is_router_external=True)]
    assert external == ["external"]
    subnet = conn.network.get_subnet(conn.network.find_network("network-a").subnet_ids[0])
    assert subnet.network_id == fixture["networks"]["network-a"]


def test_ports_with_fixed_ips(conn, fixture, openstack_cli):
    port = make_port(conn, fixture, fixed_ips=[{"ip_address": "172.16.200.10"}])
    assert port.fixed_ips[0]["ip_address"] == "172.16.200.10"
    assert [p.id for p in conn.network.ports(fixed_ips="ip_address=172.16.200.10")] == [port.id]
    with pytest.raises(exc.ConflictException) as taken:
        make_port(conn, fixture, fixed_ips=[{"ip_address": "172.16.200.10"}])
    assert error_type(taken.value) == "IpAddressAlreadyAllocated"
    with pytest.raises(exc.BadRequestException):
        make_port(conn, fixture, fixed_ips=[{"ip_address": "10.9.9.9"}])
    made = openstack_cli(
        "port", "create", "--network", "network-a", "--fixed-ip", "ip-address=172.16.200.11", "port-cli"
    )
    assert made["fixed_ips"][0]["ip_address"] == "172.16.200.11"
    openstack_cli("port", "delete", "port-cli", json_output=False)
    conn.network.delete_port(port)


def test_security_groups(conn, fixture, openstack_cli):
    names = {g.name for g in conn.network.security_groups()}
    assert {"default", fixture["security_group"]["name"]} <= names
    default = conn.network.find_security_group("default")
    assert len(default.security_group_rules) == 4
    port = make_port(conn, fixture)
    assert port.security_group_ids == [default.id]
    conn.network.update_port(port, security_groups=[fixture["security_group"]["id"]])
    assert conn.network.get_port(port.id).security_group_ids == [fixture["security_group"]["id"]]
    rows = openstack_cli("security", "group", "list")
    assert {"default", fixture["security_group"]["name"]} <= {r["Name"] for r in rows}
    conn.network.delete_port(port)


def test_floating_ips_create_associate_delete(conn, fixture, openstack_cli):
    server, port = boot(conn, fixture, "conf-fip")
    external = conn.network.find_network(fixture["external_network"])
    ip = conn.network.create_ip(floating_network_id=external.id)
    assert ip.port_id is None and ip.status == "DOWN"
    ip = conn.network.update_ip(ip, port_id=port.id)
    assert ip.port_id == port.id and ip.fixed_ip_address == port.fixed_ips[0]["ip_address"]
    addresses = conn.compute.get_server(server.id).addresses["network-a"]
    assert {"floating", "fixed"} == {a["OS-EXT-IPS:type"] for a in addresses}
    with pytest.raises(exc.ConflictException) as twice:
        conn.network.create_ip(floating_network_id=external.id, port_id=port.id)
    assert error_type(twice.value) == "FloatingIPPortAlreadyAssociated"
    assert conn.network.update_ip(ip, port_id=None).port_id is None
    conn.network.delete_ip(ip)
    with pytest.raises(exc.NotFoundException) as gone:
        conn.network.get_ip(ip.id)
    assert error_type(gone.value) == "FloatingIPNotFound"
    made = openstack_cli("floating", "ip", "create", fixture["external_network"])
    openstack_cli("floating", "ip", "set", "--port", port.id, made["id"], json_output=False)
    assert conn.network.get_ip(made["id"]).port_id == port.id
    openstack_cli("floating", "ip", "delete", made["id"], json_output=False)
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, interval=0.5, wait=30)
    conn.network.delete_port(port)


def test_neutron_paging(conn, fixture):
    """Neutron pages two at a time here (`pagination_max_limit`): the SDK
    follows `ports_links` to the end, each port once."""
    made = [make_port(conn, fixture, network="network-b") for _ in range(5)]
    listed = [p.id for p in conn.network.ports(network_id=fixture["networks"]["network-b"])]
    assert sorted(listed) == sorted(p.id for p in made)
    page = conn.network.get("/ports", params={"network_id": fixture["networks"]["network-b"]}).json()
    assert len(page["ports"]) == 2
    rels = {link["rel"]: link["href"] for link in page["ports_links"]}
    assert "marker=" in rels["next"] and "network_id=" in rels["next"]
    assert rels["next"].startswith(fixture["base_url"] + "/network/v2.0/ports?")
    for port in made:
        conn.network.delete_port(port)


def test_neutron_error_shapes(conn):
    with pytest.raises(exc.NotFoundException) as port:
        conn.network.get_port(UNKNOWN_ID)
    assert error_type(port.value) == "PortNotFound"
    with pytest.raises(exc.NotFoundException) as network:
        conn.network.get_network(UNKNOWN_ID)
    assert error_type(network.value) == "NetworkNotFound"


def test_unknown_neutron_filters_and_attributes_are_refused(conn, fixture):
    refused = conn.network.get("/ports", params={"colour": "blue"}, raise_exc=False)
    assert refused.status_code == 400
    assert refused.json()["NeutronError"]["type"] == "HTTPBadRequest"
    assert "invalid attribute for filtering" in refused.json()["NeutronError"]["message"]
    body = {"port": {"network_id": fixture["networks"]["network-a"], "colour": "blue"}}
    unrecognized = conn.network.post("/ports", json=body, raise_exc=False)
    assert unrecognized.status_code == 400
    assert "Unrecognized attribute" in unrecognized.json()["NeutronError"]["message"]


def test_keypairs(conn, openstack_cli):
    generated = openstack_cli("keypair", "create", "conf-cli-key", json_output=False)
    assert "PRIVATE KEY" in generated
    assert "conf-cli-key" in [row["Name"] for row in openstack_cli("keypair", "list")]
    assert openstack_cli("keypair", "show", "conf-cli-key")["name"] == "conf-cli-key"
    openstack_cli("keypair", "delete", "conf-cli-key", json_output=False)
    public = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHNpbXVsYXRlZC1jb25mb3JtYW5jZS1rZXk= conformance"
    keypair = conn.compute.create_keypair(name="conf-sdk-key", public_key=public)
    assert keypair.public_key == public and keypair.fingerprint.count(":") == 15
    with pytest.raises(exc.ConflictException):
        conn.compute.create_keypair(name="conf-sdk-key", public_key=public)
    conn.compute.delete_keypair(keypair)
    with pytest.raises(CliError):
        openstack_cli("keypair", "show", "conf-sdk-key")
