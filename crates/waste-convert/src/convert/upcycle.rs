//! Sparse upcycling (`--upcycle E:K`): a dense Llama-family checkpoint seen
//! as a Mixtral of `E` copies of each layer's FFN under a seeded top-`K`
//! router. The copies are the dense weights themselves (every expert name
//! resolves to the dense tensor), so with Mixtral's renormalised top-k
//! weights the MoE computes exactly the dense FFN, whatever the router
//! picks: a real-weights MoE for demos and quantization studies. The router
//! is N(0, 0.02) per weight, seeded per layer, stored f32.
//!
//! Owns the name mapping, the rewritten config.json and the router values;
//! reading the weights is the source's business.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use waste_kernels::Tensor;

/// Dense FFN projections, and the Mixtral expert names they become (gate, up, down).
const DENSE: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];
const EXPERT: [&str; 3] = ["w1", "w3", "w2"];
/// Standard deviation of the router weights (demo_check.md's).
const ROUTER_STD: f64 = 0.02;

/// What an upcycled name reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// This tensor of the dense source.
    Source(&'a str),
    /// The synthetic router of a layer.
    Router { layer: usize },
}

/// A dense model seen as an MoE.
#[derive(Debug, Clone)]
pub struct Upcycle {
    experts: usize,
    top_k: usize,
    seed: u64,
    hidden: usize,
    /// Text before `layers.` in the tensor names (`model.`).
    prefix: String,
    /// Dense FFN names (gate, up, down) by layer.
    dense: BTreeMap<usize, [String; 3]>,
}

