//! server-core: the pure decision core of the Server controller.
//!
//! Facts in, decision out: [`reconcile`] decides one pass, [`observe`]
//! projects a provider record onto status, [`provider_create_failure`] is the
//! one predicate the watch and the retry machine share, [`Pass`] drives a
//! pass's actions for the adapter that performs them. No I/O: time comes in
//! as an argument, and the [`port::CloudPort`] is defined here but never called.
//!
//! # Consumed kinds
//!
//! The resources a Server references (Networks, security groups, its SSH
//! certificate authority, its Identity) are one table:
//! [`model::ResourceKind`] with its `scope` and `named` rules, and
//! [`Facts::consumed`] keyed by it. Adding a kind touches:
//!
//! 1. the CRD (server-kube's `crd`);
//! 2. a `ResourceKind` variant here, whose arms the compiler then asks for
//!    (plus a `model::Detail` variant if the rules read more than its name);
//! 3. the spec field naming it (`model::ServerSpec`);
//! 4. server-kube's table entry (`ConsumedKind` impl and `CONSUMED_KINDS`);
//! 5. its grant in `deploy/base/rbac.yaml`, which a test derives from that
//!    table.
//!
//! See ARCHITECTURE.md, "Adding a consumed kind".

pub mod baremetal;
pub mod explain;
mod issued;
pub mod lifecycle;
pub mod listing;
pub mod model;
pub mod monitor;
pub mod observations;
mod options;
pub mod pass;
pub mod port;
pub mod predicate;
pub mod provider_metadata;
pub mod reconcile;
pub mod status_patch;
pub mod user_data;

pub use issued::{awaits_first_create, awaits_retry_create};
pub use lifecycle::{Lifecycle, Park, ParkKind, lifecycle, park};
pub use model::{Server, ServerSpec, ServerStatus};
pub use monitor::observe;
pub use pass::Pass;
pub use predicate::{
    WakeSignals, booted_server_unseen, ever_booted, provider_create_failure, record_shows_boot, should_wake,
    unbooted_server_unseen, wakes,
};
pub use reconcile::{
    Action, ActionFailure, ApiCause, ApiFailure, AttachmentsView, Decision, Facts, LiveRead, NetworkingView, NotSent,
    Options, Outcome, PassError, ProviderRead, ProviderView, RegionUnserved, Wait, action_failed, live_read_needed,
    needs_facts, reads_attachments, reads_networking, rebuild_settlement_pending, reconcile,
    task_in_flight as rebuild_task_in_flight,
};
pub use status_patch::{StatusPatch, StatusPatchError, apply_status_patch, status_merge_patch};
