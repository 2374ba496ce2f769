#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@example";
const GZIP_HELLO: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x53, 0x56, 0xd4, 0x4f, 0xca, 0xcc, 0xd3, 0x2f, 0xce,
    0xe0, 0x02, 0x00, 0x3e, 0x5d, 0x5f, 0x3b, 0x0a, 0x00, 0x00, 0x00,
];

fn render(user_data: &[u8], key: Option<&str>) -> Result<Vec<u8>, UserDataErrorReason> {
    render_user_data(Some(user_data), key).map(|o| o.expect("some output")).map_err(|e| e.reason())
}

fn part_types(out: &[u8]) -> Vec<String> {
    match validate_managed_user_data(out).unwrap() {
        PayloadKind::Mime { part_types } => part_types,
        other => panic!("not MIME: {other:?}"),
    }
}

/// Splits our own output into (headers, body) of each part.
fn parts_of(out: &[u8]) -> Vec<(String, Vec<u8>)> {
    let text = std::str::from_utf8(out).unwrap();
    let message = mime::parse_message(text).unwrap();
    let mime::Body::Multipart(parts) = message.body else { panic!("not multipart") };
    parts
        .iter()
        .map(|p| {
            let mime::Body::Leaf(payload) = &p.body else { panic!("nested") };
            let content = mime::strip_line_ending(p.raw);
            let headers = content[..content.len() - payload.len()].to_owned();
            let body = transfer::decoded_payload(payload, p.transfer_encoding.as_deref());
            (headers, body)
        })
        .collect()
}

#[test]
fn nothing_renders_nothing() {
    assert_eq!(render_user_data(None, None), Ok(None));
    assert_eq!(render_user_data(Some(b""), None), Ok(None));
}

#[test]
fn without_ca_user_data_passes_through_unchanged() {
    for data in [&b"#!/bin/sh\necho hi\n"[..], b"#cloud-config\r\n{}\r\n", GZIP_HELLO, b"\xff\x00\x1f\x8b"] {
        let rendered = render_user_data(Some(data), None);
        if data.starts_with(b"\xff") {
            assert_eq!(rendered.unwrap_err().reason(), UserDataErrorReason::UnknownPayloadType);
        } else {
            assert_eq!(rendered, Ok(Some(data.to_vec())));
        }
    }
}

#[test]
fn ca_without_user_data_is_the_managed_config_alone() {
    for data in [None, Some(&b""[..])] {
        let out = render_user_data(data, Some(KEY)).unwrap().unwrap();
        let key = validate_ssh_public_key(KEY).unwrap();
        assert_eq!(out, managed_cloud_config(&key).unwrap().into_bytes());
        assert_eq!(validate_user_data(&out), Ok(PayloadKind::Single(PayloadType::CloudConfig)));
    }
}

#[test]
fn every_prefix_is_merged_with_its_type() {
    for t in PayloadType::all().iter().filter(|t| !t.is_mime_only()) {
        let data = format!("{}\nbody: line\n", t.prefix());
        assert_eq!(validate_user_data(data.as_bytes()), Ok(PayloadKind::Single(*t)));
        let out = render(data.as_bytes(), Some(KEY)).unwrap();
        assert_eq!(part_types(&out), vec![t.mime_type(), MANAGED_PART_CONTENT_TYPE], "{t:?}");
        let parts = parts_of(&out);
        assert_eq!(parts[0].1, data.as_bytes(), "{t:?}");
        assert!(parts[0].0.starts_with(&format!("Content-Type: {};", t.mime_type())), "{}", parts[0].0);
        assert!(parts[1].0.contains("filename=\"unikorn-ssh-certificate-authority\""), "{}", parts[1].0);
        let managed = String::from_utf8(parts[1].1.clone()).unwrap();
        assert!(managed.starts_with("#cloud-config\n"));
        assert!(managed.contains(KEY));
    }
}

#[test]
fn mime_only_types_are_refused_as_single_payloads() {
    for t in PayloadType::all().iter().filter(|t| t.is_mime_only()) {
        let data = format!("{}\necho\n", t.prefix());
        let err = validate_user_data(data.as_bytes()).unwrap_err();
        assert_eq!(err.reason(), UserDataErrorReason::MimeOnlyPayloadType);
    }
}

