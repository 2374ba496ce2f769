//! The bytes cloud-init gets from a MIME part's body: Python's
//! `Message.get_payload(decode=True)` for a message parsed from text.

/// Decodes a part body as cloud-init does before typing it. Text that is not
/// ASCII is first turned into bytes with Python's `raw_unicode_escape`, as
/// `get_payload` does, which is why cloud-init mangles non-ASCII parts that
/// are not base64 or quoted-printable encoded.
pub(crate) fn decoded_payload(payload: &str, transfer_encoding: Option<&str>) -> Vec<u8> {
    let raw = if payload.is_ascii() { payload.as_bytes().to_vec() } else { raw_unicode_escape(payload) };
    match transfer_encoding {
        Some("quoted-printable") => quoted_printable(&raw),
        Some("base64") => base64_lenient(&raw),
        _ => raw,
    }
}

/// Python's `str.encode("raw_unicode_escape")`.
fn raw_unicode_escape(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        let code = u32::from(c);
        if let Ok(byte) = u8::try_from(code) {
            out.push(byte);
        } else if code <= 0xffff {
            out.extend_from_slice(format!("\\u{code:04x}").as_bytes());
        } else {
            out.extend_from_slice(format!("\\U{code:08x}").as_bytes());
        }
    }
    out
}

/// `binascii.a2b_qp` (not header mode).
fn quoted_printable(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i] != b'=' {
            out.push(data[i]);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&next) = data.get(i) else { break };
        if next == b'\n' || next == b'\r' {
            // Soft line break: skip to just after the next '\n'.
            while i < data.len() && data[i] != b'\n' {
                i += 1;
            }
            i += 1;
        } else if next == b'=' {
            out.push(b'=');
            i += 1;
        } else if let (Some(hi), Some(lo)) = (hex(next), data.get(i + 1).copied().and_then(hex)) {
            out.push(hi << 4 | lo);
            i += 2;
        } else {
            out.push(b'=');
        }
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Python's `email._encoded_words.decode_b` on the body without its line
/// breaks: lenient decoding, then with `==` appended, then the encoded bytes
/// themselves.
fn base64_lenient(data: &[u8]) -> Vec<u8> {
    let joined: Vec<u8> = data.iter().copied().filter(|b| *b != b'\r' && *b != b'\n').collect();
    if let Some(decoded) = a2b_base64(&joined) {
        return decoded;
    }
    let mut padded = joined.clone();
    padded.extend_from_slice(b"==");
    a2b_base64(&padded).unwrap_or(joined)
}

fn base64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// CPython's `binascii.a2b_base64` (not strict): other characters are
/// skipped, enough `=` after two or three characters ends the data, and an
/// incomplete final group is an error.
fn a2b_base64(data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() / 4 * 3 + 3);
    let mut quad_pos = 0u8;
    let mut left: u8 = 0;
    let mut pads = 0u8;
    for &b in data {
        if b == b'=' {
            pads = pads.saturating_add(1);
            if quad_pos >= 2 && quad_pos.saturating_add(pads) >= 4 {
                return Some(out);
            }
            continue;
        }
        let Some(v) = base64_value(b) else { continue };
        pads = 0;
        match quad_pos {
            0 => {
                left = v;
                quad_pos = 1;
            }
            1 => {
                out.push(left << 2 | v >> 4);
                left = v & 0x0f;
                quad_pos = 2;
            }
            2 => {
                out.push(left << 4 | v >> 2);
                left = v & 0x03;
                quad_pos = 3;
            }
            _ => {
                out.push(left << 6 | v);
                left = 0;
                quad_pos = 0;
            }
        }
    }
    (quad_pos == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ascii_is_unchanged() {
        assert_eq!(decoded_payload("#!/bin/sh\r\n", None), b"#!/bin/sh\r\n");
        assert_eq!(decoded_payload("#!/bin/sh\r\n", Some("7bit")), b"#!/bin/sh\r\n");
    }

    #[test]
    fn non_ascii_is_mangled_like_python() {
        assert_eq!(decoded_payload("\u{e9}\u{20ac}", None), b"\xe9\\u20ac");
        assert_eq!(decoded_payload("\u{1f600}", None), b"\\U0001f600");
    }

    #[test]
    fn base64_and_quoted_printable() {
        assert_eq!(decoded_payload("IyEvYmlu\nL3No\n", Some("base64")), b"#!/bin/sh");
        assert_eq!(decoded_payload("IyEvYmluL3Nh", Some("base64")), b"#!/bin/sa");
        assert_eq!(decoded_payload("IyE", Some("base64")), b"#!");
        assert_eq!(decoded_payload("Iy=E", Some("base64")), b"#!");
        assert_eq!(decoded_payload("I", Some("base64")), b"I");
        assert_eq!(decoded_payload("IyEv\r\n!!Ym\nlu", Some("base64")), b"#!/bin");
        assert_eq!(decoded_payload("=23!/bin/sh=\nx=3D=\r\ny=", Some("quoted-printable")), b"#!/bin/shx=y");
        assert_eq!(decoded_payload("a==b=zz", Some("quoted-printable")), b"a=b=zz");
    }
}
