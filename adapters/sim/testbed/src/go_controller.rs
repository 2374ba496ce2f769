//! The Go controller this operator replaces, run as processes beside a test
//! or the bench: `unikorn-server-controller` and `unikorn-region-monitor`
//! (which writes its Servers' phase, launchedAt and provisionedAt), built by
//! `.ci/build-go-controller` into the directory `GO_CONTROLLER_BIN` names;
//! and what it needs seeded to run (its Server CRD, a Region with its
//! service-account Secret, identities for both processes, a Keystone user
//! with a domain role).
//!
//! Both get `--namespace` naming where the Region lives. The controller
//! reads `KUBECONFIG`; the monitor knows only the in-cluster configuration
//! (`rest.InClusterConfig`: `KUBERNETES_SERVICE_HOST`/`_PORT` and the
//! ServiceAccount's token and CA under
//! `/var/run/secrets/kubernetes.io/serviceaccount/`), and the controller's
//! leader election (always on) reads its namespace from the `namespace`
//! file there and exits without it. So both run in a private mount
//! namespace (`unshare -m`, as root) where an overlay on `/run` adds those
//! three files; nothing on the host changes. The controller's metrics bind
//! `:8080` on every interface (no flag): one runs at a time, and a port
//! already taken fails the start with that reason.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use server_sim_openstack::OpenStackSim;

use crate::supervised::{Launch, Supervised, tail};

