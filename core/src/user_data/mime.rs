//! Reading a MIME message the way cloud-init reads it.
//!
//! cloud-init hands user data that mentions `mime-version:` in its first
//! 4 KiB to Python's `email.message_from_string` (the `compat32` policy).
//! That parser is lenient and line based, and its rules decide which parts
//! cloud-init sees, so this module follows them instead of a stricter MIME
//! reading:
//! - lines end in `\r\n`, `\r` or `\n`;
//! - the header block is the run of lines matching
//!   `^(From |[\x21-\x39\x3b-\x7e]*:|[\t ])`; a blank line ends it and is
//!   dropped, any other line ends it and starts the body;
//! - a boundary line is `--boundary`, optionally `--`, optional blanks, end;
//!   a part ends at a boundary line of its own multipart or of any enclosing
//!   one, and the line ending before a boundary line belongs to the boundary;
//! - repeated boundary lines produce no empty parts.
//!
//! Where Python only records a defect (no boundary parameter, no opening
//! boundary, no closing boundary), cloud-init silently drops or truncates
//! user data, so those are errors here.

use std::borrow::Cow;

use super::error::{UserDataError, UserDataErrorReason, excerpt};
use super::payload_type::{is_python_space, python_strip};

/// Deepest nesting of multiparts followed.
pub(crate) const MAX_DEPTH: usize = 16;

/// One MIME entity (a message or a part).
#[derive(Debug)]
pub(crate) struct Entity<'a> {
    /// The entity exactly as in the input: headers, blank line, body. For a
    /// part, this ends with the line ending that belongs to the next
    /// boundary line (RFC 2046), which is not part of the payload.
    pub(crate) raw: &'a str,
    /// Python's `get_content_type()`: lower-case `type/subtype`.
    pub(crate) content_type: String,
    /// The first `Content-Transfer-Encoding` value, lower-cased, if any.
    pub(crate) transfer_encoding: Option<String>,
    /// The input ended (or a boundary came) before the header block did:
    /// there is no blank line and no body line.
    pub(crate) ended_in_headers: bool,
    pub(crate) body: Body<'a>,
}

#[derive(Debug)]
pub(crate) enum Body<'a> {
    /// The payload text, still transfer-encoded.
    Leaf(Cow<'a, str>),
    /// The parts of a multipart, in order.
    Multipart(Vec<Entity<'a>>),
}

/// Parses a whole message.
pub(crate) fn parse_message(text: &str) -> Result<Entity<'_>, UserDataError> {
    let mut reader = Reader { text, pos: 0, separators: Vec::new() };
    parse_entity(&mut reader, "text/plain", 0)
}

struct Reader<'a> {
    text: &'a str,
    pos: usize,
    /// `--boundary` of every enclosing multipart whose part is being read.
    separators: Vec<String>,
}

impl<'a> Reader<'a> {
    fn line_at(&self, pos: usize) -> &'a str {
        let rest = &self.text[pos..];
        let bytes = rest.as_bytes();
        match bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            None => rest,
            Some(i) if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') => &rest[..i + 2],
            Some(i) => &rest[..=i],
        }
    }

    /// The next line, or `None` at the end of the input or at a boundary
    /// line of an enclosing multipart (which is left unread).
    fn read_line(&mut self) -> Option<&'a str> {
        if self.pos >= self.text.len() {
            return None;
        }
        let line = self.line_at(self.pos);
        if self.separators.iter().any(|sep| boundary_match(line, sep).is_some()) {
            return None;
        }
        self.pos += line.len();
        Some(line)
    }
}

/// `Some(is_close)` when `line` is a boundary line for `separator`.
fn boundary_match(line: &str, separator: &str) -> Option<bool> {
    let rest = line.strip_prefix(separator)?;
    let (close, rest) = match rest.strip_prefix("--") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    matches!(rest, "" | "\n" | "\r" | "\r\n").then_some(close)
}

fn is_header_line(line: &str) -> bool {
    if line.starts_with("From ") || line.starts_with([' ', '\t']) {
        return true;
    }
    let name_end = line.bytes().position(|b| b == b':' || !(0x21..=0x7e).contains(&b));
    matches!(name_end, Some(i) if line.as_bytes()[i] == b':')
}

