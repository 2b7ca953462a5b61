//! A backbone weight kept as a GGUF's ggml blocks (`waste convert
//! --backbone native` on a GGUF): `<p>.weight_ggml` + `<p>.weight_shape` +
//! `<p>.weight_ggml_type` written with the streaming writer read back
//! through `Checkpoint` as `<p>.weight`, still packed, with the values the
//! ggml decoder gives the blocks; a wrong block count, a type the decoders
//! do not read or a missing type companion is an error naming the tensor.

use std::collections::BTreeMap;
use std::path::Path;

use waste_format::backbone::{
    GGML_SUFFIX, GGML_TYPE_SUFFIX, SHAPE_SUFFIX, SafetensorsWriter, TensorSpec, ggml_type_bytes,
    shape_bytes,
};
use waste_format::{Checkpoint, Storage};
use waste_kernels::TensorData;
use waste_kernels::ggml::{self, GgmlType};

/// Q8_0 blocks of `rows` x `cols` (stored as `stored_rows` rows), typed
/// `ty` (None: no type companion); returns the blocks.
fn write(
    dir: &Path,
    rows: usize,
    cols: usize,
    stored_rows: usize,
    ty: Option<GgmlType>,
) -> Vec<u8> {
    let row_bytes = cols / 32 * 34;
    // Scale 2^-4 (f16 0x2c00) and codes i - 16: finite, varied blocks.
    let blocks: Vec<u8> = (0..stored_rows * cols / 32)
        .flat_map(|b| {
            let mut block = vec![0x00, 0x2c];
            block.extend((0..32).map(|i| ((i + b) as i8 - 16) as u8));
            block
        })
        .collect();
    let mut specs = vec![
        TensorSpec {
            name: format!("m{GGML_SUFFIX}"),
            dtype: "U8".into(),
            shape: vec![stored_rows, row_bytes],
            bytes: blocks.len(),
        },
        TensorSpec {
            name: format!("m{SHAPE_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![2],
            bytes: 16,
        },
    ];
    if ty.is_some() {
        specs.push(TensorSpec {
            name: format!("m{GGML_TYPE_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![1],
            bytes: 8,
        });
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    let path = dir.join("model.safetensors");
    let mut out = SafetensorsWriter::create(&path, specs, &BTreeMap::new()).unwrap();
    out.write(&format!("m{GGML_SUFFIX}"), &blocks).unwrap();
    if let Some(ty) = ty {
        out.write(&format!("m{GGML_TYPE_SUFFIX}"), &ggml_type_bytes(ty))
            .unwrap();
    }
    out.write(&format!("m{SHAPE_SUFFIX}"), &shape_bytes(rows, cols))
        .unwrap();
    out.finish().unwrap();
    blocks
}

#[test]
fn ggml_weights_read_back_packed_with_the_decoders_values() {
    let tmp = tempfile::tempdir().unwrap();
    let blocks = write(tmp.path(), 3, 64, 3, Some(GgmlType::Q8_0));
    let ckpt = Checkpoint::open(tmp.path()).unwrap();
    assert_eq!(ckpt.tensor_names(), ["m.weight"]);
    let info = ckpt.info("m.weight").unwrap();
    assert_eq!(
        (info.shape, info.storage),
        (
            vec![3, 64],
            Storage::Ggml {
                ggml_type: GgmlType::Q8_0
            }
        )
    );
    let t = ckpt.load("m.weight").unwrap();
    assert!(
        matches!(t.data, TensorData::Ggml(GgmlType::Q8_0, _)),
        "stays packed"
    );
    assert_eq!(t.size_bytes(), blocks.len());
    assert_eq!(
        t.into_f32(),
        ggml::dequantize(GgmlType::Q8_0, &blocks).unwrap()
    );
}

#[test]
fn wrong_sizes_types_and_missing_companions_are_errors_naming_the_tensor() {
    for (stored_rows, ty, want) in [
        (2, Some(GgmlType::Q8_0), "m.weight_ggml"),
        // Q4_K rows of 64 are not whole blocks.
        (3, Some(GgmlType::Q4_K), "m.weight_ggml"),
        // activation-only: no decoder
        (3, Some(GgmlType::Q8_K), "Q8_K"),
        (3, Some(GgmlType(4)), "ggml type id 4"),
        (3, None, "m.weight_ggml_type"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), 3, 64, stored_rows, ty);
        let ckpt = Checkpoint::open(tmp.path()).unwrap();
        let err = ckpt.load("m.weight").unwrap_err().to_string();
        assert!(
            err.contains(want) && err.contains("model.safetensors"),
            "{ty:?}: {err}"
        );
    }
}
