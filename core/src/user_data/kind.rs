//! What cloud-init makes of user data: gzip, a MIME message (it finds
//! `mime-version:` in the first 4 KiB), or a single payload typed by its
//! first line (`cloudinit.user_data.convert_string` and `_process_msg`).

use super::cloud_config::{self, Location};
use super::error::{UserDataError, UserDataErrorReason, excerpt};
use super::mime::{self, Body, Entity};
use super::payload_type::{PayloadType, is_gzip};
use super::transfer::decoded_payload;

/// How many leading bytes cloud-init searches for `mime-version:`.
pub const MIME_SNIFF_LEN: usize = 4096;

/// The MIME types cloud-init inflates (`DECOMP_TYPES`).
const DECOMPRESSED_TYPES: [&str; 8] = [
    "application/gzip",
    "application/gzip-compressed",
    "application/gzipped",
    "application/x-compress",
    "application/x-compressed",
    "application/x-gunzip",
    "application/x-gzip",
    "application/x-gzip-compressed",
];

/// Part types cloud-init re-types from the body (`TYPE_NEEDED` and
/// `text/x-shellscript`).
const RETYPED: [&str; 3] = ["text/plain", "text/x-not-multipart", "text/x-shellscript"];

/// Part types cloud-init has no handler for.
const UNTYPED: [&str; 2] = ["text/plain", "text/x-not-multipart"];

/// What valid user data is, as cloud-init will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadKind {
    /// Gzip-compressed: cloud-init inflates it; it is passed on untouched.
    Gzip,
    /// One payload typed by its first line.
    Single(PayloadType),
    /// A MIME message; the cloud-init type of each leaf part, depth first.
    Mime {
        /// e.g. `["text/x-shellscript", "text/cloud-config"]`.
        part_types: Vec<String>,
    },
}

/// One part as cloud-init's MIME processor hands it to its handlers: its
/// cloud-init type and its payload after transfer decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudInitPart {
    /// The type cloud-init dispatches on, e.g. `text/cloud-config`.
    pub content_type: String,
    /// The payload bytes the handler gets.
    pub payload: Vec<u8>,
}

/// Valid user data together with what the merge needs of it.
#[derive(Debug)]
pub(crate) enum Classified<'a> {
    Gzip,
    Single(PayloadType),
    Mime { message: Entity<'a>, parts: Vec<CloudInitPart> },
}

impl Classified<'_> {
    pub(crate) fn kind(&self) -> PayloadKind {
        match self {
            Self::Gzip => PayloadKind::Gzip,
            Self::Single(t) => PayloadKind::Single(*t),
            Self::Mime { parts, .. } => {
                PayloadKind::Mime { part_types: parts.iter().map(|p| p.content_type.clone()).collect() }
            }
        }
    }
}

/// cloud-init's test for a MIME message.
pub fn looks_like_mime(data: &[u8]) -> bool {
    let head = &data[..data.len().min(MIME_SNIFF_LEN)];
    head.windows(b"mime-version:".len()).any(|w| w.eq_ignore_ascii_case(b"mime-version:"))
}

const SENTINELS: &str = "#cloud-config, #!, #include, #include-once, #cloud-boothook, #part-handler, \
                         #cloud-config-archive, #cloud-config-jsonp or ## template: jinja";

/// Classifies non-empty user data, refusing what cloud-init would ignore,
/// drop or choke on, cloud-config documents it would skip included.
pub(crate) fn classify(data: &[u8]) -> Result<Classified<'_>, UserDataError> {
    let classified = classify_payloads(data)?;
    for (location, document) in cloud_config_documents(data, &classified) {
        cloud_config::check(document, location)?;
    }
    Ok(classified)
}

