//! Seeded random checkpoints: a Hugging Face `config.json` and a full state
//! dict for each supported family, with shapes drawn from the seed so that code
//! which only works for the fixture shapes (power-of-two dims, head_dim =
//! hidden/heads, one rope style, top-2, ...) is caught when the optimized
//! forward is compared with [`crate::reference_logits`].
//!
//! Owns the config keys and tensor names as the families' real checkpoints
//! spell them (transformers 5 style or release style, chosen by the seed) and
//! the weight statistics of `shared/fixtures` (normal, std 0.15; norm weights
//! 1 + N(0, 0.15); DeepSeek's `e_score_correction_bias` N(0, 0.1) in f32).
//! Most tensors are bf16 like real checkpoints, about one in ten f32. Does not
//! own any forward pass.

mod families;
mod rng;

use half::bf16;
use serde_json::{Map, Value, json};
use waste_kernels::{Tensor, TensorData};

use self::rng::Rng;
use crate::MemorySource;

/// A family's generator: its config drawn, its tensors written into the [`Gen`].
type Generate = fn(&mut Gen) -> Value;

/// The families [`random_checkpoint`] generates, by their `waste-family`
/// registry name, each with the salt of its seeds (its own for good, so a
/// family's checkpoints do not depend on where it sits in this or the
/// registry's list) and its generator. A registry family missing here is in
/// [`NOT_GENERATED`], with the reason.
const GENERATORS: &[(&str, u64, Generate)] = &[
    ("llama", 1, families::llama),
    ("mixtral", 2, families::mixtral),
    ("qwen3_moe", 3, families::qwen3_moe),
    ("deepseek_v3", 4, families::deepseek_v3),
    ("qwen2_moe", 5, families::qwen2_moe),
];

/// Registry families without a generator: the reference forward has no
/// Kimi Delta Attention, so Kimi-Linear and K3 are checked against their
/// transformers goldens only (`kimi_goldens.rs`).
pub const NOT_GENERATED: &[&str] = &["kimi_linear"];

/// A registry family [`random_checkpoint`] can generate.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Family {
    name: &'static str,
    salt: u64,
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Family {
    /// Every registry family with a generator, in the registry's order.
    pub fn all() -> Vec<Family> {
        waste_family::FAMILIES
            .iter()
            .filter_map(|f| Self::find(f.name))
            .collect()
    }

    /// The family the registry calls `name`; panics if it has no generator
    /// (a test naming a family it cannot generate is wrong).
    pub fn named(name: &str) -> Family {
        Self::find(name).unwrap_or_else(|| panic!("no random checkpoints for family {name:?}"))
    }

    fn find(name: &str) -> Option<Family> {
        GENERATORS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(name, salt, _)| Family { name, salt })
    }

    /// Its `waste-family` registry name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// A random checkpoint of `family`: its `config.json` and its tensors, both a
/// pure function of `(family, seed)`. Token ids below `vocab_size` (at least
/// 64) are valid; sequences of ~12 tokens exercise the small sliding windows.
pub fn random_checkpoint(family: Family, seed: u64) -> (Value, MemorySource) {
    let mut g = Gen {
        rng: Rng::new(seed ^ family.salt.wrapping_mul(0xA076_1D64_78BD_642F)),
        src: MemorySource::new(),
    };
    let (_, _, make) = GENERATORS
        .iter()
        .find(|(n, _, _)| *n == family.name)
        .expect("a Family is made from GENERATORS");
    let config = make(&mut g);
    (config, g.src)
}

/// The generator state: the random stream and the tensors written so far.
#[derive(Debug)]
struct Gen {
    rng: Rng,
    src: MemorySource,
}

impl Gen {
    fn put(&mut self, name: String, shape: Vec<usize>, values: &[f64], force_f32: bool) {
        let data = if force_f32 || self.rng.chance(0.1) {
            TensorData::F32(values.iter().map(|&v| v as f32).collect())
        } else {
            TensorData::Bf16(values.iter().map(|&v| bf16::from_f64(v)).collect())
        };
        let tensor = Tensor::new(shape, data).expect("synth: shape and data agree");
        self.src.insert(name, tensor);
    }

