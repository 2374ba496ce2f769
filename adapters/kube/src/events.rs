//! Kubernetes Events for the core's event reasons, through kube-runtime's
//! `Recorder` (events.k8s.io/v1), reported by `server-controller`.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use server_core::reconcile::{Event, EventType};

/// `reportingController` of every Event this operator emits.
pub const REPORTING_CONTROLLER: &str = "server-controller";

/// Reason of the Event on a Server whose content cannot be read.
pub const UNREADABLE_REASON: &str = "ServerUnreadable";

/// Publishes the core's events. One per controller: the recorder keeps a
/// cache that folds repeats of an event into a series.
#[derive(Clone)]
pub(crate) struct EventPublisher {
    recorder: Recorder,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventPublisher")
    }
}

impl EventPublisher {
    pub(crate) fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: REPORTING_CONTROLLER.into(), instance };
        EventPublisher { recorder: Recorder::new(client, reporter) }
    }

    pub(crate) async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        self.recorder.publish(&to_kube(event), regarding).await
    }

    /// A Warning that the Server itself cannot be read (not a decision of
    /// the core, which never sees such a Server).
    pub(crate) async fn publish_unreadable(
        &self,
        note: String,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let event = KubeEvent {
            type_: KubeEventType::Warning,
            reason: UNREADABLE_REASON.into(),
            note: Some(note),
            action: "ReadServer".into(),
            secondary: None,
        };
        self.recorder.publish(&event, regarding).await
    }
}

fn to_kube(event: &Event) -> KubeEvent {
    KubeEvent {
        type_: match event.type_ {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        },
        reason: event.reason.as_str().into(),
        note: Some(event.note.clone()),
        action: event.action.into(),
        secondary: None,
    }
}
