//! The naive reference forward pass: one full-sequence causal forward of a
//! Llama, Mixtral, Qwen3-MoE or DeepSeek-V3 (Kimi K2) checkpoint, written from
//! Hugging Face transformers' semantics (5.24, eager attention, float32) and
//! deliberately independent of `waste-model`, so the optimized forward can be
//! checked against it on random shapes.
//!
//! Readable top to bottom like llama2.c's `run.c`: this file is the forward
//! (embed, per layer norm / attention / norm / feed-forward with residuals,
//! final norm, lm_head); `config` reads `config.json`, `rope` builds the
//! rotary frequencies, `ops` holds the small ops (mat-vec, RMSNorm, softmax,
//! SwiGLU), `attention` the GQA and MLA attention and `moe` the dense MLPs,
//! routers and experts. Every activation is f32 and every dot product
//! accumulates in f64. Owns no speed: no KV cache, no absorbed MLA, no threads,
//! weights reloaded per call. The transformers quirks it follows are numbered
//! in `shared/fixtures/README.md` ("Quirks a Rust implementation must match").

mod attention;
mod config;
mod moe;
mod ops;
mod rope;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use self::attention::{gqa_attention, mla_attention};
use self::config::Config;
use self::moe::feed_forward;
use self::ops::{load, mat, rms_norm};
use crate::MemorySource;

/// Logits `(tokens.len(), vocab)`, row-major, of one causal forward over the
/// whole sequence at positions `0..n`, as transformers' eager float32 forward
/// computes them from the same checkpoint.
pub fn reference_logits(config: &Value, src: &MemorySource, tokens: &[u32]) -> Result<Vec<f32>> {
    let cfg = Config::parse(config)?;
    ensure!(!tokens.is_empty(), "no tokens");
    let embed = mat(src, "model.embed_tokens.weight", cfg.vocab, cfg.hidden)?;
    let mut x: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| {
            ensure!(
                (t as usize) < cfg.vocab,
                "token {t} out of vocab {}",
                cfg.vocab
            );
            Ok(embed.row(t as usize).to_vec())
        })
        .collect::<Result<_>>()?;

    for layer in 0..cfg.layers {
        let p = format!("model.layers.{layer}.");
        let ln1 = load(src, &format!("{p}input_layernorm.weight"), &[cfg.hidden])?;
        let h: Vec<Vec<f32>> = x.iter().map(|r| rms_norm(r, &ln1, cfg.eps)).collect();
        let attn = match &cfg.mla {
            Some(m) => mla_attention(&cfg, m, src, &p, &h)?,
            None => gqa_attention(&cfg, src, layer, &p, &h)?,
        };
        add_assign(&mut x, &attn);
        let ln2 = load(
            src,
            &format!("{p}post_attention_layernorm.weight"),
            &[cfg.hidden],
        )?;
        let h: Vec<Vec<f32>> = x.iter().map(|r| rms_norm(r, &ln2, cfg.eps)).collect();
        let ffn = feed_forward(&cfg, src, layer, &h)
            .with_context(|| format!("layer {layer} feed-forward"))?;
        add_assign(&mut x, &ffn);
    }

    let norm = load(src, "model.norm.weight", &[cfg.hidden])?;
    let head = if cfg.tie_embeddings {
        embed
    } else {
        mat(src, "lm_head.weight", cfg.vocab, cfg.hidden)?
    };
    Ok(x.iter()
        .flat_map(|r| head.matvec(&rms_norm(r, &norm, cfg.eps)))
        .collect())
}

fn add_assign(x: &mut [Vec<f32>], y: &[Vec<f32>]) {
    for (xr, yr) in x.iter_mut().zip(y) {
        for (a, b) in xr.iter_mut().zip(yr) {
            *a += b;
        }
    }
}
