//! The order a project's provider servers are listed in, kept as they are
//! made so that one page costs what it shows, not what the project holds.
//!
//! Nova lists by `created_at`, then `id`, both descending, and pages with a
//! marker it looks up among deleted rows too (nova/db/main/api.py
//! `instance_get_all_by_filters_sort`: the marker is read with
//! `read_deleted='yes'`), so a page after a server deleted since is still
//! found. Here ids grow with the provider server's number, so the number
//! stands for the id.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use super::rng::FnvBuild;

/// Where a provider server stands in its project's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    created: Reverse<i64>,
    number: Reverse<u64>,
}

/// A listed provider server: its uid's slot and its index among the
/// instances of that slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) slot: usize,
    pub(crate) instance: usize,
}

/// Every project's list order.
#[derive(Debug, Default)]
pub(crate) struct ListOrder {
    /// By interned project.
    projects: Vec<BTreeMap<Position, Listed>>,
    /// Every provider server ever made, gone ones too (markers).
    positions: HashMap<u64, (usize, Position), FnvBuild>,
}

impl ListOrder {
    /// Files a provider server made in `project` at `created` (ms).
    pub(crate) fn insert(&mut self, project: usize, number: u64, created: i64, listed: Listed) {
        if self.projects.len() <= project {
            self.projects.resize_with(project + 1, BTreeMap::new);
        }
        let position = Position { created: Reverse(created), number: Reverse(number) };
        if let Some(list) = self.projects.get_mut(project) {
            list.insert(position, listed);
        }
        self.positions.insert(number, (project, position));
    }

    /// The project's provider servers in list order after the one numbered
    /// `after` (from the start when `None`), as long as `visit` asks for
    /// more; `None` when `after` was never made in the project. `visit`
    /// answers whether the server is still listed at all: one that is not
    /// (gone, superseded) is dropped from the order, never to come back.
    pub(crate) fn walk(
        &mut self,
        project: usize,
        after: Option<u64>,
        mut visit: impl FnMut(Listed) -> Walk,
    ) -> Option<()> {
        let start = match after {
            None => None,
            Some(number) => match self.positions.get(&number) {
                Some(&(owner, position)) if owner == project => Some(position),
                _ => return None,
            },
        };
        // A project none of whose servers was made yet lists nothing.
        let Some(list) = self.projects.get_mut(project) else { return Some(()) };
        let mut dropped = Vec::new();
        let range = match start {
            None => list.range(..),
            Some(position) => list.range((std::ops::Bound::Excluded(position), std::ops::Bound::Unbounded)),
        };
        for (&position, &listed) in range {
            match visit(listed) {
                Walk::Next => {}
                Walk::Unlisted => dropped.push(position),
                Walk::Stop => break,
            }
        }
        for position in dropped {
            list.remove(&position);
        }
        Some(())
    }
}

/// What a walk's visitor answers for one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Go on to the next.
    Next,
    /// This one is no longer listed: drop it and go on.
    Unlisted,
    /// Enough.
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(slot: usize) -> Listed {
        Listed { slot, instance: 0 }
    }

    fn walked(order: &mut ListOrder, project: usize, after: Option<u64>) -> Option<Vec<usize>> {
        let mut seen = Vec::new();
        order
            .walk(project, after, |l| {
                seen.push(l.slot);
                Walk::Next
            })
            .map(|()| seen)
    }

    #[test]
    fn newest_first_then_highest_number() {
        let mut order = ListOrder::default();
        order.insert(0, 1, 100, listed(1));
        order.insert(0, 3, 100, listed(3));
        order.insert(0, 2, 200, listed(2));
        assert_eq!(walked(&mut order, 0, None), Some(vec![2, 3, 1]));
        assert_eq!(walked(&mut order, 0, Some(3)), Some(vec![1]));
    }

    #[test]
    fn a_marker_dropped_from_the_list_is_still_found() {
        let mut order = ListOrder::default();
        for n in 1..=3 {
            order.insert(0, n, n.cast_signed(), listed(n as usize));
        }
        order.walk(0, None, |l| if l.slot == 2 { Walk::Unlisted } else { Walk::Next });
        assert_eq!(walked(&mut order, 0, None), Some(vec![3, 1]));
        assert_eq!(walked(&mut order, 0, Some(2)), Some(vec![1]));
    }

    #[test]
    fn a_marker_of_another_project_or_never_made_is_not_found() {
        let mut order = ListOrder::default();
        order.insert(0, 1, 1, listed(1));
        order.insert(1, 2, 2, listed(2));
        assert_eq!(walked(&mut order, 0, Some(2)), None);
        assert_eq!(walked(&mut order, 0, Some(9)), None);
        assert_eq!(walked(&mut order, 1, None), Some(vec![2]));
        assert_eq!(walked(&mut order, 2, None), Some(vec![]), "a project with nothing made yet");
    }
}
