//! A reconcile pass and a monitor poll, executed like the real adapters do:
//! gather facts, decide, drive server-core's [`Pass`] by performing each
//! action it hands out (the same driver as server-kube's executor), requeue
//! at the fixed interval after Yield or Error. Writes carry the
//! resourceVersion the controller last saw.

use server_core::model::{CREATE_ISSUED_ANNOTATION, Consumed, ResourceKind};
use server_core::monitor::{project_with, projects, projects_as_listed};
use server_core::pass::{Fact, Need, ProviderSource, UserDataCopy, fold_landed_meta};
use server_core::port::{AttachedResource, CreateRequest, Networking, NetworkingSource, RebuildRequest, ServerRef};
use server_core::reconcile::Reference;
use server_core::{
    Action, ActionFailure, ApiCause, ApiFailure, NetworkingView, NotSent, Outcome, Pass, ProviderRead, ProviderView,
    Server,
};

use super::{Engine, ticket_of};
use crate::api_server::ServerPart;
use crate::checker::PassRead;
use crate::explain;
use crate::queue::EventKind;
use crate::term::whole_second;
use crate::world::{CreatePassInFlight, copy_server};

impl Engine {
    /// One reconcile pass of Server `i` by the replica in `arg`, if the
    /// ticket in `arg` is still its pending one. A pass that decides to
    /// create runs its actions when its create call goes out, a few API
    /// round trips after it read its facts (see [`Engine::act`]); any other
    /// runs them at once.
    pub(super) fn reconcile(&mut self, i: usize, arg: u32) -> bool {
        let (ticket, r) = ticket_of(arg);
        if self.postpone(r, EventKind::Reconcile, i, arg) {
            return false;
        }
        let now = self.events.now_ts();
        let acting = self.replicas.is_up(r) && self.replicas.may_act(r);
        let (pass, read, stale, index_answers) = {
            let Some(tracked) = self.api.server_mut(i) else { return false };
            if tracked.ticket[r] != ticket || tracked.pending_at[r] == crate::world::NOT_PENDING {
                return false;
            }
            if let Some(in_flight) = &tracked.in_flight[r] {
                // This replica's previous pass on it has not finished.
                let at = in_flight.at;
                self.events.push(at, EventKind::Reconcile, i, arg);
                return false;
            }
            tracked.pending_at[r] = crate::world::NOT_PENDING;
            if !acting {
                // A follower's pass does nothing: the next term wakes everything.
                return false;
            }
            let Some(view_rv) = tracked.view(r).map(|(_, rv)| rv) else { return false };
            // A pass that reads the version it was woken for (or a later
            // one) pays that wake.
            self.checker.pass_read(i, view_rv);
            let Some((tracked, tenant)) = self.api.server_and_tenant(i) else { return false };
            let Some((view, view_rv)) = tracked.view(r) else { return false };
            let (t, offset) = (tracked.tenant, i - tenant.first);
            let term = self.replicas.term(r);
            let mut copy = self.spare_servers.pop().unwrap_or_default();
            copy_server(&mut copy, view);
            // server-kube's cache keeps a Server's user data only for a
            // retry's create (adapters/kube/src/cached.rs): the pass takes a
            // first create's from the answer to its note's write.
            let copied = if copy.spec.user_data.is_some() && !server_core::awaits_retry_create(&copy.status) {
                copy.spec.user_data = None;
                UserDataCopy::Withheld
            } else {
                UserDataCopy::Held
            };
            let mut pass = Pass::start_with(copy, self.options, now, self.rules.pass(), copied);
            // The pass's needs, answered as server-kube's reader answers
            // them: the tenant's consumed resources, the provider from this
            // term's latest list of the tenant when it holds one (else, and
            // when the pass asks, read through the cloud), the server's port
            // (SimCloud resolves a security group ID to itself) and its
            // attachments.
            let mut index_answers = 0;
            while let Some(need) = pass.poll_need() {
                let listed = match need {
                    Need::Provider => term.and_then(|term| term.listings.view(t, offset)),
                    _ => None,
                };
                let fact = match need {
                    Need::Consumed | Need::ConsumedLive | Need::ConsumedBeforeRelease => Fact::Consumed {
                        consumed: tenant.facts.consumed.clone(),
                        other_identity_references: tenant.facts.other_identity_references.clone(),
                    },
                    Need::Provider | Need::ProviderLive(_) => match listed {
                        Some((view, at)) => Fact::Provider { view, read: ProviderRead::Listed { at }, boot_read: None },
                        None if term.is_some_and(|term| term.listings.proves_absent(t, offset)) => {
                            index_answers += 1;
                            Fact::Provider { view: ProviderView::Absent, read: ProviderRead::Live, boot_read: None }
                        }
                        None => {
                            let view = match self.cloud.get_by(now, Some(tracked.handle)) {
                                Ok(Some(record)) => {
                                    self.cloud.mark_read_by(now, tracked.handle);
                                    ProviderView::Present(record)
                                }
                                Ok(None) => ProviderView::Absent,
                                Err(error) => ProviderView::Unknown(error.to_string()),
                            };
                            Fact::Provider { view, read: ProviderRead::Live, boot_read: None }
                        }
                    },
                    Need::Attachments => Fact::Attachments(tenant.facts.attachments.clone()),
                    Need::Networking { .. } => Fact::Networking(NetworkingView::Known(Networking {
                        port: self.cloud.port_of(&view.meta.uid, now),
                        wanted_security_groups: view.spec.security_groups.iter().map(|g| g.id.clone()).collect(),
                        source: NetworkingSource::Read,
                    })),
                    Need::UserData => Fact::UserData(view.spec.user_data.clone()),
                };
                if pass.handle_fact(fact).is_err() {
                    break;
                }
            }
            let read = PassRead::new(&self.rules, &self.options, view, view_rv, &pass.facts().provider);
            // A view listed before this term began decides nothing: another
            // replica may have acted since (DESIGN "State is scoped to a
            // leadership term").
            let stale = match (pass.provider_source(), pass.facts().provider_read, term) {
                (Some(ProviderSource::Listed), ProviderRead::Listed { at }, Some(term)) => {
                    (at < term.started_second).then_some((at, term.started))
                }
                _ => None,
            };
            self.explain.note(i, self.step, self.events.now(), || {
                format!(
                    "replica {r}: pass on {} (cache lagging: {}), provider {} ({}) -> {}",
                    explain::server(view, view_rv),
                    tracked.lagging[r].is_some(),
                    explain::view(&pass.facts().provider),
                    pass.provider_source().map_or("not read", ProviderSource::label),
                    pass.decision().map(explain::decision).unwrap_or_default()
                )
            });
            (pass, read, stale, index_answers)
        };
        self.stats.reconcile_passes += 1;
        self.stats.index_absent_answers += index_answers;
        self.trace.add(read.provider_code());
        if let Some(source) = pass.provider_source() {
            *self.stats.provider_reads.entry(source.label()).or_insert(0) += 1;
            self.trace.add(source_code(source));
        }
        if let Some((at, started)) = stale {
            self.violation(
                "term",
                i,
                format!("replica {r} decided on a provider view listed at {at}, before its term began (t={started}ms)"),
            );
        }
        if let Some(decision) = pass.decision() {
            self.check_decision(i, &read, decision, true);
        }
        if pass
            .decision()
            .is_some_and(|decision| decision.actions.iter().any(|a| matches!(a, Action::CreateProviderServer(_))))
        {
            let at = self.events.now() + self.faults.between(1, self.config.ha.max_create_lag.max(1));
            if let Some(tracked) = self.api.server_mut(i) {
                tracked.in_flight[r] = Some(Box::new(CreatePassInFlight { pass, read, at }));
            }
            self.events.push(at, EventKind::Act, i, r as u32);
            return true;
        }
        self.finish_pass(i, r, &read, pass);
        true
    }

