//! Errors of the Kubernetes adapter, each with the context of what was tried.

use server_core::{ActionFailure, ApiCause, ApiFailure, NotSent};

use crate::fence::NotLeader;

/// What went wrong in the adapter itself (not a decision of the core).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API request failed.
    #[error("{context}: {source}")]
    Kube {
        context: String,
        #[source]
        source: kube::Error,
    },
    /// The caches of consumed resources could not be filled or kept.
    #[error("caching consumed resources failed: {0}")]
    Cache(String),
    /// The leader election is configured so that two replicas could act at once.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// `--region-namespace` is set and its Regions cannot be read.
    #[error("{0}")]
    Regions(String),
    /// The object asked for does not exist (the API server said 404).
    #[error("{0}")]
    NotFound(String),
    /// A pass was handed a fact it did not ask for: a bug of this adapter.
    #[error("internal error, please report it: {0}")]
    UnaskedFact(#[from] server_core::pass::UnaskedFact),
}

impl Error {
    pub(crate) fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube { context: context.into(), source }
    }
}

/// HTTP status of a Kubernetes API error, if the API server answered.
pub(crate) fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    api_code(error) == Some(404)
}

/// Sorts a failed Kubernetes write for the core: 409 is a Conflict (the next
/// pass sees fresh state), anything else an API failure.
pub(crate) fn action_failure(context: &str, error: &kube::Error) -> ActionFailure {
    let failure = ApiFailure::new(context, api_cause(error));
    match api_code(error) {
        Some(409) => ActionFailure::Conflict(failure),
        _ => ActionFailure::Api(failure),
    }
}

/// How a Kubernetes request failed, as the core's type: the API server's
/// answer, or no answer (the request may have been applied).
pub(crate) fn api_cause(error: &kube::Error) -> ApiCause {
    match error {
        kube::Error::Api(status) => ApiCause::answered(status.code, &status.reason, &status.message),
        kube::Error::Service(source) if source.downcast_ref::<NotLeader>().is_some() => {
            ApiCause::NotSent(NotSent::NotLeading)
        }
        other => ApiCause::NoAnswer(kube_error_summary(other)),
    }
}

/// The API server's message without kube's Debug dump of the whole Status.
pub(crate) fn short_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("HTTP {} {}: {}", status.code, status.reason, status.message)
        }
        kube::Error::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        other => other.to_string(),
    }
}

/// A failed watch, for the logs. The API server's answer is summarized, never
/// quoted: a decode error's message can carry a value of the object (user
/// data, credentials), so only where decoding failed is kept.
pub(crate) fn watch_error_summary(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as Watch;
    match error {
        Watch::InitialListFailed(e) => format!("listing failed: {}", kube_error_summary(e)),
        Watch::WatchStartFailed(e) => format!("starting the watch failed: {}", kube_error_summary(e)),
        Watch::WatchFailed(e) => format!("the watch failed: {}", kube_error_summary(e)),
        Watch::WatchError(status) => format!("the watch ended: HTTP {} {}", status.code, status.reason),
        other => other.to_string(),
    }
}

/// A Kubernetes client error without any part of a response body.
pub(crate) fn kube_error_summary(error: &kube::Error) -> String {
    match error {
        kube::Error::SerdeError(e) => {
            format!(
                "the answer could not be decoded ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            )
        }
        other => short_message(other),
    }
}
