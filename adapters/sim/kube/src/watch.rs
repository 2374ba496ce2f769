//! Watch streams: newline-delimited JSON `WatchEvent`s, read from the store's
//! per-type history.
//!
//! A stream starts at a resourceVersion (or with synthetic ADDED events for
//! every object when none is given), sends ADDED/MODIFIED/DELETED as changes
//! land, BOOKMARKs when asked to, ends at `timeoutSeconds`, and ends with an
//! ERROR event carrying a 410 `Status` when its position is no longer in the
//! history, exactly as kube-rs's watcher expects from a real API server.
//! Fault injection may cut it after some change events (synthetic initial
//! events are not counted); clients resume from the last resourceVersion
//! they saw.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::counters::Counters;
use super::faults::{Faults, WatchCutPlan};
use super::resource::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Change, ChangeKind, Changes, StoreHandle, TypeKey};
use super::table::WatchPrinting;

/// Server-side default when a client sends no `timeoutSeconds` (the real API
/// server picks 30–60 minutes).
pub(crate) const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How often a held watch looks whether it was released.
const HELD_WATCH_POLL: Duration = Duration::from_millis(20);

/// Everything a watch request asked for.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub(crate) key: TypeKey,
    /// Objects go out in the core/v1 Event shape (see `event_view`).
    pub(crate) core_events: bool,
    pub(crate) rtype: ResourceType,
    /// The version the client asked for, used as the objects' apiVersion.
    pub(crate) version: String,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    /// `None` for an absent or `"0"` resourceVersion: start with the current objects.
    pub(crate) resource_version: Option<u64>,
    pub(crate) send_initial_events: bool,
    pub(crate) bookmarks: bool,
    pub(crate) timeout: Duration,
    /// `plural` for fault scoping.
    pub(crate) resource_label: String,
    /// Set for server-side printing (`kubectl get -w`).
    pub(crate) table: Option<WatchPrinting>,
}

/// What the stream needs from the server.
#[derive(Debug, Clone)]
pub(crate) struct WatchContext {
    pub(crate) store: StoreHandle,
    pub(crate) faults: Faults,
    pub(crate) counters: Counters,
    pub(crate) bookmark_interval: Duration,
}

/// A stream that only reports 410 Gone (an injected fault).
pub(crate) fn gone_body(counters: &Counters, message: &str) -> Body {
    counters.record_watch_gone();
    Body::from(error_line(&ApiError::gone(message)))
}

/// The streaming response body for a watch.
pub(crate) fn watch_body(context: WatchContext, request: WatchRequest) -> Body {
    let stream = WatchStream::start(context, request);
    Body::from_stream(futures_util::stream::unfold(stream, |mut stream| async move {
        let line = stream.next_line().await?;
        Some((Ok::<_, Infallible>(line), stream))
    }))
}

struct WatchStream {
    context: WatchContext,
    request: WatchRequest,
    /// Every change up to this resourceVersion has been considered.
    cursor: u64,
    /// Lines to send, flagged when they carry a change (counted for cuts).
    pending: VecDeque<(Bytes, bool)>,
    changes: Option<watch::Receiver<u64>>,
    deadline: Instant,
    next_bookmark: Instant,
    plan: WatchCutPlan,
    events_sent: u32,
    finished: bool,
}

impl WatchStream {
    fn start(context: WatchContext, request: WatchRequest) -> Self {
        let now = Instant::now();
        let plan = context.faults.watch_plan(&request.resource_label);
        let mut stream = Self {
            deadline: now + request.timeout,
            next_bookmark: now + context.bookmark_interval,
            context,
            cursor: 0,
            pending: VecDeque::new(),
            changes: None,
            plan,
            events_sent: 0,
            finished: false,
            request,
        };
        stream.open();
        stream
    }

    /// Subscribes and queues the initial events, under one store lock so no
    /// change slips between the snapshot and the subscription.
    fn open(&mut self) {
        let store = self.context.store.clone();
        let state = store.lock();
        let key = &self.request.key;
        let subscription = state.subscribe(key);
        let initial =
            (self.request.resource_version.is_none() || self.request.send_initial_events).then(|| state.snapshot(key));
        drop(state);
        match subscription {
            Ok(receiver) => self.changes = Some(receiver),
            Err(error) => return self.fail(&error),
        }
        match initial {
            Some(Ok((objects, resource_version))) => {
                for object in objects {
                    if self.selects(&object)
                        && let Some(line) = self.event_line("ADDED", &object)
                    {
                        // Not counted for cuts: a stream cut inside its initial
                        // state would restart it forever.
                        self.pending.push_back((line, false));
                    }
                }
                // Without an explicit version the stream starts "now".
                self.cursor = self.request.resource_version.unwrap_or(resource_version);
                if self.request.send_initial_events {
                    self.cursor = self.cursor.max(resource_version);
                    let line = self.bookmark_line(true);
                    self.pending.push_back((line, false));
                }
            }
            Some(Err(error)) => self.fail(&error),
            None => self.cursor = self.request.resource_version.unwrap_or_default(),
        }
    }

