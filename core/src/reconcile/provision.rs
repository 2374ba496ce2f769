//! Provisioning after validation, references and the identity gate: the
//! bounded delete-and-retry machine (DESIGN §7) and ensuring the provider
//! server exists.

use super::decision::{
    Action, CREATING_MESSAGE, DELETING_FAILED_MESSAGE, Event, EventReason, EventType, Outcome, PassError,
    RETRY_READY_MESSAGE, Wait,
};
use super::facts::{Facts, ProviderView};
use super::plan::Plan;
use super::rebuild::{self, ImageStep};
use super::references;
use crate::issued::IssuedCreate;
use crate::lifecycle::{Lifecycle, Park, ParkKind, lifecycle, park, refused_park};
use crate::model::{
    ADOPTED_ANNOTATION, CREATE_ISSUED_ANNOTATION, CREATE_REFUSED_MESSAGE_ANNOTATION, ConditionReason, ConditionStatus,
    ConditionType, Consumed, NAME_LABEL, ORGANIZATION_LABEL, PROJECT_LABEL, Phase, REGION_LABEL, ResourceKind, Server,
    SshInjection, USER_DATA_REFUSED_ANNOTATION, set_condition,
};
use crate::monitor::{observe, project_health};
use crate::options::Options;
use crate::port::{CreateRequest, Owner, ServerRef};
use crate::predicate::{ever_booted, record_shows_boot, status_shows_create_failure};
use crate::provider_metadata::provider_tags;
use crate::user_data::{UserDataError, render_user_data};

pub(crate) fn server_ref(server: &Server) -> ServerRef {
    ServerRef { namespace: server.meta.namespace.clone(), name: server.meta.name.clone(), uid: server.meta.uid.clone() }
}

pub(crate) fn provision(server: &Server, facts: &Facts, options: &Options, mut plan: Plan) -> super::Decision {
    let max = options.max_attempts();
    // A server taken over from another controller is reported once: the
    // annotation records the event was sent (a lost annotation write sends
    // it again, never none).
    if let ProviderView::Present(record) = &facts.provider
        && record.adopted
        && server.meta.annotations.get(ADOPTED_ANNOTATION) != Some(&record.id)
    {
        plan.emit(Event {
            type_: EventType::Normal,
            reason: EventReason::ProviderServerAdopted,
            action: "AdoptProviderServer",
            note: format!("Took over provider server {} made by another controller for this Server", record.id),
        });
        plan.annotate(ADOPTED_ANNOTATION, Some(record.id.clone()));
    }
    // A record read in this pass that shows a boot latches provisionedAt now,
    // whatever the status says: from here on nothing deletes it to retry, and
    // a parked server that turns out to run leaves its park. The pass writes
    // the boot as the monitor writes it from the same record (phase, times,
    // addresses, Healthy), so the monitor's next poll has nothing left to
    // write: one status write for the boot, not the latch and then the rest.
    // A rebuild's marker stays the rebuild rule's to move.
    if let ProviderView::Present(record) = &facts.provider
        && record_shows_boot(record)
        && plan.status.provisioned_at.is_none()
    {
        let rebuild = plan.status.rebuild.clone();
        plan.status = observe(&plan.status, Some(record), plan.now);
        plan.status.rebuild = rebuild;
        if plan.status.provisioned_at.is_none() {
            plan.status.provisioned_at = Some(record.launched_at.unwrap_or(plan.now));
        }
    }
    // So does a boot an earlier read of the pass showed (a listed record
    // the live read no longer finds).
    if let Some(seen) = facts.boot_seen
        && plan.status.provisioned_at.is_none()
    {
        plan.status.provisioned_at = Some(seen);
    }
    let view = match &facts.provider {
        ProviderView::Present(_) | ProviderView::Absent => &facts.provider,
        // An outage says nothing new about a park: it stays as it is; nor
        // about a provisioned Server: its conditions stay (the pass waits).
        unknown => {
            if let Some(park) = park(server, options) {
                return plan.finish(Outcome::Terminal(park));
            }
            let provisioned = plan.status.condition(ConditionType::Available).is_some_and(|available| {
                available.status == ConditionStatus::True && available.reason == ConditionReason::Provisioned
            });
            if provisioned {
                return plan.finish_keeping_available(Outcome::Yield(waiting_for(unknown)));
            }
            return plan.finish(Outcome::Yield(waiting_for(unknown)));
        }
    };

    // A rebuild marker on a Server whose server never booted is retired: no
    // rebuild is sent before a boot, and a server that fails before it is
    // created again from the spec's image.
    if !ever_booted(&plan.status) && plan.status.rebuild.is_some() {
        plan.status.rebuild = None;
    }

    // Fail closed: a server that ever booted is never deleted to retry.
    if plan.status.provider_create_retrying && ever_booted(&plan.status) {
        plan.status.provider_create_retrying = false;
    }

    if !plan.status.provider_create_retrying {
        let failed = status_shows_create_failure(&plan.status);
        let lost = !failed && lost_before_launch(server, view, options, &plan);
        if failed || lost {
            let attempt = plan.status.provider_create_failures.saturating_add(1);
            if attempt >= max {
                return park_at_cap(server, options, plan);
            }
            plan.status.provider_create_failures = attempt;
            plan.status.provider_create_retrying = true;
            // The create the note records is accounted for now: the note
            // says so (left as it was, its attempt number could match the
            // counter again after an operator's reset and count the same
            // create twice) and names the failed server the retry deletes.
            if let Some(issued) = IssuedCreate::of(server) {
                let failed_server = match view {
                    ProviderView::Present(record) => Some(record.id.as_str()),
                    _ => None,
                };
                plan.annotate(CREATE_ISSUED_ANNOTATION, Some(issued.counted(failed_server).value()));
            }
            let what = if failed { "failed before launch" } else { "disappeared before it was seen to launch" };
            plan.emit(Event {
                type_: EventType::Normal,
                reason: EventReason::ProviderCreateRetrying,
                action: "RetryProviderCreate",
                note: format!("Provider server {what}; retrying (attempt {}/{max})", attempt.saturating_add(1)),
            });
        }
    }

    if plan.status.provider_create_retrying {
        return clear_failed_server(server, facts, view, options, plan);
    }
    ensure_exists(server, facts, view, options, plan)
}

