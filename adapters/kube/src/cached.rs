//! The Server as the operator's watch caches it.
//!
//! Two jobs. Memory: the cache holds what passes, the wake rule and the
//! monitor read, not the managed fields, the `last-applied-configuration`
//! annotation (a second copy of the spec) or the user data (kept, within a
//! budget, for a Server that awaits a create; else read live when a pass is
//! about to create the provider server). Robustness: a
//! Server this controller cannot read (a condition status "Maybe", a phase
//! it does not know: the CRD does not restrict them) still decodes, as its
//! metadata and where decoding failed, so one such object is reported on
//! itself and never fails the list of every Server.

use std::borrow::Cow;

use kube::Resource;
use kube::api::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use server_core::WakeSignals;
use server_core::model::UserData;
use server_core::model::{self as core_model};

use crate::compact_map::CompactMap;
use crate::crd::{Server, ServerResourceSpec, ServerStatus};
use crate::held_user_data::HeldUserData;

/// Written by `kubectl apply`: the whole applied object, user data included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A cached Server: its metadata, and its spec and status or why they could
/// not be read. Its labels and annotations are kept compact beside the
/// metadata, whose own maps are left empty: read them with
/// [`CachedServer::label`] and [`CachedServer::annotations`].
#[derive(Clone, Debug, PartialEq)]
pub struct CachedServer {
    pub metadata: ObjectMeta,
    labels: CompactMap,
    annotations: CompactMap,
    pub content: Result<ServerContent, Malformed>,
}

/// Spec (without user data) and status of a readable Server.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerContent {
    pub spec: ServerResourceSpec,
    pub status: Option<ServerStatus>,
    /// Whether the Server has user data, left out of the cache.
    pub has_user_data: bool,
    /// About how many bytes its user data holds decoded (0 without): what a
    /// create of it will carry (`slots::PassSlots`' budget).
    pub user_data_bytes: usize,
    /// Its user data, kept for its next create while the budget has room
    /// (`held_user_data`); else a pass that creates reads it live.
    pub held_user_data: Option<HeldUserData>,
    /// Paths of stored values read as something else
    /// (`server_core::model::read_condition_statuses`): the Server is
    /// managed, and what could not be read is said once.
    pub unread: Vec<String>,
}

/// Where a Server's content failed to decode: a JSON path, never a value
/// (a value could be user data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub path: String,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} holds a value this controller does not understand", self.path)
    }
}

#[derive(Deserialize)]
struct Content {
    spec: ServerResourceSpec,
    #[serde(default)]
    status: Option<ServerStatus>,
}

impl CachedServer {
    /// The cached form of a Server: metadata trimmed, user data left out.
    pub fn new(server: Server) -> Self {
        let Server { mut metadata, mut spec, status } = server;
        let maps = trim(&mut metadata);
        let user_data = spec.spec.user_data.take();
        let has_user_data = user_data.is_some();
        let user_data_bytes = user_data.as_ref().map_or(0, |data| data.0.len());
        let held_user_data = held_for_create(status.as_ref(), || user_data);
        let content =
            ServerContent { spec, status, has_user_data, user_data_bytes, held_user_data, unread: Vec::new() };
        CachedServer::assemble(metadata, maps, Ok(content))
    }

    fn assemble(
        metadata: ObjectMeta,
        maps: Result<(CompactMap, CompactMap), Malformed>,
        content: Result<ServerContent, Malformed>,
    ) -> Self {
        match maps {
            Ok((labels, annotations)) => CachedServer { metadata, labels, annotations, content },
            Err(malformed) => CachedServer {
                metadata,
                labels: CompactMap::default(),
                annotations: CompactMap::default(),
                content: Err(malformed),
            },
        }
    }

    /// A label's value; an empty value is none.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).filter(|value| !value.is_empty())
    }

    pub fn annotations(&self) -> &CompactMap {
        &self.annotations
    }

    /// The Server as the core sees it (without user data), if readable.
    pub fn core(&self) -> Option<core_model::Server> {
        let content = self.content.as_ref().ok()?;
        Some(core_model::Server {
            meta: self.core_meta(),
            spec: content.spec.spec.clone(),
            status: content.status.clone().unwrap_or_default(),
        })
    }

    /// The core view of its metadata alone (and its status where readable),
    /// for a Server whose content cannot be read.
    pub fn meta_only(&self) -> core_model::Server {
        let status = self.content.as_ref().ok().and_then(|content| content.status.clone()).unwrap_or_default();
        core_model::Server { meta: self.core_meta(), spec: Default::default(), status }
    }

    fn core_meta(&self) -> core_model::ObjectMeta {
        core_model::ObjectMeta {
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            ..crate::convert::core_meta(&self.metadata)
        }
    }

    /// What the wake rule reads: the signals of the core view (its spec is
    /// not read), or for a Server that cannot be read, of its metadata alone
    /// (creation, generation and deletion still wake).
    pub fn wake_signals(&self) -> WakeSignals {
        WakeSignals::of(&self.meta_only())
    }
}

