//! Malformed checkpoints give errors naming the file or tensor, never a panic.

mod common;

use std::path::Path;

use anyhow::Result;
use common::Raw;
use safetensors::Dtype;
use waste_format::checkpoint::{Checkpoint, Error, Storage};

fn folder_with(tensors: &[Raw]) -> Result<tempfile::TempDir> {
    let tmp = tempfile::tempdir()?;
    common::write_safetensors(&tmp.path().join("model.safetensors"), tensors)?;
    Ok(tmp)
}

fn open_err(path: &Path) -> Error {
    Checkpoint::open(path).expect_err("open should fail")
}

fn fp8_pair(prefix: &str, rows: usize, cols: usize, scale_shape: &[usize]) -> Vec<Raw> {
    let n: usize = scale_shape.iter().product();
    vec![
        Raw::new(
            &format!("{prefix}.weight"),
            Dtype::F8_E4M3,
            &[rows, cols],
            vec![0x38; rows * cols],
        ),
        Raw::f32(
            &format!("{prefix}.weight_scale_inv"),
            scale_shape,
            &vec![0.5; n],
        ),
    ]
}

/// A 4 x 16 int4 weight, group 8 (scale [4, 2]); parts overridable by the caller.
fn int4_parts(prefix: &str) -> Vec<Raw> {
    vec![
        Raw::i32(
            &format!("{prefix}.weight_packed"),
            &[4, 2],
            &[0x7654_3210; 8],
        ),
        Raw::bf16(&format!("{prefix}.weight_scale"), &[4, 2], &[1.0; 8]),
        Raw::i64(&format!("{prefix}.weight_shape"), &[2], &[4, 16]),
    ]
}

fn write_config(dir: &Path, config: &serde_json::Value) -> Result<()> {
    fs_err::write(dir.join("config.json"), config.to_string())?;
    Ok(())
}

