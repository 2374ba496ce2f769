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
//! use server_sim::cloud::{CloudConfig, Fate, SimCloud};
//! let cloud = SimCloud::new(CloudConfig::reliable(7));
//! cloud.script("uid-1", Fate::failing_boots(2));
//! let port = cloud.port(); // Arc<dyn CloudPort> for the registry
//! # drop(port);
//! assert_eq!(cloud.counters().create_calls, 0);
//! ```

mod clock;
mod counters;
mod fate;
mod model;
mod port;
pub mod rng;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use counters::{Counters, UidTruth};
pub use fate::{Fate, FateKind, FateMix, Span, Timing};
pub use model::{CloudConfig, CloudModel, ServerHandle};
pub use port::SimCloud;

#[cfg(test)]
mod tests;
