//! The reference writer: every reference finalizer a pass adds to or removes
//! from a consumed object (Network, SecurityGroup, SSHCertificateAuthority,
//! Identity) goes through one queue per object, and each queue is written
//! in batches: the changes that arrive while a write to the object is in
//! flight go out together in the next one. Hundreds of Servers on one
//! Network cost one Network write per batch, not one per Server, and the
//! operator never races itself on a shared object (one writer per object
//! per process; the Lease makes it one per cluster).
//!
//! A caller returns only once its change is durably written (the API server
//! accepted the patch that carries it) or has failed: the core's references
//! are held before the create and released only after the provider server
//! is gone (DESIGN, reference edges), so a pass may go past AddReference only
//! on a written reference. A write that loses a race (409, or a failed JSON
//! Patch `test`) is retried here against a fresh read, a bounded number of
//! times; it does not end the pass. Removal from an object that is gone is
//! done; an addition to one is an error naming it.
//!
//! # How a batch is written
//!
//! Two encodings were measured (`e2e_scale`, 300 Servers on one Network,
//! 16 passes at once, counted by SimKube; see docs/BENCH.md):
//!
//! - [`ReferencePatch::JsonPatch`] (the default): an RFC 6902 patch without
//!   a resourceVersion. Additions append (`add /metadata/finalizers/-`);
//!   each removal is a `test` of the finalizer at its index followed by a
//!   `remove` of that index (highest index first), so a list that moved
//!   under it fails the `test` (422) instead of removing someone else's
//!   finalizer. The body is the size of the batch, whatever the length of
//!   the list, and a write by anyone else to anything but the finalizers
//!   (the Network's status, labels) does not make it fail.
//! - [`ReferencePatch::GuardedMerge`]: the whole new finalizer list as a
//!   merge patch guarded by the resourceVersion. Same number of writes, but
//!   each body carries the whole list (it grows with the Servers: O(N) bytes
//!   per write, O(N²) for N Servers), and any write to the object in between
//!   (its own controller's status writes) is a conflict.
//!
//! Server-side apply with one field manager per Server was not taken: one
//! apply per field manager cannot be batched (N writes for N Servers, the
//! cost this writer removes), and each manager adds an entry to the object's
//! managedFields, so the stored object grows by a manager entry per Server.
//! (SimKube approximates apply without field ownership, so it cannot be
//! measured there honestly.)
//!
//! The writer remembers each object's finalizers as its last write or read
//! left them, so a batch needs no read: the first write to an object starts
//! from the cache's copy, and any after a lost race or a failure from a
//! live read (a list of one by name, which the operator's grants allow).
//! After a write it computes the list itself and reads only the new
//! resourceVersion from the answer, keeping the list's set beside it: a
//! batch costs its changes (and a comparison per entry to find a removal),
//! not a decode and a hash of a list that holds a reference per Server.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams};

use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use server_core::model::ResourceKind;
use server_core::{ActionFailure, ApiCause, ApiFailure, NotSent};
use tokio::sync::oneshot;
use tracing::debug;

use crate::crd::{Identity, Network, SSHCertificateAuthority, SecurityGroup};
use crate::error::{api_cause, api_code, short_message};
use crate::freshness::{TermFloors, version_of};
use crate::metrics::Metrics;

/// How a batch of reference changes is encoded (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReferencePatch {
    /// RFC 6902: appends, and `test`-guarded removals by index; no resourceVersion.
    #[default]
    JsonPatch,
    /// The whole finalizer list as a merge patch guarded by the resourceVersion.
    GuardedMerge,
}

/// How long a flush waits for more changes to the same object before it
/// writes: passes that reach their AddReference within it share one write.
/// Small beside a pass (which waits on the API server and the cloud).
const LINGER: Duration = Duration::from_millis(20);

/// The longest a busy object's flush waits on a quick API server (see
/// [`linger_cap`]).
const LINGER_MAX: Duration = Duration::from_millis(320);

/// The longest a busy object's flush waits on any API server.
const LINGER_CEILING: Duration = Duration::from_secs(3);

/// A busy object's flush may wait this many times the time the API server
/// takes to answer a reference write (see [`linger_cap`]).
const LINGER_PER_ANSWER: u32 = 8;

/// Any object's flush waits at least this many times the time the API
/// server takes to answer a reference write (see [`linger_floor`]).
const LINGER_FLOOR_ANSWERS: u32 = 2;