    /// The actions of replica `r`'s create pass on Server `i`, from the view
    /// it read then: the guard on its writes is that view's resourceVersion.
    pub(super) fn act(&mut self, i: usize, r: usize) -> bool {
        if self.postpone(r, EventKind::Act, i, r as u32) {
            return false;
        }
        let Some(in_flight) =
            self.api.server_mut(i).and_then(|tracked| tracked.in_flight.get_mut(r)).and_then(Option::take)
        else {
            // Its process died meanwhile.
            return false;
        };
        let CreatePassInFlight { pass, read, .. } = *in_flight;
        self.finish_pass(i, r, &read, pass);
        true
    }

    fn finish_pass(&mut self, i: usize, r: usize, read: &PassRead, pass: Pass) {
        let outcome = self.execute(i, r, read, pass);
        self.trace.add(outcome_code(&outcome));
        *self.stats.pass_outcomes.entry(outcome.label()).or_insert(0) += 1;
        if outcome.requeues() {
            let at = self.events.now() + self.config.timing.requeue;
            self.schedule_for(i, r, at);
        }
    }

    fn set_note_orphaned(&mut self, i: usize, orphaned: bool) {
        if let Some(tracked) = self.api.server_mut(i) {
            tracked.note_orphaned = orphaned;
        }
    }

