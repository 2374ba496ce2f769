//! Conformance of `render-user-data` with the real consumer, cloud-init
//! (Debian's `cloud-init` package): its MIME processor
//! (`cloudinit.user_data.UserDataProcessor`, run with /usr/bin/python3) must
//! see every part with its cloud-init type and content, and
//! `cloud-init schema --config-file` must accept the managed part.
//!
//! Without cloud-init the tests fail when `CI=true` and are skipped (with a
//! message) otherwise; `.ci/run-userdata-deps` installs it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cloud_init;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cloud_init::{
    BIN, ECDSA, ED25519, MANAGED_NAME, PYTHON, RELOAD, Scratch, TRICKY_COMMENT_KEY, render, require_cloud_init,
};
use serde_json::Value;

/// Runs cloud-init's MIME processor over a file and prints, as JSON, each
/// part it hands to the handlers: type, filename, payload (base64) and, for
/// cloud-config, the YAML as cloud-init loads it. In `raw` mode include and
/// archive parts are kept as parts (not fetched or exploded) so that their
/// type shows.
const HARNESS: &str = r#"
import atexit, base64, json, os, shutil, sys, tempfile
from cloudinit import helpers, user_data, util

mode, path = sys.argv[1], sys.argv[2]
if mode in ("raw", "batch"):
    user_data.INCLUDE_TYPES = []
    user_data.ARCHIVE_TYPES = []
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
paths = helpers.Paths({"cloud_dir": tmp, "run_dir": tmp})

def parts_of(blob):
    msg = user_data.UserDataProcessor(paths).process(blob)
    out = []
    for part in msg.walk():
        if part.get_content_maintype() == "multipart":
            continue
        payload = util.fully_decoded_payload(part)
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "surrogateescape")
        entry = {
            "type": part.get_content_type(),
            "filename": part.get_filename(),
            "payload": base64.b64encode(payload or b"").decode(),
        }
        if entry["type"] == "text/cloud-config" and mode != "batch":
            entry["yaml"] = util.load_yaml(payload)
        out.append(entry)
    return out

if mode == "batch":
    results = {}
    for name in sorted(os.listdir(path)):
        try:
            results[name] = {"parts": parts_of(open(os.path.join(path, name), "rb").read())}
        except Exception as e:
            results[name] = {"error": repr(e)}
    print(json.dumps(results))
else:
    print(json.dumps(parts_of(open(path, "rb").read())))
"#;

#[derive(Debug)]
struct Part {
    content_type: String,
    filename: Option<String>,
    payload: Vec<u8>,
    yaml: Value,
}

fn cloud_init_parts(scratch: &Scratch, mode: &str, rendered: &[u8]) -> Vec<Part> {
    let harness = scratch.write("harness.py", HARNESS.as_bytes());
    let input = scratch.write("rendered", rendered);
    let out = Command::new(PYTHON).arg(&harness).arg(mode).arg(&input).output().unwrap();
    assert!(out.status.success(), "cloud-init harness failed: {}", String::from_utf8_lossy(&out.stderr));
    let parts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    parts
        .into_iter()
        .map(|p| Part {
            content_type: p["type"].as_str().unwrap().to_owned(),
            filename: p["filename"].as_str().map(str::to_owned),
            payload: STANDARD.decode(p["payload"].as_str().unwrap()).unwrap(),
            yaml: p.get("yaml").cloned().unwrap_or(Value::Null),
        })
        .collect()
}

fn assert_schema_valid(scratch: &Scratch, cloud_config: &[u8]) {
    // The same key gives the same document: ask cloud-init once per document.
    static VALIDATED: Mutex<BTreeSet<Vec<u8>>> = Mutex::new(BTreeSet::new());
    if VALIDATED.lock().unwrap().contains(cloud_config) {
        return;
    }
    let path = scratch.write("managed.yaml", cloud_config);
    let out = Command::new("cloud-init").args(["schema", "--config-file"]).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("Valid cloud-config"),
        "cloud-init schema refused the managed part:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    VALIDATED.lock().unwrap().insert(cloud_config.to_vec());
}

