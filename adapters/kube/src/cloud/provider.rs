//! Provider kinds: which cloud serves a region here, and which provider its
//! Region resource names (`spec.provider`, uni-region's enum `openstack`,
//! `kubernetes`, `simulated`). The Go controller builds each region's
//! provider from that field; this one is configured per region and checks
//! the two agree.

use std::fmt;

/// The kinds of cloud this crate can wire to a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProviderKind {
    /// OpenStack (Keystone, Nova, Neutron); identities from OpenstackIdentity.
    Openstack,
    /// A simulated cloud; each Identity is its own project.
    Simulated,
}

impl ProviderKind {
    /// The name uni-region's `Region.spec.provider` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openstack => "openstack",
            ProviderKind::Simulated => "simulated",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a Region resource says serves its region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeclaredProvider {
    Known(ProviderKind),
    /// A provider no cloud of this crate implements (`kubernetes`, or a name
    /// a newer schema added), bounded to the schema's 63 characters.
    Other(String),
}

/// The Region schema's `maxLength` for `spec.provider`; a longer name from a
/// lenient API server is cut so messages stay bounded.
const PROVIDER_NAME_MAX: usize = 63;

impl DeclaredProvider {
    pub(crate) fn parse(name: &str) -> Self {
        match name {
            "openstack" => DeclaredProvider::Known(ProviderKind::Openstack),
            "simulated" => DeclaredProvider::Known(ProviderKind::Simulated),
            other => DeclaredProvider::Other(other.chars().take(PROVIDER_NAME_MAX).collect()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            DeclaredProvider::Known(kind) => kind.as_str(),
            DeclaredProvider::Other(name) => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_names_parse_and_others_are_kept_bounded() {
        assert_eq!(DeclaredProvider::parse("openstack"), DeclaredProvider::Known(ProviderKind::Openstack));
        assert_eq!(DeclaredProvider::parse("simulated"), DeclaredProvider::Known(ProviderKind::Simulated));
        assert_eq!(DeclaredProvider::parse("kubernetes"), DeclaredProvider::Other("kubernetes".into()));
        assert_eq!(DeclaredProvider::parse("OpenStack").name(), "OpenStack", "the schema's names are lower case");
        assert_eq!(DeclaredProvider::parse(&"x".repeat(500)).name().len(), PROVIDER_NAME_MAX);
        for kind in [ProviderKind::Openstack, ProviderKind::Simulated] {
            assert_eq!(DeclaredProvider::parse(kind.as_str()), DeclaredProvider::Known(kind));
        }
    }
}