    /// Checks one decision (a pass's, or the follow-up after a failed
    /// action); one that parks the Server may bring an operator's reset.
    fn check_decision(&mut self, i: usize, read: &PassRead, decision: &server_core::Decision, first: bool) {
        let (found, newly_parked) = self.checker.check_decision(i, read, decision, first);
        for (invariant, message) in found {
            self.violation(invariant, i, message);
        }
        if newly_parked {
            self.maybe_schedule_reset(i);
        }
    }

    /// Drives the pass: each action it hands out is performed here, and its
    /// result handed back. Returns the pass's outcome.
    fn execute(&mut self, i: usize, r: usize, read: &PassRead, mut pass: Pass) -> Outcome {
        let mut rv = read.view_rv;
        // A run of reference changes is sent whole, as server-kube sends it,
        // and answered in order: the pass takes no answer after a failure,
        // and what the later changes wrote stands.
        let mut answers: std::collections::VecDeque<Result<(), ActionFailure>> = Default::default();
        // The next answer is that of the note's set-back.
        let mut setting_back = false;
        while pass.poll_action().is_some() {
            // The answer to the create's note, the Server as written, holds
            // the user data the copy withholds: kube-apiserver answers a
            // PATCH with the whole object (tests/e2e_user_data.rs checks
            // what Nova receives through it on kube-apiserver).
            if answers.is_empty() && pass.awaits_user_data() {
                let Some(action) = pass.poll_action() else { break };
                let result = self.run_action(i, r, action, &mut rv, read);
                self.trace.add(action_code(action) * 2 + u64::from(result.is_err()));
                self.note(i, || format!("  {} -> {result:?} (the Server as written)", explain::action(action)));
                match result {
                    Ok(()) => {
                        // The note as written replaces whatever stood.
                        self.set_note_orphaned(i, false);
                        let written = self.api.server(i).and_then(|tracked| tracked.stored_user_data());
                        pass.handle_done_with_user_data(written);
                        // Decided again with the user data: checked as a
                        // follow-up is (its first decision was).
                        if let Some(decision) = pass.decision() {
                            self.check_decision(i, read, decision, false);
                            setting_back = matches!(decision.actions.first(),
                                Some(Action::Annotate { key, .. }) if *key == CREATE_ISSUED_ANNOTATION);
                        }
                    }
                    Err(failure) => {
                        if may_have_landed(&failure) {
                            self.set_note_orphaned(i, true);
                        }
                        pass.handle_failed(failure);
                        if let Some(decision) = pass.decision() {
                            self.check_decision(i, read, decision, false);
                        }
                    }
                }
                continue;
            }
            if answers.is_empty() {
                for action in pass.poll_run() {
                    let result = self.run_action(i, r, action, &mut rv, read);
                    self.trace.add(action_code(action) * 2 + u64::from(result.is_err()));
                    self.note(i, || format!("  {} -> {result:?}", explain::action(action)));
                    answers.push_back(result);
                }
            }
            let Some(result) = answers.pop_front() else { break };
            if std::mem::take(&mut setting_back) {
                // A set-back that failed leaves the note written for no create.
                self.set_note_orphaned(i, result.is_err());
            }
            if result.is_err() {
                answers.clear();
            }
            match result {
                Ok(()) => pass.handle_done(),
                Err(failure) if pass.is_following_up() => pass.handle_failed(failure),
                Err(failure) => {
                    pass.handle_failed(failure);
                    if let Some(decision) = pass.decision() {
                        self.check_decision(i, read, decision, false);
                        self.note(i, || format!("  follow-up: {}", explain::decision(decision)));
                    }
                }
            }
        }
        let (outcome, copy) = pass.finish();
        self.spare_servers.push(copy);
        outcome
    }

