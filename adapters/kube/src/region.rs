//! Region resources: read before the loops start and watched after. Each
//! one's provider (`spec.provider`) goes to the cloud registry, which serves
//! a region only with a cloud of that kind; each registered region's
//! settings go to its cloud port as [`RegionSettings`] (today: the
//! floating-IP network selector).
//!
//! Opt-in (`ControllerConfig::region_namespace`): the Regions live in the
//! region controller's namespace, which this operator reads only when told.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use server_core::model::NAME_LABEL;
use server_core::port::{NetworkSelector, RegionSettings};
use tracing::{info, warn};

use crate::cloud::{CloudRegistry, DeclaredProvider};
use crate::crd::Region;
use crate::error::Error;
use crate::shutdown::Shutdown;

/// What a Region says that its cloud acts on.
pub(crate) fn settings_of(region: &Region) -> RegionSettings {
    let selector = region
        .spec
        .openstack
        .as_ref()
        .and_then(|openstack| openstack.network.as_ref())
        .and_then(|network| network.external_networks.as_ref())
        .and_then(|external| external.selector.as_ref());
    RegionSettings {
        external_networks: selector
            .map(|selector| NetworkSelector { ids: selector.ids.clone(), tags: selector.tags.clone() }),
    }
}

/// What the controller reads of one Region.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RegionRecord {
    provider: Option<DeclaredProvider>,
    settings: RegionSettings,
    /// Its display name (`unikorn-cloud.org/name`), for the metrics.
    name: Option<String>,
}

pub(crate) fn record_of(region: &Region) -> RegionRecord {
    RegionRecord {
        provider: region.spec.provider.as_deref().map(DeclaredProvider::parse),
        settings: settings_of(region),
        name: region.labels().get(NAME_LABEL).cloned(),
    }
}

/// Hands the registry the providers the Regions name, and each registered
/// region its settings when they differ from what it was last handed. A
/// region with no Region resource gets the defaults.
struct Applier {
    clouds: CloudRegistry,
    applied: BTreeMap<String, RegionSettings>,
}

impl Applier {
    fn apply(&mut self, regions: &BTreeMap<String, RegionRecord>) {
        self.clouds.declare(
            regions.iter().filter_map(|(name, record)| Some((name.clone(), record.provider.clone()?))).collect(),
        );
        self.clouds
            .name_regions(regions.iter().filter_map(|(id, record)| Some((id.clone(), record.name.clone()?))).collect());
        let names: Vec<String> = self.clouds.regions().map(str::to_owned).collect();
        for name in names {
            let settings = regions.get(&name).map(|record| record.settings.clone()).unwrap_or_default();
            if self.applied.get(&name) == Some(&settings) {
                continue;
            }
            if let Some(cloud) = self.clouds.get(&name) {
                cloud.port().apply_region_settings(&settings);
            }
            let selector = settings.external_networks.as_ref();
            info!(
                region = %name,
                external_network_ids = ?selector.and_then(|s| s.ids.as_ref()),
                external_network_tags = ?selector.and_then(|s| s.tags.as_ref()),
                "region settings applied"
            );
            self.applied.insert(name, settings);
        }
        for name in self.clouds.regions() {
            if let Err(unserved) = self.clouds.serving(name) {
                warn!(region = %name, reason = %unserved.message(), "region not served: its Servers wait");
            }
        }
    }
}

/// Reads every Region of `namespace` once and applies them: the loops start
/// only after this, so no create runs before its region's settings are known.
pub(crate) async fn load(client: &Client, namespace: &str, clouds: &CloudRegistry) -> Result<RegionWatch, Error> {
    let api: Api<Region> = Api::namespaced(client.clone(), namespace);
    let listed = api.list(&Default::default()).await.map_err(|error| {
        Error::Regions(format!(
            "cannot list Regions in namespace {namespace} (--region-namespace): {}; grant list and watch on \
             regions.region.unikorn-cloud.org there, or leave the flag out",
            crate::error::short_message(&error)
        ))
    })?;
    let regions = listed.items.iter().map(|region| (region.name_any(), record_of(region))).collect();
    let mut applier = Applier { clouds: clouds.clone(), applied: BTreeMap::new() };
    applier.apply(&regions);
    Ok(RegionWatch { api, applier, regions })
}

/// The Regions as last read, kept current by a watch.
pub(crate) struct RegionWatch {
    api: Api<Region>,
    applier: Applier,
    regions: BTreeMap<String, RegionRecord>,
}

