//! A `demo --serve` running in the background, for tests that drive the
//! in-process API server with real clients (kubectl, the operator's `run`).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The demo must settle and start serving within this long.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// `demo --serve` running in the background, killed on drop.
pub struct ServedDemo {
    child: Child,
    pub dir: PathBuf,
}

impl ServedDemo {
    pub fn start(servers: usize) -> Self {
        Self::start_with(servers, &[])
    }

    /// Starts with extra `demo` flags (e.g. `--create-failure-rate 0`).
    pub fn start_with(servers: usize, extra: &[&str]) -> Self {
        let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("server-controller-demo-{}-{unique}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_server-controller"))
            .args(["demo", "--servers", &servers.to_string(), "--serve"])
            .args(extra)
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server-controller binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let demo = Self { child, dir };

        // Keep draining stderr after the marker so the child never blocks on a full pipe.
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let mut seen = Vec::new();
        loop {
            match received.recv_timeout(STARTUP_TIMEOUT) {
                Ok(line) if line.contains("stays up") => return demo,
                Ok(line) => seen.push(line),
                Err(error) => panic!("the demo never said it stays up ({error}); stderr:\n{}", seen.join("\n")),
            }
        }
    }
}

impl ServedDemo {
    /// The kubeconfig that reaches the demo's API server.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
}

impl Drop for ServedDemo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("a free loopback port")
}

/// One plain HTTP/1.0 GET: the status code and the body.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// Polls `check` until it holds, or fails the test after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The script that builds helm, named in every message about it.
pub const HELM_BUILD_SCRIPT: &str = ".ci/build-helm";

/// helm: `$HELM_BIN/helm`, else the newest build in
/// `~/.cache/server-controller/helm/`; `None` (with a message naming the
/// script) when there is none and this is not CI. Under `CI=true` a missing
/// helm fails the test.
pub fn helm_or_skip() -> Option<PathBuf> {
    let found = match std::env::var_os("HELM_BIN").map(PathBuf::from) {
        Some(dir) => Some(dir.join("helm")).filter(|helm| helm.is_file()),
        None => {
            let cache =
                std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/server-controller/helm");
            std::fs::read_dir(&cache)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|entry| entry.path().join("helm"))
                .filter(|helm| helm.is_file())
                .max_by_key(|helm| std::fs::metadata(helm).and_then(|m| m.modified()).ok())
        }
    };
    if found.is_none() {
        let message = format!(
            "no helm build found (HELM_BIN or ~/.cache/server-controller/helm); run `bash {HELM_BUILD_SCRIPT}`"
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("skipping: {message}");
    }
    found
}

/// helm with its cache, configuration and data under `home`, never the user's.
pub fn helm_command(helm: &std::path::Path, home: &std::path::Path) -> Command {
    let mut command = Command::new(helm);
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG");
    command
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/server-controller")
}
