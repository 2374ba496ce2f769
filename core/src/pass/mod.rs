//! The protocol of one pass, sans I/O: what to read before deciding, which
//! action runs next, what a failure switches to, and the Server as last
//! persisted. Every driver (server-kube's executor, the simulator,
//! `explain`) drives it the same way:
//!
//! ```text
//! let mut pass = Pass::start(server, options, now);
//! while let Some(need) = pass.poll_need() {
//!     pass.handle_fact(read(need))?;      // the driver's reads, one need
//! }
//! while let Some(action) = pass.poll_action() {
//!     match apply(action) {               // the driver's I/O, one action
//!         Ok(()) => pass.handle_done(),
//!         Err(failure) => pass.handle_failed(failure),
//!     }
//! }
//! let outcome = pass.into_outcome();
//! ```
//!
//! The needs come in the order the rules require ([`needs`]): the consumed
//! resources (confirmed live when the cache lacks what the Server names),
//! the provider server (listed or live), its ports or networking when the
//! view calls for them; then the pass decides. A decision made from a
//! listed view that [`live_read_needed`] refuses asks for a live read and
//! decides again. A create whose user data the driver's copy withholds takes
//! it from the answer to its note's write when that write comes first
//! ([`Pass::awaits_user_data`]), else asks for it; either way it decides
//! again with it.
//!
//! The actions of the decision run in order. The first failure ends them:
//! [`action_failed`] judges it against the Server as last persisted and
//! returns a follow-up decision, whose actions run the same way. A failure
//! of a follow-up's action ends the pass with what [`action_failed`] says
//! about that failure (its actions are not run: the next pass decides from
//! fresh state); see DESIGN "One pass".

pub mod needs;

use jiff::Timestamp;

pub use self::needs::{Fact, Need, ProviderSource, confirms_consumed_live, confirms_release_live};
use crate::issued::awaits_first_create;
use crate::lifecycle::Park;
use crate::model::{CREATE_ISSUED_ANNOTATION, ObjectMeta, SERVER_FINALIZER, Server, ServerStatus, UserData};
use crate::predicate::record_shows_boot;
use crate::reconcile::{
    Action, ActionFailure, Decision, Event, EventReason, EventType, Facts, LiveRead, Options, Outcome, PassError,
    ProviderRead, ProviderView, Wait, action_failed, live_read_needed, needs_facts, reads_attachments,
    reads_networking, reconcile,
};

/// The rule that judges a failed action: [`action_failed`] unless a test
/// swaps in another (the simulator checks its checker with broken rules).
pub type FollowUpRule = fn(&Server, &Action, &ActionFailure, Timestamp) -> Decision;

/// The rules a pass applies, as plain function pointers so a test can swap
/// one for a deliberately broken rule and watch a checker catch it.
#[derive(Clone, Copy)]
pub struct Rules {
    /// Decides the pass from its facts.
    pub reconcile: fn(&Server, &Facts, &Options, Timestamp) -> Decision,
    /// Whether a decision made from a listed view needs a live read first.
    pub live_read_needed: fn(&Server, &Facts, &Decision, &Options, Timestamp) -> Option<LiveRead>,
    /// Judges a failed action.
    pub action_failed: FollowUpRule,
}

impl Rules {
    /// server-core's rules.
    pub const CORE: Rules = Rules { reconcile, live_read_needed, action_failed };
}

impl Default for Rules {
    fn default() -> Self {
        Rules::CORE
    }
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").finish_non_exhaustive()
    }
}

/// Whether the driver's copy of the Server holds its user data. A cache may
/// leave it out (it can be large); the pass then asks for it
/// ([`Need::UserData`]) when it creates, the one action that sends it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UserDataCopy {
    /// The copy holds the user data, if the Server has any.
    #[default]
    Held,
    /// The Server has user data the copy leaves out.
    Withheld,
}

/// A fact handed to a pass that did not ask for it: a driver bug, reported
/// rather than guessed around.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the pass needs {needed:?} and was given an answer to {given}")]
pub struct UnaskedFact {
    pub needed: Option<Need>,
    pub given: &'static str,
}