pub const CONTROLLER: &str = "unikorn-server-controller";
pub const MONITOR: &str = "unikorn-region-monitor";
/// The Go controller's Server CRD, as its chart ships it at the commit it is built from.
pub const GO_SERVER_CRD: &str = include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_servers.yaml");
/// The Region's service account in Keystone, as the region's operators give it.
pub const REGION_USER: &str = "region-admin";
pub const REGION_PASSWORD: &str = "region-admin-password";
/// The Secret holding it, in the Region's namespace.
pub const REGION_SECRET: &str = "region-openstack";
/// The ServiceAccounts the two processes run as, bound to cluster-admin (the
/// region chart's RBAC is not at hand).
pub const CONTROLLER_ACCOUNT: &str = "unikorn-server-controller";
pub const MONITOR_ACCOUNT: &str = "unikorn-region-monitor";
/// Between TERM and KILL when a Go process is stopped.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the Go controller could not be found or started.
#[derive(Debug, thiserror::Error)]
pub enum GoControllerError {
    #[error(
        "{missing}: build the Go controller with `export GO_CONTROLLER_BIN=$(bash .ci/build-go-controller | tail -n 1)`"
    )]
    Missing { missing: String },
    #[error(
        "port 8080 is taken ({0}): the Go controller binds its metrics there and has no flag to move them; stop what holds it"
    )]
    PortTaken(std::io::Error),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("the kubeconfig {path} names no server and CA to give the monitor: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("{process} exited; its log ({log}) ends:\n{tail}")]
    Exited { process: &'static str, log: String, tail: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> GoControllerError {
    let what = what.into();
    move |source| GoControllerError::Io { what, source }
}

/// The Go controller's build: the directory holding both binaries.
#[derive(Clone, Debug)]
pub struct GoBuild {
    pub dir: PathBuf,
    /// Its stamp (module, version, Go), for reports.
    pub stamp: String,
}

impl GoBuild {
    /// The build `GO_CONTROLLER_BIN` names, or why there is none.
    pub fn find() -> Result<GoBuild, GoControllerError> {
        let missing = match std::env::var_os("GO_CONTROLLER_BIN").map(PathBuf::from) {
            None => "GO_CONTROLLER_BIN is not set".to_owned(),
            Some(dir) => match [CONTROLLER, MONITOR].iter().find(|b| !dir.join(b).is_file()) {
                Some(binary) => format!("{} has no {binary}", dir.display()),
                None => {
                    let stamp = std::fs::read_to_string(dir.join("stamp")).unwrap_or_default().trim().to_owned();
                    return Ok(GoBuild { dir, stamp });
                }
            },
        };
        Err(GoControllerError::Missing { missing })
    }
}

/// How the two Go processes run.
#[derive(Clone, Debug)]
pub struct GoOptions {
    /// Where the Region lives (`--namespace` of both).
    pub namespace: String,
    /// The monitor's `--poll-period` (its default is a minute).
    pub poll: Duration,
    /// The controller's `--max-concurrency` (its default is 2).
    pub max_concurrency: u32,
    /// The controller's `--provider-create-max-attempts`.
    pub max_attempts: i32,
    /// The controller's `GOMAXPROCS` (`None`: Go's default, every core).
    pub controller_gomaxprocs: Option<u32>,
    /// `debug` or `info`.
    pub log_level: &'static str,
    /// Where the logs and overlays go (kept after a failure).
    pub dir: PathBuf,
}

/// The two Go processes, each under a watchdog that stops it when this is
/// dropped, however the test or bench ends.
#[derive(Debug)]
pub struct GoController {
    controller: Supervised,
    monitor: Supervised,
    dir: PathBuf,
}

impl GoController {
    /// Starts the controller (as `kubeconfig`'s user) and the monitor (as
    /// the ServiceAccount whose `token` is given, on the same API server).
    pub fn start(
        build: &GoBuild,
        kubeconfig: &Path,
        token: &str,
        options: &GoOptions,
    ) -> Result<GoController, GoControllerError> {
        TcpListener::bind(("0.0.0.0", 8080)).map_err(GoControllerError::PortTaken)?;
        let dir = options.dir.clone();
        // A leftover of an earlier run would be mixed into the logs.
        let _ = std::fs::remove_dir_all(&dir);
        let (server, ca) = server_and_ca(kubeconfig)?;
        let host_port = server.trim_start_matches("https://").trim_end_matches('/');
        let (host, port) = host_port.rsplit_once(':').ok_or_else(|| GoControllerError::Kubeconfig {
            path: kubeconfig.display().to_string(),
            reason: format!("no port in {server}"),
        })?;
        let namespace = options.namespace.as_str();
        // An overlay each: two mounts may not share an upper or work directory.
        for process in [CONTROLLER, MONITOR] {
            let secrets = dir.join(process).join("upper/secrets/kubernetes.io/serviceaccount");
            std::fs::create_dir_all(&secrets).map_err(io(format!("creating {}", secrets.display())))?;
            std::fs::create_dir_all(dir.join(process).join("work"))
                .map_err(io("creating the overlay's work directory"))?;
            for (file, contents) in [("namespace", namespace.as_bytes()), ("token", token.as_bytes()), ("ca.crt", &ca)]
            {
                std::fs::write(secrets.join(file), contents).map_err(io(format!("writing {file}")))?;
            }
        }
        let mut env = vec![
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("KUBERNETES_SERVICE_HOST", host.to_owned()),
            ("KUBERNETES_SERVICE_PORT", port.to_owned()),
        ];
        let mut controller_env = env.clone();
        if let Some(procs) = options.controller_gomaxprocs {
            controller_env.push(("GOMAXPROCS", procs.to_string()));
        }
        let controller_log = dir.join(format!("{CONTROLLER}.log"));
        let controller_args = [
            format!("--namespace={namespace}"),
            format!("--provider-create-max-attempts={}", options.max_attempts),
            format!("--max-concurrency={}", options.max_concurrency),
            format!("--zap-log-level={}", options.log_level),
        ];
        let controller_overlay = dir.join(CONTROLLER);
        let controller = Supervised::spawn(&Launch {
            name: CONTROLLER,
            program: &build.dir.join(CONTROLLER),
            args: &controller_args,
            env: &controller_env,
            log: &controller_log,
            cleanup: None,
            overlay: Some(&controller_overlay),
            restart: false,
            stop_timeout: STOP_TIMEOUT,
        })
        .map_err(io(format!("starting {CONTROLLER}")))?;
        // It reads through a cache it does not wait for (core's `client.New`
        // starts it in a goroutine): with GOMAXPROCS=1 that goroutine never
        // runs before the first List of Regions, which fails "the cache is
        // not started" and exits 1, every time. With two it mostly wins; when
        // the race is lost a pod restarts it, and so does its watchdog.
        env.push(("GOMAXPROCS", "2".to_owned()));
        let monitor_log = dir.join(format!("{MONITOR}.log"));
        let monitor_args =
            [format!("--namespace={namespace}"), format!("--poll-period={}ms", options.poll.as_millis())];
        let monitor_overlay = dir.join(MONITOR);
        let monitor = Supervised::spawn(&Launch {
            name: MONITOR,
            program: &build.dir.join(MONITOR),
            args: &monitor_args,
            env: &env,
            log: &monitor_log,
            cleanup: None,
            overlay: Some(&monitor_overlay),
            restart: true,
            stop_timeout: STOP_TIMEOUT,
        })
        .map_err(io(format!("starting {MONITOR}")))?;
        Ok(GoController { controller, monitor, dir })
    }

    /// Stops both (SIGTERM) and waits until they have exited.
    pub fn stop(self) {
        drop(self);
    }

    /// How many times the monitor has exited and been restarted.
    pub fn monitor_restarts(&self) -> usize {
        self.monitor.restarts()
    }

    /// The PIDs of the controller and the monitor now, to measure them.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (self.controller.program_pid(), self.monitor.program_pid())
    }

    /// An error with the tail of its log when either has exited (the
    /// monitor for good).
    pub fn check_running(&mut self) -> Result<(), GoControllerError> {
        for (process, supervised) in [(CONTROLLER, &mut self.controller), (MONITOR, &mut self.monitor)] {
            if supervised.exited() {
                return Err(GoControllerError::Exited {
                    process,
                    log: supervised.log().display().to_string(),
                    tail: tail(supervised.log(), 40),
                });
            }
        }
        Ok(())
    }

    /// The tails of both logs, for a failure's message.
    pub fn logs(&self) -> String {
        format!(
            "--- {}:\n{}\n--- {}:\n{}",
            self.controller.log().display(),
            tail(self.controller.log(), 30),
            self.monitor.log().display(),
            tail(self.monitor.log(), 15)
        )
    }

    /// Where the logs are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The controller's log.
    pub fn controller_log(&self) -> &Path {
        self.controller.log()
    }
}

