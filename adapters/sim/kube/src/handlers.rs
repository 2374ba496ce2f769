//! HTTP handlers: request parsing, counters and faults, then the store.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use super::discovery;
use super::event_view;
use super::openapi;
use super::paging;
use super::patch::{Patch, PatchKind};
use super::representation;
use super::resource::ResourceType;
use super::router::{self, ApiPath, ResourcePath};
use super::schema::FieldValidation;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Subject};
use super::store::{Commit, ListQuery, Preconditions, Target, TypeKey, Write};
use super::table::{Printer, TableRequest, WatchPrinting};
use super::verb::Verb;
use super::watch::{self, WatchContext, WatchRequest};

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Label under which discovery requests are counted.
const DISCOVERY: &str = "discovery";

type Query = BTreeMap<String, String>;

/// Entry point for every request.
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let response = match dispatch(&shared, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    shared.counters.record_response(response.status().as_u16());
    response
}

async fn dispatch(shared: &Shared, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let query: Query =
        parts.uri.query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    let api_path = router::parse(&path).ok_or_else(|| ApiError::unknown_path(&path))?;

    let (group, version, rest) = match api_path {
        ApiPath::Resource { group, version, rest } => (group, version, rest),
        discovery_path => {
            if parts.method != Method::GET {
                return Err(ApiError::method_not_allowed(format!("{} is not supported on {path}", parts.method)));
            }
            shared.counters.record_request(Verb::Get, DISCOVERY);
            return discover(shared, &discovery_path, &parts.headers);
        }
    };

    let resource_path = {
        let store = shared.store.lock();
        router::resolve(|plural| store.lookup(group, plural), &path, version, &rest)?
    };
    let verb = verb_of(&parts.method, &resource_path, &query)?;
    let label = resource_path.label();
    shared.counters.record_request(verb, &label);

    let fault = shared.faults.for_request(verb, &label);
    if !fault.latency.is_zero() {
        tokio::time::sleep(fault.latency).await;
    }
    if let Some(kind) = fault.error {
        shared.counters.record_fault(verb, &label);
        if verb == Verb::Watch && kind == super::faults::FaultKind::Gone {
            return Ok(streaming(watch::gone_body(&shared.counters, "too old resource version (injected fault)")));
        }
        let rtype = &resource_path.rtype;
        let name = resource_path.name.as_deref().unwrap_or_default();
        return Err(kind.to_error(Subject::new(&rtype.group, &rtype.plural, name)));
    }

    let commit = match query.get("dryRun").map(String::as_str) {
        None | Some("") => Commit::Persist,
        Some("All") => Commit::DryRun,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let fields = FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?;
    if matches!(verb, Verb::Create | Verb::Update) {
        require_json_body(&parts.headers)?;
    }
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| ApiError::bad_request(format!("unable to read the request body: {e}")))?;
    shared.counters.record_body(verb, &label, body.len());
    let accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    // core/v1 Events are the events.k8s.io ones, shown in the core shape.
    let core_events = event_view::is_core_events(&resource_path.rtype);
    let key = if core_events {
        event_view::storage_key()
    } else {
        (resource_path.rtype.group.clone(), resource_path.rtype.plural.clone())
    };
    let operation = Operation {
        shared,
        key,
        core_events,
        write: std::cell::RefCell::new(Write {
            commit,
            fields: Some(fields),
            require_resource_version: false,
            warnings: Vec::new(),
            no_op: false,
        }),
        path: &resource_path,
        query: &query,
        table: TableRequest::negotiate(accept, query.get("includeObject").map(String::as_str))?,
        metadata_only: representation::metadata_only(accept),
    };
    let result = match verb {
        Verb::Get => operation.get(),
        Verb::List => operation.list(),
        Verb::Watch => operation.watch(),
        Verb::Create => operation.create(&body),
        Verb::Update => operation.update(&body),
        Verb::Patch => operation.patch(&parts.headers, &body),
        Verb::Delete => operation.delete(&body),
        Verb::DeleteCollection => operation.delete_collection(),
    };
    let code = match &result {
        Ok(response) => response.status().as_u16(),
        Err(error) => error.code,
    };
    shared.counters.record_answer(verb, &label, code, body.len());
    if operation.write.borrow().no_op {
        shared.counters.record_no_op(verb, &label);
    }
    let mut response = result?;
    for warning in &operation.write.borrow().warnings {
        // RFC 7234 warn-code 299, as the API server sends admission and validation warnings.
        let text = format!("299 - {}", serde_json::Value::String(warning.clone()));
        if let Ok(value) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    Ok(response)
}

fn discover(shared: &Shared, path: &ApiPath<'_>, headers: &HeaderMap) -> Result<Response, ApiError> {
    let aggregated = discovery::wants_aggregated(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let store = shared.store.lock();
    let types: Vec<&ResourceType> = store.types().collect();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (document, aggregated) = match path {
        ApiPath::OpenApiV2 if !openapi::accepts_json(accept) => {
            return Err(ApiError::not_acceptable(
                "SimKube serves /openapi/v2 as application/json only, not as protobuf",
            ));
        }
        ApiPath::OpenApiV2 => (openapi::v2(&store), false),
        ApiPath::OpenApiV3Root => (openapi::v3_root(&store), false),
        ApiPath::OpenApiV3 { group, version } => (openapi::v3_group_version(&store, group, version)?, false),
        ApiPath::Version => (discovery::version(), false),
        ApiPath::CoreVersions => (discovery::core_versions(&types, aggregated), aggregated),
        ApiPath::Groups => (discovery::group_list(&types, aggregated), aggregated),
        ApiPath::Group(group) => (discovery::group(&types, group)?, false),
        ApiPath::ResourceList { group, version } => (discovery::resource_list(&types, group, version)?, false),
        ApiPath::Resource { .. } => return Err(ApiError::unknown_path("resource")),
    };
    let mut response = json_response(StatusCode::OK, &document);
    if aggregated {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE));
    }
    Ok(response)
}

