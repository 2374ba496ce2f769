//! What the bench measured: one row per size, the steady-state window, as
//! JSON for machines and a Markdown table for people (docs/BENCH.md's).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use server_sim_testbed::{OpenStackCounters, OpenStackOp, OpenStackRequest};
use server_simkube::{CounterSnapshot, Verb};

#[derive(Debug, Serialize)]
pub(crate) struct BenchReport {
    /// This operator, or the Go controller with its build.
    pub(crate) controller: String,
    /// SimKube, or kube-apiserver with its version.
    pub(crate) api_server: String,
    pub(crate) seed: u64,
    pub(crate) create_failure_rate: f64,
    pub(crate) user_data_bytes: usize,
    pub(crate) shared_networks: usize,
    pub(crate) shared_security_groups: usize,
    /// Identities the Servers are spread over, each with its SSH CA.
    pub(crate) identities: usize,
    pub(crate) yield_interval_seconds: f64,
    pub(crate) monitor_interval_seconds: f64,
    pub(crate) cloud_timeout_seconds: f64,
    pub(crate) sizes: Vec<SizeResult>,
    pub(crate) steady_state: Option<SteadyState>,
    pub(crate) duration_seconds: f64,
}

/// One size, from the operator's start until every Server settled (or the timeout).
#[derive(Debug, Serialize)]
pub(crate) struct SizeResult {
    pub(crate) servers: usize,
    pub(crate) settled: bool,
    pub(crate) settled_servers: usize,
    pub(crate) wall_seconds: f64,
    /// Wall time per Server: flat across sizes when growth is linear.
    pub(crate) wall_ms_per_server: f64,
    pub(crate) operator_cpu_seconds: f64,
    pub(crate) operator_cpu_ms_per_server: f64,
    pub(crate) api: ApiCounts,
    pub(crate) cloud: CloudCounts,
    pub(crate) passes: f64,
    pub(crate) passes_per_server: f64,
    /// Passes that acted on the monitor's latest list (or a create answer),
    /// per Server.
    pub(crate) listed_reads_per_server: f64,
    /// Passes that read the provider live, per Server.
    pub(crate) live_reads_per_server: f64,
    /// Peak RSS of this process: SimKube, the OpenStack simulator, SimCloud
    /// and the bench's own bookkeeping.
    pub(crate) rss_sims_bytes: u64,
    /// Whether that peak is this size's own (the kernel let it be reset);
    /// otherwise it is the peak since the bench started.
    pub(crate) rss_sims_is_this_size: bool,
    /// CPU of this process (the sims and the bench's bookkeeping) while the
    /// size settled, over its wall time: the cores the measurement itself
    /// used, of the machine's, so the sims are seen not to be the bottleneck.
    pub(crate) sims_cpu_cores: f64,
    /// Peak RSS (VmHWM) of the operator process alone.
    pub(crate) rss_operator_bytes: u64,
    /// kube-apiserver and etcd together, on the real API server.
    pub(crate) api_server_process: Option<ApiServerProcess>,
    /// The first few Servers that did not settle, and where they stand.
    pub(crate) unsettled: Vec<super::world::Unsettled>,
    /// The public Servers and their public IPs once settled.
    pub(crate) public: super::world::PublicIps,
    /// Floating-IP creates the cloud answered 503 (the first ones).
    pub(crate) floating_ip_faults: u32,
    /// After every Server was deleted: what the cloud still holds.
    pub(crate) deletion: Option<super::world::Deletion>,
    /// Two servers for one Server, booted servers recreated or deleted,
    /// `provisionedAt` changed: counted up to the deletion.
    pub(crate) invariants: super::world::Invariants,
    /// Times a controller process exited and was restarted (the Go
    /// monitor's races at start): their CPU and RSS are not in the figures.
    pub(crate) restarts: usize,
}

