//! Test support for waste's end-to-end and golden tests.
//!
//! Owns the independent pieces a test compares the optimized forward pass
//! against: [`reference_logits`], a naive f32 forward written from Hugging Face
//! transformers' semantics (not from `waste-model`), [`random_checkpoint`], a
//! seeded generator of random configs and weights for every supported family,
//! [`MemorySource`], a [`waste_kernels::TensorSource`] over a `HashMap`, and
//! [`fixtures`]: fixture paths, goldens files and the SmolLM2 GGUF, a
//! minimal HTTP/1.1 client ([`http`]), and [`gguf_py`]: GGUF files written
//! by llama.cpp's gguf-py.
//! Does not own the golden tests themselves (`tests/*.rs`) nor any server
//! harness.

pub mod fixtures;
pub mod fuzz;
pub mod gguf_py;
pub mod harness;
pub mod http;
pub mod memory_source;
pub mod reference;
pub mod synth;
pub mod wrapped_source;

pub use fixtures::{
    Goldens, argmax, check_greedy, fixture, gguf_tensor_bytes, max_abs_diff, repo_data,
    smollm2_gguf,
};
pub use memory_source::MemorySource;
pub use reference::reference_logits;
pub use synth::{Family, random_checkpoint};