    /// A tensor of `mean + N(0, std)` values, bf16 unless forced or drawn f32.
    fn tensor(&mut self, name: String, shape: Vec<usize>, mean: f64, std: f64, force_f32: bool) {
        let n = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|_| mean + std * self.rng.normal()).collect();
        self.put(name, shape, &values, force_f32);
    }

    fn linear(&mut self, name: String, out: usize, inp: usize) {
        self.tensor(name, vec![out, inp], 0.0, 0.15, false);
    }

    fn norm(&mut self, name: String, len: usize) {
        self.tensor(name, vec![len], 1.0, 0.15, false);
    }

    fn swiglu(&mut self, prefix: &str, [gate, up, down]: [&str; 3], hidden: usize, inter: usize) {
        self.linear(format!("{prefix}{gate}.weight"), inter, hidden);
        self.linear(format!("{prefix}{up}.weight"), inter, hidden);
        self.linear(format!("{prefix}{down}.weight"), hidden, inter);
    }

    /// q/k/v/o projections of standard (GQA) attention, plus Qwen3's q/k norms.
    fn gqa(
        &mut self,
        p: &str,
        hidden: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        qk_norm: bool,
    ) {
        self.linear(
            format!("{p}self_attn.q_proj.weight"),
            heads * head_dim,
            hidden,
        );
        self.linear(
            format!("{p}self_attn.k_proj.weight"),
            kv_heads * head_dim,
            hidden,
        );
        self.linear(
            format!("{p}self_attn.v_proj.weight"),
            kv_heads * head_dim,
            hidden,
        );
        self.linear(
            format!("{p}self_attn.o_proj.weight"),
            hidden,
            heads * head_dim,
        );
        if qk_norm {
            self.norm(format!("{p}self_attn.q_norm.weight"), head_dim);
            self.norm(format!("{p}self_attn.k_norm.weight"), head_dim);
        }
    }

    /// Embeddings, final norm, lm_head (absent when tied) and both per-layer norms.
    fn skeleton(&mut self, vocab: usize, hidden: usize, layers: usize, tied: bool) {
        self.tensor(
            "model.embed_tokens.weight".into(),
            vec![vocab, hidden],
            0.0,
            0.15,
            false,
        );
        self.norm("model.norm.weight".into(), hidden);
        if !tied {
            self.linear("lm_head.weight".into(), vocab, hidden);
        }
        for layer in 0..layers {
            self.norm(
                format!("model.layers.{layer}.input_layernorm.weight"),
                hidden,
            );
            self.norm(
                format!("model.layers.{layer}.post_attention_layernorm.weight"),
                hidden,
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Shared config pieces

/// Shapes every family draws the same way.
#[derive(Debug)]
struct Common {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    layers: usize,
    vocab: usize,
    /// transformers 5 `config.json` (`rope_parameters`) instead of release style (`rope_theta` + `rope_scaling`).
    v5: bool,
}

fn common(rng: &mut Rng) -> Common {
    let heads = rng.range(2, 6);
    let divisors: Vec<usize> = (1..=heads).filter(|d| heads.is_multiple_of(*d)).collect();
    Common {
        hidden: 16 * rng.range(2, 6),
        heads,
        kv_heads: rng.pick(&divisors),
        layers: rng.range(2, 4),
        vocab: rng.range(64, 160),
        v5: rng.chance(0.5),
    }
}

fn even(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    2 * rng.range(lo / 2, hi / 2)
}

/// The keys every family's config carries.
fn base_config(arch: &str, model_type: &str, c: &Common, eps: f64) -> Map<String, Value> {
    let mut m = Map::new();
    let entries = [
        ("architectures", json!([arch])),
        ("model_type", json!(model_type)),
        ("hidden_size", json!(c.hidden)),
        ("num_attention_heads", json!(c.heads)),
        ("num_key_value_heads", json!(c.kv_heads)),
        ("num_hidden_layers", json!(c.layers)),
        ("vocab_size", json!(c.vocab)),
        ("rms_norm_eps", json!(eps)),
        ("hidden_act", json!("silu")),
        ("initializer_range", json!(0.15)),
        ("attention_dropout", json!(0.0)),
        ("bos_token_id", json!(1)),
        ("eos_token_id", json!(2)),
        ("pad_token_id", Value::Null),
        ("tie_word_embeddings", json!(false)),
        ("use_cache", json!(true)),
        ("dtype", json!("bfloat16")),
    ];
    for (k, v) in entries {
        m.insert(k.to_owned(), v);
    }
    if c.v5 {
        m.insert("transformers_version".into(), json!("5.24.0"));
    }
    m
}

/// Writes the rope settings: `rope_parameters` {rope_type, rope_theta, ...}
/// (transformers 5) or `rope_theta` + `rope_scaling` {`type_key`: ..., ...}
/// (release; null when default).
fn set_rope(
    m: &mut Map<String, Value>,
    v5: bool,
    theta: f64,
    rope_type: &str,
    params: Value,
    type_key: &str,
) {
    let mut params = match params {
        Value::Object(p) => p,
        _ => Map::new(),
    };
    if v5 {
        params.insert("rope_type".into(), json!(rope_type));
        params.insert("rope_theta".into(), json!(theta));
        m.insert("rope_parameters".into(), Value::Object(params));
    } else {
        m.insert("rope_theta".into(), json!(theta));
        let scaling = if rope_type == "default" {
            Value::Null
        } else {
            params.insert(type_key.into(), json!(rope_type));
            Value::Object(params)
        };
        m.insert("rope_scaling".into(), scaling);
    }
}
