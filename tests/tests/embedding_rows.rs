//! Token embeddings read by row from a store's backbone file
//! (`waste_format::RowsOnDemand`, what the node and `waste run` on a store
//! do) against the same table held in RAM (`Model::load` on the plain
//! checkpoint): for every fixture family and stored format (f32/bf16 as
//! released, q8 blocks, a GGUF's blocks), the logits are equal bit for bit,
//! the table is not held (the backbone's RAM is the resident model's less
//! the table plus the row cache, as the node's RAM plan counts it), a cache
//! far smaller than the tokens used evicts and reads again correctly, and a
//! shard cut short fails naming the file and tensor. The node's peak RSS
//! against its plan (which counts the cache, not the table) is checked in
//! `bin/waste/tests/plan_rss.rs`.

use std::path::Path;

use anyhow::{Result, ensure};
use waste_convert::GgufCheckpoint;
use waste_convert::convert::{BackboneMode, ExpertsMode, Options};
use waste_e2e::fixture;
use waste_e2e::harness::convert_fixture;
use waste_format::checkpoint::RowEncoding;
use waste_format::{Checkpoint, RowsOnDemand};
use waste_kernels::{RowSource, TensorSource};
use waste_model::{LogitsFor, Model, ModelConfig, NoTrace, SourceExperts};

/// A cache of a few rows, so the token sequence below evicts and re-reads.
const CACHE_ROWS: usize = 5;

fn store(source: &str, backbone: BackboneMode, out: &Path) -> Result<()> {
    let options = Options {
        experts: ExpertsMode::Native,
        backbone,
        ..Options::default()
    };
    convert_fixture(source, &options, out)?;
    Ok(())
}

/// Converts `source` with `backbone`, then checks the store's embeddings
/// read by row against the resident table; returns how its rows are stored.
fn check(source: &str, backbone: BackboneMode) -> Result<RowEncoding> {
    let out = tempfile::tempdir()?;
    store(source, backbone, out.path())?;
    let ckpt = Checkpoint::open(out.path().join("backbone"))?;
    let config = ModelConfig::from_json(ckpt.config_json())?;
    let embed = config.names.model("embed_tokens.weight");
    let by_row = RowsOnDemand {
        checkpoint: &ckpt,
        cache_rows: CACHE_ROWS,
    };
    let resident = Model::load(config.clone(), &ckpt)?;
    let on_disk = Model::load(config, &by_row)?;
    ensure!(
        !resident.embeddings_on_disk(),
        "{source}: plain load reads by row"
    );
    ensure!(
        on_disk.embeddings_on_disk(),
        "{source}: the store's table is held"
    );

    let rows = ckpt.rows(&embed, CACHE_ROWS)?.expect("rows stand alone");
    let (vocab, h) = (rows.rows(), rows.cols());
    let table = ckpt.info(&embed)?;
    let held_table = waste_node::plan::Resident::of(&table.storage).bytes(&table.shape);
    ensure!(
        resident.backbone_bytes() - on_disk.backbone_bytes()
            == held_table as usize - rows.resident_bytes(),
        "{source}: the row reader holds {} bytes less than the table's {held_table}, \
         expected the table less {} cached",
        resident.backbone_bytes() - on_disk.backbone_bytes(),
        rows.resident_bytes()
    );
    ensure!(
        rows.resident_bytes() == CACHE_ROWS * rows.encoding().row_bytes(h),
        "{source}: cache of {} bytes",
        rows.resident_bytes()
    );

    // The routed experts from the release (both models get the same).
    let release: Box<dyn TensorSource> = if source.ends_with(".gguf") {
        Box::new(GgufCheckpoint::open(fixture(source))?)
    } else {
        Box::new(Checkpoint::open(fixture(source))?)
    };
    let experts = SourceExperts::new(&*release, resident.config(), usize::MAX);
    // More distinct ids than the cache holds, each used twice, far apart.
    let ids: Vec<u32> = (0..40u32)
        .map(|i| ((i % 20) * 7919 + 13) % vocab as u32)
        .collect();
    let run = |m: &Model| {
        let mut cache = m.new_cache(64);
        m.forward(&ids, &mut cache, &experts, LogitsFor::All, &mut NoTrace)
    };
    let (got, want) = (run(&on_disk)?, run(&resident)?);
    ensure!(
        got == want,
        "{source} ({}): logits from embeddings read by row differ from the resident table's",
        backbone.name()
    );
    // Decode steps, one token each, also through the cache.
    let (mut a, mut b) = (on_disk.new_cache(64), resident.new_cache(64));
    for &id in &ids[..8] {
        let got = on_disk.forward(&[id], &mut a, &experts, LogitsFor::Last, &mut NoTrace)?;
        let want = resident.forward(&[id], &mut b, &experts, LogitsFor::Last, &mut NoTrace)?;
        ensure!(got == want, "{source}: decode step of token {id} differs");
    }
    eprintln!(
        "{source} ({}): {vocab} x {h} table read by row ({:?}), logits equal, {} bytes held instead of {held_table}",
        backbone.name(),
        rows.encoding(),
        rows.resident_bytes()
    );
    Ok(rows.encoding())
}

#[test]
fn embeddings_read_by_row_give_the_resident_tables_logits_for_every_family() -> Result<()> {
    let mut seen = Vec::new();
    for (source, backbone) in [
        ("qwen3_moe_tiny", BackboneMode::Native),
        ("qwen3_moe_tiny", BackboneMode::Bf16),
        ("deepseek_v3_tiny", BackboneMode::Q8),
        ("mixtral_tiny", BackboneMode::Native),
        ("kimi_k3_tiny", BackboneMode::Q8),
        ("gguf/qwen3_moe_tiny.q8_0.gguf", BackboneMode::Native),
        ("gguf/qwen3_moe_tiny.f32.gguf", BackboneMode::Native),
    ] {
        seen.push(check(source, backbone)?);
    }
    for want in [RowEncoding::F32, RowEncoding::Bf16, RowEncoding::Q8] {
        ensure!(seen.contains(&want), "no store stored its rows as {want:?}");
    }
    Ok(())
}

#[test]
fn a_truncated_shard_fails_naming_the_file_and_the_tensor() -> Result<()> {
    let out = tempfile::tempdir()?;
    store("qwen3_moe_tiny", BackboneMode::Bf16, out.path())?;
    let dir = out.path().join("backbone");
    let ckpt = Checkpoint::open(&dir)?;
    let config = ModelConfig::from_json(ckpt.config_json())?;
    let embed = config.names.model("embed_tokens.weight");
    let shard = ckpt.info(&embed)?.shard;
    let rows = ckpt
        .rows(&embed, CACHE_ROWS)?
        .expect("bf16 rows stand alone");
    let mut row = vec![0f32; rows.cols()];
    rows.row_f32_into(0, &mut row)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Cut the shard away under the open reader: a row it has cached still
    // reads, one it must read fails saying which file and tensor.
    fs_err::OpenOptions::new()
        .write(true)
        .open(&shard)?
        .set_len(0)?;
    rows.row_f32_into(0, &mut row)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let last = rows.rows() - 1;
    let e = rows.row_f32_into(last, &mut row).unwrap_err().to_string();
    ensure!(
        e.contains(&embed) && e.contains(&shard.display().to_string()),
        "{e}"
    );
    // An out-of-range row is an error, not a panic.
    let e = rows
        .row_f32_into(rows.rows(), &mut row)
        .unwrap_err()
        .to_string();
    ensure!(e.contains(&embed), "{e}");
    Ok(())
}