impl SizeResult {
    /// What must never happen: a running public Server without its public
    /// IP, a deletion that did not end, and anything the cloud still holds
    /// of a deleted Server.
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut violations = self.invariants.violations();
        if self.public.running_without_ip > 0 {
            violations.push(format!("{} running public Servers without a public IP", self.public.running_without_ip));
        }
        if let Some(deletion) = &self.deletion {
            if deletion.left > 0 {
                violations.push(format!("{} Servers not gone after deletion", deletion.left));
            }
            for (count, what) in [
                (deletion.leaked_servers, "provider servers"),
                (deletion.leaked_ports, "ports"),
                (deletion.leaked_floating_ips, "floating IPs"),
            ] {
                if count > 0 {
                    violations.push(format!("{count} {what} leaked"));
                }
            }
        }
        violations
    }
}

/// kube-apiserver and etcd, measured as the operator is.
#[derive(Debug, Serialize)]
pub(crate) struct ApiServerProcess {
    pub(crate) peak_rss_bytes: u64,
    pub(crate) cpu_ms_per_server: f64,
}

/// Counted by the API server (SimKube's counters, or kube-apiserver's audit
/// log of the operator's user), not by the operator.
#[derive(Debug, Serialize)]
pub(crate) struct ApiCounts {
    pub(crate) requests: u64,
    pub(crate) requests_per_server: f64,
    /// Creates, updates, patches and deletes.
    pub(crate) writes_per_server: f64,
    pub(crate) status_patches_per_server: f64,
    pub(crate) network_patches_per_server: f64,
    /// Answers 409 Conflict.
    pub(crate) conflicts: u64,
    /// Answers 429 Too Many Requests (API Priority and Fairness on the real
    /// API server).
    pub(crate) throttled: u64,
    /// Those answers, by the verb and resource of the losing request: which
    /// writes race.
    pub(crate) conflicts_by_verb_and_resource: BTreeMap<String, u64>,
    /// Request bodies received (zero on the real API server: its audit log
    /// at the Metadata level does not carry them).
    pub(crate) bytes_written: u64,
    pub(crate) bytes_written_per_server: f64,
    pub(crate) by_verb_and_resource: BTreeMap<String, u64>,
    /// Writes the API server found changed nothing (SimKube only: the audit
    /// log does not say), by verb and resource: requests the operator could
    /// have left out.
    pub(crate) no_op_writes: u64,
    pub(crate) no_op_writes_by_verb_and_resource: BTreeMap<String, u64>,
    /// Answers by HTTP status code.
    pub(crate) by_code: BTreeMap<u16, u64>,
}

/// Counted by the OpenStack simulator (the cloud's HTTP API).
#[derive(Debug, Serialize)]
pub(crate) struct CloudCounts {
    pub(crate) requests: u64,
    pub(crate) requests_per_server: f64,
    /// Nova `GET /servers/{id}`.
    pub(crate) gets_per_server: f64,
    /// Nova server lists (pages included).
    pub(crate) server_lists: u64,
    /// Every Nova request (create, get, list page, delete, action,
    /// metadata), per Server: the cloud calls a Server costs, amortized
    /// lists included.
    pub(crate) nova_requests_per_server: f64,
    /// Every request the simulator answered (Keystone, Nova, Neutron and
    /// Glance, version documents and flavors included), from its log: the
    /// measure that counts both controllers alike.
    pub(crate) all_requests: u64,
    pub(crate) all_requests_per_server: f64,
    /// `POST /v3/auth/tokens`: Keystone logins.
    pub(crate) keystone_logins: u64,
    pub(crate) keystone_logins_per_server: f64,
    /// Every compute request of the log (flavors, keypairs and versions too).
    pub(crate) all_nova_requests_per_server: f64,
    pub(crate) counters: OpenStackCounters,
}

