//! Kubernetes Events for the core's event reasons, through kube-runtime's
//! `Recorder` (events.k8s.io/v1), reported by `server-controller`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    recorders: Arc<Mutex<SeriesCache<Recorder>>>,
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

/// kube-runtime's `CACHE_TTL`: a recorder that published nothing for this
/// long starts a new Event at its next publish anyway, so keeping it only
/// holds memory (a recorder and its last Event, per Server and reason: tens
/// of MB at 10,000 Servers).
const SERIES_IDLE: Duration = Duration::from_secs(6 * 60);

/// Idle series are looked for once the map doubled since the last look
/// (amortized O(1) per publish), and not below this size.
const PRUNE_FLOOR: usize = 1024;

/// The recorder of each series, with its note and when it last published.
#[derive(Debug)]
struct SeriesCache<R> {
    series: HashMap<SeriesKey, (String, R, Instant)>,
    /// The size after the last pruning.
    pruned_to: usize,
}

impl<R> Default for SeriesCache<R> {
    fn default() -> Self {
        SeriesCache { series: HashMap::new(), pruned_to: 0 }
    }
}

impl<R: Clone> SeriesCache<R> {
    /// The recorder of `key`'s series if its note is `note`, else a new one
    /// from `make` that starts a series.
    fn recorder(&mut self, key: SeriesKey, note: String, now: Instant, make: impl FnOnce() -> R) -> R {
        if let Some((series_note, recorder, last_used)) = self.series.get_mut(&key)
            && *series_note == note
        {
            *last_used = now;
            return recorder.clone();
        }
        if self.series.len() >= PRUNE_FLOOR.max(self.pruned_to * 2) {
            self.series.retain(|_, (_, _, last_used)| now.saturating_duration_since(*last_used) < SERIES_IDLE);
            self.pruned_to = self.series.len();
        }
        if self.series.len() >= MAX_SERIES {
            self.series.clear();
            self.pruned_to = 0;
        }
        let recorder = make();
        self.series.insert(key, (note, recorder.clone(), now));
        recorder
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.series.len()
    }
}

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
        recorders.recorder(key, note, Instant::now(), || Recorder::new(self.client.clone(), self.reporter.clone()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(regarding: usize) -> SeriesKey {
        SeriesKey { regarding: format!("uid-{regarding}"), reason: "Created".into(), action: "Create".into() }
    }

    #[test]
    fn a_repeated_note_continues_its_series_and_a_new_note_starts_one() {
        let mut cache = SeriesCache::default();
        let now = Instant::now();
        let mut made = 0;
        let mut make = || {
            made += 1;
            made
        };
        assert_eq!(cache.recorder(key(1), "attempt 1/3".into(), now, &mut make), 1);
        assert_eq!(cache.recorder(key(1), "attempt 1/3".into(), now, &mut make), 1);
        assert_eq!(cache.recorder(key(1), "attempt 2/3".into(), now, &mut make), 2);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn series_idle_past_kubes_cache_ttl_are_dropped_as_the_map_grows() {
        let mut cache = SeriesCache::default();
        let start = Instant::now();
        for i in 0..PRUNE_FLOOR {
            cache.recorder(key(i), "note".into(), start, || i);
        }
        // One series stays in use; the rest go idle.
        let later = start + SERIES_IDLE;
        cache.recorder(key(0), "note".into(), later - Duration::from_secs(1), || usize::MAX);
        cache.recorder(key(PRUNE_FLOOR), "note".into(), later, || PRUNE_FLOOR);
        assert_eq!(cache.len(), 2, "the series in use and the new one");
        // Growing again: no scan until the map doubles past the floor.
        for i in PRUNE_FLOOR + 1..PRUNE_FLOOR + 100 {
            cache.recorder(key(i), "note".into(), later, || i);
        }
        assert_eq!(cache.len(), 101);
    }
}