    /// Sends a rebuild, checking the rebuild properties against the cloud's
    /// truth: never of a server that has not launched, never a second
    /// accepted rebuild onto the image a server already runs.
    fn rebuild_provider_server(&mut self, i: usize, r: usize, request: &RebuildRequest) -> Result<(), ActionFailure> {
        self.stats.rebuilds_sent += 1;
        let handle = self.cloud.handle(&request.server.uid);
        let now = self.events.now_ts();
        let before = self.cloud.truth_of(handle, now);
        if !before.live_launched {
            self.violation("rebuild", i, "a rebuild sent for a provider server that has not launched".into());
        }
        if let Some((t, offset, _)) = self.api.group_of(i)
            && let Some(term) = self.replicas.term_mut(r)
        {
            term.listings.forget(t, offset, whole_second(now));
        }
        let result = self.cloud.rebuild(now, &request.server.uid, &request.image_id);
        let after = self.cloud.truth_of(handle, now);
        self.note(i, || format!("  cloud rebuild onto {}: {result:?}", request.image_id));
        if after.rebuilds_repeated > before.rebuilds_repeated {
            self.violation("rebuild", i, format!("a second accepted rebuild onto {}", request.image_id));
        }
        result.map_err(ActionFailure::Cloud)
    }

    /// Performs one action.
    fn run_action(
        &mut self,
        i: usize,
        r: usize,
        action: &Action,
        rv: &mut u64,
        read: &PassRead,
    ) -> Result<(), ActionFailure> {
        // The fence refuses every write and cloud call of a replica that may
        // not act (adapters/kube/src/fence.rs), whatever the pass decided.
        if !self.replicas.may_act(r) {
            self.stats.fenced_actions += 1;
            return Err(ActionFailure::Api(ApiFailure::new(action.name(), ApiCause::NotSent(NotSent::NotLeading))));
        }
        match action {
            // Every write to the Server is guarded by the resourceVersion the
            // pass holds, as the kube adapter's executor does: a lagging
            // cache makes it a Conflict, never a write over unseen changes.
            // A metadata write does to the stored Server what the pass folds
            // (`fold_landed_meta`); a status write applies its patch.
            Action::AddFinalizer { .. } | Action::Annotate { .. } => {
                let expected = *rv;
                self.write_server(i, Some(expected), rv, ServerPart::Meta, &|s| {
                    fold_landed_meta(&mut s.meta, action);
                    Ok(())
                })
            }
            Action::RemoveFinalizer => {
                if self.api.server(i).is_some_and(|tracked| !tracked.exists()) {
                    return Err(ActionFailure::ServerGone);
                }
                let expected = *rv;
                self.write_server(i, Some(expected), rv, ServerPart::Meta, &|s| {
                    fold_landed_meta(&mut s.meta, action);
                    Ok(())
                })?;
                let gone = self.api.server(i).is_some_and(|tracked| {
                    tracked.stored().meta.deleting && tracked.stored().meta.finalizers.is_empty()
                });
                if gone {
                    self.remove(i);
                }
                Ok(())
            }
            Action::WriteStatus(patch) => {
                let expected = *rv;
                self.write_server(i, Some(expected), rv, ServerPart::Status, &|s| {
                    patch.apply(&mut s.status);
                    Ok(())
                })
            }
            // A record is true whatever changed since the pass read: written
            // unguarded (server-kube retries it without the precondition).
            Action::Record(_) => self.write_server(i, None, rv, ServerPart::Meta, &|s| {
                fold_landed_meta(&mut s.meta, action);
                Ok(())
            }),
            Action::Emit(event) => {
                *self.stats.events.entry(event.reason.as_str()).or_insert(0) += 1;
                self.trace.add(event.reason as u64);
                Ok(())
            }
            Action::CreateProviderServer(request) => self.create_provider_server(i, r, request),
            Action::DeleteProviderServer(server) => self.delete_provider_server(i, r, server, read),
            Action::RebuildProviderServer(request) => self.rebuild_provider_server(i, r, request),
            // A port goes with its server in SimCloud's model.
            Action::ReleaseAttachment(AttachedResource::Port { .. }) => Ok(()),
            Action::ReleaseAttachment(AttachedResource::FloatingIp { id }) => {
                self.cloud.release_floating_ip(self.events.now_ts(), id).map_err(ActionFailure::Cloud)
            }
            Action::UpdatePort(update) => self
                .cloud
                .update_port(
                    self.events.now_ts(),
                    &update.server.uid,
                    &update.security_groups,
                    &update.allowed_address_pairs,
                )
                .map_err(ActionFailure::Cloud),
            Action::EnsureFloatingIp(request) => self
                .cloud
                .set_floating_ip(self.events.now_ts(), &request.server.uid, true)
                .map_err(ActionFailure::Cloud),
            Action::AddReference(reference) => self.write_reference(i, r, reference, true),
            Action::RemoveReference(reference) => self.write_reference(i, r, reference, false),
        }
    }

