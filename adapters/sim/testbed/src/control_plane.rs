//! The reference Kubernetes control plane for tests, as envtest starts it:
//! etcd and kube-apiserver (built by `.ci/build-control-plane`) on loopback
//! ports picked here, in a temporary directory, with a test CA, serving and
//! admin client certificates, ServiceAccount token signing (so `kubectl
//! create token` works), `--authorization-mode=RBAC`, the ServiceAccount
//! admission plugin off and an audit log of every request. No
//! kube-controller-manager runs: no garbage collection, no namespace
//! finalization, no default ServiceAccount per namespace.
//!
//! Each process runs under a small shell watchdog that holds a pipe from this
//! process: when the [`ControlPlane`] is dropped, or the test process dies
//! however it dies, the pipe closes and the watchdog stops the process by PID
//! and removes its data.
//!
//! Where the binaries are: `$CONTROL_PLANE_BIN`, else the newest build in
//! `~/.cache/server-controller/control-plane/`. Outside CI a missing build
//! skips the test with a message naming the script; under `CI=true` it fails.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use server_simkube::{CounterSnapshot, Verb};

use crate::supervised::{Launch, Supervised};

/// kube-apiserver's and etcd's time between TERM and KILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The script that builds the binaries, named in every message about them.
pub const BUILD_SCRIPT: &str = ".ci/build-control-plane";
/// How long etcd and kube-apiserver get to turn ready.
const STARTUP: Duration = Duration::from_secs(120);

/// How many times a control plane whose process stopped while starting is
/// started again.
const START_ATTEMPTS: u32 = 3;

