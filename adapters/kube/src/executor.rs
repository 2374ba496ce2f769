//! Runs one reconcile pass: gather facts, ask the core, and drive the core's
//! [`Pass`] by performing each action it hands out. Which action runs next,
//! the follow-up after a failure and the Server as last persisted are the
//! core's; this module only performs I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use server_core::model::{SERVER_FINALIZER, Server as CoreServer, UserData};
use server_core::pass::{Need, ProviderSource, Rules, UserDataCopy, partly_unreadable_event};
use server_core::port::DeleteProgress;
use server_core::reconcile::Reference;
use server_core::{Action, ActionFailure, ApiCause, ApiFailure, NotSent, Outcome, Pass, Wait};
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::cached::CachedServer;
use crate::cloud::{CloudHandle, GroupKey, group_of};
use crate::config::ControllerConfig;
use crate::consumed::Finalizers;
use crate::error::{Error, action_failure, is_not_found, short_message};
use crate::facts::{Reader, Source};
use crate::kube_api::now;
use crate::metrics::Metrics;
use crate::references::Target;
use crate::server_writes::{Part, patch_server, patch_server_for_user_data};
use crate::slots::Slot;
use crate::term::{Term, Terms};

/// Everything a pass needs, shared by all passes of a controller.
pub(crate) struct Executor {
    /// Each pass acts through the term it started in: its client, clouds,
    /// listings (the monitor's lists, where a pass takes its provider view
    /// from when the core allows), reference writer and event series.
    pub(crate) terms: Arc<Terms>,
    pub(crate) config: ControllerConfig,
    pub(crate) metrics: Arc<dyn Metrics>,
    /// Whether this replica may act; each term's client and clouds enforce it.
    pub(crate) fence: crate::Fence,
    pub(crate) progress: crate::health::Progress,
    /// Passes at once; a pass gives its slot up while it waits on references.
    pub(crate) slots: crate::slots::PassSlots,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("terms", &self.terms).field("config", &self.config).finish_non_exhaustive()
    }
}

impl Executor {
    /// One pass over `object`, reading consumed resources from `caches`.
    /// `Err` only when the facts could not be read; a failed action is the
    /// core's to judge and comes back as an outcome.
    ///
    /// Its reads, writes and cloud calls are boxed while they run: a pass
    /// spends most of its life waiting on reference writes, and then holds
    /// its own state (3 KB) instead of room for the largest call it might
    /// make (16 KB a pass unboxed, with 128 passes started at once).
    pub(crate) async fn reconcile(
        &self,
        term: &Term,
        object: &CachedServer,
        caches: &Caches,
        slot: &mut Slot<'_>,
    ) -> Result<Outcome, Error> {
        let options = self.config.rule_options();
        let Some(mut server) = object.core() else {
            let problem = match &object.content {
                Err(malformed) => malformed.to_string(),
                Ok(_) => "it has no content".into(),
            };
            let (name, namespace) = (object.name_any(), object.namespace().unwrap_or_default());
            warn!(server = %name, %namespace, %problem, "the Server cannot be read; it is left alone until it changes");
            let pass = Pass::unreadable(object.meta_only(), &problem, options, now());
            return Ok(
                Box::pin(self.act(term, object, caches, slot, pass, Err("the Server cannot be read".into()))).await
            );
        };
        let cached_version = object.resource_version().unwrap_or_default();
        if term.own_writes.cache_is_behind(&server.meta.uid, &cached_version, std::time::Instant::now()) {
            // The watch has yet to bring this replica's last write. Its
            // event wakes a pass only if it changes a wake signal (the wake
            // rule), so the yield's requeue is what brings the next pass.
            return Ok(Outcome::Yield(Wait::ServerChanged));
        }
        let _in_flight = term.passes.start(&server.meta.uid);
        if let Ok(content) = &object.content
            && term.unread_said.first_time(&server.meta.uid, &content.unread)
        {
            let (name, namespace) = (object.name_any(), object.namespace().unwrap_or_default());
            warn!(server = %name, %namespace, paths = content.unread.len(), "the Server holds values this controller does not understand; read as Unknown");
            let event = partly_unreadable_event(&content.unread);
            if let Err(error) = Box::pin(term.events.publish(&event, &object.object_ref(&()))).await {
                warn!(server = %name, %namespace, error = %short_message(&error), "emitting an event failed");
            }
        }
        let user_data = match &object.content {
            Ok(content) if content.has_user_data => match &content.held_user_data {
                Some(held) => {
                    server.spec.user_data = Some(held.user_data());
                    UserDataCopy::Held
                }
                None => UserDataCopy::Withheld,
            },
            _ => UserDataCopy::Held,
        };
        let mut pass = Pass::start_with(server, options, now(), Rules::CORE, user_data);
        let source = Source::Controller { caches, listings: &term.listings, floors: &term.floors };
        let mut reader = Reader::new(&term.client, &term.clouds, source, self.config.cloud_timeout);
        while let Some(need) = pass.poll_need() {
            if matches!(need, Need::UserData) {
                slot.hold_user_data(user_data_bytes(object)).await;
            }
            let fact = Box::pin(reader.read(need, pass.server(), pass.facts())).await?;
            pass.handle_fact(fact)?;
        }
        let cloud = reader.into_cloud();
        if let Some(source) = pass.provider_source()
            && (cloud.is_ok() || source != ProviderSource::Live)
        {
            self.metrics.provider_read(source.label());
        }
        let server = pass.server();
        if let Some(decision) = pass.decision() {
            debug!(
                server = %server.meta.name,
                namespace = %server.meta.namespace,
                actions = ?decision.actions.iter().map(Action::name).collect::<Vec<_>>(),
                status_fields = ?status_fields(&decision.actions),
                outcome = decision.outcome.label(),
                "decided"
            );
        }
        Ok(Box::pin(self.act(term, object, caches, slot, pass, cloud)).await)
    }

