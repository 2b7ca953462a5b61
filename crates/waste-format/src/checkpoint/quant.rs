//! The parts of `config.json`'s `quantization_config` the readers need: the
//! FP8 block size (`weight_block_size`, DeepSeek-V3 / Kimi-K2) and the weight
//! schemes of compressed-tensors `config_groups` (Kimi-K2-Thinking int4).
//! Looked up at the top level or under `text_config` (vision-language
//! releases). Owns parsing and validation only; missing keys mean defaults.

use std::path::Path;

use serde_json::Value;

use crate::checkpoint::error::{Error, Result};

/// FP8 block size when the config does not say.
pub(crate) const DEFAULT_FP8_BLOCK: [usize; 2] = [128, 128];
/// Int4 group size when the config has no `config_groups`.
pub(crate) const DEFAULT_INT4_GROUP: usize = 32;

/// One `config_groups.*.weights` entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WeightScheme {
    pub num_bits: Option<u64>,
    /// `int` or `float`.
    pub kind: Option<String>,
    pub group_size: Option<usize>,
    /// `group`, `channel`, `tensor`, ...
    pub strategy: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QuantConfig {
    pub fp8_block: [usize; 2],
    /// compressed-tensors `format` (`pack-quantized`, `mxfp4-pack-quantized`, ...).
    pub format: Option<String>,
    /// In `config_groups` key order.
    pub schemes: Vec<WeightScheme>,
}

impl Default for QuantConfig {
    fn default() -> Self {
        Self {
            fp8_block: DEFAULT_FP8_BLOCK,
            format: None,
            schemes: Vec::new(),
        }
    }
}

impl QuantConfig {
    /// Reads the quantization settings of `config` (the parsed `config.json`
    /// at `path`, or `Null` when the folder has none).
    pub(crate) fn from_config(config: &Value, path: &Path) -> Result<Self> {
        let Some(q) = config
            .get("quantization_config")
            .or_else(|| config.get("text_config")?.get("quantization_config"))
            .filter(|q| !q.is_null())
        else {
            return Ok(Self::default());
        };
        let bad = |reason: String| Error::BadConfig {
            path: path.to_path_buf(),
            reason: format!("quantization_config: {reason}"),
        };
        let fp8_block = match q.get("weight_block_size").filter(|v| !v.is_null()) {
            None => DEFAULT_FP8_BLOCK,
            Some(v) => match v.as_array().map(Vec::as_slice) {
                Some([r, c]) => match (positive(r), positive(c)) {
                    (Some(r), Some(c)) => [r, c],
                    _ => {
                        return Err(bad(format!(
                            "weight_block_size {v} is not two positive integers"
                        )));
                    }
                },
                _ => {
                    return Err(bad(format!(
                        "weight_block_size {v} is not two positive integers"
                    )));
                }
            },
        };
        let format = q.get("format").and_then(Value::as_str).map(str::to_owned);
        let mut schemes = Vec::new();
        if let Some(groups) = q.get("config_groups").filter(|v| !v.is_null()) {
            let groups = groups
                .as_object()
                .ok_or_else(|| bad("config_groups is not an object".into()))?;
            for (name, group) in groups {
                let Some(w) = group.get("weights").filter(|w| !w.is_null()) else {
                    continue;
                };
                let group_size = match w.get("group_size").filter(|v| !v.is_null()) {
                    None => None,
                    Some(v) => Some(positive(v).ok_or_else(|| {
                        bad(format!(
                            "config_groups.{name}.weights.group_size {v} is not a positive integer"
                        ))
                    })?),
                };
                schemes.push(WeightScheme {
                    num_bits: w.get("num_bits").and_then(Value::as_u64),
                    kind: w.get("type").and_then(Value::as_str).map(str::to_owned),
                    group_size,
                    strategy: w.get("strategy").and_then(Value::as_str).map(str::to_owned),
                });
            }
        }
        Ok(Self {
            fp8_block,
            format,
            schemes,
        })
    }

