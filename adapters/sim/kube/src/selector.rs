//! Label and field selectors, as the API server parses them from query strings.

use serde_json::Value;

use super::status::ApiError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value`, `key notin (a,b)`: also matches objects without the label.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax; an empty string selects everything.
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in split_top_level(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(
                parse_requirement(term)
                    .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {term:?}")))?,
            );
        }
        Ok(Self { requirements })
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|requirement| match requirement {
            Requirement::In(key, values) => label(key).is_some_and(|v| values.iter().any(|x| x == v)),
            Requirement::NotIn(key, values) => label(key).is_none_or(|v| values.iter().all(|x| x != v)),
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
        })
    }
}

/// Splits on commas outside parentheses (`a in (x,y),b` is two terms).
fn split_top_level(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, ch) in text.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(term: &str) -> Option<Requirement> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| Requirement::DoesNotExist(key.to_string()));
    }
    if let Some(open) = term.find('(') {
        // Set-based: `key in (a, b)` / `key notin (a, b)`.
        let inner = term[open + 1..].strip_suffix(')')?;
        let mut words = term[..open].split_whitespace();
        let key = words.next()?.to_string();
        let operator = words.next()?;
        if words.next().is_some() || !valid_key(&key) {
            return None;
        }
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
        return match operator {
            "in" => Some(Requirement::In(key, values)),
            "notin" => Some(Requirement::NotIn(key, values)),
            _ => None,
        };
    }
    let (key, value, negated) = if let Some((key, value)) = term.split_once("!=") {
        (key, value, true)
    } else if let Some((key, value)) = term.split_once("==") {
        (key, value, false)
    } else if let Some((key, value)) = term.split_once('=') {
        (key, value, false)
    } else {
        let key = term.trim();
        return valid_key(key).then(|| Requirement::Exists(key.to_string()));
    };
    let key = key.trim().to_string();
    if !valid_key(&key) {
        return None;
    }
    let values = vec![value.trim().to_string()];
    Some(if negated { Requirement::NotIn(key, values) } else { Requirement::In(key, values) })
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
///
/// Paths are dotted JSON paths (`metadata.name`, `metadata.namespace`,
/// `status.phase`); a missing field compares as the empty string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    terms: Vec<(Vec<String>, String, bool)>,
}

impl FieldSelector {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, value, negated) = if let Some((p, v)) = term.split_once("!=") {
                (p, v, true)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, v, false)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, v, false)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            };
            let path: Vec<String> = path.trim().split('.').map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            }
            terms.push((path, value.trim().to_string(), negated));
        }
        Ok(Self { terms })
    }

    /// The same selector with every path rewritten (a field of one view of a
    /// type named as the stored type names it).
    #[must_use]
    pub(crate) fn map_paths(self, rename: impl Fn(&[String]) -> Vec<String>) -> Self {
        Self { terms: self.terms.into_iter().map(|(path, value, negated)| (rename(&path), value, negated)).collect() }
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(path, expected, negated)| {
            let actual = path
                .iter()
                .try_fold(object, |value, key| value.get(key))
                .map(|value| match value {
                    Value::String(text) => text.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (actual == *expected) != *negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    fn selects(selector: &str, labels: Value) -> bool {
        LabelSelector::parse(selector).expect("valid selector").matches(&object(labels))
    }

    #[test]
    fn label_selector_operators() {
        let labels = json!({"app": "web", "tier": "front", "region.io/id": "r1"});
        assert!(selects("", labels.clone()));
        assert!(selects("app=web", labels.clone()));
        assert!(selects("app==web,tier=front", labels.clone()));
        assert!(!selects("app=db", labels.clone()));
        assert!(selects("app!=db", labels.clone()));
        assert!(selects("missing!=x", labels.clone()), "!= matches absent labels");
        assert!(selects("app in (db, web)", labels.clone()));
        assert!(!selects("app notin (db,web)", labels.clone()));
        assert!(selects("missing notin (x)", labels.clone()));
        assert!(selects("region.io/id", labels.clone()));
        assert!(!selects("!region.io/id", labels.clone()));
        assert!(selects("!missing, app in (web)", labels.clone()));
        assert!(!selects("app", json!(null)));
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in ["app in (x", "a b c", "=x", "app in x)", "!", "a?b=c"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn field_selector_matches_metadata_paths() {
        let obj = object(json!({}));
        let select = |text: &str| FieldSelector::parse(text).expect("valid").matches(&obj);
        assert!(select("metadata.name=a"));
        assert!(select("metadata.name==a,metadata.namespace=ns"));
        assert!(!select("metadata.name!=a"));
        assert!(select("status.phase="));
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