/// Loopback ports are picked below the kernel's ephemeral range
/// (`ip_local_port_range`, 32768 and up by default), where the outgoing
/// connections of a busy machine never land between the pick and the bind.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// Why the control plane could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("no kube-apiserver and etcd build found (looked in {looked}); run `bash {BUILD_SCRIPT}` to build them")]
    Missing { looked: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("creating the test certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    #[error("{what} failed ({status}): {stderr}")]
    Kubectl { what: String, status: String, stderr: String },
    #[error("{what} did not turn ready within {STARTUP:?}; its log is {log}:\n{tail}")]
    NotReady { what: &'static str, log: String, tail: String },
    #[error("{what} stopped while starting; its log is {log}:\n{tail}")]
    Stopped { what: &'static str, log: String, tail: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let what = what.into();
    move |source| ControlPlaneError::Io { what, source }
}

/// etcd and kube-apiserver running for a test; both stop when it is dropped.
#[derive(Debug)]
pub struct ControlPlane {
    /// The temporary directory: certificates, kubeconfigs, logs, etcd's data.
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The directory holding the binaries, and their build stamp.
    pub bin: PathBuf,
    pub version: String,
    ca_pem: String,
    apiserver: Option<Supervised>,
    etcd: Option<Supervised>,
}

/// The control plane for this test, or `None` (with a message) when its
/// binaries are not built and this is not CI. Under CI a missing or broken
/// control plane fails the test.
pub fn control_plane_or_skip() -> Option<ControlPlane> {
    let under_ci = std::env::var("CI").as_deref() == Ok("true");
    match ControlPlane::start() {
        Ok(plane) => Some(plane),
        Err(error @ ControlPlaneError::Missing { .. }) if !under_ci => {
            eprintln!("skipping: {error}");
            None
        }
        Err(error) => panic!("the reference control plane did not start: {error}"),
    }
}

/// Whether the control plane's binaries are built, for a test that starts it
/// in another process: `false` (with a message) outside CI when they are
/// not; under CI a missing build fails the test.
pub fn built_or_skip() -> bool {
    match binaries() {
        Ok(_) => true,
        Err(error) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: {error}");
            false
        }
        Err(error) => panic!("the reference control plane is not built: {error}"),
    }
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until kube-apiserver's
    /// `/readyz` answers 200 to the admin. A process that stops while
    /// starting (a port another process took between the pick and the
    /// bind) is started again on fresh ports, at most three times.
    pub fn start() -> Result<ControlPlane, ControlPlaneError> {
        let mut attempt = 1;
        loop {
            match ControlPlane::start_once() {
                Err(ControlPlaneError::Stopped { what, .. }) if attempt < START_ATTEMPTS => {
                    eprintln!("{what} stopped while starting (attempt {attempt} of {START_ATTEMPTS}); starting again");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    fn start_once() -> Result<ControlPlane, ControlPlaneError> {
        let bin = binaries()?;
        let version = std::fs::read_to_string(bin.join("stamp")).unwrap_or_default().trim().to_owned();
        let dir = unique_dir()?;
        let certs = Certificates::generate()?;
        certs.write(&dir)?;
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).map_err(io("writing the audit policy"))?;

        let etcd_port = free_port()?;
        let peer_port = loop {
            match free_port()? {
                port if port != etcd_port => break port,
                _ => continue,
            }
        };
        let api_port = loop {
            match free_port()? {
                port if port != etcd_port && port != peer_port => break port,
                _ => continue,
            }
        };
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_data = etcd_data_dir(&dir)?;
        let etcd = spawn(
            "etcd",
            &bin.join("etcd"),
            &[
                "--name=test".into(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=test={peer_url}"),
                // Tests keep nothing: no fsync, and the data on tmpfs where there is one.
                "--unsafe-no-fsync".into(),
                // The bench's 10,000 Servers of 32 KB, each written several
                // times between compactions, outgrow the 2 GiB default.
                "--quota-backend-bytes=8589934592".into(),
                "--log-level=warn".into(),
            ],
            &dir.join("etcd.log"),
            Some(&etcd_data),
        )?;
        let path = |file: &str| dir.join(file).display().to_string();
        let apiserver = spawn(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", path("apiserver-certs")),
                format!("--tls-cert-file={}", path("serving.crt")),
                format!("--tls-private-key-file={}", path("serving.key")),
                format!("--client-ca-file={}", path("ca.crt")),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", path("service-accounts.pub")),
                format!("--service-account-signing-key-file={}", path("service-accounts.key")),
                // As envtest: no controller-manager makes the token Secrets it would want.
                "--disable-admission-plugins=ServiceAccount".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--audit-log-path={}", path("audit.log")),
                // Never rotated: the counters read this one file, and a
                // maxsize of 0 is lumberjack's 100 MB (a 10,000-Server
                // bench writes more).
                "--audit-log-maxsize=1000000".into(),
                format!("--audit-policy-file={}", path("audit-policy.yaml")),
            ],
            &dir.join("kube-apiserver.log"),
            None,
        )?;
        let mut plane = ControlPlane {
            url: format!("https://127.0.0.1:{api_port}"),
            dir,
            bin,
            version,
            ca_pem: certs.ca_pem.clone(),
            apiserver: Some(apiserver),
            etcd: Some(etcd),
        };
        plane.write_kubeconfig("kubeconfig", &certs.admin_user())?;
        plane.wait_ready()?;
        Ok(plane)
    }

    /// The admin's kubeconfig (a client certificate in `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The audit log: one JSON event per request (user, verb, URI, code).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// kubectl as the admin.
    pub fn kubectl(&self) -> Command {
        self.kubectl_as(&self.kubeconfig())
    }

    /// kubectl with the given kubeconfig: the one built with kube-apiserver
    /// (same version), else the one on PATH.
    pub fn kubectl_as(&self, kubeconfig: &Path) -> Command {
        let built = self.bin.join("kubectl");
        let mut command = Command::new(if built.is_file() { built.as_os_str() } else { "kubectl".as_ref() });
        command.env("KUBECONFIG", kubeconfig).arg("--cache-dir").arg(self.dir.join("kubectl-cache"));
        command
    }

    /// Runs kubectl as the admin; panics with its output unless it succeeds.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = self.kubectl().args(args).output().unwrap_or_else(|e| panic!("kubectl does not run: {e}"));
        expect_success(&format!("kubectl {}", args.join(" ")), &output)
    }

    /// Runs kubectl as the admin with `input` (if any) on stdin; its stdout,
    /// or an error carrying its stderr.
    pub fn kubectl_checked(&self, args: &[&str], input: Option<&str>) -> Result<String, ControlPlaneError> {
        let what = format!("kubectl {}", args.join(" "));
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(what.clone()))?;
        if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
            stdin.write_all(input.as_bytes()).map_err(io(what.clone()))?;
        }
        let output = child.wait_with_output().map_err(io(what.clone()))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(ControlPlaneError::Kubectl {
                what,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).chars().take(2000).collect(),
            })
        }
    }

    /// Installs the CRDs of the kinds a Server consumes as the region chart
    /// ships them (`fixtures/unikorn-crds`), and ours of Server, and waits
    /// until every one is Established.
    pub fn install_crds(&self) -> Result<(), ControlPlaneError> {
        let mut names = Vec::new();
        for (name, yaml) in UPSTREAM_CONSUMED_CRDS {
            self.kubectl_checked(&["apply", "--server-side", "-f", "-"], Some(yaml))?;
            names.push(format!("crd/{name}"));
        }
        let ours = serde_json::to_string(&server_kube::crd::server_crd())
            .map_err(|e| ControlPlaneError::Io { what: "encoding the Server CRD".into(), source: e.into() })?;
        self.kubectl_checked(&["apply", "--server-side", "-f", "-"], Some(&ours))?;
        names.push("crd/servers.region.unikorn-cloud.org".into());
        let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        wait.extend(names.iter().map(String::as_str));
        self.kubectl_checked(&wait, None).map(drop)
    }

    /// The PIDs of kube-apiserver and etcd (children of their watchdogs), to
    /// measure them; `None` for one that is not running.
    pub fn process_ids(&self) -> (Option<u32>, Option<u32>) {
        let pid = |process: &Option<Supervised>| process.as_ref().and_then(Supervised::program_pid);
        (pid(&self.apiserver), pid(&self.etcd))
    }

    /// Runs kubectl as the admin with `input` on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("kubectl does not run: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes()).unwrap_or_else(|e| panic!("writing kubectl's input: {e}"));
        }
        child.wait_with_output().unwrap_or_else(|e| panic!("kubectl did not finish: {e}"))
    }

    /// A kubeconfig that authenticates as the ServiceAccount `namespace/name`
    /// with a token from `kubectl create token`, as a pod of it would.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=2h"]);
        let file = format!("kubeconfig-{namespace}-{name}");
        self.write_kubeconfig(&file, &format!("    token: {}\n", token.trim()))
            .unwrap_or_else(|e| panic!("writing {file}: {e}"));
        self.dir.join(file)
    }

    /// The audit events of requests `user` made that were answered `code`,
    /// as `VERB URI` lines.
    pub fn audited(&self, user: &str, code: u16) -> Vec<String> {
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete" && event["user"]["username"] == user)
            .filter(|event| event["responseStatus"]["code"].as_u64() == Some(u64::from(code)))
            .map(|event| {
                format!("{} {}", event["verb"].as_str().unwrap_or("?"), event["requestURI"].as_str().unwrap_or("?"))
            })
            .collect()
    }

    /// Every request `user` made, counted from the audit log in SimKube's
    /// terms (verb, `resource[/subresource]`, answer code), so a report reads
    /// both servers alike. Request bodies are not audited at the Metadata
    /// level: the byte counts stay zero. Rejections by API Priority and
    /// Fairness are audited (429) like any answer.
    pub fn audited_counters(&self, user: &str) -> Result<CounterSnapshot, ControlPlaneError> {
        self.audited_counters_in(user, None)
    }

    /// [`ControlPlane::audited_counters`] of the requests about objects in
    /// `namespace` only (when given): one test's operator among several
    /// sharing a control plane and a ServiceAccount, each confined to its
    /// namespace.
    pub fn audited_counters_in(
        &self,
        user: &str,
        namespace: Option<&str>,
    ) -> Result<CounterSnapshot, ControlPlaneError> {
        self.audited_counters_of(&[user], namespace)
    }

    /// [`ControlPlane::audited_counters_in`] of the requests any of `users`
    /// made, counted together: one controller running as several processes
    /// (the Go controller and its monitor).
    pub fn audited_counters_of(
        &self,
        users: &[&str],
        namespace: Option<&str>,
    ) -> Result<CounterSnapshot, ControlPlaneError> {
        let file = std::fs::File::open(self.audit_log()).map_err(io("reading the audit log"))?;
        let mut counters = CounterSnapshot::default();
        for line in std::io::BufRead::lines(std::io::BufReader::new(file)) {
            let line = line.map_err(io("reading the audit log"))?;
            let Ok(event) = serde_json::from_str::<AuditEvent>(&line) else { continue };
            if !users.contains(&event.user.username.as_str()) {
                continue;
            }
            if namespace.is_some()
                && event.object_ref.as_ref().and_then(|object| object.namespace.as_deref()) != namespace
            {
                continue;
            }
            let Some(verb) = Verb::ALL.into_iter().find(|verb| verb.as_str() == event.verb) else { continue };
            // A watch is audited when its stream starts and again when it
            // ends; one refused before it started has only the end.
            let counted = match (verb, event.stage.as_str()) {
                (Verb::Watch, "ResponseStarted") => true,
                (Verb::Watch, "ResponseComplete") => event.response_status.code >= 400,
                (_, stage) => stage == "ResponseComplete",
            };
            if !counted {
                continue;
            }
            let resource = match &event.object_ref {
                Some(object) => match &object.subresource {
                    Some(sub) => format!("{}/{sub}", object.resource),
                    None => object.resource.clone(),
                },
                None => "discovery".to_owned(),
            };
            let code = event.response_status.code;
            *counters.requests.entry((verb, resource.clone())).or_default() += 1;
            *counters.responses_by_code.entry(code).or_default() += 1;
            *counters.answers.entry((verb, resource, code)).or_default() += 1;
        }
        Ok(counters)
    }

    /// What `user` was served (answered below 400), as
    /// (`group/resource[/subresource]`, verb) from the audit log.
    pub fn used_by(&self, user: &str) -> std::collections::BTreeSet<(String, String)> {
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete" && event["user"]["username"] == user)
            .filter(|event| event["responseStatus"]["code"].as_u64().is_some_and(|code| code < 400))
            .filter_map(|event| {
                let object = &event["objectRef"];
                let mut resource = object["resource"].as_str()?.to_owned();
                if let Some(group) = object["apiGroup"].as_str().filter(|g| !g.is_empty()) {
                    resource = format!("{group}/{resource}");
                }
                if let Some(sub) = object["subresource"].as_str() {
                    resource = format!("{resource}/{sub}");
                }
                Some((resource, event["verb"].as_str()?.to_owned()))
            })
            .collect()
    }

    fn write_kubeconfig(&self, file: &str, user: &str) -> Result<(), ControlPlaneError> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n{user}contexts:\n- name: test\n  context:\n    cluster: test\n    user: user\n    namespace: default\ncurrent-context: test\n",
            url = self.url,
            ca = BASE64.encode(&self.ca_pem),
        );
        std::fs::write(self.dir.join(file), text).map_err(io(format!("writing {file}")))
    }

    fn wait_ready(&mut self) -> Result<(), ControlPlaneError> {
        let deadline = Instant::now() + STARTUP;
        loop {
            let ready = self
                .kubectl()
                .args(["get", "--raw", "/readyz"])
                .stderr(Stdio::null())
                .output()
                .is_ok_and(|output| output.status.success());
            if ready {
                return Ok(());
            }
            for (what, process) in [("etcd", &mut self.etcd), ("kube-apiserver", &mut self.apiserver)] {
                let Some(process) = process else { continue };
                let stopped = process.exited();
                if stopped || Instant::now() > deadline {
                    let log = process.log().display().to_string();
                    let tail = crate::supervised::tail(process.log(), 20);
                    return Err(if stopped {
                        ControlPlaneError::Stopped { what, log, tail }
                    } else {
                        ControlPlaneError::NotReady { what, log, tail }
                    });
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Panics with the command's output unless it succeeded; its stdout.
pub fn expect_success(what: &str, output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The fields of an audit event (audit.k8s.io/v1 `Event`) the counters read.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    stage: String,
    verb: String,
    user: AuditUser,
    object_ref: Option<AuditObject>,
    #[serde(default)]
    response_status: AuditStatus,
}

#[derive(serde::Deserialize)]
struct AuditUser {
    #[serde(default)]
    username: String,
}

#[derive(serde::Deserialize)]
struct AuditObject {
    #[serde(default)]
    resource: String,
    subresource: Option<String>,
    namespace: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct AuditStatus {
    #[serde(default)]
    code: u16,
}

/// The region chart's CRDs of the kinds a Server consumes, by CRD name.
const UPSTREAM_CONSUMED_CRDS: [(&str, &str); 6] = [
    (
        "identities.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_identities.yaml"),
    ),
    (
        "networks.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_networks.yaml"),
    ),
    (
        "openstackidentities.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_openstackidentities.yaml"),
    ),
    (
        "regions.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_regions.yaml"),
    ),
    (
        "securitygroups.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_securitygroups.yaml"),
    ),
    (
        "sshcertificateauthorities.region.unikorn-cloud.org",
        include_str!("../../../../fixtures/unikorn-crds/region.unikorn-cloud.org_sshcertificateauthorities.yaml"),
    ),
];