/// A converged world left alone: what the operator still does.
#[derive(Debug, Serialize)]
pub(crate) struct SteadyState {
    pub(crate) servers: usize,
    /// Whether every Server had settled before the window.
    pub(crate) converged: bool,
    pub(crate) window_seconds: f64,
    pub(crate) api_writes: u64,
    pub(crate) api_requests: u64,
    pub(crate) passes: f64,
    /// Passes that read the provider live.
    pub(crate) live_reads: f64,
    pub(crate) monitor_polls: f64,
    pub(crate) cloud_server_lists: u64,
    pub(crate) cloud_requests: u64,
    /// One (region, identity) in the bench's world: the target is 1.
    pub(crate) cloud_server_lists_per_poll: f64,
    pub(crate) rss_operator_bytes: u64,
}

/// Writes: every verb that changes the store.
pub(crate) fn writes(counters: &CounterSnapshot) -> u64 {
    [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete, Verb::DeleteCollection]
        .into_iter()
        .map(|verb| counters.total_for_verb(verb))
        .sum()
}

/// Requests the cloud answered or refused (tokens included).
pub(crate) fn cloud_requests(c: &OpenStackCounters) -> u64 {
    c.token_requests
        + c.server_creates
        + c.server_lists
        + c.server_gets
        + c.server_deletes
        + c.server_actions
        + c.server_metadata_updates
        + c.port_lists
        + c.port_creates
        + c.port_updates
        + c.port_deletes
        + c.floating_ip_lists
        + c.floating_ip_creates
        + c.floating_ip_deletes
        + c.network_lists
        + c.security_group_lists
}

/// Nova requests of every kind.
pub(crate) fn nova_requests(c: &OpenStackCounters) -> u64 {
    c.server_creates + c.server_lists + c.server_gets + c.server_deletes + c.server_actions + c.server_metadata_updates
}

pub(crate) fn per(count: f64, servers: usize) -> f64 {
    count / servers.max(1) as f64
}

/// Counts by `"<verb> <resource>"`, as the JSON report names them.
fn labelled(counts: &BTreeMap<(Verb, String), u64>) -> BTreeMap<String, u64> {
    counts.iter().map(|((verb, resource), count)| (format!("{verb} {resource}"), *count)).collect()
}

impl ApiCounts {
    pub(crate) fn from_counters(counters: &CounterSnapshot, servers: usize) -> Self {
        let requests = counters.total();
        let status = counters.count(Verb::Patch, "servers/status") + counters.count(Verb::Update, "servers/status");
        let networks = counters.count(Verb::Patch, "networks") + counters.count(Verb::Update, "networks");
        let bytes_written = counters.total_body_bytes();
        ApiCounts {
            requests,
            requests_per_server: per(requests as f64, servers),
            writes_per_server: per(writes(counters) as f64, servers),
            status_patches_per_server: per(status as f64, servers),
            network_patches_per_server: per(networks as f64, servers),
            conflicts: counters.responses_by_code.get(&409).copied().unwrap_or(0),
            throttled: counters.responses_by_code.get(&429).copied().unwrap_or(0),
            conflicts_by_verb_and_resource: counters
                .answers
                .iter()
                .filter(|((_, _, code), _)| *code == 409)
                .map(|((verb, resource, _), count)| (format!("{verb} {resource}"), *count))
                .collect(),
            bytes_written,
            bytes_written_per_server: per(bytes_written as f64, servers),
            by_verb_and_resource: labelled(&counters.requests),
            no_op_writes: counters.no_op_writes.values().sum(),
            no_op_writes_by_verb_and_resource: labelled(&counters.no_op_writes),
            by_code: counters.responses_by_code.clone(),
        }
    }
}

