//! One module per subcommand.

pub(crate) mod crd;
pub(crate) mod demo;
pub(crate) mod render_user_data;
pub(crate) mod run;
pub(crate) mod simulate;