fn int4_config(group: usize) -> serde_json::Value {
    serde_json::json!({"quantization_config": {"format": "pack-quantized", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": group, "strategy": "group"}}}}})
}

#[test]
fn truncated_file_names_the_file() -> Result<()> {
    let bytes = fs_err::read(common::fixtures().join("deepseek_v3_tiny/model.safetensors"))?;
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("model.safetensors");
    for len in [0, 5, 8, 100, bytes.len() / 2, bytes.len() - 1] {
        fs_err::write(&path, &bytes[..len])?;
        let err = open_err(tmp.path());
        assert!(matches!(err, Error::Header { .. }), "{len}: {err:?}");
        assert!(err.to_string().contains("model.safetensors"), "{err}");
    }
    Ok(())
}

#[test]
fn garbage_and_lying_headers_are_errors() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("model.safetensors");
    let with_header = |header: &[u8], data_len: usize| {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header);
        b.resize(b.len() + data_len, 0);
        b
    };
    let cases: Vec<Vec<u8>> = vec![
        with_header(b"\xff\xfe not utf8 at all", 0),
        with_header(b"{\"a\": garbage", 0),
        with_header(
            br#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,400]}}"#,
            16,
        ),
        with_header(
            br#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}}"#,
            24,
        ),
        with_header(
            br#"{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}}"#,
            16,
        ),
        with_header(
            br#"{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,16]}}"#,
            16,
        ),
        with_header(
            br#"{"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}}"#,
            2,
        ),
        u64::MAX.to_le_bytes().to_vec(),
        [&1_000_000u64.to_le_bytes()[..], b"{}"].concat(),
    ];
    for (i, bytes) in cases.iter().enumerate() {
        fs_err::write(&path, bytes)?;
        let err = open_err(tmp.path());
        assert!(matches!(err, Error::Header { .. }), "case {i}: {err:?}");
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
    }
    Ok(())
}

#[test]
fn index_errors_name_the_shard_and_tensor() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    common::write_safetensors(&dir.join("a.safetensors"), &[Raw::f32("x", &[1], &[1.0])])?;
    let index = |map: serde_json::Value| {
        fs_err::write(
            dir.join("model.safetensors.index.json"),
            serde_json::json!({"weight_map": map}).to_string(),
        )
    };

    index(serde_json::json!({"x": "a.safetensors", "y": "b.safetensors"}))?;
    let err = open_err(dir);
    assert!(matches!(err, Error::MissingShard { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("b.safetensors") && msg.contains("`y`"),
        "{msg}"
    );

    index(serde_json::json!({"x": "a.safetensors", "z": "a.safetensors"}))?;
    let msg = open_err(dir).to_string();
    assert!(
        msg.contains("a.safetensors") && msg.contains("`z`"),
        "{msg}"
    );

    for bad in [
        serde_json::json!({"x": "../a.safetensors"}),
        serde_json::json!({"x": 3}),
    ] {
        index(bad)?;
        let err = open_err(dir);
        assert!(matches!(err, Error::Index { .. }), "{err:?}");
    }
    fs_err::write(dir.join("model.safetensors.index.json"), "{not json")?;
    let msg = open_err(dir).to_string();
    assert!(msg.contains("model.safetensors.index.json"), "{msg}");
    fs_err::write(dir.join("model.safetensors.index.json"), "{}")?;
    assert!(open_err(dir).to_string().contains("weight_map"));

    index(serde_json::json!({"x": "a.safetensors"}))?;
    assert_eq!(Checkpoint::open(dir)?.tensor_names(), ["x"]);
    Ok(())
}

#[test]
fn folder_errors() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let err = open_err(&dir.join("missing"));
    assert!(
        matches!(err, Error::Io { .. }) && err.to_string().contains("missing"),
        "{err}"
    );
    let err = open_err(dir);
    assert!(matches!(err, Error::NotACheckpoint { .. }), "{err:?}");

    common::write_safetensors(&dir.join("a.safetensors"), &[Raw::f32("x", &[1], &[1.0])])?;
    common::write_safetensors(&dir.join("b.safetensors"), &[Raw::f32("x", &[1], &[2.0])])?;
    let msg = open_err(dir).to_string();
    assert!(
        msg.contains("`x`") && msg.contains("b.safetensors"),
        "{msg}"
    );
    fs_err::remove_file(dir.join("b.safetensors"))?;

    fs_err::write(dir.join("config.json"), "{ nope")?;
    let err = open_err(dir);
    assert!(matches!(err, Error::BadConfig { .. }) && err.to_string().contains("config.json"));
    write_config(
        dir,
        &serde_json::json!({"quantization_config": {"weight_block_size": [128, 0]}}),
    )?;
    assert!(matches!(open_err(dir), Error::BadConfig { .. }));
    write_config(dir, &serde_json::json!([1, 2]))?;
    assert!(matches!(open_err(dir), Error::BadConfig { .. }));
    Ok(())
}

#[test]
fn fp8_errors_name_the_tensor() -> Result<()> {
    let mut tensors = fp8_pair("ok", 3, 130, &[1, 2]);
    tensors.push(Raw::new(
        "lonely.weight",
        Dtype::F8_E4M3,
        &[2, 2],
        vec![0x38; 4],
    ));
    tensors.extend(fp8_pair("wrong", 200, 10, &[1, 1]));
    tensors.push(Raw::new(
        "cube.weight",
        Dtype::F8_E4M3,
        &[2, 2, 2],
        vec![0x38; 8],
    ));
    tensors.push(Raw::f32("cube.weight_scale_inv", &[1, 1], &[1.0]));
    tensors.push(Raw::new(
        "intscale.weight",
        Dtype::F8_E4M3,
        &[2, 2],
        vec![0x38; 4],
    ));
    tensors.push(Raw::i32("intscale.weight_scale_inv", &[1, 1], &[1]));
    let tmp = folder_with(&tensors)?;
    let ckpt = Checkpoint::open(tmp.path())?;
    assert_eq!(common::values(ckpt.load("ok.weight")?), vec![0.5; 390]);

    let err = ckpt.load("lonely.weight").unwrap_err();
    assert!(matches!(err, Error::MissingCompanion { .. }), "{err:?}");
    assert!(err.to_string().contains("lonely.weight_scale_inv"), "{err}");
    assert!(ckpt.info("lonely.weight").is_err());

    let err = ckpt.load("wrong.weight").unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err:?}");
    assert!(
        err.to_string().contains("wrong.weight_scale_inv") && err.to_string().contains("[2, 1]")
    );

    let err = ckpt.load("cube.weight").unwrap_err();
    assert!(matches!(err, Error::BadTensor { .. }) && err.to_string().contains("cube.weight"));
    let err = ckpt.load("intscale.weight").unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }) && err.to_string().contains("intscale"));
    Ok(())
}