/// The managed part as cloud-init sees it: valid cloud-config whose files
/// hold the exact key.
fn assert_managed(scratch: &Scratch, part: &Part, key: &str, named: bool) {
    assert_eq!(part.content_type, "text/cloud-config");
    if named {
        assert_eq!(part.filename.as_deref(), Some(MANAGED_NAME));
    }
    let files = part.yaml["write_files"].as_array().expect("write_files");
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["path"], "/etc/ssh/trusted-user-ca-keys.pub");
    assert_eq!(files[0]["content"], format!("{}\n", key.trim()));
    assert_eq!(files[1]["path"], "/etc/ssh/sshd_config.d/90-unikorn-trusted-user-ca.conf");
    assert_eq!(files[1]["content"], "TrustedUserCAKeys /etc/ssh/trusted-user-ca-keys.pub\n");
    for file in files {
        assert_eq!(file["owner"], "root:root");
        // A string, not the octal integer 420 YAML 1.1 would make of 0644.
        assert_eq!(file["permissions"], "0644");
    }
    assert_eq!(part.yaml["runcmd"], serde_json::json!([RELOAD]));
    assert_schema_valid(scratch, &part.payload);
}

/// Renders, runs cloud-init, and checks the user's parts then (with a key)
/// the managed part.
fn check(name: &str, user_data: &[u8], key: Option<&str>, mode: &str, expected: &[(&str, &[u8])]) {
    let scratch = Scratch::new(name);
    let out = render(&scratch, user_data, key);
    assert!(out.status.success(), "{name}: render failed: {}", String::from_utf8_lossy(&out.stderr));
    if key.is_none() {
        assert_eq!(out.stdout, user_data, "{name}: without a CA the user data must pass through unchanged");
    }
    let parts = cloud_init_parts(&scratch, mode, &out.stdout);
    let user_parts = if key.is_some() { parts.len().saturating_sub(1) } else { parts.len() };
    let seen: Vec<(&str, String)> =
        parts.iter().map(|p| (p.content_type.as_str(), String::from_utf8_lossy(&p.payload).into_owned())).collect();
    assert_eq!(user_parts, expected.len(), "{name}: cloud-init saw {seen:#?}");
    for (i, (part, (content_type, payload))) in parts.iter().zip(expected).enumerate() {
        assert_eq!(part.content_type, *content_type, "{name}: part {i}");
        assert_eq!(part.payload, *payload, "{name}: part {i} content");
        assert_ne!(part.filename.as_deref(), Some(MANAGED_NAME), "{name}: part {i}");
    }
    if let Some(key) = key {
        let managed = parts.last().expect("managed part");
        assert_managed(&scratch, managed, key, !expected.is_empty());
    }
}

/// Renders and expects a refusal with this reason on stderr.
fn check_refused(name: &str, user_data: &[u8], key: Option<&str>, reason: &str) {
    let scratch = Scratch::new(name);
    let out = render(&scratch, user_data, key);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{name}: expected a refusal");
    assert!(out.stdout.is_empty(), "{name}: nothing on stdout when refused");
    assert!(stderr.contains(&format!("reason: {reason}")), "{name}: stderr was {stderr}");
    assert!(!stderr.contains("AAAAC3NzaC1lZDI1NTE5"), "{name}: the error must not print the key");
    assert!(!stderr.contains("###") && stderr.len() < 1200, "{name}: the error must be short and quote no data");
}

/// Every single payload type, with and without a CA.
#[test]
fn every_payload_type_arrives_with_its_type() {
    if !require_cloud_init("every_payload_type_arrives_with_its_type") {
        return;
    }
    let cases: &[(&str, &[u8], &str)] = &[
        ("cloud-config", b"#cloud-config\npackages: [htop]\n", "text/cloud-config"),
        ("shellscript", b"#!/bin/sh\necho hello\n", "text/x-shellscript"),
        ("boothook", b"#cloud-boothook\n#!/bin/sh\necho boot\n", "text/cloud-boothook"),
        ("part-handler", b"#part-handler\ndef list_types():\n    return []\n", "text/part-handler"),
        ("include", b"#include\n# no URLs: nothing to fetch\n", "text/x-include-url"),
        ("include-once", b"#include-once\n# no URLs\n", "text/x-include-once-url"),
        (
            "archive",
            b"#cloud-config-archive\n- type: text/cloud-config\n  content: '#cloud-config'\n",
            "text/cloud-config-archive",
        ),
        (
            "jsonp",
            b"#cloud-config-jsonp\n[{\"op\": \"add\", \"path\": \"/a\", \"value\": 1}]\n",
            "text/cloud-config-jsonp",
        ),
        ("jinja", b"## template: jinja\n#cloud-config\nhostname: {{ v1.local_hostname }}\n", "text/jinja2"),
        ("case-and-whitespace", b"\n  #Cloud-Config\nx: 1\n", "text/cloud-config"),
        ("invalid-utf8-after-sentinel", b"#!/bin/sh\necho \xff\xfe\n", "text/x-shellscript"),
    ];
    for (name, data, content_type) in cases {
        check(&format!("{name}-no-ca"), data, None, "raw", &[(content_type, data)]);
        check(&format!("{name}-ca"), data, Some(ED25519), "raw", &[(content_type, data)]);
    }
}

