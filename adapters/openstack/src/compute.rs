//! Nova calls (compute API v2.1 at microversion [`NOVA_MICROVERSION`](crate::client::NOVA_MICROVERSION)).

use http::Method;
use jiff::Timestamp;
use serde::Deserialize;
use server_core::port::{CloudError, LIST_PAGE_ATTEMPTS};
use tracing::debug;

use crate::client::{Call, Service, Session};
use crate::mapping::NovaServer;

/// The Nova microversion every call asks for, as the Go controller pins it:
/// the server record shapes are those of the `v2.90_` samples, and a Nova
/// cell that does not answer shows its servers as down-cell records
/// (status UNKNOWN, no metadata; since 2.69) instead of failing the list.
use crate::http::segment;

/// A runaway pagination (a marker that does not advance) stops here.
const MAX_PAGES: usize = 1_000;

#[derive(Deserialize)]
pub(crate) struct ServerList {
    pub(crate) servers: Vec<NovaServer>,
    #[serde(default)]
    pub(crate) servers_links: Vec<Link>,
}

/// What a whole list said besides its servers.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ListAnswered {
    /// Nova's clock when it answered the first page (its `Date`).
    pub(crate) first_page_date: Option<Timestamp>,
}

#[derive(Deserialize)]
pub(crate) struct Link {
    pub(crate) rel: String,
}

#[derive(Deserialize)]
pub(crate) struct ServerEnvelope {
    pub(crate) server: NovaServer,
}

#[derive(Deserialize)]
pub(crate) struct CreatedEnvelope {
    pub(crate) server: Created,
}

#[derive(Deserialize)]
pub(crate) struct Created {
    pub(crate) id: String,
}

