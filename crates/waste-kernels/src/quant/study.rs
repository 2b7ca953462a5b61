//! Quantizer variants measured for docs/QUANT.md but not stored (yet).
