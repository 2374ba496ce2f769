//! Typing a payload by its first characters, exactly as cloud-init does
//! (`cloudinit.handlers.type_from_starts_with`): decode as UTF-8 (invalid
//! bytes never match), lower-case, skip leading whitespace (Python's
//! definition), then the longest matching prefix of cloud-init's
//! `INCLUSION_TYPES_MAP` wins.

use std::fmt;

/// A payload type from cloud-init's prefix table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadType {
    /// `#include` → `text/x-include-url`.
    Include,
    /// `#include-once` → `text/x-include-once-url`.
    IncludeOnce,
    /// `#!` → `text/x-shellscript`.
    ShellScript,
    /// `#cloud-config` → `text/cloud-config`.
    CloudConfig,
    /// `#part-handler` → `text/part-handler`.
    PartHandler,
    /// `#cloud-boothook` → `text/cloud-boothook`.
    CloudBoothook,
    /// `#cloud-config-archive` → `text/cloud-config-archive`.
    CloudConfigArchive,
    /// `#cloud-config-jsonp` → `text/cloud-config-jsonp`.
    CloudConfigJsonp,
    /// `## template: jinja` → `text/jinja2`.
    JinjaTemplate,
    /// `text/x-shellscript-per-boot`: in cloud-init's table so that its own
    /// tools accept it, but meaningful only as a MIME part's `Content-Type`.
    ShellScriptPerBoot,
    /// `text/x-shellscript-per-instance` (MIME parts only, see above).
    ShellScriptPerInstance,
    /// `text/x-shellscript-per-once` (MIME parts only, see above).
    ShellScriptPerOnce,
}

/// cloud-init's table, longest prefix first (ties never overlap).
const TABLE: [PayloadType; 12] = [
    PayloadType::ShellScriptPerInstance,
    PayloadType::ShellScriptPerBoot,
    PayloadType::ShellScriptPerOnce,
    PayloadType::CloudConfigArchive,
    PayloadType::CloudConfigJsonp,
    PayloadType::JinjaTemplate,
    PayloadType::CloudBoothook,
    PayloadType::IncludeOnce,
    PayloadType::CloudConfig,
    PayloadType::PartHandler,
    PayloadType::Include,
    PayloadType::ShellScript,
];

/// Length of the longest prefix, in characters.
const LONGEST_PREFIX: usize = 31;

impl PayloadType {
    /// Every type in cloud-init's table, longest prefix first.
    pub fn all() -> &'static [PayloadType] {
        &TABLE
    }

    /// The (lower-case) prefix cloud-init looks for.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Include => "#include",
            Self::IncludeOnce => "#include-once",
            Self::ShellScript => "#!",
            Self::CloudConfig => "#cloud-config",
            Self::PartHandler => "#part-handler",
            Self::CloudBoothook => "#cloud-boothook",
            Self::CloudConfigArchive => "#cloud-config-archive",
            Self::CloudConfigJsonp => "#cloud-config-jsonp",
            Self::JinjaTemplate => "## template: jinja",
            Self::ShellScriptPerBoot => "text/x-shellscript-per-boot",
            Self::ShellScriptPerInstance => "text/x-shellscript-per-instance",
            Self::ShellScriptPerOnce => "text/x-shellscript-per-once",
        }
    }

    /// The MIME type cloud-init gives a payload of this type.
    pub fn mime_type(self) -> &'static str {
        match self {
            Self::Include => "text/x-include-url",
            Self::IncludeOnce => "text/x-include-once-url",
            Self::ShellScript => "text/x-shellscript",
            Self::CloudConfig => "text/cloud-config",
            Self::PartHandler => "text/part-handler",
            Self::CloudBoothook => "text/cloud-boothook",
            Self::CloudConfigArchive => "text/cloud-config-archive",
            Self::CloudConfigJsonp => "text/cloud-config-jsonp",
            Self::JinjaTemplate => "text/jinja2",
            Self::ShellScriptPerBoot => "text/x-shellscript-per-boot",
            Self::ShellScriptPerInstance => "text/x-shellscript-per-instance",
            Self::ShellScriptPerOnce => "text/x-shellscript-per-once",
        }
    }

    /// True for the entries cloud-init honours only as a MIME part's type.
    pub fn is_mime_only(self) -> bool {
        matches!(self, Self::ShellScriptPerBoot | Self::ShellScriptPerInstance | Self::ShellScriptPerOnce)
    }

    /// Types a payload as cloud-init types raw bytes: undecodable bytes are
    /// kept (as Python's `surrogateescape` keeps them) and never match.
    pub fn sniff(payload: &[u8]) -> Option<Self> {
        Self::sniff_text(&String::from_utf8_lossy(payload))
    }

    /// Types text: lower-case, strip leading whitespace, longest prefix.
    pub fn sniff_text(payload: &str) -> Option<Self> {
        let head: String = payload
            .chars()
            .flat_map(char::to_lowercase)
            .skip_while(|c| is_python_space(*c))
            .take(LONGEST_PREFIX)
            .collect();
        TABLE.iter().copied().find(|t| head.starts_with(t.prefix()))
    }
}

