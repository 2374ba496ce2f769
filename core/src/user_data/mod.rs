//! User data for the provider, and its SSH certificate authority augmentation
//! (DESIGN.md §9).
//!
//! User data is checked the way cloud-init will read it (cloud-init 22.4, Debian 12):
//! - gzip (magic `1f 8b`) is passed on untouched, and refused when it would
//!   have to be merged;
//! - a MIME message (cloud-init finds `mime-version:` in the first 4 KiB) is
//!   read with the rules of Python's email parser, which cloud-init uses.
//!   Where that parser only notes a defect and cloud-init then silently
//!   drops or truncates user data, it is refused here: a multipart without
//!   boundary parameter, opening or closing boundary line, and a `text/plain`
//!   part with a body but no sentinel. Also refused, as this reader does not
//!   follow them: nested `message/*` parts, uuencoded parts, RFC 2231
//!   encoded boundaries, multiparts nested more than 16 deep;
//! - anything else is one payload typed by its first line exactly as
//!   cloud-init types it ([`PayloadType::sniff`]); without a sentinel, or
//!   with one of the three entries of cloud-init's table that only make
//!   sense as a MIME part's type, it is refused.
//!
//! [`cloud_init_parts`] tells what cloud-init's MIME processor will hand its
//! handlers; the conformance test (app/tests/cloud_init_conformance.rs)
//! checks it against the real cloud-init.
//!
//! With an SSH CA, its public key becomes a managed cloud-config part
//! ([`MANAGED_PART_NAME`]): alone when there is no user data, otherwise last
//! in a `multipart/mixed` message after the user's parts, with a
//! `Merge-Type` header ([`MANAGED_PART_MERGE_TYPE`]) that makes cloud-init
//! append its lists to the user's instead of replacing them.
//!
//! Pure: no I/O, deterministic output. Errors never quote user data or keys.

mod cloud_config;
mod error;
mod kind;
mod merge;
mod mime;
mod payload_type;
mod ssh_ca;
mod transfer;

pub use error::{MAX_MESSAGE_LEN, UserDataError, UserDataErrorReason};
pub use kind::{CloudInitPart, MIME_SNIFF_LEN, PayloadKind, looks_like_mime};
pub use payload_type::PayloadType;
pub use ssh_ca::{
    MANAGED_PART_NAME, SSHD_DROP_IN_CONTENT, SSHD_DROP_IN_PATH, SSHD_RELOAD_COMMAND, SshCaPublicKey,
    TRUSTED_USER_CA_KEYS_PATH, managed_cloud_config, validate_ssh_public_key,
};

use kind::{Classified, classify, cloud_config_documents};
use merge::Piece;

/// The most user data the provider takes, in characters of its base64 form:
/// Nova's `user_data` is a base64 string of at most 65,535 characters
/// (`nova/api/openstack/compute/schemas/servers.py`), 49,149 bytes before
/// encoding. Nova's refusal echoes the value back, so the limit is checked
/// here, before any create, with a message of our own.
pub const MAX_USER_DATA_BASE64_LEN: usize = 65_535;

/// The length of the base64 form of `len` bytes (padded, no line breaks).
pub fn base64_len(len: usize) -> usize {
    len.div_ceil(3).saturating_mul(4)
}

/// Refuses `data` when its base64 form is longer than the provider takes.
/// The message gives the sizes only.
fn within_provider_limit(data: Vec<u8>, with_ca: bool) -> Result<Vec<u8>, UserDataError> {
    let encoded = base64_len(data.len());
    if encoded <= MAX_USER_DATA_BASE64_LEN {
        return Ok(data);
    }
    let merged = if with_ca { " with the SSH certificate authority part added" } else { "" };
    Err(UserDataError::new(
        UserDataErrorReason::TooLarge,
        format!(
            "user data is too large: {} bytes{merged}, {encoded} characters once base64-encoded, and the provider \
             accepts at most {MAX_USER_DATA_BASE64_LEN} ({} bytes); shrink it, for example by fetching large \
             files at boot (#include, or a script that downloads them)",
            data.len(),
            MAX_USER_DATA_BASE64_LEN / 4 * 3,
        ),
    ))
}

/// Refuses a cloud-config of the user's whose `write_files` or `runcmd` the
/// managed entries could not be appended to.
fn check_mergeable(data: &[u8], classified: &Classified<'_>) -> Result<(), UserDataError> {
    for (location, document) in cloud_config_documents(data, classified) {
        let top = cloud_config::check(document, location)?;
        cloud_config::check_mergeable(&top, location)?;
    }
    Ok(())
}

/// The MIME type of the managed part.
pub const MANAGED_PART_CONTENT_TYPE: &str = "text/cloud-config";

