//! The one error type of user-data handling: a structured reason plus a message
//! a user can act on. Messages never quote the user data or the key.

use std::fmt;

/// Why user data or an SSH CA public key was refused.
///
/// The string form ([`UserDataErrorReason::as_str`]) is stable and suitable
/// for a condition reason or a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UserDataErrorReason {
    /// A single (non-MIME) payload whose first line is none of cloud-init's
    /// sentinels (`#cloud-config`, `#!`, ...).
    UnknownPayloadType,
    /// A single payload typed as one of the types cloud-init only honours as
    /// the `Content-Type` of a MIME part (`text/x-shellscript-per-boot`, ...).
    MimeOnlyPayloadType,
    /// A MIME message (cloud-init saw `MIME-Version:` in its first 4 KiB) that
    /// is not valid UTF-8: cloud-init fails to decode it.
    MimeNotUtf8,
    /// A `multipart/*` entity without a usable `boundary` parameter.
    MultipartWithoutBoundary,
    /// A `multipart/*` entity whose opening boundary line never appears.
    MultipartBoundaryNotFound,
    /// A `multipart/*` entity whose closing boundary line (`--boundary--`)
    /// never appears: the message is truncated.
    TruncatedMultipart,
    /// MIME entities nested deeper than this implementation follows.
    MimeTooDeep,
    /// A MIME part that cloud-init cannot type: `text/plain` (or no
    /// `Content-Type`) and a body that starts with no sentinel.
    UntypedMimePart,
    /// A MIME part this operator does not follow: a nested message
    /// (`message/*`) or a uuencoded body.
    UnsupportedMimePart,
    /// A cloud-config document (the whole user data or a MIME part) that
    /// cloud-init would skip: not valid YAML, not one document, or not a
    /// mapping at the top.
    InvalidCloudConfig,
    /// Gzip-compressed user data cannot be combined with the managed SSH CA
    /// part (the operator does not decompress user data).
    GzipNotMergeable,
    /// A cloud-config whose `write_files` or `runcmd` is not a list, so the
    /// managed SSH CA entries cannot be appended to it.
    CloudConfigNotMergeable,
    /// The user data to send is larger than the provider accepts.
    TooLarge,
    /// The SSH CA public key is empty.
    SshKeyEmpty,
    /// The SSH CA "public key" is a private key.
    SshKeyPrivate,
    /// The SSH CA public key spans several lines (several keys, or a key
    /// followed by other text).
    SshKeyMultipleLines,
    /// The SSH CA public key is not an OpenSSH public key.
    SshKeyInvalid,
    /// The SSH CA public key uses an algorithm OpenSSH no longer accepts or
    /// this operator does not know.
    SshKeyUnsupportedAlgorithm,
    /// The managed cloud-config could not be serialised (a bug).
    Internal,
}

impl UserDataErrorReason {
    /// A stable CamelCase name, e.g. `UnknownPayloadType`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownPayloadType => "UnknownPayloadType",
            Self::MimeOnlyPayloadType => "MimeOnlyPayloadType",
            Self::MimeNotUtf8 => "MimeNotUtf8",
            Self::MultipartWithoutBoundary => "MultipartWithoutBoundary",
            Self::MultipartBoundaryNotFound => "MultipartBoundaryNotFound",
            Self::TruncatedMultipart => "TruncatedMultipart",
            Self::MimeTooDeep => "MimeTooDeep",
            Self::UntypedMimePart => "UntypedMimePart",
            Self::UnsupportedMimePart => "UnsupportedMimePart",
            Self::InvalidCloudConfig => "InvalidCloudConfig",
            Self::GzipNotMergeable => "GzipNotMergeable",
            Self::CloudConfigNotMergeable => "CloudConfigNotMergeable",
            Self::TooLarge => "TooLarge",
            Self::SshKeyEmpty => "SshKeyEmpty",
            Self::SshKeyPrivate => "SshKeyPrivate",
            Self::SshKeyMultipleLines => "SshKeyMultipleLines",
            Self::SshKeyInvalid => "SshKeyInvalid",
            Self::SshKeyUnsupportedAlgorithm => "SshKeyUnsupportedAlgorithm",
            Self::Internal => "Internal",
        }
    }

    /// True when the SSH CA public key, not the user data, is at fault.
    pub fn is_ssh_key(self) -> bool {
        matches!(
            self,
            Self::SshKeyEmpty
                | Self::SshKeyPrivate
                | Self::SshKeyMultipleLines
                | Self::SshKeyInvalid
                | Self::SshKeyUnsupportedAlgorithm
        )
    }
}

impl fmt::Display for UserDataErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// User data or an SSH CA public key that cannot be sent to the provider.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("{message}")]
pub struct UserDataError {
    reason: UserDataErrorReason,
    message: String,
}

/// Longest message kept, in bytes: messages end up in a status condition,
/// an event and log lines, and some name parts of the user's input.
pub const MAX_MESSAGE_LEN: usize = 1024;

impl UserDataError {
    pub(crate) fn new(reason: UserDataErrorReason, message: impl Into<String>) -> Self {
        Self { reason, message: bounded(message.into(), MAX_MESSAGE_LEN) }
    }

    /// The structured reason.
    pub fn reason(&self) -> UserDataErrorReason {
        self.reason
    }

    /// The human-readable message (also the `Display` form).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
pub(crate) fn bounded(mut text: String, max: usize) -> String {
    const MARK: &str = "...";
    if text.len() <= max {
        return text;
    }
    let mut cut = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(MARK);
    text
}

/// A piece of the user's input quoted in a message: control characters
/// escaped (one line), at most `max` characters.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).flat_map(char::escape_debug).collect();
    if text.chars().nth(max).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_bounded() {
        let error = UserDataError::new(UserDataErrorReason::Internal, "\u{e9}".repeat(MAX_MESSAGE_LEN));
        assert!(error.message().len() <= MAX_MESSAGE_LEN, "{}", error.message().len());
        assert!(error.message().ends_with("..."));
        assert_eq!(bounded("short".into(), 10), "short");
        assert_eq!(excerpt("text/x\n\tplain", 100), "text/x\\n\\tplain");
        assert_eq!(excerpt(&"a".repeat(200), 5), "aaaaa...");
    }
}
