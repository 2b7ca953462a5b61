//! [`MemorySource`]: named tensors held in a `HashMap`, served through
//! [`TensorSource`] so a model can load a synthetic checkpoint (or a fixture
//! read into memory) without touching the file system. Owns no decoding: the
//! tensors are stored exactly as they will be handed out.

use std::collections::HashMap;

use waste_kernels::{Tensor, TensorSource, TensorSourceError};

/// An in-memory checkpoint keyed by Hugging Face state-dict name.
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    pub tensors: HashMap<String, Tensor>,
}

impl MemorySource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the tensor called `name`.
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        self.tensors.insert(name.into(), tensor);
    }
}

impl TensorSource for MemorySource {
    fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Returns a clone of the stored tensor.
    fn load(&self, name: &str) -> Result<Tensor, TensorSourceError> {
        self.tensors
            .get(name)
            .cloned()
            .ok_or_else(|| format!("tensor `{name}` is not in the in-memory source").into())
    }
}
