//! The decoder stack of every supported family, and the step API the node
//! drives: [`Model::embed`] → per layer [`Model::attend_and_route`] → (fetch
//! the routed experts elsewhere) → [`Model::apply_experts`] → [`Model::logits`].
//! [`Model::forward`] runs the same steps in-process with an [`ExpertProvider`].

mod load;

use std::sync::Arc;

use waste_kernels::{DenseExpert, ExpertFfn, Matrix, Q8Products, RowSource, TensorSource};

use crate::cache::{CacheType, KvCache};
use crate::config::ModelConfig;
use crate::error::KernelContext;
use crate::experts::ExpertProvider;
use crate::layers::attention::GqaAttention;
use crate::layers::kda::KdaAttention;
use crate::layers::mla::MlaAttention;
use crate::layers::moe::{MoeBlock, Routing};
use crate::layers::residual::Residual;
use crate::ops::norm;
use crate::trace::Trace;
use crate::{Error, Result};

// One of each per layer, built once: variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Attention {
    Gqa(GqaAttention),
    Mla(MlaAttention),
    Kda(KdaAttention),
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Ffn {
    Dense(DenseExpert),
    Moe(MoeBlock),
}

#[derive(Debug)]
struct DecoderLayer {
    input_norm: Vec<f32>, // (hidden)
    attn: Attention,
    post_norm: Vec<f32>, // (hidden)
    ffn: Ffn,
}

/// The token embeddings: held in RAM, or, when the source reads rows on
/// demand and the output head does not reuse the table, read by row from
/// the backbone file through a small cache of recent rows.
#[derive(Debug)]
enum Embeddings {
    Resident(Matrix), // (vocab, hidden)
    Rows {
        name: String,
        rows: Box<dyn RowSource>, // (vocab, hidden), on disk
    },
}

/// A loaded model: the backbone in RAM, routed experts left to a provider.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    embed: Embeddings,
    layers: Vec<DecoderLayer>,
    norm: Vec<f32>, // (hidden)
    /// None when the output projection is tied to the embeddings.
    lm_head: Option<Matrix>, // (vocab, hidden)
    /// What each sub-block reads from the residual stream (the family's choice).
    residual: Residual,
    /// Bytes of every weight loaded, as held in RAM.
    weight_bytes: usize,
}

/// The residual stream of one forward step over `n` new tokens.
#[derive(Debug, Clone)]
pub struct Activations {
    pub n: usize,
    /// Position of the first new token.
    pub pos0: usize,
    /// (n, hidden) the residual stream; with attention residuals, the live
    /// sum of module outputs since the last seal.
    pub hidden: Vec<f32>,
    /// Attention residuals: sealed block snapshots, oldest first, each (n, hidden).
    pub snapshots: Vec<Vec<f32>>,
}

/// Which positions [`Model::logits`] projects to the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    All,
    Last,
}

impl Model {
    /// Loads the backbone (everything but the routed experts) from `src`,
    /// its q8 matrices on the integer path ([`Q8Products::Int8`]).
    pub fn load(config: ModelConfig, src: &dyn TensorSource) -> Result<Self> {
        load::load(config, src, Q8Products::default())
    }

    /// [`Model::load`] with the q8 matrices' products as `q8` says
    /// ([`Q8Products::Exact`]: what their f32 copies compute, bit for bit).
    pub fn load_with(config: ModelConfig, src: &dyn TensorSource, q8: Q8Products) -> Result<Self> {
        load::load(config, src, q8)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Whether `layer` routes to experts (needs [`Model::apply_experts`]).
    pub fn is_moe_layer(&self, layer: usize) -> bool {
        matches!(self.layers.get(layer).map(|l| &l.ffn), Some(Ffn::Moe(_)))
    }

    /// An empty attention cache for up to `capacity` positions, exact (f32).
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(&self.config, capacity, CacheType::F32)
    }

    /// Bytes of backbone weights held in RAM (everything but the routed
    /// experts; for embeddings read by row, their cache at its capacity).
    pub fn backbone_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Whether the token embeddings are read by row from the backbone file
    /// instead of held (see [`TensorSource::rows`]).
    pub fn embeddings_on_disk(&self) -> bool {
        matches!(self.embed, Embeddings::Rows { .. })
    }

