//! Hooks that let a caller see inside a forward pass, layer by layer, to diff
//! against a reference (llama.cpp's `cb(cur, name, il)`). Tracing costs nothing
//! when the [`NoTrace`] sink is used.

use crate::layers::moe::Routing;

/// Receives named intermediate tensors and routing decisions.
///
/// Tensor names: `attn_in`, `attn_out`, `mlp_in`, `mlp_out`, `routed_out`,
/// `shared_out`, `layer_out` (all (n, hidden), row-major), and `embed`
/// (layer 0, before the first layer).
pub trait Trace {
    fn tensor(&mut self, _layer: usize, _name: &str, _data: &[f32]) {}
    fn routing(&mut self, _routing: &Routing) {}
}

/// A sink that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTrace;

impl Trace for NoTrace {}
