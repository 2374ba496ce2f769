//! What the user-data tests share: the real cloud-init (Debian's `cloud-init`
//! package, run with /usr/bin/python3), a scratch directory, and
//! `render-user-data`.
//!
//! Without cloud-init the tests fail when `CI=true` and are skipped (with a
//! message) otherwise; `.ci/run-userdata-deps` installs it.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_server-controller");
pub const PYTHON: &str = "/usr/bin/python3";
pub const MANAGED_NAME: &str = "unikorn-ssh-certificate-authority";

pub const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@example";
/// A key whose comment would mean something else in YAML if pasted in by hand.
pub const TRICKY_COMMENT_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti yes: 0644 # no 'x' \"y\" &a *b {c} [d] | > ~ null";
pub const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHwf2HMM5TRXvo2SQJjsNkiDD5KqiiNjrGVv3UUh+mMT5RHxiRtOnlqvjhQtBq0VpmpCV/PwUdhOig4vkbqAcEc= ecdsa@example";

pub const RELOAD: &str = "sh -c \"systemctl reload sshd || systemctl reload ssh || service ssh reload || service sshd reload || \
                      systemctl restart sshd || systemctl restart ssh || service ssh restart || service sshd restart\"";

/// Runs cloud-init's user-data processing the way `cloud-init init` does
/// (`cloudinit/stages.py`: `Init._default_handlers` and `_do_handlers`) and
/// prints, as JSON, the cloud-config its part handlers merged (what
/// cloud-init reads back from `cloud-config.txt`) and the warnings it
/// logged. Includes are not fetched; boothooks and part-handlers, which
/// execute code, are excluded (neither touches the cloud-config). Jinja
/// templates are rendered from the instance data below.
const MERGE_HARNESS: &str = r#"
import json, logging, os, sys, tempfile
from cloudinit import handlers, helpers, user_data, util
from cloudinit.handlers.cloud_config import CloudConfigPartHandler
from cloudinit.handlers.jinja_template import JinjaTemplatePartHandler
from cloudinit.handlers.shell_script import ShellScriptPartHandler
from cloudinit.handlers.shell_script_by_frequency import ShellScriptByFreqPartHandler
from cloudinit.settings import PER_ALWAYS, PER_INSTANCE, PER_ONCE

user_data.INCLUDE_TYPES = []

class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []
    def emit(self, record):
        self.messages.append(record.getMessage())

collect = Collect()
logging.getLogger().addHandler(collect)

INSTANCE_DATA = {"v1": {"local_hostname": "vm-1", "instance_id": "i-1", "region": "region-1"}, "ds": {}}

def merged(blob):
    with tempfile.TemporaryDirectory() as tmp:
        return merged_in(tmp, blob)

def merged_in(tmp, blob):
    paths = helpers.Paths({"cloud_dir": tmp, "run_dir": tmp})
    util.write_file(paths.get_runpath("instance_data_sensitive"), json.dumps(INSTANCE_DATA))
    cloud_config = CloudConfigPartHandler(paths)
    cloud_config.cloud_fn = os.path.join(tmp, "cloud-config.txt")
    shell_script = ShellScriptPartHandler(paths)
    mods = [
        cloud_config,
        shell_script,
        ShellScriptByFreqPartHandler(PER_ALWAYS, paths=paths),
        ShellScriptByFreqPartHandler(PER_INSTANCE, paths=paths),
        ShellScriptByFreqPartHandler(PER_ONCE, paths=paths),
        JinjaTemplatePartHandler(paths, sub_handlers=[cloud_config, shell_script]),
    ]
    c_handlers = helpers.ContentHandlers()
    for mod in mods:
        c_handlers.register(mod, overwrite=False)
    msg = user_data.UserDataProcessor(paths).process(blob)
    collect.messages = []
    for mod in mods:
        handlers.call_begin(mod, None, PER_INSTANCE)
    data = {"handlers": c_handlers, "handlerdir": tmp, "data": None, "frequency": PER_INSTANCE,
            "handlercount": 0, "excluded": ["text/cloud-boothook", "text/part-handler"]}
    handlers.walk(msg, handlers.walker_callback, data=data)
    for mod in mods:
        handlers.call_end(mod, None, PER_INSTANCE)
    config = util.read_conf(cloud_config.cloud_fn) if os.path.exists(cloud_config.cloud_fn) else {}
    return {"config": json.loads(json.dumps(config, default=str)), "warnings": list(collect.messages)}

