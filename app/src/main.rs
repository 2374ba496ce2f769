//! `server-controller`: the operator binary. Each subcommand lives in its own
//! module under `commands/`; this file only parses and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

#[derive(Debug, Parser)]
#[command(name = "server-controller", version, about = "Kubernetes operator for region.unikorn-cloud.org Servers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print exactly the user data the operator would send to the provider.
    RenderUserData(commands::render_user_data::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::RenderUserData(args) => commands::render_user_data::run(&args),
    }
}
