//! The operator under measurement, as its own process: the real
//! `server-controller run` binary (this executable), started against the
//! bench's API server and cloud, so its memory and CPU are measured apart
//! from SimKube's and the cloud's. Memory and CPU come from /proc; passes
//! and monitor polls from its own /metrics (the API server and the cloud
//! cannot see them).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use server_sim_testbed::go_controller::GoController;

use crate::commands::demo::world::{NAMESPACE, REGION};

/// Linux's USER_HZ: the unit of /proc/<pid>/stat CPU times (fixed at 100 in
/// the kernel's ABI on every mainstream architecture).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// How the operator is run.
#[derive(Clone, Debug)]
pub(crate) struct OperatorFlags {
    pub(crate) yield_interval: Duration,
    pub(crate) monitor_interval: Duration,
    pub(crate) cloud_timeout: Duration,
    /// A profiler and its arguments to start the operator under; empty for none.
    pub(crate) wrapper: Vec<String>,
    pub(crate) max_attempts: i32,
    /// `--concurrency`.
    pub(crate) concurrency: u32,
}

/// The running operator process.
pub(crate) struct OperatorProcess {
    child: Child,
    metrics: SocketAddr,
}

impl OperatorProcess {
    /// Starts `server-controller run` against the kubeconfig and region
    /// file, logging (JSON, its default level) to `log`.
    pub(crate) fn spawn(kubeconfig: &Path, region: &Path, flags: &OperatorFlags, log: &Path) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find this executable to run the operator")?;
        let metrics = free_loopback_port()?;
        let log = std::fs::File::create(log).with_context(|| format!("cannot write {}", log.display()))?;
        let mut command = match flags.wrapper.split_first() {
            Some((profiler, profiler_args)) => {
                let mut command = Command::new(profiler);
                command.args(profiler_args).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        // Its own process group, so a wrapper's child (the operator under a
        // profiler) is stopped with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", NAMESPACE, "--cloud", "openstack", "--leader-election=false"])
            .arg("--openstack-config")
            .arg(format!("{REGION}={}", region.display()))
            .args(["--metrics-addr", &metrics.to_string(), "--log-format", "json"])
            .args(["--yield-interval", &humantime::format_duration(flags.yield_interval).to_string()])
            .args(["--monitor-interval", &humantime::format_duration(flags.monitor_interval).to_string()])
            .args(["--cloud-timeout", &humantime::format_duration(flags.cloud_timeout).to_string()])
            .args(["--provider-create-max-attempts", &flags.max_attempts.to_string()])
            .args(["--concurrency", &flags.concurrency.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("cannot share the operator's log file")?)
            .stderr(log)
            .spawn()
            .context("cannot start the operator process")?;
        Ok(OperatorProcess { child, metrics })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the operator exited (it must run until the bench stops it).
    pub(crate) fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait().context("cannot check the operator process")? {
            None => Ok(()),
            Some(status) => anyhow::bail!("the operator exited early ({status})"),
        }
    }
}

/// Stops it, however the bench ends (how it exits is not measured).
impl Drop for OperatorProcess {
    fn drop(&mut self) {
        // It may already be gone; then there is nothing to stop. A
        // wrapper's child outlives a kill of the wrapper alone (heaptrack's
        // did, and used the machine through the next runs): the whole group
        // goes, by procps' `kill` since std sends signals to one process.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The controller under measurement: this operator's process, or the Go
/// controller's two.
pub(crate) enum ControllerProcess {
    Ours(OperatorProcess),
    Go(GoController),
}

/// Where the Go controller serves its metrics (it has no flag to move them).
const GO_METRICS: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 8080));

impl ControllerProcess {
    /// Fails if a process exited (the Go monitor is restarted, as a pod is).
    pub(crate) fn check_running(&mut self) -> anyhow::Result<()> {
        match self {
            ControllerProcess::Ours(process) => process.check_running(),
            ControllerProcess::Go(go) => Ok(go.check_running()?),
        }
    }

    /// The PIDs to measure.
    pub(crate) fn pids(&self) -> Vec<u32> {
        match self {
            ControllerProcess::Ours(process) => vec![process.pid()],
            ControllerProcess::Go(go) => {
                let (controller, monitor) = go.pids();
                controller.into_iter().chain(monitor).collect()
            }
        }
    }

    /// Peak RSS and CPU of its processes, summed.
    pub(crate) fn sample(&self) -> anyhow::Result<ProcessSample> {
        let mut total = ProcessSample::default();
        for pid in self.pids() {
            let sample = ProcessSample::read(Some(pid))?;
            total.peak_rss += sample.peak_rss;
            total.rss += sample.rss;
            total.cpu_seconds += sample.cpu_seconds;
        }
        Ok(total)
    }

    /// Restarts of a process (the Go monitor's), which take its CPU and
    /// peak RSS so far out of [`ControllerProcess::sample`].
    pub(crate) fn restarts(&self) -> usize {
        match self {
            ControllerProcess::Ours(_) => 0,
            ControllerProcess::Go(go) => go.monitor_restarts(),
        }
    }

    /// Its counters from /metrics.
    pub(crate) async fn metrics(&self) -> anyhow::Result<OperatorMetrics> {
        let addr = match self {
            ControllerProcess::Ours(process) => process.metrics,
            ControllerProcess::Go(_) => GO_METRICS,
        };
        Ok(OperatorMetrics::parse(&http_get(addr, "/metrics").await?))
    }
}

/// What the operator's /metrics says.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct OperatorMetrics {
    /// Reconcile passes, any outcome.
    pub(crate) passes: f64,
    pub(crate) monitor_polls: f64,
    /// Passes that took the provider's view from the monitor's latest list
    /// (or a create answer) and acted on it.
    pub(crate) listed_reads: f64,
    /// Passes that read the provider live: no list held, or the core asked
    /// for a live read.
    pub(crate) live_reads: f64,
}

impl OperatorMetrics {
    /// Sums the samples of the two series from Prometheus' text format.
    pub(crate) fn parse(text: &str) -> Self {
        let mut metrics = OperatorMetrics::default();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let name = series.split('{').next().unwrap_or(series);
            match name {
                // controller-runtime's, as the Go controller counts its passes.
                "server_controller_reconciles_total" | "controller_runtime_reconcile_total" => metrics.passes += value,
                "server_controller_monitor_poll_duration_seconds_count" => metrics.monitor_polls += value,
                "server_controller_provider_reads_total" if series.contains("how=\"listed\"") => {
                    metrics.listed_reads += value;
                }
                "server_controller_provider_reads_total" => metrics.live_reads += value,
                _ => {}
            }
        }
        metrics
    }
}

