//! The object store: objects, resourceVersions, generation rules, finalizers
//! and the bounded per-type event history that watches read.
//!
//! One global resourceVersion counter orders every write, as etcd's revision
//! does. Each write appends to its type's history; a watch from version `v`
//! is served from that history while it still holds every event after `v`,
//! and gets `410 Gone` once older events were dropped (bounded history) or
//! compacted ([`StoreHandle::compact`]).
//!
//! The history is bounded like kube-apiserver's watch cache (the cacher's
//! cyclic buffer of recent events, `k8s.io/apiserver/pkg/storage/cacher`):
//! by a number of changes and by the bytes the retained versions hold, so a
//! type of large objects (Servers with 32 KB of user data) keeps fewer
//! changes. As there, a watch or continued list from a resourceVersion older
//! than the oldest retained change is answered `410 Gone` (reason
//! `Expired`, "too old resource version") and the client relists.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::event_view::is_core_events;
use super::object::{
    approximate_bytes, finalizers, fits_in_etcd, generation, is_deleting, meta_mut, meta_str, spec_differs,
};
use super::paging::{self, Continue};
use super::patch::{Patch, PatchKind};
use super::resource::ResourceType;
use super::schema::{self, FieldValidation};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Subject};
use super::validation;

/// Source of wall-clock time for `creationTimestamp` and `deletionTimestamp`.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// `(group, plural)`: how the store keys a resource type.
pub(crate) type TypeKey = (String, String);

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
type ObjectKey = (String, String);

/// The kind of a change, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One change in a type's history.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) resource_version: u64,
    pub(crate) kind: ChangeKind,
    pub(crate) object: Arc<Value>,
    /// The state before a modification or deletion: selector-filtered watches
    /// turn "stopped matching" into DELETED and "started matching" into
    /// ADDED, and continued lists read the state at their version.
    pub(crate) previous: Option<Arc<Value>>,
    /// When it was recorded (real time: how long history is kept is the
    /// server's memory policy, whatever clock its timestamps come from).
    pub(crate) recorded: Instant,
}

impl Change {
    /// A change recorded now.
    fn new(resource_version: u64, kind: ChangeKind, object: Arc<Value>, previous: Option<Arc<Value>>) -> Self {
        Change { resource_version, kind, object, previous, recorded: Instant::now() }
    }

    /// What this entry can keep alive: both versions it holds.
    fn retained_bytes(&self) -> usize {
        approximate_bytes(&self.object) + self.previous.as_deref().map_or(0, approximate_bytes)
    }
}

/// How much history each type keeps for watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HistoryLimit {
    /// Changes retained at most.
    pub(crate) changes: usize,
    /// Bytes of object versions the retained changes may hold (see
    /// [`approximate_bytes`]); the newest change is kept whatever its size.
    pub(crate) bytes: usize,
    /// A change younger than this is kept past both limits (up to
    /// [`FRESH_CHANGES_BACKSTOP`] and [`FRESH_BYTES_BACKSTOP`]), so a client
    /// a few seconds behind, or paging through a large list, is not sent
    /// back to relist while changes arrive fast.
    pub(crate) fresh_for: Duration,
}

/// kube-apiserver's watch cache grows instead of dropping an event younger
/// than `eventFreshDuration` (75 s), up to `defaultUpperBoundCapacity`
/// events (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go).
pub(crate) const FRESH_CHANGES_BACKSTOP: usize = 100 * 1024;
/// This simulator's own bound on fresh changes' bytes, so a burst of large
/// objects cannot take all the memory of a test or bench process.
pub(crate) const FRESH_BYTES_BACKSTOP: usize = 1 << 30;

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The main resource: status is ignored when the status subresource exists.
    Main,
    /// `/status`: everything but status is ignored.
    Status,
}

/// Whether a write is persisted or only evaluated (`dryRun=All`): a dry run
/// runs every check and returns the object the write would produce, without
/// storing it, bumping the resourceVersion or notifying watches (upstream:
/// the registry's `dryrun.Storage` skips only the etcd write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    Persist,
    DryRun,
}

/// How the API treats one write.
#[derive(Debug)]
pub(crate) struct Write {
    pub(crate) commit: Commit,
    /// `Some` for writes through the API: undeclared fields of a custom
    /// resource are pruned, and this says whether they are refused or
    /// warned about. `None` (direct store access) stores the body as given.
    pub(crate) fields: Option<FieldValidation>,
    /// A PUT must name the resourceVersion it replaces; a patch need not.
    pub(crate) require_resource_version: bool,
    /// `Warning` headers for the response.
    pub(crate) warnings: Vec<String>,
    /// Set when the write changed nothing.
    pub(crate) no_op: bool,
}

impl Write {
    /// A persisted write without pruning (direct store access, internal writes).
    pub(crate) fn direct() -> Self {
        Self {
            commit: Commit::Persist,
            fields: None,
            require_resource_version: false,
            warnings: Vec::new(),
            no_op: false,
        }
    }
}

/// Delete preconditions (`DeleteOptions.preconditions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Preconditions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// List filters and paging.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub(crate) struct ListPage {
    pub(crate) items: Vec<Arc<Value>>,
    pub(crate) resource_version: u64,
    pub(crate) continue_token: Option<String>,
}

/// Changes after a watch cursor.
#[derive(Debug)]
pub(crate) enum Changes {
    /// The changes, and the cursor to read from next time.
    Events(Vec<Change>, u64),
    /// The cursor predates the retained history: the client must relist.
    Gone { oldest: u64 },
}

