//! waste-proto
