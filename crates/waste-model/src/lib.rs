//! waste-model
