//! User data the controller refuses, end to end: a Server whose cloud-config
//! is broken YAML, or whose merged user data is over Nova's limit, is parked
//! with a message saying why, before any create, and not requeued; its user
//! data appears in no status, event or log line. Fixing the spec creates it.

use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};
use server_core::model::UserData;
use server_e2e::cloud::Fate;
use server_e2e::*;

cloud_scenarios!(refused_user_data_parks_before_any_create);

/// Every log line of this test binary, as `level target: fields`.
fn logs() -> &'static Mutex<Vec<String>> {
    static LOGS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let _ = tracing::subscriber::set_global_default(CAPTURE);
        Mutex::new(Vec::new())
    })
}

fn log_lines() -> Vec<String> {
    logs().lock().map(|l| l.clone()).unwrap_or_default()
}

/// Records our crates' logs from DEBUG up and everything else's from INFO up
/// (stricter than the binary's default filter, `info`).
const CAPTURE: LineSubscriber = LineSubscriber {
    ours: tracing::Level::DEBUG,
    others: tracing::Level::INFO,
    sink: |line| {
        if let Ok(mut logs) = logs().lock() {
            logs.push(line);
        }
    },
};

fn spec_with_user_data(data: &[u8]) -> Value {
    let mut spec = Env::spec();
    spec["userData"] = serde_json::to_value(UserData(data.to_vec())).unwrap_or_default();
    spec
}

/// Passes the controller finished for a Server, by its log lines.
fn passes(name: &str) -> usize {
    let server = format!("server={name} ");
    log_lines().iter().filter(|l| l.contains(&server) && l.contains("reconciled:")).count()
}

