//! `server-controller explain`: reads one Server and everything a pass would
//! read (live, not from caches: there are none in a one-shot command), asks
//! the provider for its record, and returns the core's decision with the
//! facts behind it. Reads only; nothing is written, created or deleted.

use kube::{Api, Client};
use server_core::explain::{Explanation, Unread};
use server_core::model::{IDENTITY_LABEL, REGION_LABEL};
use server_core::{ProviderView, RegionUnserved};

use crate::cloud::{CloudRegistry, NoCloud};
use crate::config::ControllerConfig;
use crate::convert::core_server;
use crate::crd::Server;
use crate::error::Error;
use crate::facts::{Gathered, identity_gone};
use crate::kube_api::now;

/// What the controller would decide for `namespace/name` now, and why.
pub async fn explain(
    client: &Client,
    clouds: &CloudRegistry,
    config: &ControllerConfig,
    namespace: &str,
    name: &str,
) -> Result<Explanation, Error> {
    let servers: Api<Server> = Api::namespaced(client.clone(), namespace);
    let object = servers
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("cannot read Server {namespace}/{name}"), e))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "there is no Server {name} in namespace {namespace} (`kubectl get servers -n {namespace}` lists them)"
            ))
        })?;
    let server = core_server(&object);
    let mut gathered = Gathered::live(client, &server).await?;

    let labels = (server.meta.label(REGION_LABEL), server.meta.label(IDENTITY_LABEL));
    gathered.facts.provider = match labels {
        (Some(region_id), Some(identity_id)) => {
            match clouds.live_handle(client, namespace, region_id, identity_id, config.cloud_timeout).await? {
                Ok(handle) => handle.provider_view(&server).await,
                // This command has no Region watch: a region it has no cloud
                // for is one it was not given, whatever the operator has.
                // The provider's view is unknown here, and the core decides
                // nothing that depends on it.
                Err(NoCloud::Unserved(RegionUnserved::NotConfigured { .. })) => {
                    let unread = Unread::NoCloudGiven { region: region_id.to_owned() };
                    let (facts, options) = (gathered.facts, config.rule_options());
                    return Ok(server_core::explain::explain_unread(server, facts, options, unread, now()));
                }
                Err(no_cloud) => {
                    let gone = server.meta.deleting && identity_gone(client, clouds, &server, &gathered.facts).await?;
                    no_cloud.view(gone)
                }
            }
        }
        _ => ProviderView::Unknown("the server has no region or identity label".into()),
    };
    Ok(server_core::explain::explain(server, gathered.facts, config.rule_options(), now()))
}
