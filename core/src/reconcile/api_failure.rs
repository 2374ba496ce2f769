//! A failed Kubernetes API request, as an adapter classifies it for the core:
//! what was tried and how it failed, as types. The core's follow-up rules
//! match on the kind of failure ([`super::ActionFailure`]), never on words.

use crate::model::ResourceKind;

/// What was tried (`what`, e.g. "writing the status of ns/name") and how it
/// failed. Displayed as "{what}: {cause}"; nothing in it comes from a
/// Server's spec or a response body beyond the API server's status message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {cause}")]
pub struct ApiFailure {
    pub what: String,
    pub cause: ApiCause,
}

impl ApiFailure {
    pub fn new(what: impl Into<String>, cause: ApiCause) -> Self {
        ApiFailure { what: what.into(), cause }
    }
}

/// How an API request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiCause {
    /// The API server answered with this HTTP status, its reason word
    /// (`Conflict`, `Invalid`, `Forbidden`, `TooManyRequests`, ...) and its
    /// message.
    #[error(
        "HTTP {code}{}{}",
        if reason.is_empty() { String::new() } else { format!(" {reason}") },
        if message.is_empty() { String::new() } else { format!(": {message}") }
    )]
    Answered { code: u16, reason: String, message: String },
    /// No answer came back (a timeout, a connection lost, a body that
    /// could not be read): the request may have been applied.
    #[error("no answer ({0})")]
    NoAnswer(String),
    /// The object the change is for does not exist.
    #[error("{} {name} does not exist", kind.as_str())]
    Missing { kind: ResourceKind, name: String },
    /// A race with other writers lost this many times in a row.
    #[error("still conflicting after {attempts} attempts")]
    StillConflicting { attempts: usize },
    /// This process did not send it: its leadership term is over, the
    /// worker that sends it stopped, or it has nothing to send it with.
    #[error("not sent: {0}")]
    NotSent(NotSent),
}

/// The most of the API server's message an [`ApiCause::Answered`] keeps.
pub(crate) const MAX_API_MESSAGE: usize = 256;

impl ApiCause {
    /// The API server's answer, its message bounded to 256
    /// bytes. A 422's message is left out: kube-apiserver's `Invalid`
    /// quotes the refused value ("Invalid value: ..."), which may be user
    /// data, and a failure can reach a status, an Event or a log.
    pub fn answered(code: u16, reason: &str, message: &str) -> Self {
        let message = match code {
            422 => String::new(),
            _ => {
                let mut end = message.len().min(MAX_API_MESSAGE);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message[..end].to_owned()
            }
        };
        ApiCause::Answered { code, reason: reason.to_owned(), message }
    }
}

/// Why a request was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSent {
    /// The replica's leadership term ended; another replica acts now.
    #[error("this replica no longer leads")]
    NotLeading,
    /// The operator is shutting down.
    #[error("the operator is stopping")]
    Stopping,
    /// No cloud serves the Server's region (`reason` says why).
    #[error("no cloud to act on: {reason}")]
    NoCloud { reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_what_was_tried_then_how_it_failed() {
        let answered = ApiFailure::new(
            "writing the status of ns/web",
            ApiCause::Answered { code: 409, reason: "Conflict".into(), message: "the object has been modified".into() },
        );
        assert_eq!(
            answered.to_string(),
            "writing the status of ns/web: HTTP 409 Conflict: the object has been modified"
        );
        let bare = ApiCause::Answered { code: 503, reason: "ServiceUnavailable".into(), message: String::new() };
        assert_eq!(bare.to_string(), "HTTP 503 ServiceUnavailable");
        let missing = ApiCause::Missing { kind: ResourceKind::Network, name: "net-a".into() };
        assert_eq!(missing.to_string(), "network net-a does not exist");
        assert_eq!(ApiCause::NotSent(NotSent::NotLeading).to_string(), "not sent: this replica no longer leads");
    }

    #[test]
    fn an_answer_keeps_a_bounded_message_and_never_a_refused_value() {
        let invalid = ApiCause::answered(422, "Invalid", "spec.userData: Invalid value: \"#cloud-config secret\"");
        assert_eq!(invalid.to_string(), "HTTP 422 Invalid");
        let long = "é".repeat(MAX_API_MESSAGE);
        let ApiCause::Answered { message, .. } = ApiCause::answered(500, "InternalError", &long) else {
            panic!("an answer")
        };
        assert!(message.len() <= MAX_API_MESSAGE && long.starts_with(&message), "{}", message.len());
    }
}
