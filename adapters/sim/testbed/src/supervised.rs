//! A process under a small shell watchdog, for the control plane and the Go
//! controller: the watchdog holds a pipe from this process, and on a line or
//! EOF on it (this handle dropped, or the test process dead however it died)
//! it stops the program by PID (TERM, then KILL after the stop timeout) and
//! removes its cleanup directory. Optionally the program runs in a private
//! mount namespace whose `/run` is an overlay (files a pod would have), and
//! is restarted a second after each exit, as a Deployment's pod is.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How to run one supervised program.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// The program's name as `/proc/<pid>/comm` shows it (15 characters at
    /// most are compared), to find its PID.
    pub name: &'static str,
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(&'a str, String)],
    /// Its stdout and stderr, appended; the watchdog notes each exit there.
    pub log: &'a Path,
    /// Removed once the program stopped.
    pub cleanup: Option<&'a Path>,
    /// A directory with `upper/` and `work/`: run in a private mount
    /// namespace whose `/run` is an overlay of `upper/` (needs root).
    pub overlay: Option<&'a Path>,
    /// Started again a second after each exit, until stopped.
    pub restart: bool,
    /// Between TERM and KILL when stopped.
    pub stop_timeout: Duration,
}

/// A running supervised program; stopped when dropped.
#[derive(Debug)]
pub struct Supervised {
    name: &'static str,
    log: PathBuf,
    watchdog: Child,
    stdin: Option<ChildStdin>,
    stop_timeout: Duration,
}

const WATCHDOG: &str = r#"
program=$1; log=$2; cleanup=$3; overlay=$4; restart=$5; grace=$6; shift 6
exec 3<&0
( read -r _ <&3; touch "$log.stop"; kill -TERM "$(cat "$log.pid")" 2>/dev/null
  sleep "$grace"; kill -KILL "$(cat "$log.pid")" 2>/dev/null ) &
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
  if [ "$restart" != yes ] || [ -e "$log.stop" ]; then break; fi
  echo "exited with status $status" >>"$log"
  sleep 1
done
kill "$reader" 2>/dev/null
rm -f "$log.pid" "$log.stop"
[ -n "$cleanup" ] && rm -rf "$cleanup"
exit "$status"
"#;

impl Supervised {
    /// Starts the watchdog, which starts the program.
    pub fn spawn(launch: &Launch<'_>) -> std::io::Result<Self> {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg("watchdog")
            .arg(launch.program)
            .arg(launch.log)
            .arg(launch.cleanup.map(|p| p.display().to_string()).unwrap_or_default())
            .arg(launch.overlay.map(|p| p.display().to_string()).unwrap_or_default())
            .arg(if launch.restart { "yes" } else { "no" })
            .arg(launch.stop_timeout.as_secs().max(1).to_string())
            .args(launch.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (key, value) in launch.env {
            command.env(key, value);
        }
        let mut watchdog = command.spawn()?;
        let stdin = watchdog.stdin.take();
        Ok(Supervised {
            name: launch.name,
            log: launch.log.to_owned(),
            watchdog,
            stdin,
            stop_timeout: launch.stop_timeout,
        })
    }

    /// The program's log.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The supervised program's PID now (a restarted one has a new one).
    pub fn program_pid(&self) -> Option<u32> {
        let watchdog = self.watchdog.id();
        let children = std::fs::read_to_string(format!("/proc/{watchdog}/task/{watchdog}/children")).ok()?;
        children.split_whitespace().filter_map(|pid| pid.parse::<u32>().ok()).find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| self.name.starts_with(comm.trim()) || comm.trim().starts_with(self.name))
        })
    }

    /// Whether the program stopped for good: the watchdog ends with it.
    pub fn exited(&mut self) -> bool {
        !matches!(self.watchdog.try_wait(), Ok(None))
    }

    /// How many times a restarted program exited and was started again.
    pub fn restarts(&self) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|line| line.starts_with("exited with status")).count()
    }

    /// Stops the program and waits until the watchdog is gone, so its ports
    /// and data are free for whatever starts next.
    pub fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // The watchdog may be gone already; then there is nothing to stop.
            let _ = stdin.write_all(b"\n");
        }
        let deadline = Instant::now() + self.stop_timeout + Duration::from_secs(5);
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

/// The last `lines` lines of a log, for an error's message.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
