// Package conformance runs gophercloud, the OpenStack client of the Go
// controller this project replaces, against the simulator, calling it as
// that controller does: Keystone v3 password auth scoped to a project (and
// to a domain for identity), service endpoints found in the catalog with no
// region named, Nova at microversion 2.90, Neutron and Glance.
//
// The simulator and a fixture describing what it holds are set up by the
// Rust test that runs these checks
// (adapters/sim/openstack/tests/gophercloud_conformance.rs); the fixture's
// path is in CONFORMANCE_FIXTURE. Each check is named after what it proves.
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/tags"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// microversion is the compute microversion the Go controller pins.
const microversion = "2.90"

const unknownID = "5e5e0000-dead-4000-8000-000000000000"

type fixture struct {
	BaseURL         string            `json:"base_url"`
	AuthURL         string            `json:"auth_url"`
	UserID          string            `json:"user_id"`
	Password        string            `json:"password"`
	ProjectID       string            `json:"project_id"`
	OtherProjectID  string            `json:"other_project_id"`
	DomainID        string            `json:"domain_id"`
	Networks        map[string]string `json:"networks"`
	SecurityGroupID string            `json:"security_group_id"`
	ExternalNetwork string            `json:"external_network"`
	FlavorID        string            `json:"flavor_id"`
	ImageID         string            `json:"image_id"`
	ImageName       string            `json:"image_name"`
	PublicKey       string            `json:"public_key"`
}

var (
	loaded     fixture
	loadOnce   sync.Once
	loadFailed error
)

func setup(t *testing.T) fixture {
	t.Helper()
	loadOnce.Do(func() {
		path := os.Getenv("CONFORMANCE_FIXTURE")
		if path == "" {
			loadFailed = errors.New("CONFORMANCE_FIXTURE is not set: run these checks through adapters/sim/openstack/tests/gophercloud_conformance.rs")
			return
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			loadFailed = err
			return
		}
		loadFailed = json.Unmarshal(raw, &loaded)
	})
	if loadFailed != nil {
		t.Fatal(loadFailed)
	}
	return loaded
}

func context30s(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// projectProvider logs in as the Go controller's PasswordProvider does: a
// user ID, its password, a project ID scope, reauthentication allowed.
func projectProvider(t *testing.T, ctx context.Context, f fixture) *gophercloud.ProviderClient {
	t.Helper()
	provider, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: f.AuthURL,
		UserID:           f.UserID,
		Password:         f.Password,
		AllowReauth:      true,
		Scope:            &gophercloud.AuthScope{ProjectID: f.ProjectID},
	})
	if err != nil {
		t.Fatalf("project-scoped password auth: %v", err)
	}
	return provider
}

// compute is the Go controller's compute client: the catalog's compute
// endpoint (no region named) at microversion 2.90.
func compute(t *testing.T, ctx context.Context, f fixture) *gophercloud.ServiceClient {
	t.Helper()
	client, err := openstack.NewComputeV2(projectProvider(t, ctx, f), gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatalf("compute endpoint: %v", err)
	}
	client.Microversion = microversion
	return client
}

func network(t *testing.T, ctx context.Context, f fixture) *gophercloud.ServiceClient {
	t.Helper()
	client, err := openstack.NewNetworkV2(projectProvider(t, ctx, f), gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatalf("network endpoint: %v", err)
	}
	return client
}

func image(t *testing.T, ctx context.Context, f fixture) *gophercloud.ServiceClient {
	t.Helper()
	client, err := openstack.NewImageV2(projectProvider(t, ctx, f), gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatalf("image endpoint: %v", err)
	}
	return client
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// serverPort makes a port as the Go controller's CreateServerPort does:
// named, on a network, with security groups given explicitly.
func serverPort(t *testing.T, ctx context.Context, net *gophercloud.ServiceClient, f fixture, name string) *ports.Port {
	t.Helper()
	groupIDs := []string{f.SecurityGroupID}
	port, err := ports.Create(ctx, net, &ports.CreateOpts{
		Name:           name,
		NetworkID:      f.Networks["network-a"],
		SecurityGroups: &groupIDs,
	}).Extract()
	if err != nil {
		t.Fatalf("port create: %v", err)
	}
	t.Cleanup(func() {
		err := ports.Delete(context.Background(), net, port.ID).ExtractErr()
		if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("port delete: %v", err)
		}
	})
	return port
}

