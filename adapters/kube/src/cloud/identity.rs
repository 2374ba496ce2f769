//! Identity sources: how a region's cloud learns the identity a Server calls
//! it as. Each registered region carries one next to its port, chosen with
//! the cloud's kind (an OpenStack cloud reads OpenstackIdentity; the
//! simulated cloud needs only the Identity), so the generic code asks the
//! region's source and knows nothing of what it reads.

use futures_util::future::BoxFuture;
use kube::Client;
use server_core::port::IdentityContext;

use crate::cache::Caches;
use crate::error::Error;

/// Where a region's identity context comes from. Credentials it reads go to
/// the cloud port only, never into logs.
pub(crate) trait IdentitySource: Send + Sync {
    /// The kind of object it reads, for messages (e.g. "OpenstackIdentity").
    fn reads(&self) -> &'static str;

    /// The context of calls as `identity_id` of `namespace` in `region_id`
    /// from what the caches hold; `None` when the caches lack what it reads
    /// (gone, or too new for them).
    fn cached(&self, caches: &Caches, namespace: &str, region_id: &str, identity_id: &str) -> Option<IdentityContext>;

    /// The same, read live from the API server; `None` when it is gone.
    fn live<'a>(
        &'a self,
        client: &'a Client,
        namespace: &'a str,
        region_id: &'a str,
        identity_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<IdentityContext>, Error>>;
}

/// The simulated cloud's source, as uni-region's simulated provider, which
/// ignores the identity's cloud account: each Identity is its own project,
/// called without credentials. Nothing is read beyond the Identity the pass
/// already has (whose absence the core handles).
#[derive(Debug, Default)]
pub(crate) struct IdentityAsProject;

impl IdentityAsProject {
    fn context(region_id: &str, identity_id: &str) -> IdentityContext {
        IdentityContext {
            region_id: region_id.to_owned(),
            identity_id: identity_id.to_owned(),
            project_id: identity_id.to_owned(),
            ..IdentityContext::default()
        }
    }
}

impl IdentitySource for IdentityAsProject {
    fn reads(&self) -> &'static str {
        "Identity"
    }

    fn cached(&self, _: &Caches, _: &str, region_id: &str, identity_id: &str) -> Option<IdentityContext> {
        Some(Self::context(region_id, identity_id))
    }

    fn live<'a>(
        &'a self,
        _: &'a Client,
        _: &'a str,
        region_id: &'a str,
        identity_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<IdentityContext>, Error>> {
        Box::pin(async move { Ok(Some(Self::context(region_id, identity_id))) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use server_core::port::Credentials;

    #[test]
    fn the_simulated_source_makes_each_identity_its_own_project_without_credentials() {
        let context = IdentityAsProject::context("region-s", "identity-7");
        assert_eq!(context.project_id, "identity-7");
        assert_eq!(context.identity_id, "identity-7");
        assert_eq!(context.region_id, "region-s");
        assert_eq!(context.credentials, Credentials::None);
        assert_eq!(context.ssh_key_name, None);
    }
}
