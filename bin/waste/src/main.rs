//! The `waste` command line.

fn main() {}