/// The cloud-config documents cloud-init's handler will load: the whole data
/// or each `text/cloud-config` part (not templates, archives or JSON
/// patches, which are not read here).
pub(crate) fn cloud_config_documents<'a>(data: &'a [u8], classified: &'a Classified<'_>) -> Vec<(Location, &'a [u8])> {
    match classified {
        Classified::Single(PayloadType::CloudConfig) => vec![(Location::Whole, data)],
        Classified::Mime { parts, .. } => parts
            .iter()
            .enumerate()
            .filter(|(_, part)| part.content_type == PayloadType::CloudConfig.mime_type())
            .map(|(i, part)| (Location::MimePart(i + 1), part.payload.as_slice()))
            .collect(),
        Classified::Gzip | Classified::Single(_) => Vec::new(),
    }
}

fn classify_payloads(data: &[u8]) -> Result<Classified<'_>, UserDataError> {
    if is_gzip(data) {
        return Ok(Classified::Gzip);
    }
    if looks_like_mime(data) {
        let text = std::str::from_utf8(data).map_err(|e| {
            UserDataError::new(
                UserDataErrorReason::MimeNotUtf8,
                format!(
                    "user data is a MIME message (it has a MIME-Version header in its first 4 KiB) but is not valid \
                     UTF-8 (invalid byte at offset {}), which cloud-init cannot read; encode binary parts with \
                     Content-Transfer-Encoding: base64",
                    e.valid_up_to()
                ),
            )
        })?;
        let message = mime::parse_message(text)?;
        let mut parts = Vec::new();
        collect_parts(&message, &mut parts)?;
        return Ok(Classified::Mime { message, parts });
    }
    match PayloadType::sniff(data) {
        Some(t) if t.is_mime_only() => Err(UserDataError::new(
            UserDataErrorReason::MimeOnlyPayloadType,
            format!(
                "user data starts with '{}', a type cloud-init honours only as the Content-Type of a MIME part; \
                 send a MIME multipart message with a part of that type, or start a script with #!",
                t.prefix()
            ),
        )),
        Some(t) => Ok(Classified::Single(t)),
        None => Err(UserDataError::new(
            UserDataErrorReason::UnknownPayloadType,
            format!(
                "user data is in no format cloud-init recognises ({} bytes): its first line must start with \
                 {SENTINELS}; or it must be a MIME multipart message with a MIME-Version header, or gzip-compressed",
                data.len()
            ),
        )),
    }
}

