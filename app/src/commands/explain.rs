//! `explain NAMESPACE/NAME`: what the controller would decide for one Server
//! now, and why — the first command an on-call engineer runs. It reads the
//! Server, its consumed resources and (given the region's OpenStack
//! configuration, as `run` is given it) the provider's record, and prints
//! the core's decision in words. It writes nothing.

use std::process::ExitCode;

use anyhow::Context as _;
use server_kube::{CloudRegistry, ControllerConfig};

use super::run::{MAX_ATTEMPTS_BOUND, cause_once, kube_client, openstack_clouds, parse_region_source};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The Server, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME", value_parser = parse_target)]
    server: (String, String),

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

fn parse_target(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((namespace.into(), name.into()))
        }
        _ => Err(format!("{value:?} is not NAMESPACE/NAME")),
    }
}

pub(crate) fn run(args: &Args) -> ExitCode {
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
    let clouds: CloudRegistry =
        openstack_clouds(&args.openstack_configs, &args.openstack_secrets, &client, None, std::time::Duration::ZERO)
            .await?;
    let config = ControllerConfig {
        options: server_core::Options::with_max_attempts(args.provider_create_max_attempts),
        ..ControllerConfig::default()
    };
    let (namespace, name) = &args.server;
    let explanation = server_kube::explain(&client, &clouds, &config, namespace, name)
        .await
        .with_context(|| format!("cannot explain Server {namespace}/{name}"))?;
    Ok(explanation.to_string())
}