impl Drop for GoController {
    /// Stops both; their logs stay for a failure to read, and go when the
    /// thread is not panicking.
    fn drop(&mut self) {
        self.controller.stop();
        self.monitor.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The API server's URL and CA (PEM) in a kubeconfig the control plane wrote.
fn server_and_ca(kubeconfig: &Path) -> Result<(String, Vec<u8>), GoControllerError> {
    use base64::Engine as _;
    let failed = |reason: String| GoControllerError::Kubeconfig { path: kubeconfig.display().to_string(), reason };
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| failed(e.to_string()))?;
    let cluster = file.clusters.first().and_then(|named| named.cluster.clone());
    let cluster = cluster.ok_or_else(|| failed("it names no cluster".into()))?;
    let server = cluster.server.unwrap_or_default();
    let ca = cluster.certificate_authority_data.unwrap_or_default();
    let ca = base64::engine::general_purpose::STANDARD.decode(ca).map_err(|e| failed(format!("its CA: {e}")))?;
    Ok((server, ca))
}

/// Makes the Keystone user of the Region's service account, with the
/// domain role the Go controller's start needs (it logs in domain-scoped).
pub fn prepare_cloud(sim: &OpenStackSim) {
    sim.add_user(REGION_USER, REGION_PASSWORD);
    sim.grant_domain(REGION_USER, "default");
}

/// What the Go controller reads in `namespace` besides the tenant: the two
/// ServiceAccounts bound to cluster-admin, the Region `region` (provider
/// openstack, Keystone at `endpoint`) and its service-account Secret, whose
/// project is `project`. One multi-document manifest, for `kubectl apply`.
pub fn manifests(namespace: &str, region: &str, endpoint: &str, project: &str) -> String {
    let mut documents = Vec::new();
    for account in [CONTROLLER_ACCOUNT, MONITOR_ACCOUNT] {
        documents.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": account, "namespace": namespace },
        }));
        documents.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("{account}-{namespace}") },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": account, "namespace": namespace }],
        }));
    }
    documents.push(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": REGION_SECRET, "namespace": namespace },
        "stringData": {
            "domain-id": "default", "user-id": REGION_USER, "password": REGION_PASSWORD, "project-id": project,
        },
    }));
    documents.push(json!({
        "apiVersion": crate::API_VERSION, "kind": "Region",
        "metadata": { "name": region, "namespace": namespace },
        "spec": {
            "provider": "openstack",
            "openstack": {
                "endpoint": endpoint,
                "serviceAccountSecret": { "namespace": namespace, "name": REGION_SECRET },
            },
        },
    }));
    documents.iter().map(|document| format!("---\n{document}\n")).collect()
}

/// The audit log's user names of the two processes when they run as the
/// ServiceAccounts of [`manifests`].
pub fn audit_users(namespace: &str) -> [String; 2] {
    [CONTROLLER_ACCOUNT, MONITOR_ACCOUNT].map(|account| format!("system:serviceaccount:{namespace}:{account}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifests_grant_both_accounts_and_name_the_regions_secret() {
        let text = manifests("ns", "region-a", "http://127.0.0.1:1/identity", "project-a");
        let documents: Vec<serde_json::Value> = text
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_json::from_str(d).expect("JSON"))
            .collect();
        let kinds: Vec<&str> = documents.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["ServiceAccount", "ClusterRoleBinding", "ServiceAccount", "ClusterRoleBinding", "Secret", "Region"]
        );
        let region = &documents[5];
        assert_eq!(region["spec"]["openstack"]["serviceAccountSecret"]["name"], REGION_SECRET);
        assert_eq!(documents[4]["stringData"]["project-id"], "project-a");
        assert_eq!(audit_users("ns")[1], "system:serviceaccount:ns:unikorn-region-monitor");
    }
}
