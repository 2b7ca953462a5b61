//! Synthetic releases: the shapes `waste synth` (a checkpoint folder) and
//! `waste synth-store` (a store written directly) imitate, each declared in
//! its family's `release.rs`. A release is a config.json (the keys the
//! release ships, with its real dimensions) and a tensor list (names, dtypes
//! and shapes as the release stores them); `--layers`, `--experts` and
//! `--vocab` shrink a copy. The bytes themselves are drawn by the writers
//! (`waste-convert/src/synth/`, `waste-store/src/synth/`).

use std::str::FromStr;

use serde_json::Value;

use crate::{FAMILIES, Family};

/// A release to imitate, by its `--like` name.
#[derive(Debug)]
pub struct Release {
    /// `--like` name, e.g. `deepseek-v3`.
    pub name: &'static str,
    /// HF `model_type` of its config.json.
    pub model_type: &'static str,
    /// The checkpoint `waste synth` writes: config.json and tensor list.
    pub checkpoint: fn(&Options) -> (Value, Vec<Tensor>),
    /// The store `waste synth-store` writes, when it imitates this release.
    pub store: Option<StoreShape>,
}

/// A release, by its `--like` name: a copyable handle on the registry's.
#[derive(Debug, Clone, Copy)]
pub struct Like(&'static Release);

impl Like {
    /// Every release of every family, in registry order.
    pub fn all() -> impl Iterator<Item = Like> {
        FAMILIES
            .iter()
            .flat_map(|f: &&Family| f.releases.iter())
            .map(Like)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn release(self) -> &'static Release {
        self.0
    }
}

// By name: the registry's consts may be copied, so addresses can differ,
// and names are unique (tests/releases.rs).
impl PartialEq for Like {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Like {}

impl FromStr for Like {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Like::all().find(|l| l.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Like::all().map(Like::name).collect();
            format!("unknown release {s:?} ({})", names.join(", "))
        })
    }
}

/// What to synthesise.
#[derive(Debug, Clone)]
pub struct Options {
    pub like: Like,
    /// Decoder layers (default: the release's).
    pub layers: Option<usize>,
    /// Routed experts per MoE layer (default: the release's).
    pub experts: Option<usize>,
    /// Vocabulary size (default: the release's; smaller keeps tests small).
    pub vocab: Option<usize>,
    /// Every linear weight bf16 instead of the release's dtypes.
    pub bf16: bool,
    pub seed: u64,
}

/// The config.json and tensor list of `options`.
pub fn build(options: &Options) -> (Value, Vec<Tensor>) {
    (options.like.0.checkpoint)(options)
}

/// One tensor of the checkpoint.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub fill: Fill,
}

impl Tensor {
    pub fn bytes(&self) -> u64 {
        (self.shape.iter().product::<usize>() * self.fill.element_bytes()) as u64
    }
}

/// How each value of a tensor is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fill {
    /// bf16, uniform with this std.
    Bf16(f32),
    /// bf16 `1 + U` (norm weights).
    Bf16Norm,
    /// f32, uniform with this std.
    F32(f32),
    /// FP8 E4M3FN codes of magnitude 2^-4 .. 2^3 (no NaN).
    Fp8,
    /// f32 block scales around 1e-3.
    Fp8Scale,
    /// int32 words of eight random int4 codes.
    Int4Words,
    /// bf16 int4 group scales around 3e-3.
    Int4Scale,
    /// The I64 `[rows, cols]` of a packed weight.
    Shape(usize, usize),
    /// MXFP4 code pairs.
    Mxfp4,
    /// E8M0 scales 2^-9 .. 2^-6.
    E8m0,
}

impl Fill {
    /// Bytes per element.
    pub fn element_bytes(self) -> usize {
        match self {
            Fill::Bf16(_) | Fill::Bf16Norm | Fill::Int4Scale => 2,
            Fill::F32(_) | Fill::Fp8Scale | Fill::Int4Words => 4,
            Fill::Shape(..) => 8,
            Fill::Fp8 | Fill::Mxfp4 | Fill::E8m0 => 1,
        }
    }