/// One pass being driven: what it has read, the decision whose actions
/// run, and the Server as its successful writes left it.
#[derive(Clone, Debug)]
pub struct Pass {
    /// The Server as last persisted: as read, with every write of this pass
    /// that is known to have landed folded in.
    server: Server,
    facts: Facts,
    options: Options,
    rules: Rules,
    reads: Reads,
    /// The decision whose actions run; `None` while gathering, and when the
    /// pass ended before deciding.
    decision: Option<Decision>,
    /// Index of the next action of `decision` to run.
    next: usize,
    stage: Stage,
    now: Timestamp,
}

/// What the pass has read so far.
#[derive(Clone, Debug, Default)]
struct Reads {
    consumed: Option<ConsumedRead>,
    provider: Option<ProviderSource>,
    attachments: bool,
    networking: bool,
    user_data: UserDataCopy,
    /// The create's note, written first, whose answer brings the user data
    /// the copy withholds.
    note_write: Option<NoteWrite>,
}

/// A create note written before the user data is known: the Server as that
/// write left it holds the user data the create sends.
#[derive(Clone, Debug)]
struct NoteWrite {
    /// The note the Server held before the write: what it is set back to
    /// when the pass, deciding again with the user data, sends no create.
    before: Option<String>,
    /// The note written.
    written: String,
    /// The write landed; the user data is awaited.
    landed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConsumedRead {
    Cached,
    Live,
}

#[derive(Clone, Debug, PartialEq)]
enum Stage {
    /// Waiting for the driver to answer this need.
    Gathering(Need),
    /// Running the pass's own decision.
    Acting,
    /// Running the follow-up decision of a failed action.
    FollowingUp,
    /// The pass ended with this outcome (a follow-up's action failed, or
    /// the Server changed under a read).
    Ended(Outcome),
}

impl Pass {
    /// A pass for `server` (as read) at `now` with the core's rules, its
    /// copy holding the user data. Its first need (or, for a Server the
    /// core will not look at, its decision) is ready.
    pub fn start(server: Server, options: Options, now: Timestamp) -> Self {
        Pass::start_with(server, options, now, Rules::CORE, UserDataCopy::Held)
    }

    /// As [`Pass::start`], with `rules` and saying whether the copy of the
    /// Server withholds its user data.
    pub fn start_with(server: Server, options: Options, now: Timestamp, rules: Rules, user_data: UserDataCopy) -> Self {
        let reads = Reads { user_data, ..Reads::default() };
        let mut pass = Pass {
            server,
            facts: Facts::default(),
            options,
            rules,
            reads,
            decision: None,
            next: 0,
            stage: Stage::Acting,
            now,
        };
        pass.advance();
        pass
    }

    /// A pass over a Server whose content cannot be read (`server` holds
    /// its metadata; `problem` names the field, never its value): it says
    /// so on the Server (a Warning Event) and parks it as an invalid spec,
    /// reading nothing and acting on nothing until it changes.
    pub fn unreadable(server: Server, problem: &str, options: Options, now: Timestamp) -> Self {
        let note =
            bounded_note(&format!("The Server cannot be read: {problem}. Fix that field; nothing is done until then."));
        let decision = Decision {
            status: server.status.clone(),
            actions: vec![Action::Emit(Event {
                type_: EventType::Warning,
                reason: EventReason::ServerUnreadable,
                action: "ReadServer",
                note,
            })],
            outcome: Outcome::Terminal(Park::InvalidSpec { message: format!("the Server cannot be read: {problem}") }),
        };
        Pass {
            server,
            facts: Facts::default(),
            options,
            rules: Rules::CORE,
            reads: Reads::default(),
            decision: Some(decision),
            next: 0,
            stage: Stage::Acting,
            now,
        }
    }

    /// A pass whose needs are all answered from `facts` (its provider view
    /// as `facts.provider_read` says; a listed view that cannot decide is
    /// answered with the same view, read live): for tests and tools that
    /// hold every fact up front.
    pub fn with_facts(server: Server, facts: &Facts, options: &Options, now: Timestamp) -> Self {
        let mut pass = Pass::start(server, *options, now);
        pass.answer_from(facts, |_| true);
        pass
    }