#[test]
fn fp8_block_size_comes_from_the_config() -> Result<()> {
    let tmp = folder_with(&fp8_pair("w", 3, 5, &[2, 3]))?;
    write_config(
        tmp.path(),
        &serde_json::json!({"quantization_config": {"weight_block_size": [2, 2]}}),
    )?;
    let ckpt = Checkpoint::open(tmp.path())?;
    assert_eq!(
        ckpt.info("w.weight")?.storage,
        Storage::Fp8Block { block: [2, 2] }
    );
    assert_eq!(common::values(ckpt.load("w.weight")?), vec![0.5; 15]);
    Ok(())
}

#[test]
fn int4_errors_name_the_tensor() -> Result<()> {
    let rename = |parts: Vec<Raw>, f: &dyn Fn(&mut Raw)| {
        parts
            .into_iter()
            .map(|mut r| {
                f(&mut r);
                r
            })
            .collect::<Vec<_>>()
    };
    let mut tensors = int4_parts("ok");
    // weight_packed of the wrong size for weight_shape [4, 16].
    tensors.extend(rename(int4_parts("short"), &|r| {
        if r.name.ends_with("packed") {
            *r = Raw::i32("short.weight_packed", &[4, 1], &[0; 4]);
        }
    }));
    // weight_shape disagreeing with the packed tensor.
    tensors.extend(rename(int4_parts("liar"), &|r| {
        if r.name.ends_with("shape") {
            *r = Raw::i64("liar.weight_shape", &[2], &[4, 100]);
        }
    }));
    tensors.extend(rename(int4_parts("negative"), &|r| {
        if r.name.ends_with("shape") {
            *r = Raw::i64("negative.weight_shape", &[2], &[-4, 16]);
        }
    }));
    tensors.extend(rename(int4_parts("threed"), &|r| {
        if r.name.ends_with("shape") {
            *r = Raw::i64("threed.weight_shape", &[3], &[4, 16, 1]);
        }
    }));
    tensors.extend(rename(int4_parts("badscale"), &|r| {
        if r.name.ends_with("scale") {
            *r = Raw::bf16("badscale.weight_scale", &[4, 3], &[1.0; 12]);
        }
    }));
    tensors.extend(
        int4_parts("noshape")
            .into_iter()
            .filter(|r| !r.name.ends_with("shape")),
    );
    tensors.extend(int4_parts("asym"));
    tensors.push(Raw::i32("asym.weight_zero_point", &[1, 2], &[0; 2]));
    tensors.push(Raw::new(
        "mx.weight_packed",
        Dtype::U8,
        &[4, 8],
        vec![0; 32],
    ));
    tensors.push(Raw::new(
        "mx.weight_scale",
        Dtype::U8,
        &[4, 1],
        vec![127; 4],
    ));
    let tmp = folder_with(&tensors)?;
    write_config(tmp.path(), &int4_config(8))?;
    let ckpt = Checkpoint::open(tmp.path())?;

    assert_eq!(
        ckpt.info("ok.weight")?.storage,
        Storage::Int4PackQuantized { group_size: 8 }
    );
    let ok = common::values(ckpt.load("ok.weight")?);
    assert_eq!(&ok[..8], &[-8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0]);

    let expect = |name: &str, check: fn(&Error) -> bool, needle: &str| {
        let err = ckpt.load(name).unwrap_err();
        assert!(check(&err), "{name}: {err:?}");
        assert!(err.to_string().contains(needle), "{name}: {err}");
    };
    expect(
        "short.weight",
        |e| matches!(e, Error::ShapeMismatch { .. }),
        "short.weight_packed",
    );
    expect(
        "liar.weight",
        |e| matches!(e, Error::ShapeMismatch { .. }),
        "liar.weight_packed",
    );
    expect(
        "negative.weight",
        |e| matches!(e, Error::BadTensor { .. }),
        "negative.weight_shape",
    );
    expect(
        "threed.weight",
        |e| matches!(e, Error::BadTensor { .. }),
        "threed.weight_shape",
    );
    expect(
        "badscale.weight",
        |e| matches!(e, Error::ShapeMismatch { .. }),
        "badscale.weight_scale",
    );
    expect(
        "noshape.weight",
        |e| matches!(e, Error::MissingCompanion { .. }),
        "noshape.weight_shape",
    );
    expect(
        "asym.weight",
        |e| matches!(e, Error::Unsupported { .. }),
        "weight_zero_point",
    );
    expect(
        "mx.weight",
        |e| matches!(e, Error::Unsupported { .. }),
        "U8 weight_packed",
    );

    // An 8-bit scheme is not read as int4.
    write_config(
        tmp.path(),
        &serde_json::json!({"quantization_config": {"config_groups": {
        "g": {"weights": {"num_bits": 8, "type": "int", "group_size": 8}}}}}),
    )?;
    let ckpt = Checkpoint::open(tmp.path())?;
    let err = ckpt.load("ok.weight").unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { .. }) && err.to_string().contains("8 bits"),
        "{err}"
    );
    Ok(())
}