    pub fn dtype(self) -> &'static str {
        match self {
            Fill::Bf16(_) | Fill::Bf16Norm | Fill::Int4Scale => "BF16",
            Fill::F32(_) | Fill::Fp8Scale => "F32",
            Fill::Int4Words => "I32",
            Fill::Shape(..) => "I64",
            Fill::Fp8 => "F8_E4M3",
            Fill::Mxfp4 | Fill::E8m0 => "U8",
        }
    }
}

/// How a linear weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Bf16,
    /// F8_E4M3 + `weight_scale_inv` per 128x128 block.
    Fp8,
    /// `weight_packed` int32 + `weight_scale` bf16 per 32 + `weight_shape`.
    Int4,
    /// `weight_packed` u8 + `weight_scale` E8M0 per 32.
    Mxfp4,
}

/// The dimensions of a release's MLA (DeepSeek-V3, Kimi K2, Kimi K3's
/// full-attention layers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mla {
    pub(crate) heads: usize,
    pub(crate) q_lora: usize,
    pub(crate) kv_lora: usize,
    pub(crate) nope: usize,
    pub(crate) rope: usize,
    pub(crate) v: usize,
}

/// Collects tensors in release order.
#[derive(Debug, Default)]
pub(crate) struct Tensors(pub(crate) Vec<Tensor>);

impl Tensors {
    pub(crate) fn add(&mut self, name: String, shape: Vec<usize>, fill: Fill) {
        self.0.push(Tensor { name, shape, fill });
    }

    pub(crate) fn norm(&mut self, name: String, len: usize) {
        self.add(name, vec![len], Fill::Bf16Norm);
    }

    /// `{p}.weight` of a router over `experts`, and with `biased` the f32
    /// selection bias `{p}.e_score_correction_bias` (sigmoid routing).
    pub(crate) fn router(&mut self, p: &str, experts: usize, hidden: usize, biased: bool) {
        self.add(
            format!("{p}.weight"),
            vec![experts, hidden],
            Fill::Bf16(0.02),
        );
        if biased {
            self.add(
                format!("{p}.e_score_correction_bias"),
                vec![experts],
                Fill::F32(0.1),
            );
        }
    }

    /// `{p}.weight` of (rows, cols) stored as `store`.
    pub(crate) fn linear(&mut self, p: &str, rows: usize, cols: usize, store: Store) {
        match store {
            Store::Bf16 => self.add(format!("{p}.weight"), vec![rows, cols], Fill::Bf16(0.02)),
            Store::Fp8 => {
                self.add(format!("{p}.weight"), vec![rows, cols], Fill::Fp8);
                self.add(
                    format!("{p}.weight_scale_inv"),
                    vec![rows.div_ceil(128), cols.div_ceil(128)],
                    Fill::Fp8Scale,
                );
            }
            Store::Int4 => {
                self.add(
                    format!("{p}.weight_packed"),
                    vec![rows, cols.div_ceil(8)],
                    Fill::Int4Words,
                );
                self.add(
                    format!("{p}.weight_scale"),
                    vec![rows, cols.div_ceil(32)],
                    Fill::Int4Scale,
                );
                self.add(
                    format!("{p}.weight_shape"),
                    vec![2],
                    Fill::Shape(rows, cols),
                );
            }
            Store::Mxfp4 => {
                self.add(
                    format!("{p}.weight_packed"),
                    vec![rows, cols.div_ceil(2)],
                    Fill::Mxfp4,
                );
                self.add(
                    format!("{p}.weight_scale"),
                    vec![rows, cols.div_ceil(32)],
                    Fill::E8m0,
                );
            }
        }
    }

    /// MLA's projections and norms under `a` (`{a}.q_a_proj`, ...,
    /// `{a}.o_proj`), all linear weights stored as `store`.
    pub(crate) fn mla(&mut self, a: &str, hidden: usize, m: Mla, store: Store) {
        let Mla {
            heads,
            q_lora,
            kv_lora,
            nope,
            rope,
            v,
        } = m;
        self.linear(&format!("{a}.q_a_proj"), q_lora, hidden, store);
        self.norm(format!("{a}.q_a_layernorm.weight"), q_lora);
        self.linear(
            &format!("{a}.q_b_proj"),
            heads * (nope + rope),
            q_lora,
            store,
        );
        let kv_a = format!("{a}.kv_a_proj_with_mqa");
        self.linear(&kv_a, kv_lora + rope, hidden, store);
        self.norm(format!("{a}.kv_a_layernorm.weight"), kv_lora);
        self.linear(
            &format!("{a}.kv_b_proj"),
            heads * (nope + v),
            kv_lora,
            store,
        );
        self.linear(&format!("{a}.o_proj"), hidden, heads * v, store);
    }

