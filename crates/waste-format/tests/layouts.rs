//! The same weights read through every folder layout: sharded with an
//! index, sharded without one, a single file path, and a Hugging Face cache
//! entry whose files are symlinks into `blobs/`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use waste_format::Checkpoint;
use waste_kernels::TensorSource;

/// Splits `fixture`'s model.safetensors into two shards (alternating in name
/// order, so a weight and its scale land in different files) plus an index.
fn shard_fixture(fixture: &str, out: &Path) -> Result<()> {
    let src = common::fixtures().join(fixture);
    let tensors = common::read_all(&src.join("model.safetensors"))?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (i, t) in tensors.into_iter().enumerate() {
        if i % 2 == 0 { a.push(t) } else { b.push(t) }
    }
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut weight_map = BTreeMap::new();
    for (file, part) in names.iter().zip([&a, &b]) {
        common::write_safetensors(&out.join(file), part)?;
        for t in part {
            weight_map.insert(t.name.clone(), *file);
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    fs_err::write(out.join("model.safetensors.index.json"), index.to_string())?;
    fs_err::copy(src.join("config.json"), out.join("config.json"))?;
    Ok(())
}

#[test]
fn sharded_folders_load_like_the_single_file() -> Result<()> {
    for fixture in ["deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4"] {
        let single = Checkpoint::open(common::fixtures().join(fixture))?;
        let tmp = tempfile::tempdir()?;
        shard_fixture(fixture, tmp.path())?;

        let sharded = Checkpoint::open(tmp.path())?;
        assert_eq!(sharded.shard_paths().len(), 2);
        assert_eq!(sharded.config_json(), single.config_json());
        common::assert_same_checkpoint(&sharded, &single)?;

        // The same folder without its index: every *.safetensors is read.
        fs_err::remove_file(tmp.path().join("model.safetensors.index.json"))?;
        let listed = Checkpoint::open(tmp.path())?;
        assert_eq!(listed.shard_paths().len(), 2);
        common::assert_same_checkpoint(&listed, &single)?;
    }
    Ok(())
}

#[test]
fn single_file_path_and_index_path_open() -> Result<()> {
    let dir = common::fixtures().join("deepseek_v3_tiny");
    let folder = Checkpoint::open(&dir)?;
    let file = Checkpoint::open(dir.join("model.safetensors"))?;
    assert_eq!(file.dir(), dir);
    assert_eq!(file.config_json(), folder.config_json());
    common::assert_same_checkpoint(&file, &folder)?;

    let tmp = tempfile::tempdir()?;
    shard_fixture("deepseek_v3_tiny", tmp.path())?;
    let by_index = Checkpoint::open(tmp.path().join("model.safetensors.index.json"))?;
    common::assert_same_checkpoint(&by_index, &folder)?;
    Ok(())
}

/// models--org--name/{blobs/<hash>, snapshots/<commit>/<file> -> ../../blobs/<hash>, refs/main}
fn fake_cache(fixture: &str, root: &Path, with_ref: bool) -> Result<std::path::PathBuf> {
    let entry = root.join("models--waste--tiny");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snapshot = entry.join("snapshots").join(commit);
    fs_err::create_dir_all(entry.join("blobs"))?;
    fs_err::create_dir_all(&snapshot)?;
    fs_err::create_dir_all(entry.join("refs"))?;
    if with_ref {
        fs_err::write(entry.join("refs/main"), format!("{commit}\n"))?;
    }
    for (i, file) in ["config.json", "model.safetensors", "generation_config.json"]
        .iter()
        .enumerate()
    {
        let blob = format!("blob{i:040}");
        fs_err::copy(
            common::fixtures().join(fixture).join(file),
            entry.join("blobs").join(&blob),
        )?;
        fs_err::os::unix::fs::symlink(Path::new("../../blobs").join(&blob), snapshot.join(file))?;
    }
    Ok(entry)
}

#[test]
fn hugging_face_cache_entries_follow_symlinks() -> Result<()> {
    let reference = Checkpoint::open(common::fixtures().join("deepseek_v3_tiny_fp8"))?;
    for with_ref in [true, false] {
        let tmp = tempfile::tempdir()?;
        let entry = fake_cache("deepseek_v3_tiny_fp8", tmp.path(), with_ref)?;
        let from_entry = Checkpoint::open(&entry)?;
        assert!(from_entry.dir().starts_with(entry.join("snapshots")));
        assert_eq!(from_entry.config_json(), reference.config_json());
        common::assert_same_checkpoint(&from_entry, &reference)?;

        let from_snapshot = Checkpoint::open(from_entry.dir())?;
        common::assert_same_checkpoint(&from_snapshot, &reference)?;
    }
    Ok(())
}

#[test]
fn cache_entry_with_a_dangling_ref_is_an_error() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let entry = fake_cache("deepseek_v3_tiny", tmp.path(), true)?;
    fs_err::write(
        entry.join("refs/main"),
        "ffffffffffffffffffffffffffffffffffffffff",
    )?;
    let err = Checkpoint::open(&entry).unwrap_err().to_string();
    assert!(err.contains("ffffffff"), "{err}");
    Ok(())
}

#[test]
fn kimi_k3_release_layout_opens_and_decodes_mxfp4_experts() -> Result<()> {
    // Two shards + index; routed experts are MXFP4 (U8 weight_packed + E8M0 weight_scale).
    let ckpt = Checkpoint::open(common::fixtures().join("kimi_k3_tiny"))?;
    assert_eq!(ckpt.shard_paths().len(), 2);
    let embed = "language_model.model.embed_tokens.weight";
    assert_eq!(ckpt.load(embed)?.shape, [1024, 128]);
    let prefix = "language_model.model.layers.1.block_sparse_moe.experts.0.w1";
    let expert = format!("{prefix}.weight");
    assert!(ckpt.contains(&expert));
    assert!(!ckpt.contains(&format!("{prefix}.weight_packed")));
    assert_eq!(
        ckpt.info(&expert)?.storage,
        waste_format::Storage::Mxfp4PackQuantized { group_size: 32 }
    );
    let got = ckpt.load(&expert)?;
    assert_eq!(got.shape, [64, 64]);
    let got = got.into_f32();
    // Independent decode of the raw parts: low nibble = even column, e2m1
    // magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 = sign, 2^(e-127) per 32 columns.
    let packed_name = format!("{prefix}.weight_packed");
    let scale_name = format!("{prefix}.weight_scale");
    let packed = ckpt.stored(&packed_name)?;
    let scale = ckpt.stored(&scale_name)?;
    let magnitude = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for r in 0..64 {
        for c in 0..64 {
            let byte = packed.data[r * 32 + c / 2];
            let code = if c % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let sign = if code & 8 != 0 { -1.0 } else { 1.0 };
            let e = i32::from(scale.data[r * 2 + c / 32]);
            let want = sign * magnitude[usize::from(code & 7)] * 2f64.powi(e - 127);
            assert_eq!(f64::from(got[r * 64 + c]), want, "[{r}, {c}]");
        }
    }
    Ok(())
}

#[test]
fn checkpoint_is_a_tensor_source() -> Result<()> {
    let ckpt = Checkpoint::open(common::fixtures().join("deepseek_v3_tiny_int4"))?;
    let source: &dyn TensorSource = &ckpt;
    let name = "model.layers.2.mlp.experts.5.down_proj.weight";
    assert!(source.contains(name));
    assert_eq!(
        source.load(name).map_err(anyhow::Error::from_boxed)?.shape,
        [128, 64]
    );
    let err = source.load("nope.weight").unwrap_err().to_string();
    assert!(err.contains("nope.weight"), "{err}");
    Ok(())
}
