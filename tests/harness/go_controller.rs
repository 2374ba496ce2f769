//! The Go controller this operator replaces, run as a process beside the
//! test: `unikorn-server-controller` and `unikorn-region-monitor` (which
//! writes its Servers' phase, launchedAt and provisionedAt), built by
//! `.ci/build-go-controller` into the directory `GO_CONTROLLER_BIN` names.
//!
//! Both get `--namespace` naming where the Region lives and `GOMAXPROCS=1`
//! on the shared machine. The controller reads `KUBECONFIG` (the admin's);
//! the monitor knows only the in-cluster configuration
//! (`rest.InClusterConfig`: `KUBERNETES_SERVICE_HOST`/`_PORT` and the
//! ServiceAccount's token and CA under
//! `/var/run/secrets/kubernetes.io/serviceaccount/`), and the controller's
//! leader election (always on) reads its namespace from the `namespace`
//! file there and exits without it. So both run in a private mount
//! namespace (`unshare -m`) where an overlay on `/run` adds those three
//! files; nothing on the host changes. The controller's metrics bind
//! `:8080` on every interface (no flag): one runs at a time, and a port
//! already taken fails the start with that reason.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The Go controller's build: the directory holding both binaries.
#[derive(Clone, Debug)]
pub struct GoBuild {
    pub dir: PathBuf,
    /// Its stamp (module, version, Go), for the test's report.
    pub stamp: String,
}

const CONTROLLER: &str = "unikorn-server-controller";
const MONITOR: &str = "unikorn-region-monitor";

