//! Where the region's OpenStack lives and how patient to be with it.
//!
//! The adapter never reads Kubernetes: the app fills an [`OpenStackConfig`]
//! from a file or from the data of a Secret named by a flag
//! ([`OpenStackConfig::from_json`], [`OpenStackConfig::from_string_map`]).
//! Credentials are not part of it: they come per call in the identity context.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
pub use server_core::port::NetworkSelector;

/// Configuration of one region's OpenStack.
///
/// Keys (camelCase, as in a file or a Secret): `authURL`, `region`,
/// `interface`, `requestTimeout`, `connectTimeout`, `tokenRefreshMargin`,
/// `loginBackoff`, `loginBackoffMax`, `floatingNetworkID`, `externalNetworks`
/// (`{"ids": [...], "tags": [...]}`), `caCertificate`. Durations are seconds (`30`) or
/// friendly strings (`"30s"`, `"2m"`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenStackConfig {
    /// Keystone's v3 endpoint, e.g. `https://keystone.example.com:5000/v3`
    /// (a bare `.../` or unversioned URL gets `/v3` appended).
    #[serde(rename = "authURL", alias = "authUrl")]
    pub auth_url: String,
    /// The region name endpoints are picked for in the service catalog.
    pub region: String,
    /// Which catalog endpoint interface to use.
    #[serde(default)]
    pub interface: Interface,
    /// Whole-request limit for every HTTP call.
    #[serde(default = "defaults::request_timeout", deserialize_with = "duration")]
    pub request_timeout: Duration,
    #[serde(default = "defaults::connect_timeout", deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// A token is renewed this long before Keystone says it expires.
    #[serde(default = "defaults::token_refresh_margin", deserialize_with = "duration")]
    pub token_refresh_margin: Duration,
    /// After Keystone refuses a credential, it is not tried again for this
    /// long, doubled on each further refusal up to `login_backoff_max`.
    #[serde(default = "defaults::login_backoff", deserialize_with = "duration")]
    pub login_backoff: Duration,
    #[serde(default = "defaults::login_backoff_max", deserialize_with = "duration")]
    pub login_backoff_max: Duration,
    /// External network floating IPs are allocated from. When unset and a
    /// server asks for a public IP, the selector's first match is used, or
    /// without a selector the first external network Neutron lists (as the
    /// Go controller does); either is chosen before the server is created.
    #[serde(default, rename = "floatingNetworkID", alias = "floatingNetworkId")]
    pub floating_network_id: Option<String>,
    /// Which external networks floating IPs may come from: the first
    /// external network Neutron lists that has every ID- and tag-condition
    /// given is used, as the Go controller picks it. Set here, it overrides
    /// the Region resource's `spec.openstack.network.externalNetworks.selector`
    /// (which the controller reads when given `--region-namespace`).
    #[serde(default)]
    pub external_networks: Option<NetworkSelector>,
    /// Extra PEM CA certificates trusted on top of the platform's roots
    /// (private clouds).
    #[serde(default)]
    pub ca_certificate: Option<String>,
}

mod defaults {
    use std::time::Duration;

    pub(super) fn request_timeout() -> Duration {
        Duration::from_secs(30)
    }

    pub(super) fn connect_timeout() -> Duration {
        Duration::from_secs(10)
    }

    pub(super) fn token_refresh_margin() -> Duration {
        Duration::from_secs(300)
    }

    pub(super) fn login_backoff() -> Duration {
        Duration::from_secs(60)
    }

    pub(super) fn login_backoff_max() -> Duration {
        Duration::from_secs(960)
    }
}

impl OpenStackConfig {
    /// A configuration with default timeouts and the public interface.
    pub fn new(auth_url: impl Into<String>, region: impl Into<String>) -> Self {
        OpenStackConfig {
            auth_url: auth_url.into(),
            region: region.into(),
            interface: Interface::default(),
            request_timeout: defaults::request_timeout(),
            connect_timeout: defaults::connect_timeout(),
            token_refresh_margin: defaults::token_refresh_margin(),
            login_backoff: defaults::login_backoff(),
            login_backoff_max: defaults::login_backoff_max(),
            floating_network_id: None,
            external_networks: None,
            ca_certificate: None,
        }
    }