/// The most changes one write carries (a removal is two JSON Patch
/// operations; kube-apiserver refuses a patch of more than 10,000).
const BATCH_MAX: usize = 1000;

/// The wait before an object's next batch: doubled, up to `cap`, after a
/// batch that gathered several changes (many passes use the object: waiting
/// longer puts more of them in one write, and a pass waits on it without
/// its slot), halved back towards `floor` after a lone change (a quiet
/// object answers soon).
fn next_linger(linger: Duration, batch: usize, floor: Duration, cap: Duration) -> Duration {
    if batch > 1 { (linger * 2).min(cap) } else { (linger / 2).max(floor) }
}

/// How long any object's flush waits at least, given how long the API
/// server takes to answer a reference write: [`LINGER`] on a quick server;
/// on a loaded one, a couple of answers' time (see [`linger_cap`]), so
/// that the Servers reaching an object a few a second share its writes.
fn linger_floor(answer: Duration) -> Duration {
    (answer * LINGER_FLOOR_ANSWERS).clamp(LINGER, LINGER_MAX)
}

/// How long a busy object's flush may wait, given how long the API server
/// takes to answer a reference write. A quick server (answers in
/// milliseconds) keeps passes quick: [`LINGER_MAX`]. A loaded one answers
/// each of a pass's writes in tenths of a second, so a pass already takes
/// seconds and the server, not the passes at once, sets the pace; there a
/// wait of a few answers costs a pass little, while it gathers the Servers
/// that reach the object meanwhile into one write, which is what unloads
/// that server (every reference write rewrites an object that holds a
/// finalizer per Server using it).
fn linger_cap(answer: Duration) -> Duration {
    (answer * LINGER_PER_ANSWER).clamp(LINGER_MAX, LINGER_CEILING)
}

/// A moving average of how long reference writes take to be answered,
/// shared by every object's flush.
#[derive(Debug, Default)]
struct AnswerTime {
    micros: AtomicU64,
}

impl AnswerTime {
    fn get(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }

    /// Folds in one answer's time, weighing it an eighth.
    fn note(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self.micros.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
            Some(if average == 0 { took } else { average - average / 8 + took / 8 })
        });
    }
}

/// Writes a batch at most this many times (a fresh read before each retry)
/// before its callers are told it conflicted.
const ATTEMPTS: usize = 5;

/// One object a reference is held on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    pub(crate) kind: ResourceKind,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

/// The finalizers of an object as this writer last wrote or read them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Known {
    resource_version: String,
    /// `None`: the object has no `finalizers` field.
    finalizers: Option<Vec<Arc<str>>>,
    /// The same finalizers as a set, kept with the list: a batch asks it
    /// which changes are needed without hashing a shared object's whole
    /// list (a reference per Server using it). Its strings are the list's.
    present: HashSet<Arc<str>>,
}

/// One shared copy of each finalizer the writer's known lists hold: a
/// Server's reference is the same string on every object it uses (its
/// Network, SecurityGroup, Identity, SSH CA), and the lists of shared
/// objects hold one per Server using them.
#[derive(Debug, Default)]
struct Interner {
    strings: HashSet<Arc<str>>,
    /// How many were held after the last sweep.
    swept_to: usize,
}

/// The interner sweeps out what no list holds once it doubled since the
/// last sweep, and not below this many.
const INTERNED_BEFORE_A_SWEEP: usize = 1024;

impl Interner {
    fn intern(&mut self, finalizer: &str) -> Arc<str> {
        if let Some(held) = self.strings.get(finalizer) {
            return held.clone();
        }
        if self.strings.len() >= (2 * self.swept_to).max(INTERNED_BEFORE_A_SWEEP) {
            self.strings.retain(|held| Arc::strong_count(held) > 1);
            self.swept_to = self.strings.len();
        }
        let interned: Arc<str> = Arc::from(finalizer);
        self.strings.insert(interned.clone());
        interned
    }
}

impl Known {
    fn new(resource_version: Option<String>, finalizers: Option<Vec<String>>, names: &mut Interner) -> Self {
        let finalizers: Option<Vec<Arc<str>>> =
            finalizers.map(|list| list.iter().map(|finalizer| names.intern(finalizer)).collect());
        let present = finalizers.iter().flatten().cloned().collect();
        Known { resource_version: resource_version.unwrap_or_default(), finalizers, present }
    }