const MULTIPART_BODY: &str = "\n--XYZ\nContent-Type: text/x-shellscript\nContent-Disposition: attachment; filename=\"a.sh\"\n\n#!/bin/sh\necho a\n\n--XYZ\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: [ls]\n--XYZ--\n";

#[test]
fn multipart_in_both_header_orders_keeps_parts_byte_exact() {
    for headers in [
        "Content-Type: multipart/mixed; boundary=\"XYZ\"\nMIME-Version: 1.0\n",
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n",
    ] {
        let data = format!("{headers}{MULTIPART_BODY}");
        assert_eq!(
            validate_user_data(data.as_bytes()),
            Ok(PayloadKind::Mime { part_types: vec!["text/x-shellscript".into(), "text/cloud-config".into()] })
        );
        let out = String::from_utf8(render(data.as_bytes(), Some(KEY)).unwrap()).unwrap();
        assert!(out.contains(
            "\nContent-Type: text/x-shellscript\nContent-Disposition: attachment; filename=\"a.sh\"\n\n#!/bin/sh\necho a\n\n--"
        ));
        assert!(out.contains("\nContent-Type: text/cloud-config\n\n#cloud-config\nruncmd: [ls]\n--"));
        assert_eq!(part_types(out.as_bytes()), vec!["text/x-shellscript", "text/cloud-config", "text/cloud-config"]);
        let parts = parts_of(out.as_bytes());
        assert_eq!(parts[0].1, b"#!/bin/sh\necho a\n");
        assert_eq!(parts[1].1, b"#cloud-config\nruncmd: [ls]");
    }
}

#[test]
fn crlf_everywhere() {
    let data = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XYZ\"\n{MULTIPART_BODY}")
        .replace('\n', "\r\n");
    let out = render(data.as_bytes(), Some(KEY)).unwrap();
    let parts = parts_of(&out);
    assert_eq!(parts[0].1, b"#!/bin/sh\r\necho a\r\n");
    assert_eq!(parts[1].1, b"#cloud-config\r\nruncmd: [ls]");
    assert!(String::from_utf8_lossy(&out).contains("\r\n#!/bin/sh\r\necho a\r\n\r\n--==unikorn"));

    let script = b"#!/bin/sh\r\necho crlf\r\n";
    let out = render(script, Some(KEY)).unwrap();
    assert_eq!(parts_of(&out)[0].1, script);
    // A payload ending in a lone CR keeps it.
    let script = b"#!/bin/sh\r\necho cr\r";
    let out = render(script, Some(KEY)).unwrap();
    assert_eq!(parts_of(&out)[0].1, script);
}

#[test]
fn non_ascii_single_payload_survives() {
    let script = "#!/bin/sh\necho h\u{e9}llo \u{20ac} \u{1f600}\n".as_bytes();
    let out = render(script, Some(KEY)).unwrap();
    assert!(out.is_ascii());
    assert_eq!(parts_of(&out)[0].1, script);
    // Invalid UTF-8 after the sentinel too.
    let script = b"#!/bin/sh\n\xff\xfe\x00\n";
    let out = render(script, Some(KEY)).unwrap();
    assert_eq!(parts_of(&out)[0].1, script);
}

#[test]
fn gzip_with_and_without_ca() {
    assert_eq!(render(GZIP_HELLO, None), Ok(GZIP_HELLO.to_vec()));
    assert_eq!(validate_user_data(GZIP_HELLO), Ok(PayloadKind::Gzip));
    let err = validate_managed_user_data(GZIP_HELLO).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::GzipNotMergeable);
    assert!(err.message().contains("sshCertificateAuthorityID"));
    assert_eq!(render(GZIP_HELLO, Some(KEY)), Err(UserDataErrorReason::GzipNotMergeable));
}

#[test]
fn errors_without_ca_never_blame_augmentation() {
    for data in [
        &b"hello"[..],
        b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--b\n\n#!\n--b--\n",
        b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n",
    ] {
        let err = render_user_data(Some(data), None).unwrap_err();
        assert!(!err.message().contains("certificate"), "{err}");
        assert!(!err.reason().is_ssh_key());
    }
}

