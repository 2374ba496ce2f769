//! kubectl, a client this project did not write, against `demo --serve`:
//! `get servers` shows the CRD's printer columns through SimKube's
//! server-side printing, and `get events` and `describe` work.
//!
//! Needs `kubectl` on PATH. Without it the test passes with a note, except
//! under CI (`CI=true`), where a missing kubectl is a failure: `.ci/run-kubectl-deps`
//! installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The demo must settle and start serving within this long.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// `demo --serve` running in the background, killed on drop.
struct ServedDemo {
    child: Child,
    dir: PathBuf,
}

impl ServedDemo {
    fn start(servers: usize) -> Self {
        let dir = std::env::temp_dir().join(format!("server-controller-kubectl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_server-controller"))
            .args(["demo", "--servers", &servers.to_string(), "--serve", "--kubeconfig"])
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

    fn kubectl(&self, args: &[&str]) -> String {
        let output = Command::new("kubectl")
            .args(args)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .output()
            .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "kubectl {} failed ({}):\n{stdout}\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

impl Drop for ServedDemo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether kubectl can run here; panics under CI, where it must.
fn kubectl_available() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is missing under CI; .ci/run-kubectl-deps installs it (Debian package kubernetes-client)"
        );
        eprintln!("skipping: kubectl is not on PATH (install Debian's kubernetes-client to run this test)");
    }
    found
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn kubectl_lists_describes_and_shows_events() {
    if !kubectl_available() {
        return;
    }
    let demo = ServedDemo::start(5);

    let servers = demo.kubectl(&["get", "servers"]);
    let mut lines = servers.lines();
    let header = lines.next().expect("a header line");
    assert_eq!(columns(header), ["NAME", "STATUS", "AGE", "PRIVATEIP", "PUBLICIP"], "{servers}");
    let rows: Vec<Vec<&str>> = lines.map(columns).collect();
    // Five servers, one of which the demo deletes midway.
    assert_eq!(rows.len(), 4, "{servers}");
    for row in &rows {
        assert!(row[0].starts_with("server-"), "{servers}");
        assert!(matches!(row[1], "Provisioned" | "Errored"), "unexpected status in {row:?}:\n{servers}");
        // Ages are rendered by the server ("12s"), not passed through as timestamps.
        assert!(row[2].ends_with('s') || row[2].ends_with('m'), "unexpected age in {row:?}");
    }
    for status in ["Provisioned", "Errored"] {
        assert!(rows.iter().any(|row| row[1] == status), "no {status} server:\n{servers}");
    }

    let one = demo.kubectl(&["get", "server", "server-000"]);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.contains("server-000"), "{one}");

    let events = demo.kubectl(&["get", "events"]);
    assert_eq!(
        columns(events.lines().next().unwrap_or_default()),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(events.contains("ProviderCreateFailed"), "{events}");
    assert!(events.contains("server/server-001"), "{events}");

    let described = demo.kubectl(&["describe", "server", "server-000"]);
    assert!(described.lines().any(|line| columns(line) == ["Name:", "server-000"]), "{described}");
    assert!(described.contains("Provisioned"), "{described}");
}
