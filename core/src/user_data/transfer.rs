//! The bytes cloud-init gets from a MIME part's body: Python's
//! `Message.get_payload(decode=True)` for a message parsed from text.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

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

/// Base64 as leniently as Python's `email._encoded_words.decode_b`: line
/// breaks and other non-alphabet characters ignored, padding optional; when
/// nothing decodes, the encoded bytes themselves (as Python returns them).
fn base64_lenient(data: &[u8]) -> Vec<u8> {
    let cleaned: Vec<u8> =
        data.iter().copied().filter(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/').collect();
    let engine = GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    engine.decode(&cleaned).unwrap_or_else(|_| data.iter().copied().filter(|b| *b != b'\r' && *b != b'\n').collect())
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
        assert_eq!(decoded_payload("=23!/bin/sh=\nx=3D=\r\ny=", Some("quoted-printable")), b"#!/bin/shx=y");
        assert_eq!(decoded_payload("a==b=zz", Some("quoted-printable")), b"a=b=zz");
    }
}
