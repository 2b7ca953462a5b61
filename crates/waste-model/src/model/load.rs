//! Builds a [`Model`] from a [`ModelConfig`] and a tensor source: every
//! backbone weight by its Hugging Face name, shape-checked. Routed experts
//! are not loaded here; an expert provider supplies them at run time.

use waste_kernels::{Q8Products, TensorSource};

use super::{Attention, DecoderLayer, Embeddings, Ffn, Model};
use crate::config::{
    AttentionConfig, FfnKind, LayerAttention, ModelConfig, MoeConfig, RouterConfig,
};
use crate::layers::Loader;
use crate::layers::attention::GqaAttention;
use crate::layers::kda::KdaAttention;
use crate::layers::mla::MlaAttention;
use crate::layers::moe::{LatentProj, MoeBlock, SharedExpert};
use crate::layers::residual::Residual;
use crate::layers::router::Router;
use crate::{Error, Result};

pub(super) fn load(config: ModelConfig, src: &dyn TensorSource, q8: Q8Products) -> Result<Model> {
    let loaded = std::cell::Cell::new(0);
    let w = Loader::counting(src, &loaded).with_q8(q8);
    let c = &config;
    let (h, names) = (c.hidden_size, &c.names);
    // A head tied to the embeddings needs the whole table in RAM anyway.
    let tied = c.tie_word_embeddings && !w.contains(&names.lm_head);
    let embed = embeddings(w, src, &names.model("embed_tokens.weight"), c, tied)?;
    let layers = (0..c.num_hidden_layers)
        .map(|l| load_layer(w, c, l))
        .collect::<Result<Vec<_>>>()?;
    let lm_head = if tied {
        None
    } else {
        Some(w.matrix(&names.lm_head, c.vocab_size, h)?)
    };
    let residual = Residual::load(w, c)?;
    let norm = w.vector(&names.model("norm.weight"), h)?;
    Ok(Model {
        weight_bytes: loaded.get(),
        embed,
        layers,
        norm,
        lm_head,
        residual,
        config,
    })
}

/// The token embeddings read by row when the source offers it and the head
/// is not tied to them (their cache counted at its capacity), else loaded.
fn embeddings(
    w: Loader<'_>,
    src: &dyn TensorSource,
    name: &str,
    c: &ModelConfig,
    tied: bool,
) -> Result<Embeddings> {
    let (vocab, h) = (c.vocab_size, c.hidden_size);
    let rows = if tied { None } else { src.rows(name) };
    match rows {
        Some(rows) => {
            let rows = rows.map_err(|source| Error::Weight {
                name: name.to_string(),
                source,
            })?;
            if (rows.rows(), rows.cols()) != (vocab, h) {
                return Err(Error::WeightShape {
                    name: name.to_string(),
                    got: vec![rows.rows(), rows.cols()],
                    expected: vec![vocab, h],
                });
            }
            w.count_bytes(rows.resident_bytes());
            Ok(Embeddings::Rows {
                name: name.to_string(),
                rows,
            })
        }
        None => Ok(Embeddings::Resident(w.matrix(name, vocab, h)?)),
    }
}

fn load_layer(w: Loader<'_>, c: &ModelConfig, layer: usize) -> Result<DecoderLayer> {
    let (h, names) = (c.hidden_size, &c.names);
    let attn = match (c.layer_attention[layer], &c.attention, &c.linear_attention) {
        (LayerAttention::Linear, _, Some(k)) => {
            Attention::Kda(KdaAttention::load(w, names, layer, h, k)?)
        }
        (LayerAttention::Linear, _, None) => {
            return Err(Error::config(
                "linear_attn_config",
                format!("layer {layer} is linear attention but the config has none"),
            ));
        }
        (LayerAttention::Full, AttentionConfig::Gqa(a), _) => {
            Attention::Gqa(GqaAttention::load(w, names, layer, h, a, c.rms_norm_eps)?)
        }
        (LayerAttention::Full, AttentionConfig::Mla(a), _) => {
            Attention::Mla(MlaAttention::load(w, names, layer, h, a)?)
        }
    };
    let ffn = match c.ffn[layer] {
        FfnKind::Dense { intermediate_size } => {
            let mlp = ["gate_proj", "up_proj", "down_proj"]
                .map(|p| names.layer(layer, &format!("mlp.{p}.weight")));
            Ffn::Dense(w.gated_mlp(mlp, h, intermediate_size)?)
        }
        FfnKind::Moe => {
            let moe = c.moe.as_ref().ok_or(Error::Step {
                layer,
                what: "MoE layer without a MoE config",
            })?;
            Ffn::Moe(load_moe(w, c, moe, layer)?)
        }
    };
    Ok(DecoderLayer {
        input_norm: w.vector(&names.layer(layer, "input_layernorm.weight"), h)?,
        attn,
        post_norm: w.vector(&names.layer(layer, "post_attention_layernorm.weight"), h)?,
        ffn,
    })
}

fn load_moe(w: Loader<'_>, c: &ModelConfig, moe: &MoeConfig, layer: usize) -> Result<MoeBlock> {
    let (h, names) = (c.hidden_size, &c.names);
    let block = moe.names.block;
    let name = |rest: &str| names.layer(layer, &format!("{block}.{rest}"));
    let gate = w.matrix(&name("gate.weight"), moe.num_experts, h)?;
    let bias_name = name("gate.e_score_correction_bias");
    let bias = match moe.router {
        RouterConfig::Grouped { .. } if w.contains(&bias_name) => {
            Some(w.vector(&bias_name, moe.num_experts)?)
        }
        _ => None,
    };
    let shared = match moe.shared {
        Some(s) => {
            let n = ["gate_proj", "up_proj", "down_proj"]
                .map(|p| name(&format!("{}.{p}.weight", s.name)));
            let gate = match s.gate {
                Some(g) => Some(w.linear(&name(g), h, 1, false)?),
                None => None,
            };
            Some(SharedExpert {
                ffn: w.gated_mlp(n, h, s.intermediate_size)?,
                gate,
            })
        }
        None => None,
    };
    let latent = match moe.latent {
        Some(l) => Some(LatentProj {
            down: w.linear(&name("routed_expert_down_proj"), h, l.size, false)?,
            up: w.linear(&name("routed_expert_up_proj"), l.size, h, false)?,
            norm: if l.norm {
                Some(w.vector(&name("routed_expert_norm.weight"), l.size)?)
            } else {
                None
            },
            eps: c.rms_norm_eps,
        }),
        None => None,
    };
    Ok(MoeBlock {
        router: Router::new(gate, bias, moe.router.clone(), moe.top_k),
        shared,
        latent,
        activation: c.activation,
    })
}
