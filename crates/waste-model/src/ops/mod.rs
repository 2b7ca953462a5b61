//! Small numeric operations shared by the layers: normalisation, softmax, rotary.

pub mod norm;
pub mod rope;
pub mod softmax;
