//! Numeric operations shared by the layers: normalisation, softmax, rotary,
//! the gated delta rule.

pub mod delta_rule;
pub mod norm;
pub mod rope;
pub mod softmax;
