//! waste-convert
