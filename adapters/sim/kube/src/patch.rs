//! PATCH bodies: JSON merge patch, JSON patch (with `test`), and approximations
//! of strategic merge patch and server-side apply.

use serde_json::Value;

use super::status::ApiError;

/// The patch flavours the API server accepts, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902), including `test` operations.
    Json,
    /// `application/strategic-merge-patch+json`: applied as a merge patch
    /// (lists are replaced, not merged by key).
    StrategicMerge,
    /// `application/apply-patch+yaml`: server-side apply, approximated as a
    /// merge patch that creates the object when it is absent (no field ownership).
    Apply,
}

impl PatchKind {
    /// Maps a `Content-Type` header (parameters ignored) to a patch kind.
    pub(crate) fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let media_type = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match media_type.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// A parsed patch body, ready to apply to an object.
#[derive(Debug, Clone)]
pub enum Patch {
    /// Merge-style patch (merge, strategic merge, apply): a JSON object.
    Merge(PatchKind, Value),
    /// RFC 6902 operations.
    Json(json_patch::Patch),
}

impl Patch {
    /// Parses a body of the given kind; malformed bodies are 400 Bad Request.
    pub(crate) fn parse(kind: PatchKind, body: &[u8]) -> Result<Self, ApiError> {
        match kind {
            PatchKind::Json => serde_json::from_slice(body)
                .map(Self::Json)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}"))),
            // Apply bodies are YAML on the wire; kube-rs (and kubectl with
            // --server-side) send JSON, which is YAML, so JSON is all we read.
            PatchKind::Merge | PatchKind::StrategicMerge | PatchKind::Apply => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid patch body: {e}")))?;
                if !value.is_object() {
                    return Err(ApiError::bad_request("patch body must be a JSON object"));
                }
                Ok(Self::Merge(kind, value))
            }
        }
    }

    /// Builds a merge patch from a value (for direct store access).
    pub fn merge(value: Value) -> Self {
        Self::Merge(PatchKind::Merge, value)
    }

    /// The patch kind.
    pub fn kind(&self) -> PatchKind {
        match self {
            Self::Merge(kind, _) => *kind,
            Self::Json(_) => PatchKind::Json,
        }
    }

    /// Applies the patch to a copy of `current`.
    ///
    /// A JSON patch whose operations fail (including a failed `test`) is 422,
    /// as on the real API server.
    pub(crate) fn apply_to(&self, current: &Value) -> Result<Value, ApiError> {
        let mut document = current.clone();
        match self {
            Self::Merge(_, patch) => json_patch::merge(&mut document, patch),
            Self::Json(patch) => apply_json_patch(&mut document, patch)?,
        }
        if !document.is_object() {
            return Err(ApiError::unprocessable("patch must produce an object"));
        }
        Ok(document)
    }
}

/// Applies RFC 6902 operations one at a time, with the API server's reading
/// of `test`: a missing path equals `null` (evanphx/json-patch semantics,
/// which kube-runtime's finalizer helper relies on to add the first finalizer).
fn apply_json_patch(document: &mut Value, patch: &json_patch::Patch) -> Result<(), ApiError> {
    for operation in patch.iter() {
        if let json_patch::PatchOperation::Test(test) = operation
            && test.value.is_null()
            && document.pointer(test.path.as_str()).is_none_or(Value::is_null)
        {
            continue;
        }
        json_patch::patch(document, std::slice::from_ref(operation)).map_err(|e| {
            ApiError::unprocessable(format!("the server rejected our request due to an error in our request: {e}"))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_map_to_kinds() {
        assert_eq!(PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"), Ok(PatchKind::Merge));
        assert_eq!(PatchKind::from_content_type("application/json-patch+json"), Ok(PatchKind::Json));
        assert_eq!(PatchKind::from_content_type("application/apply-patch+yaml"), Ok(PatchKind::Apply));
        let error = PatchKind::from_content_type("text/plain").expect_err("unsupported");
        assert_eq!(error.code, 415);
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let patch = Patch::parse(
            PatchKind::Json,
            br#"[{"op":"test","path":"/metadata/finalizers","value":["a"]},{"op":"remove","path":"/metadata/finalizers/0"}]"#,
        )
        .expect("valid patch");
        let error = patch.apply_to(&json!({"metadata": {"finalizers": ["b"]}})).expect_err("test op fails");
        assert_eq!(error.code, 422);
        let patched = patch.apply_to(&json!({"metadata": {"finalizers": ["a"]}})).expect("test op holds");
        assert_eq!(patched, json!({"metadata": {"finalizers": []}}));
    }

    #[test]
    fn json_patch_test_of_null_matches_a_missing_path() {
        let patch = Patch::parse(
            PatchKind::Json,
            br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["a"]}]"#,
        )
        .expect("valid patch");
        let patched = patch.apply_to(&json!({"metadata": {"name": "x"}})).expect("missing equals null");
        assert_eq!(patched["metadata"]["finalizers"], json!(["a"]));
        patch.apply_to(&json!({"metadata": {"finalizers": ["b"]}})).expect_err("present and not null");
    }

    #[test]
    fn malformed_bodies_are_400() {
        for (kind, body) in [
            (PatchKind::Merge, &b"{not json"[..]),
            (PatchKind::Merge, &b"[1]"[..]),
            (PatchKind::Json, &b"{}"[..]),
            (PatchKind::Json, &b"[{\"op\":\"frobnicate\"}]"[..]),
        ] {
            let error = Patch::parse(kind, body).expect_err("malformed");
            assert_eq!(error.code, 400);
        }
    }
}
