//! `server-controller explain`: reads one Server and runs the pass a
//! controller would run, answering its needs with live reads (there are no
//! caches in a one-shot command), and returns the core's decision with the
//! reads and facts behind it; `run --shadow` does the same for every
//! Server, round after round. Reads only; nothing is written, created or
//! deleted (the clouds it is given read only too).

use std::fmt;

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use server_core::explain::{Explanation, Intent, Unread, explain_pass};
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

/// One Server of a shadow round: what the controller would do with it now,
/// or why that could not be told.
#[derive(Debug)]
pub struct ShadowEntry {
    pub namespace: String,
    pub name: String,
    pub explained: Result<Explanation, String>,
}

/// What the controller would do now with every Server it was asked about.
#[derive(Debug, Default)]
pub struct ShadowRound {
    pub entries: Vec<ShadowEntry>,
}

impl ShadowRound {
    /// The decided Servers' intents, summed.
    pub fn total(&self) -> Intent {
        let mut total = Intent::default();
        for intent in self.entries.iter().filter_map(|e| e.explained.as_ref().ok().and_then(Explanation::intent)) {
            total += intent;
        }
        total
    }

    /// Servers whose decision could not be told (no record read, or not explained).
    pub fn undecided(&self) -> usize {
        self.entries.iter().filter(|e| e.explained.as_ref().map_or(true, |x| x.decision.is_none())).count()
    }
}

impl fmt::Display for ShadowRound {
    /// One line per Server, then the sums. Nothing of a Server's spec or
    /// user data, no response body: what would change, and the outcome.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for entry in &self.entries {
            write!(f, "{}/{}: ", entry.namespace, entry.name)?;
            match &entry.explained {
                Ok(explained) => match (&explained.decision, explained.intent()) {
                    (Some(decision), Some(intent)) => writeln!(f, "would do {intent}; {}", decision.outcome.label())?,
                    _ => writeln!(f, "undecided: the provider's record was not read")?,
                },
                Err(error) => writeln!(f, "cannot be explained: {error}")?,
            }
        }
        let total = self.total();
        writeln!(
            f,
            "shadow: {} Servers; would create {} and delete {} provider servers, make {} other cloud changes and {} API writes; {} undecided",
            self.entries.len(),
            total.creates,
            total.deletes,
            total.cloud_changes,
            total.api_writes,
            self.undecided()
        )
    }
}

/// What the controller would do now with every Server in `namespace` (every
/// namespace when `None`), each read and decided as [`explain`] does. A
/// Server that cannot be read or explained is said so in its line; the
/// round goes on.
pub async fn shadow(
    client: &Client,
    clouds: &CloudRegistry,
    config: &ControllerConfig,
    namespace: Option<&str>,
) -> Result<ShadowRound, Error> {
    let servers: Api<Server> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    // Names only: one Server the typed client cannot decode must not hide
    // the others.
    let mut round = ShadowRound::default();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = servers.list_metadata(&params).await.map_err(|e| Error::kube("cannot list Servers", e))?;
        for object in &page.items {
            let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
            let explained = explain(client, clouds, config, &namespace, &name).await.map_err(|e| e.to_string());
            round.entries.push(ShadowEntry { namespace, name, explained });
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(round),
        }
    }
}