    /// The list as it reads on the wire (`None`: no field).
    fn finalizer_list(&self) -> Option<Vec<&str>> {
        self.finalizers.as_ref().map(|list| list.iter().map(|finalizer| &**finalizer).collect())
    }

    /// The list as a written `change` left it, at `resource_version`: the
    /// writer computes it rather than decoding the answer's whole list.
    /// Should anyone else have changed the list meanwhile, the next write's
    /// `test` (or resourceVersion) fails and the list is read again.
    fn after(mut self, change: &ListChange<'_>, resource_version: Option<String>, names: &mut Interner) -> Self {
        let mut list = self.finalizers.take().unwrap_or_default();
        if !change.removed.is_empty() {
            // One pass over the list, whatever the number of removals.
            let mut removed = change.removed.iter().rev().map(|(position, _)| *position).peekable();
            let mut position = 0;
            list.retain(|_| {
                let gone = removed.next_if_eq(&position).is_some();
                position += 1;
                !gone
            });
            for (_, finalizer) in &change.removed {
                self.present.remove(*finalizer);
            }
        }
        for finalizer in &change.added {
            let finalizer = names.intern(finalizer);
            list.push(finalizer.clone());
            self.present.insert(finalizer);
        }
        // kube-apiserver drops an emptied list (`omitempty`).
        self.finalizers = (!list.is_empty()).then_some(list);
        self.resource_version = resource_version.unwrap_or_default();
        self
    }
}

/// What a batch changes in a list: the positions it removes (highest
/// first, each with the finalizer there) and the finalizers it appends.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListChange<'a> {
    removed: Vec<(usize, &'a str)>,
    added: Vec<&'a str>,
}

impl ListChange<'_> {
    fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// Up to this many removals in a batch are found by comparing the list's
/// entries to each; past it, by one pass hashing every entry.
const REMOVALS_SCANNED: usize = 16;

/// The change that takes `current` to the `wanted` changes (the last change
/// of a finalizer in the batch wins): removals of finalizers it holds, at
/// every position each sits, and appends of those it lacks. O(batch) but
/// for finding the removed ones' positions, which is a comparison per entry
/// and removal (no hashing of the list).
fn list_change<'w>(current: &Known, wanted: &[(&'w str, bool)]) -> ListChange<'w> {
    let list = current.finalizers.as_deref().unwrap_or_default();
    let removing: Vec<&'w str> =
        wanted.iter().filter(|(f, add)| !add && current.present.contains(*f)).map(|(f, _)| *f).collect();
    let mut removed: Vec<(usize, &'w str)> = if removing.is_empty() {
        Vec::new()
    } else if removing.len() <= REMOVALS_SCANNED {
        let matching = |f: &Arc<str>| removing.iter().find(|r| **r == &**f).copied();
        list.iter().enumerate().filter_map(|(i, f)| matching(f).map(|r| (i, r))).collect()
    } else {
        let removing: HashSet<&'w str> = removing.into_iter().collect();
        list.iter().enumerate().filter_map(|(i, f)| removing.get(&**f).map(|r| (i, *r))).collect()
    };
    removed.reverse();
    let added = wanted.iter().filter(|(f, add)| *add && !current.present.contains(*f)).map(|(f, _)| *f).collect();
    ListChange { removed, added }
}

/// A caller's change, and where its result goes.
struct Request {
    finalizer: String,
    add: bool,
    done: oneshot::Sender<Result<(), ActionFailure>>,
}

/// One object's queue.
#[derive(Default)]
struct Queue {
    pending: Vec<Request>,
    /// A flush task is running for the object: it takes `pending` when its
    /// current write is done.
    flushing: bool,
    known: Option<Known>,
}

/// How many objects an idle writer remembers. What it knows of an object
/// (its finalizers as last written) spares a write when a lagging cache
/// still shows the object without a reference this writer added; past this
/// many objects the idle ones are forgotten, and a change to one starts from
/// the cache's copy again (at worst one redundant write or a conflict).
const IDLE_KEPT: usize = 1024;

