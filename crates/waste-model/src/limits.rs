//! The ranges every count of a config.json must fall in before it sizes
//! anything: untrusted files (a config edited by hand, GGUF metadata) must
//! not reach an allocator with 2^40 layers. The maxima are generous (each is
//! several times the largest public release) and are listed in
//! docs/FORMAT.md; relations between counts (heads divisible by kv heads,
//! top-k within the experts) are checked by each family's parser.

use serde_json::Value;

use crate::{Error, Result};

/// Most decoder layers (largest releases: ~100).
pub const MAX_LAYERS: u64 = 1024;
/// Widest residual stream (largest releases: 16384).
pub const MAX_HIDDEN: u64 = 1 << 16;
/// Largest vocabulary (largest releases: ~260k).
pub const MAX_VOCAB: u64 = 1 << 22;
/// Most attention heads, query or key/value (largest releases: 128).
pub const MAX_HEADS: u64 = 1024;
/// Widest attention head, rotary part or value (largest releases: 256).
pub const MAX_HEAD_DIM: u64 = 4096;
/// Widest low-rank projection (MLA q/kv LoRA ranks, latent expert space).
pub const MAX_RANK: u64 = 1 << 16;
/// Widest feed-forward block, dense or expert (largest releases: ~50k).
pub const MAX_INTERMEDIATE: u64 = 1 << 20;
/// Most routed experts per layer (largest releases: 384).
pub const MAX_EXPERTS: u64 = 4096;
/// Longest context (largest releases: 10M).
pub const MAX_CONTEXT: u64 = 1 << 24;
/// Widest KDA short convolution (releases: 4).
pub const MAX_CONV_KERNEL: u64 = 1024;

/// The range of one config.json count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The HF key.
    pub key: &'static str,
    pub min: u64,
    pub max: u64,
}

const fn limit(key: &'static str, min: u64, max: u64) -> Limit {
    Limit { key, min, max }
}

/// Every count key any supported family reads, with its range. A key that
/// is absent or null is left to the family's default.
pub const LIMITS: &[Limit] = &[
    limit("vocab_size", 1, MAX_VOCAB),
    limit("hidden_size", 1, MAX_HIDDEN),
    limit("num_hidden_layers", 1, MAX_LAYERS),
    limit("num_attention_heads", 1, MAX_HEADS),
    limit("num_key_value_heads", 1, MAX_HEADS),
    limit("head_dim", 1, MAX_HEAD_DIM),
    limit("intermediate_size", 1, MAX_INTERMEDIATE),
    limit("moe_intermediate_size", 1, MAX_INTERMEDIATE),
    limit("shared_expert_intermediate_size", 1, MAX_INTERMEDIATE),
    limit("max_position_embeddings", 1, MAX_CONTEXT),
    limit("model_max_length", 1, MAX_CONTEXT),
    // 0 is what transformers writes when the window is off.
    limit("sliding_window", 0, MAX_CONTEXT),
    limit("num_experts", 1, MAX_EXPERTS),
    limit("num_local_experts", 1, MAX_EXPERTS),
    limit("n_routed_experts", 1, MAX_EXPERTS),
    limit("num_experts_per_tok", 1, MAX_EXPERTS),
    limit("num_experts_per_token", 1, MAX_EXPERTS),
    limit("n_shared_experts", 0, MAX_EXPERTS),
    limit("num_shared_experts", 0, MAX_EXPERTS),
    limit("n_group", 1, MAX_EXPERTS),
    limit("num_expert_group", 1, MAX_EXPERTS),
    limit("topk_group", 1, MAX_EXPERTS),
    limit("first_k_dense_replace", 0, MAX_LAYERS),
    limit("moe_layer_freq", 0, MAX_LAYERS),
    limit("decoder_sparse_step", 0, MAX_LAYERS),
    limit("attn_res_block_size", 0, MAX_LAYERS),
    limit("q_lora_rank", 1, MAX_RANK),
    limit("kv_lora_rank", 1, MAX_RANK),
    limit("routed_expert_hidden_size", 1, MAX_RANK),
    limit("qk_nope_head_dim", 0, MAX_HEAD_DIM),
    limit("qk_rope_head_dim", 1, MAX_HEAD_DIM),
    limit("v_head_dim", 1, MAX_HEAD_DIM),
];

/// The counts of `linear_attn_config` (Kimi Delta Attention).
pub const LINEAR_ATTN_LIMITS: &[Limit] = &[
    limit("num_heads", 1, MAX_HEADS),
    limit("head_dim", 1, MAX_HEAD_DIM),
    limit("short_conv_kernel_size", 1, MAX_CONV_KERNEL),
];

/// Checks the counts of a config object; `prefix` spells where it sits
/// (`text_config.` for Kimi K3) so that errors name the key as written.
pub(crate) fn check_counts(config: &Value, prefix: &str) -> Result<()> {
    check_table(config, prefix, LIMITS)?;
    if let Some(linear) = config.get("linear_attn_config").filter(|v| !v.is_null()) {
        check_table(
            linear,
            &format!("{prefix}linear_attn_config."),
            LINEAR_ATTN_LIMITS,
        )?;
    }
    Ok(())
}

fn check_table(config: &Value, prefix: &str, table: &[Limit]) -> Result<()> {
    for l in table {
        let Some(value) = config.get(l.key).filter(|v| !v.is_null()) else {
            continue;
        };
        let key = format!("{prefix}{}", l.key);
        let n = match value.as_u64() {
            Some(n) => n,
            None if value.as_i64().is_some() => {
                return Err(Error::config(key, format!("{value} is negative")));
            }
            None => {
                return Err(Error::config(
                    key,
                    format!("{value} is not a non-negative integer"),
                ));
            }
        };
        if n < l.min || n > l.max {
            return Err(Error::config(
                key,
                format!("{n} is outside {}..={}", l.min, l.max),
            ));
        }
    }
    Ok(())
}

/// Checks a count the parser derived or defaulted (not read from a key).
pub(crate) fn check_range(key: &str, n: usize, min: u64, max: u64) -> Result<()> {
    if (n as u64) < min || n as u64 > max {
        return Err(Error::config(key, format!("{n} is outside {min}..={max}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_outside_their_range_name_the_key() {
        let ok = json!({"num_hidden_layers": 1024, "vocab_size": 1, "head_dim": null});
        check_counts(&ok, "").unwrap();
        for (config, key) in [
            (
                json!({"num_hidden_layers": 1u64 << 40}),
                "text_config.num_hidden_layers",
            ),
            (json!({"vocab_size": 0}), "text_config.vocab_size"),
            (json!({"hidden_size": -128}), "text_config.hidden_size"),
            (
                json!({"num_experts_per_tok": 2.5}),
                "text_config.num_experts_per_tok",
            ),
            (
                json!({"num_attention_heads": "4"}),
                "text_config.num_attention_heads",
            ),
            (
                json!({"linear_attn_config": {"num_heads": 0}}),
                "text_config.linear_attn_config.num_heads",
            ),
        ] {
            let err = check_counts(&config, "text_config.").unwrap_err();
            let Error::Config { key: got, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!(got, key);
        }
    }
}
