//! One module per subcommand. `bench`, `demo` and `simulate` need the `sim` feature.

#[cfg(feature = "sim")]
pub(crate) mod bench;
pub(crate) mod crd;
#[cfg(feature = "sim")]
pub(crate) mod demo;
pub(crate) mod explain;
pub(crate) mod render_user_data;
pub(crate) mod run;
#[cfg(feature = "sim")]
pub(crate) mod simulate;

/// Parses a share between 0 and 1 (fault and failure rates of the sims).
#[cfg(feature = "sim")]
pub(crate) fn parse_rate(value: &str) -> Result<f64, String> {
    let rate: f64 = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    if (0.0..=1.0).contains(&rate) { Ok(rate) } else { Err(format!("{rate} is not between 0 and 1")) }
}

/// Runs a command's work on a new runtime: success when it returns true,
/// failure (with the error's chain on stderr) otherwise.
#[cfg(feature = "sim")]
pub(crate) fn block_on_verdict(
    work: impl std::future::Future<Output = anyhow::Result<bool>>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