/// The next batch of `target`'s queue and what is known of the object;
/// `None` when nothing is pending (its flush ends). Idle queues are dropped
/// once more than [`IDLE_KEPT`] objects have one.
fn take_batch(queues: &mut HashMap<Target, Queue>, target: &Target) -> Option<(Vec<Request>, Option<Known>)> {
    let queue = queues.get_mut(target)?;
    if queue.pending.is_empty() {
        queue.flushing = false;
        if queues.len() > IDLE_KEPT {
            queues.retain(|_, queue| queue.flushing || !queue.pending.is_empty());
        }
        return None;
    }
    let batch = if queue.pending.len() > BATCH_MAX {
        queue.pending.drain(..BATCH_MAX).collect()
    } else {
        std::mem::take(&mut queue.pending)
    };
    Some((batch, queue.known.take()))
}

/// The coalescing writer; one per operator, shared by every pass.
pub(crate) struct ReferenceWriter {
    client: Client,
    encoding: ReferencePatch,
    metrics: Arc<dyn Metrics>,
    /// Where each answered write's version goes, so a release waits for a
    /// cache to apply it (see `freshness`).
    floors: Arc<TermFloors>,
    queues: Mutex<HashMap<Target, Queue>>,
    names: Mutex<Interner>,
    answer_time: AnswerTime,
}

impl std::fmt::Debug for ReferenceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceWriter").field("encoding", &self.encoding).finish_non_exhaustive()
    }
}

/// What one batch came to, for each of its requests.
enum BatchResult {
    Written,
    /// The object does not exist: removals are done, additions fail.
    Gone,
    Failed(ActionFailure),
}

impl ReferenceWriter {
    pub(crate) fn new(
        client: Client,
        encoding: ReferencePatch,
        metrics: Arc<dyn Metrics>,
        floors: Arc<TermFloors>,
    ) -> Arc<Self> {
        Arc::new(ReferenceWriter {
            client,
            encoding,
            metrics,
            floors,
            queues: Mutex::default(),
            names: Mutex::default(),
            answer_time: AnswerTime::default(),
        })
    }

    /// Adds (`add`) or removes this finalizer on `target`; returns once the
    /// change is written, or failed. `cached` is the object's metadata as a
    /// cache holds it: the first write to an object starts from it instead
    /// of a read (a stale copy fails a `test` or the resourceVersion and is
    /// read again).
    pub(crate) async fn set(
        self: &Arc<Self>,
        target: Target,
        finalizer: &str,
        add: bool,
        cached: impl FnOnce() -> Option<ObjectMeta>,
    ) -> Result<(), ActionFailure> {
        let (target_kind, target_name) = (target.kind, target.name.clone());
        let (done, result) = oneshot::channel();
        let start_flush = self.with_queues(|queues| {
            let queue = queues.entry(target.clone()).or_insert_with(|| Queue {
                known: cached().map(|meta| self.known(meta.resource_version, meta.finalizers)),
                ..Queue::default()
            });
            queue.pending.push(Request { finalizer: finalizer.to_owned(), add, done });
            !std::mem::replace(&mut queue.flushing, true)
        });
        if start_flush {
            // A task of its own: a pass dropped mid-flight (shutdown) must not
            // strand the queue with a flush nobody finishes.
            let writer = Arc::clone(self);
            tokio::spawn(async move { writer.flush(target).await });
        }
        result.await.unwrap_or_else(|_| {
            let what = format!("writing references on {} {}", target_kind.as_str(), target_name);
            Err(ActionFailure::Api(ApiFailure::new(what, ApiCause::NotSent(NotSent::Stopping))))
        })
    }

    fn known(&self, resource_version: Option<String>, finalizers: Option<Vec<String>>) -> Known {
        Known::new(resource_version, finalizers, &mut self.names())
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Interner> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with_queues<R>(&self, f: impl FnOnce(&mut HashMap<Target, Queue>) -> R) -> R {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut queues)
    }

    /// Writes the object's pending changes, batch after batch, until none is left.
    async fn flush(self: Arc<Self>, target: Target) {
        let mut linger = linger_floor(self.answer_time.get());
        loop {
            tokio::time::sleep(linger).await;
            let taken = self.with_queues(|queues| take_batch(queues, &target));
            let Some((batch, known)) = taken else { return };
            let answer = self.answer_time.get();
            linger = next_linger(linger, batch.len(), linger_floor(answer), linger_cap(answer));
            let (result, known) = self.write_batch(&target, &batch, known).await;
            self.with_queues(|queues| queues.entry(target.clone()).or_default().known = known);
            for request in batch {
                let outcome = match &result {
                    BatchResult::Written => Ok(()),
                    BatchResult::Gone if !request.add => Ok(()),
                    BatchResult::Gone => Err(ActionFailure::Api(ApiFailure::new(
                        "adding a reference",
                        ApiCause::Missing { kind: target.kind, name: target.name.clone() },
                    ))),
                    BatchResult::Failed(failure) => Err(failure.clone()),
                };
                // A caller that went away (shutdown) needs no answer.
                let _ = request.done.send(outcome);
            }
        }
    }