/// Memory and CPU of a process, from /proc.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ProcessSample {
    /// Peak resident set (VmHWM), bytes.
    pub(crate) peak_rss: u64,
    /// Resident set now (VmRSS), bytes.
    pub(crate) rss: u64,
    /// User and system CPU time so far, seconds.
    pub(crate) cpu_seconds: f64,
}

impl ProcessSample {
    /// `pid`, or `None` for this process.
    pub(crate) fn read(pid: Option<u32>) -> anyhow::Result<Self> {
        let dir = pid.map_or_else(|| "/proc/self".to_owned(), |pid| format!("/proc/{pid}"));
        let status =
            std::fs::read_to_string(format!("{dir}/status")).with_context(|| format!("cannot read {dir}/status"))?;
        let stat = std::fs::read_to_string(format!("{dir}/stat")).with_context(|| format!("cannot read {dir}/stat"))?;
        Ok(ProcessSample {
            peak_rss: status_kib(&status, "VmHWM").unwrap_or(0) * 1024,
            rss: status_kib(&status, "VmRSS").unwrap_or(0) * 1024,
            cpu_seconds: stat_cpu_ticks(&stat).unwrap_or(0) as f64 / CLOCK_TICKS_PER_SECOND,
        })
    }
}

/// Resets this process' peak RSS (Linux: `5` to clear_refs), so each size's
/// peak is its own; false where the kernel refuses.
pub(crate) fn reset_own_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A `/proc/<pid>/status` field in kB, e.g. `VmHWM:   12345 kB`.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// utime + stime from `/proc/<pid>/stat` (fields 14 and 15; the command
/// name in parentheses may hold spaces, so count from after it).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime is field 14, index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A loopback port free now, for the operator's /metrics.
fn free_loopback_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")?;
    listener.local_addr().context("cannot read the free port")
}

/// A plain HTTP/1.0 GET (the operator's endpoints need nothing more).
async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut stream = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .context("the operator's /metrics did not answer within 5 s")?
        .with_context(|| format!("cannot reach the operator's /metrics on {addr}"))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
        .await
        .context("the operator's /metrics did not finish within 10 s")??;
    let (head, body) = response.split_once("\r\n\r\n").context("the operator's /metrics answer has no body")?;
    anyhow::ensure!(head.starts_with("HTTP/1.") && head.contains(" 200 "), "the operator's /metrics answered {head:?}");
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_peak_and_current_rss_from_proc_status() {
        let status = "Name:\tserver-controller\nVmPeak:\t  900 kB\nVmHWM:\t   123456 kB\nVmRSS:\t  100000 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(123_456));
        assert_eq!(status_kib(status, "VmRSS"), Some(100_000));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn reads_cpu_ticks_past_a_command_name_with_spaces() {
        let stat = "4242 (tokio runtime) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 8 0 1 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(300));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let sample = ProcessSample::read(None).expect("/proc/self");
        assert!(sample.rss > 0 && sample.peak_rss >= sample.rss, "{sample:?}");
    }

    #[test]
    fn sums_passes_of_every_outcome_counts_polls_and_provider_reads() {
        let text = "# HELP server_controller_reconciles Reconcile passes by outcome\n\
            server_controller_reconciles_total{outcome=\"done\"} 7\n\
            server_controller_reconciles_total{outcome=\"yield\"} 3\n\
            server_controller_monitor_poll_duration_seconds_sum 1.5\n\
            server_controller_monitor_poll_duration_seconds_count 4\n\
            server_controller_reconcile_duration_seconds_count 10\n\
            server_controller_provider_reads_total{how=\"listed\"} 6\n\
            server_controller_provider_reads_total{how=\"unlisted\"} 2\n\
            server_controller_provider_reads_total{how=\"changes_the_provider\"} 1\n";
        let expected = OperatorMetrics { passes: 10.0, monitor_polls: 4.0, listed_reads: 6.0, live_reads: 3.0 };
        assert_eq!(OperatorMetrics::parse(text), expected);
    }
}
