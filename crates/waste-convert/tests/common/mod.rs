//! Where the fixtures are, for the integration tests of this crate.

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}
