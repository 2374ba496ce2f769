//! Reading a cloud-config document the way cloud-init will, to refuse the
//! ones it would skip.
//!
//! cloud-init loads each cloud-config part with PyYAML's safe loader and
//! skips the part, with only a warning in the instance's log, when the text
//! is not one YAML document or its top level is not a mapping
//! (`cloudinit.util.load_yaml`, `handlers/cloud_config.py`). Those are
//! refused here with the line at fault. The check is lenient where the two
//! YAML readers could disagree: only syntax errors, characters PyYAML's
//! reader refuses, several documents and a non-mapping top level are
//! refused; constructor-level problems (unknown tags, unhashable keys) are
//! left to cloud-init.

use serde_saphyr::granit_parser::{ErrorKind, Event, Parser, ScalarStyle};

use super::error::{UserDataError, UserDataErrorReason};

/// Where a cloud-config document is, for messages.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Location {
    /// The whole user data is the document.
    Whole,
    /// The document is this (1-based) MIME part.
    MimePart(usize),
}

impl Location {
    fn describe(self) -> String {
        match self {
            Self::Whole => "the user data's cloud-config".to_owned(),
            Self::MimePart(index) => format!("the cloud-config in MIME part {index} of the user data"),
        }
    }

    fn line(self, line: usize) -> String {
        match self {
            Self::Whole => format!("line {line}"),
            Self::MimePart(_) => format!("line {line} of the part"),
        }
    }
}

/// The top-level keys of a valid cloud-config that the managed part merges
/// lists into, with the line of their (last) value when it is not a list.
#[derive(Debug, Default)]
pub(crate) struct TopLevel {
    pub(crate) not_lists: Vec<(&'static str, usize)>,
}

/// The keys the managed part adds entries to.
pub(crate) const MANAGED_KEYS: [&str; 2] = ["write_files", "runcmd"];

fn refused(location: Location, detail: String) -> UserDataError {
    UserDataError::new(
        UserDataErrorReason::InvalidCloudConfig,
        format!("{} {detail}; cloud-init would skip it and apply none of it", location.describe()),
    )
}

/// 1-based line of a byte offset (`\r\n`, `\r` and `\n` end lines).
fn line_of(text: &[u8], offset: usize) -> usize {
    let head = &text[..offset.min(text.len())];
    let crlf = head.windows(2).filter(|w| w == b"\r\n").count();
    1 + head.iter().filter(|b| **b == b'\n' || **b == b'\r').count() - crlf
}

/// PyYAML's reader refuses any character outside this set, anywhere in
/// the text (`yaml.reader.Reader.NON_PRINTABLE`).
fn pyyaml_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || u32::from(c) >= 0x10000
}

/// Checks one cloud-config document (the payload cloud-init's handler gets).
pub(crate) fn check(payload: &[u8], location: Location) -> Result<TopLevel, UserDataError> {
    let text = std::str::from_utf8(payload).map_err(|e| {
        refused(
            location,
            format!(
                "is not valid UTF-8 (at {}); in a MIME part, send non-ASCII text with Content-Transfer-Encoding: \
                 base64",
                location.line(line_of(payload, e.valid_up_to()))
            ),
        )
    })?;
    if let Some((offset, c)) = text.char_indices().find(|(_, c)| !pyyaml_printable(*c)) {
        return Err(refused(
            location,
            format!(
                "contains the control character U+{:04X} at {}, which YAML does not allow",
                u32::from(c),
                location.line(line_of(payload, offset))
            ),
        ));
    }
    walk(text, location)
}

