//! The decision functions the simulator drives, as plain function pointers so
//! a test can swap one for a deliberately broken rule and watch the checker
//! catch it. The default is server-core's.

use std::fmt;

use jiff::Timestamp;
use server_core::port::ProviderServer;
use server_core::{Action, ActionFailure, Decision, Facts, LiveRead, Options, Server, ServerStatus};

/// The rules under test.
#[derive(Clone, Copy)]
pub struct DecisionRules {
    /// One reconcile pass.
    pub reconcile: fn(&Server, &Facts, &Options, Timestamp) -> Decision,
    /// Whether a decision made from a listed view needs a live read first.
    pub live_read_needed: fn(&Server, &Facts, &Decision, &Options, Timestamp) -> Option<LiveRead>,
    /// The follow-up decision after an action failed.
    pub action_failed: fn(&Server, &Action, &ActionFailure, Timestamp) -> Decision,
    /// The monitor projection.
    pub observe: fn(&ServerStatus, Option<&ProviderServer>, Timestamp) -> ServerStatus,
    /// Whether a monitor write that did not go through wakes a pass.
    pub unwritten_wakes: fn(&ServerStatus, &ServerStatus) -> bool,
    /// The watch rule.
    pub should_wake: fn(Option<&Server>, &Server) -> bool,
    /// The ProviderCreateFailure predicate, as the watch sees it. The checker
    /// compares it with what the retry machine decided (invariant 5).
    pub provider_create_failure: fn(&Server) -> bool,
}

impl DecisionRules {
    /// server-core's rules.
    pub const CORE: DecisionRules = DecisionRules {
        reconcile: server_core::reconcile,
        live_read_needed: server_core::live_read_needed,
        action_failed: server_core::action_failed,
        observe: server_core::observe,
        unwritten_wakes: server_core::monitor::unwritten_wakes,
        should_wake: server_core::should_wake,
        provider_create_failure: server_core::provider_create_failure,
    };
}

impl DecisionRules {
    /// The rules a pass applies.
    pub fn pass(&self) -> server_core::pass::Rules {
        server_core::pass::Rules {
            reconcile: self.reconcile,
            live_read_needed: self.live_read_needed,
            action_failed: self.action_failed,
        }
    }
}

impl Default for DecisionRules {
    fn default() -> Self {
        DecisionRules::CORE
    }
}

impl fmt::Debug for DecisionRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionRules").finish_non_exhaustive()
    }
}