    /// Runs the actions the pass hands out, each through the term it started
    /// in. A create that takes its user data from its note's answer first
    /// waits for room in the budget for user data in flight (`slots`),
    /// unless the pass holds room already; the room is held until the
    /// create is answered.
    async fn act(
        &self,
        term: &Term,
        object: &CachedServer,
        caches: &Caches,
        slot: &mut Slot<'_>,
        mut pass: Pass,
        cloud: Result<CloudHandle, String>,
    ) -> Outcome {
        let server = pass.server();
        let mut io = ActionIo {
            executor: self,
            term,
            caches,
            regarding: object.object_ref(&()),
            resource_version: object.resource_version().unwrap_or_default(),
            name: server.meta.name.clone(),
            namespace: server.meta.namespace.clone(),
            uid: server.meta.uid.clone(),
            written: false,
            group: group_of(server),
            cloud,
        };
        loop {
            let changes: Option<Vec<(Reference, bool)>> = match pass.poll_run() {
                [] => break,
                run => run.iter().map(|action| action.reference_change().map(|(r, add)| (r.clone(), add))).collect(),
            };
            let Some(changes) = changes else {
                let Some(action) = pass.poll_action() else { break };
                if pass.awaits_user_data() {
                    slot.hold_user_data(user_data_bytes(object)).await;
                    match Box::pin(io.apply_for_user_data(action, pass.server())).await {
                        Ok(user_data) => pass.handle_done_with_user_data(user_data),
                        Err(failure) => {
                            io.report_failure(action, &failure);
                            pass.handle_failed(failure);
                        }
                    }
                    continue;
                }
                let creates = matches!(action, Action::CreateProviderServer(_));
                match Box::pin(io.apply(action, pass.server())).await {
                    Ok(()) => pass.handle_done(),
                    Err(failure) => {
                        io.report_failure(action, &failure);
                        pass.handle_failed(failure);
                    }
                }
                // The create is answered: what is left of the pass (its status
                // write) holds the user data for milliseconds, not a wait.
                if creates {
                    slot.give_back_user_data();
                }
                continue;
            };
            // A run of reference changes goes out at once and is answered
            // in order; the pass takes no answer after a failure. It waits
            // without its slot: the writer lingers to batch them.
            let sent = changes.iter().map(|(reference, add)| io.set_reference(reference, *add));
            for result in slot.released_while(futures_util::future::join_all(sent)).await {
                if let Err(failure) = result {
                    if let Some(action) = pass.poll_action() {
                        io.report_failure(action, &failure);
                    }
                    pass.handle_failed(failure);
                    break;
                }
                pass.handle_done();
            }
        }
        pass.into_outcome()
    }
}

/// How many bytes the Server's user data holds decoded (0 without): the
/// room its create takes in the user-data budget.
fn user_data_bytes(object: &CachedServer) -> usize {
    object.content.as_ref().map_or(0, |content| content.user_data_bytes)
}