/// The first node of a document decides; the keys of a top-level mapping
/// are followed one level deep.
fn walk(text: &str, location: Location) -> Result<TopLevel, UserDataError> {
    let mut top = TopLevel::default();
    let mut documents = 0;
    let mut depth = 0usize;
    // Inside the top-level mapping: the next node at depth 1 is a key.
    let mut expect_key = true;
    let mut key: Option<&'static str> = None;
    for event in Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(event) => event,
            // Deeper than this reader follows: cloud-init may still read it.
            Err(e) if matches!(e.kind(), ErrorKind::RecursionLimitExceeded) => return Ok(TopLevel::default()),
            Err(e) => {
                let mark = e.marker();
                return Err(refused(
                    location,
                    format!(
                        "is not valid YAML: {} at {}, column {}",
                        bounded_kind(e.kind()),
                        location.line(mark.line()),
                        mark.col() + 1
                    ),
                ));
            }
        };
        let line = span.start.line();
        match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return Err(refused(
                        location,
                        format!(
                            "holds more than one YAML document (the second starts at {}), and cloud-init reads \
                             exactly one; remove the '---' separator",
                            location.line(line)
                        ),
                    ));
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) | Event::Scalar(..) | Event::Alias(..) => {
                let is_start = matches!(event, Event::MappingStart(..) | Event::SequenceStart(..));
                if depth == 0 {
                    if !matches!(event, Event::MappingStart(..)) && !is_null(&event) {
                        let what = match event {
                            Event::SequenceStart(..) => "a list",
                            _ => "a single value",
                        };
                        return Err(refused(
                            location,
                            format!(
                                "is {what} (at {}), not a mapping of keys such as 'runcmd:' and 'write_files:'",
                                location.line(line)
                            ),
                        ));
                    }
                } else if depth == 1 {
                    if expect_key {
                        key = match &event {
                            Event::Scalar(value, ..) => MANAGED_KEYS.into_iter().find(|k| k == value),
                            _ => None,
                        };
                    } else if let Some(key) = key.take() {
                        // PyYAML keeps the last of duplicate keys. An alias is
                        // not followed: it may well name a list.
                        top.not_lists.retain(|(k, _)| *k != key);
                        if !matches!(event, Event::SequenceStart(..) | Event::Alias(..)) {
                            top.not_lists.push((key, line));
                        }
                    }
                    expect_key = !expect_key;
                }
                if is_start {
                    depth += 1;
                }
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(top)
}

/// A null top level (an empty document, or only comments): cloud-init
/// skips it without harm, so it is allowed.
fn is_null(event: &Event<'_>) -> bool {
    match event {
        Event::Scalar(value, ScalarStyle::Plain, _, None) => {
            matches!(value.as_ref(), "" | "~" | "null" | "Null" | "NULL")
        }
        _ => false,
    }
}

