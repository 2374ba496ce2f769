//! The SSH certificate authority: validating its OpenSSH public key and
//! rendering the managed cloud-config part that makes sshd trust it.

use std::fmt;

use serde::Serialize;
use ssh_key::{Algorithm, HashAlg, PublicKey, public::KeyData};

use super::error::{UserDataError, UserDataErrorReason, excerpt};

/// Name (MIME filename) of the managed cloud-config part.
pub const MANAGED_PART_NAME: &str = "unikorn-ssh-certificate-authority";
/// Where the CA public key is written on the instance.
pub const TRUSTED_USER_CA_KEYS_PATH: &str = "/etc/ssh/trusted-user-ca-keys.pub";
/// The sshd drop-in that points sshd at the CA key.
pub const SSHD_DROP_IN_PATH: &str = "/etc/ssh/sshd_config.d/90-unikorn-trusted-user-ca.conf";
/// The content of the sshd drop-in.
pub const SSHD_DROP_IN_CONTENT: &str = "TrustedUserCAKeys /etc/ssh/trusted-user-ca-keys.pub\n";
/// Reloads sshd whatever the distribution calls it.
pub const SSHD_RELOAD_COMMAND: &str = "sh -c \"systemctl reload sshd || systemctl reload ssh || service ssh reload \
     || service sshd reload || systemctl restart sshd || systemctl restart ssh || service ssh restart \
     || service sshd restart\"";

/// A validated OpenSSH public key for an SSH certificate authority.
///
/// `Debug` shows the algorithm and fingerprint only.
#[derive(Clone, PartialEq, Eq)]
pub struct SshCaPublicKey {
    openssh: String,
    algorithm: String,
    fingerprint: String,
}

impl SshCaPublicKey {
    /// The key as one OpenSSH line (`<algorithm> <base64> [comment]`),
    /// surrounding whitespace removed, no line ending.
    pub fn openssh(&self) -> &str {
        &self.openssh
    }

    /// The algorithm name, e.g. `ssh-ed25519`.
    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }

    /// The SHA-256 fingerprint, e.g. `SHA256:...`: safe to log.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl fmt::Debug for SshCaPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshCaPublicKey")
            .field("algorithm", &self.algorithm)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

fn key_error(reason: UserDataErrorReason, detail: impl fmt::Display) -> UserDataError {
    UserDataError::new(reason, format!("SSH certificate authority public key: {detail}"))
}

/// Validates `key` as exactly one OpenSSH public key (surrounding whitespace
/// allowed). Private keys, certificates, garbage, several lines and keys
/// followed by other lines are refused.
pub fn validate_ssh_public_key(key: &str) -> Result<SshCaPublicKey, UserDataError> {
    let line = key.trim();
    if line.is_empty() {
        return Err(key_error(
            UserDataErrorReason::SshKeyEmpty,
            "is empty; expected one line such as 'ssh-ed25519 AAAA... comment'",
        ));
    }
    if line.contains("PRIVATE KEY") || line.starts_with("PuTTY-User-Key-File") {
        return Err(key_error(
            UserDataErrorReason::SshKeyPrivate,
            "is a private key; give the CA's public key (the .pub file, one line such as 'ssh-ed25519 AAAA...'), and treat the private key as leaked",
        ));
    }
    let lines = line.lines().count();
    if lines > 1 || line.contains('\r') {
        return Err(key_error(
            UserDataErrorReason::SshKeyMultipleLines,
            format!("has {lines} lines; expected exactly one OpenSSH public key on one line and nothing else"),
        ));
    }
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err(key_error(UserDataErrorReason::SshKeyInvalid, "contains control characters"));
    }
    let first_word = line.split([' ', '\t']).next().unwrap_or_default();
    if first_word.contains("-cert-v01@openssh.com") {
        return Err(key_error(
            UserDataErrorReason::SshKeyInvalid,
            "is an SSH certificate; give the certificate authority's own public key",
        ));
    }
    let public = PublicKey::from_openssh(line).map_err(|e| {
        key_error(
            UserDataErrorReason::SshKeyInvalid,
            format!("is not an OpenSSH public key ({e}); expected one line such as 'ssh-ed25519 AAAA... comment'"),
        )
    })?;
    match public.key_data() {
        KeyData::Other(_) => {
            return Err(key_error(
                UserDataErrorReason::SshKeyUnsupportedAlgorithm,
                format!("uses the unknown algorithm '{}'", excerpt(public.algorithm().as_str(), 64)),
            ));
        }
        KeyData::Dsa(_) => {
            return Err(key_error(
                UserDataErrorReason::SshKeyUnsupportedAlgorithm,
                "is a DSA key, which current OpenSSH no longer accepts; use ssh-ed25519, ecdsa-sha2-* or ssh-rsa",
            ));
        }
        _ => {}
    }
    let algorithm = match public.algorithm() {
        Algorithm::Other(name) => name.as_str().to_owned(),
        other => other.as_str().to_owned(),
    };
    Ok(SshCaPublicKey {
        openssh: line.to_owned(),
        algorithm,
        fingerprint: public.fingerprint(HashAlg::Sha256).to_string(),
    })
}

#[derive(Serialize)]
struct CloudConfig<'a> {
    write_files: [WriteFile<'a>; 2],
    runcmd: [&'a str; 1],
}

#[derive(Serialize)]
struct WriteFile<'a> {
    path: &'a str,
    content: &'a str,
    owner: &'a str,
    permissions: &'a str,
}

