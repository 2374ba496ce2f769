//! When a listed provider view is enough to act on, and when the pass must
//! read the provider live first (DESIGN, "The provider's view: listed or
//! live"). The adapter decides once from the listed view; if this rule asks
//! for a live read, it reads, and decides again from what it read.

use jiff::{SignedDuration, Timestamp};

use super::decision::{Action, Decision};
use super::facts::{Facts, NetworkingView, ProviderRead, ProviderView};
use crate::issued::IssuedCreate;
use crate::model::Server;
use crate::options::Options;
use crate::port::AttachedResource;
use crate::predicate::ever_booted;

/// Why a decision made from a listed view may not be acted on: the pass
/// must read the provider live and decide again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveRead {
    /// The decision creates, deletes or rebuilds a provider server, or
    /// changes a port not known bound to the listed server: only a live
    /// read may lead to either.
    ChangesTheProvider,
    /// The list does not show the server. A list proves absence only at its
    /// start, and a create issued since (by this replica or another) may
    /// have landed; every decision from absence (create, count a lost
    /// create, park a vanished server, release on delete) needs a live read.
    NotListed,
    /// The Server is being deleted: its release rests on the provider.
    Deleting,
    /// A failed server is being deleted to retry: the list may show it
    /// after the delete finished.
    Retrying,
    /// The list is older than [`Options::listed_view_max_age`].
    TooOld,
    /// The current attempt's create was issued after the list started: what
    /// the list shows is not that create's server.
    PredatesTheCreate,
    /// The server never booted and no create of the current attempt is
    /// noted with its time (a retry's count marks the note counted, which
    /// stands for no create): the listed server may be one this controller
    /// deleted since.
    NoCreateNoted,
    /// An image change is under way or pending: every step of a rebuild
    /// decides from the server as the provider shows it now.
    ImageChange,
}

impl LiveRead {
    /// Every reason, e.g. for a metric's label values known in advance.
    pub const ALL: [LiveRead; 8] = [
        LiveRead::ChangesTheProvider,
        LiveRead::NotListed,
        LiveRead::Deleting,
        LiveRead::Retrying,
        LiveRead::TooOld,
        LiveRead::PredatesTheCreate,
        LiveRead::NoCreateNoted,
        LiveRead::ImageChange,
    ];

    pub fn label(self) -> &'static str {
        match self {
            LiveRead::ChangesTheProvider => "changes_the_provider",
            LiveRead::NotListed => "not_listed",
            LiveRead::Deleting => "deleting",
            LiveRead::Retrying => "retrying",
            LiveRead::TooOld => "too_old",
            LiveRead::PredatesTheCreate => "predates_the_create",
            LiveRead::NoCreateNoted => "no_create_noted",
            LiveRead::ImageChange => "image_change",
        }
    }
}

/// Whether `decision`, made from `facts` for `server` at `now`, needs a live
/// read of the provider before it is acted on (`Some(why)`), or may be acted
/// on as it is (`None`; always for a live view).
///
/// A listed view is enough only for a decision that leaves the provider
/// alone, of a Server not being deleted or retried, when the list shows the
/// server, is at most [`Options::listed_view_max_age`] old, and cannot
/// predate anything this controller did to that server since: the server
/// booted (nothing but a delete of the Server removes a booted server), or
/// the current attempt's create was noted before the list started.
/// Such a decision writes what the monitor would write from the same list
/// (status, the boot latch) and the Server's own bookkeeping; a view that
/// changed since is the monitor's next poll to report, and its wake rule
/// brings the next pass.
pub fn live_read_needed(
    server: &Server,
    facts: &Facts,
    decision: &Decision,
    options: &Options,
    now: Timestamp,
) -> Option<LiveRead> {
    let ProviderRead::Listed { at } = facts.provider_read else {
        return None;
    };
    let changes_the_provider = decision.actions.iter().any(|action| match action {
        Action::CreateProviderServer(_) | Action::DeleteProviderServer(_) | Action::RebuildProviderServer(_) => true,
        Action::UpdatePort(_) | Action::EnsureFloatingIp(_) | Action::ReleaseAttachment(_) => {
            !acts_on_a_port_known_bound(facts, action)
        }
        _ => false,
    });
    if changes_the_provider {
        return Some(LiveRead::ChangesTheProvider);
    }
    let ProviderView::Present(record) = &facts.provider else {
        return Some(LiveRead::NotListed);
    };
    if super::rebuild::image_change_in_view(server, record) || decision.status.rebuild != server.status.rebuild {
        return Some(LiveRead::ImageChange);
    }
    if server.meta.deleting {
        return Some(LiveRead::Deleting);
    }
    if server.status.provider_create_retrying || decision.status.provider_create_retrying {
        return Some(LiveRead::Retrying);
    }
    let max_age = SignedDuration::try_from(options.listed_view_max_age).unwrap_or(SignedDuration::MAX);
    if now.duration_since(at) > max_age {
        return Some(LiveRead::TooOld);
    }
    if ever_booted(&server.status) {
        return None;
    }
    let issued = IssuedCreate::of(server)
        .filter(|issued| issued.attempt == server.status.provider_create_failures)
        .and_then(|issued| issued.at);
    match issued {
        // Notes are written in whole seconds: only a list that started in a
        // later second is surely later than the create.
        Some(issued) if issued < at => None,
        Some(_) => Some(LiveRead::PredatesTheCreate),
        None => Some(LiveRead::NoCreateNoted),
    }
}