#[derive(Debug)]
pub(crate) struct TypeState {
    pub(crate) rtype: ResourceType,
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    history: VecDeque<Change>,
    /// Sum of the retained changes' [`Change::retained_bytes`].
    history_bytes: usize,
    /// Watches from before this version cannot be served from history.
    compacted: u64,
    /// Carries the resourceVersion of the latest change, to wake watches.
    notify: watch::Sender<u64>,
}

impl TypeState {
    /// The objects that changed after `resource_version`, each with its state
    /// at that version (`None`: it did not exist). The caller checked that
    /// the history reaches back that far.
    fn states_before(&self, resource_version: u64) -> BTreeMap<ObjectKey, Option<&Arc<Value>>> {
        let start = self.history.partition_point(|change| change.resource_version <= resource_version);
        let mut earlier = BTreeMap::new();
        // Newest first, so the earliest change after the version has the last word.
        for change in self.history.range(start..).rev() {
            let then = match change.kind {
                ChangeKind::Added => None,
                ChangeKind::Modified | ChangeKind::Deleted => Some(change.previous.as_ref().unwrap_or(&change.object)),
            };
            earlier.insert(object_key(&change.object), then);
        }
        earlier
    }

    fn new(rtype: ResourceType, resource_version: u64) -> Self {
        Self {
            rtype,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_bytes: 0,
            // A new type has no history before now.
            compacted: resource_version,
            notify: watch::channel(resource_version).0,
        }
    }
}

pub(crate) struct StoreState {
    resource_version: u64,
    types: BTreeMap<TypeKey, TypeState>,
    rng: fastrand::Rng,
    history_limit: HistoryLimit,
    clock: Clock,
    /// Refuse creating in a namespace that does not exist (the API server's
    /// NamespaceLifecycle admission); otherwise a namespace springs into
    /// existence with the first object created in it.
    strict_namespaces: bool,
}

impl fmt::Debug for StoreState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreState")
            .field("resource_version", &self.resource_version)
            .field("types", &self.types.keys().collect::<Vec<_>>())
            .field("history_limit", &self.history_limit)
            .finish_non_exhaustive()
    }
}

fn crd_key() -> TypeKey {
    let crds = ResourceType::custom_resource_definitions();
    (crds.group, crds.plural)
}

/// Where core/v1 Namespaces are stored.
pub(crate) fn namespace_key() -> TypeKey {
    (String::new(), "namespaces".to_string())
}