    /// Answers the needs from `facts`, as [`Pass::with_facts`] does, while
    /// `answerable` allows; the needs answered, in order.
    pub fn answer_from(&mut self, facts: &Facts, answerable: impl Fn(&Need) -> bool) -> Vec<Need> {
        let mut answered = Vec::new();
        while let Some(need) = self.poll_need().filter(|need| answerable(need)).cloned() {
            let fact = answer_of(&need, facts, &self.server);
            if self.handle_fact(fact).is_err() {
                break;
            }
            answered.push(need);
        }
        answered
    }

    /// Judges failed actions with `rule` instead of [`action_failed`].
    pub fn with_follow_up_rule(mut self, rule: FollowUpRule) -> Self {
        self.rules.action_failed = rule;
        self
    }

    /// What the pass needs read next, or `None` once it has decided.
    pub fn poll_need(&self) -> Option<&Need> {
        match &self.stage {
            Stage::Gathering(need) => Some(need),
            _ => None,
        }
    }

    /// The driver's answer to [`Pass::poll_need`]. An answer to another
    /// need is refused and changes nothing.
    pub fn handle_fact(&mut self, fact: Fact) -> Result<(), UnaskedFact> {
        let Stage::Gathering(need) = &self.stage else {
            return Err(UnaskedFact { needed: None, given: fact_name(&fact) });
        };
        match (need, fact) {
            (
                Need::Consumed | Need::ConsumedLive | Need::ConsumedBeforeRelease,
                Fact::Consumed { consumed, other_identity_references },
            ) => {
                self.facts.consumed = consumed;
                self.facts.other_identity_references = other_identity_references;
                let live = *need != Need::Consumed;
                self.reads.consumed = Some(if live { ConsumedRead::Live } else { ConsumedRead::Cached });
                // A deleting Server without a cloud to call was judged on
                // what the cache held of its Identity: judged again on this.
                if live && self.server.meta.deleting && self.facts.provider == ProviderView::NoIdentity {
                    self.reads.provider = None;
                }
            }
            (Need::Provider | Need::ProviderLive(_), Fact::Provider { view, read, boot_read }) => {
                self.reads.provider = Some(match (need, read) {
                    (Need::ProviderLive(why), _) => ProviderSource::LiveAfterListed(*why),
                    (_, ProviderRead::Listed { .. }) => ProviderSource::Listed,
                    (_, ProviderRead::Live) => ProviderSource::Live,
                });
                // A boot the listed record showed stays seen: the live read
                // may find the server already gone, and a boot the provider
                // reported is latched, never a reason to create again.
                if let ProviderView::Present(record) = &self.facts.provider
                    && record_shows_boot(record)
                    && self.facts.boot_seen.is_none()
                {
                    self.facts.boot_seen = Some(record.launched_at.unwrap_or(self.now));
                }
                // So does one another read of the term showed.
                if self.facts.boot_seen.is_none() {
                    self.facts.boot_seen = boot_read;
                }
                self.facts.provider = view;
                self.facts.provider_read = read;
                // What was read of the server's ports belongs to the old view.
                self.reads.attachments = false;
                self.reads.networking = false;
                self.facts.attachments = Default::default();
                self.facts.networking = Default::default();
            }
            (Need::Attachments, Fact::Attachments(view)) => {
                self.facts.attachments = view;
                self.reads.attachments = true;
            }
            (Need::Networking { .. }, Fact::Networking(view)) => {
                self.facts.networking = view;
                self.reads.networking = true;
            }
            (Need::UserData, Fact::UserData(user_data)) if self.reads.note_write.is_some() => {
                self.decide_with_user_data(user_data);
                return Ok(());
            }
            (Need::UserData, Fact::UserData(Some(user_data))) => {
                self.server.spec.user_data = Some(user_data);
                self.reads.user_data = UserDataCopy::Held;
            }
            (Need::UserData, Fact::UserData(None)) => {
                self.stage = Stage::Ended(Outcome::Yield(Wait::ServerChanged));
                return Ok(());
            }
            (need, fact) => return Err(UnaskedFact { needed: Some(need.clone()), given: fact_name(&fact) }),
        }
        self.advance();
        Ok(())
    }

