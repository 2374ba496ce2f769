//! proptest strategies over servers, provider records and views.
#![allow(dead_code, unreachable_pub)]

use proptest::prelude::*;
use server_core::model::{
    ConditionReason, ConditionStatus, ConditionType, Phase, Rebuild, RebuildState, SERVER_FINALIZER, Server,
    ServerStatus, UserData, set_condition,
};
use server_core::port::{PowerState, ProviderServer, ProviderStatus};
use server_core::reconcile::ProviderView;

use super::{at, server};

pub fn arb_time() -> impl Strategy<Value = Option<jiff::Timestamp>> {
    prop::option::of((0i64..1_000).prop_map(at))
}

pub fn arb_condition_status() -> impl Strategy<Value = ConditionStatus> {
    prop_oneof![Just(ConditionStatus::True), Just(ConditionStatus::False), Just(ConditionStatus::Unknown)]
}

pub fn arb_reason() -> impl Strategy<Value = ConditionReason> {
    prop_oneof![
        Just(ConditionReason::Provisioning),
        Just(ConditionReason::Provisioned),
        Just(ConditionReason::Errored),
        Just(ConditionReason::Unknown),
        Just(ConditionReason::Healthy),
        Just(ConditionReason::Degraded),
    ]
}

pub fn arb_phase() -> impl Strategy<Value = Option<Phase>> {
    prop::option::of(prop_oneof![
        Just(Phase::Pending),
        Just(Phase::Queued),
        Just(Phase::Building),
        Just(Phase::Running),
        Just(Phase::Stopping),
        Just(Phase::Stopped),
    ])
}

/// Any status, including ones the rules must heal (failures above the cap).
pub fn arb_status() -> impl Strategy<Value = ServerStatus> {
    (
        prop::option::of((arb_condition_status(), arb_reason())),
        prop::option::of((arb_condition_status(), arb_reason())),
        arb_phase(),
        (arb_time(), arb_time(), arb_time()),
        -1i32..7,
        any::<bool>(),
        prop::option::of(Just("fa:16:3e:00:00:01".to_string())),
        arb_marker(),
    )
        .prop_map(
            |(
                healthy,
                available,
                phase,
                (launched_at, provisioned_at, scheduled_at),
                failures,
                retrying,
                mac,
                rebuild,
            )| {
                let mut status = ServerStatus {
                    rebuild,
                    phase,
                    launched_at,
                    provisioned_at,
                    scheduled_at,
                    provider_create_failures: failures,
                    provider_create_retrying: retrying,
                    mac_address: mac,
                    ..Default::default()
                };
                for (type_, condition) in [(ConditionType::Healthy, healthy), (ConditionType::Available, available)] {
                    if let Some((s, r)) = condition {
                        set_condition(&mut status.conditions, type_, s, r, "arbitrary", at(0));
                    }
                }
                status
            },
        )
}

/// Statuses that pass through the retry machine: pre-launch, Healthy Errored
/// half of the time.
pub fn arb_failed_status() -> impl Strategy<Value = ServerStatus> {
    (arb_status(), any::<bool>()).prop_map(|(mut status, errored)| {
        if errored {
            set_condition(
                &mut status.conditions,
                ConditionType::Healthy,
                ConditionStatus::False,
                ConditionReason::Errored,
                "errored",
                at(0),
            );
        }
        status
    })
}

pub fn arb_server() -> impl Strategy<Value = Server> {
    (arb_failed_status(), any::<bool>(), any::<bool>(), 1i64..4, prop::option::of(1i64..4)).prop_map(
        |(status, adopted, deleting, generation, refused)| {
            let mut s = server();
            s.status = status;
            if adopted {
                s.meta.finalizers.push(SERVER_FINALIZER.into());
            }
            s.meta.deleting = deleting;
            s.meta.generation = generation;
            if let Some(g) = refused {
                s.meta.annotations.insert(server_core::model::CREATE_REFUSED_ANNOTATION.into(), g.to_string());
            }
            s
        },
    )
}

pub fn arb_provider_status() -> impl Strategy<Value = ProviderStatus> {
    prop_oneof![
        Just(ProviderStatus::Active),
        Just(ProviderStatus::Build),
        Just(ProviderStatus::Error),
        Just(ProviderStatus::Rebuild),
        Just(ProviderStatus::Unknown),
        Just(ProviderStatus::Other("SHUTOFF".into())),
    ]
}

/// An image a record runs or a marker targets: the spec's (`image`, see
/// `support::server`), another one, or (for a record) none said.
pub fn arb_image() -> impl Strategy<Value = String> {
    prop_oneof![Just("image".to_string()), Just("image-2".to_string())]
}

pub fn arb_rebuild_state() -> impl Strategy<Value = RebuildState> {
    prop_oneof![
        Just(RebuildState::Initiated),
        Just(RebuildState::Rebuilding),
        Just(RebuildState::Succeeded),
        Just(RebuildState::Failed),
    ]
}

/// A rebuild marker, now and then (most Servers have none).
pub fn arb_marker() -> impl Strategy<Value = Option<Rebuild>> {
    prop::option::weighted(
        0.15,
        (arb_image(), arb_rebuild_state()).prop_map(|(target_image_id, state)| Rebuild { target_image_id, state }),
    )
}

pub fn arb_record() -> impl Strategy<Value = ProviderServer> {
    (
        arb_provider_status(),
        prop_oneof![Just(PowerState::NoState), Just(PowerState::Running), Just(PowerState::Shutdown)],
        any::<bool>(),
        arb_time(),
        arb_time(),
        prop::option::of(Just("fa:16:3e:00:00:02".to_string())),
        // Mostly the spec's image, as a server that was never rebuilt.
        prop::option::weighted(0.9, prop_oneof![4 => Just("image".to_string()), 1 => Just("image-2".to_string())]),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(status, power_state, queued, created, launched_at, mac_address, image_id, task_in_flight)| {
            ProviderServer {
                id: "vm".into(),
                server_uid: "uid-web".into(),
                status,
                power_state,
                queued,
                created,
                launched_at,
                private_ip: Some("10.0.0.9".into()),
                public_ip: None,
                mac_address,
                flavor_name: None,
                ironic: None,
                adopted: false,
                image_id,
                task_in_flight,
            }
        })
}

pub fn arb_view() -> impl Strategy<Value = ProviderView> {
    prop_oneof![
        arb_record().prop_map(ProviderView::Present),
        Just(ProviderView::Absent),
        Just(ProviderView::Unknown("read timed out".into())),
    ]
}

pub fn arb_user_data() -> impl Strategy<Value = Option<UserData>> {
    prop::option::of(prop::collection::vec(any::<u8>(), 0..256).prop_map(UserData))
}
