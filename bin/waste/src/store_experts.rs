//! Routed experts of a converted store for the in-process commands
//! (`waste forward`, `perplexity`, `kl`, `bench stops` on a store): each record is
//! read from `experts/` with a positioned read, verified against its
//! checksum (a corrupted record is an error naming the file, layer and
//! expert) and used in place as a `PackedExpert`. Records are kept while
//! they fit a RAM budget, then the cache starts over (the node has the real
//! cache and the IO engine; this is the simple exact path).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use waste_format::ExpertsDir;
use waste_format::experts::ExpertActivation;
use waste_kernels::{Activation, ExpertFfn, PackedExpert};
use waste_model::config::FfnKind;
use waste_model::{ExpertProvider, ModelConfig};

type ExpertMap = HashMap<(usize, u32), Arc<dyn ExpertFfn>>;

/// A store's `experts/` folder as an [`ExpertProvider`].
pub struct StoreExperts {
    dir: ExpertsDir,
    budget_bytes: usize,
    /// (bytes held, experts by (layer, id))
    cache: Mutex<(usize, ExpertMap)>,
}

impl std::fmt::Debug for StoreExperts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreExperts")
            .field("dir", &self.dir.dir())
            .field("budget_bytes", &self.budget_bytes)
            .finish_non_exhaustive()
    }
}

impl StoreExperts {
    /// Opens `experts/` (index and every layer header checked) and checks it
    /// against the model the backbone describes (its `config_path`).
    pub fn open(
        dir: &Path,
        config: &ModelConfig,
        config_path: &Path,
        budget_bytes: usize,
    ) -> Result<Self> {
        let dir = ExpertsDir::open(dir).with_context(|| format!("open {}", dir.display()))?;
        let index = dir.index();
        crate::model_check::store_experts(config, index, config_path)?;
        let store_act = match index.activation {
            ExpertActivation::Silu => Activation::Silu,
            ExpertActivation::Situ { beta, linear_beta } => Activation::Situ { beta, linear_beta },
        };
        if store_act != config.activation {
            bail!(
                "{}: the experts were converted for activation {store_act:?}, the backbone's config says {:?}",
                dir.dir().display(),
                config.activation
            );
        }
        let width = config.expert_width();
        for l in &index.layers {
            let routed = matches!(config.ffn.get(l.layer as usize), Some(FfnKind::Moe));
            if !routed || l.d_model as usize != width {
                bail!(
                    "{}: layer {} holds {}-wide experts, which the backbone's config does not route to (MoE layers, expert width {width})",
                    dir.dir().display(),
                    l.layer,
                    l.d_model
                );
            }
        }
        Ok(Self {
            dir,
            budget_bytes,
            cache: Mutex::new((0, HashMap::new())),
        })
    }

    fn read(&self, layer: usize, id: u32) -> waste_model::Result<Arc<dyn ExpertFfn>> {
        let source =
            |e: Box<dyn std::error::Error + Send + Sync>| waste_model::Error::ExpertSource {
                layer,
                expert: id,
                source: e,
            };
        let mut buf = Vec::new();
        self.dir
            .read_record(layer as u32, id, &mut buf)
            .map_err(|e| source(Box::new(e)))?;
        let loc = self
            .dir
            .locate(layer as u32, id)
            .map_err(|e| source(Box::new(e)))?;
        let expert = PackedExpert::parse(buf)
            .map_err(|e| source(format!("{}: {e}", loc.path.display()).into()))?;
        Ok(Arc::new(expert))
    }
}

impl ExpertProvider for StoreExperts {
    fn experts(&self, layer: usize, ids: &[u32]) -> waste_model::Result<Vec<Arc<dyn ExpertFfn>>> {
        let cached: Vec<Option<Arc<dyn ExpertFfn>>> = {
            let guard = self.cache.lock().expect("expert cache lock");
            ids.iter()
                .map(|id| guard.1.get(&(layer, *id)).cloned())
                .collect()
        };
        // Misses are read (and checksummed) in parallel: a prompt's first
        // layer pass touches most of a layer's experts at once.
        let experts: Vec<Arc<dyn ExpertFfn>> = ids
            .par_iter()
            .zip(cached)
            .map(|(&id, hit)| match hit {
                Some(e) => Ok(e),
                None => self.read(layer, id),
            })
            .collect::<waste_model::Result<_>>()?;
        let mut guard = self.cache.lock().expect("expert cache lock");
        let (used, map) = &mut *guard;
        for (&id, e) in ids.iter().zip(&experts) {
            if map.contains_key(&(layer, id)) {
                continue;
            }
            if *used + e.size_bytes() > self.budget_bytes {
                map.clear();
                *used = 0;
            }
            *used += e.size_bytes();
            map.insert((layer, id), Arc::clone(e));
        }
        Ok(experts)
    }
}