    /// The next need, or the decision once nothing more is needed.
    fn advance(&mut self) {
        if let Some(need) = self.next_need() {
            self.stage = Stage::Gathering(need);
            return;
        }
        let decision = (self.rules.reconcile)(&self.server, &self.facts, &self.options, self.now);
        if self.reads.provider == Some(ProviderSource::Listed)
            && let Some(why) =
                (self.rules.live_read_needed)(&self.server, &self.facts, &decision, &self.options, self.now)
        {
            self.stage = Stage::Gathering(Need::ProviderLive(why));
            return;
        }
        if self.reads.consumed == Some(ConsumedRead::Cached) && confirms_release_live(&self.server, &decision) {
            self.stage = Stage::Gathering(Need::ConsumedBeforeRelease);
            return;
        }
        if self.reads.user_data == UserDataCopy::Withheld && creates(&decision) {
            // A create whose note is the pass's first write learns the user
            // data from that write's answer: the Server as written, guarded
            // by the version read, so the spec the pass decided on.
            let Some(written) = decision.actions.first().and_then(create_note) else {
                self.stage = Stage::Gathering(Need::UserData);
                return;
            };
            let before = self.server.meta.annotations.get(CREATE_ISSUED_ANNOTATION).cloned();
            self.reads.note_write = Some(NoteWrite { before, written: written.to_owned(), landed: false });
        }
        self.act_on(decision);
    }

    /// Runs `decision`'s actions from the first. Once a decision that
    /// creates carries the user data (rendered into its request), the
    /// pass's copy of the Server leaves it out, as a cache's copy does: no
    /// later rule of the pass reads it, and a pass holds its decision while
    /// it waits on reference writes, a burst of new Servers hundreds of
    /// passes at once.
    fn act_on(&mut self, decision: Decision) {
        if creates(&decision) && self.server.spec.user_data.take().is_some() {
            self.reads.user_data = UserDataCopy::Withheld;
        }
        self.decision = Some(decision);
        self.next = 0;
        self.stage = Stage::Acting;
    }

    /// The read the rules call for next, given what has been read.
    fn next_need(&self) -> Option<Need> {
        let server = &self.server;
        if !needs_facts(server) {
            return None;
        }
        match self.reads.consumed {
            None => return Some(Need::Consumed),
            Some(ConsumedRead::Cached) if confirms_consumed_live(server, &self.facts) => {
                return Some(Need::ConsumedLive);
            }
            Some(_) => {}
        }
        if self.reads.provider.is_none() {
            return Some(Need::Provider);
        }
        // A listed view the rule refuses even for a decision that does
        // nothing is refused for every decision: read live before the
        // server's ports, whose read belongs to the view it follows.
        if self.reads.provider == Some(ProviderSource::Listed) {
            let idle = Decision { status: server.status.clone(), actions: Vec::new(), outcome: Outcome::Done };
            if let Some(why) = (self.rules.live_read_needed)(server, &self.facts, &idle, &self.options, self.now) {
                return Some(Need::ProviderLive(why));
            }
        }
        if !self.reads.attachments && reads_attachments(server, &self.facts) {
            return Some(Need::Attachments);
        }
        if !self.reads.networking
            && reads_networking(server, &self.facts)
            && let ProviderView::Present(record) = &self.facts.provider
        {
            return Some(Need::Networking { provider_id: record.id.clone() });
        }
        None
    }

    /// The action to run next, or `None` when the pass is over (then
    /// [`Pass::outcome`] is its outcome) or still gathering.
    pub fn poll_action(&self) -> Option<&Action> {
        match self.stage {
            Stage::Gathering(_) | Stage::Ended(_) => None,
            Stage::Acting | Stage::FollowingUp => self.decision.as_ref()?.actions.get(self.next),
        }
    }

    /// The actions from [`Pass::poll_action`]'s on that may be sent at
    /// once: a run of reference changes in a row, each on an object of its
    /// own (a reference is one object's finalizer, so no order among them
    /// matters), or that action alone. Empty when `poll_action` has none.
    ///
    /// A driver that sends a run together answers its actions in order with
    /// [`Pass::handle_done`] and [`Pass::handle_failed`], as if sent one by
    /// one, and stops answering at the first failure: the follow-up takes
    /// over, and what the later ones wrote stands, which any order of the
    /// run allows (a reference held early is released with the others; a
    /// removal sent early was due). Passes of Servers that share an object
    /// then wait on it together, so its writer batches more of them.
    pub fn poll_run(&self) -> &[Action] {
        let actions = match self.stage {
            Stage::Gathering(_) | Stage::Ended(_) => return &[],
            Stage::Acting | Stage::FollowingUp => match &self.decision {
                Some(decision) => decision.actions.get(self.next..).unwrap_or_default(),
                None => return &[],
            },
        };
        let mut targets = Vec::new();
        let run = actions
            .iter()
            .take_while(|action| match action.reference() {
                Some(reference) if !targets.contains(&(reference.kind, &reference.name)) => {
                    targets.push((reference.kind, &reference.name));
                    true
                }
                _ => false,
            })
            .count();
        &actions[..run.max(1).min(actions.len())]
    }