    /// A write to the stored Server through the simulated API server: faults,
    /// the resourceVersion precondition, then the change and its watch event.
    fn write_server(
        &mut self,
        i: usize,
        precondition: Option<u64>,
        rv: &mut u64,
        part: ServerPart,
        change: &dyn Fn(&mut Server) -> Result<(), String>,
    ) -> Result<(), ActionFailure> {
        self.stats.writes += 1;
        let faults = self.config.kube;
        // Production guards every write; a test may drop the guard to see
        // what it prevents.
        let precondition = precondition.filter(|_| self.config.ha.guarded_writes);
        if !self.api.server(i).is_some_and(|tracked| tracked.exists()) {
            return Err(not_found());
        }
        if self.faults.chance(faults.write_conflict) {
            // Another writer got there first (a field this model does not
            // carry): the object moved on, our precondition fails. A write
            // without one is applied to the latest object, as the API server
            // does (its retry on conflict, `GuaranteedUpdate`).
            self.api.touch(i);
            if precondition.is_some() {
                self.stats.write_conflicts += 1;
                return Err(ActionFailure::Conflict(answered(409, "Conflict", "the object has been modified")));
            }
        }
        if self.faults.chance(faults.write_dropped) {
            self.stats.writes_dropped += 1;
            return Err(ActionFailure::Api(answered(503, "ServiceUnavailable", "simulated; write not applied")));
        }
        let stored_rv = self.api.server(i).map_or(0, |tracked| tracked.rv());
        if precondition.is_some_and(|expected| expected != stored_rv) {
            return Err(ActionFailure::Conflict(answered(409, "Conflict", "the object has been modified")));
        }
        // An unguarded write moves the pass on only from the version it holds:
        // it does not adopt another writer's change it did not see.
        let adopt = self.api.server(i).is_some_and(|tracked| tracked.rv() == *rv);
        let answer_lost = self.faults.chance(faults.write_lost_answer);
        let new_rv = match self.commit(i, part, change) {
            Ok(new_rv) => new_rv,
            Err(error) => {
                self.violation("patch", i, format!("write could not be applied: {error}"));
                return Err(ActionFailure::Api(answered(422, "Invalid", &error.to_string())));
            }
        };
        if answer_lost {
            self.stats.write_answers_lost += 1;
            return Err(answer_lost_failure());
        }
        if adopt {
            *rv = new_rv;
        }
        Ok(())
    }

    /// A reference change through replica `r`'s writer, as server-kube's
    /// `ReferenceWriter` makes it: what its term last wrote of the object
    /// (else the object as read) decides whether there is anything to write;
    /// a removal is guarded by a test of the list it assumed (a JSON Patch
    /// `test`) and, on a lost race, read again and retried.
    fn write_reference(&mut self, i: usize, r: usize, reference: &Reference, add: bool) -> Result<(), ActionFailure> {
        let tenant = self.api.server(i).map(|tracked| tracked.tenant).unwrap_or_default();
        let target = (tenant, reference.kind, reference.name.clone());
        let stored = match self.api.tenant(tenant).and_then(|t| t.facts.find(reference.kind, &reference.name)) {
            Some(resource) => resource.finalizers.clone(),
            None => return Err(missing(reference)),
        };
        let known = self.replicas.term(r).and_then(|term| term.references.get(&target)).map(<[String]>::to_vec);
        let assumed = known.unwrap_or_else(|| stored.clone());
        if assumed.contains(&reference.finalizer) == add {
            self.stats.reference_writes_spared += 1;
            return Ok(());
        }
        self.stats.writes += 1;
        let faults = self.config.kube;
        if self.faults.chance(faults.write_conflict) {
            self.stats.write_conflicts += 1;
            return Err(ActionFailure::Conflict(answered(409, "Conflict", "the object has been modified")));
        }
        if self.faults.chance(faults.write_dropped) {
            self.stats.writes_dropped += 1;
            return Err(ActionFailure::Api(answered(503, "ServiceUnavailable", "simulated; write not applied")));
        }
        if !add && assumed != stored {
            // The `test` failed: the writer reads the object and writes again.
            self.stats.write_conflicts += 1;
            self.stats.writes += 1;
        }
        let Some(resource) =
            self.api.tenant_mut(tenant).and_then(|t| t.facts.find_mut(reference.kind, &reference.name))
        else {
            return Err(missing(reference));
        };
        if add {
            if !resource.has_finalizer(&reference.finalizer) {
                resource.finalizers.push(reference.finalizer.clone());
            }
        } else {
            resource.finalizers.retain(|f| f != &reference.finalizer);
        }
        let written = resource.finalizers.clone();
        let answer_lost = self.faults.chance(faults.write_lost_answer);
        if let Some(term) = self.replicas.term_mut(r) {
            match answer_lost {
                true => term.references.forget(&target),
                false => term.references.set(target, written),
            }
        }
        if answer_lost {
            self.stats.write_answers_lost += 1;
            return Err(answer_lost_failure());
        }
        Ok(())
    }