/// The user data of a Server that awaits a retry's create, held within the
/// budget; none for any other Server (a first create takes it from the
/// answer to its note's write).
fn held_for_create(status: Option<&ServerStatus>, data: impl FnOnce() -> Option<UserData>) -> Option<HeldUserData> {
    let awaits = status.is_some_and(server_core::awaits_retry_create);
    awaits.then(data).flatten().and_then(HeldUserData::hold)
}

/// Drops what nothing reads and what repeats the spec, and takes out the
/// labels and annotations, compact; a map too large for that is reported
/// as the Server's content (the API server admits none).
fn trim(metadata: &mut ObjectMeta) -> Result<(CompactMap, CompactMap), Malformed> {
    metadata.managed_fields = None;
    let mut annotations = metadata.annotations.take().unwrap_or_default();
    annotations.remove(LAST_APPLIED);
    let compact = |map: Option<_>, path: &str| {
        CompactMap::new(map.unwrap_or_default()).ok_or_else(|| Malformed { path: path.to_owned() })
    };
    Ok((compact(metadata.labels.take(), "metadata.labels")?, compact(Some(annotations), "metadata.annotations")?))
}

/// The spec and status of a Server as read off the wire, the user data
/// left out unread.
struct Parts<'de> {
    metadata: Value,
    content: serde_json::Map<String, Value>,
    user_data: Option<UserDataField<'de>>,
}

/// The top-level fields of a Server. A watch event carries the user data
/// (up to 48 KB of base64) in every change of every Server; decoding it to
/// drop it again was a large share of the operator's allocations and CPU,
/// so the spec's `userData` is kept as text (borrowed from the input where
/// the deserializer allows, never copied) and decoded only for a Server
/// that awaits a retry's create (`held_user_data`). Its base64 is checked
/// by the API server (the CRD's `format: byte`); a pass that creates any
/// other Server reads it live.
impl<'de> Deserialize<'de> for Parts<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Parts<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Server object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
                let mut parts = Parts { metadata: Value::Null, content: serde_json::Map::new(), user_data: None };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" => parts.metadata = map.next_value()?,
                        "spec" => {
                            let spec: Spec<'de> = map.next_value()?;
                            parts.user_data = spec.user_data;
                            parts.content.insert(key, spec.fields);
                        }
                        "status" => {
                            let status: Value = map.next_value()?;
                            parts.content.insert(key, status);
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(parts)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// A Server's spec without its user data: the other fields as read, and
/// the user data's text, if any.
struct Spec<'de> {
    fields: Value,
    user_data: Option<UserDataField<'de>>,
}

/// The spec's `userData` as read: its base64 text, or a value of another
/// type (the API server admits none; a pass reading it live reports it).
enum UserDataField<'de> {
    Text(Cow<'de, str>),
    Odd,
}

impl Spec<'_> {
    const NOT_AN_OBJECT: Spec<'static> = Spec { fields: Value::Null, user_data: None };
}

/// `userData`'s value: `None` for null, its text, or odd for any other type.
struct UserDataValue<'de>(Option<UserDataField<'de>>);

impl<'de> Deserialize<'de> for UserDataValue<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = UserDataValue<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("base64 text")
            }

            fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Text(Cow::Borrowed(text)))))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Text(Cow::Owned(text.to_owned())))))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Text(Cow::Owned(text)))))
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(UserDataValue(None))
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(UserDataValue(Some(UserDataField::Odd)))
            }
        }
        deserializer.deserialize_any(Text)
    }
}

impl<'de> Deserialize<'de> for Spec<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Spec<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Server spec object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spec<'de>, A::Error> {
                let mut fields = serde_json::Map::new();
                let mut user_data = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == USER_DATA {
                        user_data = map.next_value::<UserDataValue<'de>>()?.0;
                    } else {
                        let value: Value = map.next_value()?;
                        fields.insert(key, value);
                    }
                }
                Ok(Spec { fields: Value::Object(fields), user_data })
            }

            // Not an object: the content decode reports the path `spec`.
            fn visit_unit<E: serde::de::Error>(self) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Spec<'de>, E> {
                Ok(Spec::NOT_AN_OBJECT)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Spec<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Spec::NOT_AN_OBJECT)
            }
        }
        deserializer.deserialize_any(Fields)
    }
}

/// The spec's user data field on the wire.
const USER_DATA: &str = "userData";

