//! Clouds by region: built at start-up, looked up by a Server's region label.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use server_core::port::CloudPort;

/// Region ID → the cloud serving it.
#[derive(Clone, Default)]
pub struct CloudRegistry {
    clouds: BTreeMap<String, Arc<dyn CloudPort>>,
}

impl CloudRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the cloud of a region.
    pub fn insert(&mut self, region_id: impl Into<String>, cloud: Arc<dyn CloudPort>) {
        self.clouds.insert(region_id.into(), cloud);
    }

    /// Builder form of [`CloudRegistry::insert`].
    pub fn with(mut self, region_id: impl Into<String>, cloud: Arc<dyn CloudPort>) -> Self {
        self.insert(region_id, cloud);
        self
    }

    pub fn get(&self, region_id: &str) -> Option<&Arc<dyn CloudPort>> {
        self.clouds.get(region_id)
    }

    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.clouds.keys().map(String::as_str)
    }

    /// The same clouds, each refusing every call while `fence` does not hold.
    pub(crate) fn fenced(&self, fence: &crate::Fence) -> CloudRegistry {
        let clouds = self
            .clouds
            .iter()
            .map(|(region, cloud)| {
                let fenced: Arc<dyn CloudPort> =
                    Arc::new(crate::fence::FencedCloud { cloud: cloud.clone(), fence: fence.clone() });
                (region.clone(), fenced)
            })
            .collect();
        CloudRegistry { clouds }
    }
}

impl fmt::Debug for CloudRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudRegistry").field("regions", &self.clouds.keys().collect::<Vec<_>>()).finish()
    }
}