    /// CreateProviderServer against the cloud, checked against its truth:
    /// invariant 4 (creates per reset window), 6 (one live server, none for a
    /// removed Server) and the rule that a booted server is never recreated.
    /// A create sends the stored Server's user data, rendered with its
    /// tenant's SSH CA key: never a copy's that withheld it.
    fn check_user_data_sent(&mut self, i: usize, request: &CreateRequest) {
        let Some((tracked, tenant)) = self.api.server_and_tenant(i) else { return };
        let stored = tracked.stored();
        let ca_key =
            stored.spec.ssh_certificate_authority_id.as_deref().and_then(|id| {
                tenant.facts.find(ResourceKind::SshCertificateAuthority, id).and_then(Consumed::public_key)
            });
        let user_data = stored.spec.user_data.as_ref().map(|u| u.0.as_slice());
        let expected = server_core::user_data::render_user_data(user_data, ca_key);
        if expected.as_ref().ok() != Some(&request.user_data) {
            self.violation("user-data", i, "a create sent user data other than the Server's".into());
        }
    }

    fn create_provider_server(&mut self, i: usize, r: usize, request: &CreateRequest) -> Result<(), ActionFailure> {
        let uid = request.server.uid.as_str();
        // The index marks the create in doubt before it is sent.
        let now = whole_second(self.events.now_ts());
        if let Some((t, offset, len)) = self.api.group_of(i)
            && let Some(term) = self.replicas.term_mut(r)
        {
            term.listings.mark_in_doubt(t, len, offset, now);
        }
        self.check_user_data_sent(i, request);
        let before = self.cloud.truth(uid, self.events.now_ts());
        if before.live > 0 {
            // The model hands back the server that exists; a real Nova would
            // make a second one.
            self.stats.duplicate_creates += 1;
            self.violation("13", i, "a create was sent while a provider server of this Server existed".into());
        }
        let (tenant, exists) = match self.api.server(i) {
            Some(tracked) => (tracked.tenant, tracked.exists()),
            None => return Err(not_found()),
        };
        let (window_start, ever_booted) = (self.checker.creates_at_reset(i), self.checker.ever_booted(i));
        let project = self.api.tenant(tenant).map(|t| t.identity.project_id.as_str()).unwrap_or_default();
        let result = self.cloud.create(self.events.now_ts(), project, request);
        let after = self.cloud.truth(uid, self.events.now_ts());
        self.trace.add(u64::from(after.creates_accepted));
        self.note(i, || format!("  cloud create: {result:?} truth {after:?}"));
        if after.creates_accepted > before.creates_accepted {
            let max = u32::try_from(self.options.max_attempts()).unwrap_or(u32::MAX);
            let window = after.creates_accepted - window_start;
            if window > max {
                self.violation("4", i, format!("{window} creates accepted since the last reset, cap {max}"));
            }
            // §7: a server whose status showed a boot is never recreated. One
            // that booted and vanished between two observations the controller
            // cannot know about; the cloud's truth counts those separately.
            if ever_booted {
                self.violation(
                    "1",
                    i,
                    "a provider server was recreated for a Server whose status showed a boot".into(),
                );
            } else if after.creates_after_boot_read > before.creates_after_boot_read {
                self.stats.recreated_shown_boots += 1;
            } else if before.ever_launched {
                self.stats.recreated_unobserved_boots += 1;
            }
            if !exists {
                self.violation("6", i, "a provider server was created for a removed Server".into());
            }
        }
        if after.live > 1 {
            self.violation("6", i, format!("{} provider servers exist for one Server", after.live));
        }
        let record = result.map_err(ActionFailure::Cloud)?;
        // The answer shows the server exists now: the term's next pass may
        // decide from it (the core's rule says when), as server-kube's does.
        let at = whole_second(self.events.now_ts());
        if let Some((t, offset, len)) = self.api.group_of(i)
            && let Some(term) = self.replicas.term_mut(r)
        {
            term.listings.record_answer(t, len, offset, record, at);
        }
        Ok(())
    }

