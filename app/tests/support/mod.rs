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