/// Event notes about a Server, by reason.
fn event_notes(env: &Env, server: &str) -> Vec<(String, String)> {
    env.objects("events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == server)
        .map(|e| {
            (e["reason"].as_str().unwrap_or_default().to_owned(), e["note"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

async fn refused_user_data_parks_before_any_create(kind: CloudKind) {
    logs();
    let tag = match kind {
        CloudKind::Direct => "direct",
        CloudKind::OpenStack => "openstack",
    };
    let mut env = Env::new(kind, 71).await;
    // A marker that must appear nowhere but in the spec.
    let secret = format!("s3cr3t-{tag}-token");
    let broken = format!("#cloud-config\npassword: {secret}\nfoo: [unclosed\n").into_bytes();
    let mut large = format!("#!/bin/sh\n# {secret}\n").into_bytes();
    large.resize(49_200, b'#');
    let (broken_name, large_name) = (format!("broken-yaml-{tag}"), format!("too-large-{tag}"));
    let broken_uid = env.create_server(&broken_name, fast(Fate::clean()), spec_with_user_data(&broken));
    let large_uid = env.create_server(&large_name, fast(Fate::clean()), spec_with_user_data(&large));
    let good = b"#!/bin/sh\necho first create\n".to_vec();
    let good_name = format!("good-{tag}");
    let good_uid = env.create_server(&good_name, fast(Fate::clean()), spec_with_user_data(&good));
    env.start();

    let broken_message = "user data refused (InvalidCloudConfig): the user data's cloud-config is not valid YAML: \
                          unclosed bracket '[' at line 3, column 6; cloud-init would skip it and apply none of it";
    // Its own park, whose message ends with the command that un-parks it:
    // an edit of the user data (a retry alone checks the same data again).
    let parked = env
        .wait_server(&broken_name, "parked for its broken YAML", |s| {
            available_reason(s) == "Errored" && available_message(s).starts_with(broken_message)
        })
        .await;
    assert_eq!(env.park(&parked), Some(server_core::ParkKind::UserDataRefused));
    let message = available_message(&parked);
    assert!(
        message.ends_with(&format!(
            "fix spec.userData (a retry alone is refused again): kubectl edit server {broken_name} -n {}",
            parked.metadata.namespace.clone().unwrap_or_default()
        )),
        "{message}"
    );
    let too_large = env
        .wait_server(&large_name, "parked for its size", |s| {
            available_reason(s) == "Errored" && available_message(s).starts_with("user data refused (TooLarge): ")
        })
        .await;
    assert!(available_message(&too_large).contains("49200 bytes"), "{}", available_message(&too_large));

    // Parked, not requeued: no pass over twenty requeue intervals.
    env.idle(5).await;
    let before = (passes(&broken_name), passes(&large_name));
    env.idle(20).await;
    assert_eq!((passes(&broken_name), passes(&large_name)), before, "a parked Server was reconciled again");

    // Refused before any create, and no note of one stands.
    for name in [&broken_name, &large_name] {
        let annotations = env.server_json(name).map(|s| s["metadata"]["annotations"].clone()).unwrap_or_default();
        assert!(annotations.get(server_core::model::CREATE_ISSUED_ANNOTATION).is_none(), "{name}: {annotations}");
    }
    for uid in [&broken_uid, &large_uid] {
        assert_eq!(env.truth(uid).create_calls, 0, "{uid}: the provider was asked to create");
    }
    if kind == CloudKind::OpenStack {
        let refused = [&broken_uid, &large_uid];
        let asked = env.openstack().map(|sim| sim.servers()).unwrap_or_default();
        assert!(!asked.iter().any(|s| refused.contains(&&s.server_uid)), "Nova was asked to create");
    }

    // One event each, saying why; the user data nowhere.
    for name in [&broken_name, &large_name] {
        let notes = event_notes(&env, name);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].0, "UserDataRefused");
        assert!(notes[0].1.starts_with("user data refused ("), "{notes:?}");
    }
    let base64_of = |data: &[u8]| serde_json::to_value(UserData(data.to_vec())).unwrap_or_default();
    let encoded: Vec<String> = [&broken, &large]
        .iter()
        .map(|d| base64_of(d).as_str().unwrap_or_default().chars().take(24).collect())
        .collect();
    let mut seen = log_lines();
    for name in [&broken_name, &large_name] {
        seen.push(serde_json::to_string(&env.server_json(name).map(|s| s["status"].clone())).unwrap_or_default());
        seen.extend(event_notes(&env, name).into_iter().map(|(_, note)| note));
    }
    for line in &seen {
        assert!(!line.contains(&secret) && !line.contains("####"), "user data leaked: {line}");
        for fragment in &encoded {
            assert!(!line.contains(fragment.as_str()), "base64 user data leaked: {line}");
        }
        assert!(line.len() < 2048, "an unbounded line: {} bytes", line.len());
    }

    env.wait_server(&good_name, "created", |s| phase(s) == "Running").await;
    assert_eq!(env.truth(&good_uid).creates_accepted, 1);

    // A spec change with user data that can be sent creates the server.
    let fixed = spec_with_user_data(b"#cloud-config\nruncmd: [echo fixed]\n");
    env.patch_spec(&broken_name, json!({ "userData": fixed["userData"] })).await;
    env.wait_server(&broken_name, "created once its user data is fixed", |s| {
        phase(s) == "Running" && available_reason(s) == "Provisioned"
    })
    .await;
    assert_eq!(env.truth(&broken_uid).creates_accepted, 1);
    // Nova received each Server's user data: the first create's taken from
    // the answer to its note's write, the fixed one's read before its
    // create (the cache holds neither).
    if let Some(openstack) = env.openstack() {
        let sent = |uid: &str| openstack.servers().into_iter().find(|s| s.server_uid == uid).and_then(|s| s.user_data);
        assert_eq!(sent(&broken_uid).as_deref(), Some(&b"#cloud-config\nruncmd: [echo fixed]\n"[..]));
        assert_eq!(sent(&good_uid).as_deref(), Some(&good[..]));
    }
    assert_eq!(env.truth(&large_uid).create_calls, 0, "the other parked Server stays parked");
    env.assert_invariants();
}
