//! Server-side printing: the `meta.k8s.io` `Table` kubectl asks for.
//!
//! `kubectl get` sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`
//! and prints whatever columns the server returns. Like the real API server:
//! a custom resource gets a Name column followed by its CRD's
//! `additionalPrinterColumns` for the requested version (Age when it declares
//! none); `date` cells are rendered server-side as ages ("5m", "3h2m");
//! Events and Leases get the columns of the API server's built-in printers;
//! any other type gets the default Name and Created At. Each row carries the
//! object as `PartialObjectMetadata`, or whole with `includeObject=Object`.
//! Watches asked for Tables send each event's object as a one-row Table.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::jsonpath::JsonPath;
use super::representation::{self, Representation};
use super::resource::ResourceType;
use super::status::ApiError;
use super::store::StoreState;

/// What a request asked for: a Table, in which version, with which objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableRequest {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub(crate) api_version: &'static str,
    pub(crate) include: IncludeObject,
}

/// `includeObject`: what each row's `object` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl TableRequest {
    /// Reads the `Accept` header and the `includeObject` parameter; `None`
    /// when the client prefers plain JSON (the first acceptable media type wins).
    pub(crate) fn negotiate(accept: Option<&str>, include: Option<&str>) -> Result<Option<Self>, ApiError> {
        let Some(Representation::Table(api_version)) = representation::preferred(accept) else { return Ok(None) };
        let include = match include.unwrap_or_default() {
            "" | "Metadata" => IncludeObject::Metadata,
            "None" => IncludeObject::None,
            "Object" => IncludeObject::Object,
            other => return Err(ApiError::bad_request(format!("invalid includeObject: {other:?}"))),
        };
        Ok(Some(Self { api_version, include }))
    }
}

/// How one column's cell is computed.
#[derive(Debug, Clone)]
enum Source {
    /// `metadata.name`.
    Name,
    /// A CRD printer column: the first JSONPath result, converted by column type.
    /// `None` when the path did not parse (the column stays empty).
    Path(Option<JsonPath>),
    /// A built-in printer's cell.
    Builtin(fn(&Value, Timestamp) -> Value),
}

#[derive(Debug, Clone)]
struct Column {
    definition: Value,
    column_type: String,
    source: Source,
}

impl Column {
    fn new(name: &str, column_type: &str, format: &str, priority: i64, description: &str, source: Source) -> Self {
        Self {
            definition: json!({
                "name": name,
                "type": column_type,
                "format": format,
                "description": description,
                "priority": priority,
            }),
            column_type: column_type.to_string(),
            source,
        }
    }

    fn name() -> Self {
        Self::new("Name", "string", "name", 0, NAME_DESCRIPTION, Source::Name)
    }

    fn cell(&self, object: &Value, now: Timestamp) -> Value {
        match &self.source {
            Source::Name => text_at(object, "/metadata/name"),
            Source::Path(None) => Value::Null,
            Source::Path(Some(path)) => {
                path.first(object).map_or(Value::Null, |value| typed_cell(&self.column_type, value, now))
            }
            Source::Builtin(cell) => cell(object, now),
        }
    }
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// The columns of one resource type at one version.
#[derive(Debug, Clone)]
pub(crate) struct Printer {
    columns: Vec<Column>,
    /// Brings a served object into the shape the cells read (core/v1 Events
    /// are printed by the events.k8s.io printer, as upstream prints both
    /// from one internal type).
    normalize: Option<fn(&Value) -> Value>,
}

impl Printer {
    /// The printer the API server would use for `rtype` at `version`.
    pub(crate) fn for_type(store: &StoreState, rtype: &ResourceType, version: &str) -> Self {
        let crds = ResourceType::custom_resource_definitions();
        let crd_name = format!("{}.{}", rtype.plural, rtype.group);
        if let Ok(crd) = store.get(&(crds.group, crds.plural), None, &crd_name) {
            return Self::for_custom_resource(&crd, version);
        }
        match (rtype.group.as_str(), rtype.plural.as_str()) {
            ("events.k8s.io", "events") => Self::events(),
            ("", "events") => Self { normalize: Some(super::event_view::from_core), ..Self::events() },
            ("", "namespaces") => Self::namespaces(),
            ("coordination.k8s.io", "leases") => Self::leases(),
            _ => Self::default_columns(),
        }
    }