fn waiting_for(view: &ProviderView) -> Wait {
    match view {
        ProviderView::Unknown(reason) => Wait::ProviderUnknown { reason: reason.clone() },
        ProviderView::RegionUnserved(unserved) => Wait::RegionUnserved(unserved.clone()),
        _ => Wait::NoCloudAccount,
    }
}

/// A create this controller issued (an annotation says so, written before the
/// create ran) whose provider server is now absent, with no sign it booted:
/// the attempt is spent, so it counts against the cap like a failure. This
/// keeps creates per Server bounded even when the provider drops a server
/// between two observations.
///
/// An absence within the grace after the create is not counted: the create
/// may still be in flight (see [`awaiting_issued_create`]).
fn lost_before_launch(server: &Server, view: &ProviderView, options: &Options, plan: &Plan) -> bool {
    *view == ProviderView::Absent
        && outstanding_create(server, plan).is_some_and(|issued| !issued.in_grace(plan.now, options.create_grace))
        && !ever_booted(&plan.status)
        && refused_park(server).is_none()
}

/// The create issued for the current attempt, if one is outstanding.
fn outstanding_create(server: &Server, plan: &Plan) -> Option<IssuedCreate> {
    IssuedCreate::of(server).filter(|issued| issued.attempt == plan.status.provider_create_failures)
}

/// Whether a create was issued so recently that its provider server's
/// absence proves nothing yet: creating again could make a second server
/// once the first lands. A note of the current attempt or a later one: an
/// operator lowering `providerCreateFailures` while a create is in flight
/// makes its note name a later attempt than the counter, and the create may
/// land all the same. A note of an earlier attempt is settled: the counter
/// moved past it only by counting that attempt, after its server was seen
/// failing or its grace ran out.
fn awaiting_issued_create(server: &Server, options: &Options, plan: &Plan) -> bool {
    IssuedCreate::of(server)
        .filter(|issued| issued.attempt >= plan.status.provider_create_failures)
        .is_some_and(|issued| issued.in_grace(plan.now, options.create_grace))
}

