//! Kubernetes Events for the core's event reasons, through kube-runtime's
//! `Recorder` (events.k8s.io/v1), reported by `server-controller`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use server_core::reconcile::{Event, EventType};

/// `reportingController` of every Event this operator emits.
pub const REPORTING_CONTROLLER: &str = "server-controller";

/// Reason of the Event on a Server whose content cannot be read.
pub const UNREADABLE_REASON: &str = "ServerUnreadable";

/// Publishes the core's events.
///
/// kube-runtime's `Recorder` folds every repeat of (regarding, reason,
/// action) into one Event's series and keeps the first note: "attempt 2/3"
/// would hide "attempt 3/3" for good. So each (regarding, reason, action)
/// has a recorder of its own, replaced when the note changes: repeats of one
/// note fold into a series, a new note is a new Event a person can read.
#[derive(Clone)]
pub(crate) struct EventPublisher {
    client: Client,
    reporter: Reporter,
    recorders: Arc<Mutex<HashMap<SeriesKey, (String, Recorder)>>>,
}

/// What kube-runtime folds by (the reporter is the publisher's own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: String,
    reason: String,
    action: String,
}

/// Past this many (regarding, reason, action) the map is cleared: a repeat
/// then starts a new Event instead of a series, which loses nothing.
const MAX_SERIES: usize = 50_000;

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventPublisher")
    }
}

impl EventPublisher {
    pub(crate) fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: REPORTING_CONTROLLER.into(), instance };
        EventPublisher { client, reporter, recorders: Arc::default() }
    }

    pub(crate) async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        self.publish_kube(to_kube(event), regarding).await
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
        self.publish_kube(event, regarding).await
    }

    async fn publish_kube(&self, event: KubeEvent, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let recorder = self.recorder_for(&event, regarding);
        recorder.publish(&event, regarding).await
    }

    /// The recorder whose series this event continues, or a fresh one when
    /// its note differs from the series' note.
    fn recorder_for(&self, event: &KubeEvent, regarding: &ObjectReference) -> Recorder {
        let key = SeriesKey {
            regarding: regarding.uid.clone().or_else(|| regarding.name.clone()).unwrap_or_default(),
            reason: event.reason.clone(),
            action: event.action.clone(),
        };
        let note = event.note.clone().unwrap_or_default();
        let mut recorders = self.recorders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((series_note, recorder)) = recorders.get(&key)
            && *series_note == note
        {
            return recorder.clone();
        }
        if recorders.len() >= MAX_SERIES {
            recorders.clear();
        }
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        recorders.insert(key, (note, recorder.clone()));
        recorder
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