/// The build `GO_CONTROLLER_BIN` names, or `None` (with a message) when it
/// is unset or incomplete outside CI. Under `CI=true` a missing build fails
/// the test, unless `.ci/run` found the module unobtainable on this machine
/// and said why in `GO_CONTROLLER_UNAVAILABLE` (then it skips with that).
pub fn go_controller_or_skip() -> Option<GoBuild> {
    let missing = match std::env::var_os("GO_CONTROLLER_BIN").map(PathBuf::from) {
        None => "GO_CONTROLLER_BIN is not set".to_owned(),
        Some(dir) => match [CONTROLLER, MONITOR].iter().find(|b| !dir.join(b).is_file()) {
            Some(binary) => format!("{} has no {binary}", dir.display()),
            None => {
                let stamp = std::fs::read_to_string(dir.join("stamp")).unwrap_or_default().trim().to_owned();
                return Some(GoBuild { dir, stamp });
            }
        },
    };
    let message = format!(
        "{missing}: build the Go controller with `export GO_CONTROLLER_BIN=$(bash .ci/build-go-controller | tail -n 1)`"
    );
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

/// The two Go processes, each under a watchdog that stops it (TERM, then
/// KILL after 5 s) when this is dropped, however the test ends.
#[derive(Debug)]
pub struct GoController {
    controller: Supervised,
    monitor: Supervised,
    dir: PathBuf,
}

impl GoController {
    /// Starts the controller (as `kubeconfig`'s user) and the monitor (as
    /// the ServiceAccount whose `token` is given, on the same API server)
    /// for the Regions of `namespace`; the monitor polls every `poll`.
    /// `label` names this run's logs.
    pub fn start(
        build: &GoBuild,
        kubeconfig: &Path,
        token: &str,
        namespace: &str,
        poll: Duration,
        label: &str,
    ) -> GoController {
        if let Err(e) = TcpListener::bind(("0.0.0.0", 8080)) {
            panic!("port 8080 is taken ({e}): the Go controller binds its metrics there and has no flag to move them");
        }
        let dir = std::env::temp_dir().join(format!("go-controller-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (server, ca) = server_and_ca(kubeconfig);
        let host_port = server.trim_start_matches("https://").trim_end_matches('/');
        let (host, port) = host_port.rsplit_once(':').unwrap_or_else(|| panic!("no port in {server}"));
        // An overlay each: two mounts may not share an upper or work directory.
        for process in [CONTROLLER, MONITOR] {
            let secrets = dir.join(process).join("upper/secrets/kubernetes.io/serviceaccount");
            std::fs::create_dir_all(&secrets).unwrap_or_else(|e| panic!("creating {}: {e}", secrets.display()));
            std::fs::create_dir_all(dir.join(process).join("work"))
                .unwrap_or_else(|e| panic!("creating the overlay's work directory: {e}"));
            for (file, contents) in [("namespace", namespace.as_bytes()), ("token", token.as_bytes()), ("ca.crt", &ca)]
            {
                std::fs::write(secrets.join(file), contents).unwrap_or_else(|e| panic!("writing {file}: {e}"));
            }
        }
        let env = [
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("KUBERNETES_SERVICE_HOST", host.to_owned()),
            ("KUBERNETES_SERVICE_PORT", port.to_owned()),
            ("GOMAXPROCS", "1".to_owned()),
        ];
        let controller = Supervised::spawn(
            &build.dir.join(CONTROLLER),
            &[
                format!("--namespace={namespace}"),
                "--provider-create-max-attempts=3".into(),
                "--max-concurrency=2".into(),
                "--zap-log-level=debug".into(),
            ],
            &env,
            Some(&dir.join(CONTROLLER)),
            false,
            &dir.join(format!("{CONTROLLER}.log")),
        );
        // It reads through a cache it does not wait for (core's `client.New`
        // starts it in a goroutine): with GOMAXPROCS=1 that goroutine never
        // runs before the first List of Regions, which fails "the cache is
        // not started" and exits 1, every time. With two it mostly wins.
        let mut monitor_env = env.clone();
        monitor_env[3].1 = "2".to_owned();
        let monitor = Supervised::spawn(
            &build.dir.join(MONITOR),
            &[format!("--namespace={namespace}"), format!("--poll-period={}ms", poll.as_millis())],
            &monitor_env,
            Some(&dir.join(MONITOR)),
            // When the race is lost a pod restarts it; so does its watchdog.
            true,
            &dir.join(format!("{MONITOR}.log")),
        );
        GoController { controller, monitor, dir }
    }

    /// Stops both (SIGTERM) and waits until they have exited.
    pub fn stop(self) {
        drop(self);
    }

    /// How many times the monitor has exited and been restarted.
    pub fn monitor_restarts(&self) -> usize {
        let text = std::fs::read_to_string(&self.monitor.log).unwrap_or_default();
        text.lines().filter(|line| line.starts_with("exited with status")).count()
    }

    /// Panics, with the tail of both logs, when either has exited (the
    /// monitor for good).
    pub fn assert_running(&mut self) {
        for process in [&mut self.controller, &mut self.monitor] {
            if process.exited() {
                panic!("{} exited; its log ends:\n{}", process.log.display(), tail(&process.log, 40));
            }
        }
    }

    /// The tails of both logs, for a failure's message.
    pub fn logs(&self) -> String {
        format!(
            "--- {}:\n{}\n--- {}:\n{}",
            self.controller.log.display(),
            tail(&self.controller.log, 30),
            self.monitor.log.display(),
            tail(&self.monitor.log, 15)
        )
    }

    /// Where the logs are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The API server's URL and CA (PEM) in a kubeconfig the control plane wrote.
fn server_and_ca(kubeconfig: &Path) -> (String, Vec<u8>) {
    use base64::Engine as _;
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let cluster = file.clusters.first().and_then(|named| named.cluster.clone());
    let cluster = cluster.unwrap_or_else(|| panic!("{} names no cluster", kubeconfig.display()));
    let server = cluster.server.unwrap_or_default();
    let ca = cluster.certificate_authority_data.unwrap_or_default();
    let ca = base64::engine::general_purpose::STANDARD.decode(ca).unwrap_or_else(|e| panic!("the CA: {e}"));
    (server, ca)
}

impl Drop for GoController {
    /// Stops both; their logs stay for a failed test to read.
    fn drop(&mut self) {
        self.controller.stop();
        self.monitor.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[derive(Debug)]
struct Supervised {
    log: PathBuf,
    watchdog: Child,
    stdin: Option<ChildStdin>,
}

/// Runs the program (in a private mount namespace whose `/run` has the
/// ServiceAccount's files, when an overlay directory is given), again after
/// a second each time it exits when `restart` is `yes` (as a Deployment's
/// pod is), and stops it by PID on a line or EOF on stdin.
const WATCHDOG: &str = r#"
program=$1; log=$2; overlay=$3; restart=$4; shift 4
exec 3<&0
( read -r _ <&3; touch "$log.stop"; kill -TERM "$(cat "$log.pid")" 2>/dev/null
  sleep 5; kill -KILL "$(cat "$log.pid")" 2>/dev/null ) &
reader=$!
exec 3<&-
while :; do
  if [ -n "$overlay" ]; then
    unshare -m --propagation private sh -c \
      'mount -t overlay overlay -o "lowerdir=/run,upperdir=$0/upper,workdir=$0/work" /run && exec "$@"' \
      "$overlay" "$program" "$@" >>"$log" 2>&1 </dev/null &
  else
    "$program" "$@" >>"$log" 2>&1 </dev/null &
  fi
  pid=$!
  echo "$pid" >"$log.pid"
  wait "$pid"
  status=$?
  echo "exited with status $status" >>"$log"
  if [ "$restart" != yes ] || [ -e "$log.stop" ]; then break; fi
  sleep 1
done
kill "$reader" 2>/dev/null
exit "$status"
"#;

impl Supervised {
    fn spawn(
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        overlay: Option<&Path>,
        restart: bool,
        log: &Path,
    ) -> Self {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg("watchdog")
            .arg(program)
            .arg(log)
            .arg(overlay.map(|p| p.display().to_string()).unwrap_or_default())
            .arg(if restart { "yes" } else { "no" })
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut watchdog = command.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdin = watchdog.stdin.take();
        Supervised { log: log.to_owned(), watchdog, stdin }
    }

    fn exited(&mut self) -> bool {
        !matches!(self.watchdog.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.exited() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}