#[test]
fn bad_inputs_give_documented_reasons() {
    use UserDataErrorReason as R;
    let cases: &[(&[u8], Option<&str>, R)] = &[
        (b"just some text\n", None, R::UnknownPayloadType),
        (b"just some text\n", Some(KEY), R::UnknownPayloadType),
        (
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--b\n\n#!\n--b--\n",
            Some(KEY),
            R::MultipartWithoutBoundary,
        ),
        (
            b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n",
            Some(KEY),
            R::TruncatedMultipart,
        ),
        (GZIP_HELLO, Some(KEY), R::GzipNotMergeable),
        (
            b"#!/bin/sh\n",
            Some("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"),
            R::SshKeyPrivate,
        ),
        (
            b"#!/bin/sh\n",
            Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti\nruncmd: [x]\n"),
            R::SshKeyMultipleLines,
        ),
        (b"#!/bin/sh\n", Some(""), R::SshKeyEmpty),
        (b"", Some("garbage"), R::SshKeyInvalid),
    ];
    for (data, key, reason) in cases {
        assert_eq!(render_user_data(Some(data), *key).unwrap_err().reason(), *reason, "{data:?} {key:?}");
    }
}

#[test]
fn two_keys_are_refused() {
    let key = format!("{KEY}\n{KEY}");
    assert_eq!(render(b"#!/bin/sh\n", Some(&key)), Err(UserDataErrorReason::SshKeyMultipleLines));
}

#[test]
fn other_key_algorithms() {
    let ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHwf2HMM5TRXvo2SQJjsNkiDD5KqiiNjrGVv3UUh+mMT5RHxiRtOnlqvjhQtBq0VpmpCV/PwUdhOig4vkbqAcEc= ecdsa@example";
    let key = validate_ssh_public_key(ecdsa).unwrap();
    assert_eq!(key.algorithm(), "ecdsa-sha2-nistp256");
    let rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCvYKKMn/93zCO+jNyPEQ/4hUlCr9fcf8x5TMo3ozNPI0DFQlg2xCfv0sEFaA2+vMGwtwVX4hrkJHLvs4cHQ8xN6tgonNSVyWdYNHTc/U7bMdpfrBeTDl8pUh+7dtcXwVKp2QnzlT1K38tTePLnlfwvj0ZCGz2fSDR0O6Do02lEoLNDSaHn0VdESVOBOWPbDUyoRqDYEkvT1GnExTwkDhy/1bqYvGR2y1Mg6ORMBIeFHIYzJjXkAmvJKy1nxhGkAbgbYPWTJbA0RaKd/Ek4F2VkIFk1/R+YB6ETZsiHJLPPQVOaEimtXrA4yfQ66AeJ6ebuDv6QyWsPkAJCv+sxbaUv rsa@example";
    let key = validate_ssh_public_key(rsa).unwrap();
    assert_eq!(key.algorithm(), "ssh-rsa");
    let dsa = "ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4EddRIpUt9KnC7s5Of2EbdSPO9EAMMeP4C2USZpRV1AIlH7WT2NWPq/xfW6MPbLm1Vs14E7gB00b/JmYLdrmVClpJ+f6AR7ECLCT7up1/63xhv4O1fnxqimFQ8E+4P208UewwI1VBNaFpEy9nXzrith1yrv8iIDGZ3RSAHHAAAAFQCXYFCPFSMLzLKSuYKi64QL8Fgc9QAAAIEA9+GghdabPd7LvKtcNrhXuXmUr7v6OuqC+VdMCz0HgmdRWVeOutRZT+ZxBxCBgLRJFnEj6EwoFhO3zwkyjMim4TwWeotUfI0o4KOuHiuzpnWRbqN/C/ohNWLx+2J6ASQ7zKTxvqhRkImog9/hWuWfBpKLZl6Ae1UlZAFMO/7PSSoAAACBAPGDngvjB4a+b4ob3YczHJ/dkY7DdlYgBNjt7U0tsJ2yJ2fVsymIqOlzzTsLKdgO2GZtnbWR+VcuuWBEqcbLrbvOvHC+FqU8PGwgBjddFRgdnPGEt5oyiaTcSMcTi0wGoBN0RpGjZg0I3Uawd6JgsqDx8ZZoFD0zMXiiYQp/VjXJ dsa@example";
    let err = validate_ssh_public_key(dsa).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::SshKeyUnsupportedAlgorithm);
}