    /// Starts a step: looks up the embeddings of `tokens`, which continue the
    /// sequence held in `cache`.
    pub fn embed(
        &self,
        tokens: &[u32],
        cache: &KvCache,
        trace: &mut dyn Trace,
    ) -> Result<Activations> {
        if tokens.is_empty() {
            return Err(Error::EmptyStep);
        }
        cache.check_room(tokens.len())?;
        let h = self.config.hidden_size;
        let mut hidden = vec![0f32; tokens.len() * h];
        for (&id, row) in tokens.iter().zip(hidden.chunks_mut(h)) {
            if id as usize >= self.config.vocab_size {
                return Err(Error::TokenOutOfRange {
                    id,
                    vocab_size: self.config.vocab_size,
                });
            }
            match &self.embed {
                Embeddings::Resident(m) => m.row_f32_into(id as usize, row),
                Embeddings::Rows { name, rows } => {
                    rows.row_f32_into(id as usize, row)
                        .map_err(|source| Error::Weight {
                            name: name.clone(),
                            source,
                        })?;
                }
            }
        }
        trace.tensor(0, "embed", &hidden);
        Ok(Activations {
            n: tokens.len(),
            pos0: cache.len(),
            hidden,
            snapshots: Vec::new(),
        })
    }

    /// Runs `layer`'s attention and, for a dense layer, its MLP. For a MoE
    /// layer returns the routing: the caller fetches `routing.unique_experts()`
    /// and finishes the layer with [`Model::apply_experts`].
    pub fn attend_and_route(
        &self,
        layer: usize,
        act: &mut Activations,
        cache: &mut KvCache,
        trace: &mut dyn Trace,
    ) -> Result<Option<Routing>> {
        let l = self.layers.get(layer).ok_or(Error::Step {
            layer,
            what: "no such layer",
        })?;
        let (n, h, eps) = (act.n, self.config.hidden_size, self.config.rms_norm_eps);

        let mut x =
            self.residual
                .before_attention(layer, &mut act.hidden, &mut act.snapshots, n, trace);
        norm::rms_norm_rows(&mut x, &l.input_norm, eps);
        trace.tensor(layer, "attn_in", &x);
        let lc = cache.layer_at(layer, act.pos0)?;
        let attn = match &l.attn {
            Attention::Gqa(a) => a.forward(&x, n, act.pos0, lc, layer)?,
            Attention::Mla(a) => a.forward(&x, n, act.pos0, lc, layer)?,
            Attention::Kda(a) => a.forward(&x, n, lc, layer)?,
        };
        trace.tensor(layer, "attn_out", &attn);
        add_into(&mut act.hidden, &attn);

        let mut x = self
            .residual
            .before_ffn(layer, &act.hidden, &act.snapshots, n, trace);
        norm::rms_norm_rows(&mut x, &l.post_norm, eps);
        trace.tensor(layer, "mlp_in", &x);
        match &l.ffn {
            Ffn::Dense(mlp) => {
                let mut y = vec![0f32; n * h];
                mlp.forward(&x, n, self.config.activation, &mut y)
                    .at_layer(layer)?;
                trace.tensor(layer, "mlp_out", &y);
                add_into(&mut act.hidden, &y);
                trace.tensor(layer, "layer_out", &act.hidden);
                Ok(None)
            }
            Ffn::Moe(moe) => {
                let routing = moe.route(x, n, layer)?;
                trace.routing(&routing);
                Ok(Some(routing))
            }
        }
    }

    /// Finishes a MoE layer: `experts[i]` is expert `routing.unique_experts()[i]`.
    pub fn apply_experts(
        &self,
        act: &mut Activations,
        routing: &Routing,
        experts: &[&dyn ExpertFfn],
        trace: &mut dyn Trace,
    ) -> Result<()> {
        let sum = self.moe(routing.layer)?.routed_sum(routing, experts)?;
        self.apply_routed_sum(act, routing, sum, trace)
    }

    /// Finishes a MoE layer from the routed experts' weighted sum in the
    /// expert space, (n, d_expert), computed elsewhere (compute-at-store).
    pub fn apply_routed_sum(
        &self,
        act: &mut Activations,
        routing: &Routing,
        routed_sum: Vec<f32>,
        trace: &mut dyn Trace,
    ) -> Result<()> {
        let shared = self.shared_experts(routing)?;
        self.apply_routed_and_shared(act, routing, routed_sum, shared, trace)
    }

    /// The shared experts' output of a MoE layer, (n, hidden), or `None`
    /// when it has none: computable before the routed experts arrive.
    pub fn shared_experts(&self, routing: &Routing) -> Result<Option<Vec<f32>>> {
        self.moe(routing.layer)?
            .shared_out(routing, self.config.hidden_size)
    }