    /// The action from [`Pass::poll_action`] succeeded: its write, if it is
    /// one of the Server's, is now part of the Server as last persisted.
    /// Without an action to run it does nothing.
    pub fn handle_done(&mut self) {
        if self.poll_action().is_none() {
            return;
        }
        let Some(decision) = &self.decision else { return };
        let Some(action) = decision.actions.get(self.next) else { return };
        fold_landed(&mut self.server, action, &decision.status);
        self.next += 1;
        // The note landed without the Server as written: the user data is read.
        if let Some(write) = &mut self.reads.note_write
            && !write.landed
        {
            write.landed = true;
            self.stage = Stage::Gathering(Need::UserData);
        }
    }

    /// Whether the action [`Pass::poll_action`] gives is the create's note
    /// whose answer, the Server as written, brings the user data the copy
    /// withholds: the driver answers it with
    /// [`Pass::handle_done_with_user_data`] (with [`Pass::handle_done`]
    /// the pass asks for [`Need::UserData`] instead).
    pub fn awaits_user_data(&self) -> bool {
        self.stage == Stage::Acting && self.next == 0 && self.reads.note_write.as_ref().is_some_and(|w| !w.landed)
    }

    /// The action from [`Pass::poll_action`] succeeded and its answer holds
    /// `user_data` (`None`: the Server as written has none). When the pass
    /// [`awaits_user_data`](Pass::awaits_user_data), it decides again with
    /// it; otherwise this is [`Pass::handle_done`].
    pub fn handle_done_with_user_data(&mut self, user_data: Option<UserData>) {
        let awaited = self.awaits_user_data();
        if let Some(write) = self.reads.note_write.as_mut().filter(|_| awaited) {
            write.landed = true;
        }
        self.handle_done();
        if awaited {
            self.decide_with_user_data(user_data);
        }
    }

    /// Decides again, with the user data, after the create's note landed:
    /// on the Server as written with the note as it was, at the same time
    /// and from the same facts, so a create decided again notes the same
    /// attempt, and that write is not sent twice. A pass that no longer
    /// creates (the user data is refused, or gone) sets the note back first:
    /// no create follows it.
    fn decide_with_user_data(&mut self, user_data: Option<UserData>) {
        let Some(write) = self.reads.note_write.take() else { return };
        self.reads.user_data = UserDataCopy::Held;
        // Set back to what stood, or removed when what stood was a note of
        // a Server without Available (it stands for no create, and would
        // stand for one once a park writes Available).
        let stood = write.before.clone().filter(|_| !awaits_first_create(&self.server.status));
        let undo = Action::Annotate { key: CREATE_ISSUED_ANNOTATION, value: stood };
        let mut decision = match user_data {
            Some(user_data) => {
                self.server.spec.user_data = Some(user_data);
                let mut as_read = self.server.clone();
                match &write.before {
                    Some(note) => as_read.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.to_owned(), note.clone()),
                    None => as_read.meta.annotations.remove(CREATE_ISSUED_ANNOTATION),
                };
                (self.rules.reconcile)(&as_read, &self.facts, &self.options, self.now)
            }
            None => Decision {
                status: self.server.status.clone(),
                actions: Vec::new(),
                outcome: Outcome::Yield(Wait::ServerChanged),
            },
        };
        let renoted = decision.actions.iter().position(|action| create_note(action) == Some(write.written.as_str()));
        match renoted {
            Some(at) => drop_create_note(&mut decision.actions, at),
            None => decision.actions.insert(0, undo),
        }
        self.act_on(decision);
    }

