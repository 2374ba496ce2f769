//! Consistent list paging, as kube-apiserver's etcd3 storage serves it.
//!
//! A list with `limit` returns one page and, if more remain, a `continue`
//! token naming the list's resourceVersion and the key to resume after
//! (k8s.io/apiserver/pkg/storage/continue.go `EncodeContinue`: base64url of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`). Every later page
//! is read at that resourceVersion, so the pages together are one snapshot,
//! whatever was written in between. Once that version is compacted away the
//! continue is refused with 410 Expired, and the Status carries a token that
//! resumes at the latest version instead (rv -1), as
//! k8s.io/apiserver/pkg/storage/etcd3/store.go `handleCompactedErrorForPaging`
//! does. Here the store rebuilds the state at the token's version from its
//! bounded change history; a version older than the retained history is the
//! compacted case.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::status::ApiError;

/// The API version the upstream token carries.
const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// The upstream message of a continue whose version is compacted.
pub(crate) const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent \
     list result. You can start a new list without the continue parameter, or use the continue token in this \
     response to retrieve the remainder of the results. Continuing with the provided token results in an \
     inconsistent list - objects that were created, modified, or deleted between the time the first chunk was \
     returned and now may show up in the list.";

/// Where a continued list resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continue {
    /// The list's resourceVersion; `None` resumes at the latest state (the
    /// token handed out with a 410 Expired).
    pub(crate) resource_version: Option<u64>,
    /// `(namespace, name)` of the last object returned.
    pub(crate) after: (String, String),
}

/// The 410 Expired answer to a continue whose version is compacted, with a
/// token in `Status.metadata.continue` that resumes after the same key at
/// the latest state.
pub(crate) fn expired(error: &ApiError, token: &str) -> Response {
    let mut status = error.to_status();
    if let Ok(resume) = Continue::decode(token) {
        let latest = Continue { resource_version: None, after: resume.after };
        status["metadata"] = serde_json::json!({ "continue": latest.encode() });
    }
    (StatusCode::GONE, axum::Json(status)).into_response()
}

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

impl Continue {
    pub(crate) fn encode(&self) -> String {
        let (namespace, name) = &self.after;
        // The next key after the last returned one, as upstream's `key + "\x00"`.
        let start = format!("{namespace}/{name}\u{0}");
        let rv = self.resource_version.and_then(|rv| i64::try_from(rv).ok()).unwrap_or(-1);
        let token = Token { v: TOKEN_VERSION.into(), rv, start };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
    }

    pub(crate) fn decode(token: &str) -> Result<Continue, ApiError> {
        let invalid = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).map_err(|_| invalid("not base64"))?;
        let token: Token =
            serde_json::from_slice(&bytes).map_err(|_| invalid("incorrect encoded start resourceVersion"))?;
        if token.v != TOKEN_VERSION {
            return Err(invalid("server does not recognize this encoded key"));
        }
        let resource_version = match token.rv {
            -1 => None,
            rv if rv > 0 => Some(rv.unsigned_abs()),
            _ => return Err(invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")),
        };
        let key = token.start.strip_suffix('\u{0}').ok_or_else(|| invalid("bad start key"))?;
        let (namespace, name) = key.split_once('/').ok_or_else(|| invalid("bad start key"))?;
        if name.is_empty() {
            return Err(invalid("bad start key"));
        }
        Ok(Continue { resource_version, after: (namespace.to_string(), name.to_string()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        for token in [
            Continue { resource_version: Some(42), after: ("ns".into(), "a".into()) },
            Continue { resource_version: None, after: (String::new(), "cluster-object".into()) },
        ] {
            assert_eq!(Continue::decode(&token.encode()), Ok(token));
        }
        for garbage in ["", "!!", "e30", &URL_SAFE_NO_PAD.encode(br#"{"v":"x","rv":1,"start":"a/b\u0000"}"#)] {
            assert_eq!(Continue::decode(garbage).map_err(|e| e.code), Err(400), "{garbage:?}");
        }
    }
}