/// At the cap the server is parked: no delete, no create, until an operator
/// resets `providerCreateFailures`. The counter is clamped, so passes after a
/// restart never advance it, and the event fires once, on entry.
fn park_at_cap(server: &Server, options: &Options, mut plan: Plan) -> super::Decision {
    let max = options.max_attempts();
    let park = Park::AtCap { max };
    let already_parked = lifecycle(server, options) == Lifecycle::Parked(ParkKind::AtCap);
    plan.status.provider_create_failures = max;
    plan.status.provider_create_retrying = false;
    // No create is outstanding once parked, so a reset re-arms cleanly.
    if IssuedCreate::of(server).is_some() {
        plan.annotate(CREATE_ISSUED_ANNOTATION, None);
    }
    if !already_parked {
        plan.emit(Event {
            type_: EventType::Warning,
            reason: EventReason::ProviderCreateFailed,
            action: "ParkServer",
            note: park.available_message(&server.meta.namespace, &server.meta.name),
        });
    }
    plan.finish(Outcome::Terminal(park))
}

/// Deletes the failed provider server; once the provider no longer shows
/// it, re-arms the create and makes it in the same pass: the live read that
/// shows the failed server gone is the one a create is decided on, and the
/// pass's guarded status write (retrying cleared, Available) goes before the
/// create as for any create. A present server other than the one the count
/// named is not the failed one: a copy of the Server from before the next
/// create (a lagging cache) finds that create's server, and it is the
/// Server's server now, never deleted as the failed one.
fn clear_failed_server(
    server: &Server,
    facts: &Facts,
    view: &ProviderView,
    options: &Options,
    mut plan: Plan,
) -> super::Decision {
    match view {
        ProviderView::Present(record) if is_the_failed_server(server, &record.id) => {
            // The server is named before it is deleted (a guarded write: a
            // copy from before the next create fails it and deletes
            // nothing), unless this pass's count or an earlier one named it.
            // Here a stored counted note names this server.
            let named_before = IssuedCreate::counted_of(server).is_some();
            let named_now = plan
                .planned_annotation(CREATE_ISSUED_ANNOTATION)
                .flatten()
                .and_then(IssuedCreate::parse_value)
                .is_some_and(|note| note.names_failed_server(&record.id));
            if !named_before && !named_now {
                let note = IssuedCreate { attempt: plan.status.provider_create_failures, ..IssuedCreate::default() };
                plan.annotate(CREATE_ISSUED_ANNOTATION, Some(note.counted(Some(&record.id)).value()));
            }
            reset_runtime_status(&mut plan, DELETING_FAILED_MESSAGE);
            plan.provider(Action::DeleteProviderServer(server_ref(server)));
            plan.finish(Outcome::Yield(Wait::DeletingFailedServer))
        }
        _ => {
            plan.status.provider_create_retrying = false;
            reset_runtime_status(&mut plan, RETRY_READY_MESSAGE);
            plan.emit(Event {
                type_: EventType::Normal,
                reason: EventReason::ProviderCreateRetryReady,
                action: "RetryProviderCreate",
                note: "Failed provider server deleted; the create will be retried".into(),
            });
            ensure_exists(server, facts, view, options, plan)
        }
    }
}

/// Whether the provider server `id` is the one the retry deletes: the one
/// the count was decided on. A count without its note (an operator's reset
/// re-arming the retry, or a note whose write was lost) names none, and the
/// present server, which shows no boot, is taken for the failed one and
/// named before its delete.
fn is_the_failed_server(server: &Server, id: &str) -> bool {
    IssuedCreate::counted_of(server).is_none_or(|counted| counted.names_failed_server(id))
}