impl<'de> Deserialize<'de> for CachedServer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Parts { metadata, content, user_data } = Parts::deserialize(deserializer)?;
        let has_user_data = user_data.is_some();
        // Base64: three bytes for every four characters.
        let user_data_bytes = match &user_data {
            Some(UserDataField::Text(text)) => text.len() / 4 * 3,
            _ => 0,
        };
        // The API server validates metadata: one that does not decode is no
        // Server at all. The message names the path only.
        let mut metadata: ObjectMeta = serde_path_to_error::deserialize(metadata)
            .map_err(|e| D::Error::custom(format!("Server metadata: {} does not decode", e.path())))?;
        let maps = trim(&mut metadata);
        let mut content = Value::Object(content);
        let unread = content.get_mut("status").map(core_model::read_condition_statuses).unwrap_or_default();
        let content = match serde_path_to_error::deserialize::<_, Content>(content) {
            Ok(Content { spec, status }) => {
                let held_user_data = held_for_create(status.as_ref(), || match user_data? {
                    UserDataField::Text(text) => {
                        serde_json::from_value::<UserData>(Value::String(text.into_owned())).ok()
                    }
                    UserDataField::Odd => None,
                });
                Ok(ServerContent { spec, status, has_user_data, user_data_bytes, held_user_data, unread })
            }
            Err(error) => Err(Malformed { path: error.path().to_string() }),
        };
        Ok(CachedServer::assemble(metadata, maps, content))
    }
}

impl Resource for CachedServer {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Server::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Server::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Server::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Server::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decode(value: Value) -> CachedServer {
        serde_json::from_value(value).expect("every Server with metadata decodes")
    }