/// Every request to the API, answered; metadata only (no bodies: Secrets).
const AUDIT_POLICY: &str =
    "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // kube-apiserver before etcd, as a cluster is stopped.
        drop(self.apiserver.take());
        drop(self.etcd.take());
        if std::env::var_os("CONTROL_PLANE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

struct Certificates {
    ca_pem: String,
    serving: (String, String),
    admin: (String, String),
    /// The ServiceAccount token signing key, private and public.
    service_accounts: (String, String),
}

impl Certificates {
    fn generate() -> Result<Self, rcgen::Error> {
        let mut ca = CertificateParams::new(Vec::new())?;
        ca.distinguished_name.push(DnType::CommonName, "server-controller test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
        serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = serving.signed_by(&serving_key, &ca)?;

        // kube-apiserver's client-certificate authenticator: user = CN, groups = O.
        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::new())?;
        admin.distinguished_name.push(DnType::CommonName, "admin");
        admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin = admin.signed_by(&admin_key, &ca)?;

        Ok(Certificates {
            ca_pem: ca.pem(),
            serving: (serving.pem(), serving_key.serialize_pem()),
            admin: (admin.pem(), admin_key.serialize_pem()),
            service_accounts: {
                let key = KeyPair::generate()?;
                (key.serialize_pem(), key.public_key_pem())
            },
        })
    }

    fn write(&self, dir: &Path) -> Result<(), ControlPlaneError> {
        for (file, text) in [
            ("ca.crt", &self.ca_pem),
            ("serving.crt", &self.serving.0),
            ("serving.key", &self.serving.1),
            ("service-accounts.key", &self.service_accounts.0),
            ("service-accounts.pub", &self.service_accounts.1),
        ] {
            std::fs::write(dir.join(file), text).map_err(io(format!("writing {file}")))?;
        }
        Ok(())
    }

    /// The kubeconfig `user:` entry of the admin.
    fn admin_user(&self) -> String {
        format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            BASE64.encode(&self.admin.0),
            BASE64.encode(&self.admin.1)
        )
    }
}

