//! server-core: the pure decision core of the Server controller.
//!
//! Facts in, decision out: [`reconcile`] decides one pass, [`observe`]
//! projects a provider record onto status, [`provider_create_failure`] is the
//! one predicate the watch and the retry machine share. No I/O: time comes in
//! as an argument, and the [`port::CloudPort`] is defined here but never called.

pub mod explain;
pub mod lifecycle;
pub mod model;
pub mod monitor;
pub mod port;
pub mod predicate;
pub mod reconcile;
pub mod status_patch;
pub mod user_data;

pub use lifecycle::{Lifecycle, Park, ParkKind, lifecycle, park};
pub use model::{Server, ServerSpec, ServerStatus};
pub use monitor::observe;
pub use predicate::{
    booted_server_unseen, ever_booted, issued_create_unseen, provider_create_failure, record_shows_boot, should_wake,
};
pub use reconcile::{
    Action, ActionFailure, Decision, Facts, Options, Outcome, ProviderView, action_failed, needs_facts, reconcile,
};
pub use status_patch::status_merge_patch;