    #[test]
    fn unknown_status_values_are_reported_by_path_and_never_quoted() {
        let cached = decode(json!({
            "metadata": { "name": "odd", "namespace": "ns", "uid": "u1", "generation": 2 },
            "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": "c2VjcmV0LW1hcmtlcg==" },
            "status": { "phase": "Hibernating", "conditions": [{
                "type": "Healthy", "status": "Maybe", "reason": "Errored",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        }));
        let malformed = cached.content.as_ref().expect_err("not readable");
        assert!(malformed.path.starts_with("status."), "{malformed:?}");
        assert!(!malformed.to_string().contains("Maybe") && !malformed.to_string().contains("Hibernating"));
        let mut respec = cached.clone();
        respec.metadata.generation = Some(3);
        assert!(server_core::wakes(Some(&cached.wake_signals()), &respec.wake_signals()), "generation still wakes");
        assert!(cached.core().is_none());
    }

    #[test]
    fn a_condition_status_of_maybe_reads_as_unknown_and_the_server_is_managed() {
        let cached = decode(json!({
            "metadata": { "name": "maybe", "namespace": "ns", "uid": "u1", "generation": 2 },
            "spec": { "flavorID": "f", "image": { "id": "i" } },
            "status": { "phase": "Running", "conditions": [{
                "type": "Healthy", "status": "Maybe", "reason": "Healthy",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        }));
        let content = cached.content.as_ref().expect("readable: only a condition status is unknown");
        assert_eq!(content.unread, vec!["status.conditions[0].status".to_owned()]);
        let server = cached.core().expect("the core manages it");
        let healthy = core_model::find_condition(&server.status.conditions, core_model::ConditionType::Healthy);
        assert_eq!(healthy.map(|c| c.status), Some(core_model::ConditionStatus::Unknown));
        assert_eq!(server.status.phase, Some(core_model::Phase::Running));
    }

    #[test]
    fn the_cache_keeps_neither_user_data_nor_managed_fields_nor_the_applied_copy() {
        let cached = decode(json!({
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u1",
                "annotations": { LAST_APPLIED: "{\"spec\":{\"userData\":\"...\"}}", "keep": "me" },
                "managedFields": [{ "manager": "kubectl", "operation": "Apply" }],
            },
            "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": "c2VjcmV0" },
        }));
        let content = cached.content.as_ref().expect("readable");
        assert!(content.has_user_data && content.spec.spec.user_data.is_none());
        assert!(cached.metadata.managed_fields.is_none());
        let annotations = cached.annotations().iter().collect::<Vec<_>>();
        assert_eq!(annotations, [("keep", "me")]);
        assert!(cached.metadata.annotations.is_none(), "kept compact, beside the metadata");
    }

    #[test]
    fn user_data_is_left_out_of_the_spec_and_a_spec_of_any_shape_is_reported_not_fatal() {
        let meta = json!({ "name": "s", "namespace": "ns", "uid": "u1" });
        let with = |spec: Value| decode(json!({ "metadata": meta.clone(), "spec": spec }));
        let null = with(json!({ "flavorID": "f", "image": { "id": "i" }, "userData": null }));
        assert!(!null.content.as_ref().is_ok_and(|c| c.has_user_data), "null is no user data");
        let absent = with(json!({ "flavorID": "f", "image": { "id": "i" } }));
        assert!(!absent.content.as_ref().is_ok_and(|c| c.has_user_data));
        let present = with(json!({ "flavorID": "f", "image": { "id": "i" }, "userData": "I2Nsb3VkLWNvbmZpZwo=" }));
        assert!(present.content.as_ref().is_ok_and(|c| c.has_user_data && c.spec.spec.user_data.is_none()));
        for odd in [json!("text"), json!(7), json!([1, { "a": 2 }]), json!(true), json!(null), json!(1.5)] {
            let cached = with(odd.clone());
            assert_eq!(cached.content.as_ref().map_err(|m| m.path.as_str()), Err("spec"), "{odd}");
            assert_eq!(cached.metadata.name.as_deref(), Some("s"));
        }
        let text = r#"{"metadata":{"name":"s"},"kind":"Server","spec":{"flavorID":"f","image":{"id":"i"},"userData":"eA=="},"status":{}}"#;
        let cached: CachedServer = serde_json::from_str(text).expect("decodes from text too");
        assert!(cached.content.as_ref().is_ok_and(|c| c.has_user_data));
    }

    /// From text (a watch line, an answer) the user data is borrowed, or
    /// copied when escaped; either way a retry's create holds it decoded.
    #[test]
    fn user_data_text_read_from_the_wire_is_held_for_a_retry_however_it_is_escaped() {
        let retrying = r#""status": { "providerCreateRetrying": true, "providerCreateFailures": 1, "conditions": [{
            "type": "Available", "status": "False", "reason": "Provisioning",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" }] }"#;
        for text in ["I2Nsb3VkLWNvbmZpZwo=", "I2Nsb3VkLWNvbmZpZwo\\u003d"] {
            let wire = format!(
                r#"{{ "metadata": {{ "name": "s", "namespace": "ns", "uid": "u1" }},
                    "spec": {{ "flavorID": "f", "image": {{ "id": "i" }}, "userData": "{text}" }}, {retrying} }}"#
            );
            let cached: CachedServer = serde_json::from_str(&wire).expect("decodes");
            let content = cached.content.expect("readable");
            assert!(content.has_user_data);
            assert_eq!(
                content.held_user_data.map(|held| held.user_data()),
                Some(UserData(b"#cloud-config\n".to_vec()))
            );
        }
    }

    #[test]
    fn only_a_server_awaiting_a_retrys_create_holds_its_user_data() {
        let meta = json!({ "name": "s", "namespace": "ns", "uid": "u1" });
        let spec = json!({ "flavorID": "f", "image": { "id": "i" }, "userData": "I2Nsb3VkLWNvbmZpZwo=" });
        let held = |status: Value| {
            let cached = decode(json!({ "metadata": meta.clone(), "spec": spec.clone(), "status": status }));
            cached.content.expect("readable").held_user_data.map(|held| held.user_data())
        };
        assert_eq!(held(Value::Null), None, "a first create takes it from its note's answer");
        assert_eq!(held(json!({ "phase": "Pending" })), None);
        let created = json!({ "conditions": [{
            "type": "Available", "status": "False", "reason": "Provisioning",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]});
        assert_eq!(held(created.clone()), None, "a create was sent and stands");
        let mut retrying = created.clone();
        retrying["providerCreateRetrying"] = json!(true);
        retrying["providerCreateFailures"] = json!(1);
        assert_eq!(held(retrying.clone()), Some(UserData(b"#cloud-config\n".to_vec())), "a retry's create is next");
        retrying["provisionedAt"] = json!("2026-01-01T00:01:00Z");
        assert_eq!(held(retrying), None, "a server that booted is never created again");
        let odd = decode(
            json!({ "metadata": meta.clone(), "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": 7 } }),
        );
        let content = odd.content.expect("an odd user data value is no reason to drop the Server");
        assert!(content.has_user_data && content.held_user_data.is_none());
        let bad =
            decode(json!({ "metadata": meta, "spec": { "flavorID": "f", "image": { "id": "i" }, "userData": "%%%" } }));
        let content = bad.content.expect("readable");
        assert!(content.has_user_data && content.held_user_data.is_none(), "not base64: read live, reported there");
    }

    #[test]
    fn a_list_with_one_unreadable_server_still_decodes() {
        let list = json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1", "kind": "ServerList",
            "metadata": { "resourceVersion": "5" },
            "items": [
                { "metadata": { "name": "a", "namespace": "ns" }, "spec": { "flavorID": "f", "image": { "id": "i" } } },
                { "metadata": { "name": "b", "namespace": "ns" }, "spec": { "flavorID": 7 } },
            ],
        });
        let list: kube::api::ObjectList<CachedServer> = serde_json::from_value(list).expect("the list decodes");
        assert!(list.items[0].content.is_ok());
        // The spec is flattened into server-core's: serde reports the path up to it.
        assert_eq!(list.items[1].content.as_ref().map_err(|m| m.path.as_str()), Err("spec"));
    }
}