const MULTIPART_BODY: &str = "\npreamble is ignored\n--XYZ\nContent-Type: text/x-shellscript\nContent-Disposition: attachment; filename=\"a.sh\"\n\n#!/bin/sh\necho a\n\n--XYZ\n\n#cloud-config\nruncmd: [ls]\n--XYZ\nContent-Type: text/x-shellscript-per-boot\n\n#!/bin/sh\necho every boot\n--XYZ--\nepilogue\n";

#[test]
fn multipart_in_both_header_orders() {
    if !require_cloud_init("multipart_in_both_header_orders") {
        return;
    }
    let expected: &[(&str, &[u8])] = &[
        ("text/x-shellscript", b"#!/bin/sh\necho a\n"),
        ("text/cloud-config", b"#cloud-config\nruncmd: [ls]"),
        ("text/x-shellscript-per-boot", b"#!/bin/sh\necho every boot"),
    ];
    for (name, headers) in [
        ("mime-version-first", "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n"),
        ("content-type-first", "Content-Type: multipart/mixed; boundary=XYZ\nMIME-Version: 1.0\nSubject: x\n"),
        ("folded-lower-case", "mime-version: 1.0\ncontent-type: Multipart/Mixed;\n\tboundary=\"XYZ\"\n"),
    ] {
        let data = format!("{headers}{MULTIPART_BODY}");
        check(&format!("{name}-no-ca"), data.as_bytes(), None, "raw", expected);
        check(&format!("{name}-ca"), data.as_bytes(), Some(ED25519), "raw", expected);
    }
}

#[test]
fn crlf_line_endings() {
    if !require_cloud_init("crlf_line_endings") {
        return;
    }
    let data = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n{MULTIPART_BODY}")
        .replace('\n', "\r\n");
    let expected: &[(&str, &[u8])] = &[
        ("text/x-shellscript", b"#!/bin/sh\r\necho a\r\n"),
        ("text/cloud-config", b"#cloud-config\r\nruncmd: [ls]"),
        ("text/x-shellscript-per-boot", b"#!/bin/sh\r\necho every boot"),
    ];
    check("crlf-multipart", data.as_bytes(), Some(ED25519), "raw", expected);
    let script = b"#!/bin/sh\r\necho crlf\r\n";
    check("crlf-script", script, Some(ED25519), "raw", &[("text/x-shellscript", script)]);
    let script = b"#!/bin/sh\r\necho lone cr\r";
    check("cr-script", script, Some(ED25519), "raw", &[("text/x-shellscript", script)]);
    let config = b"#cloud-config\r\npackages: [htop]\r\n";
    check("crlf-cloud-config", config, Some(ED25519), "raw", &[("text/cloud-config", config)]);
}

#[test]
fn empty_user_data() {
    if !require_cloud_init("empty_user_data") {
        return;
    }
    let scratch = Scratch::new("empty-no-ca");
    let out = render(&scratch, b"", None);
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "no user data and no CA: nothing to send");
    // With a CA: the managed cloud-config alone, typed by its first line.
    // The last key's comment would make cloud-init read a bare managed
    // document as MIME (found by fuzzing).
    let mime_comment = format!("{ED25519} MIME-Version: 1.0 jos\u{e9}");
    for key in [ED25519, ECDSA, TRICKY_COMMENT_KEY, &format!("{ED25519} jos\u{e9}"), &mime_comment] {
        check("empty-ca", b"", Some(key), "raw", &[]);
    }
    check("padded-key", b"", Some(&format!("\n  {ED25519}  \n")), "raw", &[]);
}

