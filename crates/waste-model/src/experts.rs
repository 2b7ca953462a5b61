//! Where the in-process forward pass gets routed experts from. The model only
//! routes; an [`ExpertProvider`] hands it the chosen experts. The daemons
//! stream experts from a store; [`SourceExperts`] loads them from any
//! [`TensorSource`] (a Hugging Face folder read by waste-convert), on demand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use waste_kernels::{ExpertFfn, TensorSource};

use crate::config::ModelConfig;
use crate::layers::Loader;
use crate::{Error, Result};

type ExpertMap = HashMap<(usize, u32), Arc<dyn ExpertFfn>>;

/// Supplies the experts a layer's routing chose.
pub trait ExpertProvider: Sync {
    /// The experts `ids` (ascending, distinct) of `layer`, in the same order.
    fn experts(&self, layer: usize, ids: &[u32]) -> Result<Vec<Arc<dyn ExpertFfn>>>;
}

/// Loads experts from a tensor source by their state-dict names and keeps
/// them while they fit in `budget_bytes` (then starts over: the exact path
/// favours simplicity; the node has the real cache).
pub struct SourceExperts<'a> {
    source: &'a dyn TensorSource,
    config: ModelConfig,
    budget_bytes: usize,
    /// (bytes held, experts by (layer, id))
    cache: Mutex<(usize, ExpertMap)>,
}

impl std::fmt::Debug for SourceExperts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceExperts")
            .field("budget_bytes", &self.budget_bytes)
            .finish_non_exhaustive()
    }
}

impl<'a> SourceExperts<'a> {
    pub fn new(source: &'a dyn TensorSource, config: &ModelConfig, budget_bytes: usize) -> Self {
        Self {
            source,
            config: config.clone(),
            budget_bytes,
            cache: Mutex::new((0, HashMap::new())),
        }
    }

    fn load(&self, layer: usize, id: u32) -> Result<Arc<dyn ExpertFfn>> {
        let moe = self.config.moe.as_ref().ok_or(Error::Step {
            layer,
            what: "model has no experts",
        })?;
        if id as usize >= moe.num_experts {
            return Err(Error::ExpertShape {
                layer,
                expert: id,
                what: format!("only {} experts", moe.num_experts),
            });
        }
        let names = moe.names.expert(&self.config.names, layer, id);
        let e = Loader::new(self.source).gated_mlp(
            names,
            self.config.expert_width(),
            moe.moe_intermediate_size,
        )?;
        Ok(Arc::new(e))
    }
}

impl ExpertProvider for SourceExperts<'_> {
    fn experts(&self, layer: usize, ids: &[u32]) -> Result<Vec<Arc<dyn ExpertFfn>>> {
        ids.iter()
            .map(|&id| {
                if let Some(e) = self
                    .cache
                    .lock()
                    .expect("expert cache lock")
                    .1
                    .get(&(layer, id))
                {
                    return Ok(Arc::clone(e));
                }
                let e = self.load(layer, id)?;
                let mut guard = self.cache.lock().expect("expert cache lock");
                let (used, map) = &mut *guard;
                if *used + e.size_bytes() > self.budget_bytes {
                    map.clear();
                    *used = 0;
                }
                *used += e.size_bytes();
                map.insert((layer, id), Arc::clone(&e));
                Ok(e)
            })
            .collect()
    }
}
