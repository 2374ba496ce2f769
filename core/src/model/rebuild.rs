//! The image rebuild marker (`status.rebuild`, as the Go controller writes
//! it): the write-ahead record that a rebuild of the provider server onto
//! `targetImageID` was asked for, and how far it got.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How far a rebuild got. Forward-only: `Initiated` < `Rebuilding` <
/// `Succeeded` == `Failed`; the two ends share a rank, so neither replaces
/// the other by advancing (only the reconciler's park assigns `Failed` over
/// `Succeeded`, see `reconcile::rebuild`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RebuildState {
    /// Intent recorded; nothing asked of the provider that it accepted.
    Initiated,
    /// The provider accepted the rebuild; it is under way.
    Rebuilding,
    /// The provider server runs the target image, at rest.
    Succeeded,
    /// The rebuild ended in an error, or can no longer reach the target.
    Failed,
}

impl RebuildState {
    /// The order states advance in.
    pub fn rank(self) -> u8 {
        match self {
            RebuildState::Initiated => 1,
            RebuildState::Rebuilding => 2,
            RebuildState::Succeeded | RebuildState::Failed => 3,
        }
    }

    /// Whether the provider accepted the rebuild (it got past `Initiated`).
    pub fn accepted(self) -> bool {
        self.rank() >= RebuildState::Rebuilding.rank()
    }

    /// `Succeeded` or `Failed`: nothing advances it further.
    pub fn is_terminal(self) -> bool {
        self.rank() == RebuildState::Succeeded.rank()
    }
}

/// `status.rebuild`: the image a rebuild converges toward and its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    /// The provider image ID the rebuild moves the server to.
    #[serde(rename = "targetImageID")]
    pub target_image_id: String,
    pub state: RebuildState,
}

impl Rebuild {
    /// A freshly recorded intent toward `image`.
    pub fn initiated(image: &str) -> Self {
        Rebuild { target_image_id: image.to_owned(), state: RebuildState::Initiated }
    }

    /// Moves the state to `to` when that is forward; a late or repeated
    /// observation changes nothing. Whether it moved.
    pub fn advance(&mut self, to: RebuildState) -> bool {
        if to.rank() <= self.state.rank() {
            return false;
        }
        self.state = to;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: [RebuildState; 4] =
        [RebuildState::Initiated, RebuildState::Rebuilding, RebuildState::Succeeded, RebuildState::Failed];

    /// Every advance is forward, and the two ends never replace each other.
    #[test]
    fn a_marker_only_advances_and_its_ends_never_flip() {
        for from in STATES {
            for to in STATES {
                let mut marker = Rebuild { target_image_id: "i".into(), state: from };
                let moved = marker.advance(to);
                assert_eq!(moved, to.rank() > from.rank(), "{from:?} -> {to:?}");
                assert!(marker.state.rank() >= from.rank(), "{from:?} -> {to:?} went back");
                if from.is_terminal() {
                    assert_eq!(marker.state, from, "{from:?} is an end");
                }
            }
        }
    }

    /// The wire form is the Go controller's: `targetImageID` and the state's name.
    #[test]
    fn the_marker_reads_and_writes_as_the_go_controller_writes_it() {
        let wire = serde_json::json!({"targetImageID": "img-2", "state": "Rebuilding"});
        let marker: Rebuild = serde_json::from_value(wire.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(marker, Rebuild { target_image_id: "img-2".into(), state: RebuildState::Rebuilding });
        assert_eq!(serde_json::to_value(&marker).ok(), Some(wire));
    }
}
