//! Merge patches of a Server whose answer is read for its metadata alone.
//!
//! kube-apiserver answers a write with the whole object unless the client
//! asks for another representation: with `Accept:
//! application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` it answers
//! the object's metadata (apiserver `handlers/response.go`,
//! `transformResponseObject`, applied to every verb and subresource). A
//! Server's answer otherwise carries its user data (up to 48 KB of base64)
//! that the operator, which only needs the new resourceVersion, would buffer
//! and parse on every status write. The one write whose answer the pass
//! needs whole for its user data ([`patch_server_for_user_data`]) reads
//! only the resourceVersion and the user data of it.

use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::{PartialObjectMeta, Request};
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};

use crate::cached::CachedServer;

/// The representation asked for: the written object's metadata.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Which part of the Server a patch writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource: metadata (and spec, which the operator never writes).
    Main,
    /// The `/status` subresource.
    Status,
}

/// Merge-patches Server `namespace/name` and returns its metadata as written.
pub(crate) async fn patch_server(
    client: &Client,
    namespace: &str,
    name: &str,
    part: Part,
    body: &impl Serialize,
) -> Result<ObjectMeta, kube::Error> {
    let mut request = patch_request(namespace, name, part, body)?;
    request.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
    let written: PartialObjectMeta<CachedServer> = client.request(request).await?;
    Ok(written.metadata)
}

/// What [`patch_server_for_user_data`] reads of the Server as written.
#[derive(Debug, Deserialize)]
pub(crate) struct WrittenUserData {
    pub metadata: WrittenVersion,
    #[serde(default)]
    pub spec: Option<WrittenSpec>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WrittenVersion {
    #[serde(rename = "resourceVersion")]
    pub resource_version: Option<String>,
}

/// The user data as the API server stored it: base64 text (`format:
/// byte`), decoded by the caller, so a landed write whose user data does
/// not decode still yields its resourceVersion.
#[derive(Debug, Deserialize)]
pub(crate) struct WrittenSpec {
    #[serde(rename = "userData", default)]
    pub user_data: Option<String>,
}

/// Merge-patches the main resource of Server `namespace/name` and reads its
/// resourceVersion and user data from the Server as written (the rest of
/// the answer is skipped, not decoded).
pub(crate) async fn patch_server_for_user_data(
    client: &Client,
    namespace: &str,
    name: &str,
    body: &impl Serialize,
) -> Result<WrittenUserData, kube::Error> {
    client.request(patch_request(namespace, name, Part::Main, body)?).await
}

fn patch_request(
    namespace: &str,
    name: &str,
    part: Part,
    body: &impl Serialize,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let request = Request::new(CachedServer::url_path(&(), Some(namespace)));
    let (params, patch) = (PatchParams::default(), Patch::Merge(body));
    match part {
        Part::Main => request.patch(name, &params, &patch),
        Part::Status => request.patch_subresource("status", name, &params, &patch),
    }
    .map_err(kube::Error::BuildRequest)
}