#[test]
fn managed_part_is_last_and_named() {
    let out = render(b"#cloud-config\n{}\n", Some(KEY)).unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(
        text.starts_with("Content-Type: multipart/mixed; boundary=\"==unikorn-user-data-0==\"\nMIME-Version: 1.0\n\n")
    );
    assert!(text.ends_with("--==unikorn-user-data-0==--\n"));
    let parts = parts_of(&out);
    assert_eq!(parts.len(), 2);
    assert!(parts[1].0.contains("Content-Type: text/cloud-config;"));
    assert!(parts[1].0.contains("Content-Disposition: attachment; filename=\"unikorn-ssh-certificate-authority\""));
    // Deterministic.
    assert_eq!(render(b"#cloud-config\n{}\n", Some(KEY)).unwrap(), out);
}

#[test]
fn user_data_containing_our_boundary_gets_another() {
    let data = b"#!/bin/sh\n# --==unikorn-user-data-0==\n";
    let out = String::from_utf8(render(data, Some(KEY)).unwrap()).unwrap();
    assert!(out.contains("boundary=\"==unikorn-user-data-1==\""));
    assert_eq!(parts_of(out.as_bytes())[0].1, data);
}

#[test]
fn reload_command_is_the_designed_one() {
    assert_eq!(
        SSHD_RELOAD_COMMAND,
        "sh -c \"systemctl reload sshd || systemctl reload ssh || service ssh reload || service sshd reload || \
         systemctl restart sshd || systemctl restart ssh || service ssh restart || service sshd restart\""
    );
}

#[test]
fn a_46_kib_script_merges() {
    let mut script = b"#!/bin/sh\n".to_vec();
    while script.len() < 46 * 1024 {
        script.extend_from_slice(b"echo 'a fairly long line of shell script to fill 46 kibibytes'\n");
    }
    let out = render(&script, Some(KEY)).unwrap();
    assert_eq!(parts_of(&out)[0].1, script);
}

/// Nova takes at most 65,535 base64 characters: 49,149 bytes.
#[test]
fn the_provider_limit_applies_to_what_is_sent() {
    let script = |len: usize| {
        let mut data = b"#!/bin/sh\n".to_vec();
        data.resize(len, b'#');
        data
    };
    assert_eq!(base64_len(49_149), 65_532);
    assert_eq!(base64_len(49_150), 65_536);
    assert!(render(&script(49_149), None).is_ok());
    let err = render_user_data(Some(&script(49_150)), None).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::TooLarge);
    assert_eq!(
        err.message(),
        "user data is too large: 49150 bytes, 65536 characters once base64-encoded, and the provider accepts at \
         most 65535 (49149 bytes); shrink it, for example by fetching large files at boot (#include, or a script \
         that downloads them)"
    );
    // With a CA the merged result counts: user data that fits alone may not.
    let managed_overhead = render(&script(100), Some(KEY)).unwrap().len() - 100;
    let fits_alone = script(49_149 - managed_overhead / 2);
    assert!(render(&fits_alone, None).is_ok());
    let err = render_user_data(Some(&fits_alone), Some(KEY)).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::TooLarge);
    assert!(err.message().contains("with the SSH certificate authority part added"), "{err}");
    assert!(render(&script(49_149 - managed_overhead), Some(KEY)).is_ok());
    // The message never quotes the data.
    assert!(!err.message().contains("##"), "{err}");
}