// boot creates a server as the Go controller's CreateServer does: on a port
// (named with its network), with its metadata, user data and a keypair.
func boot(t *testing.T, ctx context.Context, cc, net *gophercloud.ServiceClient, f fixture, name, keyName string) (*servers.Server, *ports.Port) {
	t.Helper()
	port := serverPort(t, ctx, net, f, "server-"+name)
	opts := servers.CreateOpts{
		Name:      name,
		ImageRef:  f.ImageID,
		FlavorRef: f.FlavorID,
		Networks:  []servers.Network{{Port: port.ID, UUID: port.NetworkID}},
		Metadata: map[string]string{
			"serverID":         name,
			"region:server_id": name,
			"organizationID":   "organization-a",
		},
		UserData: []byte("#cloud-config\n{}\n"),
	}
	var builder servers.CreateOptsBuilder = opts
	if keyName != "" {
		builder = keypairs.CreateOptsExt{CreateOptsBuilder: opts, KeyName: keyName}
	}
	server, err := servers.Create(ctx, cc, builder, servers.SchedulerHintOpts{}).Extract()
	if err != nil {
		t.Fatalf("server create: %v", err)
	}
	t.Cleanup(func() {
		err := servers.Delete(context.Background(), cc, server.ID).ExtractErr()
		if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("server delete: %v", err)
		}
	})
	waitForStatus(t, ctx, cc, server.ID, "ACTIVE")
	return server, port
}

