//! `explain [NAMESPACE/]NAME`: what the controller would decide for one
//! Server now, and why — the first command an on-call engineer runs. It
//! reads the Server, its consumed resources and (given the region's
//! OpenStack configuration, as `run` is given it) the provider's record, and
//! prints the core's decision in words. It writes nothing.
//!
//! Also a kubectl plugin: the binary run as `kubectl-server_explain` (a
//! symlink on the PATH) is this command, so `kubectl server-explain NAME`
//! works (`main.rs` dispatches on the name it is run as).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use server_kube::{CloudRegistry, ControllerConfig};

use super::run::{Access, MAX_ATTEMPTS_BOUND, cause_once, kube_client, openstack_clouds, parse_region_source};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The Server: NAME (in --namespace, else the kubeconfig context's
    /// namespace, as kubectl takes it) or NAMESPACE/NAME.
    #[arg(value_name = "[NAMESPACE/]NAME", value_parser = parse_target)]
    server: Target,

    /// The Server's namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,

    /// The kubeconfig to read with (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,

    /// The operator's `--provider-create-max-attempts` (the cap decides what
    /// "parked at the cap" is).
    #[arg(
        long,
        env = "SERVER_CONTROLLER_PROVIDER_CREATE_MAX_ATTEMPTS",
        default_value_t = 3,
        value_parser = clap::value_parser!(i32).range(1..=MAX_ATTEMPTS_BOUND)
    )]
    provider_create_max_attempts: i32,

    /// The region's OpenStack configuration, as `run` takes it
    /// (`REGION_ID=FILE`), to read the provider's record. Without one, the
    /// provider's view is reported as not read.
    #[arg(long = "openstack-config", env = "SERVER_CONTROLLER_OPENSTACK_CONFIGS", value_delimiter = ',', value_parser = parse_region_source)]
    openstack_configs: Vec<(String, String)>,

    /// The region's OpenStack configuration from a Secret (`REGION_ID=NAMESPACE/NAME`).
    #[arg(long = "openstack-secret", env = "SERVER_CONTROLLER_OPENSTACK_SECRETS", value_delimiter = ',', value_parser = parse_region_source)]
    openstack_secrets: Vec<(String, String)>,
}

/// The Server asked for, as given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    namespace: Option<String>,
    name: String,
}

fn parse_target(value: &str) -> Result<Target, String> {
    match value.split_once('/') {
        None if !value.is_empty() => Ok(Target { namespace: None, name: value.into() }),
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(Target { namespace: Some(namespace.into()), name: name.into() })
        }
        _ => Err(format!("{value:?} is not NAME or NAMESPACE/NAME")),
    }
}

pub(crate) fn run(args: &Args) -> ExitCode {
    if let (Some(flag), Some(given)) = (&args.namespace, &args.server.namespace)
        && flag != given
    {
        eprintln!("error: the Server is named in namespace {given}, but --namespace says {flag}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(explain(args)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {}", cause_once(&error));
            ExitCode::FAILURE
        }
    }
}

async fn explain(args: &Args) -> anyhow::Result<String> {
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let clouds: CloudRegistry = openstack_clouds(
        &args.openstack_configs,
        &args.openstack_secrets,
        &client,
        None,
        Duration::ZERO,
        None,
        Access::ReadOnly,
    )
    .await?;
    let config = ControllerConfig {
        options: server_core::Options::with_max_attempts(args.provider_create_max_attempts),
        ..ControllerConfig::default()
    };
    // As kubectl takes it: the namespace given, else the kubeconfig
    // context's (the client's default, "default" when it names none).
    let namespace = args
        .server
        .namespace
        .clone()
        .or_else(|| args.namespace.clone())
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let name = &args.server.name;
    let explanation = server_kube::explain(&client, &clouds, &config, &namespace, name)
        .await
        .with_context(|| format!("cannot explain Server {namespace}/{name}"))?;
    Ok(explanation.to_string())
}

/// `kubectl server-explain ...`: the binary run as the kubectl plugin, whose
/// arguments are `explain`'s.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kubectl server-explain",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("GIT_REVISION"), ")"),
    about = "Say what the server-controller would decide for one Server now, and why (reads only)."
)]
pub(crate) struct Plugin {
    #[command(flatten)]
    pub(crate) args: Args,
}

/// The executable name kubectl looks up for `kubectl server-explain` (it
/// maps the dash in a plugin's command to an underscore).
pub(crate) const PLUGIN_NAME: &str = "kubectl-server_explain";

/// Whether the binary was run under the plugin's name (`argv[0]`, any
/// directory; `kubectl-server-explain` too, as a person may name it).
pub(crate) fn run_as_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(|name| name.to_str())
        .map(|name| name.strip_suffix(".exe").unwrap_or(name))
        .is_some_and(|name| name == PLUGIN_NAME || name == "kubectl-server-explain")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_name_or_namespace_and_name() {
        assert_eq!(parse_target("web"), Ok(Target { namespace: None, name: "web".into() }));
        assert_eq!(parse_target("org/web"), Ok(Target { namespace: Some("org".into()), name: "web".into() }));
        for bad in ["", "/web", "org/", "a/b/c"] {
            assert!(parse_target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_plugin_is_recognised_by_the_name_it_is_run_as() {
        for name in ["kubectl-server_explain", "/usr/local/bin/kubectl-server_explain", "kubectl-server-explain"] {
            assert!(run_as_plugin(std::ffi::OsStr::new(name)), "{name}");
        }
        for name in ["server-controller", "/bin/kubectl", "kubectl-server_explain-old"] {
            assert!(!run_as_plugin(std::ffi::OsStr::new(name)), "{name}");
        }
    }
}