mode, path = sys.argv[1], sys.argv[2]
if mode == "merged-batch":
    results = {}
    for name in sorted(os.listdir(path)):
        try:
            results[name] = merged(open(os.path.join(path, name), "rb").read())
        except Exception as e:
            results[name] = {"error": repr(e)}
    print(json.dumps(results))
else:
    print(json.dumps(merged(open(path, "rb").read())))
"#;

pub fn cloud_init_available() -> bool {
    let python = Command::new(PYTHON)
        .args(["-c", "import cloudinit.user_data"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let cli = Command::new("cloud-init")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    python && cli
}

/// True when the test can run; panics in CI without cloud-init.
pub fn require_cloud_init(test: &str) -> bool {
    if cloud_init_available() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{test}: cloud-init is not installed (/usr/bin/python3 with cloudinit, and the cloud-init CLI); run .ci/run-userdata-deps"
        );
    }
    eprintln!("SKIPPED {test}: cloud-init is not installed; run .ci/run-userdata-deps (apt-get install cloud-init)");
    false
}

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ud-conformance-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn render(scratch: &Scratch, user_data: &[u8], key: Option<&str>) -> Output {
    let ud = scratch.write("user-data", user_data);
    let mut cmd = Command::new(BIN);
    cmd.arg("render-user-data").arg("--user-data").arg(&ud);
    if let Some(key) = key {
        cmd.arg("--ssh-ca-public-key").arg(scratch.write("ca.pub", key.as_bytes()));
    }
    cmd.output().unwrap()
}

/// The instance data the merge harness renders jinja templates with.
pub const INSTANCE_HOSTNAME: &str = "vm-1";

/// What cloud-init's part handlers made of some user data.
#[derive(Debug)]
pub struct Merged {
    /// The merged cloud-config (`{}` when no part contributed one).
    pub config: Value,
    /// cloud-init's warnings while handling the parts (a part it could not
    /// merge, a template it could not render).
    pub warnings: Vec<String>,
}

impl Merged {
    fn from_json(value: &Value) -> Result<Self, String> {
        if let Some(error) = value.get("error") {
            return Err(format!("cloud-init failed: {error}"));
        }
        let config = match &value["config"] {
            Value::Null => Value::Object(serde_json::Map::new()),
            config => config.clone(),
        };
        let warnings = value["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        Ok(Self { config, warnings })
    }
}

/// The cloud-config cloud-init merges from `user_data`.
pub fn merged(scratch: &Scratch, user_data: &[u8]) -> Merged {
    let harness = scratch.write("merge_harness.py", MERGE_HARNESS.as_bytes());
    let input = scratch.write("merge-input", user_data);
    let out = Command::new(PYTHON).arg(&harness).arg("merged").arg(&input).output().unwrap();
    assert!(out.status.success(), "cloud-init merge harness failed: {}", String::from_utf8_lossy(&out.stderr));
    Merged::from_json(&serde_json::from_slice(&out.stdout).unwrap()).unwrap()
}

/// The cloud-config cloud-init merges from each file of `dir`, by file name
/// (`Err` where cloud-init itself failed).
pub fn merged_batch(
    scratch: &Scratch,
    dir: &std::path::Path,
) -> std::collections::BTreeMap<String, Result<Merged, String>> {
    let harness = scratch.write("merge_harness.py", MERGE_HARNESS.as_bytes());
    let out = Command::new(PYTHON).arg(&harness).arg("merged-batch").arg(dir).output().unwrap();
    assert!(out.status.success(), "cloud-init merge harness failed: {}", String::from_utf8_lossy(&out.stderr));
    let results: serde_json::Map<String, Value> = serde_json::from_slice(&out.stdout).unwrap();
    results.into_iter().map(|(name, value)| (name, Merged::from_json(&value))).collect()
}

/// The user's merged cloud-config with the managed lists appended: what the
/// managed part's Merge-Type promises. A user value that is not a list
/// (invalid cloud-config) is replaced by the managed list.
pub fn appended(user: &Value, managed: &Value) -> Value {
    let mut out = user.clone();
    let (Some(out_map), Some(managed_map)) = (out.as_object_mut(), managed.as_object()) else {
        panic!("cloud-configs are mappings: {user} {managed}");
    };
    for (key, ours) in managed_map {
        let merged = match (out_map.get(key), ours) {
            (Some(Value::Array(theirs)), Value::Array(ours)) => Value::Array([theirs.clone(), ours.clone()].concat()),
            _ => ours.clone(),
        };
        out_map.insert(key.clone(), merged);
    }
    out
}
