//! Properties of server-core's user-data functions on arbitrary input.
//!
//! Shared, via `#[path]`, by the fuzz targets (fuzz/fuzz_targets) and by the
//! stable regression test that replays the committed corpora
//! (core/tests/fuzz_corpus.rs). Every check panics on a violation.

#![allow(dead_code, clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use server_core::user_data::{
    CloudInitPart, MANAGED_PART_CONTENT_TYPE, MAX_MESSAGE_LEN, MAX_USER_DATA_BASE64_LEN, PayloadKind, UserDataError,
    UserDataErrorReason, base64_len, cloud_init_parts, managed_cloud_config, render_user_data,
    validate_managed_user_data, validate_ssh_public_key, validate_user_data,
};

/// Every message is bounded, whatever the input.
fn check_bounded(error: &UserDataError) {
    assert!(error.message().len() <= MAX_MESSAGE_LEN, "{} bytes: {error}", error.message().len());
}

/// Output over the provider's limit is refused as too large, and only that.
fn too_large(error: &UserDataError) -> bool {
    error.reason() == UserDataErrorReason::TooLarge
}

/// A valid key, used so that the merge itself gets exercised.
pub(crate) const FIXED_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@example";

/// Typing and validation: both validators agree (gzip aside), errors carry
/// a message and never mention the CA, and without a CA valid data passes
/// through unchanged.
pub(crate) fn check_validate(data: &[u8]) {
    let plain = validate_user_data(data);
    let managed = validate_managed_user_data(data);
    match (&plain, &managed) {
        (Ok(PayloadKind::Gzip), Err(e)) => assert_eq!(e.reason(), UserDataErrorReason::GzipNotMergeable),
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        other => panic!("validators disagree: {other:?}"),
    }
    if let Err(e) = &plain {
        check_bounded(e);
        assert!(!e.message().is_empty());
        assert!(!e.reason().is_ssh_key());
        assert!(!e.message().contains("sshCertificateAuthorityID"), "{e}");
    }
    if let Ok(PayloadKind::Mime { part_types }) = &plain {
        let parts = cloud_init_parts(data).unwrap().expect("MIME parts");
        let types: Vec<&str> = parts.iter().map(|p| p.content_type.as_str()).collect();
        assert_eq!(&types, part_types);
    }
    let rendered = render_user_data(Some(data), None);
    match (data.is_empty(), &plain) {
        (true, _) => assert_eq!(rendered, Ok(None)),
        (false, Ok(_)) if base64_len(data.len()) > MAX_USER_DATA_BASE64_LEN => {
            assert!(too_large(&rendered.unwrap_err()))
        }
        (false, Ok(_)) => assert_eq!(rendered, Ok(Some(data.to_vec()))),
        (false, Err(e)) => assert_eq!(rendered.unwrap_err().reason(), e.reason()),
    }
}

/// Splits a fuzz input into (key, user data) at the first NUL; without a
/// NUL the whole input is user data and the key is [`FIXED_KEY`].
pub(crate) fn split_merge_input(data: &[u8]) -> (String, &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (String::from_utf8_lossy(&data[..i]).into_owned(), &data[i + 1..]),
        None => (FIXED_KEY.to_owned(), data),
    }
}

fn managed_part(key: &str) -> CloudInitPart {
    let key = validate_ssh_public_key(key).unwrap();
    CloudInitPart {
        content_type: MANAGED_PART_CONTENT_TYPE.to_owned(),
        payload: managed_cloud_config(&key).unwrap().into_bytes(),
    }
}

/// The managed cloud-config reads back (YAML) as the exact key, quoted mode.
fn check_managed_yaml(key: &str) {
    let parsed = validate_ssh_public_key(key).unwrap();
    let doc = managed_cloud_config(&parsed).unwrap();
    assert!(doc.starts_with("#cloud-config\n"));
    let value: serde_json::Value = serde_saphyr::from_str(&doc).expect("managed cloud-config is YAML");
    assert_eq!(value["write_files"][0]["content"], format!("{}\n", parsed.openssh()));
    assert_eq!(value["write_files"][0]["permissions"], "0644");
    assert_eq!(value["write_files"][1]["permissions"], "0644");
    assert_eq!(value.as_object().map(|o| o.len()), Some(2), "only write_files and runcmd");
}

/// What cloud-init sees after the merge is what it saw before, followed by
/// the managed part; merging is refused exactly when validation refuses.
fn check_merge_with(user: &[u8], key: &str) {
    let rendered = render_user_data(Some(user), Some(key));
    if let Err(e) = &rendered {
        check_bounded(e);
    }
    let key_ok = validate_ssh_public_key(key);
    if user.is_empty() {
        match (&rendered, &key_ok) {
            (Ok(Some(out)), Ok(_)) => {
                assert_eq!(cloud_init_parts(out).unwrap(), Some(vec![managed_part(key)]));
            }
            (Err(e), Err(k)) => assert_eq!(e, k),
            other => panic!("empty user data: {other:?}"),
        }
        return;
    }
    let before = validate_managed_user_data(user);
    match (&rendered, &before, &key_ok) {
        (Ok(Some(out)), Ok(_), Ok(_)) => {
            let mut expected = cloud_init_parts(user).unwrap().expect("not gzip");
            expected.push(managed_part(key));
            let after = cloud_init_parts(out).unwrap_or_else(|e| panic!("merged output refused: {e}"));
            assert_eq!(after, Some(expected));
            assert!(validate_managed_user_data(out).is_ok());
        }
        (Err(e), Err(b), _) => assert_eq!(e, b),
        (Err(e), Ok(_), Err(k)) => assert_eq!(e, k),
        (Err(e), Ok(_), Ok(_)) if too_large(e) => {}
        other => panic!("merge and validation disagree: {other:?}"),
    }
}

/// Merge with the fixed key and with the key from the input.
pub(crate) fn check_merge(data: &[u8]) {
    let (key, user) = split_merge_input(data);
    check_merge_with(user, FIXED_KEY);
    if key != FIXED_KEY {
        if validate_ssh_public_key(&key).is_ok() {
            check_managed_yaml(&key);
        }
        check_merge_with(user, &key);
    } else {
        check_managed_yaml(FIXED_KEY);
    }
}
