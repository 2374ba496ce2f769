//! `render-user-data`: the user data the operator would send to the provider
//! for a given `spec.userData` and SSH CA public key, byte for byte.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use server_core::user_data::render_user_data;

/// Arguments of `render-user-data`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// File holding the user data (decoded, as in `spec.userData`); `-` reads
    /// standard input. An empty file means no user data.
    #[arg(long, value_name = "FILE|-")]
    user_data: PathBuf,

    /// File holding the SSH certificate authority's OpenSSH public key
    /// (`spec.publicKey` of the SshCertificateAuthority).
    #[arg(long, value_name = "FILE")]
    ssh_ca_public_key: Option<PathBuf>,
}

fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read user data from standard input: {e}"))?;
        return Ok(buf);
    }
    fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn read_key(path: &Path) -> Result<String, String> {
    let bytes = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "SSH certificate authority public key: {} is not UTF-8 text; expected one OpenSSH public key line",
            path.display()
        )
    })
}

/// Runs the subcommand: the rendered bytes on standard output, or the error
/// on standard error and exit status 1.
pub(crate) fn run(args: &Args) -> ExitCode {
    match render(args) {
        Ok(bytes) => {
            let mut stdout = io::stdout().lock();
            match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write to standard output: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn render(args: &Args) -> Result<Vec<u8>, String> {
    let user_data = read_input(&args.user_data)?;
    let key = args.ssh_ca_public_key.as_deref().map(read_key).transpose()?;
    let rendered =
        render_user_data(Some(&user_data), key.as_deref()).map_err(|e| format!("{e} (reason: {})", e.reason()))?;
    Ok(rendered.unwrap_or_default())
}
