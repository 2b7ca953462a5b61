//! One module per subcommand: flag parsing and a call into a library.

pub mod forward;
pub mod run;
