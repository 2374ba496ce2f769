//! `crd`: prints the CustomResourceDefinitions as YAML documents.

use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also print the kinds a Server consumes (Network, SecurityGroup, ...),
    /// for test clusters that do not run the region controller.
    #[arg(long)]
    all: bool,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let crds = if args.all { server_kube::all_crds() } else { vec![server_kube::crd::server_crd()] };
    let mut out = String::new();
    for crd in &crds {
        match serde_saphyr::to_string(crd) {
            Ok(yaml) => {
                out.push_str("---\n");
                out.push_str(&yaml);
            }
            Err(error) => {
                eprintln!("error: cannot render the CRD as YAML: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: cannot write to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}
