//! The Go controller for the tests: [`server_sim_testbed::go_controller`]
//! (shared with `bench --controller go`), found or skipped as the tests
//! find the control plane.

use std::path::Path;
use std::time::Duration;

pub use server_sim_testbed::go_controller::{
    GO_SERVER_CRD, GoBuild, GoController as Processes, GoOptions, manifests, prepare_cloud,
};

/// The build `GO_CONTROLLER_BIN` names, or `None` (with a message) when it
/// is unset or incomplete outside CI. Under `CI=true` a missing build fails
/// the test, unless `.ci/run` found the module unobtainable on this machine
/// and said why in `GO_CONTROLLER_UNAVAILABLE` (then it skips with that).
pub fn go_controller_or_skip() -> Option<GoBuild> {
    let message = match GoBuild::find() {
        Ok(build) => return Some(build),
        Err(error) => error.to_string(),
    };
    if std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("skipping: {message}");
        return None;
    }
    match std::env::var("GO_CONTROLLER_UNAVAILABLE") {
        Ok(reason) if !reason.is_empty() => {
            eprintln!("skipping under CI: the Go controller cannot be built on this machine: {reason}");
            None
        }
        _ => panic!("{message}"),
    }
}

/// The two Go processes of a test, failing it with their logs on trouble.
#[derive(Debug)]
pub struct GoController(Processes);

impl GoController {
    /// Starts the controller (as `kubeconfig`'s user) and the monitor (as
    /// the ServiceAccount whose `token` is given) for the Regions of
    /// `namespace`, the controller on one core at the Go default of two
    /// passes at once and the test's cap of 3; the monitor polls every
    /// `poll`. `label` names this run's logs.
    pub fn start(
        build: &GoBuild,
        kubeconfig: &Path,
        token: &str,
        namespace: &str,
        poll: Duration,
        label: &str,
    ) -> GoController {
        let options = GoOptions {
            namespace: namespace.to_owned(),
            poll,
            max_concurrency: 2,
            max_attempts: 3,
            controller_gomaxprocs: Some(1),
            log_level: "debug",
            dir: std::env::temp_dir().join(format!("go-controller-{}-{label}", std::process::id())),
        };
        match Processes::start(build, kubeconfig, token, &options) {
            Ok(processes) => GoController(processes),
            Err(error) => panic!("the Go controller did not start: {error}"),
        }
    }

    /// Stops both (SIGTERM) and waits until they have exited.
    pub fn stop(self) {
        drop(self);
    }

    /// How many times the monitor has exited and been restarted.
    pub fn monitor_restarts(&self) -> usize {
        self.0.monitor_restarts()
    }

    /// Panics, with the tail of both logs, when either has exited.
    pub fn assert_running(&mut self) {
        if let Err(error) = self.0.check_running() {
            panic!("{error}");
        }
    }

    /// The tails of both logs, for a failure's message.
    pub fn logs(&self) -> String {
        self.0.logs()
    }

    /// Where the logs are.
    pub fn dir(&self) -> &Path {
        self.0.dir()
    }
}