fn collect_parts(entity: &Entity<'_>, out: &mut Vec<CloudInitPart>) -> Result<(), UserDataError> {
    match &entity.body {
        Body::Multipart(parts) => {
            for part in parts {
                collect_parts(part, out)?;
            }
            Ok(())
        }
        Body::Leaf(payload) => {
            let index = out.len() + 1;
            let declared = entity.content_type.as_str();
            let quoted = excerpt(declared, 100);
            if declared.starts_with("message/") {
                return Err(UserDataError::new(
                    UserDataErrorReason::UnsupportedMimePart,
                    format!(
                        "MIME part {index} of the user data is {quoted}: messages nested in user data are not \
                         supported; put their parts in the multipart directly"
                    ),
                ));
            }
            if let Some(encoding @ ("x-uuencode" | "uuencode" | "uue" | "x-uue")) = entity.transfer_encoding.as_deref()
            {
                return Err(UserDataError::new(
                    UserDataErrorReason::UnsupportedMimePart,
                    format!(
                        "MIME part {index} of the user data uses Content-Transfer-Encoding {encoding}, which is not \
                         supported; use base64"
                    ),
                ));
            }
            let decoded = decoded_payload(payload, entity.transfer_encoding.as_deref());
            if DECOMPRESSED_TYPES.contains(&declared) {
                // cloud-init inflates and re-types it; the operator cannot.
                out.push(CloudInitPart { content_type: declared.to_owned(), payload: decoded });
                return Ok(());
            }
            let mut effective = declared.to_owned();
            if RETYPED.contains(&declared) {
                if let Some(t) = PayloadType::sniff(&decoded) {
                    effective = t.mime_type().to_owned();
                } else if UNTYPED.contains(&declared) && !decoded.is_empty() {
                    return Err(UserDataError::new(
                        UserDataErrorReason::UntypedMimePart,
                        format!(
                            "MIME part {index} of the user data is {quoted} and its body starts with no \
                             cloud-init sentinel, so cloud-init would ignore it; give the part a Content-Type such \
                             as text/cloud-config or text/x-shellscript, or start its body with {SENTINELS}"
                        ),
                    ));
                }
            }
            out.push(CloudInitPart { content_type: effective, payload: decoded });
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kind(data: &[u8]) -> Result<PayloadKind, UserDataErrorReason> {
        classify(data).map(|c| c.kind()).map_err(|e| e.reason())
    }

    fn mime(types: &[&str]) -> Result<PayloadKind, UserDataErrorReason> {
        Ok(PayloadKind::Mime { part_types: types.iter().map(|s| (*s).to_owned()).collect() })
    }

    #[test]
    fn mime_detection_is_cloud_inits() {
        assert!(looks_like_mime(b"MIME-Version: 1.0\n"));
        assert!(looks_like_mime(b"x\nmime-VERSION:1.0"));
        let mut late = vec![b'#'; MIME_SNIFF_LEN - 13];
        late.extend_from_slice(b"MIME-Version:");
        assert!(looks_like_mime(&late));
        late.insert(0, b'#');
        assert!(!looks_like_mime(&late));
        assert!(!looks_like_mime(b"MIME-Version 1.0"));
    }

    #[test]
    fn single_payloads() {
        assert_eq!(kind(b"#!/bin/sh\n"), Ok(PayloadKind::Single(PayloadType::ShellScript)));
        assert_eq!(kind(b"#cloud-config\r\n{}\r\n"), Ok(PayloadKind::Single(PayloadType::CloudConfig)));
        assert_eq!(kind(b"hello"), Err(UserDataErrorReason::UnknownPayloadType));
        assert_eq!(kind(b"\n"), Err(UserDataErrorReason::UnknownPayloadType));
        assert_eq!(kind(b"text/x-shellscript-per-boot\n"), Err(UserDataErrorReason::MimeOnlyPayloadType));
        assert_eq!(kind(&[0x1f, 0x8b, 0, 1]), Ok(PayloadKind::Gzip));
    }

    #[test]
    fn multipart_part_types() {
        let msg = b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\n#cloud-config\n--b\nContent-Type: text/x-shellscript\n\n#cloud-boothook\n--b\nContent-Type: text/x-shellscript\n\necho no shebang\n--b\nContent-Type: application/gzip\nContent-Transfer-Encoding: base64\n\nH4sI\n--b\nContent-Type: text/plain\n\n--b\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\nIyEvYmluL3No\n--b\nContent-Type: application/x-my-handler\n\nanything\n--b--\n";
        assert_eq!(
            kind(msg),
            mime(&[
                "text/cloud-config",
                "text/cloud-boothook",
                "text/x-shellscript",
                "application/gzip",
                "text/plain",
                "text/x-shellscript",
                "application/x-my-handler"
            ])
        );
    }

    #[test]
    fn mime_errors() {
        assert_eq!(
            kind(b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\nhello\n--b--\n"),
            Err(UserDataErrorReason::UntypedMimePart)
        );
        assert_eq!(kind(b"MIME-Version: 1.0\n\nhello"), Err(UserDataErrorReason::UntypedMimePart));
        assert_eq!(kind(b"MIME-Version: 1.0\n\n#!/bin/sh\n\xff"), Err(UserDataErrorReason::MimeNotUtf8));
        // A non-ASCII character before the sentinel defeats cloud-init's typing.
        assert_eq!(
            kind("MIME-Version: 1.0\n\n\u{a0}#!/bin/sh\n".as_bytes()),
            Err(UserDataErrorReason::UntypedMimePart)
        );
    }

    #[test]
    fn script_mentioning_mime_version_is_mime_to_cloud_init() {
        assert_eq!(kind(b"#!/bin/sh\necho MIME-Version: 1.0\n"), mime(&["text/x-shellscript"]));
    }
}
