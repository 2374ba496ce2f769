//! One module per subcommand. `demo` and `simulate` need the `sim` feature.

pub(crate) mod crd;
#[cfg(feature = "sim")]
pub(crate) mod demo;
pub(crate) mod explain;
pub(crate) mod render_user_data;
pub(crate) mod run;
#[cfg(feature = "sim")]
pub(crate) mod simulate;