/// "Not found" observed before a create says nothing about it: the status
/// says the server is being created, so the monitor's next "not found" is a
/// change that wakes a pass (the lost-before-launch edge of `should_wake`)
/// rather than a repeat it does not write.
fn arm_lost_before_launch_edge(plan: &mut Plan) {
    if unseen_health(plan) {
        healthy_provisioning(plan, CREATING_MESSAGE);
    }
}

/// Whether Healthy says the provider does not show the server (not found,
/// or UNKNOWN): the state whose entry is a wake edge.
fn unseen_health(plan: &Plan) -> bool {
    plan.status
        .condition(ConditionType::Healthy)
        .is_some_and(|h| h.status == ConditionStatus::Unknown && h.reason == ConditionReason::Unknown)
}

/// Healthy is Unknown while the controller is (re)creating the server.
fn healthy_provisioning(plan: &mut Plan, message: &str) {
    let now = plan.now;
    set_condition(
        &mut plan.status.conditions,
        ConditionType::Healthy,
        ConditionStatus::Unknown,
        ConditionReason::Provisioning,
        message,
        now,
    );
}

/// Runtime status reset: what described the failed provider server goes;
/// `macAddress` and the `provisionedAt` latch stay.
fn reset_runtime_status(plan: &mut Plan, message: &str) {
    let status = &mut plan.status;
    status.phase = Some(Phase::Pending);
    status.private_ip = None;
    status.public_ip = None;
    status.launched_at = None;
    status.scheduled_at = None;
    healthy_provisioning(plan, message);
}

fn ensure_exists(
    server: &Server,
    facts: &Facts,
    view: &ProviderView,
    options: &Options,
    mut plan: Plan,
) -> super::Decision {
    match view {
        ProviderView::Present(record) => {
            // The create's own status write may have been lost (a conflict
            // ends that pass); a present server is no longer "not found",
            // and the create-time arming of the lost-before-launch edge
            // must still hold, or its vanishing would be no change to wake on.
            // Healthy is the monitor's: the pass writes what the monitor
            // writes from this record, never something its next poll
            // overwrites (a record Nova reports UNKNOWN stays Unknown).
            if unseen_health(&plan) {
                let now = plan.now;
                project_health(&mut plan.status, Some(record), now);
            }
            match rebuild::converge_image(server, record, &mut plan) {
                ImageStep::Continue => {}
                ImageStep::End(outcome) => return plan.finish(outcome),
                ImageStep::Submit(request) => {
                    plan.provider(Action::RebuildProviderServer(request));
                    plan.write_status_after_provider();
                    return plan.finish(Outcome::Done);
                }
            }
            report_unapplied_spec_change(server, &mut plan);
            for action in references::to_prune(server, facts) {
                plan.trail(action);
            }
            let outcome = super::networking::converge(server, record, &facts.networking, &mut plan);
            plan.finish(outcome)
        }
        _ if ever_booted(&plan.status) => {
            let already_reported = lifecycle(server, options) == Lifecycle::Parked(ParkKind::MissingAfterBoot);
            // What the monitor records for an absent server, so the status
            // itself says why it is parked (and agrees with the next poll).
            plan.status = observe(&plan.status, None, plan.now);
            if !already_reported {
                plan.emit(Event {
                    type_: EventType::Warning,
                    reason: EventReason::ProviderServerMissing,
                    action: "DetectMissingServer",
                    note: "Provider server disappeared after it booted; not recreating it".into(),
                });
            }
            plan.finish(Outcome::Terminal(Park::MissingAfterBoot))
        }
        // Every attempt is spent: the cap is sticky until an operator reset.
        _ if plan.status.provider_create_failures >= options.max_attempts() => park_at_cap(server, options, plan),
        _ => match refused_park(server) {
            Some(park) => plan.finish(Outcome::Terminal(park)),
            None if awaiting_issued_create(server, options, &plan) => plan.finish(Outcome::Yield(Wait::IssuedCreate)),
            None => create(server, facts, plan),
        },
    }
}