impl Upcycle {
    /// Checks that `config` is a dense Llama-family model whose FFNs are all
    /// in `names`; errors say why not.
    pub fn new(
        config: &Value,
        names: &[String],
        experts: usize,
        top_k: usize,
        seed: u64,
    ) -> Result<Self, String> {
        let model_type = config["model_type"].as_str().unwrap_or("");
        if !matches!(model_type, "llama" | "mistral") {
            return Err(format!(
                "--upcycle needs a dense llama or mistral checkpoint, this is model_type {model_type:?}"
            ));
        }
        for key in ["attention_bias", "mlp_bias"] {
            if config[key].as_bool() == Some(true) {
                return Err(format!("--upcycle: {key} = true has no Mixtral equivalent"));
            }
        }
        if experts == 0 || top_k == 0 || top_k > experts || experts > 1 << 16 {
            return Err(format!(
                "--upcycle {experts}:{top_k}: need 1 <= K <= E <= 65536"
            ));
        }
        let hidden = config["hidden_size"]
            .as_u64()
            .ok_or("--upcycle: config.json has no hidden_size")? as usize;
        let mut dense = BTreeMap::new();
        let mut prefix = None;
        for name in names {
            let Some((pre, rest)) = name.split_once("layers.") else {
                continue;
            };
            let Some((layer, rest)) = rest.split_once('.') else {
                continue;
            };
            let Ok(layer) = layer.parse::<usize>() else {
                continue;
            };
            if rest == "mlp.gate_proj.weight" {
                prefix.get_or_insert_with(|| pre.to_string());
                dense.insert(
                    layer,
                    DENSE.map(|p| format!("{pre}layers.{layer}.mlp.{p}.weight")),
                );
            }
        }
        // `names` is sorted (both readers list their names sorted).
        for set in dense.values() {
            if let Some(missing) = set.iter().find(|n| names.binary_search(n).is_err()) {
                return Err(format!("--upcycle: {missing} is missing"));
            }
        }
        let layers = config["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
        if dense.len() != layers || layers == 0 {
            return Err(format!(
                "--upcycle: {} of {layers} layers have a dense FFN (mlp.gate_proj/up_proj/down_proj)",
                dense.len()
            ));
        }
        Ok(Self {
            experts,
            top_k,
            seed,
            hidden,
            prefix: prefix.unwrap_or_default(),
            dense,
        })
    }

    fn moe_name(&self, layer: usize, rest: &str) -> String {
        format!("{}layers.{layer}.block_sparse_moe.{rest}", self.prefix)
    }

    /// The upcycled model's tensor names, sorted: the dense FFNs replaced by
    /// experts and a router per layer.
    pub fn names(&self, source: &[String]) -> Vec<String> {
        let dense: std::collections::HashSet<&String> = self.dense.values().flatten().collect();
        let mut out: Vec<String> = source
            .iter()
            .filter(|n| !dense.contains(n))
            .cloned()
            .collect();
        for &layer in self.dense.keys() {
            out.push(self.moe_name(layer, "gate.weight"));
            for e in 0..self.experts {
                for p in EXPERT {
                    out.push(self.moe_name(layer, &format!("experts.{e}.{p}.weight")));
                }
            }
        }
        out.sort();
        out
    }

    /// The Mixtral config.json: the dense one with the MoE keys added and
    /// every default that differs between the two families made explicit.
    pub fn config(&self, dense: &Value) -> Value {
        let mut c = dense.clone();
        let defaults = [
            ("rms_norm_eps", json!(1e-6)),
            ("max_position_embeddings", json!(2048)),
            ("tie_word_embeddings", json!(false)),
        ];
        for (key, value) in defaults {
            if c.get(key).is_none_or(Value::is_null) {
                c[key] = value;
            }
        }
        if c.get("rope_theta").is_none() && c.get("rope_parameters").is_none() {
            c["rope_theta"] = json!(10000.0);
        }
        c["model_type"] = json!("mixtral");
        c["architectures"] = json!(["MixtralForCausalLM"]);
        c["num_local_experts"] = json!(self.experts);
        c["num_experts_per_tok"] = json!(self.top_k);
        c["router_jitter_noise"] = json!(0.0);
        c["waste_upcycle"] = json!({
            "from_model_type": dense["model_type"],
            "experts": self.experts,
            "top_k": self.top_k,
            "seed": self.seed,
            "router_std": ROUTER_STD,
        });
        c
    }

    /// What an upcycled tensor name reads.
    pub fn resolve<'a>(&'a self, name: &'a str) -> Resolved<'a> {
        let Some(rest) = name
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix("layers."))
        else {
            return Resolved::Source(name);
        };
        let Some((layer, rest)) = rest.split_once('.') else {
            return Resolved::Source(name);
        };
        let (Ok(layer), Some(rest)) = (
            layer.parse::<usize>(),
            rest.strip_prefix("block_sparse_moe."),
        ) else {
            return Resolved::Source(name);
        };
        let Some(dense) = self.dense.get(&layer) else {
            return Resolved::Source(name);
        };
        if rest == "gate.weight" {
            return Resolved::Router { layer };
        }
        let proj = rest
            .strip_prefix("experts.")
            .and_then(|r| r.split_once('.'))
            .filter(|(e, _)| e.parse::<usize>().is_ok_and(|e| e < self.experts))
            .and_then(|(_, p)| {
                EXPERT
                    .iter()
                    .position(|x| Some(*x) == p.strip_suffix(".weight"))
            });
        match proj {
            Some(i) => Resolved::Source(&dense[i]),
            None => Resolved::Source(name),
        }
    }

    /// (experts, hidden).
    pub fn router_shape(&self) -> Vec<usize> {
        vec![self.experts, self.hidden]
    }

    /// The router of `layer`: N(0, 0.02) values from a seeded SplitMix64 by Box-Muller.
    pub fn router(&self, layer: usize) -> Tensor {
        let mut state = self.seed ^ (layer as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F);
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            // 53 random bits in (0, 1].
            (((z ^ (z >> 31)) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
        };
        let n = self.experts * self.hidden;
        let values = (0..n)
            .map(|_| {
                let (u, v) = (next(), next());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * ROUTER_STD) as f32
            })
            .collect();
        Tensor::from_f32(self.router_shape(), values).expect("values fill the router shape")
    }
}
