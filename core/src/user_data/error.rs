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
    /// Gzip-compressed user data cannot be combined with the managed SSH CA
    /// part (the operator does not decompress user data).
    GzipNotMergeable,
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
            Self::GzipNotMergeable => "GzipNotMergeable",
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

impl UserDataError {
    pub(crate) fn new(reason: UserDataErrorReason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into() }
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