fn binaries() -> Result<PathBuf, ControlPlaneError> {
    let complete = |dir: &Path| dir.join("kube-apiserver").is_file() && dir.join("etcd").is_file();
    if let Some(dir) = std::env::var_os("CONTROL_PLANE_BIN").map(PathBuf::from) {
        return if complete(&dir) {
            Ok(dir)
        } else {
            Err(ControlPlaneError::Missing { looked: format!("CONTROL_PLANE_BIN={}", dir.display()) })
        };
    }
    let cache =
        std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache/server-controller/control-plane");
    let newest = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|dir| complete(dir))
        .max_by_key(|dir| std::fs::metadata(dir.join("stamp")).and_then(|m| m.modified()).ok());
    newest.ok_or_else(|| ControlPlaneError::Missing { looked: cache.display().to_string() })
}

fn unique_dir() -> Result<PathBuf, ControlPlaneError> {
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("server-controller-control-plane-{}-{unique}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

/// etcd's data directory: on tmpfs (`/dev/shm`) where there is one, one
/// level deep, so the watchdog's removal of it leaves nothing there.
fn etcd_data_dir(dir: &Path) -> Result<PathBuf, ControlPlaneError> {
    let shm = Path::new("/dev/shm");
    let data = match dir.file_name().and_then(|name| name.to_str()) {
        Some(name) if shm.is_dir() => shm.join(format!("{name}-etcd")),
        _ => dir.join("etcd"),
    };
    std::fs::create_dir_all(&data).map_err(io(format!("creating {}", data.display())))?;
    Ok(data)
}

/// A loopback port in [`PORTS`] nothing listens on now, picked from a
/// sequence seeded by the process and the clock so concurrent tests differ.
fn free_port() -> Result<u16, ControlPlaneError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);
    let span = u64::from(PORTS.end - PORTS.start);
    for _ in 0..200 {
        let draw = seed.wrapping_add(NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed));
        let port = PORTS.start + u16::try_from(draw.wrapping_mul(0xD6E8_FEB8_6659_FD93) % span).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(ControlPlaneError::Io {
        what: "picking a loopback port".into(),
        source: std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("no free port in {PORTS:?} after 200 tries"),
        ),
    })
}

/// Starts `program` under the watchdog (no overlay, no restart).
fn spawn(
    name: &'static str,
    program: &Path,
    args: &[String],
    log: &Path,
    cleanup: Option<&Path>,
) -> Result<Supervised, ControlPlaneError> {
    let launch = Launch {
        name,
        program,
        args,
        env: &[],
        log,
        cleanup,
        overlay: None,
        restart: false,
        stop_timeout: STOP_TIMEOUT,
    };
    Supervised::spawn(&launch).map_err(io(format!("starting {}", program.display())))
}