    /// Writes one batch, retrying against a fresh read when it loses a
    /// race; returns what came of it and the object as it now stands.
    async fn write_batch(
        &self,
        target: &Target,
        batch: &[Request],
        mut known: Option<Known>,
    ) -> (BatchResult, Option<Known>) {
        // The last change of a finalizer in the batch wins.
        let mut wanted: Vec<(&str, bool)> = Vec::new();
        for request in batch {
            wanted.retain(|(finalizer, _)| *finalizer != request.finalizer);
            wanted.push((&request.finalizer, request.add));
        }
        let api = self.api(target);
        let what = target.kind.as_str();
        for attempt in 0..ATTEMPTS {
            let current = match known.take() {
                Some(current) => current,
                // A list of one by name: the operator may list these kinds
                // (it caches them), so a re-read needs no other grant.
                None => {
                    match api.list(&ListParams::default().fields(&format!("metadata.name={}", target.name))).await {
                        Ok(list) => match list.items.first() {
                            Some(object) => {
                                let meta = object.meta();
                                self.known(meta.resource_version.clone(), meta.finalizers.clone())
                            }
                            None => return (BatchResult::Gone, None),
                        },
                        Err(error) => {
                            let failure = ApiFailure::new(format!("reading {what} {}", target.name), api_cause(&error));
                            return (BatchResult::Failed(ActionFailure::Api(failure)), None);
                        }
                    }
                }
            };
            let change = list_change(&current, &wanted);
            if change.is_empty() {
                return (BatchResult::Written, Some(current));
            }
            let sending = std::time::Instant::now();
            let sent = match self.encoding {
                ReferencePatch::JsonPatch => {
                    self.patch(target, &Patch::Json::<()>(json_patch_for(&current, &change))).await
                }
                ReferencePatch::GuardedMerge => {
                    self.patch(target, &Patch::Merge(guarded_merge_for(&current, &change))).await
                }
            };
            // The pace of the server's answers; a failure without one says nothing of it.
            let answered = match &sent {
                Ok(_) => true,
                Err(error) => matches!(api_code(error), Some(409 | 422)),
            };
            if answered {
                self.answer_time.note(sending.elapsed());
            }
            match sent {
                Ok(resource_version) => {
                    let version = version_of(resource_version.as_deref());
                    for (finalizer, add) in &wanted {
                        self.floors.written(target.kind, finalizer, *add, version);
                    }
                    self.metrics.reference_batch_written(target.kind, batch.len(), attempt);
                    debug!(
                        kind = what,
                        name = %target.name,
                        changes = batch.len(),
                        attempt,
                        took_ms = sending.elapsed().as_millis(),
                        "references written"
                    );
                    let known = current.after(&change, resource_version, &mut self.names());
                    return (BatchResult::Written, Some(known));
                }
                Err(error) if api_code(&error) == Some(404) => return (BatchResult::Gone, None),
                // Lost a race: a changed resourceVersion (409) or a list that
                // moved under a `test` (422). Read again and retry.
                Err(error) if matches!(api_code(&error), Some(409 | 422)) => {
                    debug!(kind = what, name = %target.name, attempt, error = %short_message(&error), "reference write lost a race; retrying");
                }
                Err(error) => {
                    let cause = api_cause(&error);
                    if matches!(cause, ApiCause::NoAnswer(_)) {
                        self.floors.write_unanswered(target.kind);
                    }
                    let failure = ApiFailure::new(format!("writing references on {what} {}", target.name), cause);
                    return (BatchResult::Failed(ActionFailure::Api(failure)), None);
                }
            }
        }
        let failure = ApiFailure::new(
            format!("writing references on {what} {}", target.name),
            ApiCause::StillConflicting { attempts: ATTEMPTS },
        );
        (BatchResult::Failed(ActionFailure::Conflict(failure)), None)
    }

