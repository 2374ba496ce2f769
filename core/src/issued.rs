//! The create-issued note: which attempt a create was issued for, when, and
//! with which flavor and image. Written (resourceVersion-guarded) before
//! every create, so two actors racing on one Server cannot both create, an
//! attempt whose provider server later vanishes unbooted is counted against
//! the cap, and a later spec change that is not applied to the existing
//! server can be reported.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{CREATE_ISSUED_ANNOTATION, ConditionType, Server, ServerStatus};

/// The parsed `create-issued-attempt` annotation. Written as JSON
/// (`{"attempt":0,"at":"<RFC 3339>","flavorID":"..","imageID":".."}`); the
/// earlier `"<attempt>@<time>"` and `"<attempt>"` forms are still read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IssuedCreate {
    /// `providerCreateFailures` when the create was issued.
    pub(crate) attempt: i32,
    /// When it was issued; `None` for a note without a time (its grace is over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) at: Option<Timestamp>,
    /// The spec's flavor and image the create sent (`None` in older notes).
    #[serde(default, rename = "flavorID", skip_serializing_if = "Option::is_none")]
    pub(crate) flavor_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub(crate) image_id: Option<String>,
    /// The create was counted as a failed attempt: the note stands for no
    /// create in flight (an operator's reset cannot count it again), and
    /// says which provider server the retry deletes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) counted: bool,
    /// The failed provider server the count was decided on; `None` when the
    /// provider showed none. A retry deletes that server alone: a copy of
    /// the Server from before the next create must not take the next
    /// attempt's server for it.
    #[serde(default, rename = "failedServerID", skip_serializing_if = "Option::is_none")]
    pub(crate) failed_server_id: Option<String>,
}

/// Whether no create was ever sent for a Server with this status: it has
/// no Available condition, and every create follows its pass's guarded
/// Available write. Its next create is its first (a cache may keep its
/// user data for it).
pub fn awaits_first_create(status: &ServerStatus) -> bool {
    status.condition(ConditionType::Available).is_none()
}

/// Whether a Server with this status is about to be created again: a
/// retry's create, whose pass writes the status before the create's note.
/// A first create notes first, and a pass whose copy withholds the user
/// data takes it from that write's answer ([`crate::Pass::awaits_user_data`]);
/// a retry's pass reads it before acting, so a cache may keep it for one.
pub fn awaits_retry_create(status: &ServerStatus) -> bool {
    !awaits_first_create(status) && status.provider_create_retrying && !crate::predicate::ever_booted(status)
}

impl IssuedCreate {
    /// The create the Server's note stands for. A note on a Server without
    /// an Available condition stands for none: every create is sent right
    /// after its pass wrote Available (guarded by the resourceVersion), and
    /// a create of a Server without one notes before that write; so such a
    /// note's pass stopped before its create. The server's absence then
    /// proves nothing is in flight, and nothing is counted for the note.
    pub(crate) fn of(server: &Server) -> Option<Self> {
        if awaits_first_create(&server.status) {
            return None;
        }
        Self::parse(server).filter(|issued| !issued.counted)
    }

    /// The note of the create last counted as failed, if it still stands.
    pub(crate) fn counted_of(server: &Server) -> Option<Self> {
        Self::parse(server).filter(|issued| issued.counted)
    }

    /// Whether this note records a count decided on provider server `id`.
    pub(crate) fn names_failed_server(&self, id: &str) -> bool {
        self.counted && self.failed_server_id.as_deref() == Some(id)
    }

    /// This note, counted as a failed attempt decided on the provider
    /// server `failed` (or on none).
    pub(crate) fn counted(self, failed: Option<&str>) -> Self {
        IssuedCreate { counted: true, failed_server_id: failed.map(str::to_owned), ..self }
    }

    fn parse(server: &Server) -> Option<Self> {
        Self::parse_value(server.meta.annotations.get(CREATE_ISSUED_ANNOTATION)?)
    }