    /// Name, then the CRD's printer columns for `version` (Age when it has none).
    pub(crate) fn for_custom_resource(crd: &Value, version: &str) -> Self {
        let declared = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|versions| versions.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(version)))
            .and_then(|v| v.get("additionalPrinterColumns"))
            .and_then(Value::as_array)
            .filter(|columns| !columns.is_empty());
        let mut columns = vec![Column::name()];
        match declared {
            Some(declared) => columns.extend(declared.iter().map(printer_column)),
            None => columns.push(Column::new(
                "Age",
                "date",
                "",
                0,
                "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
                Source::Path(JsonPath::parse(".metadata.creationTimestamp").ok()),
            )),
        }
        Self { columns, normalize: None }
    }

    /// The API server's default for types without a printer.
    fn default_columns() -> Self {
        let created_at = |object: &Value, _: Timestamp| text_at(object, "/metadata/creationTimestamp");
        Self {
            normalize: None,
            columns: vec![
                Column::name(),
                Column::new(
                    "Created At",
                    "date",
                    "",
                    0,
                    "CreationTimestamp is a timestamp representing the server time when this object was created.",
                    Source::Builtin(created_at),
                ),
            ],
        }
    }

    /// The columns of the API server's Event printer (events.k8s.io fields).
    fn events() -> Self {
        let string = |name: &str, priority: i64, description: &str, cell: fn(&Value, Timestamp) -> Value| {
            Column::new(name, "string", "", priority, description, Source::Builtin(cell))
        };
        Self {
            normalize: None,
            columns: vec![
                string(
                    "Last Seen",
                    0,
                    "The time at which the most recent occurrence of this event was recorded.",
                    |e, now| Value::String(event_last_seen(e, now)),
                ),
                string("Type", 0, "Type of this event (Normal, Warning).", |e, _| text_at(e, "/type")),
                string("Reason", 0, "The reason this event was generated.", |e, _| text_at(e, "/reason")),
                string("Object", 0, "The object this event is about.", |e, _| {
                    let kind = e.pointer("/regarding/kind").and_then(Value::as_str).unwrap_or_default();
                    let name = e.pointer("/regarding/name").and_then(Value::as_str).unwrap_or_default();
                    Value::String(format!("{}/{name}", kind.to_lowercase()))
                }),
                string("Subobject", 1, "The field of the object this event is about.", |e, _| {
                    text_at(e, "/regarding/fieldPath")
                }),
                string("Source", 1, "The component reporting this event.", |e, _| {
                    let field = |pointer: &str| e.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty());
                    let component = field("/deprecatedSource/component").or(field("/reportingController"));
                    let instance = field("/deprecatedSource/host").or(field("/reportingInstance"));
                    Value::String(match (component.unwrap_or_default(), instance) {
                        (component, Some(instance)) => format!("{component}, {instance}"),
                        (component, None) => component.to_string(),
                    })
                }),
                string("Message", 0, "A human-readable description of the status of this operation.", |e, _| {
                    text_at(e, "/note")
                }),
                string("First Seen", 1, "The time at which the event was first recorded.", |e, now| {
                    Value::String(event_first_seen(e, now))
                }),
                string("Count", 1, "The number of times this event has occurred.", |e, _| {
                    let count = e.pointer("/series/count").or_else(|| e.pointer("/deprecatedCount"));
                    json!(count.and_then(Value::as_i64).filter(|c| *c > 0).unwrap_or(1))
                }),
                Column::new("Name", "string", "name", 1, NAME_DESCRIPTION, Source::Name),
            ],
        }
    }

    /// The columns of the API server's Namespace printer (`printNamespace`).
    fn namespaces() -> Self {
        Self {
            normalize: None,
            columns: vec![
                Column::name(),
                Column::new(
                    "Status",
                    "string",
                    "",
                    0,
                    "The status of the namespace",
                    Source::Builtin(|namespace, _| text_at(namespace, "/status/phase")),
                ),
                Column::new(
                    "Age",
                    "string",
                    "",
                    0,
                    "CreationTimestamp is a timestamp representing the server time when this object was created.",
                    Source::Builtin(|namespace, now| {
                        Value::String(age_of(namespace.pointer("/metadata/creationTimestamp"), now))
                    }),
                ),
            ],
        }
    }

    /// The columns of the API server's Lease printer.
    fn leases() -> Self {
        Self {
            normalize: None,
            columns: vec![
                Column::name(),
                Column::new(
                    "Holder",
                    "string",
                    "",
                    0,
                    "The holder of the lease.",
                    Source::Builtin(|lease, _| text_at(lease, "/spec/holderIdentity")),
                ),
                Column::new(
                    "Age",
                    "string",
                    "",
                    0,
                    "CreationTimestamp is a timestamp representing the server time when this object was created.",
                    Source::Builtin(|lease, now| {
                        Value::String(age_of(lease.pointer("/metadata/creationTimestamp"), now))
                    }),
                ),
            ],
        }
    }

    /// A Table of `objects` (already shown at the requested version).
    /// `metadata` is the list's (resourceVersion, continue) or the object's resourceVersion.
    pub(crate) fn table(&self, request: TableRequest, objects: &[Value], metadata: Value, now: Timestamp) -> Value {
        let rows: Vec<Value> = objects
            .iter()
            .map(|object| {
                let normalized = self.normalize.map(|normalize| normalize(object));
                let shown = normalized.as_ref().unwrap_or(object);
                let cells: Vec<Value> = self.columns.iter().map(|column| column.cell(shown, now)).collect();
                let mut row = Map::new();
                row.insert("cells".into(), Value::Array(cells));
                let embedded = match request.include {
                    IncludeObject::None => None,
                    IncludeObject::Object => Some(object.clone()),
                    IncludeObject::Metadata => Some(json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": request.api_version,
                        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    })),
                };
                if let Some(embedded) = embedded {
                    row.insert("object".into(), embedded);
                }
                Value::Object(row)
            })
            .collect();
        json!({
            "kind": "Table",
            "apiVersion": request.api_version,
            "metadata": metadata,
            "columnDefinitions": self.columns.iter().map(|c| c.definition.clone()).collect::<Vec<_>>(),
            "rows": rows,
        })
    }
}