    /// DeleteProviderServer against the cloud. On the retry path (the pass saw
    /// the Server not deleting), invariant 1: never a server that booted.
    fn delete_provider_server(
        &mut self,
        i: usize,
        r: usize,
        server: &ServerRef,
        read: &PassRead,
    ) -> Result<(), ActionFailure> {
        // The pass's own Server (a ServerRef names it by uid, as the port does).
        let handle = match self.api.server(i) {
            Some(tracked) if tracked.stored().meta.uid == server.uid => tracked.handle,
            _ => self.cloud.handle(&server.uid),
        };
        // What was listed or answered about it no longer stands.
        if let Some((t, offset, _)) = self.api.group_of(i)
            && let Some(term) = self.replicas.term_mut(r)
        {
            term.listings.forget(t, offset, whole_second(self.events.now_ts()));
        }
        let before = self.cloud.truth_of(handle, self.events.now_ts());
        let result = self.cloud.delete_by(self.events.now_ts(), Some(handle));
        let after = self.cloud.truth_of(handle, self.events.now_ts());
        self.note(i, || format!("  cloud delete: {result:?} truth {after:?}"));
        if !read.deleting {
            if after.launched_deleted > before.launched_deleted {
                self.violation("1", i, "the retry path deleted a provider server that had launched".into());
            }
            if self.checker.ever_booted(i) {
                self.violation(
                    "1",
                    i,
                    "DeleteProviderServer on the retry path for a Server whose status showed it booted".into(),
                );
            }
        }
        self.trace.add(u64::from(after.live));
        result.map(|_| ()).map_err(ActionFailure::Cloud)
    }

    /// One monitor poll of a tenant, as server-kube's monitor polls a
    /// provider group: the Servers it projects (deleting ones are the
    /// reconciler's, paused ones get no work), one list call for the
    /// identity kept in the term as its latest list, then each Server's
    /// observed status patched (with its resourceVersion) if changed.
    pub(super) fn monitor(&mut self, t: usize) -> bool {
        let interval = self.config.timing.monitor_interval.max(1);
        self.events.push(self.events.now() + interval, EventKind::Monitor, t, 0);
        // Only a replica that may act polls (the monitor is fenced too).
        let Some(r) = self.replicas.first_acting() else { return false };
        let Some(tenant) = self.api.tenant(t) else { return false };
        let (first, len) = (tenant.first, tenant.len);
        let projected =
            |i: usize| self.api.server(i).and_then(|tracked| tracked.view(r)).is_some_and(|(view, _)| monitored(view));
        if !(first..first + len).any(projected) {
            // A group with no Server to project is not listed.
            return false;
        }
        self.stats.monitor_polls += 1;
        let now = self.events.now_ts();
        // Before the list is sent, in whole seconds: no later than its start.
        let listed_at = whole_second(now);
        let project = self.api.tenant(t).map(|tenant| tenant.identity.project_id.as_str()).unwrap_or_default();
        let listed = match self.cloud.list_versions(now, project) {
            Ok(listed) => listed,
            Err(_) => {
                self.stats.monitor_list_failures += 1;
                self.trace.add(u64::MAX);
                return true;
            }
        };
        let handles: Vec<_> = (first..first + len).filter_map(|i| self.api.server(i).map(|s| s.handle)).collect();
        for (handle, _) in &listed {
            self.cloud.mark_read_by(now, *handle);
        }
        let shown: Vec<(usize, u64)> = listed
            .iter()
            .filter_map(|(handle, version)| handles.iter().position(|h| h == handle).map(|offset| (offset, *version)))
            .collect();
        if let Some(term) = self.replicas.term_mut(r) {
            let cloud = &self.cloud;
            term.listings.record_list(t, len, listed_at, &shown, |offset| {
                handles.get(offset).and_then(|handle| cloud.listed_record(*handle, now))
            });
        }
        for (offset, i) in (first..first + len).enumerate() {
            let write = {
                let Some(tracked) = self.api.server(i) else { continue };
                let Some((view, view_rv)) = tracked.view(r) else { continue };
                if !monitored(view) {
                    continue;
                }
                let version = shown.iter().find(|(o, _)| *o == offset).map_or(u64::MAX, |(_, version)| *version);
                // observe is a fixed point (server-core tests it): the same
                // record over the same stored status changes nothing, so that
                // case is skipped without projecting it.
                let memo = (view_rv, version);
                if tracked.monitor_memo == Some(memo) {
                    continue;
                }
                let record = self.replicas.term(r).and_then(|term| term.listings.listed(t, offset));
                let create_noted = view.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION);
                if !projects_as_listed(&view.status, record.is_some(), create_noted) {
                    continue;
                }
                let projected = project_with(self.rules.observe, &view.status, record, now);
                self.stats.observations += 1;
                self.explain
                    .note(i, self.step, self.events.now(), || format!("monitor sees {}", explain::record(record)));
                let Some(patch) = projected else {
                    if let Some(tracked) = self.api.server_mut(i) {
                        tracked.monitor_memo = Some(memo);
                    }
                    continue;
                };
                let mut next = view.status.clone();
                patch.apply(&mut next);
                Some((patch, view_rv, (self.rules.unwritten_wakes)(&view.status, &next)))
            };
            let Some((patch, view_rv, wakes_unwritten)) = write else { continue };
            let mut rv = view_rv;
            let result = self.write_server(i, Some(view_rv), &mut rv, ServerPart::Status, &|s| {
                patch.apply(&mut s.status);
                Ok(())
            });
            self.trace.add(i as u64 * 2 + u64::from(result.is_err()));
            self.note(i, || format!("  monitor write -> {result:?}"));
            if result.is_err() && wakes_unwritten {
                self.stats.latch_wakes += 1;
                let at = self.events.now() + self.config.timing.wake_delay;
                self.schedule_for(i, r, at);
            }
        }
        true
    }
}