/// User data that cannot be sent parks the server, before any create, until
/// its spec changes: recorded as this generation's refused user data, so
/// later passes park from the record (and do not render the data again). The
/// message is the refusal's (bounded, never quoting the data); the event
/// fires once, on entry.
fn park_refused_user_data(server: &Server, error: &UserDataError, mut plan: Plan) -> super::Decision {
    let message = format!("user data refused ({}): {error}", error.reason());
    plan.record(USER_DATA_REFUSED_ANNOTATION, Some(server.meta.generation.to_string()));
    plan.record(CREATE_REFUSED_MESSAGE_ANNOTATION, Some(message.clone()));
    plan.emit(Event {
        type_: EventType::Warning,
        reason: EventReason::UserDataRefused,
        action: "CreateProviderServer",
        note: message.clone(),
    });
    plan.finish(Outcome::Terminal(Park::UserDataRefused { message }))
}

fn create(server: &Server, facts: &Facts, mut plan: Plan) -> super::Decision {
    let ca_key = server
        .spec
        .ssh_certificate_authority_id
        .as_deref()
        .and_then(|id| facts.find(ResourceKind::SshCertificateAuthority, id).and_then(Consumed::public_key));
    let user_data = server.spec.user_data.as_ref().map(|u| u.0.as_slice());
    let user_data = match render_user_data(user_data, ca_key) {
        Ok(rendered) => rendered,
        // The CA key may be fixed without a spec change: requeue, not park.
        Err(error) if error.reason().is_ssh_key() => {
            return plan.finish(Outcome::Error(PassError::UserData(error)));
        }
        // The user data itself is refused: only a spec change can fix it.
        Err(error) => return park_refused_user_data(server, &error, plan),
    };
    let spec = &server.spec;
    let tags = provider_tags(&spec.tags);
    if !tags.dropped.is_empty() {
        plan.emit(Event {
            type_: EventType::Normal,
            reason: EventReason::ProviderTagsDropped,
            action: "CreateProviderServer",
            note: dropped_tags_note(&tags.dropped),
        });
    }
    let label = |key: &str| server.meta.label(key).unwrap_or_default().to_owned();
    let request = CreateRequest {
        server: server_ref(server),
        name: server.meta.label(NAME_LABEL).unwrap_or(&server.meta.name).to_owned(),
        flavor_id: spec.flavor_id.clone(),
        image_id: spec.image.id.clone(),
        networks: spec.networks.clone(),
        network_ids: spec
            .networks
            .iter()
            .filter_map(|n| {
                let provider_id = facts.find(ResourceKind::Network, &n.id).and_then(Consumed::provider_id)?;
                Some((n.id.clone(), provider_id.to_owned()))
            })
            .collect(),
        security_group_ids: spec.security_groups.iter().map(|g| g.id.clone()).collect(),
        public_ip: spec.public_ip_allocation.as_ref().is_some_and(|p| p.enabled),
        user_data,
        tags: tags.tags,
        identity_ssh_key: spec.resolved_ssh_injection() == SshInjection::IdentityKeypair,
        owner: Owner {
            organization_id: label(ORGANIZATION_LABEL),
            project_id: label(PROJECT_LABEL),
            region_id: label(REGION_LABEL),
        },
        first_create: never_created(server),
    };
    arm_lost_before_launch_edge(&mut plan);
    // Every create is preceded by a fresh note of its attempt and time: the
    // grace of its absence runs from here.
    let issued = IssuedCreate {
        attempt: plan.status.provider_create_failures,
        at: Some(plan.now),
        flavor_id: Some(spec.flavor_id.clone()),
        image_id: Some(spec.image.id.clone()),
        ..IssuedCreate::default()
    };
    plan.annotate(CREATE_ISSUED_ANNOTATION, Some(issued.value()));
    plan.provider(Action::CreateProviderServer(Box::new(request)));
    for action in references::to_prune(server, facts) {
        plan.trail(action);
    }
    plan.finish(Outcome::Yield(Wait::Creating))
}

