//! Kubernetes objects → the core model. Plain data mapping, no rules.

use kube::api::ObjectMeta as KubeMeta;
use server_core::model::{self as core_model, Consumed};

use crate::crd::{Identity, SSHCertificateAuthority, Server};

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

/// A consumed resource as the core needs it: its name, and whether it holds
/// this Server's reference `finalizer` (the rest of its finalizers, one per
/// Server that shares it, are none of this pass's business and not copied).
pub(crate) fn consumed(meta: &KubeMeta, finalizer: &str) -> Consumed {
    let name = meta.name.clone().unwrap_or_default();
    if meta.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == finalizer)) {
        Consumed::referenced(name, finalizer)
    } else {
        Consumed::new(name)
    }
}

pub(crate) fn core_identity(identity: &Identity, finalizer: &str) -> core_model::Identity {
    core_model::Identity {
        resource: consumed(&identity.metadata, finalizer),
        conditions: identity.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default(),
    }
}

pub(crate) fn core_ssh_ca(ca: &SSHCertificateAuthority, finalizer: &str) -> core_model::SshCertificateAuthority {
    core_model::SshCertificateAuthority {
        resource: consumed(&ca.metadata, finalizer),
        public_key: ca.spec.public_key.clone(),
    }
}
