//! Benchmarks of waste: measurements behind `waste bench`, none of which
//! serving or converting needs. They use the production crates only through
//! their public API, so what they time is what the binary runs.
//!
//! - [`kernels`]: GB/s of the quantized and ggml kernel tables (`waste bench kernels`).
//! - [`dense`]: dense f32/bf16 product throughput (`waste bench dense`).
//! - [`quant_study`]: the quantizer study of docs/QUANT.md (`waste bench quant`).
//! - [`store`]: served against raw O_DIRECT bandwidth of a store (`waste bench
//!   store`), and the raw reads, CPU-steal meter and synthetic traffic that
//!   `waste bench e2e` shares.
//! - [`node`]: one timed in-process generation on a loaded node (`waste bench e2e`).

pub mod dense;
pub mod kernels;
pub mod node;
pub mod quant_study;
pub mod store;