/// Whether `action` changes the port (or its floating IP) that this pass
/// knows bound to the listed server: read so (the provider unbinds a deleted
/// server's ports, so the read shows the server there now), or made by this
/// term's create of that very server (its own writes). Either way the port
/// is that server's and the Server's: a change to it is right whatever
/// became of the server since, and a floating IP on it is released with the
/// port. A port read unbound or bound to another server is not.
fn acts_on_a_port_known_bound(facts: &Facts, action: &Action) -> bool {
    let (ProviderView::Present(record), NetworkingView::Known(networking)) = (&facts.provider, &facts.networking)
    else {
        return false;
    };
    let Some(port) = networking.port.as_ref().filter(|port| port.bound_to.as_deref() == Some(record.id.as_str()))
    else {
        return false;
    };
    match action {
        Action::UpdatePort(update) => update.port_id == port.id,
        Action::EnsureFloatingIp(request) => request.port_id == port.id,
        Action::ReleaseAttachment(AttachedResource::FloatingIp { id }) => {
            port.floating_ip.as_ref().is_some_and(|ip| &ip.id == id)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        CREATE_ISSUED_ANNOTATION, ConditionReason, ConditionStatus, ConditionType, Phase, set_condition,
    };
    use crate::port::{ProviderServer, ProviderStatus};
    use crate::reconcile::Outcome;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or_default()
    }

    fn created_at(second: i64) -> Server {
        let mut server = Server::default();
        let issued = IssuedCreate { attempt: 0, at: Some(at(second)), ..IssuedCreate::default() };
        server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), issued.value());
        // Written by the pass before its create (a note stands only then).
        let (status, reason) = (ConditionStatus::False, ConditionReason::Provisioning);
        set_condition(&mut server.status.conditions, ConditionType::Available, status, reason, "", at(second));
        server
    }

    fn listed(view: ProviderView, second: i64) -> Facts {
        Facts { provider: view, provider_read: ProviderRead::Listed { at: at(second) }, ..Facts::default() }
    }

    fn present() -> ProviderView {
        ProviderView::Present(ProviderServer { status: ProviderStatus::Build, ..ProviderServer::default() })
    }

    fn done() -> Decision {
        Decision { status: Default::default(), actions: Vec::new(), outcome: Outcome::Done }
    }

    #[test]
    fn a_live_view_is_always_enough() {
        let facts = Facts::default();
        let creates = Decision { actions: vec![Action::CreateProviderServer(Box::default())], ..done() };
        assert_eq!(live_read_needed(&Server::default(), &facts, &creates, &Options::default(), at(100)), None);
    }

    #[test]
    fn a_fresh_list_newer_than_the_create_decides_a_pass_that_leaves_the_provider_alone() {
        let server = created_at(100);
        let options = Options::default();
        assert_eq!(live_read_needed(&server, &listed(present(), 101), &done(), &options, at(110)), None);
        // The note's second may hold the list's start either side of it.
        assert_eq!(
            live_read_needed(&server, &listed(present(), 100), &done(), &options, at(110)),
            Some(LiveRead::PredatesTheCreate)
        );
        assert_eq!(
            live_read_needed(&server, &listed(ProviderView::Absent, 105), &done(), &options, at(110)),
            Some(LiveRead::NotListed)
        );
        assert_eq!(
            live_read_needed(&server, &listed(present(), 101), &done(), &options, at(162)),
            Some(LiveRead::TooOld)
        );
        let deletes = Decision { actions: vec![Action::DeleteProviderServer(Default::default())], ..done() };
        assert_eq!(
            live_read_needed(&server, &listed(present(), 105), &deletes, &options, at(110)),
            Some(LiveRead::ChangesTheProvider)
        );
    }

    /// `listed_view_max_age` is the oldest list that still decides: a list
    /// exactly that old is enough, one a second older is not.
    #[test]
    fn a_list_exactly_the_max_age_old_still_decides() {
        let server = created_at(100);
        let options = Options::default().with_listed_view_max_age(std::time::Duration::from_secs(60));
        let facts = listed(present(), 101);
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(161)), None);
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(162)), Some(LiveRead::TooOld));
    }

    #[test]
    fn without_a_noted_create_only_a_booted_server_is_decided_from_a_list() {
        let mut server = Server::default();
        let options = Options::default();
        let facts = listed(present(), 100);
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(110)), Some(LiveRead::NoCreateNoted));
        server.status.phase = Some(Phase::Running);
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(110)), None);
        server.meta.deleting = true;
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(110)), Some(LiveRead::Deleting));
        server.meta.deleting = false;
        server.status.provider_create_retrying = true;
        assert_eq!(live_read_needed(&server, &facts, &done(), &options, at(110)), Some(LiveRead::Retrying));
    }

    #[test]
    fn a_note_of_an_earlier_attempt_is_not_the_current_create() {
        let mut server = created_at(100);
        server.status.provider_create_failures = 1;
        let facts = listed(present(), 105);
        assert_eq!(
            live_read_needed(&server, &facts, &done(), &Options::default(), at(110)),
            Some(LiveRead::NoCreateNoted)
        );
    }
}