fn verb_of(method: &Method, path: &ResourcePath, query: &Query) -> Result<Verb, ApiError> {
    let named = path.name.is_some();
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.as_str(), named) {
        ("GET", true) => Verb::Get,
        ("GET", false) if watching => Verb::Watch,
        ("GET", false) => Verb::List,
        ("POST", false) if path.rtype.namespaced == path.namespace.is_some() && !path.status => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) if !path.status => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => {
            return Err(ApiError::method_not_allowed(format!("{method} is not supported on this path")));
        }
    };
    Ok(verb)
}

/// One resource request, after faults.
struct Operation<'a> {
    shared: &'a Shared,
    /// Where the objects are stored.
    key: TypeKey,
    /// The core/v1 view of the events.k8s.io Events.
    core_events: bool,
    /// Dry run, field validation, and the warnings the write collects.
    write: std::cell::RefCell<Write>,
    path: &'a ResourcePath,
    query: &'a Query,
    /// Set when the client asked for server-side printing (kubectl get).
    table: Option<TableRequest>,
    /// The `apiVersion` of the PartialObjectMetadata the client asked for
    /// instead of whole objects.
    metadata_only: Option<&'static str>,
}

impl Operation<'_> {
    fn namespace(&self) -> Option<&str> {
        self.path.namespace.as_deref()
    }

    fn name(&self) -> &str {
        self.path.name.as_deref().unwrap_or_default()
    }

    fn target(&self) -> Target {
        if self.path.status { Target::Status } else { Target::Main }
    }

    /// An object as served at the requested version: the stored one itself
    /// when it already reads so (a shared object with a finalizer per Server
    /// is thousands of strings, not copied to be written out).
    fn present<'a>(&self, object: &'a Value) -> Cow<'a, Value> {
        let api_version = self.path.rtype.api_version(&self.path.version);
        if !self.core_events && object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str()) {
            return Cow::Borrowed(object);
        }
        let mut object = if self.core_events { event_view::to_core(object) } else { object.clone() };
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(api_version));
        }
        Cow::Owned(object)
    }

    /// One object's answer, whole or as the representation asked for.
    fn object_response(&self, code: StatusCode, object: &Value) -> Response {
        match self.metadata_only {
            Some(api_version) => json_response(code, &representation::partial_metadata(object, api_version)),
            None => json_response(code, &self.present(object)),
        }
    }

    fn list_response(&self, items: &[Arc<Value>], resource_version: u64, continue_token: Option<String>) -> Response {
        let mut metadata = json!({"resourceVersion": resource_version.to_string()});
        if let Some(token) = continue_token {
            metadata["continue"] = Value::String(token);
        }
        if let Some(api_version) = self.metadata_only {
            let items: Vec<Value> = items.iter().map(|o| representation::partial_metadata(o, api_version)).collect();
            let list = json!({ "kind": representation::PARTIAL_METADATA_LIST_KIND, "apiVersion": api_version, "metadata": metadata, "items": items });
            return json_response(StatusCode::OK, &list);
        }
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct List<'a> {
            api_version: String,
            kind: &'a str,
            metadata: Value,
            items: Vec<Cow<'a, Value>>,
        }
        json_response(
            StatusCode::OK,
            &List {
                api_version: self.path.rtype.api_version(&self.path.version),
                kind: &self.path.rtype.list_kind,
                metadata,
                items: items.iter().map(|o| self.present(o)).collect(),
            },
        )
    }

    fn list_query(&self) -> Result<ListQuery, ApiError> {
        let limit = match self.query.get("limit").filter(|l| !l.is_empty()) {
            Some(limit) => {
                Some(limit.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit: {limit:?}")))?)
            }
            None => None,
        };
        Ok(ListQuery {
            labels: self.labels()?,
            fields: self.fields()?,
            limit,
            continue_token: self.query.get("continue").filter(|c| !c.is_empty()).cloned(),
        })
    }

    fn labels(&self) -> Result<LabelSelector, ApiError> {
        LabelSelector::parse(self.query.get("labelSelector").map_or("", String::as_str))
    }

    fn fields(&self) -> Result<FieldSelector, ApiError> {
        let selector = FieldSelector::parse(self.query.get("fieldSelector").map_or("", String::as_str))?;
        Ok(if self.core_events { selector.map_paths(event_view::stored_field) } else { selector })
    }

    /// A request body as stored.
    fn stored(&self, object: Value) -> Value {
        if self.core_events { event_view::from_core(&object) } else { object }
    }

    fn get(&self) -> Result<Response, ApiError> {
        let object = self.shared.store.lock().get(&self.key, self.namespace(), self.name())?;
        if let Some(request) = self.table {
            let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
            return Ok(self.table_response(request, &[object], metadata));
        }
        Ok(self.object_response(StatusCode::OK, &object))
    }

    fn list(&self) -> Result<Response, ApiError> {
        let query = self.list_query()?;
        let listed = self.shared.store.lock().list(&self.key, self.namespace(), &query);
        let page = match (listed, query.continue_token.as_deref()) {
            (Ok(page), _) => page,
            (Err(expired), Some(token)) if expired.code == 410 => return Ok(paging::expired(&expired, token)),
            (Err(error), _) => return Err(error),
        };
        if let Some(request) = self.table {
            let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
            if let Some(token) = page.continue_token {
                metadata["continue"] = Value::String(token);
            }
            return Ok(self.table_response(request, &page.items, metadata));
        }
        Ok(self.list_response(&page.items, page.resource_version, page.continue_token))
    }

    fn table_response(&self, request: TableRequest, items: &[Arc<Value>], metadata: Value) -> Response {
        let (printer, now) = {
            let store = self.shared.store.lock();
            (Printer::for_type(&store, &self.path.rtype, &self.path.version), store.now())
        };
        let objects: Vec<Value> = items.iter().map(|o| self.present(o).into_owned()).collect();
        json_response(StatusCode::OK, &printer.table(request, &objects, metadata, now))
    }

    fn watch(&self) -> Result<Response, ApiError> {
        if self.metadata_only.is_some() {
            // Refused rather than answered whole: a client asking for
            // metadata must not get objects it did not expect.
            return Err(ApiError::not_acceptable("SimKube serves watches of whole objects only"));
        }
        let resource_version = match self.query.get("resourceVersion").map(String::as_str) {
            None | Some("" | "0") => None,
            Some(rv) => Some(
                rv.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
            ),
        };
        let timeout = match self.query.get("timeoutSeconds") {
            Some(seconds) => Duration::from_secs(
                seconds
                    .parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {seconds:?}")))?,
            ),
            None => watch::DEFAULT_WATCH_TIMEOUT,
        };
        let flag = |name: &str| self.query.get(name).is_some_and(|value| value == "true" || value == "1");
        let request = WatchRequest {
            key: self.key.clone(),
            core_events: self.core_events,
            rtype: self.path.rtype.clone(),
            version: self.path.version.clone(),
            namespace: self.path.namespace.clone(),
            labels: self.labels()?,
            fields: self.fields()?,
            resource_version,
            send_initial_events: flag("sendInitialEvents"),
            bookmarks: flag("allowWatchBookmarks"),
            timeout,
            resource_label: self.path.label(),
            table: self.table.map(|request| WatchPrinting {
                printer: Printer::for_type(&self.shared.store.lock(), &self.path.rtype, &self.path.version),
                request,
            }),
        };
        let context = WatchContext {
            store: self.shared.store.clone(),
            faults: self.shared.faults.clone(),
            counters: self.shared.counters.clone(),
            bookmark_interval: self.shared.bookmark_interval,
        };
        Ok(streaming(watch::watch_body(context, request)))
    }

    fn create(&self, body: &[u8]) -> Result<Response, ApiError> {
        let object = self.stored(parse_json(body)?);
        let created =
            self.shared.store.lock().create(&self.key, self.namespace(), object, &mut self.write.borrow_mut())?;
        Ok(self.object_response(StatusCode::CREATED, &created))
    }

    fn update(&self, body: &[u8]) -> Result<Response, ApiError> {
        let object = self.stored(parse_json(body)?);
        self.write.borrow_mut().require_resource_version = true;
        let updated = self.shared.store.lock().update(
            &self.key,
            self.namespace(),
            self.name(),
            object,
            self.target(),
            &mut self.write.borrow_mut(),
        )?;
        Ok(self.object_response(StatusCode::OK, &updated))
    }

    fn patch(&self, headers: &HeaderMap, body: &[u8]) -> Result<Response, ApiError> {
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let kind = PatchKind::from_content_type(content_type)?;
        if kind == PatchKind::Apply && self.query.get("fieldManager").is_none_or(String::is_empty) {
            return Err(ApiError::bad_request("fieldManager: Required value: is required for apply patch"));
        }
        let patch = Patch::parse(kind, body)?;
        let mut write = self.write.borrow_mut();
        let mut store = self.shared.store.lock();
        let (object, created) = if self.core_events {
            // The patch applies to the object as this view shows it.
            let shown = self.present(&*store.get(&self.key, self.namespace(), self.name())?).into_owned();
            let candidate = self.stored(patch.apply_to(&shown)?);
            (store.update(&self.key, self.namespace(), self.name(), candidate, self.target(), &mut write)?, false)
        } else {
            store.patch(&self.key, self.namespace(), self.name(), &patch, self.target(), &mut write)?
        };
        drop(store);
        let code = if created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(self.object_response(code, &object))
    }

    fn delete(&self, body: &[u8]) -> Result<Response, ApiError> {
        let options = if body.iter().all(u8::is_ascii_whitespace) { Value::Null } else { parse_json(body)? };
        let text = |pointer: &str| {
            options.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
        };
        let preconditions =
            Preconditions { uid: text("/preconditions/uid"), resource_version: text("/preconditions/resourceVersion") };
        let object = self.shared.store.lock().delete(
            &self.key,
            self.namespace(),
            self.name(),
            &preconditions,
            &mut self.write.borrow_mut(),
        )?;
        Ok(self.object_response(StatusCode::OK, &object))
    }

    fn delete_collection(&self) -> Result<Response, ApiError> {
        let query = self.list_query()?;
        let mut store = self.shared.store.lock();
        let deleted = if self.write.borrow().commit == Commit::DryRun {
            let query = ListQuery { limit: None, continue_token: None, ..query };
            store.list(&self.key, self.namespace(), &query)?.items
        } else {
            store.delete_collection(&self.key, self.namespace(), &query)?
        };
        let resource_version = store.resource_version();
        drop(store);
        Ok(self.list_response(&deleted, resource_version, None))
    }
}

/// Create and update bodies must be JSON: SimKube decodes no protobuf, which
/// kubectl's typed commands (`kubectl create namespace`) send; `kubectl apply`
/// sends JSON.
fn require_json_body(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if media.is_empty() || media == "application/json" { Ok(()) } else { Err(ApiError::unsupported_body(content_type)) }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn json_response(code: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(error) => ApiError::internal(error.to_string()).into_response(),
    }
}

fn streaming(body: Body) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
