//! Merge patches of a Server whose answer is read for its metadata alone.
//!
//! kube-apiserver answers a write with the whole object unless the client
//! asks for another representation: with `Accept:
//! application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` it answers
//! the object's metadata (apiserver `handlers/response.go`,
//! `transformResponseObject`, applied to every verb and subresource). A
//! Server's answer otherwise carries its user data (up to 48 KB of base64)
//! that the operator, which only needs the new resourceVersion, would buffer
//! and parse on every status write.

use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::{PartialObjectMeta, Request};
use kube::{Client, Resource};
use serde::Serialize;

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
    let request = Request::new(CachedServer::url_path(&(), Some(namespace)));
    let (params, patch) = (PatchParams::default(), Patch::Merge(body));
    let mut request = match part {
        Part::Main => request.patch(name, &params, &patch),
        Part::Status => request.patch_subresource("status", name, &params, &patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
    let written: PartialObjectMeta<CachedServer> = client.request(request).await?;
    Ok(written.metadata)
}
