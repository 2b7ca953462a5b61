//! The deepseek_v3_tiny weights as released in FP8 blocks and in int4
//! pack-quantized form, against the bf16 originals.

mod common;

use anyhow::{Context, Result};
use half::bf16;
use safetensors::Dtype;
use waste_format::{Checkpoint, Storage};
use waste_kernels::TensorData;

fn open(folder: &str) -> Result<Checkpoint> {
    Checkpoint::open(common::fixtures().join(folder)).with_context(|| format!("open {folder}"))
}

#[test]
fn fp8_folder_decodes_close_to_bf16() -> Result<()> {
    let (bf, fp8) = (open("deepseek_v3_tiny")?, open("deepseek_v3_tiny_fp8")?);
    assert_eq!(fp8.tensor_names(), bf.tensor_names());
    assert_eq!(fp8.config_json()["model_type"], "deepseek_v3");
    let mut quantized = 0;
    for name in fp8.tensor_names() {
        let info = fp8.info(name)?;
        let (got, orig) = (fp8.load(name)?, bf.load(name)?);
        assert_eq!(got.shape, orig.shape, "{name}");
        assert_eq!(info.shape, got.shape, "{name}");
        if info.storage == (Storage::Fp8Block { block: [128, 128] }) {
            quantized += 1;
            assert!(matches!(got.data, TensorData::F32(_)), "{name}");
            let err = common::relative_error(&common::values(got), &common::values(orig));
            assert!(err < 0.1, "{name}: relative error {err}");
        } else {
            assert!(
                common::same_bits(&got, &orig),
                "{name}: unquantized but differs"
            );
        }
    }
    // 4 layers x 5 attention projections + 3 dense + 3 x (32 x 3 + 3 shared).
    assert_eq!(quantized, 4 * 5 + 3 + 3 * (32 * 3 + 3));
    Ok(())
}

/// Independent scalar decode straight from the file: word j/8 of the row,
/// nibble j%8 from the bottom, minus 8, times the bf16 scale of group j/32.
fn scalar_int4(packed: &[i32], scale: &[bf16], rows: usize, cols: usize) -> Vec<f32> {
    let (words, groups) = (cols.div_ceil(8), cols.div_ceil(32));
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for j in 0..cols {
            let word = packed[r * words + j / 8];
            let q = ((word >> (4 * (j % 8))) & 0xF) - 8;
            out.push(q as f32 * scale[r * groups + j / 32].to_f32());
        }
    }
    out
}

#[test]
fn int4_folder_decodes_exactly_and_close_to_bf16() -> Result<()> {
    let (bf, int4) = (open("deepseek_v3_tiny")?, open("deepseek_v3_tiny_int4")?);
    assert_eq!(int4.tensor_names(), bf.tensor_names());
    let stored =
        common::read_all(&common::fixtures().join("deepseek_v3_tiny_int4/model.safetensors"))?;
    let find = |n: &str| stored.iter().find(|t| t.name == n).expect("stored tensor");

    let (mut quantized, mut worst) = (0, 0.0f64);
    for name in int4.tensor_names() {
        let info = int4.info(name)?;
        let (got, orig) = (int4.load(name)?, bf.load(name)?);
        assert_eq!(got.shape, orig.shape, "{name}");
        if info.storage != (Storage::Int4PackQuantized { group_size: 32 }) {
            assert!(
                common::same_bits(&got, &orig),
                "{name}: unquantized but differs"
            );
            continue;
        }
        quantized += 1;
        assert!(name.contains(".mlp.experts."), "{name}");
        let prefix = name.strip_suffix(".weight").expect("weight");
        let packed = find(&format!("{prefix}.weight_packed"));
        let scale = find(&format!("{prefix}.weight_scale"));
        assert_eq!((packed.dtype, scale.dtype), (Dtype::I32, Dtype::BF16));
        let packed: Vec<i32> = packed
            .data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        let scale: Vec<bf16> = scale
            .data
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]))
            .collect();
        let (rows, cols) = (got.shape[0], got.shape[1]);
        let want = scalar_int4(&packed, &scale, rows, cols);
        let got = common::values(got);
        assert!(
            got.iter()
                .map(|v| v.to_bits())
                .eq(want.iter().map(|v| v.to_bits())),
            "{name}: differs from the scalar decode"
        );
        let err = common::relative_error(&got, &common::values(orig));
        worst = worst.max(err);
        assert!(err < 0.15, "{name}: relative error {err}");
    }
    assert_eq!(quantized, 3 * 32 * 3);
    eprintln!("worst int4 relative error {worst:.4}");
    Ok(())
}

#[test]
fn quantization_parts_are_hidden_but_readable_raw() -> Result<()> {
    let int4 = open("deepseek_v3_tiny_int4")?;
    let p = "model.layers.1.mlp.experts.0.gate_proj";
    assert!(int4.contains(&format!("{p}.weight")));
    for part in ["weight_packed", "weight_scale", "weight_shape"] {
        let name = format!("{p}.{part}");
        assert!(!int4.contains(&name), "{name} should be hidden");
        assert!(int4.stored_names().contains(&name.as_str()));
        assert_eq!(int4.stored(&name)?.name, name);
    }
    let info = int4.info(&format!("{p}.weight"))?;
    assert_eq!(info.shape, [64, 128]);
    assert!(info.shard.ends_with("model.safetensors"));

    let fp8 = open("deepseek_v3_tiny_fp8")?;
    let scale = "model.layers.0.self_attn.q_a_proj.weight_scale_inv";
    assert!(!fp8.contains(scale));
    assert_eq!(fp8.stored(scale)?.dtype, Dtype::F32);
    Ok(())
}
