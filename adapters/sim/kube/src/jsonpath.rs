//! The subset of Kubernetes JSONPath that printer columns use.
//!
//! Supported: fields (`.status.privateIP`), indices (`[0]`), wildcards
//! (`[*]`, `.*`), quoted fields (`['a.b']`) and filters comparing a relative
//! path with a literal (`[?(@.type=="Available")]`, `!=`, `<`, `<=`, `>`,
//! `>=`), optionally wrapped in `{...}` as kubectl writes them. Evaluation
//! behaves like the API server's printer: missing keys yield no result rather
//! than an error, and filters apply to every element of the arrays reached.

use serde_json::Value;

/// A JSONPath expression that failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSONPath {expression:?}: {reason}")]
pub(crate) struct JsonPathError {
    expression: String,
    reason: String,
}

/// A parsed JSONPath expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[n]`; negative counts from the end.
    Index(i64),
    /// `[*]` or `.*`: every element or value.
    Wildcard,
    /// `[?(@.path OP literal)]`.
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    path: Vec<Step>,
    op: Op,
    literal: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl JsonPath {
    /// Parses an expression such as `.status.conditions[?(@.type=="Ready")].reason`.
    pub(crate) fn parse(expression: &str) -> Result<Self, JsonPathError> {
        let error = |reason: &str| JsonPathError { expression: expression.to_string(), reason: reason.to_string() };
        let trimmed = expression.trim();
        let inner = match trimmed.strip_prefix('{') {
            Some(rest) => rest.strip_suffix('}').ok_or_else(|| error("unclosed '{'"))?,
            None => trimmed,
        };
        let mut parser = Parser { rest: inner.trim() };
        // A leading `$` (the root) is optional.
        parser.eat("$");
        let steps = parser.steps(false).map_err(|reason| error(&reason))?;
        if !parser.rest.is_empty() {
            return Err(error(&format!("unexpected {:?}", parser.rest)));
        }
        Ok(Self { steps })
    }

    /// Every value the path reaches in `root`, in document order.
    pub(crate) fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        walk(&self.steps, vec![root])
    }

    /// The first value reached, as the API server's printer takes it.
    pub(crate) fn first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        self.find(root).into_iter().next()
    }
}

fn walk<'a>(steps: &[Step], mut nodes: Vec<&'a Value>) -> Vec<&'a Value> {
    for step in steps {
        nodes = nodes.into_iter().flat_map(|node| apply(step, node)).collect();
    }
    nodes
}

fn apply<'a>(step: &Step, node: &'a Value) -> Vec<&'a Value> {
    match step {
        Step::Field(name) => node.get(name).into_iter().collect(),
        Step::Index(index) => {
            let Some(items) = node.as_array() else { return Vec::new() };
            let position = if *index < 0 {
                usize::try_from(index.unsigned_abs()).ok().and_then(|back| items.len().checked_sub(back))
            } else {
                usize::try_from(*index).ok()
            };
            position.and_then(|i| items.get(i)).into_iter().collect()
        }
        Step::Wildcard => match node {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => Vec::new(),
        },
        Step::Filter(filter) => {
            let Some(items) = node.as_array() else { return Vec::new() };
            items.iter().filter(|item| filter.matches(item)).collect()
        }
    }
}

impl Filter {
    fn matches(&self, item: &Value) -> bool {
        walk(&self.path, vec![item]).into_iter().any(|value| compare(value, self.op, &self.literal))
    }
}

fn compare(value: &Value, op: Op, literal: &Value) -> bool {
    let ordering = match (value, literal) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().zip(b.as_f64()).and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) if a == b => Some(std::cmp::Ordering::Equal),
        _ => None,
    };
    match (op, ordering) {
        (Op::Ne, ordering) => ordering != Some(std::cmp::Ordering::Equal),
        (_, None) => false,
        (Op::Eq, Some(o)) => o.is_eq(),
        (Op::Lt, Some(o)) => o.is_lt(),
        (Op::Le, Some(o)) => o.is_le(),
        (Op::Gt, Some(o)) => o.is_gt(),
        (Op::Ge, Some(o)) => o.is_ge(),
    }
}

