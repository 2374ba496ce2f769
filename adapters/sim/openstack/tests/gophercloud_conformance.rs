//! gophercloud, the OpenStack client of the Go controller this project
//! replaces, against the simulator: the Go checks of
//! `tests/conformance/gophercloud/` (gophercloud pinned by its go.mod at the
//! version that controller pins) call Keystone, Nova, Neutron and Glance as
//! that controller does, against a simulator served on a loopback port.
//! Each check is a Go test; this test fails when any of them does.
//!
//! `go test` runs with the machine's Go (`GOTOOLCHAIN=local`) and a module
//! and build cache of its own, `~/.cache/server-controller/gophercloud/`
//! (`GOPHERCLOUD_CACHE` overrides it), which `.ci/deps-gophercloud.sh`
//! fills. Without `go` the test is skipped with a message, except under
//! `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use server_sim_openstack::{Flavor, Image, KeystoneUrl, OpenStackSim, OpenStackSimConfig};
use server_simcloud::{CloudConfig, SimCloud, Timing};

const USER: &str = "gophercloud";
const PASSWORD: &str = "gophercloud-password";
const PROJECT_ID: &str = "5e5e7e57-0000-4000-8000-00000000000a";
/// A project the user holds no role on.
const OTHER_PROJECT_ID: &str = "5e5e7e57-0000-4000-8000-00000000000b";
const DOMAIN_ID: &str = "default";
const IMAGE_ID: &str = "5e5e1111-0000-4000-8000-00000000000a";
const IMAGE_NAME: &str = "ubuntu-24.04";
const PUBLIC_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIItcrU8ZqgFNG/c3YuT2SSP/YQ98qGNw+mYhPTXn58nb gophercloud";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Where the Go module and build caches live (see `.ci/deps-gophercloud.sh`).
fn cache_root() -> PathBuf {
    if let Some(path) = std::env::var_os("GOPHERCLOUD_CACHE") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache/server-controller/gophercloud")
}

/// The `go` command, if it runs; `None` (with a message) outside CI when it
/// does not; under CI a missing `go` fails the test.
fn go_or_skip() -> Option<PathBuf> {
    let go = PathBuf::from(std::env::var_os("GO").unwrap_or_else(|| "go".into()));
    let found = match Command::new(&go).arg("version").env("GOTOOLCHAIN", "local").output() {
        Ok(output) if output.status.success() => Ok(go),
        Ok(output) => Err(format!("`go version` failed: {}", String::from_utf8_lossy(&output.stderr).trim())),
        Err(e) => Err(format!("no `go` to run the gophercloud checks ({e}): install Go 1.25 or newer")),
    };
    match found {
        Ok(go) => Some(go),
        Err(reason) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: {reason}");
            None
        }
        Err(reason) => panic!("{reason}"),
    }
}

/// A simulator as the Go controller's cloud would be: one region (the Go
/// controller names none, so it takes each type's first public endpoint),
/// a project the user has a role on and another without, a domain role for
/// its identity client, two tenant networks, a security group, flavors,
/// images, and lists paged two at a time on both Nova and Neutron.
fn simulator() -> OpenStackSim {
    let mut cloud = CloudConfig::reliable(17);
    cloud.mix.timing = Timing::FAST;
    let config = OpenStackSimConfig {
        page_size: 2,
        pagination_max_limit: Some(2),
        delete_delay: Duration::from_millis(200),
        decoy_region: false,
        ..OpenStackSimConfig::default()
    };
    let sim = OpenStackSim::with_config(SimCloud::new(cloud), config);
    sim.add_user(USER, PASSWORD);
    sim.add_project(PROJECT_ID, "gophercloud");
    sim.add_project(OTHER_PROJECT_ID, "unassigned");
    sim.grant(USER, PROJECT_ID);
    sim.grant_domain(USER, DOMAIN_ID);
    sim.add_network(PROJECT_ID, "network-a");
    sim.add_network(PROJECT_ID, "network-b");
    sim.add_security_group(PROJECT_ID, "securitygroup-web");
    for (id, name, vcpus, ram, disk) in [("2", "m1.small", 1, 2048, 20), ("1", "m1.tiny", 1, 512, 1)] {
        sim.add_flavor(Flavor { id: id.into(), name: name.into(), vcpus, ram, disk });
    }
    let properties = [("os_distro", "ubuntu"), ("os_version", "24.04")];
    sim.add_image(Image::public(IMAGE_ID, IMAGE_NAME).with_properties(properties));
    sim.add_image(Image::public("5e5e1111-0000-4000-8000-00000000000b", "debian-13"));
    sim
}

#[test]
fn gophercloud_conforms() -> Result<(), Box<dyn std::error::Error>> {
    let Some(go) = go_or_skip() else { return Ok(()) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let sim = simulator();
    let served = runtime.block_on(sim.serve("127.0.0.1:0".parse()?))?;
    let base = format!("http://{}", served.addr());

    let dir = std::env::temp_dir().join(format!("gophercloud-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let fixture = json!({
        "base_url": base,
        "auth_url": served.auth_url(),
        "user_id": USER,
        "password": PASSWORD,
        "project_id": PROJECT_ID,
        "other_project_id": OTHER_PROJECT_ID,
        "domain_id": DOMAIN_ID,
        "networks": {"network-a": sim.network_id("network-a"), "network-b": sim.network_id("network-b")},
        "security_group_id": sim.security_group_id("securitygroup-web"),
        "external_network": "external",
        "flavor_id": "1",
        "image_id": IMAGE_ID,
        "image_name": IMAGE_NAME,
        "public_key": PUBLIC_KEY,
    });
    std::fs::write(dir.join("fixture.json"), serde_json::to_vec_pretty(&fixture)?)?;

    let cache = cache_root();
    let started = Instant::now();
    let output = Command::new(go)
        .args(["test", "-count=1", "-v", "./..."])
        .current_dir(repository().join("tests/conformance/gophercloud"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOMODCACHE", cache.join("mod"))
        .env("GOCACHE", cache.join("build"))
        .env("CGO_ENABLED", "0")
        .env("CONFORMANCE_FIXTURE", dir.join("fixture.json"))
        .output()?;
    let elapsed = started.elapsed();
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!("gophercloud conformance run: {:.1} s", elapsed.as_secs_f64());
    served.shutdown();
    std::fs::remove_dir_all(&dir).ok();
    assert!(output.status.success(), "gophercloud disagrees with the simulator: {}", output.status);
    Ok(())
}
