//! Who gets which fate: a few roles every run shows (a retry that recovers,
//! one that exhausts the cap, a data-bearing server erroring after launch, a
//! server deleted midway, ...), the rest drawn from the seeded fault mix.

use std::time::Duration;

use server_simcloud::{Fate, FateMix, Timing};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Fate drawn from the mix.
    Drawn,
    /// Fails before launch twice, then boots.
    Recovers,
    /// Fails before launch on every attempt: parked at the cap.
    Exhausts,
    /// Boots, then errors: holds data, must never be recreated.
    DataBearing,
    /// Boots, then the user deletes the Server.
    DeletedMidway,
    /// Boots, then is deleted behind the operator's back.
    Vanishes,
    /// The provider refuses the first create (quota); the user then edits the spec.
    Refused,
}

/// Roles in the order the first Servers get them.
const SHOWCASE: [Role; 6] =
    [Role::Recovers, Role::Exhausts, Role::DataBearing, Role::DeletedMidway, Role::Vanishes, Role::Refused];

#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// Carries spec and status fields the operator does not model (invariant 7).
    pub(crate) unmodelled_fields: bool,
}

/// The Servers to create. Without `showcase` (a clean cloud was asked for:
/// `--create-failure-rate 0`) no Server plays a faulty role: every fate is
/// drawn from the (clean) mix.
pub(crate) fn plan(servers: usize, showcase: bool) -> Vec<Planned> {
    (0..servers)
        .map(|i| Planned {
            name: format!("server-{i:03}"),
            role: SHOWCASE.get(i).copied().filter(|_| showcase).unwrap_or(Role::Drawn),
            unmodelled_fields: i % 5 == 0,
        })
        .collect()
}

/// The mix the drawn Servers come from, on a clock of seconds, not minutes.
pub(crate) fn mix(create_failure_rate: f64) -> FateMix {
    FateMix::with_fault_rate(create_failure_rate).with_timing(Timing::FAST)
}

/// The fate of a planned Server; `None` leaves it to the cloud's mix.
pub(crate) fn fate(role: Role, seed: u64, uid: &str) -> Option<Fate> {
    // Timings drawn like any other Server's, then the role's headline.
    let base = FateMix::clean().with_timing(Timing::FAST).draw(seed, uid);
    let after_launch = Some(Duration::from_millis(1_500));
    match role {
        Role::Drawn => None,
        Role::Recovers => Some(Fate { failed_boots: 2, ..base }),
        Role::Exhausts => Some(Fate { failed_boots: Fate::FOREVER, ..base }),
        Role::DataBearing => Some(Fate { error_after_launch: after_launch, ..base }),
        Role::Vanishes => Some(Fate { vanish_after_launch: after_launch, ..base }),
        Role::Refused => Some(Fate { refused_creates: 1, ..base }),
        Role::DeletedMidway => Some(base),
    }
}