    /// Whether packed weights are MXFP4 (`mxfp4-pack-quantized`, or a 4-bit float scheme).
    pub(crate) fn is_mxfp4(&self) -> bool {
        self.format.as_deref() == Some("mxfp4-pack-quantized")
            || self
                .schemes
                .iter()
                .any(|s| s.num_bits == Some(4) && s.kind.as_deref() == Some("float"))
    }

    /// The MXFP4 group size: the configured 4-bit float scheme's, else 32 (the OCP block).
    pub(crate) fn mxfp4_group(&self) -> usize {
        self.schemes
            .iter()
            .find(|s| s.num_bits == Some(4) && s.kind.as_deref() == Some("float"))
            .and_then(|s| s.group_size)
            .unwrap_or(32)
    }

    /// Group sizes a 4-bit integer weight with `cols` inputs may use, in
    /// config order (`channel` strategy: one group per row). `Err` holds a
    /// description of the configured schemes when none is 4-bit integer.
    pub(crate) fn int4_groups(&self, cols: usize) -> std::result::Result<Vec<usize>, String> {
        if self.schemes.is_empty() {
            return Ok(vec![DEFAULT_INT4_GROUP]);
        }
        let groups: Vec<usize> = self
            .schemes
            .iter()
            .filter(|s| matches!(s.num_bits, None | Some(4)))
            .filter(|s| s.kind.as_deref().is_none_or(|k| k == "int"))
            .filter_map(|s| match s.strategy.as_deref() {
                Some("channel") => Some(cols.max(1)),
                _ => s.group_size,
            })
            .collect();
        if groups.is_empty() {
            let described: Vec<String> = self
                .schemes
                .iter()
                .map(|s| {
                    format!(
                        "{} bits {}",
                        s.num_bits.map_or("?".into(), |b| b.to_string()),
                        s.kind.as_deref().unwrap_or("?")
                    )
                })
                .collect();
            return Err(described.join(", "));
        }
        Ok(groups)
    }
}

fn positive(v: &Value) -> Option<usize> {
    v.as_u64()
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: &Value) -> Result<QuantConfig> {
        QuantConfig::from_config(v, Path::new("config.json"))
    }

    #[test]
    fn defaults_without_quantization_config() {
        assert_eq!(parse(&json!({})).unwrap(), QuantConfig::default());
        assert_eq!(parse(&Value::Null).unwrap(), QuantConfig::default());
        assert_eq!(QuantConfig::default().int4_groups(100).unwrap(), [32]);
    }

    #[test]
    fn fp8_block_size_is_read_and_validated() {
        let q = parse(&json!({"quantization_config": {"weight_block_size": [64, 32]}})).unwrap();
        assert_eq!(q.fp8_block, [64, 32]);
        for bad in [json!([0, 128]), json!([128]), json!("128"), json!([-1, 2])] {
            let err =
                parse(&json!({"quantization_config": {"weight_block_size": bad}})).unwrap_err();
            assert!(err.to_string().contains("config.json"), "{err}");
        }
    }

    #[test]
    fn config_groups_give_int4_group_sizes() {
        let cfg = json!({"text_config": {"quantization_config": {
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 64, "strategy": "group"}},
                "group_1": {"weights": {"num_bits": 4, "type": "int", "group_size": null, "strategy": "channel"}},
                "group_2": {"weights": {"num_bits": 8, "type": "int", "group_size": 128}}
            }
        }}});
        let q = parse(&cfg).unwrap();
        assert_eq!(q.format.as_deref(), Some("pack-quantized"));
        assert_eq!(q.int4_groups(256).unwrap(), [64, 256]);
        let eight = json!({"quantization_config": {"config_groups": {
            "g": {"weights": {"num_bits": 8, "type": "int", "group_size": 128}}}}});
        assert!(parse(&eight).unwrap().int4_groups(256).is_err());
        let zero = json!({"quantization_config": {"config_groups": {
            "g": {"weights": {"num_bits": 4, "group_size": 0}}}}});
        assert!(parse(&zero).is_err());
    }
}