// waitForStatus polls a server until it has status (ERROR fails at once),
// as servers.WaitForStatus does, at a tenth of its one-second interval.
func waitForStatus(t *testing.T, ctx context.Context, cc *gophercloud.ServiceClient, id, status string) {
	t.Helper()
	for {
		server, err := servers.Get(ctx, cc, id).Extract()
		if err != nil {
			t.Fatalf("waiting for %s: %v", status, err)
		}
		if server.Status == status {
			return
		}
		if server.Status == "ERROR" {
			t.Fatalf("waiting for %s: ERROR (%+v)", status, server.Fault)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: still %s: %v", status, server.Status, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Identity

// deleteAndWaitGone deletes the server and waits until Nova answers 404 for it.
func deleteAndWaitGone(t *testing.T, ctx context.Context, cc *gophercloud.ServiceClient, id string) {
	t.Helper()
	if err := servers.Delete(ctx, cc, id).ExtractErr(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := servers.Get(ctx, cc, id).Extract()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("get after delete: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the server is still there 20 s after its delete")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPasswordAuthScopedToProjectFindsComputeNetworkAndImageWithoutARegion(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	provider := projectProvider(t, ctx, f)
	if provider.TokenID == "" {
		t.Fatal("no token")
	}
	for kind, want := range map[string]string{
		"compute": f.BaseURL + "/compute/v2.1/",
		"network": f.BaseURL + "/network/",
		"image":   f.BaseURL + "/image/",
	} {
		var client *gophercloud.ServiceClient
		var err error
		switch kind {
		case "compute":
			client, err = openstack.NewComputeV2(provider, gophercloud.EndpointOpts{})
		case "network":
			client, err = openstack.NewNetworkV2(provider, gophercloud.EndpointOpts{})
		case "image":
			client, err = openstack.NewImageV2(provider, gophercloud.EndpointOpts{})
		}
		if err != nil {
			t.Fatalf("%s endpoint: %v", kind, err)
		}
		if client.Endpoint != want {
			t.Errorf("%s endpoint %q, want %q", kind, client.Endpoint, want)
		}
	}
}

func TestTokenCarriesProjectRolesAndCatalogAndValidates(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	provider := projectProvider(t, ctx, f)
	identity, err := openstack.NewIdentityV3(provider, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	result := tokens.Get(ctx, identity, provider.Token())
	project, err := result.ExtractProject()
	if err != nil || project.ID != f.ProjectID {
		t.Fatalf("project %+v, %v", project, err)
	}
	user, err := result.ExtractUser()
	if err != nil || user.ID != f.UserID {
		t.Fatalf("user %+v, %v", user, err)
	}
	roles, err := result.ExtractRoles()
	if err != nil || len(roles) == 0 {
		t.Fatalf("roles %+v, %v", roles, err)
	}
	catalog, err := result.ExtractServiceCatalog()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, entry := range catalog.Entries {
		kinds = append(kinds, entry.Type)
	}
	for _, kind := range []string{"identity", "compute", "network", "image"} {
		if !slices.Contains(kinds, kind) {
			t.Errorf("catalog without %s: %v", kind, kinds)
		}
	}
	token, err := result.ExtractToken()
	if err != nil || !token.ExpiresAt.After(time.Now()) {
		t.Fatalf("token %+v, %v", token, err)
	}
	ok, err := tokens.Validate(ctx, identity, provider.Token())
	if err != nil || !ok {
		t.Fatalf("validate: %v, %v", ok, err)
	}
	ok, err = tokens.Validate(ctx, identity, "gAAAAAnot-a-token")
	if err != nil || ok {
		t.Fatalf("an unknown token validated: %v, %v", ok, err)
	}
}

func TestRevokedTokenIsReplacedByReauthentication(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	provider := projectProvider(t, ctx, f)
	identity, err := openstack.NewIdentityV3(provider, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := openstack.NewComputeV2(provider, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	cc.Microversion = microversion
	revoked := provider.Token()
	if err := tokens.Revoke(ctx, identity, revoked).Err; err != nil {
		t.Fatalf("revoke: %v", err)
	}
	// The next call is refused 401; gophercloud logs in again (AllowReauth)
	// and repeats it with the new token.
	if _, err := flavors.ListDetail(cc, nil).AllPages(ctx); err != nil {
		t.Fatalf("a call after the revoke: %v", err)
	}
	if provider.Token() == revoked {
		t.Fatal("the revoked token is still in use")
	}
	if ok, err := tokens.Validate(ctx, identity, revoked); err != nil || ok {
		t.Errorf("the revoked token validates: %v, %v", ok, err)
	}
}

func TestPasswordAuthScopedToDomainGetsDomainTokenWithCatalog(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	provider, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: f.AuthURL,
		UserID:           f.UserID,
		Password:         f.Password,
		AllowReauth:      true,
		Scope:            &gophercloud.AuthScope{DomainID: f.DomainID},
	})
	if err != nil {
		t.Fatalf("domain-scoped password auth: %v", err)
	}
	identity, err := openstack.NewIdentityV3(provider, gophercloud.EndpointOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if identity.Endpoint != f.BaseURL+"/identity/v3/" {
		t.Errorf("identity endpoint %q", identity.Endpoint)
	}
	result, ok := provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatalf("auth result %T", provider.GetAuthResult())
	}
	domain, err := result.ExtractDomain()
	if err != nil || domain == nil || domain.ID != f.DomainID {
		t.Fatalf("domain %+v, %v", domain, err)
	}
	project, err := result.ExtractProject()
	if err != nil || project != nil {
		t.Fatalf("a domain token with a project: %+v, %v", project, err)
	}
	catalog, err := result.ExtractServiceCatalog()
	if err != nil || len(catalog.Entries) == 0 {
		t.Fatalf("catalog %+v, %v", catalog, err)
	}
}

func TestProjectWithoutRoleAssignmentIsRefused401(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	_, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: f.AuthURL,
		UserID:           f.UserID,
		Password:         f.Password,
		Scope:            &gophercloud.AuthScope{ProjectID: f.OtherProjectID},
	})
	if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Fatalf("got %v, want 401", err)
	}
}

func TestWrongPasswordIsRefused401(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	_, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: f.AuthURL,
		UserID:           f.UserID,
		Password:         "wrong",
		Scope:            &gophercloud.AuthScope{ProjectID: f.ProjectID},
	})
	if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Fatalf("got %v, want 401", err)
	}
}

// Nova

