//! Kubernetes Events for the core's event reasons (events.k8s.io/v1),
//! reported by `server-controller`, with repeats folded into series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use server_core::reconcile::{Event, EventType};

use crate::error::api_code;

/// `reportingController` of every Event this operator emits.
pub const REPORTING_CONTROLLER: &str = "server-controller";

/// Publishes the core's events.
///
/// A repeat of (regarding, reason, action) with the same note continues
/// that Event's series (a count and a last-seen time, as kube-runtime's
/// `Recorder` and client-go's recorder do); a new note is a new Event a
/// person can read, so "attempt 3/3" is never hidden behind "attempt 2/3".
/// kube-runtime's `Recorder` is not used: it keeps the first note of a
/// series, scans its whole cache on every publish, and a recorder per
/// series held kilobytes each (tens of MB at 10,000 Servers). What is kept
/// here is the name of each series' Event, its note and its count.
#[derive(Clone)]
pub(crate) struct EventPublisher {
    client: Client,
    instance: String,
    series: Arc<Mutex<SeriesCache>>,
}

/// What a series is folded by (the reporter is the publisher's own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: String,
    reason: String,
    action: String,
}

/// The Event a series continues.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Series {
    note: String,
    /// The Event object's name.
    name: String,
    count: i32,
    last_used: Instant,
}

/// Past this many series the map is cleared: a repeat then starts a new
/// Event instead of a series, which loses nothing.
const MAX_SERIES: usize = 50_000;

/// kube-runtime's `CACHE_TTL`: a series idle this long is not continued;
/// its next repeat is a new Event.
const SERIES_IDLE: Duration = Duration::from_secs(6 * 60);

/// Idle series are looked for once the map doubled since the last look
/// (amortized O(1) per publish), and not below this size.
const PRUNE_FLOOR: usize = 1024;

/// Each series' Event, by what it folds.
#[derive(Debug, Default)]
struct SeriesCache {
    series: HashMap<SeriesKey, Series>,
    /// The size after the last pruning.
    pruned_to: usize,
}

/// What a publish sends: a new Event, or the next count of a series.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Publish {
    Start,
    Continue { name: String, count: i32 },
}

impl SeriesCache {
    /// What publishing `note` under `key` at `now` sends.
    fn next(&self, key: &SeriesKey, note: &str, now: Instant) -> Publish {
        match self.series.get(key) {
            Some(series) if series.note == note && now.saturating_duration_since(series.last_used) < SERIES_IDLE => {
                Publish::Continue { name: series.name.clone(), count: series.count.saturating_add(1) }
            }
            _ => Publish::Start,
        }
    }