    fn fail(&mut self, error: &ApiError) {
        self.pending.push_back((error_line(error), false));
        self.finished = true;
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some((line, carries_object)) = self.pending.pop_front() {
                if carries_object {
                    self.after_object_event();
                }
                return Some(line);
            }
            if self.finished {
                return None;
            }
            if self.context.faults.watch_held(&self.request.resource_label) {
                // Held: the changes wait at the cursor and go out once released.
                tokio::select! {
                    () = tokio::time::sleep(HELD_WATCH_POLL) => continue,
                    () = sleep_until(self.deadline) => {
                        self.finished = true;
                        continue;
                    }
                }
            }
            self.read_changes();
            if !self.pending.is_empty() || self.finished {
                continue;
            }
            self.wait().await;
        }
    }

    /// Applies the cut plan after an object event was handed out.
    fn after_object_event(&mut self) {
        self.events_sent = self.events_sent.saturating_add(1);
        let cut = self.plan.after_events.is_some_and(|n| self.events_sent >= n)
            || self.context.faults.draw_cut(self.plan.probability);
        if cut {
            self.context.counters.record_watch_cut();
            self.pending.clear();
            self.finished = true;
        }
    }

    fn read_changes(&mut self) {
        let changes = self.context.store.lock().changes_since(&self.request.key, self.cursor);
        match changes {
            Ok(Changes::Events(changes, cursor)) => {
                for change in &changes {
                    if let Some(line) = self.change_line(change) {
                        self.pending.push_back((line, true));
                    }
                }
                self.cursor = cursor;
            }
            Ok(Changes::Gone { oldest }) => {
                self.context.counters.record_watch_gone();
                let message = format!("too old resource version: {} ({oldest})", self.cursor);
                self.fail(&ApiError::gone(message));
            }
            Err(error) => self.fail(&error),
        }
    }

    /// Waits for a change, a bookmark tick or the timeout.
    async fn wait(&mut self) {
        let Some(changes) = self.changes.as_mut() else {
            self.finished = true;
            return;
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    self.finished = true;
                }
            }
            () = sleep_until(self.deadline) => {
                // Like the API server, leave the client a fresh version to resume from.
                if self.request.bookmarks {
                    let line = self.bookmark_line(false);
                    self.pending.push_back((line, false));
                }
                self.finished = true;
            }
            () = sleep_until(self.next_bookmark), if self.request.bookmarks => {
                self.next_bookmark = Instant::now() + self.context.bookmark_interval;
                let line = self.bookmark_line(false);
                self.pending.push_back((line, false));
            }
        }
    }

    fn selects(&self, object: &Value) -> bool {
        let namespace_ok = self
            .request
            .namespace
            .as_deref()
            .is_none_or(|wanted| object.pointer("/metadata/namespace").and_then(Value::as_str) == Some(wanted));
        namespace_ok && self.request.labels.matches(object) && self.request.fields.matches(object)
    }

    /// The event a selector-filtered watcher sees for a change: a modification
    /// that moves an object into or out of the selection is ADDED or DELETED.
    fn change_line(&self, change: &Change) -> Option<Bytes> {
        let now = self.selects(&change.object);
        let event_type = match change.kind {
            ChangeKind::Added => now.then_some("ADDED"),
            ChangeKind::Deleted => now.then_some("DELETED"),
            ChangeKind::Modified => {
                let before = change.previous.as_deref().is_some_and(|p| self.selects(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }?;
        self.event_line(event_type, &change.object)
    }

    fn event_line(&self, event_type: &str, object: &Arc<Value>) -> Option<Bytes> {
        let api_version = self.request.rtype.api_version(&self.request.version);
        // The stored object already reads as asked (the common case): it is
        // written out as it is, not copied first (a shared object with a
        // finalizer per Server is thousands of strings).
        if !self.request.core_events
            && self.request.table.is_none()
            && object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str())
        {
            #[derive(serde::Serialize)]
            struct Event<'a> {
                #[serde(rename = "type")]
                event_type: &'a str,
                object: &'a Value,
            }
            let mut bytes = serde_json::to_vec(&Event { event_type, object }).ok()?;
            bytes.push(b'\n');
            return Some(Bytes::from(bytes));
        }
        let mut object = if self.request.core_events { super::event_view::to_core(object) } else { (**object).clone() };
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(api_version));
        }
        if let Some(printing) = &self.request.table {
            let now = self.context.store.lock().now();
            object = printing.one_row(object, now);
        }
        line(&json!({"type": event_type, "object": object}))
    }

    fn bookmark_line(&self, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": self.cursor.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let bookmark = json!({
            "type": "BOOKMARK",
            "object": {
                "kind": self.request.rtype.kind,
                "apiVersion": self.request.rtype.api_version(&self.request.version),
                "metadata": metadata,
            }
        });
        line(&bookmark).unwrap_or_default()
    }
}

fn error_line(error: &ApiError) -> Bytes {
    line(&json!({"type": "ERROR", "object": error.to_status()})).unwrap_or_default()
}

fn line(value: &Value) -> Option<Bytes> {
    let mut bytes = serde_json::to_vec(value).ok()?;
    bytes.push(b'\n');
    Some(Bytes::from(bytes))
}