/// The managed cloud-config document (`#cloud-config` header included).
pub fn managed_cloud_config(key: &SshCaPublicKey) -> Result<String, UserDataError> {
    let key_file = format!("{}\n", key.openssh());
    let config = CloudConfig {
        write_files: [
            WriteFile { path: TRUSTED_USER_CA_KEYS_PATH, content: &key_file, owner: "root:root", permissions: "0644" },
            WriteFile {
                path: SSHD_DROP_IN_PATH,
                content: SSHD_DROP_IN_CONTENT,
                owner: "root:root",
                permissions: "0644",
            },
        ],
        runcmd: [SSHD_RELOAD_COMMAND],
    };
    let yaml = serde_saphyr::to_string(&config).map_err(|e| {
        UserDataError::new(UserDataErrorReason::Internal, format!("cannot serialise the SSH CA cloud-config: {e}"))
    })?;
    Ok(format!("#cloud-config\n{yaml}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    pub(crate) const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti ca@example";

    #[test]
    fn accepts_one_key_with_surrounding_whitespace() {
        let key = validate_ssh_public_key(&format!("  {ED25519}\n")).unwrap();
        assert_eq!(key.openssh(), ED25519);
        assert_eq!(key.algorithm(), "ssh-ed25519");
        assert!(key.fingerprint().starts_with("SHA256:"));
        let debug = format!("{key:?}");
        assert!(!debug.contains("AAAA"), "{debug}");
    }

    #[test]
    fn refuses_bad_keys() {
        let cases: &[(&str, UserDataErrorReason)] = &[
            ("", UserDataErrorReason::SshKeyEmpty),
            (" \n\t", UserDataErrorReason::SshKeyEmpty),
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
                UserDataErrorReason::SshKeyPrivate,
            ),
            ("-----BEGIN RSA PRIVATE KEY-----", UserDataErrorReason::SshKeyPrivate),
            ("garbage", UserDataErrorReason::SshKeyInvalid),
            ("ssh-ed25519 not-base64!", UserDataErrorReason::SshKeyInvalid),
            (
                "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti",
                UserDataErrorReason::SshKeyInvalid,
            ),
            (
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSq",
                UserDataErrorReason::SshKeyInvalid,
            ),
            (
                "cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti",
                UserDataErrorReason::SshKeyInvalid,
            ),
            ("ssh-ed25519-cert-v01@openssh.com AAAA", UserDataErrorReason::SshKeyInvalid),
            (
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti a\u{0}b",
                UserDataErrorReason::SshKeyInvalid,
            ),
        ];
        for (key, reason) in cases {
            let err = validate_ssh_public_key(key).unwrap_err();
            assert_eq!(err.reason(), *reason, "{key:?}: {err}");
            assert!(err.reason().is_ssh_key());
            assert!(err.message().starts_with("SSH certificate authority public key"), "{err}");
        }
    }

    #[test]
    fn refuses_two_keys_and_trailing_yaml() {
        for key in [
            format!("{ED25519}\n{ED25519}\n"),
            format!("{ED25519}\nruncmd: [reboot]\n"),
            format!("{ED25519}\r\nruncmd: [reboot]"),
            format!("{ED25519}\rx"),
        ] {
            let err = validate_ssh_public_key(&key).unwrap_err();
            assert_eq!(err.reason(), UserDataErrorReason::SshKeyMultipleLines, "{key:?}");
            assert!(!err.message().contains("AAAA"));
        }
    }

    #[test]
    fn managed_config_is_yaml_with_quoted_mode_and_exact_key() {
        let key = validate_ssh_public_key(ED25519).unwrap();
        let doc = managed_cloud_config(&key).unwrap();
        assert!(doc.starts_with("#cloud-config\n"), "{doc}");
        assert!(doc.contains("'0644'") || doc.contains("\"0644\""), "{doc}");
        let value: serde_json::Value = serde_saphyr::from_str(&doc).unwrap();
        assert_eq!(value["write_files"][0]["path"], TRUSTED_USER_CA_KEYS_PATH);
        assert_eq!(value["write_files"][0]["content"], format!("{ED25519}\n"));
        assert_eq!(value["write_files"][0]["permissions"], "0644");
        assert_eq!(value["write_files"][0]["owner"], "root:root");
        assert_eq!(value["write_files"][1]["path"], SSHD_DROP_IN_PATH);
        assert_eq!(value["write_files"][1]["content"], SSHD_DROP_IN_CONTENT);
        assert_eq!(value["write_files"][1]["permissions"], "0644");
        assert_eq!(value["runcmd"][0], SSHD_RELOAD_COMMAND);
    }

    #[test]
    fn hostile_comment_stays_a_comment() {
        let key = format!("{ED25519}: x\" ' # {{}} [] & * ! | > % @ `");
        let key = validate_ssh_public_key(&key).unwrap();
        let doc = managed_cloud_config(&key).unwrap();
        let value: serde_json::Value = serde_saphyr::from_str(&doc).unwrap();
        assert_eq!(value["write_files"][0]["content"], format!("{}\n", key.openssh()));
        assert_eq!(value.as_object().unwrap().len(), 2);
    }
}