#[test]
fn cloud_config_the_managed_lists_cannot_join_is_refused_only_with_a_ca() {
    for data in [
        &b"#cloud-config\nruncmd:\n"[..],
        b"#cloud-config\nwrite_files: {}\n",
        b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/cloud-config\n\nruncmd: echo\n--b--\n",
    ] {
        assert!(validate_user_data(data).is_ok());
        assert_eq!(render_user_data(Some(data), None), Ok(Some(data.to_vec())));
        assert_eq!(render(data, Some(KEY)), Err(UserDataErrorReason::CloudConfigNotMergeable));
        assert_eq!(validate_managed_user_data(data).unwrap_err().reason(), UserDataErrorReason::CloudConfigNotMergeable);
    }
}

#[test]
fn broken_cloud_config_is_refused_with_its_line() {
    let err = render_user_data(Some(b"#cloud-config\nfoo: [unclosed\n"), Some(KEY)).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::InvalidCloudConfig);
    assert!(err.message().contains("line 2"), "{err}");
    assert_eq!(validate_user_data(b"#cloud-config\nfoo: [unclosed\n").unwrap_err(), err);
    // In a MIME part: the part and the line within it.
    let data = b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n--b\nContent-Type: text/cloud-config\n\n#cloud-config\na: 1\nb: {c\n--b--\n";
    let err = validate_user_data(data).unwrap_err();
    assert_eq!(err.reason(), UserDataErrorReason::InvalidCloudConfig);
    assert!(err.message().contains("MIME part 2") && err.message().contains("line 3 of the part"), "{err}");
    // Templates, archives and scripts are not read as cloud-config.
    for data in [&b"## template: jinja\n#cloud-config\nfoo: [{{ x }\n"[..], b"#!/bin/sh\nfoo: [unclosed\n"] {
        assert!(validate_user_data(data).is_ok());
    }
}

fn check_any(data: &[u8], key: &str) {
    let plain = validate_user_data(data);
    let managed = validate_managed_user_data(data);
    if managed.is_ok() {
        assert_eq!(plain, managed);
    }
    match render_user_data(Some(data), Some(key)) {
        Ok(Some(out)) if !data.is_empty() => {
            let mut expected = match managed.expect("merge of invalid data") {
                PayloadKind::Mime { part_types } => part_types,
                PayloadKind::Single(t) => vec![t.mime_type().to_owned()],
                PayloadKind::Gzip => panic!("gzip merged"),
            };
            expected.push(MANAGED_PART_CONTENT_TYPE.to_owned());
            assert_eq!(part_types(&out), expected);
        }
        Ok(_) => {}
        Err(e) => assert!(managed.is_err() || e.reason().is_ssh_key(), "{e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), key in ".{0,120}") {
        check_any(&data, KEY);
        let _ = render_user_data(Some(&data), Some(&key));
        let _ = validate_ssh_public_key(&key);
    }

    #[test]
    fn mime_shaped_input_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("MIME-Version: 1.0".to_owned()),
                Just("Content-Type: multipart/mixed; boundary=b".to_owned()),
                Just("Content-Type: multipart/alternative; boundary=\"c\"".to_owned()),
                Just("Content-Type: text/plain".to_owned()),
                Just("Content-Transfer-Encoding: base64".to_owned()),
                Just("--b".to_owned()),
                Just("--b--".to_owned()),
                Just("--c".to_owned()),
                Just("--c--".to_owned()),
                Just(String::new()),
                Just("#!/bin/sh".to_owned()),
                Just("#cloud-config".to_owned()),
                "[ -~]{0,20}",
            ],
            0..40,
        ),
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let data = lines.join(eol);
        check_any(data.as_bytes(), KEY);
    }

    #[test]
    fn typed_payloads_round_trip(
        // MIME-only types have no first-line prefix: generate only the others,
        // so rejections stay well under proptest's global limit.
        prefix in prop::sample::select(PayloadType::all().iter().copied().filter(|p| !p.is_mime_only()).collect::<Vec<_>>()),
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut data = format!("{}\n", prefix.prefix()).into_bytes();
        data.extend_from_slice(&body);
        prop_assume!(!looks_like_mime(&data));
        // Random bytes are rarely a cloud-config mapping: those are refused.
        prop_assume!(prefix != PayloadType::CloudConfig || validate_user_data(&data).is_ok());
        let out = render(&data, Some(KEY)).unwrap();
        let parts = parts_of(&out);
        prop_assert_eq!(&parts[0].1, &data);
        prop_assert_eq!(part_types(&out), vec![prefix.mime_type().to_owned(), MANAGED_PART_CONTENT_TYPE.to_owned()]);
    }
}

