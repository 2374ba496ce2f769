//! The create-issued note: which attempt a create was issued for, and when.
//! Written (resourceVersion-guarded) before every create, so two actors
//! racing on one Server cannot both create, and an attempt whose provider
//! server later vanishes unbooted is counted against the cap.

use std::time::Duration;

use jiff::Timestamp;

use crate::model::{CREATE_ISSUED_ANNOTATION, Server};

/// The parsed `create-issued-attempt` annotation: `"<attempt>@<RFC 3339 time>"`,
/// or `"<attempt>"` as written before the time was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IssuedCreate {
    /// `providerCreateFailures` when the create was issued.
    pub(crate) attempt: i32,
    /// When it was issued; `None` for a note without a time (its grace is over).
    pub(crate) at: Option<Timestamp>,
}

impl IssuedCreate {
    pub(crate) fn of(server: &Server) -> Option<Self> {
        let value = server.meta.annotations.get(CREATE_ISSUED_ANNOTATION)?;
        let (attempt, at) = match value.split_once('@') {
            Some((attempt, at)) => (attempt, at.parse().ok()),
            None => (value.as_str(), None),
        };
        Some(IssuedCreate { attempt: attempt.trim().parse().ok()?, at })
    }

    pub(crate) fn value(&self) -> String {
        match self.at {
            Some(at) => format!("{}@{at}", self.attempt),
            None => self.attempt.to_string(),
        }
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
        let issued = IssuedCreate { attempt: 2, at };
        assert_eq!(IssuedCreate::of(&with(&issued.value())), Some(issued));
        assert_eq!(IssuedCreate::of(&with("1")), Some(IssuedCreate { attempt: 1, at: None }));
        assert_eq!(IssuedCreate::of(&with("x@y")), None);
        assert_eq!(IssuedCreate::of(&Server::default()), None);
    }

    #[test]
    fn grace_runs_from_the_issue_time() {
        let t = |s| Timestamp::from_second(s).unwrap_or_default();
        let issued = IssuedCreate { attempt: 0, at: Some(t(100)) };
        let grace = Duration::from_secs(50);
        assert!(issued.in_grace(t(100), grace) && issued.in_grace(t(149), grace));
        assert!(!issued.in_grace(t(150), grace));
        assert!(!IssuedCreate { attempt: 0, at: None }.in_grace(t(100), grace), "an old note's grace is over");
    }
}