/// Server-side printing of a watch (`kubectl get -w`): each event's object
/// goes out as a one-row Table.
#[derive(Debug, Clone)]
pub(crate) struct WatchPrinting {
    pub(crate) printer: Printer,
    pub(crate) request: TableRequest,
}

impl WatchPrinting {
    pub(crate) fn one_row(&self, object: Value, now: Timestamp) -> Value {
        let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
        self.printer.table(self.request, &[object], metadata, now)
    }
}

/// A CRD `additionalPrinterColumns` entry as a column.
fn printer_column(declared: &Value) -> Column {
    let field = |name: &str| declared.get(name).and_then(Value::as_str).unwrap_or_default();
    let json_path = field("jsonPath");
    let description = match field("description") {
        "" => format!("Custom resource definition column (in JSONPath format): {json_path}"),
        given => given.to_string(),
    };
    let priority = declared.get("priority").and_then(Value::as_i64).unwrap_or(0);
    // The real API server refuses such a CRD; SimKube keeps serving with an empty column.
    let path = JsonPath::parse(json_path).ok();
    Column::new(field("name"), field("type"), field("format"), priority, &description, Source::Path(path))
}

/// A JSONPath result as the API server's CRD printer converts it for `column_type`.
fn typed_cell(column_type: &str, value: &Value, now: Timestamp) -> Value {
    match (column_type, value) {
        (_, Value::Null) => Value::Null,
        ("string", Value::String(text)) => Value::String(text.clone()),
        // JSONPath prints non-strings; compact JSON is the closest rendering.
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| n.as_f64().map(|f| Value::from(f.trunc() as i64)))
            .unwrap_or(Value::Null),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(_)) => Value::String(age_of(Some(value), now)),
        _ => Value::Null,
    }
}