func TestNovaAnswersAtMicroversion2_90(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc := compute(t, ctx, f)
	var body map[string]any
	resp, err := cc.Get(ctx, cc.ServiceURL("flavors"), &body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("OpenStack-API-Version"); got != "compute "+microversion {
		t.Errorf("OpenStack-API-Version %q", got)
	}
	if got := resp.Header.Get("X-OpenStack-Nova-API-Version"); got != microversion {
		t.Errorf("X-OpenStack-Nova-API-Version %q", got)
	}
}

func TestServerCreateOnPortShowAndDeleteAt2_90(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	keyName := uniqueName("key")
	if err := keypairs.Create(ctx, cc, keypairs.CreateOpts{Name: keyName, PublicKey: f.PublicKey}).Err; err != nil {
		t.Fatalf("keypair create: %v", err)
	}
	t.Cleanup(func() { _ = keypairs.Delete(context.Background(), cc, keyName, nil).ExtractErr() })
	name := uniqueName("gopher")
	created, port := boot(t, ctx, cc, net, f, name, keyName)
	if created.ID == "" || created.AdminPass == "" {
		t.Errorf("create answer without id or adminPass: %+v", created)
	}
	server, err := servers.Get(ctx, cc, created.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if server.Name != name || server.Status != "ACTIVE" || server.TenantID != f.ProjectID || server.KeyName != keyName {
		t.Errorf("server %+v", server)
	}
	if server.Metadata["region:server_id"] != name || server.Metadata["serverID"] != name {
		t.Errorf("metadata %v", server.Metadata)
	}
	if server.Tags == nil || server.ServerGroups == nil || server.Hostname == nil {
		t.Errorf("a 2.90 server without tags, server_groups or hostname: %+v", server)
	}
	if server.Flavor["original_name"] == nil || server.Flavor["vcpus"] == nil {
		t.Errorf("a 2.90 flavor not embedded: %v", server.Flavor)
	}
	if server.Image["id"] != f.ImageID {
		t.Errorf("image %v", server.Image)
	}
	addresses, ok := server.Addresses["network-a"].([]any)
	if !ok || len(addresses) != 1 {
		t.Fatalf("addresses %v", server.Addresses)
	}
	address := addresses[0].(map[string]any)
	if address["addr"] != port.FixedIPs[0].IPAddress || address["OS-EXT-IPS-MAC:mac_addr"] != port.MACAddress {
		t.Errorf("address %v, port %+v", address, port)
	}
	if server.Created.IsZero() || server.Updated.IsZero() {
		t.Errorf("created %v updated %v", server.Created, server.Updated)
	}
	attached, err := ports.Get(ctx, net, port.ID).Extract()
	if err != nil || attached.DeviceID != server.ID || attached.DeviceOwner != "compute:nova" {
		t.Errorf("port after boot %+v, %v", attached, err)
	}

	deleteAndWaitGone(t, ctx, cc, server.ID)
	if err := servers.Delete(ctx, cc, server.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("second delete: %v, want 404", err)
	}
}

func TestServerListByNameFollowsNextLinks(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	prefix := uniqueName("paged")
	var want []string
	for i := range 3 {
		server, _ := boot(t, ctx, cc, net, f, fmt.Sprintf("%s-%d", prefix, i), "")
		want = append(want, server.ID)
	}
	pages := 0
	var got []string
	err := servers.List(cc, servers.ListOpts{Name: prefix}).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		pages++
		list, err := servers.ExtractServers(page)
		for _, server := range list {
			got = append(got, server.ID)
		}
		return true, err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if pages < 2 {
		t.Errorf("%d page(s): the simulator pages two servers at a time", pages)
	}
	// The Go controller's GetServer: a regex name filter, then an exact match.
	all, err := servers.List(cc, servers.ListOpts{Name: prefix + "-1"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := servers.ExtractServers(all)
	if err != nil || len(list) != 1 || list[0].Name != prefix+"-1" {
		t.Errorf("by name: %+v, %v", list, err)
	}
}

// A list of changes (changes-since) shows a server deleted since, with
// status DELETED, as Nova does; a list without it never shows it, and
// gophercloud reads both.
func TestChangesSinceListsDeletedServers(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	name := uniqueName("changed")
	created, _ := boot(t, ctx, cc, net, f, name, "")
	server, err := servers.Get(ctx, cc, created.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	since := server.Created.Add(-time.Second).UTC().Format(time.RFC3339)
	deleteAndWaitGone(t, ctx, cc, server.ID)
	status := func(opts servers.ListOpts) string {
		all, err := servers.List(cc, opts).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		list, err := servers.ExtractServers(all)
		if err != nil {
			t.Fatal(err)
		}
		for _, listed := range list {
			if listed.ID == server.ID {
				if listed.Updated.Before(server.Created) {
					t.Errorf("deleted server dated %v, before its creation %v", listed.Updated, server.Created)
				}
				return listed.Status
			}
		}
		return ""
	}
	if got := status(servers.ListOpts{ChangesSince: since}); got != "DELETED" {
		t.Errorf("changes-since %s: the deleted server's status is %q, want DELETED", since, got)
	}
	if got := status(servers.ListOpts{}); got != "" {
		t.Errorf("a list without changes-since shows the deleted server as %q", got)
	}
}

func TestServerMetadataAndTags(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	server, _ := boot(t, ctx, cc, net, f, uniqueName("tagged"), "")
	metadata, err := servers.UpdateMetadata(ctx, cc, server.ID, servers.MetadataOpts{"unikorn:server-uid": "uid-1"}).Extract()
	if err != nil || metadata["unikorn:server-uid"] != "uid-1" || metadata["serverID"] == "" {
		t.Fatalf("update metadata: %v, %v", metadata, err)
	}
	metadata, err = servers.Metadata(ctx, cc, server.ID).Extract()
	if err != nil || metadata["unikorn:server-uid"] != "uid-1" {
		t.Fatalf("metadata: %v, %v", metadata, err)
	}
	item, err := servers.Metadatum(ctx, cc, server.ID, "unikorn:server-uid").Extract()
	if err != nil || item["unikorn:server-uid"] != "uid-1" {
		t.Fatalf("metadatum: %v, %v", item, err)
	}
	if err := servers.DeleteMetadatum(ctx, cc, server.ID, "unikorn:server-uid").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := servers.Metadatum(ctx, cc, server.ID, "unikorn:server-uid").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted metadatum: %v, want 404", err)
	}

	replaced, err := tags.ReplaceAll(ctx, cc, server.ID, tags.ReplaceAllOpts{Tags: []string{"a", "b"}}).Extract()
	if err != nil || !slices.Equal(replaced, []string{"a", "b"}) {
		t.Fatalf("replace tags: %v, %v", replaced, err)
	}
	if err := tags.Add(ctx, cc, server.ID, "c").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if found, err := tags.Check(ctx, cc, server.ID, "c").Extract(); err != nil || !found {
		t.Errorf("check c: %v, %v", found, err)
	}
	if found, err := tags.Check(ctx, cc, server.ID, "z").Extract(); err != nil || found {
		t.Errorf("check z: %v, %v", found, err)
	}
	if err := tags.Delete(ctx, cc, server.ID, "a").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	listed, err := tags.List(ctx, cc, server.ID).Extract()
	slices.Sort(listed)
	if err != nil || !slices.Equal(listed, []string{"b", "c"}) {
		t.Errorf("tags: %v, %v", listed, err)
	}
	shown, err := servers.Get(ctx, cc, server.ID).Extract()
	if err != nil || shown.Tags == nil || len(*shown.Tags) != 2 {
		t.Errorf("server tags: %+v, %v", shown, err)
	}
}

func TestKeypairCreateWithPublicKeyGetAndDelete(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc := compute(t, ctx, f)
	name := uniqueName("keypair")
	created, err := keypairs.Create(ctx, cc, keypairs.CreateOpts{Name: name, PublicKey: f.PublicKey}).Extract()
	if err != nil || created.Name != name || created.PublicKey != f.PublicKey || created.Fingerprint == "" {
		t.Fatalf("create: %+v, %v", created, err)
	}
	if err := keypairs.Create(ctx, cc, keypairs.CreateOpts{Name: name, PublicKey: f.PublicKey}).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a second keypair of the same name: %v, want 409", err)
	}
	got, err := keypairs.Get(ctx, cc, name, nil).Extract()
	if err != nil || got.PublicKey != f.PublicKey {
		t.Errorf("get: %+v, %v", got, err)
	}
	if err := keypairs.Delete(ctx, cc, name, nil).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := keypairs.Get(ctx, cc, name, nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted keypair: %v, want 404", err)
	}
}

func TestFlavorsListDetailSortedByName(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc := compute(t, ctx, f)
	all, err := flavors.ListDetail(cc, &flavors.ListOpts{SortKey: "name"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := flavors.ExtractFlavors(all)
	if err != nil || len(list) < 2 {
		t.Fatalf("flavors %+v, %v", list, err)
	}
	var names []string
	for _, flavor := range list {
		names = append(names, flavor.Name)
		if flavor.VCPUs == 0 || flavor.RAM == 0 {
			t.Errorf("flavor %+v", flavor)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("not sorted by name: %v", names)
	}
}

func TestServerOnAnUnknownImageIsRefused400(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	port := serverPort(t, ctx, net, f, uniqueName("server-badimage"))
	_, err := servers.Create(ctx, cc, servers.CreateOpts{
		Name:      uniqueName("badimage"),
		ImageRef:  unknownID,
		FlavorRef: f.FlavorID,
		Networks:  []servers.Network{{Port: port.ID}},
	}, nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Fatalf("got %v, want 400", err)
	}
}

// Neutron

func TestExternalNetworksByRouterExternalAndTenantNetworksByName(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	net := network(t, ctx, f)
	affirmative := true
	all, err := networks.List(net, &external.ListOptsExt{ListOptsBuilder: &networks.ListOpts{}, External: &affirmative}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var externals []struct {
		networks.Network
		external.NetworkExternalExt
	}
	if err := networks.ExtractNetworksInto(all, &externals); err != nil {
		t.Fatal(err)
	}
	if len(externals) != 1 || externals[0].ID != f.ExternalNetwork || !externals[0].External {
		t.Errorf("external networks %+v", externals)
	}
	all, err = networks.List(net, &networks.ListOpts{Name: "network-b"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName, err := networks.ExtractNetworks(all)
	if err != nil || len(byName) != 1 || byName[0].ID != f.Networks["network-b"] {
		t.Errorf("network-b: %+v, %v", byName, err)
	}
	got, err := networks.Get(ctx, net, f.Networks["network-a"]).Extract()
	if err != nil || got.Name != "network-a" || len(got.Subnets) != 1 {
		t.Errorf("network-a: %+v, %v", got, err)
	}
}

func TestPortsCreateListByNameAndDeviceAndDelete(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	name := uniqueName("ported")
	server, port := boot(t, ctx, cc, net, f, name, "")
	if port.Name != "server-"+name || len(port.SecurityGroups) != 1 || port.SecurityGroups[0] != f.SecurityGroupID {
		t.Errorf("port %+v", port)
	}
	if len(port.FixedIPs) != 1 || port.FixedIPs[0].SubnetID == "" || port.MACAddress == "" {
		t.Errorf("port addresses %+v", port)
	}
	all, err := ports.List(net, ports.ListOpts{Name: "server-" + name}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName, err := ports.ExtractPorts(all)
	if err != nil || len(byName) != 1 || byName[0].ID != port.ID {
		t.Errorf("by name: %+v, %v", byName, err)
	}
	all, err = ports.List(net, ports.ListOpts{DeviceID: server.ID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byDevice, err := ports.ExtractPorts(all)
	if err != nil || len(byDevice) != 1 || byDevice[0].ID != port.ID {
		t.Errorf("by device: %+v, %v", byDevice, err)
	}
	groupIDs := []string{f.SecurityGroupID}
	pairs := []ports.AddressPair{{IPAddress: "10.0.0.0/24"}}
	updated, err := ports.Update(ctx, net, port.ID, ports.UpdateOpts{SecurityGroups: &groupIDs, AllowedAddressPairs: &pairs}).Extract()
	if err != nil || len(updated.AllowedAddressPairs) != 1 || updated.AllowedAddressPairs[0].MACAddress != port.MACAddress {
		t.Errorf("update: %+v, %v", updated, err)
	}
	loose := serverPort(t, ctx, net, f, uniqueName("loose"))
	if err := ports.Delete(ctx, net, loose.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = ports.Get(ctx, net, loose.ID).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted port: %v, want 404", err)
	}
}

func TestNeutronListsFollowNextLinks(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	net := network(t, ctx, f)
	prefix := uniqueName("many")
	for i := range 3 {
		serverPort(t, ctx, net, f, fmt.Sprintf("%s-%d", prefix, i))
	}
	pages := 0
	count := 0
	err := ports.List(net, ports.ListOpts{}).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		pages++
		list, err := ports.ExtractPorts(page)
		for _, port := range list {
			if strings.HasPrefix(port.Name, prefix) {
				count++
			}
		}
		return true, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != 3 || pages < 2 {
		t.Errorf("%d of 3 ports over %d page(s)", count, pages)
	}
}

func TestSecurityGroupsByName(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	net := network(t, ctx, f)
	all, err := groups.List(net, groups.ListOpts{Name: "securitygroup-web"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := groups.ExtractGroups(all)
	if err != nil || len(list) != 1 || list[0].ID != f.SecurityGroupID {
		t.Fatalf("by name: %+v, %v", list, err)
	}
	got, err := groups.Get(ctx, net, f.SecurityGroupID).Extract()
	if err != nil || got.Name != "securitygroup-web" || got.TenantID != f.ProjectID {
		t.Errorf("get: %+v, %v", got, err)
	}
	_, err = groups.Get(ctx, net, unknownID).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("unknown group: %v, want 404", err)
	}
}

func TestSecurityGroupCreateRulesAndDelete(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	net := network(t, ctx, f)
	name := uniqueName("securitygroup")
	group, err := groups.Create(ctx, net, &groups.CreateOpts{Name: name}).Extract()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if group.Name != name || len(group.Rules) != 2 {
		t.Errorf("a new group %+v, want two egress rules", group)
	}
	for _, rule := range group.Rules {
		if rule.Direction != "egress" {
			t.Errorf("a new group's rule %+v", rule)
		}
	}
	all, err := groups.List(net, groups.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if listed, err := groups.ExtractGroups(all); err != nil || len(listed) != 1 || listed[0].ID != group.ID {
		t.Errorf("by name: %+v, %v", listed, err)
	}
	// The Go controller's CreateSecurityGroupRule.
	ssh := rules.CreateOpts{
		Description:    "unikorn managed security group rule",
		Direction:      rules.DirIngress,
		EtherType:      rules.EtherType4,
		PortRangeMin:   22,
		PortRangeMax:   22,
		Protocol:       rules.ProtocolTCP,
		SecGroupID:     group.ID,
		RemoteIPPrefix: "0.0.0.0/0",
	}
	rule, err := rules.Create(ctx, net, ssh).Extract()
	if err != nil {
		t.Fatalf("rule create: %v", err)
	}
	if rule.PortRangeMin != 22 || rule.PortRangeMax != 22 || rule.Protocol != "tcp" || rule.SecGroupID != group.ID {
		t.Errorf("rule %+v", rule)
	}
	if _, err := rules.Create(ctx, net, ssh).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a duplicate rule: %v, want 409", err)
	}
	backwards := ssh
	backwards.PortRangeMin, backwards.PortRangeMax = 443, 80
	if _, err := rules.Create(ctx, net, backwards).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("a reversed port range: %v, want 400", err)
	}
	v6 := ssh
	v6.RemoteIPPrefix = "::/0"
	if _, err := rules.Create(ctx, net, v6).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("an IPv6 prefix on an IPv4 rule: %v, want 400", err)
	}
	pages, err := rules.List(net, rules.ListOpts{SecGroupID: group.ID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := rules.ExtractRules(pages)
	if err != nil || len(listed) != 3 {
		t.Errorf("rules of the group: %+v, %v", listed, err)
	}
	port, err := ports.Create(ctx, net, &ports.CreateOpts{NetworkID: f.Networks["network-b"], SecurityGroups: &[]string{group.ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := groups.Delete(ctx, net, group.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("deleting a group a port uses: %v, want 409", err)
	}
	if err := ports.Delete(ctx, net, port.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := rules.Delete(ctx, net, rule.ID).ExtractErr(); err != nil {
		t.Fatalf("rule delete: %v", err)
	}
	if _, err := rules.Get(ctx, net, rule.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted rule: %v, want 404", err)
	}
	if err := groups.Delete(ctx, net, group.ID).ExtractErr(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := groups.Get(ctx, net, group.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted group: %v, want 404", err)
	}
}

func TestFloatingIPCreateOnPortListByPortDisassociateAndDelete(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	cc, net := compute(t, ctx, f), network(t, ctx, f)
	_, port := boot(t, ctx, cc, net, f, uniqueName("floating"), "")
	fip, err := floatingips.Create(ctx, net, floatingips.CreateOpts{FloatingNetworkID: f.ExternalNetwork, PortID: port.ID}).Extract()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if fip.PortID != port.ID || fip.FixedIP != port.FixedIPs[0].IPAddress || fip.FloatingIP == "" {
		t.Errorf("floating IP %+v", fip)
	}
	all, err := floatingips.List(net, floatingips.ListOpts{PortID: port.ID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byPort, err := floatingips.ExtractFloatingIPs(all)
	if err != nil || len(byPort) != 1 || byPort[0].ID != fip.ID {
		t.Errorf("by port: %+v, %v", byPort, err)
	}
	_, err = floatingips.Create(ctx, net, floatingips.CreateOpts{FloatingNetworkID: f.ExternalNetwork, PortID: port.ID}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a second floating IP on the port: %v, want 409", err)
	}
	released, err := floatingips.Update(ctx, net, fip.ID, floatingips.UpdateOpts{PortID: new(string)}).Extract()
	if err != nil || released.PortID != "" {
		t.Errorf("disassociate: %+v, %v", released, err)
	}
	if err := floatingips.Delete(ctx, net, fip.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = floatingips.Get(ctx, net, fip.ID).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("deleted floating IP: %v, want 404", err)
	}
}

// Glance

func TestImagesListPublicAndGetByID(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	ic := image(t, ctx, f)
	all, err := images.List(ic, &images.ListOpts{Visibility: images.ImageVisibilityPublic}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := images.ExtractImages(all)
	if err != nil {
		t.Fatal(err)
	}
	index := slices.IndexFunc(list, func(i images.Image) bool { return i.ID == f.ImageID })
	if index < 0 {
		t.Fatalf("image %s not listed: %+v", f.ImageID, list)
	}
	got, err := images.Get(ctx, ic, f.ImageID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != f.ImageName || got.Status != images.ImageStatusActive || got.Visibility != images.ImageVisibilityPublic {
		t.Errorf("image %+v", got)
	}
	if got.CreatedAt.IsZero() || got.SizeBytes == 0 || got.DiskFormat == "" || got.ContainerFormat == "" {
		t.Errorf("image %+v", got)
	}
	if got.Properties["os_distro"] != "ubuntu" {
		t.Errorf("properties %v", got.Properties)
	}
	_, err = images.Get(ctx, ic, unknownID).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("unknown image: %v, want 404", err)
	}
}

func TestImagesListPagesWithLimit(t *testing.T) {
	f := setup(t)
	ctx := context30s(t)
	ic := image(t, ctx, f)
	pages := 0
	var ids []string
	err := images.List(ic, &images.ListOpts{Limit: 1}).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		pages++
		list, err := images.ExtractImages(page)
		for _, i := range list {
			ids = append(ids, i.ID)
		}
		return true, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 2 || pages < len(ids) {
		t.Errorf("%d image(s) over %d page(s)", len(ids), pages)
	}
	if !slices.Contains(ids, f.ImageID) {
		t.Errorf("image %s not listed: %v", f.ImageID, ids)
	}
}
