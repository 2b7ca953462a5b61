//! One model description for every command: the config (a config.json, or
//! the one synthesised from GGUF metadata) validated by
//! `ModelConfig::from_json_file`, and the tensor table checked against the
//! shapes it implies (`waste_model::tensors`), from names and shapes alone.
//! `forward`, `run` and the other in-process commands check what they load;
//! `convert` checks its source before writing anything; `inspect --verify`
//! checks the store it reads. So convert accepts exactly what the loader
//! accepts. waste-convert may not depend on waste-model (STYLE 4.1): the
//! binary, which holds both, joins them here.

use std::path::Path;

use anyhow::{Context, Result};
use waste_convert::GgufCheckpoint;
use waste_convert::convert::Source;
use waste_format::{Checkpoint, ExpertsIndex};
use waste_model::ModelConfig;
use waste_model::tensors::{ExpertLayerShape, check_checkpoint, check_expert_layers, check_shapes};

/// The validated description of a conversion's source, checked against its tensors.
pub fn source(source: &Source) -> Result<ModelConfig> {
    let config_path = source.config_path();
    let config = ModelConfig::from_json_file(source.config(), &config_path)?;
    let names: Vec<&str> = source.names().iter().map(String::as_str).collect();
    check_checkpoint(&config, &names, &|n| source.info(n).ok().map(|i| i.shape))
        .with_context(|| against(source.path(), &config_path))?;
    Ok(config)
}

/// The validated description of a Hugging Face folder (a store's
/// `backbone/` included), checked against its tensors; `experts` says
/// whether the folder holds the routed experts too (not a store's).
pub fn folder(checkpoint: &Checkpoint, experts: bool) -> Result<ModelConfig> {
    let config_path = checkpoint.config_path();
    let config = ModelConfig::from_json_file(checkpoint.config_json(), config_path)?;
    let shape_of = |n: &str| checkpoint.info(n).ok().map(|i| i.shape);
    let checked = if experts {
        check_checkpoint(&config, &checkpoint.tensor_names(), &shape_of)
    } else {
        check_shapes(&config.expected_backbone(), &shape_of)
    };
    checked.with_context(|| against(checkpoint.dir(), config_path))?;
    Ok(config)
}

/// The validated description of a GGUF file, checked against its tensors.
pub fn gguf(gguf: &GgufCheckpoint) -> Result<ModelConfig> {
    let path = gguf.path();
    let config = ModelConfig::from_json_file(gguf.config_json(), path)?;
    check_checkpoint(&config, &gguf.tensor_names(), &|n| {
        gguf.info(n).map(|(shape, _)| shape)
    })
    .with_context(|| against(path, path))?;
    Ok(config)
}

/// Checks a store's experts index (layers, counts, widths, top-k) against
/// the backbone's description; `config_path` is the backbone's config.json.
pub fn store_experts(config: &ModelConfig, index: &ExpertsIndex, config_path: &Path) -> Result<()> {
    let layers: Vec<ExpertLayerShape> = index
        .layers
        .iter()
        .map(|l| ExpertLayerShape {
            layer: l.layer as usize,
            n_experts: l.n_experts as usize,
            d_model: l.d_model as usize,
            d_ff: l.d_ff as usize,
        })
        .collect();
    check_expert_layers(config, &layers, index.top_k as usize)
        .map_err(|e| e.in_file(config_path))
        .with_context(|| format!("check the experts index against {}", config_path.display()))
}

fn against(tensors: &Path, config: &Path) -> String {
    if tensors == config {
        format!(
            "check the tensors of {} against its metadata",
            tensors.display()
        )
    } else {
        format!(
            "check the tensors of {} against {}",
            tensors.display(),
            config.display()
        )
    }
}