    /// A note's value, in any of its forms.
    pub(crate) fn parse_value(value: &str) -> Option<Self> {
        if value.trim_start().starts_with('{') {
            return serde_json::from_str(value).ok();
        }
        let (attempt, at) = match value.split_once('@') {
            Some((attempt, at)) => (attempt, at.parse().ok()),
            None => (value, None),
        };
        Some(IssuedCreate { attempt: attempt.trim().parse().ok()?, at, ..IssuedCreate::default() })
    }

    pub(crate) fn value(&self) -> String {
        // Serializing these plain fields cannot fail; the fallback keeps the
        // attempt readable if it ever did.
        serde_json::to_string(self).unwrap_or_else(|_| self.attempt.to_string())
    }

    /// Whether the create may still be in flight at `now`: its provider
    /// server's absence proves nothing yet.
    pub(crate) fn in_grace(&self, now: Timestamp, grace: Duration) -> bool {
        let grace = jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::MAX);
        self.at.is_some_and(|at| at.checked_add(grace).map_or(true, |end| now < end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> Server {
        let mut server = Server::default();
        server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), value.into());
        server
    }

    #[test]
    fn round_trips_and_reads_the_old_format() {
        let at = Timestamp::from_second(1_700_000_000).ok();
        let issued = IssuedCreate {
            attempt: 2,
            at,
            flavor_id: Some("f-1".into()),
            image_id: Some("i-1".into()),
            ..IssuedCreate::default()
        };
        assert_eq!(IssuedCreate::parse(&with(&issued.value())), Some(issued.clone()));
        let counted = issued.counted(Some("vm-1"));
        assert!(counted.value().contains(r#""counted":true,"failedServerID":"vm-1""#), "{}", counted.value());
        assert_eq!(IssuedCreate::parse(&with(&counted.value())), Some(counted));
        let bare = IssuedCreate { attempt: 1, ..IssuedCreate::default() };
        assert_eq!(IssuedCreate::parse(&with(&bare.value())), Some(bare.clone()));
        assert_eq!(IssuedCreate::parse(&with("1")), Some(bare));
        let old = IssuedCreate::parse(&with("3@2023-11-14T22:13:20Z"));
        assert_eq!(old, Some(IssuedCreate { attempt: 3, at, ..IssuedCreate::default() }));
        assert_eq!(IssuedCreate::parse(&with("x@y")), None);
        assert_eq!(IssuedCreate::parse(&with("{not json")), None);
        assert_eq!(IssuedCreate::parse(&Server::default()), None);
    }

    /// A note stands for a create only on a Server whose Available
    /// condition a pass wrote: the first pass notes before that write, and
    /// sends its create after it.
    #[test]
    fn a_note_stands_for_a_create_only_once_available_was_written() {
        let issued = IssuedCreate { attempt: 0, ..IssuedCreate::default() };
        let mut server = with(&issued.value());
        assert_eq!(IssuedCreate::of(&server), None);
        let at = Timestamp::UNIX_EPOCH;
        let (status, reason) = (crate::model::ConditionStatus::False, crate::model::ConditionReason::Provisioning);
        crate::model::set_condition(&mut server.status.conditions, ConditionType::Available, status, reason, "", at);
        assert_eq!(IssuedCreate::of(&server), Some(issued.clone()));
        let counted = issued.counted(None);
        server.meta.annotations.insert(CREATE_ISSUED_ANNOTATION.into(), counted.value());
        assert_eq!(IssuedCreate::of(&server), None, "a counted create is in flight no more");
        assert_eq!(IssuedCreate::counted_of(&server), Some(counted));
    }

    #[test]
    fn grace_runs_from_the_issue_time() {
        let t = |s| Timestamp::from_second(s).unwrap_or_default();
        let issued = IssuedCreate { attempt: 0, at: Some(t(100)), ..IssuedCreate::default() };
        let grace = Duration::from_secs(50);
        assert!(issued.in_grace(t(100), grace) && issued.in_grace(t(149), grace));
        assert!(!issued.in_grace(t(150), grace));
        let timeless = IssuedCreate { attempt: 0, ..IssuedCreate::default() };
        assert!(!timeless.in_grace(t(100), grace), "an old note's grace is over");
    }
}