fn now_rfc3339(clock: &Clock) -> String {
    let now = clock();
    // Kubernetes `Time` has second precision.
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// Lowercase RFC 1123 subdomain, as object names must be.
fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

impl StoreState {
    pub(crate) fn new(seed: u64, history_limit: HistoryLimit, clock: Clock) -> Self {
        Self {
            resource_version: 1,
            types: BTreeMap::new(),
            rng: fastrand::Rng::with_seed(seed),
            history_limit: HistoryLimit { changes: history_limit.changes.max(1), ..history_limit },
            clock,
            strict_namespaces: false,
        }
    }

    /// See [`StoreState::strict_namespaces`].
    pub(crate) fn set_strict_namespaces(&mut self, strict: bool) {
        self.strict_namespaces = strict;
    }

    fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    fn new_uid(&mut self) -> String {
        let high = self.rng.u64(..);
        let low = self.rng.u64(..);
        // A version-4-shaped UUID, from the seeded PRNG so runs are reproducible.
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0x0fff,
            ((low >> 48) & 0x3fff) | 0x8000,
            low & 0xffff_ffff_ffff
        )
    }

    pub(crate) fn install(&mut self, rtype: ResourceType) {
        let key = (rtype.group.clone(), rtype.plural.clone());
        let resource_version = self.resource_version;
        self.types
            .entry(key)
            .and_modify(|state| state.rtype = rtype.clone())
            .or_insert_with(|| TypeState::new(rtype, resource_version));
    }

    pub(crate) fn types(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values().map(|state| &state.rtype)
    }

    pub(crate) fn lookup(&self, group: &str, plural: &str) -> Option<&ResourceType> {
        self.types.get(&(group.to_string(), plural.to_string())).map(|state| &state.rtype)
    }

    /// Resolves `plural` or `plural.group` to a type key.
    pub(crate) fn resolve(&self, resource: &str) -> Result<TypeKey, ApiError> {
        if let Some((plural, group)) = resource.split_once('.')
            && self.lookup(group, plural).is_some()
        {
            return Ok((group.to_string(), plural.to_string()));
        }
        // core/v1 Events are a view of the events.k8s.io ones, not a second store.
        let mut matches = self
            .types
            .iter()
            .filter(|((_, plural), state)| plural == resource && !is_core_events(&state.rtype))
            .map(|(key, _)| key);
        match (matches.next(), matches.next()) {
            (Some(key), None) => Ok(key.clone()),
            (None, _) => Err(ApiError::unknown_path(resource)),
            (Some(_), Some(_)) => Err(ApiError::bad_request(format!(
                "resource {resource:?} is served by several groups: use plural.group"
            ))),
        }
    }

    fn type_state(&self, key: &TypeKey) -> Result<&TypeState, ApiError> {
        self.types.get(key).ok_or_else(|| ApiError::unknown_path(&key.1))
    }

    fn type_state_mut(&mut self, key: &TypeKey) -> Result<&mut TypeState, ApiError> {
        self.types.get_mut(key).ok_or_else(|| ApiError::unknown_path(&key.1))
    }

    pub(crate) fn resource_type(&self, key: &TypeKey) -> Result<&ResourceType, ApiError> {
        self.type_state(key).map(|state| &state.rtype)
    }

    /// The store's clock (for ages in server-side printing).
    pub(crate) fn now(&self) -> jiff::Timestamp {
        (self.clock)()
    }

    pub(crate) fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// Checks the namespace fits the type's scope, returning the key namespace.
    fn scope_namespace(rtype: &ResourceType, namespace: Option<&str>) -> Result<String, ApiError> {
        match (rtype.namespaced, namespace) {
            (true, Some(ns)) if !ns.is_empty() => Ok(ns.to_string()),
            (true, _) => Err(ApiError::bad_request(format!("{} is namespaced: a namespace is required", rtype.plural))),
            (false, None | Some("")) => Ok(String::new()),
            (false, Some(_)) => Err(ApiError::unknown_path(&format!("{} is cluster-scoped", rtype.plural))),
        }
    }

    /// Records a change in the type's history and wakes its watches.
    fn record(&mut self, key: &TypeKey, change: Change) {
        let limit = self.history_limit;
        if let Some(state) = self.types.get_mut(key) {
            let resource_version = change.resource_version;
            let now = change.recorded;
            state.history_bytes += change.retained_bytes();
            state.history.push_back(change);
            while state.history.len() > limit.changes || (state.history_bytes > limit.bytes && state.history.len() > 1)
            {
                let oldest_is_fresh = state
                    .history
                    .front()
                    .is_some_and(|oldest| now.saturating_duration_since(oldest.recorded) < limit.fresh_for);
                let past_backstop =
                    state.history.len() > FRESH_CHANGES_BACKSTOP || state.history_bytes > FRESH_BYTES_BACKSTOP;
                if oldest_is_fresh && !past_backstop {
                    break;
                }
                if let Some(dropped) = state.history.pop_front() {
                    state.history_bytes = state.history_bytes.saturating_sub(dropped.retained_bytes());
                    state.compacted = dropped.resource_version;
                }
            }
            state.notify.send_replace(resource_version);
        }
    }

    /// Drops all history: watches from any earlier version get 410 Gone.
    pub(crate) fn compact(&mut self) {
        let now = self.resource_version;
        for state in self.types.values_mut() {
            state.history.clear();
            state.history_bytes = 0;
            state.compacted = now;
            // Wake open watches so those behind the compaction see 410 at once.
            state.notify.send_replace(now);
        }
    }

    /// Ends every open watch stream, as an API server restart or a dropped
    /// connection does: each stream closes, and a watch opened later
    /// subscribes afresh.
    pub(crate) fn end_watches(&mut self) {
        let now = self.resource_version;
        for state in self.types.values_mut() {
            // Dropping the sender ends every stream subscribed to it.
            state.notify = watch::channel(now).0;
        }
    }

    pub(crate) fn get(&self, key: &TypeKey, namespace: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        let state = self.type_state(key)?;
        let namespace = Self::scope_namespace(&state.rtype, namespace)?;
        state
            .objects
            .get(&(namespace, name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(Subject::new(&key.0, &key.1, name)))
    }

    /// One page of a list. A first page reads the latest state; a continued
    /// page reads the state at its token's resourceVersion (see [`paging`]),
    /// rebuilt from the history, or is refused with 410 Expired when the
    /// history no longer reaches back that far.
    pub(crate) fn list(&self, key: &TypeKey, namespace: Option<&str>, query: &ListQuery) -> Result<ListPage, ApiError> {
        let state = self.type_state(key)?;
        let resume = query.continue_token.as_deref().map(Continue::decode).transpose()?;
        let resource_version = match resume.as_ref().and_then(|resume| resume.resource_version) {
            // The handler adds the token that resumes at the latest state.
            Some(version) if version < state.compacted => return Err(ApiError::gone(paging::INCONSISTENT_CONTINUE)),
            Some(version) => version.min(self.resource_version),
            None => self.resource_version,
        };
        let after = resume.map(|resume| resume.after);
        let earlier = state.states_before(resource_version);
        let mut view: BTreeMap<&ObjectKey, &Arc<Value>> = state.objects.iter().collect();
        for (changed, then) in &earlier {
            match then {
                Some(object) => view.insert(changed, object),
                None => view.remove(changed),
            };
        }
        let mut items: Vec<Arc<Value>> = Vec::new();
        let mut continue_token = None;
        let selected = view
            .into_iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|wanted| ns == wanted))
            .filter(|(listed, _)| after.as_ref().is_none_or(|after| *listed > after))
            .filter(|(_, object)| query.labels.matches(object) && query.fields.matches(object));
        for (_, object) in selected {
            if query.limit.is_some_and(|limit| limit > 0 && items.len() >= limit) {
                // More remain: hand out a token that resumes after the last
                // item, at this list's resourceVersion.
                continue_token = items.last().map(|last| {
                    Continue { resource_version: Some(resource_version), after: object_key(last) }.encode()
                });
                break;
            }
            items.push(object.clone());
        }
        Ok(ListPage { items, resource_version, continue_token })
    }

    /// Every object of a type, in key order (for synthetic initial watch events).
    pub(crate) fn snapshot(&self, key: &TypeKey) -> Result<(Vec<Arc<Value>>, u64), ApiError> {
        let state = self.type_state(key)?;
        Ok((state.objects.values().cloned().collect(), self.resource_version))
    }

    /// Changes of a type after `cursor`, or `Gone` if history no longer reaches back that far.
    pub(crate) fn changes_since(&self, key: &TypeKey, cursor: u64) -> Result<Changes, ApiError> {
        let state = self.type_state(key)?;
        if cursor < state.compacted {
            return Ok(Changes::Gone { oldest: state.compacted });
        }
        let start = state.history.partition_point(|change| change.resource_version <= cursor);
        let changes = state.history.range(start..).cloned().collect();
        // Every change up to the global version is recorded, so the caller is
        // caught up to it (and a bookmark may carry it).
        Ok(Changes::Events(changes, self.resource_version.max(cursor)))
    }

    /// A receiver woken on every change of the type.
    pub(crate) fn subscribe(&self, key: &TypeKey) -> Result<watch::Receiver<u64>, ApiError> {
        Ok(self.type_state(key)?.notify.subscribe())
    }

    pub(crate) fn create(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        mut object: Value,
        write: &mut Write,
    ) -> Result<Arc<Value>, ApiError> {
        let rtype = self.type_state(key)?.rtype.clone();
        if !object.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        check_kind(&rtype, &object)?;
        self.prune_fields(&rtype, &mut object, None, write)?;
        let namespace = Self::scope_namespace(&rtype, namespace)?;
        check_body_namespace(&rtype, &object, &namespace)?;

        let mut name = meta_str(&object, "name").unwrap_or_default().to_string();
        if name.is_empty() {
            let prefix = meta_str(&object, "generateName").unwrap_or_default().to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    Subject::new(&key.0, &key.1, ""),
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = self.generate_name(key, &namespace, &prefix);
        }
        let subject = Subject::new(&key.0, &key.1, &name);
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                subject,
                "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            ));
        }
        if key == &crd_key() {
            let rtype = ResourceType::from_crd(&object).map_err(|e| ApiError::invalid(subject, &e.message))?;
            if write.commit == Commit::Persist {
                self.install(rtype);
            }
        }
        let object_key = (namespace.clone(), name.clone());
        let state = self.type_state(key)?;
        if state.objects.contains_key(&object_key) {
            return Err(ApiError::already_exists(subject));
        }
        if rtype.namespaced {
            self.admit_into_namespace(&namespace, write.commit)?;
        }
        if key == &namespace_key() {
            // A namespace is Active from birth (upstream namespace strategy `PrepareForCreate`).
            object["status"] = serde_json::json!({"phase": "Active"});
        }

        let uid = self.new_uid();
        let created = now_rfc3339(&self.clock);
        if rtype.status_subresource && key != &namespace_key() {
            // The status subresource owns status: create cannot set it.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        set_type_meta(&rtype, &mut object);
        let metadata = meta_mut(&mut object);
        metadata.insert("name".into(), Value::String(name));
        if rtype.namespaced {
            metadata.insert("namespace".into(), Value::String(namespace));
        } else {
            metadata.remove("namespace");
        }
        for server_owned in ["deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"] {
            metadata.remove(server_owned);
        }
        metadata.insert("uid".into(), Value::String(uid));
        metadata.insert("creationTimestamp".into(), Value::String(created));
        metadata.insert("generation".into(), Value::from(1));
        if write.commit == Commit::DryRun {
            // Nothing is stored, so there is no resourceVersion to report.
            return Ok(Arc::new(object));
        }
        fits_in_etcd(&object)?;
        let resource_version = self.next_resource_version();
        meta_mut(&mut object).insert("resourceVersion".into(), Value::String(resource_version.to_string()));

        let object = Arc::new(object);
        self.type_state_mut(key)?.objects.insert(object_key, object.clone());
        self.record(key, Change::new(resource_version, ChangeKind::Added, object.clone(), None));
        Ok(object)
    }

    fn generate_name(&mut self, key: &TypeKey, namespace: &str, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        // Five random characters, like the API server; longer if unlucky.
        for length in 5..=64 {
            let suffix: String = (0..length).map(|_| char::from(ALPHABET[self.rng.usize(..ALPHABET.len())])).collect();
            let name = format!("{prefix}{suffix}");
            let taken = self
                .types
                .get(key)
                .is_some_and(|state| state.objects.contains_key(&(namespace.to_string(), name.clone())));
            if !taken {
                return name;
            }
        }
        format!("{prefix}{}", self.resource_version)
    }

    /// Update (PUT) or the second half of a patch: preconditions, the
    /// subresource split, finalizer and generation rules, then the write.
    pub(crate) fn update(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        name: &str,
        candidate: Value,
        target: Target,
        write: &mut Write,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(key, namespace, name)?;
        let rtype = self.type_state(key)?.rtype.clone();
        let subject = Subject::new(&key.0, &key.1, name);
        if !candidate.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        check_kind(&rtype, &candidate)?;
        let mut candidate = candidate;
        self.prune_fields(&rtype, &mut candidate, Some(&*old), write)?;
        if let Some(body_name) = meta_str(&candidate, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let key_namespace = meta_str(&old, "namespace").unwrap_or_default().to_string();
        check_body_namespace(&rtype, &candidate, &key_namespace)?;
        match meta_str(&candidate, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(wanted) if Some(wanted) != meta_str(&old, "resourceVersion") => {
                return Err(ApiError::conflict(subject));
            }
            None if write.require_resource_version => {
                let cause = validation::Cause {
                    reason: "FieldValueInvalid",
                    field: "metadata.resourceVersion".into(),
                    message: "Invalid value: 0: must be specified for an update".into(),
                };
                return Err(ApiError::invalid_fields(subject.plural, subject, &[cause]));
            }
            _ => {}
        }
        if let Some(uid) = meta_str(&candidate, "uid").filter(|uid| !uid.is_empty())
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(subject));
        }

        let mut new = match target {
            Target::Status => {
                let mut new = (*old).clone();
                set_field(&mut new, "status", candidate.get("status").cloned());
                new
            }
            Target::Main => {
                let mut new = candidate;
                if rtype.status_subresource {
                    set_field(&mut new, "status", old.get("status").cloned());
                }
                set_type_meta(&rtype, &mut new);
                keep_server_owned_metadata(&old, &mut new);
                new
            }
        };

        if is_deleting(&old) {
            let existing = finalizers(&old);
            let added: Vec<&str> = finalizers(&new).into_iter().filter(|f| !existing.contains(f)).collect();
            if !added.is_empty() {
                // Go's %#v of a []string, as ValidateObjectMetaUpdate prints it.
                let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
                let cause = validation::Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message: format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        quoted.join(", ")
                    ),
                };
                return Err(ApiError::invalid_fields(&rtype.kind, subject, &[cause]));
            }
        }
        if target == Target::Main && spec_differs(&old, &new, rtype.status_subresource) {
            meta_mut(&mut new).insert("generation".into(), Value::from(generation(&old) + 1));
        }
        if key == &crd_key() && target == Target::Main {
            let rtype = ResourceType::from_crd(&new).map_err(|e| ApiError::invalid(subject, &e.message))?;
            if write.commit == Commit::Persist {
                self.install(rtype);
            }
        }
        if new == *old {
            // A no-op write changes nothing: no new resourceVersion, no event.
            write.no_op = true;
            return Ok(old);
        }
        if write.commit == Commit::DryRun {
            return Ok(Arc::new(new));
        }
        self.write(key, old, new)
    }

    /// Applies a patch to the current object, then updates (or, for apply, creates).
    pub(crate) fn patch(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        target: Target,
        write: &mut Write,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        match self.get(key, namespace, name) {
            Ok(old) => {
                let candidate = patch.apply_to(&old)?;
                Ok((self.update(key, namespace, name, candidate, target, write)?, false))
            }
            Err(not_found) if not_found.code == 404 && patch.kind() == PatchKind::Apply && target == Target::Main => {
                // Server-side apply creates what does not exist yet.
                let mut object = patch.apply_to(&Value::Object(Map::new()))?;
                meta_mut(&mut object).insert("name".into(), Value::String(name.to_string()));
                Ok((self.create(key, namespace, object, write)?, true))
            }
            Err(error) => Err(error),
        }
    }

    /// Delete: with finalizers, marks the object (deletionTimestamp, generation
    /// bump); without, removes it.
    pub(crate) fn delete(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        write: &mut Write,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(key, namespace, name)?;
        let subject = Subject::new(&key.0, &key.1, name);
        let kind = self.type_state(key)?.rtype.kind.clone();
        for (field, wanted, recorded) in [
            ("UID", preconditions.uid.as_deref(), meta_str(&old, "uid")),
            ("ResourceVersion", preconditions.resource_version.as_deref(), meta_str(&old, "resourceVersion")),
        ] {
            if let Some(wanted) = wanted
                && Some(wanted) != recorded
            {
                return Err(ApiError::precondition_failed(&kind, subject, field, wanted, recorded.unwrap_or_default()));
            }
        }
        if write.commit == Commit::DryRun {
            return Ok(old);
        }
        if key == &namespace_key() {
            return self.delete_namespace(old);
        }
        if finalizers(&old).is_empty() {
            return self.remove_object(key, &old);
        }
        if is_deleting(&old) {
            return Ok(old);
        }
        let mut new = (*old).clone();
        let deleted_at = now_rfc3339(&self.clock);
        let metadata = meta_mut(&mut new);
        metadata.insert("deletionTimestamp".into(), Value::String(deleted_at));
        metadata.insert("deletionGracePeriodSeconds".into(), Value::from(0));
        // The API server bumps generation when deletion starts, so
        // generation-filtered controllers see it.
        metadata.insert("generation".into(), Value::from(generation(&old) + 1));
        self.write(key, old, new)
    }

    /// Writes a new state of an existing object with a fresh resourceVersion;
    /// an object being deleted whose last finalizer is gone is removed instead.
    fn write(&mut self, key: &TypeKey, old: Arc<Value>, mut new: Value) -> Result<Arc<Value>, ApiError> {
        // A Namespace is held by its `spec.finalizers` (the namespace
        // controller's), not metadata ones: it goes when it is empty.
        if is_deleting(&new) && finalizers(&new).is_empty() && key != &namespace_key() {
            // Like the API server's delete-during-update (k8s.io/apiserver
            // registry Store.Update, then its delete): one DELETED event at a
            // new version, and an answer with the update's content at the
            // version the object had, since the update itself is never
            // stored (seen on kube-apiserver v1.34 by tests/reference_simkube.rs).
            let previous = meta_str(&old, "resourceVersion").map(str::to_owned);
            let removed = self.remove_object(key, &Arc::new(new))?;
            let Some(previous) = previous else { return Ok(removed) };
            let mut answer = (*removed).clone();
            meta_mut(&mut answer).insert("resourceVersion".into(), Value::String(previous));
            return Ok(Arc::new(answer));
        }
        fits_in_etcd(&new)?;
        let resource_version = self.next_resource_version();
        meta_mut(&mut new).insert("resourceVersion".into(), Value::String(resource_version.to_string()));
        let object_key = object_key(&new);
        let new = Arc::new(new);
        self.type_state_mut(key)?.objects.insert(object_key, new.clone());
        self.record(key, Change::new(resource_version, ChangeKind::Modified, new.clone(), Some(old)));
        Ok(new)
    }

    /// Removes an object; `last` is its final state (what the DELETED event
    /// carries), stored or not.
    fn remove_object(&mut self, key: &TypeKey, last: &Arc<Value>) -> Result<Arc<Value>, ApiError> {
        let resource_version = self.next_resource_version();
        let mut last = (**last).clone();
        meta_mut(&mut last).insert("resourceVersion".into(), Value::String(resource_version.to_string()));
        let stored = self.type_state_mut(key)?.objects.remove(&object_key(&last));
        let namespace = meta_str(&last, "namespace").unwrap_or_default().to_string();
        let last = Arc::new(last);
        // The stored state before removal, for lists at an earlier version.
        let change = Change::new(resource_version, ChangeKind::Deleted, last.clone(), stored);
        self.record(key, change);
        if !namespace.is_empty() {
            self.finish_namespace_if_empty(&namespace)?;
        }
        Ok(last)
    }

    /// Drops the fields a custom resource's schema does not declare, refusing
    /// or warning as the write's `fieldValidation` says (see [`schema`]).
    /// Then checks the values against the schema (see [`validation`]); `old`
    /// is the object an update replaces.
    fn prune_fields(
        &self,
        rtype: &ResourceType,
        object: &mut Value,
        old: Option<&Value>,
        write: &mut Write,
    ) -> Result<(), ApiError> {
        let Some(validation) = write.fields else { return Ok(()) };
        let crd_name = format!("{}.{}", rtype.plural, rtype.group);
        let Some(crd) = self.types.get(&crd_key()).and_then(|s| s.objects.get(&(String::new(), crd_name))) else {
            return Ok(());
        };
        let version = rtype.preferred_version();
        let Some(structural) = schema::crd_schema(crd, version) else { return Ok(()) };
        let unknown = schema::prune(structural, object);
        write.warnings.extend(schema::verdict(validation, &rtype.kind, version, &unknown)?);
        let mut causes = validation::validate(structural, object, old);
        if !causes.is_empty() {
            if validation::has_rules(structural) {
                causes.push(validation::rules_not_checked());
            }
            let name = meta_str(object, "name").unwrap_or_default();
            return Err(ApiError::invalid_fields(
                &rtype.kind,
                Subject::new(&rtype.group, &rtype.plural, name),
                &causes,
            ));
        }
        Ok(())
    }

    /// NamespaceLifecycle admission: an object may be created only in a
    /// namespace that exists and is not being deleted (upstream
    /// `plugin/pkg/admission/namespace/lifecycle`).
    fn admit_into_namespace(&mut self, namespace: &str, commit: Commit) -> Result<(), ApiError> {
        let key = namespace_key();
        let Some(namespaces) = self.types.get(&key) else { return Ok(()) };
        match namespaces.objects.get(&(String::new(), namespace.to_string())) {
            Some(existing) if is_deleting(existing) => Err(ApiError::forbidden(
                Subject::new("", "namespaces", namespace),
                &format!("unable to create new content in namespace {namespace} because it is being terminated"),
            )),
            Some(_) => Ok(()),
            None if self.strict_namespaces => Err(ApiError::not_found(Subject::new("", "namespaces", namespace))),
            None if commit == Commit::DryRun => Ok(()),
            None => self.create_namespace(namespace),
        }
    }

    fn create_namespace(&mut self, namespace: &str) -> Result<(), ApiError> {
        let object = serde_json::json!({"metadata": {"name": namespace}});
        self.create(&namespace_key(), None, object, &mut Write::direct()).map(drop)
    }

    /// Starts deleting a namespace: it turns Terminating, everything in it is
    /// deleted (finalizers honoured), and it goes once it is empty (the
    /// namespace controller's job on a real cluster).
    fn delete_namespace(&mut self, old: Arc<Value>) -> Result<Arc<Value>, ApiError> {
        let name = meta_str(&old, "name").unwrap_or_default().to_string();
        let mut terminating = (*old).clone();
        if !is_deleting(&old) {
            let deleted_at = now_rfc3339(&self.clock);
            meta_mut(&mut terminating).insert("deletionTimestamp".into(), Value::String(deleted_at));
            terminating["status"] = serde_json::json!({"phase": "Terminating"});
        }
        let marked = if terminating == *old { old } else { self.write(&namespace_key(), old, terminating)? };
        let contents: Vec<(TypeKey, String)> = self
            .types
            .iter()
            .filter(|(_, state)| state.rtype.namespaced)
            .flat_map(|(key, state)| {
                state.objects.keys().filter(|(ns, _)| *ns == name).map(move |(_, object)| (key.clone(), object.clone()))
            })
            .collect();
        for (key, object) in contents {
            self.delete(&key, Some(&name), &object, &Preconditions::default(), &mut Write::direct())?;
        }
        self.finish_namespace_if_empty(&name)?;
        Ok(self.type_state(&namespace_key())?.objects.get(&(String::new(), name)).cloned().unwrap_or(marked))
    }

    /// Removes a Terminating namespace that holds nothing any more.
    fn finish_namespace_if_empty(&mut self, namespace: &str) -> Result<(), ApiError> {
        let key = namespace_key();
        let Some(existing) = self.types.get(&key).and_then(|s| s.objects.get(&(String::new(), namespace.to_string())))
        else {
            return Ok(());
        };
        if !is_deleting(existing) {
            return Ok(());
        }
        let occupied = self
            .types
            .values()
            .any(|state| state.rtype.namespaced && state.objects.keys().any(|(ns, _)| ns == namespace));
        if occupied {
            return Ok(());
        }
        let existing = existing.clone();
        self.remove_object(&key, &existing).map(drop)
    }

    /// Deletes every object a list query selects (finalizers honoured).
    pub(crate) fn delete_collection(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        query: &ListQuery,
    ) -> Result<Vec<Arc<Value>>, ApiError> {
        let selected = self.list(key, namespace, &ListQuery { limit: None, continue_token: None, ..query.clone() })?;
        selected
            .items
            .iter()
            .map(|object| {
                let name = meta_str(object, "name").unwrap_or_default();
                self.delete(key, meta_str(object, "namespace"), name, &Preconditions::default(), &mut Write::direct())
            })
            .collect()
    }

    /// Stores an object as given (status and generation included), creating
    /// or replacing it; server-owned fields it lacks are filled in.
    pub(crate) fn insert_raw(&mut self, key: &TypeKey, mut object: Value) -> Result<Arc<Value>, ApiError> {
        let rtype = self.type_state(key)?.rtype.clone();
        if !object.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        let name = meta_str(&object, "name").unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(ApiError::bad_request("the object must have metadata.name"));
        }
        let namespace = meta_str(&object, "namespace").map(str::to_string);
        let namespace = Self::scope_namespace(&rtype, namespace.as_deref())?;
        if rtype.namespaced
            && self.types.contains_key(&namespace_key())
            && !self.type_state(&namespace_key())?.objects.contains_key(&(String::new(), namespace.clone()))
        {
            // Seeding state implies its namespace, whatever the admission rule.
            self.create_namespace(&namespace)?;
        }
        let previous = self.type_state(key)?.objects.get(&(namespace.clone(), name)).cloned();
        set_type_meta(&rtype, &mut object);
        if meta_str(&object, "uid").is_none() {
            let uid = previous
                .as_deref()
                .and_then(|p| meta_str(p, "uid").map(str::to_string))
                .unwrap_or_else(|| self.new_uid());
            meta_mut(&mut object).insert("uid".into(), Value::String(uid));
        }
        if meta_str(&object, "creationTimestamp").is_none() {
            let created = now_rfc3339(&self.clock);
            meta_mut(&mut object).insert("creationTimestamp".into(), Value::String(created));
        }
        if generation(&object) == 0 {
            let next = previous.as_deref().map_or(1, generation);
            meta_mut(&mut object).insert("generation".into(), Value::from(next.max(1)));
        }
        if key == &crd_key() {
            self.install(ResourceType::from_crd(&object)?);
        }
        match previous {
            Some(old) => self.write(key, old, object),
            None => {
                let resource_version = self.next_resource_version();
                meta_mut(&mut object).insert("resourceVersion".into(), Value::String(resource_version.to_string()));
                let object = Arc::new(object);
                self.type_state_mut(key)?.objects.insert(object_key(&object), object.clone());
                self.record(key, Change::new(resource_version, ChangeKind::Added, object.clone(), None));
                Ok(object)
            }
        }
    }

    /// Edits an object in place with no API rules but identity: the closure may
    /// change anything except name and namespace; a new resourceVersion is set.
    pub(crate) fn modify_raw(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(key, namespace, name)?;
        let mut new = (*old).clone();
        edit(&mut new);
        let metadata = meta_mut(&mut new);
        for identity in ["name", "namespace"] {
            match old.pointer(&format!("/metadata/{identity}")) {
                Some(value) => metadata.insert(identity.into(), value.clone()),
                None => metadata.remove(identity),
            };
        }
        self.write(key, old, new)
    }

    /// Removes an object at once, finalizers or not.
    pub(crate) fn remove_raw(
        &mut self,
        key: &TypeKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let old = self.get(key, namespace, name)?;
        self.remove_object(key, &old)
    }
}