impl CloudCounts {
    pub(crate) fn from_counters(counters: OpenStackCounters, log: &[OpenStackRequest], servers: usize) -> Self {
        let requests = cloud_requests(&counters);
        let all_requests = log.len() as u64;
        let keystone_logins = log.iter().filter(|request| request.op == OpenStackOp::Token).count() as u64;
        let nova = log.iter().filter(|request| request.op.is_compute()).count();
        CloudCounts {
            all_requests,
            all_requests_per_server: per(all_requests as f64, servers),
            keystone_logins,
            keystone_logins_per_server: per(keystone_logins as f64, servers),
            all_nova_requests_per_server: per(nova as f64, servers),
            requests,
            requests_per_server: per(requests as f64, servers),
            gets_per_server: per(counters.server_gets as f64, servers),
            server_lists: counters.server_lists,
            nova_requests_per_server: per(nova_requests(&counters) as f64, servers),
            counters,
        }
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1_000_000.0)
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}\n", self.controller)?;
        writeln!(
            f,
            "bench on {}: the demo's fate mix (create failure rate {}), {} KB of user data per Server, {} Networks and {} SecurityGroups shared, {} Identities; yield {}s, monitor {}s, cloud timeout {}s\n",
            self.api_server,
            self.create_failure_rate,
            self.user_data_bytes as f64 / 1024.0,
            self.shared_networks,
            self.shared_security_groups,
            self.identities,
            self.yield_interval_seconds,
            self.monitor_interval_seconds,
            self.cloud_timeout_seconds,
        )?;
        writeln!(
            f,
            "| N Servers | wall | settled | wall / Server | operator CPU / Server | API requests / Server | status patches / Server | Network patches / Server | cloud GETs / Server | Nova calls / Server | cloud requests / Server | live provider reads / Server | conflicts | 429s | bytes written / Server | peak RSS bench process | peak RSS operator | CPU bench process | kube-apiserver + etcd: peak RSS, CPU / Server |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
        for s in &self.sizes {
            let settled =
                if s.settled { "yes".to_owned() } else { format!("**no** ({}/{})", s.settled_servers, s.servers) };
            writeln!(
                f,
                "| {} | {:.0} s | {} | {:.1} ms | {:.1} ms | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.2} cores | {} |",
                s.servers,
                s.wall_seconds,
                settled,
                s.wall_ms_per_server,
                s.operator_cpu_ms_per_server,
                s.api.requests_per_server,
                s.api.status_patches_per_server,
                s.api.network_patches_per_server,
                s.cloud.gets_per_server,
                s.cloud.nova_requests_per_server,
                s.cloud.requests_per_server,
                s.live_reads_per_server,
                s.api.conflicts,
                s.api.throttled,
                match s.api_server_process {
                    // The audit log does not carry request bodies.
                    Some(_) => "n/a".to_owned(),
                    None => format!("{:.1} KB", s.api.bytes_written_per_server / 1000.0),
                },
                megabytes(s.rss_sims_bytes),
                megabytes(s.rss_operator_bytes),
                s.sims_cpu_cores,
                match &s.api_server_process {
                    Some(p) => format!("{}, {:.1} ms", megabytes(p.peak_rss_bytes), p.cpu_ms_per_server),
                    None => "in the bench process".to_owned(),
                },
            )?;
        }
        writeln!(
            f,
            "\n| N Servers | public | running public with / without IP | floating-IP 503s | deleted in | deletion: API requests / Server | deletion: consumed lists / Server | deletion: operator CPU / Server | left | leaked servers / ports / floating IPs | violations |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|---|---|")?;
        for s in &self.sizes {
            let (deleted, costs, left, leaks) = match &s.deletion {
                Some(d) => (
                    format!("{:.0} s", d.seconds),
                    format!(
                        "{:.1} | {:.2} | {:.1} ms",
                        d.api_requests_per_server, d.consumed_lists_per_server, d.operator_cpu_ms_per_server
                    ),
                    d.left.to_string(),
                    format!("{} / {} / {}", d.leaked_servers, d.leaked_ports, d.leaked_floating_ips),
                ),
                None => ("not deleted".into(), "- | - | -".into(), "-".into(), "-".into()),
            };
            let violations = s.violations();
            writeln!(
                f,
                "| {} | {} | {} / {} | {} | {} | {} | {} | {} | {} |",
                s.servers,
                s.public.servers,
                s.public.running_with_ip,
                s.public.running_without_ip,
                s.floating_ip_faults,
                deleted,
                costs,
                left,
                leaks,
                if violations.is_empty() { "none".into() } else { format!("**{}**", violations.join("; ")) },
            )?;
        }
        writeln!(f, "\nside by side (docs/BENCH.md):\n")?;
        writeln!(f, "{}", SideBySide::HEADER)?;
        for s in &self.sizes {
            writeln!(f, "{}", SideBySide { controller: &self.controller, size: s })?;
        }
        for s in self.sizes.iter().filter(|s| !s.unsettled.is_empty()) {
            writeln!(f, "\nnot settled at {} Servers (first {}):", s.servers, s.unsettled.len())?;
            for u in &s.unsettled {
                writeln!(f, "- {}: {}; {}", u.name, u.fate, u.outcome)?;
            }
        }
        match &self.steady_state {
            Some(s) => writeln!(
                f,
                "\nsteady state, {} Servers{} over {:.0} s: {} API writes, {} API requests, {} passes ({} live provider reads), {} monitor polls, {} cloud server lists ({:.2} per poll over {} region and identity pairs), {} cloud requests; operator peak RSS {}",
                s.servers,
                if s.converged { ", converged," } else { " (NOT all settled)" },
                s.window_seconds,
                s.api_writes,
                s.api_requests,
                s.passes,
                s.live_reads,
                s.monitor_polls,
                s.cloud_server_lists,
                s.cloud_server_lists_per_poll,
                self.identities,
                s.cloud_requests,
                megabytes(s.rss_operator_bytes),
            )?,
            None => writeln!(f, "\nsteady state: not measured (no size matched --steady-servers)")?,
        }
        writeln!(f, "bench took {:.0} s", self.duration_seconds)
    }
}