    /// A SwiGLU block `{p}.{gate,up,down}_proj` (or `w1/w3/w2`) of width `ff`.
    pub(crate) fn glu(&mut self, p: &str, names: [&str; 3], d: usize, ff: usize, store: Store) {
        self.linear(&format!("{p}.{}", names[0]), ff, d, store);
        self.linear(&format!("{p}.{}", names[1]), ff, d, store);
        self.linear(&format!("{p}.{}", names[2]), d, ff, store);
    }
}

/// (layers, dense layers in front) for a release of `real` layers of which
/// `real_dense` are dense: `--layers` keeps at most one dense layer.
pub(crate) fn depth(options: &Options, real: usize, real_dense: usize) -> (usize, usize) {
    match options.layers {
        None => (real, real_dense),
        Some(n) => (n, real_dense.min(1).min(n.saturating_sub(1))),
    }
}

/// Adds the keys of `more` to `base` (json! recursion limits cap one literal's size).
pub(crate) fn merge(base: &mut Value, more: Value) {
    if let (Some(b), Value::Object(m)) = (base.as_object_mut(), more) {
        b.extend(m);
    }
}

/// The store `waste synth-store` writes for a release: its real expert
/// shapes and counts, a `config.json` a node can load, and the backbone's
/// tensor list (Hugging Face names and shapes, routed experts excluded).
/// Attention and shared experts keep the release's dimensions; the
/// vocabulary is the store's synthetic byte-level one, and every layer is
/// a MoE layer.
#[derive(Debug)]
pub struct StoreShape {
    pub experts: ExpertShape,
    /// The residual stream's width.
    pub hidden: usize,
    /// `config.json` for `layers` MoE layers of `n_experts` experts, a
    /// vocabulary of `vocab` and end-of-sequence id `eos`.
    pub config: fn(layers: u32, n_experts: u32, vocab: usize, eos: usize) -> Value,
    /// Backbone tensors of decoder layer `i` of `n_experts` experts:
    /// (name, shape, is f32). `None`: synth-store writes no backbone for
    /// this release (it goes through `waste synth` and the converter).
    pub layer_tensors: Option<LayerTensors>,
}

/// One backbone tensor of a synthetic store: (name, shape, is f32).
pub type BackboneTensor = (String, Vec<usize>, bool);

/// The backbone tensors of decoder layer `i` of `n_experts` experts.
pub type LayerTensors = fn(i: u32, n_experts: u32) -> Vec<BackboneTensor>;

/// Expert shapes of a release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertShape {
    /// Width the experts consume (K3: the latent width).
    pub d_model: usize,
    pub d_ff: usize,
    /// Routed experts per layer in the release.
    pub n_experts: u32,
    pub top_k: u32,
    pub activation: ExpertAct,
}

/// The gated activation of a release's experts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertAct {
    Silu,
    /// SiTU-GLU with its two betas.
    Situ {
        beta: f32,
        linear_beta: Option<f32>,
    },
}

/// A release's two block norms of a decoder layer, `hidden` wide, then `rest`.
pub(crate) fn layer_with_norms(
    i: u32,
    hidden: usize,
    rest: &[(&str, Vec<usize>, bool)],
) -> Vec<BackboneTensor> {
    let p = |s: &str| format!("model.layers.{i}.{s}");
    let mut t = vec![
        (p("input_layernorm.weight"), vec![hidden], false),
        (p("post_attention_layernorm.weight"), vec![hidden], false),
    ];
    t.extend(rest.iter().map(|(s, shape, f)| (p(s), shape.clone(), *f)));
    t
}
