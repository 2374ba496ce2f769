//! Building the `multipart/mixed` message: the user's parts first, byte for
//! byte, then the managed part.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::kind::Classified;
use super::mime::Body;

/// One entity of the output message.
#[derive(Debug)]
pub(crate) enum Piece<'a> {
    /// A part of the user's multipart copied as it is, ending with the line
    /// ending that belongs to the boundary after it.
    Part(&'a [u8]),
    /// A whole entity (headers, blank line, body) copied from the user's
    /// data, which needs a line ending before the next boundary, and a blank
    /// line first when it ends inside its header block.
    Entity { raw: &'a [u8], ended_in_headers: bool },
    /// A payload to wrap in headers of ours, with a cloud-init `Merge-Type`
    /// header when it says how the part merges into the ones before it.
    Payload { content_type: &'a str, filename: Option<&'a str>, merge_type: Option<&'a str>, body: &'a [u8] },
}

/// The user's pieces: a single payload becomes one typed part; a multipart
/// gives its top-level parts, each exactly as written (a `multipart/digest`,
/// whose untyped parts mean something else inside `multipart/mixed`, and a
/// non-multipart MIME message stay whole).
pub(crate) fn user_pieces<'a>(data: &'a [u8], classified: &'a Classified<'a>) -> Vec<Piece<'a>> {
    match classified {
        // Refused before merging: the operator does not inflate user data.
        Classified::Gzip => Vec::new(),
        Classified::Single(t) => {
            vec![Piece::Payload { content_type: t.mime_type(), filename: None, merge_type: None, body: data }]
        }
        Classified::Mime { message, .. } => match &message.body {
            Body::Multipart(parts) if message.content_type != "multipart/digest" => {
                parts.iter().map(|p| Piece::Part(p.raw.as_bytes())).collect()
            }
            _ => vec![Piece::Entity { raw: message.raw.as_bytes(), ended_in_headers: message.ended_in_headers }],
        },
    }
}

/// Encodes a payload part. ASCII bodies go as they are; anything else is
/// base64, because cloud-init turns non-ASCII text of a part that is not
/// transfer-encoded into Python escape sequences.
fn encode_payload(content_type: &str, filename: Option<&str>, merge_type: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() * 4 / 3 + 200);
    out.extend_from_slice(format!("Content-Type: {content_type}; charset=\"utf-8\"\n").as_bytes());
    let ascii = body.is_ascii();
    let encoding = if ascii { "7bit" } else { "base64" };
    out.extend_from_slice(format!("Content-Transfer-Encoding: {encoding}\n").as_bytes());
    if let Some(name) = filename {
        out.extend_from_slice(format!("Content-Disposition: attachment; filename=\"{name}\"\n").as_bytes());
    }
    if let Some(merge_type) = merge_type {
        out.extend_from_slice(format!("Merge-Type: {merge_type}\n").as_bytes());
    }
    out.push(b'\n');
    if ascii {
        out.extend_from_slice(body);
    } else {
        let encoded = STANDARD.encode(body);
        for line in encoded.as_bytes().chunks(76) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

const BOUNDARY_STEM: &[u8] = b"unikorn-user-data-";

/// A boundary that occurs in no part, chosen deterministically and in
/// linear time: `==unikorn-user-data-N==` with the smallest `N` that no part
/// mentions after the stem.
fn boundary_for<'p>(parts: impl Iterator<Item = &'p [u8]>) -> String {
    let mut taken = std::collections::BTreeSet::new();
    for part in parts {
        let mut rest = part;
        while let Some(i) = rest.windows(BOUNDARY_STEM.len()).position(|w| w == BOUNDARY_STEM) {
            rest = &rest[i + BOUNDARY_STEM.len()..];
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            if let Some(n) = std::str::from_utf8(&rest[..digits]).ok().and_then(|d| d.parse::<u64>().ok()) {
                taken.insert(n);
            }
        }
    }
    let n = (0..).find(|n| !taken.contains(n)).unwrap_or_default();
    format!("=={}{n}==", String::from_utf8_lossy(BOUNDARY_STEM))
}