/// A hand-written recursive-descent parser over the remaining input.
struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn eat(&mut self, token: &str) -> bool {
        match self.rest.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// Steps until the end of input, or (inside a filter) the first operator or `)`.
    fn steps(&mut self, in_filter: bool) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        loop {
            if self.eat("..") {
                return Err("recursive descent ('..') is not supported".into());
            } else if self.eat(".") {
                if self.eat("*") {
                    steps.push(Step::Wildcard);
                } else {
                    let name = self.identifier();
                    if name.is_empty() {
                        return Err("expected a field name after '.'".into());
                    }
                    steps.push(Step::Field(name.to_string()));
                }
            } else if self.eat("[") {
                steps.push(self.bracket()?);
            } else if self.rest.is_empty() || in_filter {
                return Ok(steps);
            } else {
                return Err(format!("unexpected {:?}", self.rest));
            }
        }
    }

    fn identifier(&mut self) -> &str {
        let end = self.rest.find(['.', '[', ']', '(', ')', '=', '!', '<', '>', ' ']).unwrap_or(self.rest.len());
        let (name, rest) = self.rest.split_at(end);
        self.rest = rest;
        name
    }

    /// The inside of `[...]`, after the `[`.
    fn bracket(&mut self) -> Result<Step, String> {
        self.skip_spaces();
        let step = if self.eat("*") {
            Step::Wildcard
        } else if self.eat("?(") {
            let filter = self.filter()?;
            if !self.eat(")") {
                return Err("expected ')' to close the filter".into());
            }
            Step::Filter(filter)
        } else if self.rest.starts_with(['\'', '"']) {
            match self.literal()? {
                Value::String(name) => Step::Field(name),
                _ => return Err("expected a quoted field name".into()),
            }
        } else {
            let end = self.rest.find(']').unwrap_or(self.rest.len());
            let (digits, rest) = self.rest.split_at(end);
            let index = digits.trim().parse::<i64>().map_err(|_| format!("unsupported subscript {digits:?}"))?;
            self.rest = rest;
            Step::Index(index)
        };
        self.skip_spaces();
        if !self.eat("]") {
            return Err("expected ']'".into());
        }
        Ok(step)
    }

    /// `@.path OP literal`, after `?(`.
    fn filter(&mut self) -> Result<Filter, String> {
        self.skip_spaces();
        if !self.eat("@") {
            return Err("a filter must start with '@'".into());
        }
        let path = self.steps(true)?;
        self.skip_spaces();
        let op = [("==", Op::Eq), ("!=", Op::Ne), ("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)]
            .into_iter()
            .find(|(token, _)| self.eat(token))
            .map(|(_, op)| op)
            .ok_or("expected a comparison ('==', '!=', '<', '<=', '>', '>=')")?;
        self.skip_spaces();
        let literal = self.literal()?;
        self.skip_spaces();
        Ok(Filter { path, op, literal })
    }

    /// A quoted string, a number, `true`, `false` or `null`.
    fn literal(&mut self) -> Result<Value, String> {
        if let Some(quote) = self.rest.chars().next().filter(|c| matches!(c, '\'' | '"')) {
            let body = &self.rest[quote.len_utf8()..];
            let end = body.find(quote).ok_or("unterminated string")?;
            let text = body[..end].to_string();
            self.rest = &body[end + quote.len_utf8()..];
            return Ok(Value::String(text));
        }
        let end = self.rest.find([')', ']', ' ']).unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        let value = match token {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            number => serde_json::from_str::<serde_json::Number>(number)
                .map(Value::Number)
                .map_err(|_| format!("expected a literal, found {number:?}"))?,
        };
        self.rest = rest;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn server() -> Value {
        json!({
            "metadata": {"name": "s", "creationTimestamp": "2024-01-02T03:04:05Z", "labels": {"a.b/c": "x"}},
            "status": {
                "privateIP": "10.0.0.1",
                "conditions": [
                    {"type": "Healthy", "status": "True", "reason": "Running"},
                    {"type": "Available", "status": "False", "reason": "Errored"},
                ],
                "count": 3,
            }
        })
    }

    fn first(expression: &str) -> Option<Value> {
        JsonPath::parse(expression).unwrap().first(&server()).cloned()
    }

    #[test]
    fn follows_fields_with_or_without_braces() {
        assert_eq!(first(".status.privateIP"), Some(json!("10.0.0.1")));
        assert_eq!(first("{.status.privateIP}"), Some(json!("10.0.0.1")));
        assert_eq!(first("$.metadata.creationTimestamp"), Some(json!("2024-01-02T03:04:05Z")));
        assert_eq!(first(".metadata.labels['a.b/c']"), Some(json!("x")));
    }

    #[test]
    fn missing_keys_yield_nothing() {
        assert_eq!(first(".status.publicIP"), None);
        assert_eq!(first(".spec.a.b.c"), None);
        assert_eq!(first(".status.privateIP.deeper"), None);
        assert_eq!(first(".status.conditions[7]"), None);
    }

    #[test]
    fn filters_select_array_elements() {
        assert_eq!(first(r#".status.conditions[?(@.type=="Available")].reason"#), Some(json!("Errored")));
        assert_eq!(first(r#".status.conditions[?(@.type == 'Healthy')].reason"#), Some(json!("Running")));
        assert_eq!(first(r#".status.conditions[?(@.type!="Healthy")].type"#), Some(json!("Available")));
        assert_eq!(first(r#".status.conditions[?(@.type=="Missing")].reason"#), None);
        // A filter on something that is not an array matches nothing.
        assert_eq!(first(r#".status.privateIP[?(@.type=="Available")]"#), None);
    }

    #[test]
    fn indices_and_wildcards() {
        assert_eq!(first(".status.conditions[0].type"), Some(json!("Healthy")));
        assert_eq!(first(".status.conditions[-1].type"), Some(json!("Available")));
        let path = JsonPath::parse(".status.conditions[*].type").unwrap();
        assert_eq!(path.find(&server()), vec![&json!("Healthy"), &json!("Available")]);
        assert_eq!(JsonPath::parse(".metadata.labels.*").unwrap().find(&server()), vec![&json!("x")]);
    }

    #[test]
    fn numeric_comparisons() {
        let doc = json!({"items": [{"n": 1}, {"n": 5}, {"n": 9}]});
        let found = |expression: &str| JsonPath::parse(expression).unwrap().find(&doc).len();
        assert_eq!(found(".items[?(@.n > 4)]"), 2);
        assert_eq!(found(".items[?(@.n<=5)]"), 2);
        assert_eq!(found(".items[?(@.n == 9)]"), 1);
        assert_eq!(found(".items[?(@.n == \"9\")]"), 0);
    }

    #[test]
    fn rejects_malformed_expressions_without_panicking() {
        for bad in [
            "{.status",
            ".",
            ".status[",
            ".status[abc]",
            ".a[?(@.b)]",
            ".a[?(b==1)]",
            ".a[?(@.b==\"x)]",
            ".a[?(@.b==x)]",
            "..a",
            "status",
            ".a]",
            ".a[?(@.b==1]",
            "[\u{e9}",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
