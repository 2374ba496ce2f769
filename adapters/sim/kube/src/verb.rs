//! API verbs, as Kubernetes names them (RBAC and audit logs use the same words).

use std::fmt;

/// The verb of one API request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// GET of one object (or its `/status`).
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, including server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// Every verb, in order.
    pub const ALL: [Self; 8] = [
        Self::Get,
        Self::List,
        Self::Watch,
        Self::Create,
        Self::Update,
        Self::Patch,
        Self::Delete,
        Self::DeleteCollection,
    ];

    /// The lowercase Kubernetes name: `get`, `list`, `watch`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