#[test]
fn large_and_non_ascii_scripts() {
    if !require_cloud_init("large_and_non_ascii_scripts") {
        return;
    }
    let mut script = b"#!/bin/sh\n".to_vec();
    while script.len() < 46 * 1024 {
        script.extend_from_slice(b"echo 'one line of a 46 kibibyte shell script, padded out'\n");
    }
    check("46k-script", &script, Some(ED25519), "raw", &[("text/x-shellscript", &script)]);
    let utf8 = "#!/bin/sh\necho 'h\u{e9}llo \u{20ac} \u{1f600}'\n".as_bytes();
    check("utf8-script", utf8, Some(ED25519), "raw", &[("text/x-shellscript", utf8)]);
    // A script that mentions MIME-Version is a MIME message to cloud-init.
    let sneaky = b"#!/bin/sh\necho 'MIME-Version: 1.0'\n";
    check("mime-mention", sneaky, Some(ED25519), "raw", &[("text/x-shellscript", sneaky)]);
    // A MIME message that ends inside its header block with a `From ` line,
    // which Python moves to the body (found by fuzzing).
    let header_only = b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\nFrom x\n";
    check("header-only", header_only, Some(ED25519), "raw", &[("text/x-shellscript", b"From x\n")]);
    // A script containing our own boundary.
    let boundary = b"#!/bin/sh\necho '--==unikorn-user-data-0=='\n";
    check("boundary-in-script", boundary, Some(ED25519), "raw", &[("text/x-shellscript", boundary)]);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new(PYTHON)
        .args(["-c", "import gzip, sys; sys.stdout.buffer.write(gzip.compress(sys.stdin.buffer.read()))"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn gzip_with_and_without_ca() {
    if !require_cloud_init("gzip_with_and_without_ca") {
        return;
    }
    let script = b"#!/bin/sh\necho compressed\n";
    let compressed = gzip(script);
    check("gzip-no-ca", &compressed, None, "raw", &[("text/x-shellscript", script)]);
    check_refused("gzip-ca", &compressed, Some(ED25519), "GzipNotMergeable");
}

#[test]
fn includes_and_archives_are_processed_by_cloud_init() {
    if !require_cloud_init("includes_and_archives_are_processed_by_cloud_init") {
        return;
    }
    let scratch = Scratch::new("include-target");
    let included = b"#cloud-config\nbootcmd: [true]\n";
    let target = scratch.write("included.yaml", included);
    for prefix in ["#include", "#include-once"] {
        let data = format!("{prefix}\n{}\n", target.display());
        check(prefix, data.as_bytes(), Some(ED25519), "full", &[("text/cloud-config", included)]);
    }
    let archive =
        b"#cloud-config-archive\n- type: text/x-shellscript\n  content: |\n    #!/bin/sh\n    echo archived\n";
    check("archive", archive, Some(ED25519), "full", &[("text/x-shellscript", b"#!/bin/sh\necho archived\n")]);
}

#[test]
fn bad_inputs_are_refused_with_their_reason() {
    if !require_cloud_init("bad_inputs_are_refused_with_their_reason") {
        return;
    }
    let private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n";
    let key_and_yaml = format!("{ED25519}\nruncmd: [reboot]\n");
    let two_keys = format!("{ED25519}\n{ECDSA}\n");
    // 49,149 bytes is the most Nova takes (65,535 base64 characters).
    let mut too_large = b"#!/bin/sh\n".to_vec();
    too_large.resize(49_150, b'#');
    let mut large = too_large.clone();
    large.truncate(49_000);
    let cases: &[(&str, &[u8], Option<&str>, &str)] = &[
        ("plain-text", b"hello world\n", None, "UnknownPayloadType"),
        ("plain-text-ca", b"hello world\n", Some(ED25519), "UnknownPayloadType"),
        (
            "no-boundary",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--XYZ\n\n#!/bin/sh\n--XYZ--\n",
            Some(ED25519),
            "MultipartWithoutBoundary",
        ),
        (
            "no-boundary-no-ca",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--XYZ\n\n#!/bin/sh\n--XYZ--\n",
            None,
            "MultipartWithoutBoundary",
        ),
        (
            "truncated",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XYZ\n\n--XYZ\n\n#!/bin/sh\necho cut",
            Some(ED25519),
            "TruncatedMultipart",
        ),
        (
            "wrong-boundary",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XYZ\n\n--ABC\n\n#!/bin/sh\n--ABC--\n",
            Some(ED25519),
            "MultipartBoundaryNotFound",
        ),
        (
            "untyped-part",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XYZ\n\n--XYZ\nContent-Type: text/plain\n\nhello\n--XYZ--\n",
            Some(ED25519),
            "UntypedMimePart",
        ),
        ("broken-yaml", b"#cloud-config\nfoo: [unclosed\n", None, "InvalidCloudConfig"),
        ("broken-yaml-ca", b"#cloud-config\nfoo: [unclosed\n", Some(ED25519), "InvalidCloudConfig"),
        ("yaml-list", b"#cloud-config\n- runcmd\n", None, "InvalidCloudConfig"),
        (
            "broken-yaml-part",
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XYZ\n\n--XYZ\nContent-Type: text/cloud-config\n\nruncmd: [ls\n--XYZ--\n",
            Some(ED25519),
            "InvalidCloudConfig",
        ),
        ("null-runcmd-ca", b"#cloud-config\nruncmd:\n", Some(ED25519), "CloudConfigNotMergeable"),
        ("too-large", too_large.as_slice(), None, "TooLarge"),
        ("too-large-with-ca", large.as_slice(), Some(ED25519), "TooLarge"),
        ("private-key", b"#!/bin/sh\n", Some(private), "SshKeyPrivate"),
        ("key-and-yaml", b"#!/bin/sh\n", Some(&key_and_yaml), "SshKeyMultipleLines"),
        ("two-keys", b"#!/bin/sh\n", Some(&two_keys), "SshKeyMultipleLines"),
        ("garbage-key", b"", Some("not a key"), "SshKeyInvalid"),
        ("empty-key", b"#cloud-config\n", Some(""), "SshKeyEmpty"),
    ];
    for (name, data, key, reason) in cases {
        check_refused(name, data, *key, reason);
    }
}

/// `render-user-data` names what is wrong with a broken cloud-config, and
/// cloud-init, given it, would skip it with only a warning in the machine's
/// log.
#[test]
fn broken_cloud_config_is_refused_naming_the_problem() {
    if !require_cloud_init("broken_cloud_config_is_refused_naming_the_problem") {
        return;
    }
    let broken = b"#cloud-config\nruncmd: [echo hi]\nfoo: [unclosed\n";
    let scratch = Scratch::new("broken-yaml");
    let out = render(&scratch, broken, Some(ED25519));
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: the user data's cloud-config is not valid YAML: unclosed bracket '[' at line 3, column 6; cloud-init \
         would skip it and apply none of it (reason: InvalidCloudConfig)"
    );
    let skipped = cloud_init::merged(&scratch, broken);
    assert_eq!(skipped.config, serde_json::json!({}), "cloud-init applies none of it");
    assert!(skipped.warnings.iter().any(|w| w.contains("Failed loading yaml blob")), "{:?}", skipped.warnings);
}

/// What cloud-init does with the refused inputs, to show why they are
/// refused: it drops or truncates them without failing.
#[test]
fn refused_multiparts_are_mishandled_by_cloud_init() {
    if !require_cloud_init("refused_multiparts_are_mishandled_by_cloud_init") {
        return;
    }
    let scratch = Scratch::new("mishandled");
    let no_boundary = b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--XYZ\n\n#!/bin/sh\n--XYZ--\n";
    assert!(cloud_init_parts(&scratch, "raw", no_boundary).is_empty(), "cloud-init drops it all");
    let truncated = b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XYZ\n\n--XYZ\n\n#!/bin/sh\necho cut";
    let parts = cloud_init_parts(&scratch, "raw", truncated);
    assert_eq!(parts.len(), 1, "cloud-init runs what is left of a truncated message");
}

#[test]
fn usage_errors_exit_non_zero() {
    let out = Command::new(BIN).arg("render-user-data").output().unwrap();
    assert!(!out.status.success());
    let out = Command::new(BIN)
        .args(["render-user-data", "--user-data"])
        .arg(Path::new("/nonexistent/user-data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn reads_standard_input() {
    let mut child = Command::new(BIN)
        .args(["render-user-data", "--user-data", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"#!/bin/sh\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"#!/bin/sh\n");
}

/// A small deterministic generator of MIME-ish user data.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n as u64)).unwrap()
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn body(&mut self) -> String {
        let sentinel = self.pick(&[
            "#!/bin/sh",
            "#cloud-config",
            "#CLOUD-CONFIG",
            "  \t#cloud-boothook",
            "#include-once",
            "#cloud-config-archive",
            "## template: jinja",
            "#part-handler",
            "hello",
            "",
            "\u{a0}#!/bin/sh",
            "\u{3000}#cloud-config",
            "text/x-shellscript-per-boot",
        ]);
        let mut body = sentinel.to_owned();
        for _ in 0..self.below(4) {
            body.push('\n');
            body.push_str(self.pick(&[
                "echo hi",
                "x: 1",
                "caf\u{e9} \u{20ac}",
                "--",
                "-- not a boundary",
                "=3D",
                "",
                "runcmd: [echo gen]",
                "write_files: [{path: /etc/gen, content: gen}]",
                "packages: [htop]",
                "runcmd: echo a string",
                "merge_how: 'list(append)+dict(recurse_array)+str()'",
            ]));
            if self.chance(15) {
                body.push('\n');
                body.push_str(self.pick(&[
                    "foo: [unclosed",
                    "- item",
                    "  nested: 1",
                    "a: b\t",
                    "\tx: 1",
                    "k: 'open quote",
                    "---",
                    "...",
                    "? [complex]",
                    "key: @bad",
                    "x: \"\\q\"",
                    "anchor: &a [1]",
                    "ref: *a",
                    "ref: *missing",
                    "%YAML 1.1",
                    "x: \u{1b}[0m",
                    "runcmd:",
                    "write_files: {}",
                    "{flow: map}",
                    "x: |",
                    "  literal",
                    "k: v: w",
                    "u: caf\u{e9}",
                ]));
            }
        }
        if self.chance(50) {
            body.push('\n');
        }
        body
    }

    fn encode(&mut self, body: &str, encoding: &str) -> String {
        match encoding {
            "base64" | "Base64" => {
                let mut encoded = STANDARD.encode(body.as_bytes());
                if self.chance(20) {
                    encoded = encoded.trim_end_matches('=').to_owned();
                }
                if self.chance(20) && encoded.len() > 4 {
                    encoded.insert(4, '\n');
                }
                encoded
            }
            "quoted-printable" => {
                let mut out = String::new();
                for c in body.chars() {
                    if c == '#' && self.chance(50) {
                        out.push_str("=23");
                    } else if !c.is_ascii() {
                        for b in c.to_string().bytes() {
                            out.push_str(&format!("={b:02X}"));
                        }
                    } else {
                        out.push(c);
                    }
                }
                if self.chance(20) {
                    out.push_str("=\n");
                }
                out
            }
            _ => body.to_owned(),
        }
    }

    fn part(&mut self, boundary: &str, depth: usize) -> String {
        let mut part = String::new();
        if depth < 2 && self.chance(15) {
            let inner = format!("in{depth}");
            part.push_str(&format!("Content-Type: multipart/alternative; boundary=\"{inner}\"\n\n"));
            part.push_str(&self.multipart_body(&inner, depth + 1));
            return part;
        }
        let encoding =
            if self.chance(30) { self.pick(&["base64", "quoted-printable", "7bit", "8bit", "Base64"]) } else { "" };
        if self.chance(80) {
            let content_type = self.pick(&[
                "text/plain",
                "TEXT/PLAIN; charset=us-ascii",
                "text/x-shellscript",
                "text/cloud-config",
                "text/x-not-multipart",
                "application/octet-stream",
                "text/jinja2",
                "text/plain; x=\"a;b\"",
                "nonsense",
            ]);
            part.push_str(&format!("Content-Type: {content_type}\n"));
        }
        if !encoding.is_empty() {
            part.push_str(&format!("Content-Transfer-Encoding: {encoding}\n"));
        }
        if self.chance(20) {
            part.push_str("Content-Disposition: attachment; filename=\"p.txt\"\n");
        }
        if self.chance(15) {
            part.push_str(self.pick(&[
                "Merge-Type: dict(replace)+list(append)+str()\n",
                "X-Merge-Type: list(append)+dict(no_replace,recurse_list)+str()\n",
                "Merge-Type: list(prepend)+dict(no_replace,recurse_list)+str(append)\n",
            ]));
        }
        if self.chance(90) {
            part.push('\n');
        }
        let body = self.body();
        part.push_str(&self.encode(&body, encoding));
        let _ = boundary;
        part
    }

    fn multipart_body(&mut self, boundary: &str, depth: usize) -> String {
        let mut out = String::new();
        if self.chance(30) {
            out.push_str("preamble\n");
        }
        for _ in 0..=self.below(3) {
            let dashes = self.pick(&["", "", "", " ", "\t"]);
            out.push_str(&format!("--{boundary}{dashes}\n"));
            if self.chance(5) {
                out.push_str(&format!("--{boundary}\n"));
            }
            let part = self.part(boundary, depth);
            out.push_str(&part);
            if !part.ends_with('\n') || self.chance(30) {
                out.push('\n');
            }
        }
        out.push_str(&format!("--{boundary}--\n"));
        if self.chance(30) {
            out.push_str("epilogue\n");
        }
        out
    }

    fn message(&mut self) -> Vec<u8> {
        if self.chance(15) {
            return self.body().into_bytes();
        }
        let boundary = self.pick(&["XYZ", "a b", "==x==", "b'(+_,-./:=?"]);
        let quoted = self.chance(70) || boundary.contains(' ');
        let param = if quoted { format!("\"{boundary}\"") } else { boundary.to_owned() };
        let multipart = self.chance(85);
        let mut headers = vec!["MIME-Version: 1.0".to_owned()];
        if multipart {
            let folded = if self.chance(20) { ";\n\t" } else { "; " };
            headers.push(format!("Content-Type: multipart/mixed{folded}boundary={param}"));
        } else if self.chance(70) {
            headers.push(format!(
                "Content-Type: {}",
                self.pick(&["text/plain", "text/x-shellscript", "text/cloud-config"])
            ));
        }
        if self.chance(30) {
            headers.push("Subject: user data".to_owned());
        }
        if self.chance(50) {
            headers.reverse();
        }
        let mut text = headers.join("\n");
        text.push_str("\n\n");
        if multipart {
            text.push_str(&self.multipart_body(boundary, 0));
        } else {
            text.push_str(&self.body());
        }
        match self.below(4) {
            0 => text.replace('\n', "\r\n").into_bytes(),
            1 if self.chance(20) => text.replace('\n', "\r").into_bytes(),
            _ => text.into_bytes(),
        }
    }
}

fn comparable(parts: &[server_core::user_data::CloudInitPart]) -> Vec<(String, Vec<u8>)> {
    parts.iter().map(|p| (p.content_type.clone(), p.payload.clone())).collect()
}

/// Differential test: for generated inputs and the committed fuzz corpora,
/// the parts server-core says cloud-init will see are the parts the real
/// cloud-init sees, before and after merging with a CA.
#[test]
fn server_core_sees_user_data_as_cloud_init_does() {
    use server_core::user_data::{
        CloudInitPart, MANAGED_PART_CONTENT_TYPE, UserDataErrorReason, cloud_init_parts, render_user_data,
    };

    if !require_cloud_init("server_core_sees_user_data_as_cloud_init_does") {
        return;
    }
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut generator = Gen(0x5eed_cafe_f00d_d00d);
    for i in 0..1000 {
        inputs.push((format!("gen-{i:04}"), generator.message()));
    }
    // The fuzz corpora: user data as it is, and the user data after the key
    // in the merge target's `key NUL user-data` inputs.
    for target in ["user_data_validate", "user_data_merge"] {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
        let Ok(entries) = fs::read_dir(&corpus) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = format!("{target}-{}", path.file_name().unwrap().to_string_lossy());
            let bytes = fs::read(&path).unwrap();
            let user_data = match bytes.iter().position(|b| *b == 0) {
                Some(i) if target == "user_data_merge" => bytes[i + 1..].to_vec(),
                _ => bytes,
            };
            inputs.push((name, user_data));
        }
    }
    let managed = {
        let out = render_user_data(None, Some(ED25519)).unwrap().unwrap();
        CloudInitPart { content_type: MANAGED_PART_CONTENT_TYPE.to_owned(), payload: out }
    };

    let scratch = Scratch::new("differential");
    let dir = scratch.0.join("inputs");
    fs::create_dir_all(&dir).unwrap();
    let yaml_refused_dir = scratch.0.join("yaml-refused");
    fs::create_dir_all(&yaml_refused_dir).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    let (mut accepted, mut refused, mut generated_accepted, mut yaml_refused, mut not_mergeable) = (0, 0, 0, 0, 0);
    for (name, data) in &inputs {
        let parts = match cloud_init_parts(data) {
            Ok(Some(parts)) => parts,
            Err(e) if e.reason() == UserDataErrorReason::InvalidCloudConfig => {
                // Checked below: cloud-init fails to load it too.
                fs::write(yaml_refused_dir.join(name), data).unwrap();
                yaml_refused += 1;
                continue;
            }
            _ => {
                refused += 1;
                continue;
            }
        };
        if parts.iter().any(|p| p.content_type.contains("gzip") || p.content_type.contains("compress")) {
            continue;
        }
        let merged = match render_user_data(Some(data), Some(ED25519)) {
            Ok(merged) => merged.unwrap(),
            // A write_files or runcmd that is not a list: refused only with a CA.
            Err(e) if e.reason() == UserDataErrorReason::CloudConfigNotMergeable => {
                not_mergeable += 1;
                continue;
            }
            Err(e) => panic!("{name}: valid user data refused with a CA: {e}"),
        };
        accepted += 1;
        generated_accepted += usize::from(name.starts_with("gen-"));
        fs::write(dir.join(name), data).unwrap();
        expected.insert(name.clone(), comparable(&parts));
        fs::write(dir.join(format!("{name}.merged")), &merged).unwrap();
        let mut with_managed = parts.clone();
        with_managed.push(managed.clone());
        expected.insert(format!("{name}.merged"), comparable(&with_managed));
    }
    assert!(generated_accepted > 300, "too few generated inputs accepted: {generated_accepted} (refused {refused})");

    let harness = scratch.write("harness.py", HARNESS.as_bytes());
    let out = Command::new(PYTHON).arg(&harness).arg("batch").arg(&dir).output().unwrap();
    assert!(out.status.success(), "harness failed: {}", String::from_utf8_lossy(&out.stderr));
    let results: serde_json::Map<String, Value> = serde_json::from_slice(&out.stdout).unwrap();

    let mut mismatches = Vec::new();
    for (name, want) in &expected {
        let result = &results[name];
        let Some(parts) = result["parts"].as_array() else {
            mismatches.push(format!("{name}: cloud-init failed: {}", result["error"]));
            continue;
        };
        let got: Vec<(String, Vec<u8>)> = parts
            .iter()
            .map(|p| (p["type"].as_str().unwrap().to_owned(), STANDARD.decode(p["payload"].as_str().unwrap()).unwrap()))
            .collect();
        if &got != want {
            mismatches.push(format!("{name}:\n  server-core: {want:?}\n  cloud-init:  {got:?}"));
        }
    }
    // The merged result: cloud-init's cloud-config of each merge is the
    // user's own with the managed lists appended, and cloud-init warns about
    // nothing the user data alone does not warn about.
    let managed_config = {
        let managed = render_user_data(None, Some(ED25519)).unwrap().unwrap();
        cloud_init::merged(&scratch, &managed).config
    };
    let merges = cloud_init::merged_batch(&scratch, &dir);
    let mut merged_compared = 0;
    for name in expected.keys().filter(|name| !name.ends_with(".merged")) {
        let (Some(user), Some(with_ca)) = (merges.get(name), merges.get(&format!("{name}.merged"))) else {
            mismatches.push(format!("{name}: no merge result"));
            continue;
        };
        match (user, with_ca) {
            (Ok(user), Ok(with_ca)) => {
                let want = cloud_init::appended(&user.config, &managed_config);
                if with_ca.config != want {
                    mismatches.push(format!(
                        "{name}: merged cloud-config\n  user's + managed: {want}\n  cloud-init:       {}",
                        with_ca.config
                    ));
                }
                if with_ca.warnings != user.warnings {
                    mismatches.push(format!(
                        "{name}: warnings\n  user data alone: {:?}\n  with a CA:       {:?}",
                        user.warnings, with_ca.warnings
                    ));
                }
                merged_compared += 1;
            }
            (user, with_ca) => mismatches.push(format!("{name}: cloud-init failed: {user:?} / {with_ca:?}")),
        }
    }
    // No false refusal: what server-core refuses as YAML cloud-init cannot
    // load either (cloud-init's `load_yaml` warns and the part is skipped).
    for (name, result) in cloud_init::merged_batch(&scratch, &yaml_refused_dir) {
        match result {
            Ok(merged) if merged.warnings.iter().any(|w| w.starts_with("Failed loading yaml blob")) => {}
            other => mismatches.push(format!("{name}: refused as YAML, but cloud-init loads it: {other:?}")),
        }
    }
    eprintln!(
        "differential: {accepted} accepted inputs ({generated_accepted} generated) and their merges compared, \
         {merged_compared} merged cloud-configs compared, {yaml_refused} refused as YAML cloud-init cannot load \
         either, {not_mergeable} refused only with a CA (not a list), {refused} refused otherwise"
    );
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}