/// What goes between a piece and the next boundary line.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// The piece ends with the line ending that belongs to the boundary.
    Own,
    /// The piece ends inside its header block.
    AfterHeaders,
    /// The piece needs a line ending.
    Add,
}

/// Assembles `multipart/mixed` from the pieces.
pub(crate) fn assemble(pieces: &[Piece<'_>]) -> Vec<u8> {
    let parts: Vec<(Vec<u8>, Ending)> = pieces
        .iter()
        .map(|piece| match piece {
            Piece::Part(raw) => (raw.to_vec(), Ending::Own),
            Piece::Entity { raw, ended_in_headers: true } => (raw.to_vec(), Ending::AfterHeaders),
            Piece::Entity { raw, ended_in_headers: false } => (raw.to_vec(), Ending::Add),
            Piece::Payload { content_type, filename, merge_type, body } => {
                (encode_payload(content_type, *filename, *merge_type, body), Ending::Add)
            }
        })
        .collect();
    let boundary = boundary_for(parts.iter().map(|(p, _)| p.as_slice()));
    let mut out = Vec::with_capacity(parts.iter().map(|(p, _)| p.len()).sum::<usize>() + 200);
    out.extend_from_slice(format!("Content-Type: multipart/mixed; boundary=\"{boundary}\"\n").as_bytes());
    out.extend_from_slice(b"MIME-Version: 1.0\n\n");
    for (part, ending) in &parts {
        out.extend_from_slice(format!("--{boundary}\n").as_bytes());
        out.extend_from_slice(part);
        // The line ending before a boundary belongs to the boundary: a part
        // of the user's keeps its own; other pieces get one. After a lone CR
        // a bare LF would fuse with it into CRLF, so that gets CRLF.
        let ends_line = part.ends_with(b"\n") || part.ends_with(b"\r");
        let eol: &[u8] = if part.ends_with(b"\r") { b"\r\n" } else { b"\n" };
        match ending {
            Ending::Own if ends_line => {}
            // A complete last header line: a blank line must end the header
            // block first, or ours would, and a header-only entity whose
            // trailing `From ` line Python moves to the body would lose the
            // line ending that the boundary then takes.
            Ending::AfterHeaders if ends_line => {
                out.extend_from_slice(eol);
                out.extend_from_slice(eol);
            }
            _ => out.extend_from_slice(eol),
        }
    }
    out.extend_from_slice(format!("--{boundary}--\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_avoids_part_content() {
        let parts: [&[u8]; 2] = [b"--==unikorn-user-data-0==\n", b"==unikorn-user-data-1==unikorn-user-data-3"];
        assert_eq!(boundary_for(parts.into_iter()), "==unikorn-user-data-2==");
        let parts: [&[u8]; 1] = [b"unikorn-user-data-99999999999999999999999 unikorn-user-data-"];
        assert_eq!(boundary_for(parts.into_iter()), "==unikorn-user-data-0==");
    }

    #[test]
    fn non_ascii_payloads_are_base64() {
        let part = encode_payload("text/x-shellscript", None, None, "#!/bin/sh\necho \u{e9}\n".as_bytes());
        let text = String::from_utf8(part).unwrap_or_default();
        assert!(text.contains("Content-Transfer-Encoding: base64\n"), "{text}");
        let part = encode_payload("text/cloud-config", Some("n"), Some("list(append)"), b"#cloud-config\n");
        let text = String::from_utf8(part).unwrap_or_default();
        assert_eq!(
            text,
            "Content-Type: text/cloud-config; charset=\"utf-8\"\nContent-Transfer-Encoding: 7bit\n\
             Content-Disposition: attachment; filename=\"n\"\nMerge-Type: list(append)\n\n#cloud-config\n"
        );
    }
}