fn starts_with_line_ending(line: &str) -> bool {
    line.starts_with(['\r', '\n'])
}

/// Removes one trailing `\r\n`, `\r` or `\n`.
pub(crate) fn strip_line_ending(s: &str) -> &str {
    s.strip_suffix("\r\n").or_else(|| s.strip_suffix('\n')).or_else(|| s.strip_suffix('\r')).unwrap_or(s)
}

struct Headers {
    fields: Vec<(String, String)>,
}

impl Headers {
    /// Python's `_parse_headers` (compat32): continuation lines, the unix
    /// `From ` line, fields without a name dropped. Returns the headers and
    /// a trailing `From ` line that Python pushes back into the body.
    fn parse<'a>(lines: &[&'a str]) -> (Self, Option<&'a str>) {
        let mut fields = Vec::new();
        let mut current: Option<(&str, Vec<&str>)> = None;
        let mut pushed_back = None;
        for (lineno, line) in lines.iter().enumerate() {
            if line.starts_with([' ', '\t']) {
                if let Some((_, source)) = current.as_mut() {
                    source.push(line);
                }
                continue;
            }
            if let Some(field) = current.take() {
                fields.push(Self::field(field));
            }
            if line.starts_with("From ") {
                if lineno + 1 == lines.len() && lineno != 0 {
                    pushed_back = Some(*line);
                    break;
                }
                continue;
            }
            match line.find(':') {
                Some(i) if i > 0 => current = Some((&line[..i], vec![line])),
                _ => {}
            }
        }
        if let Some(field) = current.take() {
            fields.push(Self::field(field));
        }
        (Self { fields }, pushed_back)
    }

    fn field((name, source): (&str, Vec<&str>)) -> (String, String) {
        let mut value = String::new();
        if let Some(first) = source.first() {
            value.push_str(first[name.len() + 1..].trim_start_matches([' ', '\t']));
        }
        for line in source.iter().skip(1) {
            value.push_str(line);
        }
        let value = value.trim_end_matches(['\r', '\n']).to_owned();
        (name.to_owned(), value)
    }

    /// The first field of that name (names compare case-insensitively).
    fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Python's `get_content_type()`.
    fn content_type(&self, default: &str) -> String {
        match self.get("content-type") {
            None => default.to_owned(),
            Some(value) => {
                let main = value.split(';').next().unwrap_or_default();
                let main = python_strip(main).to_lowercase();
                if main.matches('/').count() == 1 { main } else { "text/plain".to_owned() }
            }
        }
    }

    /// Python's `get_boundary()`: `Err` for RFC 2231 encoded boundaries,
    /// which this reader does not decode.
    fn boundary(&self) -> Result<Option<String>, ()> {
        let Some(value) = self.get("content-type") else { return Ok(None) };
        let mut found = None;
        for param in parse_params(value).into_iter().skip(1) {
            let (name, val) = match param.split_once('=') {
                Some((name, val)) => (python_strip(name), python_strip(val)),
                None => (python_strip(&param), ""),
            };
            let name = name.to_lowercase();
            if name.starts_with("boundary*") {
                return Err(());
            }
            if name == "boundary" && found.is_none() {
                found = Some(unquote(val).into_owned());
            }
        }
        // get_param unquotes once, collapse_rfc2231_value once more.
        Ok(found.map(|b| unquote(&b).trim_end_matches(is_python_space).to_owned()))
    }
}

/// Python's `email.message._parseparam`, in linear time: a `;` inside an
/// odd number of unescaped quotes does not split.
fn parse_params(value: &str) -> Vec<String> {
    let mut params = Vec::new();
    let mut rest = value;
    loop {
        let bytes = rest.as_bytes();
        let mut in_quotes = false;
        let mut end = bytes.len();
        for (i, b) in bytes.iter().enumerate() {
            if *b == b';' && (i == 0 || !in_quotes) {
                end = i;
                break;
            }
            if *b == b'"' && !(i > 0 && bytes[i - 1] == b'\\') {
                in_quotes = !in_quotes;
            }
        }
        let field = &rest[..end];
        let field = match field.find('=') {
            Some(i) => format!("{}={}", python_strip(&field[..i]).to_lowercase(), python_strip(&field[i + 1..])),
            None => field.to_owned(),
        };
        params.push(python_strip(&field).to_owned());
        match rest[end..].strip_prefix(';') {
            Some(next) => rest = next,
            None => break,
        }
    }
    params
}