/// One row of docs/BENCH.md's side-by-side table: the columns.
pub(crate) struct SideBySide<'a> {
    pub(crate) controller: &'a str,
    pub(crate) size: &'a SizeResult,
}

impl SideBySide<'_> {
    pub(crate) const HEADER: &'static str = "| controller | N | settled | settle time | API requests / Server | writes / Server | 409s | cloud calls / Server | Nova calls / Server | Keystone logins / Server | RSS peak | CPU / Server | creates while one lived | booted recreated (after an unread boot) | booted deleted | provisionedAt changed | leaked servers / ports / FIPs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
}

impl fmt::Display for SideBySide<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.size;
        let settled = if s.settled { "all".to_owned() } else { format!("{}/{}", s.settled_servers, s.servers) };
        let leaks = s.deletion.as_ref().map_or_else(
            || "not deleted".to_owned(),
            |d| format!("{} / {} / {}", d.leaked_servers, d.leaked_ports, d.leaked_floating_ips),
        );
        let writes = s.api.writes_per_server;
        let i = &s.invariants;
        write!(
            f,
            "| {} | {} | {} | {:.0} s | {:.1} | {:.1} | {} | {:.1} | {:.2} | {:.2} | {} | {:.1} ms | {} | {} ({}) | {} | {} | {} |",
            self.controller,
            s.servers,
            settled,
            s.wall_seconds,
            s.api.requests_per_server,
            writes,
            s.api.conflicts,
            s.cloud.all_requests_per_server,
            s.cloud.all_nova_requests_per_server,
            s.cloud.keystone_logins_per_server,
            megabytes(s.rss_operator_bytes),
            s.operator_cpu_ms_per_server,
            i.creates_while_one_lived,
            i.booted_servers_recreated,
            i.recreated_after_unread_boots,
            i.booted_servers_deleted_to_retry,
            i.provisioned_at_changed,
            leaks,
        )
    }
}