/// The parser's description of an error: a fixed text, or one escaped
/// character; bounded all the same.
fn bounded_kind(kind: &ErrorKind) -> String {
    let text = kind.to_string();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// Refuses a document with a managed key that is not a list: cloud-init
/// would drop the managed entries (null, number, mapping) or the user's
/// value (a string), and its own module fails on anything but a list anyway.
pub(crate) fn check_mergeable(top: &TopLevel, location: Location) -> Result<(), UserDataError> {
    match top.not_lists.first() {
        None => Ok(()),
        Some((key, line)) => Err(UserDataError::new(
            UserDataErrorReason::CloudConfigNotMergeable,
            format!(
                "{} sets {key} to something other than a list (at {}): with sshCertificateAuthorityID the SSH \
                 certificate authority's {key} entries are appended to it, which cloud-init can only do to a \
                 list; write {key} as a list (or remove it)",
                location.describe(),
                location.line(*line)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn error(doc: &str) -> String {
        check(doc.as_bytes(), Location::Whole).unwrap_err().to_string()
    }

    #[test]
    fn valid_documents() {
        for doc in [
            "#cloud-config\n",
            "#cloud-config\n# only comments\n",
            "#cloud-config\n~\n",
            "#cloud-config\n---\nruncmd: [ls]\n...\n",
            "#cloud-config\r\npackages: [htop]\r\n",
            "#cloud-config\nruncmd: [ls]\nruncmd: [pwd]\n",
            "\u{feff}#cloud-config\nx: \u{e9}\u{1f600}\n",
            "#cloud-config\nbase: &b [1]\nruncmd: *b\n",
        ] {
            check(doc.as_bytes(), Location::Whole).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        }
    }

    #[test]
    fn broken_yaml_names_the_line() {
        let message = error("#cloud-config\nruncmd: [ls]\nfoo: [unclosed\n");
        assert!(message.starts_with("the user data's cloud-config is not valid YAML: "), "{message}");
        assert!(message.contains("unclosed bracket '[' at line 3, column 6"), "{message}");
        let message = error("#cloud-config\nruncmd:\n  - ls\n - pwd\n");
        assert!(message.contains("line 4"), "{message}");
        let part = check(b"a: 1\nb: {c: d\n", Location::MimePart(2)).unwrap_err();
        assert_eq!(part.reason(), UserDataErrorReason::InvalidCloudConfig);
        assert!(part.message().contains("MIME part 2") && part.message().contains("line 2 of the part"), "{part}");
    }

    #[test]
    fn non_mappings_and_several_documents() {
        assert!(error("#cloud-config\n- ls\n").contains("is a list (at line 2)"));
        assert!(error("#cloud-config\nruncmd\n").contains("is a single value (at line 2)"));
        assert!(error("#cloud-config\n'null'\n").contains("single value"));
        assert!(
            error("#cloud-config\na: 1\n---\nb: 2\n")
                .contains("more than one YAML document (the second starts at line 3)")
        );
        assert!(error("#cloud-config\na: 1\n---\n").contains("more than one"));
    }

    #[test]
    fn characters_pyyaml_refuses() {
        assert!(error("#cloud-config\nx: \u{1b}[0m\n").contains("U+001B at line 2"));
        assert!(error("#cloud-config\n# \u{7f}\n").contains("U+007F"));
        let invalid = check(b"#cloud-config\nx: caf\xe9\n", Location::MimePart(1)).unwrap_err();
        assert!(invalid.message().contains("not valid UTF-8 (at line 2 of the part)"), "{invalid}");
    }

    #[test]
    fn errors_quote_no_content() {
        let secret = "s3cr3t-value";
        for doc in [
            format!("#cloud-config\npassword: [{secret}\n"),
            format!("#cloud-config\n- {secret}\n"),
            format!("#cloud-config\n{secret}: \"\\q\"\n"),
        ] {
            let message = error(&doc);
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[test]
    fn managed_keys_that_are_not_lists() {
        let not_lists = |doc: &str| check(doc.as_bytes(), Location::Whole).unwrap().not_lists;
        assert_eq!(not_lists("runcmd: [ls]\nwrite_files:\n  - path: /x\nbase: &b [1]\n"), vec![]);
        assert_eq!(not_lists("base: &b [1]\nruncmd: *b\n").len(), 0, "an alias is not followed");
        for value in ["", "~", "null", "{}", "{a: 1}", "5", "yes", "echo hi", "'[ls]'"] {
            assert_eq!(not_lists(&format!("x: 1\nwrite_files: {value}\n")), vec![("write_files", 2)], "{value:?}");
        }
        // Nested keys of the same name are not the managed ones; the last duplicate counts.
        assert_eq!(not_lists("users:\n  - runcmd: 1\nruncmd: ~\nruncmd: [ls]\n"), vec![]);
        assert_eq!(not_lists("runcmd: [ls]\nruncmd: ~\n"), vec![("runcmd", 2)]);
        let err = check_mergeable(&check(b"#cloud-config\nruncmd:\n", Location::Whole).unwrap(), Location::Whole)
            .unwrap_err();
        assert_eq!(err.reason(), UserDataErrorReason::CloudConfigNotMergeable);
        assert!(err.message().contains("sets runcmd to something other than a list (at line 2)"), "{err}");
    }
}
