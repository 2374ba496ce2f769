//! The OpenStack identity source: a Server's identity ID names an
//! OpenstackIdentity of its namespace, whose spec holds the project, the
//! credentials and the keypair. Only OpenStack regions register it.

use futures_util::future::BoxFuture;
use kube::api::ListParams;
use kube::{Api, Client};
use server_core::port::{Credentials, IdentityContext};

use super::identity::IdentitySource;
use crate::cache::Caches;
use crate::crd::OpenstackIdentity;
use crate::error::Error;

/// Reads the OpenstackIdentity named like the Server's identity.
#[derive(Debug, Default)]
pub(crate) struct OpenstackIdentities;

impl IdentitySource for OpenstackIdentities {
    fn reads(&self) -> &'static str {
        "OpenstackIdentity"
    }

    fn cached(&self, caches: &Caches, namespace: &str, region_id: &str, identity_id: &str) -> Option<IdentityContext> {
        caches
            .openstack_identity(namespace, identity_id)
            .map(|identity| context_from(&identity, region_id, identity_id))
    }

    /// Listed, not fetched: the operator may only list and watch
    /// OpenstackIdentities (deploy/base/rbac.yaml).
    fn live<'a>(
        &'a self,
        client: &'a Client,
        namespace: &'a str,
        region_id: &'a str,
        identity_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<IdentityContext>, Error>> {
        Box::pin(async move {
            let api: Api<OpenstackIdentity> = Api::namespaced(client.clone(), namespace);
            let all = api
                .list(&ListParams::default())
                .await
                .map_err(|e| Error::kube(format!("listing openstackidentities in namespace {namespace}"), e))?;
            Ok(all
                .items
                .iter()
                .find(|identity| identity.metadata.name.as_deref() == Some(identity_id))
                .map(|identity| context_from(identity, region_id, identity_id)))
        })
    }
}

/// The context of calls as `identity` (the OpenstackIdentity named
/// `identity_id`) in region `region_id`.
pub(crate) fn context_from(identity: &OpenstackIdentity, region_id: &str, identity_id: &str) -> IdentityContext {
    let spec = &identity.spec;
    // An application credential is preferred: it is scoped to the project.
    let credentials = match (&spec.application_credential_id, &spec.application_credential_secret) {
        (Some(id), Some(secret)) => Credentials::ApplicationCredential { id: id.clone(), secret: secret.clone() },
        _ => match (&spec.user_id, &spec.password) {
            (Some(user_id), Some(password)) => {
                Credentials::Password { user_id: user_id.clone(), password: password.clone() }
            }
            _ => Credentials::None,
        },
    };
    IdentityContext {
        region_id: region_id.to_owned(),
        identity_id: identity_id.to_owned(),
        project_id: spec.project_id.clone().unwrap_or_default(),
        credentials,
        ssh_key_name: spec.ssh_key_name.clone().filter(|name| !name.is_empty()),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::OpenstackIdentitySpec;

    #[test]
    fn password_credentials_and_project() {
        let identity = OpenstackIdentity::new(
            "id1",
            OpenstackIdentitySpec {
                user_id: Some("u".into()),
                password: Some("p".into()),
                project_id: Some("proj".into()),
                ..Default::default()
            },
        );
        let ctx = context_from(&identity, "r1", "id1");
        assert_eq!(ctx.project_id, "proj");
        assert_eq!(ctx.region_id, "r1");
        assert_eq!(ctx.credentials, Credentials::Password { user_id: "u".into(), password: "p".into() });
    }

    #[test]
    fn application_credential_preferred() {
        let identity = OpenstackIdentity::new(
            "id1",
            OpenstackIdentitySpec {
                user_id: Some("u".into()),
                password: Some("p".into()),
                application_credential_id: Some("ac".into()),
                application_credential_secret: Some("s".into()),
                ..Default::default()
            },
        );
        let ctx = context_from(&identity, "r1", "id1");
        assert_eq!(ctx.credentials, Credentials::ApplicationCredential { id: "ac".into(), secret: "s".into() });
    }

    #[test]
    fn a_half_given_credential_is_none_and_an_empty_keypair_name_is_no_keypair() {
        let identity = OpenstackIdentity::new(
            "id1",
            OpenstackIdentitySpec {
                application_credential_id: Some("ac".into()),
                user_id: Some("u".into()),
                ssh_key_name: Some(String::new()),
                ..Default::default()
            },
        );
        let ctx = context_from(&identity, "r1", "id1");
        assert_eq!(ctx.credentials, Credentials::None);
        assert_eq!(ctx.ssh_key_name, None);
        assert_eq!(ctx.project_id, "", "no project: the cloud refuses the call, nothing is guessed");
        let keyed = OpenstackIdentity::new(
            "id1",
            OpenstackIdentitySpec { ssh_key_name: Some("identity-key".into()), ..Default::default() },
        );
        assert_eq!(context_from(&keyed, "r1", "id1").ssh_key_name.as_deref(), Some("identity-key"));
    }

    #[test]
    fn the_source_names_what_it_reads_for_messages() {
        assert_eq!(OpenstackIdentities.reads(), "OpenstackIdentity");
    }
}