    fn resource(&self, kind: ResourceKind) -> ApiResource {
        match kind {
            ResourceKind::Network => ApiResource::erase::<Network>(&()),
            ResourceKind::SecurityGroup => ApiResource::erase::<SecurityGroup>(&()),
            ResourceKind::SshCertificateAuthority => ApiResource::erase::<SSHCertificateAuthority>(&()),
            ResourceKind::Identity => ApiResource::erase::<Identity>(&()),
        }
    }

    fn api(&self, target: &Target) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &target.namespace, &self.resource(target.kind))
    }

    /// Sends `patch` to the target; the object's new resourceVersion. Only
    /// that is decoded from the answer: the whole object holds a finalizer
    /// per Server using it, and decoding it for every batch made each write
    /// O(Servers).
    async fn patch<P: serde::Serialize>(
        &self,
        target: &Target,
        patch: &Patch<P>,
    ) -> Result<Option<String>, kube::Error> {
        let url = DynamicObject::url_path(&self.resource(target.kind), Some(&target.namespace));
        let request = kube::core::Request::new(url)
            .patch(&target.name, &PatchParams::default(), patch)
            .map_err(kube::Error::BuildRequest)?;
        let answer: Answer = self.client.request(request).await?;
        Ok(answer.metadata.resource_version)
    }
}

/// The part of a patch's answer the writer reads.
#[derive(serde::Deserialize)]
struct Answer {
    metadata: AnswerMetadata,
}

#[derive(serde::Deserialize)]
struct AnswerMetadata {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
}

/// RFC 6902 operations for `change`: removals (each guarded by a `test` of
/// its index, highest index first so the others stay put), then appends.
fn json_patch_for(current: &Known, change: &ListChange<'_>) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
    let list_path = || PointerBuf::from_tokens(["metadata", "finalizers"]);
    let mut operations = Vec::with_capacity(2 * change.removed.len() + change.added.len());
    for (index, finalizer) in &change.removed {
        let path = PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]);
        operations.push(PatchOperation::Test(TestOperation { path: path.clone(), value: json!(finalizer) }));
        operations.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    if !change.added.is_empty() {
        if current.finalizers.as_ref().is_none_or(Vec::is_empty) {
            // No list to append to: create it, guarded by what was read (a
            // missing field tests as null), so no finalizer added meanwhile
            // is overwritten.
            operations.push(PatchOperation::Test(TestOperation {
                path: list_path(),
                value: json!(current.finalizer_list()),
            }));
            operations.push(PatchOperation::Add(AddOperation { path: list_path(), value: json!(change.added) }));
        } else {
            operations.extend(change.added.iter().map(|finalizer| {
                let path = PointerBuf::from_tokens(["metadata", "finalizers", "-"]);
                PatchOperation::Add(AddOperation { path, value: json!(finalizer) })
            }));
        }
    }
    json_patch::Patch(operations)
}