fn object_key(object: &Value) -> ObjectKey {
    (
        meta_str(object, "namespace").unwrap_or_default().to_string(),
        meta_str(object, "name").unwrap_or_default().to_string(),
    )
}

/// Rejects a body whose `kind` names another type.
fn check_kind(rtype: &ResourceType, object: &Value) -> Result<(), ApiError> {
    match object.get("kind").and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() && kind != rtype.kind => Err(ApiError::bad_request(format!(
            "the body kind {kind:?} does not match the resource kind {:?}",
            rtype.kind
        ))),
        _ => Ok(()),
    }
}

fn check_body_namespace(rtype: &ResourceType, object: &Value, namespace: &str) -> Result<(), ApiError> {
    match meta_str(object, "namespace") {
        Some(body) if rtype.namespaced && !body.is_empty() && body != namespace => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
    }
}

/// Stores objects with the preferred version's apiVersion; responses rewrite it.
fn set_type_meta(rtype: &ResourceType, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(rtype.api_version(rtype.preferred_version())));
        map.insert("kind".into(), Value::String(rtype.kind.clone()));
    }
}

fn set_field(object: &mut Value, field: &str, value: Option<Value>) {
    if let Some(map) = object.as_object_mut() {
        match value {
            Some(value) => map.insert(field.to_string(), value),
            None => map.remove(field),
        };
    }
}