/// A string field as a cell (empty when absent, as the built-in printers show it).
fn text_at(object: &Value, pointer: &str) -> Value {
    Value::String(object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string())
}

fn event_first_seen(event: &Value, now: Timestamp) -> String {
    let first = event.pointer("/deprecatedFirstTimestamp").filter(|v| !v.is_null());
    age_of(first.or_else(|| event.pointer("/eventTime")), now)
}

fn event_last_seen(event: &Value, now: Timestamp) -> String {
    if let Some(observed) = event.pointer("/series/lastObservedTime") {
        return age_of(Some(observed), now);
    }
    match event.pointer("/deprecatedLastTimestamp").filter(|v| !v.is_null()) {
        Some(last) => age_of(Some(last), now),
        None => event_first_seen(event, now),
    }
}

/// The age of an RFC 3339 timestamp, as the API server renders `date` cells.
fn age_of(timestamp: Option<&Value>, now: Timestamp) -> String {
    match timestamp.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        None => "<unknown>".into(),
        Some(text) => match text.parse::<Timestamp>() {
            Ok(at) => human_duration(now.as_second().saturating_sub(at.as_second())),
            Err(_) => "<invalid>".into(),
        },
    }
}

/// apimachinery's `duration.HumanDuration`: two significant units at most,
/// coarser as the duration grows.
pub(crate) fn human_duration(seconds: i64) -> String {
    // Up to a second of clock skew still reads as "now".
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    let with = |major: i64, major_unit: &str, minor: i64, minor_unit: &str| {
        if minor == 0 { format!("{major}{major_unit}") } else { format!("{major}{major_unit}{minor}{minor_unit}") }
    };
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 120 {
        format!("{seconds}s")
    } else if minutes < 10 {
        with(minutes, "m", seconds % 60, "s")
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        with(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        with(days, "d", hours % 24, "h")
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        with(years, "y", days % 365, "d")
    } else {
        format!("{years}y")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    fn server_crd() -> Value {
        json!({
            "kind": "CustomResourceDefinition",
            "spec": {"versions": [{
                "name": "v1alpha1",
                "additionalPrinterColumns": [
                    {"jsonPath": ".status.conditions[?(@.type==\"Available\")].reason", "name": "status", "type": "string"},
                    {"jsonPath": ".metadata.creationTimestamp", "name": "age", "type": "date"},
                    {"jsonPath": ".status.privateIP", "name": "privateIP", "type": "string"},
                    {"jsonPath": ".status.publicIP", "name": "publicIP", "type": "string", "priority": 1},
                    {"jsonPath": ".status.providerCreateFailures", "name": "failures", "type": "integer"},
                ]
            }]}
        })
    }

    fn server(name: &str, reason: &str) -> Value {
        json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1",
            "kind": "Server",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2024-01-01T00:00:00Z", "resourceVersion": "7"},
            "spec": {"flavorID": "f"},
            "status": {
                "conditions": [{"type": "Available", "status": "True", "reason": reason}],
                "privateIP": "10.0.0.7",
                "providerCreateFailures": 2,
            }
        })
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn request(include: IncludeObject) -> TableRequest {
        TableRequest { api_version: "meta.k8s.io/v1", include }
    }

    #[test]
    fn negotiates_like_kubectl_asks() {
        let table = TableRequest::negotiate(Some(KUBECTL_ACCEPT), None).unwrap().unwrap();
        assert_eq!(table, request(IncludeObject::Metadata));
        let beta = TableRequest::negotiate(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), Some("Object"));
        assert_eq!(beta.unwrap().unwrap().api_version, "meta.k8s.io/v1beta1");
        assert_eq!(TableRequest::negotiate(Some("application/json"), None).unwrap(), None);
        assert_eq!(TableRequest::negotiate(None, None).unwrap(), None);
        // Plain JSON preferred over a Table, and unknown representations skipped.
        assert_eq!(
            TableRequest::negotiate(Some("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"), None)
                .unwrap(),
            None
        );
        let skipped = "application/json;as=Table;v=v9;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io";
        assert!(TableRequest::negotiate(Some(skipped), None).unwrap().is_some());
        assert!(
            TableRequest::negotiate(Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"), None)
                .unwrap()
                .is_none()
        );
        assert_eq!(TableRequest::negotiate(Some(KUBECTL_ACCEPT), Some("Everything")).map_err(|e| e.code), Err(400));
    }

    #[test]
    fn custom_resource_table_has_name_then_printer_columns() {
        let printer = Printer::for_custom_resource(&server_crd(), "v1alpha1");
        let objects = [server("server-000", "Provisioned"), json!({"metadata": {"name": "bare"}})];
        let table = printer.table(
            request(IncludeObject::Metadata),
            &objects,
            json!({"resourceVersion": "9"}),
            at("2024-01-01T00:05:30Z"),
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"]["resourceVersion"], "9");
        let names: Vec<&str> =
            table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Name", "status", "age", "privateIP", "publicIP", "failures"]);
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["columnDefinitions"][4]["priority"], 1);
        assert_eq!(table["rows"][0]["cells"], json!(["server-000", "Provisioned", "5m30s", "10.0.0.7", null, 2]));
        assert_eq!(table["rows"][1]["cells"], json!(["bare", null, null, null, null, null]));
        let object = &table["rows"][0]["object"];
        assert_eq!(object["kind"], "PartialObjectMetadata");
        assert_eq!(object["metadata"]["name"], "server-000");
        assert!(object.get("spec").is_none());
    }

    #[test]
    fn include_object_controls_the_row_object() {
        let printer = Printer::for_custom_resource(&server_crd(), "v1alpha1");
        let objects = [server("s", "Errored")];
        let now = at("2024-01-01T00:00:00Z");
        let whole = printer.table(request(IncludeObject::Object), &objects, json!({}), now);
        assert_eq!(whole["rows"][0]["object"], objects[0]);
        let none = printer.table(request(IncludeObject::None), &objects, json!({}), now);
        assert!(none["rows"][0].get("object").is_none());
    }

    #[test]
    fn crd_without_columns_gets_age() {
        let crd = json!({"spec": {"versions": [{"name": "v1"}]}});
        let printer = Printer::for_custom_resource(&crd, "v1");
        let table =
            printer.table(request(IncludeObject::None), &[server("s", "x")], json!({}), at("2024-01-02T12:00:00Z"));
        assert_eq!(table["columnDefinitions"][1]["name"], "Age");
        assert_eq!(table["rows"][0]["cells"], json!(["s", "36h"]));
    }

    #[test]
    fn bad_printer_columns_give_empty_cells_not_errors() {
        let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
            {"jsonPath": ".status[", "name": "broken", "type": "string"},
            {"jsonPath": ".metadata.name", "name": "when", "type": "date"},
            {"jsonPath": ".metadata.name", "name": "n", "type": "integer"},
        ]}]}});
        let printer = Printer::for_custom_resource(&crd, "v1");
        let table =
            printer.table(request(IncludeObject::None), &[server("s", "x")], json!({}), at("2024-01-01T00:00:00Z"));
        assert_eq!(table["rows"][0]["cells"], json!(["s", null, "<invalid>", null]));
    }

    #[test]
    fn event_table_follows_the_built_in_printer() {
        let event = json!({
            "metadata": {"name": "s.1", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "series": {"count": 4, "lastObservedTime": "2024-01-01T00:01:00.000000Z"},
            "type": "Warning",
            "reason": "ProviderCreateFailed",
            "regarding": {"kind": "Server", "name": "server-001"},
            "note": "Provider server create failed after 3 attempts",
            "reportingController": "server-controller",
        });
        let table =
            Printer::events().table(request(IncludeObject::None), &[event], json!({}), at("2024-01-01T00:02:00Z"));
        let visible: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(visible, ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "60s",
                "Warning",
                "ProviderCreateFailed",
                "server/server-001",
                "",
                "server-controller",
                "Provider server create failed after 3 attempts",
                "2m",
                4,
                "s.1"
            ])
        );
    }

    #[test]
    fn lease_table_shows_the_holder() {
        let lease = json!({"metadata": {"name": "l", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": {"holderIdentity": "pod-a"}});
        let table =
            Printer::leases().table(request(IncludeObject::None), &[lease], json!({}), at("2024-01-01T00:00:09Z"));
        assert_eq!(table["rows"][0]["cells"], json!(["l", "pod-a", "9s"]));
    }

    /// GETs `path` from a served SimKube, as kubectl would; HTTP/1.0 so the
    /// body is plain (not chunked) and ends when the server closes.
    async fn http_get_text(sim: &crate::SimKube, path: &str, accept: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let served = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut stream = tokio::net::TcpStream::connect(served.addr()).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nHost: sim\r\nAccept: {accept}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        served.shutdown();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{response}");
        body.to_string()
    }

    async fn http_get(sim: &crate::SimKube, path: &str, accept: &str) -> Value {
        serde_json::from_str(&http_get_text(sim, path, accept).await).unwrap()
    }

    #[tokio::test]
    async fn served_gets_and_lists_answer_with_tables_when_asked() {
        let sim = crate::SimKube::new();
        let mut crd = server_crd();
        crd["metadata"] = json!({"name": "servers.region.unikorn-cloud.org"});
        crd["spec"]["group"] = json!("region.unikorn-cloud.org");
        crd["spec"]["names"] = json!({"kind": "Server", "plural": "servers"});
        crd["spec"]["scope"] = json!("Namespaced");
        crd["spec"]["versions"][0]["served"] = json!(true);
        crd["spec"]["versions"][0]["storage"] = json!(true);
        sim.install_crd(crd).unwrap();
        sim.store().create("servers", server("server-000", "Provisioned")).unwrap();
        let collection = "/apis/region.unikorn-cloud.org/v1alpha1/namespaces/ns/servers";

        let list = http_get(&sim, collection, KUBECTL_ACCEPT).await;
        assert_eq!(list["kind"], "Table");
        assert_eq!(list["columnDefinitions"][1]["name"], "status");
        assert_eq!(list["rows"][0]["cells"][1], "Provisioned");
        assert_eq!(list["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(list["metadata"]["resourceVersion"].is_string());

        let one = http_get(&sim, &format!("{collection}/server-000?includeObject=Object"), KUBECTL_ACCEPT).await;
        assert_eq!(one["rows"].as_array().map(Vec::len), Some(1));
        assert_eq!(one["rows"][0]["object"]["kind"], "Server");
        assert_eq!(one["rows"][0]["object"]["apiVersion"], "region.unikorn-cloud.org/v1alpha1");

        let plain = http_get(&sim, collection, "application/json").await;
        assert_eq!(plain["kind"], "ServerList");

        // kubectl get -w: every event's object is a one-row Table.
        let watched = http_get_text(&sim, &format!("{collection}?watch=true&timeoutSeconds=1"), KUBECTL_ACCEPT).await;
        let event: Value = serde_json::from_str(watched.lines().next().unwrap()).unwrap();
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["kind"], "Table");
        assert_eq!(event["object"]["rows"][0]["cells"][0], "server-000");

        let events = http_get(&sim, "/apis/events.k8s.io/v1/namespaces/ns/events", KUBECTL_ACCEPT).await;
        assert_eq!(events["columnDefinitions"][0]["name"], "Last Seen");
        assert_eq!(events["rows"], json!([]));
    }

    #[test]
    fn human_durations_match_apimachinery() {
        for (seconds, expected) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (49 * 3600, "2d1h"),
            (8 * 86400, "8d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), expected, "{seconds} s");
        }
    }
}
