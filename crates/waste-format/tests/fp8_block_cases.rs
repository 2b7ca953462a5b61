//! FP8 block dequantization against `fixtures/fp8_block_cases`: shapes with
//! partial edge blocks in both dims, float32 results given, bit-exact.

mod common;

use anyhow::Result;
use waste_format::{Checkpoint, Storage};
use waste_kernels::TensorData;

#[test]
fn every_case_is_bit_exact() -> Result<()> {
    let dir = common::fixtures().join("fp8_block_cases");
    let cases: serde_json::Value =
        serde_json::from_str(&fs_err::read_to_string(dir.join("cases.json"))?)?;
    let ckpt = Checkpoint::open(&dir)?;
    assert!(
        ckpt.config_json().is_null(),
        "no config.json in that folder"
    );
    let cases = cases["cases"].as_object().expect("cases object");
    assert_eq!(cases.len(), 5);
    for (case, spec) in cases {
        let weight = format!("{case}.weight");
        let shape: Vec<usize> = serde_json::from_value(spec["shape"].clone())?;
        let info = ckpt.info(&weight)?;
        assert_eq!(info.shape, shape, "{case}");
        assert_eq!(info.storage, Storage::Fp8Block { block: [128, 128] });
        assert!(!ckpt.contains(&format!("{case}.weight_scale_inv")));

        let got = ckpt.load(&weight)?;
        assert_eq!(got.shape, shape);
        let TensorData::F32(got) = got.data else {
            panic!("{case}: fp8 must decode to f32");
        };
        let want = common::values(ckpt.load(&format!("{case}.dequant_f32"))?);
        assert_eq!(got.len(), want.len());
        let mismatches = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(mismatches, 0, "{case}: {mismatches} values differ");
    }
    let names = ckpt.tensor_names();
    assert_eq!(names.len(), 10, "{names:?}");
    Ok(())
}
