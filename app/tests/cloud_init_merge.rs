//! The merged result, as the real cloud-init builds it: with an SSH CA, the
//! cloud-config cloud-init's part handlers merge from `render-user-data`'s
//! output keeps every entry of the user's own cloud-config and adds the
//! managed ones, whatever form the user data takes.
//!
//! Each case runs cloud-init over the user data alone and over the rendered
//! data with a CA, and expects the second to be the first with the managed
//! lists appended (`MANAGED_PART_MERGE_TYPE`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cloud_init;

use cloud_init::{ED25519, INSTANCE_HOSTNAME, Merged, RELOAD, Scratch, appended, merged, render, require_cloud_init};
use serde_json::{Value, json};

/// The user data with `key` rendered by the binary.
fn rendered(scratch: &Scratch, user_data: &[u8], key: Option<&str>) -> Vec<u8> {
    let out = render(scratch, user_data, key);
    assert!(out.status.success(), "render failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn assert_clean(what: &str, merged: &Merged) {
    assert!(merged.warnings.is_empty(), "{what}: cloud-init warned: {:#?}", merged.warnings);
}

/// cloud-init's merge of the user data alone, checked against what the user
/// wrote, and of the rendered data with a CA, checked to be that plus the
/// managed entries.
fn check(name: &str, user_data: &[u8], users_config: &Value) {
    let scratch = Scratch::new(name);
    let managed = merged(&scratch, &rendered(&scratch, b"", Some(ED25519)));
    assert_clean(&format!("{name}: managed part alone"), &managed);
    assert_eq!(managed.config["runcmd"], json!([RELOAD]));

    let user = merged(&scratch, &rendered(&scratch, user_data, None));
    assert_clean(&format!("{name}: user data alone"), &user);
    assert_eq!(&user.config, users_config, "{name}: the user data alone does not merge as the test expects");

    let with_ca = merged(&scratch, &rendered(&scratch, user_data, Some(ED25519)));
    assert_clean(&format!("{name}: with a CA"), &with_ca);
    assert_eq!(
        with_ca.config,
        appended(&user.config, &managed.config),
        "{name}: with a CA, cloud-init's merged cloud-config lost or changed the user's entries"
    );
}

const USER_CLOUD_CONFIG: &str = "#cloud-config
packages: [htop]
users:
  - default
  - name: alice
    groups: [sudo]
write_files:
  - path: /etc/motd
    content: hello from the user
runcmd:
  - echo hi
";

fn users_config(runcmd: &[&str], files: &[&str]) -> Value {
    let files: Vec<Value> = files.iter().map(|path| json!({"path": path, "content": "hello from the user"})).collect();
    json!({
        "packages": ["htop"],
        "users": ["default", {"name": "alice", "groups": ["sudo"]}],
        "write_files": files,
        "runcmd": runcmd,
    })
}

#[test]
fn plain_cloud_config_keeps_every_user_entry() {
    if !require_cloud_init("plain_cloud_config_keeps_every_user_entry") {
        return;
    }
    check("plain", USER_CLOUD_CONFIG.as_bytes(), &users_config(&["echo hi"], &["/etc/motd"]));
    let crlf = USER_CLOUD_CONFIG.replace('\n', "\r\n");
    check("plain-crlf", crlf.as_bytes(), &users_config(&["echo hi"], &["/etc/motd"]));
}

#[test]
fn multipart_with_a_script_keeps_every_user_entry() {
    if !require_cloud_init("multipart_with_a_script_keeps_every_user_entry") {
        return;
    }
    let data = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n\n--XYZ\nContent-Type: text/x-shellscript\n\n\
         #!/bin/sh\necho script\n\n--XYZ\nContent-Type: text/cloud-config\n\n{USER_CLOUD_CONFIG}\n--XYZ--\n"
    );
    check("multipart", data.as_bytes(), &users_config(&["echo hi"], &["/etc/motd"]));
}

#[test]
fn jinja_template_keeps_every_user_entry() {
    if !require_cloud_init("jinja_template_keeps_every_user_entry") {
        return;
    }
    let template = "## template: jinja
#cloud-config
packages: [htop]
users:
  - default
  - name: alice
    groups: [sudo]
write_files:
  - path: /etc/{{ v1.local_hostname }}
    content: hello from the user
runcmd:
  - echo {{ v1.local_hostname }}
";
    let hostname = INSTANCE_HOSTNAME;
    check("jinja", template.as_bytes(), &users_config(&[&format!("echo {hostname}")], &[&format!("/etc/{hostname}")]));
}