    /// Parses a configuration file (JSON, the keys above).
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// Builds the configuration from string key/values, as in a Secret's data
    /// (after base64 decoding) or `stringData`. Numbers may be given as text.
    pub fn from_string_map<K, V>(entries: impl IntoIterator<Item = (K, V)>) -> Result<Self, ConfigError>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let object: serde_json::Map<String, serde_json::Value> =
            entries.into_iter().map(|(k, v)| (k.into(), serde_json::Value::String(v.into()))).collect();
        serde_json::from_value(serde_json::Value::Object(object)).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// Same as [`OpenStackConfig::from_string_map`] over raw Secret bytes.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, ConfigError> {
        let mut entries = Vec::with_capacity(data.len());
        for (key, value) in data {
            let text = String::from_utf8(value.clone()).map_err(|_| ConfigError::NotUtf8 { key: key.clone() })?;
            entries.push((key.clone(), text.trim().to_owned()));
        }
        OpenStackConfig::from_string_map(entries)
    }

    /// Checks what can be checked without the network.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let url = url::Url::parse(self.auth_url.trim())
            .map_err(|e| ConfigError::Invalid { field: "authURL", reason: e.to_string() })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::Invalid { field: "authURL", reason: "must be an http or https URL".into() });
        }
        if self.region.trim().is_empty() {
            return Err(ConfigError::Invalid { field: "region", reason: "must not be empty".into() });
        }
        for (field, value) in [
            ("requestTimeout", self.request_timeout),
            ("connectTimeout", self.connect_timeout),
            ("loginBackoff", self.login_backoff),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Invalid { field, reason: "must be positive".into() });
            }
        }
        Ok(())
    }

    /// The token endpoint: `<auth URL, ending in /v3>/auth/tokens`.
    pub(crate) fn token_url(&self) -> String {
        let base = self.auth_url.trim().trim_end_matches('/');
        if base.ends_with("/v3") { format!("{base}/auth/tokens") } else { format!("{base}/v3/auth/tokens") }
    }
}

// Written by hand so a CA bundle (or anything added later) never floods logs.
impl fmt::Debug for OpenStackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenStackConfig")
            .field("auth_url", &self.auth_url)
            .field("region", &self.region)
            .field("interface", &self.interface)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("token_refresh_margin", &self.token_refresh_margin)
            .field("login_backoff", &self.login_backoff)
            .field("login_backoff_max", &self.login_backoff_max)
            .field("floating_network_id", &self.floating_network_id)
            .field("external_networks", &self.external_networks)
            .field("ca_certificate", &self.ca_certificate.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

/// Catalog endpoint interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Interface {
    #[default]
    Public,
    Internal,
    Admin,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
            Interface::Admin => "admin",
        }
    }
}

impl FromStr for Interface {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Keystone also answers to the old "publicURL" style names.
        match s.trim().to_ascii_lowercase().trim_end_matches("url") {
            "public" => Ok(Interface::Public),
            "internal" => Ok(Interface::Internal),
            "admin" => Ok(Interface::Admin),
            _ => Err(ConfigError::Invalid { field: "interface", reason: format!("unknown interface {s:?}") }),
        }
    }
}

impl<'de> Deserialize<'de> for Interface {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Seconds as a number or numeric string, or a friendly duration ("30s", "2m").
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(f64),
        Text(String),
    }
    let seconds = match Raw::deserialize(deserializer)? {
        Raw::Seconds(seconds) => seconds,
        Raw::Text(text) => parse_duration(&text).map_err(serde::de::Error::custom)?,
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| serde::de::Error::custom(format!("bad duration: {e}")))
}