/// The `Merge-Type` header of the managed part: how cloud-init merges it into
/// the cloud-config it gathered from the user's parts before it.
///
/// cloud-init merges each cloud-config part into the ones before it with the
/// mergers its header (or a `merge_how` key) names, and without either with
/// `dict(replace)+list()+str()` (`cloudinit/handlers/cloud_config.py`): a
/// key of a later part replaces the earlier value whole, so a managed part
/// without this header would erase the user's `write_files` and `runcmd`.
/// With this one (`cloudinit/mergers/m_dict.py`, `m_list.py`, `m_str.py`;
/// the list-appending example of cloud-init's merging documentation):
/// - `dict(no_replace,recurse_list)`: a key only the managed part has is
///   added; a key both have keeps the user's value, except that the list
///   merger combines two lists (and the dict merger two mappings);
/// - `list(append)`: the user's entries first, then the managed ones, so the
///   user's files are written and commands run, and ours come last (a user
///   file at our paths is overwritten by ours, our reload runs after the
///   user's commands);
/// - `str()`: a string where the user's `write_files` or `runcmd` should be
///   a list (invalid cloud-config) is replaced by our list rather than
///   leaving sshd unconfigured. Not `str(append)`: joining a string and a
///   list raises, and cloud-init would then drop the whole managed part.
///
/// The header only governs how the managed part merges into the earlier
/// ones; the user's own parts keep their `Merge-Type` headers and
/// `merge_how` keys.
pub const MANAGED_PART_MERGE_TYPE: &str = "list(append)+dict(no_replace,recurse_list)+str()";

fn non_empty(user_data: Option<&[u8]>) -> Option<&[u8]> {
    user_data.filter(|d| !d.is_empty())
}

/// Validates user data sent as it is (no SSH CA): gzip is allowed.
///
/// Empty data is not user data; callers treat it as none
/// ([`render_user_data`] does). Here it is refused as untyped.
pub fn validate_user_data(data: &[u8]) -> Result<PayloadKind, UserDataError> {
    classify(data).map(|c| c.kind())
}

fn gzip_not_mergeable() -> UserDataError {
    UserDataError::new(
        UserDataErrorReason::GzipNotMergeable,
        "user data is gzip-compressed, which cannot be combined with the SSH certificate authority configuration \
         (sshCertificateAuthorityID): send the user data uncompressed, or remove sshCertificateAuthorityID",
    )
}

/// The parts cloud-init's MIME processor will hand its handlers for valid
/// user data, in order (include and archive parts as they are, not fetched
/// or exploded). `Ok(None)` for gzip, which only cloud-init inflates.
pub fn cloud_init_parts(data: &[u8]) -> Result<Option<Vec<CloudInitPart>>, UserDataError> {
    Ok(match classify(data)? {
        Classified::Gzip => None,
        Classified::Single(t) => {
            Some(vec![CloudInitPart { content_type: t.mime_type().to_owned(), payload: data.to_vec() }])
        }
        Classified::Mime { parts, .. } => Some(parts),
    })
}

/// Validates user data that will be merged with the managed part: as
/// [`validate_user_data`], but gzip is refused, and so is a cloud-config
/// whose `write_files` or `runcmd` is not a list.
pub fn validate_managed_user_data(data: &[u8]) -> Result<PayloadKind, UserDataError> {
    match classify(data)? {
        Classified::Gzip => Err(gzip_not_mergeable()),
        other => {
            check_mergeable(data, &other)?;
            Ok(other.kind())
        }
    }
}

/// The exact bytes to send to the provider. `None` when there is no user
/// data (`None` or empty) and no CA.
///
/// - no CA: the user data, validated, unchanged;
/// - a CA and no user data: the managed cloud-config alone (as the one part
///   of a multipart in the odd case that the key's comment mentions
///   `MIME-Version:`, which would make cloud-init read it as MIME);
/// - a CA and user data: `multipart/mixed` with the user's parts, then the
///   managed part.
///
/// Either way the result must fit the provider's limit
/// ([`MAX_USER_DATA_BASE64_LEN`]).
pub fn render_user_data(
    user_data: Option<&[u8]>,
    ssh_ca_public_key: Option<&str>,
) -> Result<Option<Vec<u8>>, UserDataError> {
    let user_data = non_empty(user_data);
    let Some(key) = ssh_ca_public_key else {
        return match user_data {
            None => Ok(None),
            Some(data) => {
                validate_user_data(data)?;
                within_provider_limit(data.to_vec(), false).map(Some)
            }
        };
    };
    let classified = match user_data {
        Some(data) => match classify(data)? {
            Classified::Gzip => return Err(gzip_not_mergeable()),
            other => {
                check_mergeable(data, &other)?;
                Some((data, other))
            }
        },
        None => None,
    };
    let key = validate_ssh_public_key(key)?;
    let managed = managed_cloud_config(&key)?;
    let managed_piece = Piece::Payload {
        content_type: MANAGED_PART_CONTENT_TYPE,
        filename: Some(MANAGED_PART_NAME),
        merge_type: Some(MANAGED_PART_MERGE_TYPE),
        body: managed.as_bytes(),
    };
    let Some((data, classified)) = classified else {
        if !looks_like_mime(managed.as_bytes()) {
            return Ok(Some(managed.into_bytes()));
        }
        // The key's comment mentions MIME-Version: cloud-init would read the
        // document as a MIME message and garble any non-ASCII text in it, so
        // it goes as the one part of a multipart (found by fuzzing).
        return Ok(Some(merge::assemble(&[managed_piece])));
    };
    let mut pieces = merge::user_pieces(data, &classified);
    pieces.push(managed_piece);
    within_provider_limit(merge::assemble(&pieces), true).map(Some)
}

#[cfg(test)]
mod tests;