/// User data that sets its own merge rules: they govern the user's parts,
/// and the managed part still appends to the result.
#[test]
fn user_merge_types_are_kept_and_the_managed_part_still_appends() {
    if !require_cloud_init("user_merge_types_are_kept_and_the_managed_part_still_appends") {
        return;
    }
    let first =
        "#cloud-config\nwrite_files:\n  - path: /etc/first\n    content: hello from the user\nruncmd: [echo first]\n";
    let second = "#cloud-config\npackages: [htop]\nusers: [default, {name: alice, groups: [sudo]}]\n\
                  write_files:\n  - path: /etc/second\n    content: hello from the user\nruncmd: [echo second]\n";
    let multipart = |second_headers: &str, second_body: &str| {
        format!(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n\n--XYZ\nContent-Type: text/cloud-config\n\n\
             {first}\n--XYZ\nContent-Type: text/cloud-config\n{second_headers}\n{second_body}\n--XYZ--\n"
        )
    };
    // The second part appends to the first.
    let appending = multipart("Merge-Type: list(append)+dict(no_replace,recurse_list)+str()\n", second);
    check(
        "user-appends",
        appending.as_bytes(),
        &users_config(&["echo first", "echo second"], &["/etc/first", "/etc/second"]),
    );
    // The second part replaces the first's lists, by header (X- form too) or by merge_how.
    let replaced = users_config(&["echo second"], &["/etc/second"]);
    for (name, headers) in [("header", "Merge-Type"), ("x-header", "X-Merge-Type")] {
        let data = multipart(&format!("{headers}: dict(replace)+list()+str()\n"), second);
        check(&format!("user-replaces-{name}"), data.as_bytes(), &replaced);
    }
    let merge_how = second.replace("#cloud-config\n", "#cloud-config\nmerge_how: 'dict(replace)+list()+str()'\n");
    check("user-replaces-merge-how", multipart("", &merge_how).as_bytes(), &replaced);
    // A whole (non-multipart) MIME message with its own Merge-Type.
    let single = format!(
        "MIME-Version: 1.0\nContent-Type: text/cloud-config\nMerge-Type: list(append)+dict()+str()\n\n{USER_CLOUD_CONFIG}"
    );
    check("user-single-mime", single.as_bytes(), &users_config(&["echo hi"], &["/etc/motd"]));
}

/// A `runcmd` that is a string (invalid cloud-config) is replaced by the
/// managed list rather than leaving sshd unconfigured. In a cloud-config of
/// the user's this is refused before it gets here; a template, which is not
/// read, can still render one.
#[test]
fn a_string_runcmd_gives_way_to_the_managed_list() {
    if !require_cloud_init("a_string_runcmd_gives_way_to_the_managed_list") {
        return;
    }
    let scratch = Scratch::new("string-runcmd");
    let refused = render(&scratch, b"#cloud-config\nruncmd: echo hi\n", Some(ED25519));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CloudConfigNotMergeable"));
    let template = b"## template: jinja\n#cloud-config\nruncmd: echo {{ v1.local_hostname }}\n";
    let with_ca = merged(&scratch, &rendered(&scratch, template, Some(ED25519)));
    assert_clean("string runcmd", &with_ca);
    assert_eq!(with_ca.config["runcmd"], json!([RELOAD]));
    assert_eq!(with_ca.config["write_files"].as_array().map(Vec::len), Some(2));
}

/// A null `runcmd` would keep its null and drop the managed list: refused
/// with a CA, with the line.
#[test]
fn a_null_runcmd_is_refused_with_a_ca() {
    if !require_cloud_init("a_null_runcmd_is_refused_with_a_ca") {
        return;
    }
    let scratch = Scratch::new("null-runcmd");
    let data = b"#cloud-config\npackages: [htop]\nruncmd:\n";
    let refused = render(&scratch, data, Some(ED25519));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("sets runcmd to something other than a list (at line 3)"), "{stderr}");
    // What cloud-init would have done with it: the user's null survives, the managed commands do not.
    let out = String::from_utf8(rendered(&scratch, b"#cloud-config\npackages: [htop]\n", Some(ED25519))).unwrap();
    let sneaked = out.replacen("packages: [htop]\n", "packages: [htop]\nruncmd:\n", 1);
    assert_eq!(merged(&scratch, sneaked.as_bytes()).config["runcmd"], Value::Null);
}

/// Why the managed part carries a Merge-Type: without it (as the Go
/// controller sends it), cloud-init's default merge drops the user's lists.
#[test]
fn without_the_merge_type_cloud_init_drops_the_users_lists() {
    if !require_cloud_init("without_the_merge_type_cloud_init_drops_the_users_lists") {
        return;
    }
    let scratch = Scratch::new("no-merge-type");
    let out = String::from_utf8(rendered(&scratch, USER_CLOUD_CONFIG.as_bytes(), Some(ED25519))).unwrap();
    let header = format!("Merge-Type: {}\n", server_core::user_data::MANAGED_PART_MERGE_TYPE);
    assert_eq!(out.matches(&header).count(), 1, "the managed part has the header once:\n{out}");
    let without = merged(&scratch, out.replace(&header, "").as_bytes());
    assert_eq!(without.config["runcmd"], json!([RELOAD]), "cloud-init kept the user's runcmd after all");
    assert_eq!(without.config["packages"], json!(["htop"]), "keys only the user has survive either way");
}

/// cloud-init's own example cloud-configs (fixtures/cloud-init-examples):
/// none is refused, and with a CA each keeps every entry.
#[test]
fn cloud_inits_examples_keep_every_entry() {
    if !require_cloud_init("cloud_inits_examples_keep_every_entry") {
        return;
    }
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/cloud-init-examples");
    let scratch = Scratch::new("examples");
    let managed = merged(&scratch, &rendered(&scratch, b"", Some(ED25519)));
    let dir = scratch.0.join("inputs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".txt") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        std::fs::write(dir.join(&name), &data).unwrap();
        std::fs::write(dir.join(format!("{name}.merged")), rendered(&scratch, &data, Some(ED25519))).unwrap();
        names.push(name);
    }
    assert!(names.len() >= 25, "{names:?}");
    let results = cloud_init::merged_batch(&scratch, &dir);
    let mut with_config = 0;
    for name in &names {
        let user = results[name].as_ref().unwrap();
        let with_ca = results[&format!("{name}.merged")].as_ref().unwrap();
        assert_eq!(with_ca.warnings, user.warnings, "{name}");
        assert_eq!(with_ca.config, appended(&user.config, &managed.config), "{name}");
        with_config += usize::from(user.config != json!({}));
    }
    assert!(with_config >= 25, "only {with_config} examples gave cloud-init a cloud-config");
}
