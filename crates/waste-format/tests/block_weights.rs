//! Block weights (store format 1.3): `<p>.weight_blocks`, `<p>.weight_shape`
//! and `<p>.weight_format` written with the streaming writer read back
//! through `Checkpoint` as one `<p>.weight`, still packed, whose values are
//! the blocks' dequantized values, for `q4`, `q3` and `q8`; an unknown or
//! native format id, or blocks of the wrong shape, are errors naming the
//! tensor and file.

use std::collections::BTreeMap;

use waste_format::backbone::{
    BLOCKS_SUFFIX, FORMAT_SUFFIX, SHAPE_SUFFIX, SafetensorsWriter, TensorSpec, format_id_bytes,
    shape_bytes,
};
use waste_format::{Checkpoint, Storage};
use waste_kernels::{Format, TensorData, quantize};

/// Writes `m` (rows, cols) in `format` with `stored_rows` rows of blocks and
/// format id `id`; returns the blocks' values.
fn write(
    dir: &std::path::Path,
    format: Format,
    (rows, cols): (usize, usize),
    stored_rows: usize,
    id: &[u8],
) -> Vec<f32> {
    let w: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let q = quantize(format, rows, cols, &w).unwrap();
    let row_bytes = format.row_bytes(cols);
    let specs = vec![
        TensorSpec {
            name: format!("m{BLOCKS_SUFFIX}"),
            dtype: "U8".into(),
            shape: vec![stored_rows, row_bytes],
            bytes: stored_rows * row_bytes,
        },
        TensorSpec {
            name: format!("m{FORMAT_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![1],
            bytes: 8,
        },
        TensorSpec {
            name: format!("m{SHAPE_SUFFIX}"),
            dtype: "I64".into(),
            shape: vec![2],
            bytes: 16,
        },
    ];
    let path = dir.join("model.safetensors");
    let mut out = SafetensorsWriter::create(&path, specs, &BTreeMap::new()).unwrap();
    let mut bytes = q.bytes.clone();
    bytes.resize(stored_rows * row_bytes, 0);
    out.write(&format!("m{BLOCKS_SUFFIX}"), &bytes).unwrap();
    out.write(&format!("m{FORMAT_SUFFIX}"), id).unwrap();
    out.write(&format!("m{SHAPE_SUFFIX}"), &shape_bytes(rows, cols))
        .unwrap();
    out.finish().unwrap();
    q.matrix().dequantize()
}

#[test]
fn block_weights_read_back_packed_as_their_blocks_values() {
    for format in [
        Format::Q4,
        Format::Q3,
        Format::Q3Rtn,
        Format::Q3Tcq,
        Format::Q8,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let want = write(tmp.path(), format, (5, 70), 5, &format_id_bytes(format));
        let ckpt = Checkpoint::open(tmp.path()).unwrap();
        assert_eq!(ckpt.tensor_names(), ["m.weight"], "{format}");
        let info = ckpt.info("m.weight").unwrap();
        let storage = if format == Format::Q8 {
            Storage::Q8
        } else {
            Storage::Blocks { format }
        };
        assert_eq!((info.shape, info.storage), (vec![5, 70], storage));
        let t = ckpt.load("m.weight").unwrap();
        assert_eq!(
            t.size_bytes(),
            5 * format.row_bytes(70),
            "{format} stays packed"
        );
        match (&t.data, format) {
            (TensorData::Q8(_), Format::Q8) => {}
            (TensorData::Packed(f, _), _) => assert_eq!(*f, format),
            (other, _) => panic!("{format} loaded as {other:?}"),
        }
        assert_eq!(t.into_f32(), want, "{format}");
    }
}

#[test]
fn unknown_or_native_ids_and_wrong_shapes_are_errors_naming_the_tensor() {
    let cases = [
        (999i64.to_le_bytes().to_vec(), 5, "m.weight_format"),
        (format_id_bytes(Format::Mxfp4), 5, "m.weight_format"),
        ((-3i64).to_le_bytes().to_vec(), 5, "m.weight_format"),
        (format_id_bytes(Format::Q4), 4, "m.weight_blocks"),
    ];
    for (id, stored_rows, tensor) in cases {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), Format::Q4, (5, 70), stored_rows, &id);
        let ckpt = Checkpoint::open(tmp.path()).unwrap();
        let err = ckpt.load("m.weight").unwrap_err().to_string();
        assert!(
            err.contains(tensor) && err.contains("model.safetensors"),
            "{tensor}: {err}"
        );
    }
}