impl RegionWatch {
    /// Follows changes until `shutdown`; a failing watch is retried by the
    /// watcher's backoff and logged, and the settings last read stay.
    pub(crate) async fn run(mut self, shutdown: Shutdown) {
        let events = watcher(self.api.clone(), watcher::Config::default()).default_backoff();
        let mut events = std::pin::pin!(events.take_until(shutdown));
        let mut relisted = BTreeMap::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(region)) => {
                    self.regions.insert(region.name_any(), record_of(&region));
                }
                Ok(watcher::Event::Delete(region)) => {
                    self.regions.remove(&region.name_any());
                }
                Ok(watcher::Event::Init) => relisted.clear(),
                Ok(watcher::Event::InitApply(region)) => {
                    relisted.insert(region.name_any(), record_of(&region));
                    continue;
                }
                Ok(watcher::Event::InitDone) => self.regions = std::mem::take(&mut relisted),
                Err(error) => {
                    warn!(error = %watch_failure(&error), "watching Regions failed; retrying");
                    continue;
                }
            }
            self.applier.apply(&self.regions);
        }
    }
}

/// A watch failure in one line, without the API server's whole Status.
fn watch_failure(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => crate::error::short_message(error),
        watcher::Error::WatchError(status) => format!("{} ({})", status.message, status.code),
        watcher::Error::NoResourceVersion => "the API server sent no resourceVersion".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{
        RegionExternalNetworks, RegionNetworkSelector, RegionNetworkSpec, RegionOpenstackSpec, RegionSpec,
    };

    /// The display name the metrics' `region_name` shows: the Region's
    /// `unikorn-cloud.org/name` label, kept by the registry per region.
    #[test]
    fn the_display_name_is_the_name_label() {
        let mut region = Region::new("region-a", RegionSpec::default());
        assert_eq!(record_of(&region).name, None);
        region.metadata.labels = Some([(NAME_LABEL.to_owned(), "europe-west".to_owned())].into_iter().collect());
        assert_eq!(record_of(&region).name.as_deref(), Some("europe-west"));
        let clouds = CloudRegistry::new();
        let mut applier = Applier { clouds: clouds.clone(), applied: BTreeMap::new() };
        applier.apply(&BTreeMap::from([("region-a".to_owned(), record_of(&region))]));
        assert_eq!(clouds.region_name("region-a"), "europe-west");
        assert_eq!(clouds.region_name("region-b"), "");
    }

    #[test]
    fn the_selector_is_read_from_the_openstack_network_section() {
        let mut region = Region::new("region-a", RegionSpec::default());
        assert_eq!(settings_of(&region), RegionSettings::default());
        region.spec.openstack = Some(RegionOpenstackSpec {
            network: Some(RegionNetworkSpec {
                external_networks: Some(RegionExternalNetworks {
                    selector: Some(RegionNetworkSelector { ids: None, tags: Some(vec!["public".into()]) }),
                }),
            }),
        });
        let selector = settings_of(&region).external_networks.unwrap_or_default();
        assert_eq!(selector.tags.as_deref(), Some(&["public".to_owned()][..]));
        assert_eq!(selector.ids, None);
    }

    #[test]
    fn the_upstream_regions_shape_parses() {
        let region: Region = serde_json::from_value(serde_json::json!({
            "apiVersion": "region.unikorn-cloud.org/v1alpha1",
            "kind": "Region",
            "metadata": {"name": "region-a", "namespace": "unikorn-region"},
            "spec": {
                "provider": "openstack",
                "openstack": {
                    "endpoint": "https://keystone.example.com:5000",
                    "serviceAccountSecret": {"namespace": "unikorn-region", "name": "secret"},
                    "network": {"externalNetworks": {"selector": {"ids": ["n-1"], "tags": ["public"]}}}
                }
            }
        }))
        .unwrap_or_default();
        let selector = settings_of(&region).external_networks.unwrap_or_default();
        assert_eq!(selector.ids.as_deref(), Some(&["n-1".to_owned()][..]));
        assert_eq!(record_of(&region).provider, Some(DeclaredProvider::Known(crate::ProviderKind::Openstack)));
    }

    #[test]
    fn a_region_without_a_provider_declares_none() {
        let region = Region::new("region-a", RegionSpec::default());
        assert_eq!(record_of(&region).provider, None);
        let region = Region::new("region-k", RegionSpec { provider: Some("kubernetes".into()), openstack: None });
        assert_eq!(record_of(&region).provider, Some(DeclaredProvider::Other("kubernetes".into())));
    }
}
