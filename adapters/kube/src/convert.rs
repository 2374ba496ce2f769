//! Kubernetes objects → the core model. Plain data mapping, no rules.

use kube::api::ObjectMeta as KubeMeta;
use server_core::model as core_model;

use crate::crd::Server;

/// The Server as the core sees it.
pub fn core_server(server: &Server) -> core_model::Server {
    core_model::Server {
        meta: core_meta(&server.metadata),
        spec: server.spec.spec.clone(),
        status: server.status.clone().unwrap_or_default(),
    }
}

/// A Server's metadata as the core sees it.
pub fn core_meta(meta: &KubeMeta) -> core_model::ObjectMeta {
    core_model::ObjectMeta {
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        generation: meta.generation.unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ServerResourceSpec;

    #[test]
    fn metadata_maps_onto_the_core_view() {
        let mut server = Server::new("s1", ServerResourceSpec::default());
        server.metadata.namespace = Some("ns".into());
        server.metadata.uid = Some("u1".into());
        server.metadata.generation = Some(3);
        server.metadata.finalizers = Some(vec!["unikorn".into()]);
        server.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        let core = core_server(&server);
        assert_eq!(core.meta.name, "s1");
        assert_eq!(core.meta.namespace, "ns");
        assert_eq!(core.meta.uid, "u1");
        assert_eq!(core.meta.generation, 3);
        assert!(core.meta.deleting);
        assert!(core.meta.has_finalizer("unikorn"));
        assert_eq!(core.status, Default::default());
    }
}