/// Fields of metadata clients cannot change through an update.
fn keep_server_owned_metadata(old: &Value, new: &mut Value) {
    let metadata = meta_mut(new);
    metadata.remove("managedFields");
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
        "generateName",
    ] {
        match old.pointer(&format!("/metadata/{field}")) {
            Some(value) => metadata.insert(field.to_string(), value.clone()),
            None => metadata.remove(field),
        };
    }
}

/// Shared handle to the store, for the HTTP handlers and for tests that read
/// or write objects directly, without HTTP, faults or counters.
///
/// Resources are named by plural (`servers`) or `plural.group`
/// (`servers.region.unikorn-cloud.org`) when a plural is served by several
/// groups. Namespaces are `Some` for namespaced types and `None` otherwise.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    inner: Arc<Mutex<StoreState>>,
}

impl StoreHandle {
    pub(crate) fn new(state: StoreState) -> Self {
        Self { inner: Arc::new(Mutex::new(state)) }
    }

    /// Locks the state; a poisoned lock is recovered, as every write leaves the
    /// state consistent before anything can panic.
    pub(crate) fn lock(&self) -> MutexGuard<'_, StoreState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with_type<R>(
        &self,
        resource: &str,
        f: impl FnOnce(&mut StoreState, &TypeKey) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let mut state = self.lock();
        let key = state.resolve(resource)?;
        f(&mut state, &key)
    }

    /// Serves a resource type (replacing the definition of one already served).
    pub fn install(&self, rtype: ResourceType) {
        self.lock().install(rtype);
    }

    /// Creates a namespace unless it exists.
    pub fn ensure_namespace(&self, namespace: &str) {
        let mut state = self.lock();
        let exists = state
            .types
            .get(&namespace_key())
            .is_some_and(|s| s.objects.contains_key(&(String::new(), namespace.to_string())));
        if !exists {
            // Only an invalid name can fail, and then there is nothing to create.
            let _ = state.create_namespace(namespace);
        }
    }

    /// The served resource types.
    pub fn resource_types(&self) -> Vec<ResourceType> {
        self.lock().types().cloned().collect()
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version()
    }

    /// Drops all watch history: watches from any earlier resourceVersion get
    /// 410 Gone, including open ones once they next read.
    pub fn compact(&self) {
        self.lock().compact();
    }

    /// Ends every open watch stream (see [`SimKube::end_watches`](super::SimKube::end_watches)).
    pub fn end_watches(&self) {
        self.lock().end_watches();
    }

    /// One object, if it exists.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.with_type(resource, |state, key| state.get(key, namespace, name)).ok().map(|object| (*object).clone())
    }

    /// One object as stored, shared rather than copied: for observers that
    /// read many large objects often (the bench reads 10,000 Servers of 32 KB).
    pub fn get_shared(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Arc<Value>> {
        self.with_type(resource, |state, key| state.get(key, namespace, name)).ok()
    }

    /// All objects of a type, in one namespace (`Some`) or all (`None`), by namespace and name.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        self.with_type(resource, |state, key| state.list(key, namespace, &ListQuery::default()))
            .map(|page| page.items.iter().map(|o| (**o).clone()).collect())
            .unwrap_or_default()
    }

    /// Creates an object with the API's rules (namespace from `metadata.namespace`).
    pub fn create(&self, resource: &str, object: Value) -> Result<Value, ApiError> {
        let namespace = meta_str(&object, "namespace").map(str::to_string);
        self.with_type(resource, |state, key| state.create(key, namespace.as_deref(), object, &mut Write::direct()))
            .map(|object| (*object).clone())
    }

    /// Replaces an object with the API's rules (PUT: resourceVersion required).
    pub fn replace(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| {
            let mut write = Write { require_resource_version: true, ..Write::direct() };
            state.update(key, namespace, name, object, Target::Main, &mut write)
        })
        .map(|object| (*object).clone())
    }

    /// Patches the main resource with the API's rules.
    pub fn patch(&self, resource: &str, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| {
            state.patch(key, namespace, name, patch, Target::Main, &mut Write::direct())
        })
        .map(|(object, _)| (*object).clone())
    }

    /// Patches the `/status` subresource with the API's rules.
    pub fn patch_status(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| {
            if !state.resource_type(key)?.status_subresource {
                return Err(ApiError::unknown_path(&format!("{}/status", key.1)));
            }
            state.patch(key, namespace, name, patch, Target::Status, &mut Write::direct())
        })
        .map(|(object, _)| (*object).clone())
    }

    /// Deletes with the API's rules: finalizers delay removal.
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| {
            state.delete(key, namespace, name, &Preconditions::default(), &mut Write::direct())
        })
        .map(|object| (*object).clone())
    }

    /// Stores an object as given (status, labels, finalizers, generation kept),
    /// creating or replacing it: for seeding state a controller would find.
    pub fn insert(&self, resource: &str, object: Value) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| state.insert_raw(key, object)).map(|object| (*object).clone())
    }

    /// Edits an object directly (no API rules; name and namespace are kept),
    /// with a new resourceVersion and a MODIFIED event. Returns the new state.
    pub fn modify(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| state.modify_raw(key, namespace, name, edit))
            .map(|object| (*object).clone())
    }

    /// Removes an object at once, ignoring finalizers.
    pub fn remove(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.with_type(resource, |state, key| state.remove_raw(key, namespace, name)).map(|object| (*object).clone())
    }

    /// Waits until the object exists and satisfies `predicate`, re-checking
    /// on every change of its type (no polling). `None` on timeout or for an
    /// unknown resource.
    pub async fn wait_for(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
        mut predicate: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let mut found = None;
        self.wait_until(resource, timeout, || {
            found = self.get(resource, namespace, name).filter(|object| predicate(object));
            found.is_some()
        })
        .await
        .then_some(found)
        .flatten()
    }

    /// Waits until the object no longer exists; false on timeout or for an unknown resource.
    pub async fn wait_for_absent(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
    ) -> bool {
        self.wait_until(resource, timeout, || self.get(resource, namespace, name).is_none()).await
    }

    /// Evaluates `check` now and after each change of the resource type until it holds.
    async fn wait_until(&self, resource: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let receiver = {
            let state = self.lock();
            state.resolve(resource).and_then(|key| state.subscribe(&key))
        };
        let Ok(mut receiver) = receiver else {
            return false;
        };
        loop {
            // Mark the current version seen before checking, so no change is missed.
            receiver.borrow_and_update();
            if check() {
                return true;
            }
            match tokio::time::timeout_at(deadline, receiver.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return false,
            }
        }
    }
}
