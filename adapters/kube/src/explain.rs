//! `server-controller explain`: reads one Server and runs the pass a
//! controller would run, answering its needs with live reads (there are no
//! caches in a one-shot command), and returns the core's decision with the
//! reads and facts behind it. Reads only; nothing is written, created or
//! deleted.

use kube::{Api, Client};
use server_core::explain::{Explanation, Unread, explain_pass};
use server_core::model::REGION_LABEL;
use server_core::pass::Need;
use server_core::{Pass, RegionUnserved};

use crate::cloud::{CloudRegistry, NoCloud};
use crate::config::ControllerConfig;
use crate::convert::core_server;
use crate::crd::Server;
use crate::error::Error;
use crate::facts::{Reader, Source};
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
    let mut pass = Pass::start(core_server(&object), config.rule_options(), now());
    let mut reader = Reader::new(client, clouds, Source::OneShot, config.cloud_timeout);
    let mut reads = Vec::new();
    while let Some(need) = pass.poll_need().cloned() {
        if matches!(need, Need::Provider | Need::ProviderLive(_))
            && let Err(NoCloud::Unserved(RegionUnserved::NotConfigured { .. })) = reader.cloud(pass.server()).await?
        {
            // This command has no Region watch: a region it has no cloud
            // for is one it was not given, whatever the operator has. The
            // provider's view is unknown here, and nothing that depends on
            // it is decided.
            let region = pass.server().meta.label(REGION_LABEL).unwrap_or_default().to_owned();
            return Ok(explain_pass(&pass, reads, Some(Unread::NoCloudGiven { region })));
        }
        let fact = reader.read(&need, pass.server(), pass.facts()).await?;
        pass.handle_fact(fact)?;
        reads.push(need);
    }
    Ok(explain_pass(&pass, reads, None))
}