    /// Records an Event the API server accepted.
    fn record(&mut self, key: SeriesKey, series: Series) {
        if !self.series.contains_key(&key) {
            if self.series.len() >= PRUNE_FLOOR.max(self.pruned_to * 2) {
                let now = series.last_used;
                self.series.retain(|_, kept| now.saturating_duration_since(kept.last_used) < SERIES_IDLE);
                self.pruned_to = self.series.len();
            }
            if self.series.len() >= MAX_SERIES {
                self.series.clear();
                self.pruned_to = 0;
            }
        }
        self.series.insert(key, series);
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

/// An event as published: the core's, or the adapter's own.
struct Published {
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
}

impl EventPublisher {
    pub(crate) fn new(client: Client, instance: Option<String>) -> Self {
        let instance = instance.unwrap_or_else(|| REPORTING_CONTROLLER.into());
        EventPublisher { client, instance, series: Arc::default() }
    }

    pub(crate) async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let type_ = match event.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let event = Published {
            type_,
            reason: event.reason.as_str().into(),
            action: event.action.into(),
            note: event.note.clone(),
        };
        self.publish_event(event, regarding).await
    }

    async fn publish_event(&self, event: Published, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let key = SeriesKey {
            regarding: regarding.uid.clone().or_else(|| regarding.name.clone()).unwrap_or_default(),
            reason: event.reason.clone(),
            action: event.action.clone(),
        };
        let next = self.cache().next(&key, &event.note, Instant::now());
        let api: Api<KubeEvent> =
            Api::namespaced(self.client.clone(), regarding.namespace.as_deref().unwrap_or("default"));
        let (name, count) = match next {
            Publish::Continue { name, count } => {
                let series = EventSeries { count, last_observed_time: MicroTime(crate::kube_api::precise_now()) };
                let series = json!({ "series": series });
                match api.patch(&name, &PatchParams::default(), &Patch::Merge(&series)).await {
                    Ok(_) => (name, count),
                    // The Event expired (the API server's event TTL): start anew.
                    Err(error) if api_code(&error) == Some(404) => self.create(&api, &event, regarding).await?,
                    Err(error) => return Err(error),
                }
            }
            Publish::Start => self.create(&api, &event, regarding).await?,
        };
        let series = Series { note: event.note, name, count, last_used: Instant::now() };
        self.cache().record(key, series);
        Ok(())
    }

    /// Creates the first Event of a series; its name and count.
    async fn create(
        &self,
        api: &Api<KubeEvent>,
        event: &Published,
        regarding: &ObjectReference,
    ) -> Result<(String, i32), kube::Error> {
        let now = crate::kube_api::precise_now();
        // kube-runtime's and client-go's naming: the object's name and the time.
        let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(REPORTING_CONTROLLER), now.as_nanosecond());
        let body = KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(event.type_.into()),
            reason: Some(event.reason.clone()),
            action: Some(event.action.clone()),
            note: Some(event.note.clone()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &body).await?;
        Ok((name, 1))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(regarding: usize) -> SeriesKey {
        SeriesKey { regarding: format!("uid-{regarding}"), reason: "Created".into(), action: "Create".into() }
    }

    fn series(note: &str, name: &str, count: i32, last_used: Instant) -> Series {
        Series { note: note.into(), name: name.into(), count, last_used }
    }

    #[test]
    fn a_repeated_note_continues_its_series_and_a_new_note_or_a_long_pause_starts_one() {
        let mut cache = SeriesCache::default();
        let now = Instant::now();
        assert_eq!(cache.next(&key(1), "attempt 1/3", now), Publish::Start);
        cache.record(key(1), series("attempt 1/3", "s.1", 1, now));
        assert_eq!(cache.next(&key(1), "attempt 1/3", now), Publish::Continue { name: "s.1".into(), count: 2 });
        assert_eq!(cache.next(&key(1), "attempt 2/3", now), Publish::Start, "a new note is a new Event");
        assert_eq!(cache.next(&key(2), "attempt 1/3", now), Publish::Start, "another Server's series");
        assert_eq!(cache.next(&key(1), "attempt 1/3", now + SERIES_IDLE), Publish::Start, "an idle series ended");
        cache.record(key(1), series("attempt 2/3", "s.2", 1, now));
        assert_eq!(cache.next(&key(1), "attempt 2/3", now), Publish::Continue { name: "s.2".into(), count: 2 });
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn series_idle_past_kubes_cache_ttl_are_dropped_as_the_map_grows() {
        let mut cache = SeriesCache::default();
        let start = Instant::now();
        for i in 0..PRUNE_FLOOR {
            cache.record(key(i), series("note", "e", 1, start));
        }
        // One series stays in use; the rest go idle.
        let later = start + SERIES_IDLE;
        cache.record(key(0), series("note", "e", 2, later - Duration::from_secs(1)));
        cache.record(key(PRUNE_FLOOR), series("note", "e", 1, later));
        assert_eq!(cache.len(), 2, "the series in use and the new one");
        // Growing again: no scan until the map doubles past the floor.
        for i in PRUNE_FLOOR + 1..PRUNE_FLOOR + 100 {
            cache.record(key(i), series("note", "e", 1, later));
        }
        assert_eq!(cache.len(), 101);
    }
}
