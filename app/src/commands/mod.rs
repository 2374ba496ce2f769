//! One module per subcommand.

pub(crate) mod render_user_data;