/// Whether no create was ever issued for `server` (as the pass read it): no
/// pass has written its Available condition, no create note stands and no
/// attempt was counted. Every pass that creates writes Available before the
/// create, guarded by the resourceVersion it read, so a copy older than
/// that write never reaches its create; and a create's note is released
/// before Available stands only when its create was never sent.
pub fn never_created(server: &Server) -> bool {
    no_create_begun(&server.status, server.meta.annotations.contains_key(CREATE_ISSUED_ANNOTATION))
}

/// [`never_created`] from the status and whether a create note stands.
pub fn no_create_begun(status: &crate::model::ServerStatus, create_noted: bool) -> bool {
    status.condition(ConditionType::Available).is_none() && status.provider_create_failures == 0 && !create_noted
}

/// The event note for tags left out of a create: their names (spec keys, not
/// values), bounded.
fn dropped_tags_note(dropped: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = dropped.iter().take(SHOWN).map(|name| quoted_bounded(name)).collect();
    if dropped.len() > SHOWN {
        names.push(format!("and {} more", dropped.len() - SHOWN));
    }
    format!(
        "{} tag(s) left out of the provider metadata: the provider accepts keys of letters, digits and -_:. \
         (at most 255) and values of at most 255 characters: {}",
        dropped.len(),
        names.join(", ")
    )
}

/// A spec value in a message: quoted, at most 64 characters.
fn quoted_bounded(text: &str) -> String {
    const MAX: usize = 64;
    if text.chars().count() <= MAX {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head:?}…")
    }
}

/// A provider server is never resized for a new flavor (as with the Go
/// controller; an image change is rebuilt, see `rebuild`): the change is
/// reported on Available's message and, when that message changes, in one
/// event, so an edit is never silently ignored. Only a create this
/// controller issued records what it sent.
fn report_unapplied_spec_change(server: &Server, plan: &mut Plan) {
    let Some(issued) = IssuedCreate::of(server) else { return };
    let spec = &server.spec;
    let changed = [("spec.flavorID", issued.flavor_id.as_deref(), spec.flavor_id.as_str())];
    let changes: Vec<String> = changed
        .iter()
        .filter_map(|(field, created, now)| {
            let created = (*created)?;
            (created != *now).then(|| {
                format!(
                    "{field} is {} but the server was created with {}",
                    quoted_bounded(now),
                    quoted_bounded(created)
                )
            })
        })
        .collect();
    if changes.is_empty() {
        return;
    }
    let note = format!(
        "{}: not applied to the existing provider server (delete and recreate the Server to apply it)",
        changes.join("; ")
    );
    plan.note_provisioned(note.clone());
    let message = plan.provisioned_message();
    let reported = server.status.condition(ConditionType::Available).is_some_and(|c| c.message == message);
    if !reported {
        plan.emit(Event {
            type_: EventType::Warning,
            reason: EventReason::SpecChangeNotApplied,
            action: "UpdateProviderServer",
            note,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag_names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("tag-{i}")).collect()
    }

    /// A note about dropped tags names at most five of them and counts the
    /// rest, so an event stays bounded however many tags a spec has.
    #[test]
    fn a_dropped_tags_note_names_five_tags_and_counts_the_rest() {
        let five = dropped_tags_note(&tag_names(5));
        assert!(five.starts_with("5 tag(s) left out") && five.ends_with("\"tag-3\", \"tag-4\""), "{five}");
        let seven = dropped_tags_note(&tag_names(7));
        assert!(seven.starts_with("7 tag(s) left out") && seven.ends_with("\"tag-4\", and 2 more"), "{seven}");
        assert!(!seven.contains("tag-5"), "{seven}");
    }

    /// A spec value in a message is quoted, and cut after 64 characters with
    /// an ellipsis; one of exactly 64 is shown whole.
    #[test]
    fn a_spec_value_in_a_message_is_quoted_and_cut_after_64_characters() {
        let exactly = "a".repeat(64);
        assert_eq!(quoted_bounded(&exactly), format!("\"{exactly}\""));
        assert_eq!(quoted_bounded("m1.small"), "\"m1.small\"");
        let longer = format!("{}é", "b".repeat(64));
        assert_eq!(quoted_bounded(&longer), format!("\"{}\"…", "b".repeat(64)));
    }
}