/// Every server of the token's project, with details, following Nova's
/// pagination (a `next` link means "ask again after the last id"), handed
/// to `on_page` page by page and kept by nobody here: what a list cut short
/// showed (a page that failed, a caller that stopped waiting) is still
/// seen, and a list of many pages never holds every record at once.
///
/// With `changed_since`, only the servers Nova changed at or after that
/// time of its clock, deleted ones too (status DELETED): Nova lists deleted
/// servers whenever `changes-since` is given (nova/api/openstack/compute/
/// servers.py `_get_servers`).
pub(crate) async fn list_servers(
    session: &Session<'_>,
    changed_since: Option<Timestamp>,
    mut on_page: impl FnMut(Vec<NovaServer>),
) -> Result<ListAnswered, CloudError> {
    const OPERATION: &str = "listing servers";
    let mut marker: Option<String> = None;
    let mut answered = ListAnswered { first_page_date: None };
    for _ in 0..MAX_PAGES {
        let mut call = Call::new(OPERATION, Service::Compute, Method::GET, "/servers/detail");
        if let Some(since) = changed_since {
            call = call.query("changes-since", since.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        if let Some(marker) = &marker {
            call = call.query("marker", marker.clone());
        }
        let (page, date): (ServerList, _) = page_asked_again(|| async {
            let reply = session.send(&call).await?;
            Ok((reply.json(OPERATION)?, reply.date()))
        })
        .await?;
        if marker.is_none() {
            answered.first_page_date = date;
        }
        let more = page.servers_links.iter().any(|l| l.rel == "next");
        let last = page.servers.last().map(|s| s.id.clone());
        on_page(page.servers);
        match last {
            Some(last) if more && marker.as_deref() != Some(last.as_str()) => marker = Some(last),
            _ => return Ok(answered),
        }
    }
    Err(CloudError::Unavailable { status: 502, message: format!("{OPERATION}: more than {MAX_PAGES} pages") })
}

/// One page of a list, asked again when another try may answer it
/// (`CloudError::read_asked_again`), up to `LIST_PAGE_ATTEMPTS` tries: the
/// pages before it are kept, and one lost page does not lose the list.
async fn page_asked_again<T, F>(ask: impl Fn() -> F) -> Result<T, CloudError>
where
    F: std::future::Future<Output = Result<T, CloudError>>,
{
    let mut tries = 1;
    loop {
        match ask().await {
            Err(error) if tries < LIST_PAGE_ATTEMPTS && error.read_asked_again() => {
                debug!(%error, tries, "a list page failed; asking again");
                tries += 1;
            }
            answer => return answer,
        }
    }
}

/// One server by id; `None` on Nova's authoritative 404.
pub(crate) async fn get_server(session: &Session<'_>, id: &str) -> Result<Option<NovaServer>, CloudError> {
    const OPERATION: &str = "reading server";
    let call = Call::new(OPERATION, Service::Compute, Method::GET, format!("/servers/{}", segment(id)));
    let reply = session.send(&call).await?;
    if reply.is_not_found() {
        return Ok(None);
    }
    Ok(Some(reply.json::<ServerEnvelope>(OPERATION)?.server))
}

/// Asks Nova to build a server; returns its id (Nova answers 202 at once).
pub(crate) async fn create_server(session: &Session<'_>, body: &impl serde::Serialize) -> Result<String, CloudError> {
    const OPERATION: &str = "creating server";
    let call = Call::new(OPERATION, Service::Compute, Method::POST, "/servers").body(body)?;
    Ok(session.send(&call).await?.json::<CreatedEnvelope>(OPERATION)?.server.id)
}

/// Asks Nova to delete a server; a server already gone counts as deleted.
pub(crate) async fn delete_server(session: &Session<'_>, id: &str) -> Result<(), CloudError> {
    const OPERATION: &str = "deleting server";
    let call = Call::new(OPERATION, Service::Compute, Method::DELETE, format!("/servers/{}", segment(id)));
    let reply = session.send(&call).await?;
    if reply.is_not_found() {
        return Ok(());
    }
    reply.ok(OPERATION)
}

/// Adds (or overwrites) metadata items, leaving the others as they are
/// (`POST /servers/{id}/metadata`).
pub(crate) async fn update_metadata(
    session: &Session<'_>,
    id: &str,
    metadata: &std::collections::BTreeMap<String, String>,
) -> Result<(), CloudError> {
    const OPERATION: &str = "updating server metadata";
    let path = format!("/servers/{}/metadata", segment(id));
    let call =
        Call::new(OPERATION, Service::Compute, Method::POST, path).body(&serde_json::json!({"metadata": metadata}))?;
    session.send(&call).await?.ok(OPERATION)
}

/// Rebuilds a server onto `image_id` (`POST /servers/{id}/action` with
/// `rebuild.imageRef` alone: Nova keeps its key, user data, ports and
/// metadata, and makes its root disk anew). 202 is acceptance; 409 says a
/// task or the server's state stands in the way.
pub(crate) async fn rebuild_server(session: &Session<'_>, id: &str, image_id: &str) -> Result<(), CloudError> {
    const OPERATION: &str = "rebuilding server";
    let path = format!("/servers/{}/action", segment(id));
    let body = serde_json::json!({"rebuild": {"imageRef": image_id}});
    let call = Call::new(OPERATION, Service::Compute, Method::POST, path).body(&body)?;
    session.send(&call).await?.ok(OPERATION)
}

/// Reclaims a soft-deleted server now; one already gone counts as deleted.
pub(crate) async fn force_delete_server(session: &Session<'_>, id: &str) -> Result<(), CloudError> {
    const OPERATION: &str = "force-deleting server";
    let path = format!("/servers/{}/action", segment(id));
    let call =
        Call::new(OPERATION, Service::Compute, Method::POST, path).body(&serde_json::json!({"forceDelete": null}))?;
    let reply = session.send(&call).await?;
    if reply.is_not_found() {
        return Ok(());
    }
    reply.ok(OPERATION)
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn ids_are_escaped_as_one_segment() {
        assert_eq!(segment("9168b536-cd40-4630"), "9168b536-cd40-4630");
        assert_eq!(segment("../x y"), "..%2Fx%20y");
    }
}