/// The whole new list, guarded by the resourceVersion it was computed from.
fn guarded_merge_for(current: &Known, change: &ListChange<'_>) -> Value {
    let list = current.finalizers.as_deref().unwrap_or_default();
    let removed: HashSet<usize> = change.removed.iter().map(|(position, _)| *position).collect();
    let kept = list.iter().enumerate().filter(|(i, _)| !removed.contains(i)).map(|(_, f)| &**f);
    let next: Vec<&str> = kept.chain(change.added.iter().copied()).collect();
    json!({ "metadata": { "resourceVersion": current.resource_version, "finalizers": next } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(finalizers: Option<&[&str]>) -> Known {
        let finalizers = finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect());
        Known::new(Some("7".into()), finalizers, &mut Interner::default())
    }

    #[test]
    fn a_finalizer_is_held_once_across_objects_and_swept_when_no_list_holds_it() {
        let mut names = Interner::default();
        let network = Known::new(None, Some(vec!["servers.x/a".into()]), &mut names);
        let group = Known::new(None, Some(vec!["servers.x/a".into()]), &mut names);
        let first = |known: &Known| known.finalizers.iter().flatten().next().cloned().expect("one finalizer");
        assert!(Arc::ptr_eq(&first(&network), &first(&group)), "one copy for both objects");
        drop((network, group));
        for n in 0..INTERNED_BEFORE_A_SWEEP {
            let _ = names.intern(&format!("servers.x/{n}"));
        }
        assert!(names.strings.len() <= INTERNED_BEFORE_A_SWEEP, "what no list held was swept: {}", names.strings.len());
        assert!(!names.strings.contains("servers.x/a"));
    }

    /// The patch of `wanted` on `current`, and the list the writer then
    /// believes the object holds.
    fn json_patch_of(current: &Known, wanted: &[(&str, bool)]) -> Option<(json_patch::Patch, Value)> {
        let change = list_change(current, wanted);
        let believed = current.clone().after(&change, Some("8".into()), &mut Interner::default());
        (!change.is_empty()).then(|| (json_patch_for(current, &change), json!(believed.finalizer_list())))
    }

    fn apply(current: &Known, patch: &json_patch::Patch) -> Result<Value, json_patch::PatchError> {
        // A missing list reads as null, as the API server's JSON Patch tests it.
        let mut document = json!({ "metadata": { "name": "n", "finalizers": current.finalizer_list() } });
        json_patch::patch(&mut document, patch).map(|()| document["metadata"]["finalizers"].clone())
    }

    #[test]
    fn a_busy_object_lingers_longer_up_to_a_bound_and_a_quiet_one_back_down() {
        let mut linger = LINGER;
        let mut seen = vec![linger];
        for _ in 0..6 {
            linger = next_linger(linger, 5, LINGER, LINGER_MAX);
            seen.push(linger);
        }
        assert_eq!(seen.last(), Some(&LINGER_MAX));
        assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
        for _ in 0..6 {
            linger = next_linger(linger, 1, LINGER, LINGER_MAX);
        }
        assert_eq!(linger, LINGER);
    }

    #[test]
    fn a_slow_api_server_lets_a_busy_object_linger_longer_within_a_ceiling() {
        assert_eq!(linger_cap(Duration::ZERO), LINGER_MAX, "no answer timed yet");
        assert_eq!(linger_cap(Duration::from_millis(3)), LINGER_MAX, "a quick server keeps passes quick");
        assert_eq!(linger_cap(Duration::from_millis(150)), Duration::from_millis(1200));
        assert_eq!(linger_cap(Duration::from_secs(2)), LINGER_CEILING);
        let answer = Duration::from_millis(150);
        let mut linger = linger_floor(answer);
        assert_eq!(linger, Duration::from_millis(300), "a loaded server: two answers' time");
        for _ in 0..10 {
            linger = next_linger(linger, 5, linger_floor(answer), linger_cap(answer));
        }
        assert_eq!(linger, Duration::from_millis(1200));
        for _ in 0..10 {
            linger = next_linger(linger, 1, linger_floor(answer), linger_cap(answer));
        }
        assert_eq!(linger, Duration::from_millis(300), "never below the floor");
        assert_eq!(linger_floor(Duration::from_millis(3)), LINGER, "a quick server: the least wait");
    }

    #[test]
    fn the_answer_time_follows_recent_answers() {
        let time = AnswerTime::default();
        time.note(Duration::from_millis(200));
        assert_eq!(time.get(), Duration::from_millis(200), "the first answer is the average");
        for _ in 0..64 {
            time.note(Duration::from_millis(2));
        }
        assert!(time.get() < Duration::from_millis(4), "{:?}", time.get());
    }

    #[test]
    fn a_batch_carries_at_most_its_bound_and_leaves_the_rest_in_order() {
        let target =
            Target { kind: server_core::model::ResourceKind::Network, namespace: "ns".into(), name: "n".into() };
        let request = |i: usize| Request { finalizer: format!("f{i}"), add: true, done: oneshot::channel().0 };
        let mut queues = HashMap::new();
        queues.insert(
            target.clone(),
            Queue { pending: (0..BATCH_MAX + 3).map(request).collect(), flushing: true, known: None },
        );
        let first = take_batch(&mut queues, &target).map(|(batch, _)| batch).unwrap_or_default();
        assert_eq!(first.len(), BATCH_MAX);
        assert_eq!(first[0].finalizer, "f0");
        let rest: Vec<String> = take_batch(&mut queues, &target)
            .map(|(batch, _)| batch.into_iter().map(|r| r.finalizer).collect())
            .unwrap_or_default();
        assert_eq!(rest, (BATCH_MAX..BATCH_MAX + 3).map(|i| format!("f{i}")).collect::<Vec<_>>());
        assert!(take_batch(&mut queues, &target).is_none());
    }

    #[test]
    fn idle_queues_are_kept_up_to_a_bound_and_then_forgotten() {
        let target = |i: usize| Target {
            kind: server_core::model::ResourceKind::Network,
            namespace: "ns".into(),
            name: format!("n{i}"),
        };
        let busy = || {
            let (done, _answer) = oneshot::channel();
            let request = Request { finalizer: "f".into(), add: true, done };
            Queue { pending: vec![request], flushing: true, known: Some(known(None)) }
        };
        let mut queues = HashMap::from([(target(0), busy())]);
        let (batch, known) = take_batch(&mut queues, &target(0)).expect("a batch is pending");
        assert_eq!((batch.len(), known.is_some()), (1, true));
        assert!(take_batch(&mut queues, &target(0)).is_none());
        assert!(queues.get(&target(0)).is_some_and(|q| !q.flushing), "an idle object is remembered");
        for i in 1..=IDLE_KEPT {
            queues.insert(target(i), Queue::default());
        }
        queues.insert(target(IDLE_KEPT + 1), busy());
        assert!(take_batch(&mut queues, &target(1)).is_none());
        assert_eq!(queues.len(), 1, "past the bound only the busy queue stays");
        assert!(queues.contains_key(&target(IDLE_KEPT + 1)));
    }

    #[test]
    fn a_batch_appends_and_removes_by_tested_index() {
        let current = known(Some(&["other", "a", "b", "c"]));
        let (patch, believed) =
            json_patch_of(&current, &[("a", false), ("d", true), ("c", false), ("e", true)]).expect("changes");
        assert_eq!(apply(&current, &patch).ok(), Some(json!(["other", "b", "d", "e"])));
        assert_eq!(believed, json!(["other", "b", "d", "e"]), "the writer's list is what the server made");
        // The body names the batch, not the list.
        assert!(!serde_json::to_string(&patch).unwrap_or_default().contains("other"));
    }

    #[test]
    fn every_copy_of_a_removed_finalizer_goes_and_many_removals_are_found_alike() {
        let current = known(Some(&["a", "x", "a"]));
        let (patch, believed) = json_patch_of(&current, &[("a", false)]).expect("a removal");
        assert_eq!(apply(&current, &patch).ok(), Some(json!(["x"])));
        assert_eq!(believed, json!(["x"]));
        let names: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
        let list: Vec<&str> = names.iter().map(String::as_str).collect();
        let current = known(Some(&list));
        let wanted: Vec<(&str, bool)> = list.iter().step_by(2).map(|f| (*f, false)).collect();
        assert!(wanted.len() > REMOVALS_SCANNED);
        let (patch, believed) = json_patch_of(&current, &wanted).expect("removals");
        let left: Vec<&str> = list.iter().skip(1).step_by(2).copied().collect();
        assert_eq!(apply(&current, &patch).ok(), Some(json!(left)));
        assert_eq!(believed, json!(left));
    }

    #[test]
    fn a_list_that_moved_fails_the_test_instead_of_removing_another_finalizer() {
        let read = known(Some(&["a", "b"]));
        let (patch, _) = json_patch_of(&read, &[("b", false)]).expect("a removal");
        // Someone removed "a" since: index 1 is gone or holds something else.
        assert!(apply(&known(Some(&["b"])), &patch).is_err());
        assert!(apply(&known(Some(&["b", "x"])), &patch).is_err());
    }

    #[test]
    fn the_first_finalizer_creates_the_list_only_if_there_is_none() {
        let absent = known(None);
        let (patch, believed) = json_patch_of(&absent, &[("a", true)]).expect("an addition");
        assert_eq!(apply(&absent, &patch).ok(), Some(json!(["a"])));
        assert_eq!(believed, json!(["a"]));
        assert!(apply(&known(Some(&["x"])), &patch).is_err(), "a list added meanwhile is not overwritten");
        let emptied = known(Some(&["a"]));
        let (_, believed) = json_patch_of(&emptied, &[("a", false)]).expect("a removal");
        assert_eq!(believed, Value::Null, "an emptied list is dropped, as kube-apiserver stores it");
    }

    #[test]
    fn nothing_to_do_is_no_write() {
        let current = known(Some(&["a"]));
        assert!(list_change(&current, &[("a", true), ("b", false)]).is_empty());
    }

    #[test]
    fn the_guarded_merge_carries_the_whole_list_and_the_version() {
        let current = known(Some(&["other", "a"]));
        let body = guarded_merge_for(&current, &list_change(&current, &[("a", false), ("b", true)]));
        assert_eq!(body, json!({ "metadata": { "resourceVersion": "7", "finalizers": ["other", "b"] } }));
    }
}
