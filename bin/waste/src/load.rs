//! Opens what `--model` names: a Hugging Face checkpoint folder (plain,
//! sharded, or a hub cache snapshot) read through waste-convert, with the
//! routed experts loaded on demand from the same files.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use waste_convert::Checkpoint;
use waste_model::{Model, ModelConfig};

/// A model ready to run, with the checkpoint its experts come from.
pub struct Loaded {
    pub checkpoint: Checkpoint,
    pub model: Model,
}

pub fn open(path: &Path) -> Result<Loaded> {
    let start = Instant::now();
    let checkpoint =
        Checkpoint::open(path).with_context(|| format!("open checkpoint {}", path.display()))?;
    let config = ModelConfig::from_json(checkpoint.config_json())
        .with_context(|| format!("read {}", checkpoint.config_path().display()))?;
    tracing::info!(
        model_type = config.model_type,
        layers = config.num_hidden_layers,
        hidden = config.hidden_size,
        vocab = config.vocab_size,
        "loading {}",
        checkpoint.dir().display()
    );
    let model = Model::load(config, &checkpoint).context("load backbone")?;
    tracing::info!(
        backbone_mib = model.backbone_bytes() >> 20,
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "backbone loaded"
    );
    Ok(Loaded { checkpoint, model })
}

/// Parses `1,2,3` into token ids.
pub fn parse_tokens(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<u32>()
                .with_context(|| format!("token id {t:?} is not a non-negative integer"))
        })
        .collect()
}

/// Routed experts kept in RAM by the in-process commands before they start
/// over; enough for any model's working set of one token, far below a real
/// release's total.
pub const EXPERT_BUDGET_BYTES: usize = 4 << 30;

/// Sampling defaults and extra stop ids from generation_config.json.
#[derive(Debug, Clone)]
pub struct GenerationDefaults {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub eos_token_ids: Vec<u32>,
}

/// Reads `DIR/generation_config.json` when present: its sampling settings
/// apply only when it sets `do_sample`; otherwise decoding is greedy.
pub fn generation_defaults(dir: &Path) -> GenerationDefaults {
    let json: serde_json::Value = fs_err::read_to_string(dir.join("generation_config.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let sample = json
        .get("do_sample")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let f = |k: &str, d: f64| json.get(k).and_then(serde_json::Value::as_f64).unwrap_or(d);
    GenerationDefaults {
        temperature: if sample {
            f("temperature", 1.0) as f32
        } else {
            0.0
        },
        top_k: if sample { f("top_k", 0.0) as usize } else { 0 },
        top_p: if sample { f("top_p", 1.0) as f32 } else { 1.0 },
        eos_token_ids: json
            .get("eos_token_id")
            .map(waste_model::tokenizer::token_ids_from_json)
            .unwrap_or_default(),
    }
}