/// Python's `email.utils.unquote`.
fn unquote(s: &str) -> Cow<'_, str> {
    if s.chars().count() > 1 {
        if let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            return Cow::Owned(inner.replace("\\\\", "\\").replace("\\\"", "\""));
        }
        if let Some(inner) = s.strip_prefix('<').and_then(|r| r.strip_suffix('>')) {
            return Cow::Borrowed(inner);
        }
    }
    Cow::Borrowed(s)
}

fn mime_error(reason: UserDataErrorReason, message: impl Into<String>) -> UserDataError {
    UserDataError::new(reason, message)
}

fn parse_entity<'a>(reader: &mut Reader<'a>, default_type: &str, depth: usize) -> Result<Entity<'a>, UserDataError> {
    let start = reader.pos;
    let mut header_lines = Vec::new();
    let mut ended_in_headers = false;
    loop {
        let before = reader.pos;
        let Some(line) = reader.read_line() else {
            ended_in_headers = true;
            break;
        };
        if !is_header_line(line) {
            if !starts_with_line_ending(line) {
                reader.pos = before;
            }
            break;
        }
        header_lines.push(line);
    }
    let (headers, pushed_back) = Headers::parse(&header_lines);
    let content_type = headers.content_type(default_type);
    let transfer_encoding = headers.get("content-transfer-encoding").map(str::to_lowercase);

    if content_type.starts_with("multipart/") {
        let parts = parse_multipart(reader, &headers, &content_type, depth)?;
        return Ok(Entity {
            raw: &reader.text[start..reader.pos],
            content_type,
            transfer_encoding,
            ended_in_headers,
            body: Body::Multipart(parts),
        });
    }

    let body_start = reader.pos;
    while reader.read_line().is_some() {}
    let rest = &reader.text[body_start..reader.pos];
    let payload = match pushed_back {
        Some(from_line) => Cow::Owned(format!("{from_line}{rest}")),
        None => Cow::Borrowed(rest),
    };
    Ok(Entity {
        raw: &reader.text[start..reader.pos],
        content_type,
        transfer_encoding,
        ended_in_headers,
        body: Body::Leaf(payload),
    })
}