/// Found by fuzzing (user_data_merge): a MIME message that ends inside its
/// header block with a `From ` line, which Python moves to the body.
#[test]
fn header_only_message_keeps_its_payload_when_merged() {
    for data in [
        &b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\nFrom x\n"[..],
        b"MIME-Version: 1.0\r\nContent-Type: text/x-shellscript\r\nFrom x\r\n",
        b"MIME-Version: 1.0\rContent-Type: text/x-shellscript\rFrom x\r",
        b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\nFrom x",
        b"MIME-Version: 1.0\nContent-Type: text/x-shellscript\n",
        b"MIME-Version: 1.0\n",
    ] {
        let before = cloud_init_parts(data).unwrap().unwrap();
        let out = render(data, Some(KEY)).unwrap();
        let after = cloud_init_parts(&out).unwrap().unwrap();
        assert_eq!(after[..after.len() - 1], before[..], "{:?}", String::from_utf8_lossy(data));
    }
}

/// Found by fuzzing (user_data_merge): a key comment that mentions
/// MIME-Version makes cloud-init read the managed document as MIME, where
/// non-ASCII text would be garbled.
#[test]
fn key_comment_mentioning_mime_version() {
    let key = format!("{KEY} MIME-Version: 1.0 jos\u{e9}");
    let out = render_user_data(None, Some(&key)).unwrap().unwrap();
    let managed = managed_cloud_config(&validate_ssh_public_key(&key).unwrap()).unwrap();
    assert!(looks_like_mime(&out));
    assert_eq!(
        cloud_init_parts(&out).unwrap(),
        Some(vec![CloudInitPart { content_type: MANAGED_PART_CONTENT_TYPE.into(), payload: managed.into_bytes() }])
    );
    let plain = format!("{KEY} jos\u{e9}");
    let out = render_user_data(None, Some(&plain)).unwrap().unwrap();
    assert!(out.starts_with(b"#cloud-config\n"));
}

#[test]
fn adversarial_inputs_stay_linear() {
    let started = std::time::Instant::now();
    let mut script = String::from("#!/bin/sh\n");
    for n in 0..50_000 {
        script.push_str(&format!("# ==unikorn-user-data-{n}==\n"));
    }
    // Far over the provider's limit, so assembled directly.
    let classified = classify(script.as_bytes()).unwrap();
    let out = String::from_utf8(merge::assemble(&merge::user_pieces(script.as_bytes(), &classified))).unwrap();
    assert!(out.contains("boundary=\"==unikorn-user-data-50000==\""));
    assert_eq!(render(script.as_bytes(), Some(KEY)), Err(UserDataErrorReason::TooLarge));

    let params = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b{}\n\n--b\n\n#!\n--b--\n",
        ";\"".repeat(200_000)
    );
    let _ = validate_user_data(params.as_bytes());

    let mut deep = String::from("MIME-Version: 1.0\n");
    for i in 0..2_000 {
        deep.push_str(&format!("Content-Type: multipart/mixed; boundary=b{i}\n\n--b{i}\n"));
    }
    assert_eq!(validate_user_data(deep.as_bytes()).unwrap_err().reason(), UserDataErrorReason::MimeTooDeep);

    let boundaries =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n{}--b--\n", "--b\n".repeat(200_000));
    let _ = validate_user_data(boundaries.as_bytes());
    let lines = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\n#!/bin/sh\n{}--b--\n",
        "x\n".repeat(300_000)
    );
    assert!(validate_user_data(lines.as_bytes()).is_ok());
    // YAML is read in linear time (a 450 KB cloud-config, a 100,000-deep nesting).
    let mut config = String::from("#cloud-config\n");
    for n in 0..20_000 {
        config.push_str(&format!("key{n}: [a, {{b: c}}]\n"));
    }
    assert!(validate_user_data(config.as_bytes()).is_ok());
    let nested = format!("#cloud-config\nx: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let _ = validate_user_data(nested.as_bytes());
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
}