/// Whether the monitor projects a Server: server-core's rule, as
/// server-kube's poll asks it.
fn monitored(server: &Server) -> bool {
    projects(server.meta.deleting, server.spec.pause)
}

/// A simulated answer of the API server to a write.
fn answered(code: u16, reason: &str, message: &str) -> ApiFailure {
    ApiFailure::new("a simulated write", ApiCause::answered(code, reason, message))
}

fn not_found() -> ActionFailure {
    ActionFailure::Api(answered(404, "NotFound", "servers.region.unikorn-cloud.org not found"))
}

/// A write applied whose answer never came (a timeout).
/// A write that failed without an answer may have been applied.
fn may_have_landed(failure: &ActionFailure) -> bool {
    matches!(failure, ActionFailure::Api(api) if matches!(api.cause, ApiCause::NoAnswer(_)))
}

fn answer_lost_failure() -> ActionFailure {
    ActionFailure::Api(ApiFailure::new(
        "a simulated write",
        ApiCause::NoAnswer("timed out; the write was applied but its answer lost".into()),
    ))
}

/// A reference change on a consumed object that does not exist.
fn missing(reference: &Reference) -> ActionFailure {
    ActionFailure::Api(ApiFailure::new(
        "a simulated reference write",
        ApiCause::Missing { kind: reference.kind, name: reference.name.clone() },
    ))
}

fn outcome_code(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Done => 1,
        Outcome::Yield(_) => 2,
        Outcome::Terminal(_) => 3,
        Outcome::Error(_) => 4,
    }
}

fn source_code(source: ProviderSource) -> u64 {
    match source {
        ProviderSource::Listed => 1,
        ProviderSource::LiveAfterListed(why) => 2 + why as u64,
        ProviderSource::Live => 0,
    }
}

fn action_code(action: &Action) -> u64 {
    match action {
        Action::AddFinalizer { .. } => 1,
        Action::RemoveFinalizer => 2,
        Action::AddReference(_) => 3,
        Action::RemoveReference(_) => 4,
        Action::WriteStatus(_) => 5,
        Action::Annotate { .. } => 6,
        Action::Record(_) => 10,
        Action::CreateProviderServer(_) => 7,
        Action::DeleteProviderServer(_) => 8,
        Action::Emit(_) => 9,
        Action::ReleaseAttachment(_) => 11,
        Action::UpdatePort(_) => 12,
        Action::EnsureFloatingIp(_) => 13,
        Action::RebuildProviderServer(_) => 14,
    }
}
