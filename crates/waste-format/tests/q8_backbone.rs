//! The backbone's 8-bit group format (`waste convert --backbone q8`): a
//! `<p>.weight_q8` + `<p>.weight_shape` pair written with the streaming
//! writer reads back through `Checkpoint` as `<p>.weight`, still packed,
//! whose values are the q8 blocks' f32 values; a pair whose shapes disagree
//! is an error naming the tensor.

use std::collections::BTreeMap;

use waste_format::backbone::{Q8_SUFFIX, SHAPE_SUFFIX, SafetensorsWriter, TensorSpec};
use waste_format::{Checkpoint, Storage};
use waste_kernels::{Format, TensorData, quantize};

fn write(dir: &std::path::Path, rows: usize, cols: usize, stored_rows: usize) -> Vec<f32> {
    let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let q = quantize(Format::Q8, rows, cols, &w).unwrap();
    let shape: Vec<u8> = [rows as i64, cols as i64]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let row_bytes = Format::Q8.row_bytes(cols);
    let specs = vec![
        TensorSpec {
            name: format!("m{SHAPE_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![2],
            bytes: 16,
        },
        TensorSpec {
            name: format!("m{Q8_SUFFIX}"),
            dtype: "U8".into(),
            shape: vec![stored_rows, row_bytes],
            bytes: stored_rows * row_bytes,
        },
    ];
    let path = dir.join("model.safetensors");
    let mut out = SafetensorsWriter::create(&path, specs, &BTreeMap::new()).unwrap();
    out.write(&format!("m{SHAPE_SUFFIX}"), &shape).unwrap();
    let mut bytes = q.bytes.clone();
    bytes.resize(stored_rows * row_bytes, 0);
    out.write(&format!("m{Q8_SUFFIX}"), &bytes).unwrap();
    out.finish().unwrap();
    q.matrix().dequantize()
}

#[test]
fn q8_weights_read_back_as_their_blocks_values() {
    let tmp = tempfile::tempdir().unwrap();
    let want = write(tmp.path(), 5, 70, 5);
    let ckpt = Checkpoint::open(tmp.path()).unwrap();
    assert_eq!(ckpt.tensor_names(), ["m.weight"]);
    let info = ckpt.info("m.weight").unwrap();
    assert_eq!((info.shape, info.storage), (vec![5, 70], Storage::Q8));
    let t = ckpt.load("m.weight").unwrap();
    assert_eq!(t.shape, [5, 70]);
    assert!(matches!(t.data, TensorData::Q8(_)), "q8 stays packed");
    assert_eq!(t.size_bytes(), 5 * Format::Q8.row_bytes(70));
    assert_eq!(t.into_f32(), want);
}

#[test]
fn q8_blocks_of_the_wrong_shape_are_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), 5, 70, 4);
    let ckpt = Checkpoint::open(tmp.path()).unwrap();
    let err = ckpt.load("m.weight").unwrap_err().to_string();
    assert!(
        err.contains("m.weight_q8") && err.contains("model.safetensors"),
        "{err}"
    );
}