    /// The action from [`Pass::poll_action`] failed. In the pass's own
    /// decision the follow-up decision takes over; in the follow-up the pass
    /// ends. A write that may have landed (its answer lost) is not folded:
    /// the Server as last persisted is what is known to be stored, and the
    /// rules treat a write of unknown fate as not done (every action is
    /// idempotent, the next pass reads what is stored).
    /// Without an action to run it does nothing.
    pub fn handle_failed(&mut self, failure: ActionFailure) {
        let Some(action) = self.poll_action() else { return };
        // Removing the finalizer of a Server that is already gone reached
        // what it was for.
        if matches!((action, &failure), (Action::RemoveFinalizer, ActionFailure::ServerGone)) {
            self.handle_done();
            return;
        }
        let judged = (self.rules.action_failed)(&self.server, action, &failure, self.now);
        // A note that did not land awaits nothing; the follow-up decides.
        self.reads.note_write = None;
        match self.stage {
            Stage::Acting => {
                self.decision = Some(judged);
                self.next = 0;
                self.stage = Stage::FollowingUp;
            }
            // The follow-up's own failure is judged like any other (a
            // conflict yields, an API error is an error: both requeue), but
            // nothing more runs in this pass.
            Stage::FollowingUp | Stage::Gathering(_) | Stage::Ended(_) => self.stage = Stage::Ended(judged.outcome),
        }
    }

    /// The pass's outcome once it is over (`poll_need` and `poll_action`
    /// give `None`).
    pub fn outcome(&self) -> Option<&Outcome> {
        match (&self.stage, &self.decision) {
            (Stage::Ended(outcome), _) => Some(outcome),
            (Stage::Gathering(_), _) | (_, None) => None,
            (_, Some(decision)) if self.next >= decision.actions.len() => Some(&decision.outcome),
            _ => None,
        }
    }

    /// The pass's outcome, consuming it. A pass dropped before its actions
    /// all ran (its adapter stopped driving it) did not do what it decided,
    /// so it is an error and requeues: the next pass finishes the work.
    pub fn into_outcome(self) -> Outcome {
        self.finish().0
    }

    /// The pass's outcome (as [`Pass::into_outcome`]) and the Server as last
    /// persisted, handed back: an executor that copies its Servers into a
    /// pass can reuse that copy's allocations for the next one.
    pub fn finish(self) -> (Outcome, Server) {
        let outcome = match self.outcome() {
            Some(outcome) => outcome.clone(),
            None => Outcome::Error(PassError::Interrupted),
        };
        (outcome, self.server)
    }

    /// The decision whose actions run: the pass's own, or after a failure
    /// the follow-up. `None` while the pass still gathers facts.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// Whether a failed action switched the pass to its follow-up decision.
    pub fn is_following_up(&self) -> bool {
        matches!(self.stage, Stage::FollowingUp) || (matches!(self.stage, Stage::Ended(_)) && self.decision.is_some())
    }

    /// The Server as last persisted by this pass (its user data left out
    /// once a decision to create carries it).
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// What the pass has read so far.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// The options its rules apply.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The time the pass decides at.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Where the provider view the pass decided on came from; `None` when
    /// it read none (a Server the core does not look at).
    pub fn provider_source(&self) -> Option<ProviderSource> {
        self.reads.provider
    }
}

/// The Warning Event of a Server holding values the core read as something
/// else (a condition status of "Maybe" read as Unknown), naming at most a
/// few of their `paths`, never a value. The Server is managed as usual; a
/// driver says this once per Server and term.
pub fn partly_unreadable_event(paths: &[String]) -> Event {
    const NAMED: usize = 4;
    let mut named = paths.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > NAMED {
        named.push_str(&format!(" and {} more", paths.len() - NAMED));
    }
    Event {
        type_: EventType::Warning,
        reason: EventReason::ServerUnreadable,
        action: "ReadServer",
        note: bounded_note(&format!(
            "{named}: a value this controller does not understand, read as Unknown. The rest of the Server is \
             managed as usual."
        )),
    }
}