    /// [`Model::apply_routed_sum`] with the shared output already computed
    /// ([`Model::shared_experts`] of the same routing).
    pub fn apply_routed_and_shared(
        &self,
        act: &mut Activations,
        routing: &Routing,
        routed_sum: Vec<f32>,
        shared: Option<Vec<f32>>,
        trace: &mut dyn Trace,
    ) -> Result<()> {
        let layer = routing.layer;
        let routed = self.moe(layer)?.finish_routed(routing, routed_sum)?;
        trace.tensor(layer, "routed_out", &routed);
        let mut y = routed;
        if let Some(s) = shared {
            trace.tensor(layer, "shared_out", &s);
            add_into(&mut y, &s);
        }
        trace.tensor(layer, "mlp_out", &y);
        add_into(&mut act.hidden, &y);
        trace.tensor(layer, "layer_out", &act.hidden);
        Ok(())
    }

    /// A guess of the experts `layer` will route to, from the residual
    /// stream before it: its router applied to its own post-attention norm
    /// of `act.hidden`, skipping its attention. Used to prefetch `layer`'s
    /// experts while the previous layer runs. Distinct, most likely first
    /// (every token's first choice, then every token's second, ...), so
    /// the reads that come last, and are still queued when the real choice
    /// is known, are the likeliest to be wrong; empty for a layer without
    /// experts.
    pub fn guess_experts(&self, layer: usize, act: &Activations) -> Result<Vec<u32>> {
        let Some(DecoderLayer {
            ffn: Ffn::Moe(moe),
            post_norm,
            ..
        }) = self.layers.get(layer)
        else {
            return Ok(Vec::new());
        };
        let mut x = act.hidden.clone();
        norm::rms_norm_rows(&mut x, post_norm, self.config.rms_norm_eps);
        let ranked = moe.router.route(&x, act.n, layer)?.experts;
        let k = ranked.len() / act.n.max(1);
        let mut seen = vec![false; moe.router.num_experts()];
        let mut ids = Vec::with_capacity(ranked.len());
        for rank in 0..k {
            for &id in ranked.iter().skip(rank).step_by(k) {
                if !std::mem::replace(&mut seen[id as usize], true) {
                    ids.push(id);
                }
            }
        }
        Ok(ids)
    }

    fn moe(&self, layer: usize) -> Result<&MoeBlock> {
        match self.layers.get(layer).map(|l| &l.ffn) {
            Some(Ffn::Moe(moe)) => Ok(moe),
            _ => Err(Error::Step {
                layer,
                what: "a MoE step on a layer without experts",
            }),
        }
    }

    /// The input of the output head, (n, hidden): the final norm of the
    /// residual stream (after the model-level depth read, with attention residuals).
    pub fn final_norm(&self, act: &Activations, trace: &mut dyn Trace) -> Vec<f32> {
        let n_layers = self.layers.len();
        let mut x = self
            .residual
            .before_head(n_layers, &act.hidden, &act.snapshots, act.n, trace);
        norm::rms_norm_rows(&mut x, &self.norm, self.config.rms_norm_eps);
        trace.tensor(self.layers.len(), "final_norm", &x);
        x
    }

    /// Logits (rows, vocab) for all positions of the step or only the last.
    pub fn logits(
        &self,
        act: &Activations,
        which: LogitsFor,
        trace: &mut dyn Trace,
    ) -> Result<Vec<f32>> {
        let h = self.config.hidden_size;
        let mut x = self.final_norm(act, trace);
        let rows = match which {
            LogitsFor::All => act.n,
            LogitsFor::Last => {
                x.drain(..(act.n.saturating_sub(1)) * h);
                act.n.min(1)
            }
        };
        let head = match (&self.lm_head, &self.embed) {
            (Some(head), _) => head,
            (None, Embeddings::Resident(table)) => table,
            (None, Embeddings::Rows { .. }) => {
                unreachable!("a head tied to the embeddings keeps the table resident (load)")
            }
        };
        head.matmul_alloc(&x, rows).at_layer(self.layers.len())
    }

    /// One full step in-process: `tokens` continue the sequence in `cache`;
    /// experts come from `experts`. Returns logits for `which` positions.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        experts: &dyn ExpertProvider,
        which: LogitsFor,
        trace: &mut dyn Trace,
    ) -> Result<Vec<f32>> {
        let mut act = self.embed(tokens, cache, trace)?;
        for layer in 0..self.layers.len() {
            if let Some(routing) = self.attend_and_route(layer, &mut act, cache, trace)? {
                let fetched: Vec<Arc<dyn ExpertFfn>> =
                    experts.experts(layer, &routing.unique_experts())?;
                let refs: Vec<&dyn ExpertFfn> = fetched.iter().map(AsRef::as_ref).collect();
                self.apply_experts(&mut act, &routing, &refs, trace)?;
            }
        }
        self.logits(&act, which, trace)
    }
}

fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}
