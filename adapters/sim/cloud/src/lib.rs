//! SimCloud: an in-process cloud with seeded fates and fault injection.
//!
//! - [`CloudModel`] is the deterministic state, advanced by the `now` each call
//!   passes in; the simulator drives it directly with virtual time.
//! - [`SimCloud`] wraps it as the async [`server_core::port::CloudPort`] on a
//!   [`Clock`] (wall clock for the demo, tokio's paused clock in tests).
//! - [`Fate`]s say how each Server's provider servers behave: drawn from the
//!   seed by a [`FateMix`], or scripted per Server uid.
//! - [`Counters`] and [`UidTruth`] are the ground truth checkers compare with.
//!
//! ```
//! use std::sync::Arc;
//! use server_simcloud::{CloudConfig, Fate, SimCloud, TokioClock};
//!
//! // Default fault mix, wall clock; or `CloudConfig::reliable(seed)` for clean
//! // fates and no call failures, `CloudConfig::with_fault_rate(seed, rate)`.
//! let cloud = SimCloud::new(CloudConfig::new(7));
//! // Per-Server fates for tests, by Server uid, before the Server is created.
//! cloud.script("uid-1", Fate::failing_boots(2));
//! cloud.script("uid-2", Fate::error_after_launch(std::time::Duration::from_secs(5)));
//! // The port for the controller's per-region registry (clones share state).
//! let port: Arc<dyn server_core::port::CloudPort> = cloud.port();
//! # drop(port);
//! // Calls by verb, and the ground truth per Server.
//! assert_eq!(cloud.counters().create_calls, 0);
//! assert_eq!(cloud.truth("uid-1").live, 0);
//! ```
//!
//! Under a paused tokio runtime, `SimCloud::with_clock(config,
//! Arc::new(TokioClock::starting_at(t)))` makes port tests deterministic;
//! `set_latency` adds a per-call delay in tokio time.

mod clock;
mod counters;
mod fate;
mod list_order;
mod model;
mod port;
pub mod rng;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use counters::{Counters, UidTruth};
pub use fate::{Fate, FateKind, FateMix, Span, Timing};
pub use model::{CloudConfig, CloudModel, DELETED_ROWS_KEPT, ListPage, Outage, ServerHandle, Shown};
pub use port::SimCloud;

#[cfg(test)]
mod tests;