fn parse_duration(text: &str) -> Result<f64, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Ok(seconds);
    }
    let span: jiff::SignedDuration = text.parse().map_err(|e| format!("bad duration {text:?}: {e}"))?;
    Ok(span.as_secs_f64())
}

/// Why an [`OpenStackConfig`] cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("OpenStack configuration is malformed: {0}")]
    Parse(String),
    #[error("OpenStack configuration key {key:?} is not UTF-8")]
    NotUtf8 { key: String },
    #[error("OpenStack configuration field {field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("OpenStack CA certificate is unusable: {0}")]
    CaCertificate(String),
    #[error("building the OpenStack HTTP client failed: {0}")]
    Client(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_file_with_defaults() -> Result<(), ConfigError> {
        let config =
            OpenStackConfig::from_json(r#"{"authURL": "https://ks.example:5000/v3/", "region": "RegionOne"}"#)?;
        assert_eq!(config.interface, Interface::Public);
        assert_eq!(config.request_timeout, Duration::from_secs(30));
        assert_eq!(config.token_url(), "https://ks.example:5000/v3/auth/tokens");
        config.validate()
    }

    #[test]
    fn the_regions_external_network_selector_and_the_login_backoff() -> Result<(), ConfigError> {
        let config = OpenStackConfig::from_json(
            r#"{"authURL": "https://ks/v3", "region": "r", "loginBackoff": "30s",
                "externalNetworks": {"tags": ["public"]}}"#,
        )?;
        let selector = config.external_networks.clone().unwrap_or_default();
        assert!(selector.selects("any", &["public".into(), "ipv4".into()]));
        assert!(!selector.selects("any", &["ipv4".into()]));
        let by_id = NetworkSelector { ids: Some(vec!["n1".into()]), tags: None };
        assert!(by_id.selects("n1", &[]) && !by_id.selects("n2", &[]));
        assert_eq!(
            (config.login_backoff, config.login_backoff_max),
            (Duration::from_secs(30), Duration::from_secs(960))
        );
        config.validate()
    }

    #[test]
    fn secret_data_with_text_numbers_and_friendly_durations() -> Result<(), ConfigError> {
        let data: BTreeMap<String, Vec<u8>> = [
            ("authURL", "http://ks:5000\n"),
            ("region", "r1"),
            ("interface", "internalURL"),
            ("requestTimeout", "12"),
            ("connectTimeout", "1.5"),
            ("tokenRefreshMargin", "2m"),
            ("floatingNetworkID", "ext-net"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect();
        let config = OpenStackConfig::from_secret_data(&data)?;
        assert_eq!(config.interface, Interface::Internal);
        assert_eq!(config.request_timeout, Duration::from_secs(12));
        assert_eq!(config.connect_timeout, Duration::from_millis(1500));
        assert_eq!(config.token_refresh_margin, Duration::from_secs(120));
        assert_eq!(config.floating_network_id.as_deref(), Some("ext-net"));
        assert_eq!(config.token_url(), "http://ks:5000/v3/auth/tokens");
        Ok(())
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        assert!(OpenStackConfig::from_json(r#"{"authURL": "http://k", "region": "r", "pasword": "x"}"#).is_err());
        assert!(
            OpenStackConfig::from_string_map([("authURL", "http://k"), ("region", "r"), ("interface", "x")]).is_err()
        );
        let bad_url = OpenStackConfig::new("ftp://k", "r");
        assert!(matches!(bad_url.validate(), Err(ConfigError::Invalid { field: "authURL", .. })));
        let no_region = OpenStackConfig::new("http://k", " ");
        assert!(matches!(no_region.validate(), Err(ConfigError::Invalid { field: "region", .. })));
    }

    #[test]
    fn debug_hides_the_ca_bundle() {
        let mut config = OpenStackConfig::new("http://k", "r");
        config.ca_certificate = Some("-----BEGIN CERTIFICATE-----MIIB".into());
        assert!(!format!("{config:?}").contains("MIIB"));
    }
}
