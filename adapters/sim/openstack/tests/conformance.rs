//! Real OpenStack clients against the simulator: openstacksdk and the
//! `openstack` CLI (python-openstackclient), pinned by
//! `.ci/deps-openstack-clients.sh`, run the checks of
//! `tests/conformance/openstack/` with a stock `clouds.yaml` against a
//! simulator served on a loopback port. Each check is a pytest test; this
//! test fails when any of them does.
//!
//! Without the clients' venv the test is skipped with a message naming the
//! script, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use server_sim_openstack::{Flavor, Image, KeystoneUrl, OpenStackSim, OpenStackSimConfig};
use server_simcloud::{CloudConfig, SimCloud, Timing};

const USER: &str = "conformance";
const PASSWORD: &str = "conformance-password";
const PROJECT_ID: &str = "5e5e7e57-0000-4000-8000-000000000001";
const PROJECT: &str = "conformance";
/// A project the user holds no role on.
const OTHER_PROJECT: &str = "unassigned";
const IMAGE_ID: &str = "5e5e1111-0000-4000-8000-000000000001";
const IMAGE_NAME: &str = "cirros-0.6.3";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// The clients' venv: `OPENSTACK_CLIENTS_VENV`, else where the deps script
/// installs it.
fn venv() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("OPENSTACK_CLIENTS_VENV") {
        return Ok(PathBuf::from(path));
    }
    let script = repository().join(".ci/deps-openstack-clients.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--path")
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() || path.is_empty() {
        return Err(format!("{} --path failed", script.display()));
    }
    Ok(PathBuf::from(path))
}

/// The venv, if its clients are installed; `None` (with a message) outside
/// CI when they are not; under CI a missing venv fails the test.
fn clients_or_skip() -> Option<PathBuf> {
    let found = venv().and_then(|venv| {
        let missing: Vec<&str> =
            ["bin/python", "bin/openstack", "stamp"].into_iter().filter(|file| !venv.join(file).exists()).collect();
        if missing.is_empty() {
            Ok(venv)
        } else {
            Err(format!(
                "the OpenStack clients are not installed in {} (missing {}): run `bash .ci/deps-openstack-clients.sh`",
                venv.display(),
                missing.join(", ")
            ))
        }
    });
    match found {
        Ok(venv) => Some(venv),
        Err(reason) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: {reason}");
            None
        }
        Err(reason) => panic!("{reason}"),
    }
}

/// A simulator as a small cloud would be: one project the user has a role
/// on, another without, two tenant networks, a security group, flavors,
/// images, and lists paged two at a time on both Nova and Neutron.
fn simulator() -> OpenStackSim {
    let mut cloud = CloudConfig::reliable(11);
    cloud.mix.timing = Timing::FAST;
    let config = OpenStackSimConfig {
        page_size: 2,
        pagination_max_limit: Some(2),
        delete_delay: Duration::from_millis(200),
        ..OpenStackSimConfig::default()
    };
    let sim = OpenStackSim::with_config(SimCloud::new(cloud), config);
    sim.add_user(USER, PASSWORD);
    sim.add_project(PROJECT_ID, PROJECT);
    sim.add_project("5e5e7e57-0000-4000-8000-000000000002", OTHER_PROJECT);
    sim.grant(USER, PROJECT_ID);
    sim.add_network(PROJECT_ID, "network-a");
    sim.add_network(PROJECT_ID, "network-b");
    sim.add_security_group(PROJECT_ID, "securitygroup-web");
    for (id, name, vcpus, ram, disk) in [("1", "m1.tiny", 1, 512, 1), ("2", "m1.small", 1, 2048, 20)] {
        sim.add_flavor(Flavor { id: id.into(), name: name.into(), vcpus, ram, disk });
    }
    sim.add_image(Image::public(IMAGE_ID, IMAGE_NAME).with_properties([("os_distro", "cirros")]));
    sim.add_image(Image::public("5e5e1111-0000-4000-8000-000000000002", "debian-13"));
    sim
}

#[test]
fn openstack_clients_conform() -> Result<(), Box<dyn std::error::Error>> {
    let Some(venv) = clients_or_skip() else { return Ok(()) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let sim = simulator();
    let served = runtime.block_on(sim.serve("127.0.0.1:0".parse()?))?;
    let base = format!("http://{}", served.addr());
    let auth_url = served.auth_url();

    let dir = std::env::temp_dir().join(format!("openstack-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A stock clouds.yaml: where Keystone is, who, which project, which
    // region; no endpoint overrides, no API versions.
    let clouds = format!(
        "clouds:\n  sim:\n    auth:\n      auth_url: {}\n      username: {USER}\n      password: {PASSWORD}\n      \
         project_name: {PROJECT}\n      user_domain_name: Default\n      project_domain_name: Default\n    \
         region_name: RegionOne\n",
        auth_url.trim_end_matches("/v3")
    );
    std::fs::write(dir.join("clouds.yaml"), clouds)?;
    let fixture = json!({
        "base_url": base,
        "project_id": PROJECT_ID,
        "other_project": OTHER_PROJECT,
        "user": USER,
        "password": PASSWORD,
        "networks": {"network-a": sim.network_id("network-a"), "network-b": sim.network_id("network-b")},
        "security_group": {"name": "securitygroup-web", "id": sim.security_group_id("securitygroup-web")},
        "external_network": "external",
        "flavor_id": "1",
        "image_id": IMAGE_ID,
        "image_name": IMAGE_NAME,
    });
    std::fs::write(dir.join("fixture.json"), serde_json::to_vec_pretty(&fixture)?)?;

    let checks = repository().join("tests/conformance/openstack");
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let started = Instant::now();
    let output = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", "--durations=5"])
        .arg(&checks)
        .env("PATH", path)
        .env("OS_CLIENT_CONFIG_FILE", dir.join("clouds.yaml"))
        .env("OS_CLOUD", "sim")
        .env("CONFORMANCE_FIXTURE", dir.join("fixture.json"))
        // The CLI keeps no cache between runs.
        .env("HOME", &dir)
        .current_dir(&dir)
        .output()?;
    let elapsed = started.elapsed();
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!("conformance run: {:.1} s", elapsed.as_secs_f64());
    served.shutdown();
    std::fs::remove_dir_all(&dir).ok();
    assert!(output.status.success(), "the OpenStack clients disagree with the simulator: {}", output.status);
    Ok(())
}