/// An Event note within the API server's 1 kB limit.
fn bounded_note(note: &str) -> String {
    const MAX: usize = 1024;
    if note.len() <= MAX {
        return note.to_owned();
    }
    let mut end = MAX - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

/// The answer to `need` from `facts`, held up front (the provider view as
/// `facts.provider_read` says; a live read gives the same view), and the
/// user data from `server`.
fn answer_of(need: &Need, facts: &Facts, server: &Server) -> Fact {
    match need {
        Need::Consumed | Need::ConsumedLive | Need::ConsumedBeforeRelease => Fact::Consumed {
            consumed: facts.consumed.clone(),
            other_identity_references: facts.other_identity_references.clone(),
        },
        Need::Provider => {
            Fact::Provider { view: facts.provider.clone(), read: facts.provider_read, boot_read: facts.boot_seen }
        }
        Need::ProviderLive(_) => {
            Fact::Provider { view: facts.provider.clone(), read: ProviderRead::Live, boot_read: facts.boot_seen }
        }
        Need::Attachments => Fact::Attachments(facts.attachments.clone()),
        Need::Networking { .. } => Fact::Networking(facts.networking.clone()),
        Need::UserData => Fact::UserData(server.spec.user_data.clone()),
    }
}

/// Whether a decision creates the provider server.
fn creates(decision: &Decision) -> bool {
    decision.actions.iter().any(|action| matches!(action, Action::CreateProviderServer(_)))
}

/// The create note `action` writes, if it writes one.
fn create_note(action: &Action) -> Option<&str> {
    match action {
        Action::Annotate { .. } | Action::AddFinalizer { .. } => action
            .annotation_changes()
            .into_iter()
            .find_map(|(key, value)| if key == CREATE_ISSUED_ANNOTATION { value } else { None }),
        _ => None,
    }
}

/// Takes the create note out of the action at `at`: the whole action when it
/// is the note alone.
fn drop_create_note(actions: &mut Vec<Action>, at: usize) {
    match actions.get_mut(at) {
        Some(Action::AddFinalizer { annotations }) => annotations.retain(|(key, _)| *key != CREATE_ISSUED_ANNOTATION),
        Some(_) => {
            actions.remove(at);
        }
        None => {}
    }
}

fn fact_name(fact: &Fact) -> &'static str {
    match fact {
        Fact::Consumed { .. } => "Consumed",
        Fact::Provider { .. } => "Provider",
        Fact::Attachments(_) => "Attachments",
        Fact::Networking(_) => "Networking",
        Fact::UserData(_) => "UserData",
    }
}

/// What an action that succeeded did to the stored Server: finalizers,
/// annotations and the status of the decision it belongs to (`status`).
/// Actions on other objects (references, the provider, Events) change
/// nothing here.
pub fn fold_landed(server: &mut Server, action: &Action, status: &ServerStatus) {
    match action {
        // The patch took the status as read to the decision's status.
        Action::WriteStatus(_) => server.status.clone_from(status),
        _ => fold_landed_meta(&mut server.meta, action),
    }
}

/// What a write of the Server's metadata that succeeded did to it: its
/// finalizer added or removed, its annotations changed. Every other action
/// (the status write included) changes no metadata. An API server model
/// applies a metadata write with this; a status write it applies by its
/// patch (`StatusPatch::apply`).
pub fn fold_landed_meta(meta: &mut ObjectMeta, action: &Action) {
    match action {
        Action::AddFinalizer { .. } => {
            if !meta.has_finalizer(SERVER_FINALIZER) {
                meta.finalizers.push(SERVER_FINALIZER.to_owned());
            }
            fold_annotations(meta, action);
        }
        Action::RemoveFinalizer => meta.finalizers.retain(|f| f != SERVER_FINALIZER),
        Action::Annotate { .. } | Action::Record(_) => fold_annotations(meta, action),
        Action::WriteStatus(_)
        | Action::AddReference(_)
        | Action::RemoveReference(_)
        | Action::CreateProviderServer(_)
        | Action::DeleteProviderServer(_)
        | Action::RebuildProviderServer(_)
        | Action::ReleaseAttachment(_)
        | Action::UpdatePort(_)
        | Action::EnsureFloatingIp(_)
        | Action::Emit(_) => {}
    }
}

fn fold_annotations(meta: &mut ObjectMeta, action: &Action) {
    for (key, value) in action.annotation_changes() {
        match value {
            Some(value) => meta.annotations.insert(key.to_owned(), value.to_owned()),
            None => meta.annotations.remove(key),
        };
    }
}