impl fmt::Display for PayloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mime_type())
    }
}

/// Python's `str.isspace()`: Unicode `White_Space` plus the information
/// separators U+001C..U+001F.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub(crate) fn python_strip(s: &str) -> &str {
    s.trim_matches(is_python_space)
}

/// The gzip magic number, which is all cloud-init needs to try inflating.
pub(crate) fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_types_to_its_mime_type() {
        for t in PayloadType::all() {
            let payload = format!("{}\nbody\n", t.prefix());
            assert_eq!(PayloadType::sniff(payload.as_bytes()), Some(*t), "{t:?}");
        }
    }

    #[test]
    fn table_is_sorted_longest_first_and_bounded() {
        let lengths: Vec<usize> = TABLE.iter().map(|t| t.prefix().chars().count()).collect();
        assert!(lengths.windows(2).all(|w| w[0] >= w[1]), "{lengths:?}");
        assert_eq!(lengths[0], LONGEST_PREFIX);
    }

    #[test]
    fn longest_prefix_wins() {
        assert_eq!(PayloadType::sniff(b"#include-once\n/x"), Some(PayloadType::IncludeOnce));
        assert_eq!(PayloadType::sniff(b"#include\n/x"), Some(PayloadType::Include));
        assert_eq!(PayloadType::sniff(b"#cloud-config-archive\n[]"), Some(PayloadType::CloudConfigArchive));
        assert_eq!(PayloadType::sniff(b"#cloud-config-jsonp\n[]"), Some(PayloadType::CloudConfigJsonp));
        assert_eq!(PayloadType::sniff(b"#cloud-config\n{}"), Some(PayloadType::CloudConfig));
        // A prefix match, not a whole-word match, exactly like cloud-init.
        assert_eq!(PayloadType::sniff(b"#cloud-configX"), Some(PayloadType::CloudConfig));
        assert_eq!(PayloadType::sniff(b"#!/bin/sh"), Some(PayloadType::ShellScript));
    }

    #[test]
    fn case_and_leading_whitespace_are_ignored() {
        assert_eq!(PayloadType::sniff(b"  \t\r\n#Cloud-Config\n"), Some(PayloadType::CloudConfig));
        assert_eq!(PayloadType::sniff(b"\x1c\x1f#CLOUD-BOOTHOOK\n"), Some(PayloadType::CloudBoothook));
        assert_eq!(
            PayloadType::sniff("\u{3000}\u{a0}## Template: Jinja\n".as_bytes()),
            Some(PayloadType::JinjaTemplate)
        );
        // KELVIN SIGN lower-cases to 'k', as in Python.
        assert_eq!(PayloadType::sniff("#cloud-boothoo\u{212a}".as_bytes()), Some(PayloadType::CloudBoothook));
        assert_eq!(PayloadType::sniff(b"#cloud-config\r\nx: 1\r\n"), Some(PayloadType::CloudConfig));
    }

    #[test]
    fn no_sentinel_no_type() {
        assert_eq!(PayloadType::sniff(b""), None);
        assert_eq!(PayloadType::sniff(b"   \n"), None);
        assert_eq!(PayloadType::sniff(b"hello\n#!/bin/sh"), None);
        assert_eq!(PayloadType::sniff(b"# cloud-config"), None);
        assert_eq!(PayloadType::sniff(b"\xff#!/bin/sh"), None);
        assert_eq!(PayloadType::sniff(b"\x00#!/bin/sh"), None);
        // Invalid UTF-8 after the sentinel does not matter.
        assert_eq!(PayloadType::sniff(b"#!/bin/sh\n\xff\xfe"), Some(PayloadType::ShellScript));
    }

    #[test]
    fn gzip_magic() {
        assert!(is_gzip(&[0x1f, 0x8b, 0x08, 0]));
        assert!(!is_gzip(&[0x1f]));
        assert!(!is_gzip(b"#!"));
    }
}