/// The I/O side of one pass: the resourceVersions that guard its next
/// writes, the consumed resources it read, and its cloud.
struct ActionIo<'a> {
    executor: &'a Executor,
    term: &'a Term,
    caches: &'a Caches,
    regarding: ObjectReference,
    resource_version: String,
    name: String,
    namespace: String,
    uid: String,
    /// Whether this pass has written the Server yet.
    written: bool,
    /// Where the Server's provider server is listed (create answers are kept there).
    group: Option<GroupKey>,
    cloud: Result<CloudHandle, String>,
}

impl ActionIo<'_> {
    fn report_failure(&self, action: &Action, failure: &ActionFailure) {
        self.executor.metrics.action_failed(action.name());
        warn!(
            server = %self.name,
            namespace = %self.namespace,
            action = action.name(),
            failure = ?failure,
            "action failed"
        );
    }

    /// Performs one action. `persisted` is the Server as last persisted (the
    /// finalizer list a merge patch replaces is built from it).
    async fn apply(&mut self, action: &Action, persisted: &CoreServer) -> Result<(), ActionFailure> {
        match action {
            Action::AddFinalizer { annotations } => {
                self.patch_server_metadata(finalizer_added(persisted, annotations), "adding the finalizer").await?;
                Ok(())
            }
            Action::RemoveFinalizer => {
                let finalizers: Vec<String> =
                    persisted.meta.finalizers.iter().filter(|f| *f != SERVER_FINALIZER).cloned().collect();
                self.patch_server_metadata(json!({ "finalizers": finalizers }), "removing the finalizer").await?;
                Ok(())
            }
            Action::WriteStatus(patch) => self.write_status(patch).await,
            Action::Annotate { key, value } => {
                let annotations = json!({ *key: value });
                self.patch_server_metadata(json!({ "annotations": annotations }), "writing an annotation").await?;
                Ok(())
            }
            Action::Record(changes) => {
                self.record_annotations(json!({ "annotations": annotation_map(changes) })).await?;
                Ok(())
            }
            Action::AddReference(reference) => self.set_reference(reference, true).await,
            Action::RemoveReference(reference) => self.set_reference(reference, false).await,
            Action::CreateProviderServer(request) => {
                let cloud = self.cloud()?;
                let created = cloud.call(|c| c.create(&cloud.identity, request)).await.map_err(ActionFailure::Cloud)?;
                info!(server = %self.name, namespace = %self.namespace, provider_id = %created.id, "provider server created");
                if let Some(group) = &self.group {
                    // The answer shows the server exists now: the next pass
                    // may decide from it (the core's rule says when). Not in
                    // whole seconds: the answer comes after the create's note
                    // of this same second, and the rule asks the view to be
                    // later than the note.
                    let at = crate::kube_api::precise_now();
                    self.term.listings.record_answer(group.clone(), &self.uid, created, at);
                }
                Ok(())
            }
            Action::DeleteProviderServer(server) => {
                let cloud = self.cloud()?;
                if let Some(group) = &self.group {
                    // What was listed or answered about it no longer stands.
                    self.term.listings.forget(group, &self.uid);
                }
                let progress = cloud.call(|c| c.delete(&cloud.identity, server)).await.map_err(ActionFailure::Cloud)?;
                // Each pass re-sends the idempotent delete until the server is
                // gone: one INFO line when it is, the repeats at DEBUG.
                let (server, namespace) = (&self.name, &self.namespace);
                match progress {
                    DeleteProgress::Gone => info!(server = %server, namespace = %namespace, "provider server gone"),
                    DeleteProgress::InProgress => {
                        debug!(server = %server, namespace = %namespace, "provider server deletion under way")
                    }
                }
                Ok(())
            }
            Action::RebuildProviderServer(request) => {
                let cloud = self.cloud()?;
                if let Some(group) = &self.group {
                    // The listed record shows the image before the rebuild.
                    self.term.listings.forget(group, &self.uid);
                }
                cloud.call(|c| c.rebuild(&cloud.identity, request)).await.map_err(ActionFailure::Cloud)?;
                info!(server = %self.name, namespace = %self.namespace, provider_id = %request.provider_id, "provider server rebuild accepted");
                Ok(())
            }
            Action::ReleaseAttachment(resource) => {
                let cloud = self.cloud()?;
                cloud.call(|c| c.release(&cloud.identity, resource)).await.map_err(ActionFailure::Cloud)?;
                self.undated_change(action);
                info!(
                    server = %self.name,
                    namespace = %self.namespace,
                    kind = resource.kind(),
                    provider_id = %resource.id(),
                    "released a provider resource of the server"
                );
                Ok(())
            }
            Action::UpdatePort(update) => {
                let cloud = self.cloud()?;
                cloud.call(|c| c.update_port(&cloud.identity, update)).await.map_err(ActionFailure::Cloud)?;
                info!(
                    server = %self.name,
                    namespace = %self.namespace,
                    port_id = %update.port_id,
                    security_groups = update.security_groups.len(),
                    allowed_address_pairs = update.allowed_address_pairs.len(),
                    "set the port's security groups and allowed address pairs to the spec's"
                );
                Ok(())
            }
            Action::EnsureFloatingIp(request) => {
                let cloud = self.cloud()?;
                cloud.call(|c| c.ensure_floating_ip(&cloud.identity, request)).await.map_err(ActionFailure::Cloud)?;
                self.undated_change(action);
                info!(
                    server = %self.name,
                    namespace = %self.namespace,
                    port_id = %request.port_id,
                    "the server's port has its floating IP"
                );
                Ok(())
            }
            Action::Emit(event) => {
                // Events are informational: a lost one must not hold back the
                // actions after it (the status that triggered it is already
                // written, so a later pass would not emit it again either).
                match self.term.events.publish(event, &self.regarding).await {
                    Ok(()) => self.executor.metrics.event_emitted(event.reason),
                    Err(error) => warn!(
                        server = %self.name,
                        namespace = %self.namespace,
                        reason = event.reason.as_str(),
                        error = %short_message(&error),
                        "emitting an event failed"
                    ),
                }
                Ok(())
            }
        }
    }

    /// After `action` was done: when the provider does not date what it
    /// changed (`server_core::listing::changes_undated`), the group's next
    /// monitor list is complete, so the change reaches the status.
    fn undated_change(&self, action: &Action) {
        if let Some(group) = self.group.as_ref().filter(|_| server_core::listing::changes_undated(action)) {
            self.term.listings.undated_change(group.clone());
        }
    }

    /// Performs the metadata write whose answer, the Server as written,
    /// brings the user data the pass awaits (see
    /// [`Pass::awaits_user_data`]); the user data it holds.
    async fn apply_for_user_data(
        &mut self,
        action: &Action,
        persisted: &CoreServer,
    ) -> Result<Option<UserData>, ActionFailure> {
        let (metadata, context) = match action {
            Action::AddFinalizer { annotations } => (finalizer_added(persisted, annotations), "adding the finalizer"),
            Action::Annotate { key, value } => (json!({ "annotations": { *key: value } }), "writing an annotation"),
            other => {
                self.apply(other, persisted).await?;
                return Ok(None);
            }
        };
        let body = self.guarded(metadata);
        let written = patch_server_for_user_data(&self.term.client, &self.namespace, &self.name, &body)
            .await
            .map_err(|e| write_failure(context, &e))?;
        self.wrote(written.metadata.resource_version.unwrap_or_default());
        // The API server checked userData as base64 (`format: byte`), as
        // `UserData` decodes it. One that does not decode is no answer the
        // pass can use: it is not taken for a Server without user data.
        match written.spec.and_then(|spec| spec.user_data) {
            None => Ok(None),
            Some(text) => UserData::from_base64(&text).map(Some).map_err(|_| {
                let unread = ApiCause::NoAnswer("the Server's userData as written does not decode as base64".into());
                ActionFailure::Api(ApiFailure::new(context, unread))
            }),
        }
    }

    fn cloud(&self) -> Result<CloudHandle, ActionFailure> {
        self.cloud.clone().map_err(|reason| {
            let not_sent = ApiCause::NotSent(NotSent::NoCloud { reason: reason.to_string() });
            ActionFailure::Api(ApiFailure::new("acting on the provider", not_sent))
        })
    }

    /// Merge-patches the Server's metadata, guarded by its resourceVersion.
    async fn patch_server_metadata(&mut self, metadata: Value, context: &str) -> Result<(), ActionFailure> {
        let body = self.guarded(metadata);
        let written = patch_server(&self.term.client, &self.namespace, &self.name, Part::Main, &body)
            .await
            .map_err(|e| write_failure(context, &e))?;
        self.wrote(written.resource_version.unwrap_or_default());
        Ok(())
    }

    /// A metadata merge patch guarded by the pass's resourceVersion.
    fn guarded(&self, mut metadata: Value) -> Value {
        metadata["resourceVersion"] = json!(self.resource_version);
        json!({ "metadata": metadata })
    }

    /// Writes one of the core's records (see [`Action::Record`]): true
    /// whatever changed since the pass read the Server, so a concurrent
    /// writer must not make it fail. Guarded first; on a conflict it is sent
    /// without the precondition (the API server then applies it to the latest
    /// object) and the pass keeps its old resourceVersion, so its later
    /// guarded writes still fail rather than overwrite the change it missed.
    async fn record_annotations(&mut self, metadata: Value) -> Result<(), ActionFailure> {
        const CONTEXT: &str = "recording annotations";
        match self.patch_server_metadata(metadata.clone(), CONTEXT).await {
            Err(ActionFailure::Conflict(_)) => {}
            other => return other,
        }
        let body = json!({ "metadata": metadata });
        let written = patch_server(&self.term.client, &self.namespace, &self.name, Part::Main, &body)
            .await
            .map_err(|e| write_failure(CONTEXT, &e))?;
        // Unguarded: what it replaced is not known, what it made is.
        let made = written.resource_version.unwrap_or_default();
        self.term.own_writes.wrote(&self.uid, None, &made, !self.written, std::time::Instant::now());
        self.written = true;
        Ok(())
    }

    /// Sends the core's status merge patch to /status, guarded by the
    /// resourceVersion; 409 is a Conflict for the core.
    async fn write_status(&mut self, patch: &Value) -> Result<(), ActionFailure> {
        let body = json!({ "metadata": { "resourceVersion": self.resource_version }, "status": patch });
        let written = patch_server(&self.term.client, &self.namespace, &self.name, Part::Status, &body)
            .await
            .map_err(|e| write_failure("writing the status", &e))?;
        self.wrote(written.resource_version.unwrap_or_default());
        Ok(())
    }

    /// A guarded write succeeded: the pass goes on from `written`, and the
    /// term remembers the version it replaced.
    fn wrote(&mut self, written: String) {
        let now = std::time::Instant::now();
        self.term.own_writes.wrote(&self.uid, Some(&self.resource_version), &written, !self.written, now);
        self.written = true;
        self.resource_version = written;
    }

    /// Adds or removes the Server's reference finalizer on a consumed
    /// resource through the reference writer, which coalesces the writes of
    /// every pass to one object; returns once the change is written.
    async fn set_reference(&self, reference: &Reference, add: bool) -> Result<(), ActionFailure> {
        let target = Target { kind: reference.kind, namespace: self.namespace.clone(), name: reference.name.clone() };
        // The cache's copy seeds the writer's first write to an object (a
        // stale one costs a retry, never a wrong write).
        let cached = || {
            let name = Some(target.name.as_str());
            let named = |meta: &kube::api::ObjectMeta, _: &dyn Fn(&str) -> bool| meta.name.as_deref() == name;
            let found = self.caches.consumed(reference.kind, &target.namespace, &named, Finalizers::All);
            found.into_iter().next().map(|found| kube::api::ObjectMeta {
                resource_version: Some(found.resource_version),
                // An empty list reads as none: if the object has `[]`, the
                // writer's test fails and it reads the object again.
                finalizers: Some(found.resource.finalizers).filter(|f| !f.is_empty()),
                ..Default::default()
            })
        };
        self.term.references.set(target.clone(), &reference.finalizer, add, cached).await
    }
}

