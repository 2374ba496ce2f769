//! The user's tags as provider metadata: which keys the provider receives,
//! and which tags are left out.
//!
//! Nova accepts metadata keys matching `^[a-zA-Z0-9-_:. ]{1,255}$` and values
//! of at most 255 characters (nova/api/validation/parameter_types.py,
//! `metadata`), and refuses the whole create with 400 for any other. Tags in
//! the unikorn scheme (`compute.unikorn-cloud.org/workload`) are converted
//! as the Go controller converts them (`compute:workload`); a tag that still
//! does not fit is left out, so one odd tag never parks a Server. The core
//! decides this once, so the create request, the event that reports the
//! left-out tags and every cloud adapter agree.

use crate::model::Tag;

/// Metadata keys with this prefix are the controller's own (the keys that tie
/// a provider server to its Server); no tag may set them.
pub const RESERVED_METADATA_PREFIX: &str = "unikorn:";

/// Nova's limit on metadata keys and values, in characters.
pub const METADATA_MAX: usize = 255;

/// Whether Nova accepts `key` as a metadata key: `^[a-zA-Z0-9-_:. ]{1,255}$`.
pub fn valid_metadata_key(key: &str) -> bool {
    (1..=METADATA_MAX).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.' | b' '))
}

/// A tag name in the unikorn scheme `<service>.<domain>/<local-name>` as the
/// Go controller writes it to Nova: `<service>:<local_name>` (uni-region's
/// `metadataKey`). Other names are returned unchanged.
pub fn metadata_key(tag: &str) -> String {
    let Some((qualifier, local)) = tag.split_once('/') else { return tag.to_owned() };
    let Some((service, domain)) = qualifier.split_once('.') else { return tag.to_owned() };
    let label = |s: &str| {
        s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if label(service) && !domain.is_empty() && label(local) {
        format!("{service}:{}", local.replace('-', "_"))
    } else {
        tag.to_owned()
    }
}

/// The tags a create sends, keys converted, and the names of those left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderTags {
    /// In the spec's order, each with the key the provider receives.
    pub tags: Vec<Tag>,
    /// Tag names (as the user wrote them) the provider would refuse even
    /// after conversion, or that claim a controller key.
    pub dropped: Vec<String>,
}

/// Converts the spec's tags to provider metadata (see the module docs).
pub fn provider_tags(tags: &[Tag]) -> ProviderTags {
    let mut out = ProviderTags::default();
    for tag in tags {
        let key = metadata_key(&tag.name);
        let fits = valid_metadata_key(&key)
            && tag.value.chars().count() <= METADATA_MAX
            && !key.starts_with(RESERVED_METADATA_PREFIX);
        if fits {
            out.tags.push(Tag { name: key, value: tag.value.clone() });
        } else {
            out.dropped.push(tag.name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(name: &str, value: &str) -> Tag {
        Tag { name: name.into(), value: value.into() }
    }

    #[test]
    fn unikorn_tag_names_convert_as_the_go_controller_does() {
        assert_eq!(metadata_key("compute.unikorn-cloud.org/workload"), "compute:workload");
        assert_eq!(metadata_key("region.unikorn-cloud.org/server-pool"), "region:server_pool");
        assert_eq!(metadata_key("team"), "team");
        assert_eq!(metadata_key("Compute.x/y"), "Compute.x/y");
        assert_eq!(metadata_key("a/b/c"), "a/b/c");
        assert_eq!(metadata_key("nodomain/x"), "nodomain/x");
    }

    #[test]
    fn nova_key_schema() {
        assert!(valid_metadata_key("compute:workload") && valid_metadata_key("My Server Name"));
        assert!(valid_metadata_key(&"k".repeat(255)));
        for bad in ["", "a/b", "user@example", "clé", &"k".repeat(256)] {
            assert!(!valid_metadata_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn tags_nova_would_refuse_are_left_out_and_named() {
        let out = provider_tags(&[
            tag("compute.unikorn-cloud.org/workload", "batch"),
            tag("owner@example.com", "x"),
            tag("long", &"v".repeat(256)),
            tag("unikorn:server-uid", "forged"),
            tag("fits", &"é".repeat(255)),
        ]);
        assert_eq!(out.tags, [tag("compute:workload", "batch"), tag("fits", &"é".repeat(255))]);
        assert_eq!(out.dropped, ["owner@example.com", "long", "unikorn:server-uid"]);
    }
}
