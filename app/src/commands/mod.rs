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