/// A failed Server write, for the core: 404 means the Server is gone.
fn write_failure(context: &str, error: &kube::Error) -> ActionFailure {
    if is_not_found(error) { ActionFailure::ServerGone } else { action_failure(context, error) }
}

/// Annotation changes as a merge patch's `annotations`: a value sets, a
/// null removes.
/// The metadata patch adding the Server's finalizer, with `annotations`.
fn finalizer_added(persisted: &CoreServer, annotations: &[(&'static str, Option<String>)]) -> Value {
    let mut finalizers = persisted.meta.finalizers.clone();
    finalizers.push(SERVER_FINALIZER.to_owned());
    let mut metadata = json!({ "finalizers": finalizers });
    if !annotations.is_empty() {
        metadata["annotations"] = annotation_map(annotations);
    }
    metadata
}

fn annotation_map(changes: &[(&'static str, Option<String>)]) -> Value {
    Value::Object(changes.iter().map(|(key, value)| ((*key).to_owned(), json!(value))).collect())
}

/// The status fields a decision's status writes change (their names, never
/// their values), for the debug log of what a pass decided.
fn status_fields(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::WriteStatus(patch) => patch.as_object(),
            _ => None,
        })
        .flat_map(|fields| fields.keys().map(String::as_str))
        .collect()
}