#[test]
fn plain_dtypes_and_unsupported_ones() -> Result<()> {
    let f16: Vec<u8> = [0.5f32, -3.0, 65504.0]
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
        .collect();
    let tmp = folder_with(&[
        Raw::f32("a", &[2], &[1.5, -2.25]),
        Raw::bf16("b", &[1, 2], &[3.0, 0.125]),
        Raw::new("c", Dtype::F16, &[3], f16),
        Raw::i64("ids", &[2], &[1, 2]),
        Raw::new("d", Dtype::F64, &[1], 1.0f64.to_le_bytes().to_vec()),
    ])?;
    let ckpt = Checkpoint::open(tmp.path())?;
    assert_eq!(ckpt.tensor_names(), ["a", "b", "c", "d", "ids"]);
    let a = ckpt.load("a")?;
    assert!(matches!(&a.data, waste_kernels::TensorData::F32(v) if v == &[1.5, -2.25]));
    let b = ckpt.load("b")?;
    assert_eq!(b.shape, [1, 2]);
    assert!(matches!(&b.data, waste_kernels::TensorData::Bf16(_)));
    assert_eq!(common::values(b), [3.0, 0.125]);
    assert_eq!(ckpt.info("c")?.storage, Storage::F16);
    assert_eq!(common::values(ckpt.load("c")?), [0.5, -3.0, 65504.0]);

    assert_eq!(
        ckpt.info("ids")?.storage,
        Storage::Unsupported {
            dtype: "I64".into()
        }
    );
    for name in ["ids", "d"] {
        let err = ckpt.load(name).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains(&format!("`{name}`")), "{err}");
    }
    let err = ckpt.load("absent").unwrap_err();
    assert!(matches!(err, Error::MissingTensor { .. }) && err.to_string().contains("absent"));
    Ok(())
}

/// Every truncation and many single-byte corruptions of a small mixed file:
/// open, info and load may fail but must not panic.
#[test]
fn corruption_sweep_never_panics() -> Result<()> {
    let mut tensors = fp8_pair("f", 3, 5, &[1, 1]);
    tensors.extend(int4_parts("q"));
    tensors.push(Raw::bf16("n", &[4], &[1.0; 4]));
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("model.safetensors");
    common::write_safetensors(&path, &tensors)?;
    let bytes = fs_err::read(&path)?;
    let exercise = |bytes: &[u8]| -> Result<()> {
        fs_err::write(&path, bytes)?;
        if let Ok(ckpt) = Checkpoint::open(tmp.path()) {
            for name in ckpt.tensor_names() {
                let _ = ckpt.info(name);
                let _ = ckpt.load(name);
            }
        }
        Ok(())
    };
    for len in 0..bytes.len() {
        exercise(&bytes[..len])?;
    }
    let header_end = 8 + usize::try_from(u64::from_le_bytes(bytes[..8].try_into()?))?;
    for i in 0..header_end {
        for v in [b'9', b'"', 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            exercise(&b)?;
        }
    }
    Ok(())
}
