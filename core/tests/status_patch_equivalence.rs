//! The typed `status_merge_patch` against the definition it implements: the
//! RFC 7386 diff of the two statuses' JSON documents.
#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Map, Value};
use server_core::ServerStatus;
use server_core::model::{ConditionReason, ConditionStatus, ConditionType, Phase, set_condition};
use server_core::status_merge_patch;
use server_core::status_patch::apply_merge_patch;

/// The reference: serialize both, name every top-level key that differs,
/// `null` for keys that disappear.
fn json_diff(before: &ServerStatus, after: &ServerStatus) -> Option<Value> {
    let object = |s: &ServerStatus| match serde_json::to_value(s).unwrap() {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let (before, after) = (object(before), object(after));
    let mut patch = Map::new();
    for (key, value) in &after {
        if before.get(key) != Some(value) {
            patch.insert(key.clone(), value.clone());
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

fn arb_time() -> impl Strategy<Value = Option<Timestamp>> {
    prop::option::of(
        (0i64..3, 0i32..3)
            .prop_map(|(s, ms)| Timestamp::new(1_700_000_000 + s, ms * 1_000_000).unwrap_or(Timestamp::UNIX_EPOCH)),
    )
}

fn arb_text() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec!["10.0.0.1", "10.0.0.2", ""]).prop_map(String::from))
}

fn arb_condition() -> impl Strategy<Value = Option<(ConditionStatus, ConditionReason, &'static str)>> {
    prop::option::of((
        prop::sample::select(vec![ConditionStatus::True, ConditionStatus::False, ConditionStatus::Unknown]),
        prop::sample::select(vec![ConditionReason::Errored, ConditionReason::Healthy, ConditionReason::Provisioning]),
        prop::sample::select(vec!["a", "b"]),
    ))
}

fn arb_status() -> impl Strategy<Value = ServerStatus> {
    (
        (
            arb_condition(),
            arb_condition(),
            prop::option::of(prop::sample::select(vec![Phase::Pending, Phase::Running])),
        ),
        (arb_text(), arb_text(), arb_text()),
        (arb_time(), arb_time(), arb_time(), arb_time()),
        (-1i32..3, any::<bool>()),
    )
        .prop_map(|((healthy, available, phase), (private_ip, public_ip, mac), times, (failures, retrying))| {
            let (launched_at, scheduled_at, provisioned_at, transition) = times;
            let mut status = ServerStatus {
                phase,
                private_ip,
                public_ip,
                mac_address: mac,
                launched_at,
                scheduled_at,
                provisioned_at,
                provider_create_failures: failures,
                provider_create_retrying: retrying,
                ..Default::default()
            };
            let at = transition.unwrap_or(Timestamp::UNIX_EPOCH);
            for (type_, condition) in [(ConditionType::Available, available), (ConditionType::Healthy, healthy)] {
                if let Some((s, r, m)) = condition {
                    set_condition(&mut status.conditions, type_, s, r, m, at);
                }
            }
            status
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn typed_patch_is_the_json_diff(before in arb_status(), after in arb_status()) {
        let patch = status_merge_patch(&before, &after);
        prop_assert_eq!(&patch, &json_diff(&before, &after));
        // And applying it takes the stored document from before to after.
        let mut stored = serde_json::to_value(&before).unwrap();
        if let Some(patch) = &patch {
            apply_merge_patch(&mut stored, patch);
        }
        prop_assert_eq!(stored, serde_json::to_value(&after).unwrap());
    }
}