fn parse_multipart<'a>(
    reader: &mut Reader<'a>,
    headers: &Headers,
    content_type: &str,
    depth: usize,
) -> Result<Vec<Entity<'a>>, UserDataError> {
    // The subtype is the user's: shown escaped and bounded.
    let shown = excerpt(content_type, 100);
    if depth >= MAX_DEPTH {
        return Err(mime_error(
            UserDataErrorReason::MimeTooDeep,
            format!("user data nests MIME multiparts more than {MAX_DEPTH} levels deep"),
        ));
    }
    let boundary = match headers.boundary() {
        Ok(Some(b)) if !b.is_empty() => b,
        Ok(_) => {
            return Err(mime_error(
                UserDataErrorReason::MultipartWithoutBoundary,
                format!(
                    "user data has a {shown} entity without a boundary parameter; \
                     give its Content-Type a boundary, e.g. 'Content-Type: {shown}; boundary=\"XYZ\"'"
                ),
            ));
        }
        Err(()) => {
            return Err(mime_error(
                UserDataErrorReason::MultipartWithoutBoundary,
                format!(
                    "user data has a {shown} entity whose boundary is RFC 2231 encoded (boundary*=...), \
                     which is not supported; use a plain boundary=\"XYZ\" parameter"
                ),
            ));
        }
    };
    let separator = format!("--{boundary}");
    let child_default = if content_type == "multipart/digest" { "message/rfc822" } else { "text/plain" };
    let mut parts = Vec::new();
    let mut in_preamble = true;
    let mut closed = false;
    while let Some(line) = reader.read_line() {
        let Some(close) = boundary_match(line, &separator) else { continue };
        if close {
            closed = true;
            break;
        }
        if in_preamble {
            in_preamble = false;
        }
        // Repeated boundary lines (the closing one included) make no parts.
        loop {
            let before = reader.pos;
            match reader.read_line() {
                Some(next) if boundary_match(next, &separator).is_some() => {}
                Some(_) => {
                    reader.pos = before;
                    break;
                }
                None => break,
            }
        }
        reader.separators.push(separator.clone());
        let part = parse_entity(reader, child_default, depth + 1);
        reader.separators.pop();
        let mut part = part?;
        if let Body::Leaf(payload) = &mut part.body {
            let stripped = strip_line_ending(payload).len();
            match payload {
                Cow::Borrowed(p) => *p = &p[..stripped],
                Cow::Owned(p) => p.truncate(stripped),
            }
        }
        parts.push(part);
    }
    if in_preamble {
        return Err(mime_error(
            UserDataErrorReason::MultipartBoundaryNotFound,
            format!(
                "user data has a {shown} entity whose boundary line ('--' followed by its boundary) never \
                 appears; check that the boundary parameter matches the boundary lines"
            ),
        ));
    }
    if !closed {
        return Err(mime_error(
            UserDataErrorReason::TruncatedMultipart,
            format!(
                "user data has a {shown} entity without its closing boundary line ('--' boundary '--'): \
                 the message looks truncated"
            ),
        ));
    }
    // The epilogue runs to the end of the enclosing entity.
    while reader.read_line().is_some() {}
    Ok(parts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn leaf<'e>(e: &'e Entity<'_>) -> &'e str {
        match &e.body {
            Body::Leaf(p) => p,
            Body::Multipart(_) => panic!("not a leaf"),
        }
    }

    fn parts<'e, 'a>(e: &'e Entity<'a>) -> &'e [Entity<'a>] {
        match &e.body {
            Body::Multipart(p) => p,
            Body::Leaf(_) => panic!("not a multipart"),
        }
    }

    #[test]
    fn splits_multipart_keeping_raw_parts() {
        let text = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b\"\n\npreamble\n--b\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n\n--b\n\n#cloud-config\n--b--\nepilogue\n";
        let msg = parse_message(text).unwrap();
        assert_eq!(msg.content_type, "multipart/mixed");
        let p = parts(&msg);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].raw, "Content-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n\n");
        assert_eq!(p[0].content_type, "text/x-shellscript");
        assert_eq!(leaf(&p[0]), "#!/bin/sh\necho hi\n");
        assert_eq!(p[1].raw, "\n#cloud-config\n");
        assert_eq!(p[1].content_type, "text/plain");
        assert_eq!(leaf(&p[1]), "#cloud-config");
    }

    #[test]
    fn header_order_and_case_do_not_matter() {
        for text in [
            "Content-Type: multipart/mixed; boundary=XX\nMIME-Version: 1.0\n\n--XX\n\n#!/bin/sh\n--XX--\n",
            "MIME-Version: 1.0\ncontent-type: Multipart/Mixed;\n boundary=\"XX\"\n\n--XX\n\n#!/bin/sh\n--XX--\n",
            "mime-version: 1.0\r\nContent-Type: multipart/mixed; BOUNDARY=\"XX\"\r\n\r\n--XX\r\n\r\n#!/bin/sh\r\n--XX--\r\n",
        ] {
            let msg = parse_message(text).unwrap();
            let p = parts(&msg);
            assert_eq!(p.len(), 1, "{text:?}");
            assert_eq!(leaf(&p[0]), "#!/bin/sh", "{text:?}");
        }
    }

    #[test]
    fn crlf_line_ending_before_boundary_belongs_to_it() {
        let text =
            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n\r\n--b--\r\n";
        let msg = parse_message(text).unwrap();
        assert_eq!(leaf(&parts(&msg)[0]), "x\r\n");
        assert_eq!(parts(&msg)[0].raw, "\r\nx\r\n\r\n");
    }

    #[test]
    fn nested_multipart_and_outer_boundary_end_inner_parts() {
        let text = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=o\n\n--o\nContent-Type: multipart/alternative; boundary=i\n\n--i\n\n#!/bin/sh\n--i--\n--o\n\n#cloud-config\n--o--\n";
        let msg = parse_message(text).unwrap();
        let p = parts(&msg);
        assert_eq!(p.len(), 2);
        assert_eq!(leaf(&parts(&p[0])[0]), "#!/bin/sh");
        // An inner multipart cut short by the outer boundary is truncated.
        let text = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=o\n\n--o\nContent-Type: multipart/alternative; boundary=i\n\n--i\n\n#!/bin/sh\n--o--\n";
        assert_eq!(parse_message(text).unwrap_err().reason(), UserDataErrorReason::TruncatedMultipart);
    }

    #[test]
    fn multipart_defects_are_errors() {
        let cases = [
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--b\n\n#!\n--b--\n",
                UserDataErrorReason::MultipartWithoutBoundary,
            ),
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"\"\n\n--\n",
                UserDataErrorReason::MultipartWithoutBoundary,
            ),
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary*=utf-8''b\n\n--b\n",
                UserDataErrorReason::MultipartWithoutBoundary,
            ),
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--c\n\n#!\n--c--\n",
                UserDataErrorReason::MultipartBoundaryNotFound,
            ),
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\necho",
                UserDataErrorReason::TruncatedMultipart,
            ),
            (
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b--\n",
                UserDataErrorReason::MultipartBoundaryNotFound,
            ),
        ];
        for (text, reason) in cases {
            assert_eq!(parse_message(text).unwrap_err().reason(), reason, "{text:?}");
        }
    }

    #[test]
    fn boundary_lines_follow_python() {
        assert_eq!(boundary_match("--b\n", "--b"), Some(false));
        assert_eq!(boundary_match("--b--\r\n", "--b"), Some(true));
        assert_eq!(boundary_match("--b \t\r", "--b"), Some(false));
        assert_eq!(boundary_match("--b-- ", "--b"), Some(true));
        assert_eq!(boundary_match("--bx\n", "--b"), None);
        assert_eq!(boundary_match("--b---\n", "--b"), None);
        assert_eq!(boundary_match(" --b\n", "--b"), None);
    }

    #[test]
    fn params_follow_python() {
        assert_eq!(
            parse_params("multipart/mixed; boundary=\"a;b\"; x=1"),
            vec!["multipart/mixed".to_owned(), "boundary=\"a;b\"".to_owned(), "x=1".to_owned()]
        );
        let (h, _) = Headers::parse(&["Content-Type: multipart/mixed; charset=x; Boundary = \"q\\\"x\" \n"]);
        assert_eq!(h.boundary(), Ok(Some("q\"x".to_owned())));
        let (h, _) = Headers::parse(&["Content-Type: multipart/mixed; boundary=<abc>\n"]);
        assert_eq!(h.boundary(), Ok(Some("abc".to_owned())));
    }

    #[test]
    fn headers_follow_python() {
        // A body that starts without a blank line keeps its first line.
        let msg = parse_message("MIME-Version: 1.0\n#!/bin/sh\n").unwrap();
        assert_eq!(leaf(&msg), "#!/bin/sh\n");
        // No headers at all: the whole text is a text/plain body.
        let msg = parse_message("#!/bin/sh\necho MIME-Version: 1.0\n").unwrap();
        assert_eq!(msg.content_type, "text/plain");
        assert_eq!(leaf(&msg), "#!/bin/sh\necho MIME-Version: 1.0\n");
        // Invalid content types fall back to text/plain.
        let msg = parse_message("Content-Type: nonsense\nMIME-Version: 1.0\n\nx").unwrap();
        assert_eq!(msg.content_type, "text/plain");
        // A trailing From line goes back to the body.
        let msg = parse_message("MIME-Version: 1.0\nFrom x\n\nbody").unwrap();
        assert_eq!(leaf(&msg), "From x\nbody");
    }
}
