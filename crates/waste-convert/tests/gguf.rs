//! The GGUF reader through its public API: the container parser on the
//! llama.cpp-made fixtures and on hand-built files (every metadata type,
//! custom alignment, v2, unknown type ids), dequantization against gguf-py
//! and against real SmolLM2 Q4_1 weights, HF names and the synthesised
//! config, and a malformed-input sweep (truncations and flipped bytes must
//! give errors naming the file or tensor, never a panic).

mod common;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use half::bf16;
use safetensors::SafeTensors;
use waste_convert::gguf::{GgmlType, GgufHeader, MetaValue};
use waste_convert::{GgufCheckpoint, GgufFile};
use waste_kernels::ggml::dequantize;

fn gguf_fixture(name: &str) -> PathBuf {
    common::fixtures().join("gguf").join(name)
}

/// Bytes of `n` pseudo-random blocks (an LCG) with the f16 scale at each
/// `(offset, v)` set to `v * (k + 1)` in block k (MXFP4: exponent byte
/// 100 + 7k), exactly as the gguf-py reference sums below were made.
fn lcg_blocks(ty: GgmlType, seed: u64, block: usize, scales: &[(usize, f64)]) -> Vec<u8> {
    let mut x = seed;
    let mut b: Vec<u8> = (0..block * 4)
        .map(|_| {
            x = (x * 1_103_515_245 + 12_345) % (1 << 31);
            (x >> 16) as u8
        })
        .collect();
    for k in 0..4 {
        for &(off, v) in scales {
            let h = half::f16::from_f64(v * (k + 1) as f64)
                .to_bits()
                .to_le_bytes();
            b[k * block + off..][..2].copy_from_slice(&h);
        }
        if ty == GgmlType::MXFP4 {
            b[k * block] = 100 + 7 * k as u8;
        }
    }
    b
}

/// (type, LCG seed, block bytes, f16 scale fields, then gguf 0.19's
/// sequential f64 sums of its f32 output: sum y_i and sum (i+1) y_i).
type GgufPyCase = (GgmlType, u64, usize, &'static [(usize, f64)], f64, f64);
#[rustfmt::skip]
const GGUF_PY: [GgufPyCase; 7] = [
    (GgmlType::Q4_0, 1, 18, &[(0, 0.0123)], 0.848602294921875, 105.47265625),
    (GgmlType::Q4_1, 2, 20, &[(0, 0.021), (2, -0.1)], 14.7412109375, 1083.59765625),
    (GgmlType::Q8_0, 3, 34, &[(0, 0.0031)], 6.426788330078125, 184.59327125549316),
    (GgmlType::Q4_K, 4, 144, &[(0, 0.0017), (2, 0.0009)], 790.2568130493164, 510200.1616783142),
    (GgmlType::Q6_K, 5, 210, &[(208, 0.00051)], -114.61455059051514, -106432.25720787048),
    (GgmlType::Q3_K, 6, 110, &[(108, -0.0023)], 12.446720123291016, 8081.576477050781),
    (GgmlType::MXFP4, 7, 17, &[], 0.10980800911784172, 13.189008880406618),
];

#[test]
fn dequantization_matches_gguf_py_bit_for_bit() -> Result<()> {
    for (ty, seed, block, scales, want_sum, want_weighted) in GGUF_PY {
        let bytes = lcg_blocks(ty, seed, block, scales);
        let y = dequantize(ty, &bytes).context("decodable")?;
        let (mut sum, mut weighted) = (0f64, 0f64);
        for (i, &v) in y.iter().enumerate() {
            sum += f64::from(v);
            weighted += (i + 1) as f64 * f64::from(v);
        }
        ensure!(
            sum == want_sum && weighted == want_weighted,
            "{ty}: {sum} {weighted} != gguf-py {want_sum} {want_weighted}"
        );
    }
    Ok(())
}

#[test]
fn q4_1_real_smollm2_weights_round_to_the_bf16_fixture() -> Result<()> {
    let dir = common::fixtures().join("real_weights");
    let raw = fs_err::read(dir.join("smollm2_135m_layer14_ffn_q4_1_raw.safetensors"))?;
    let bf = fs_err::read(dir.join("smollm2_135m_ffn_attn_bf16.safetensors"))?;
    let (raw, bf) = (
        SafeTensors::deserialize(&raw)?,
        SafeTensors::deserialize(&bf)?,
    );
    for proj in ["gate_proj", "up_proj", "down_proj"] {
        let q = raw.tensor(&format!("model.layers.14.mlp.{proj}.q4_1_raw"))?;
        let want = bf.tensor(&format!("model.layers.14.mlp.{proj}.weight"))?;
        let got = dequantize(GgmlType::Q4_1, q.data()).context("whole Q4_1 blocks")?;
        ensure!(got.len() * 2 == want.data().len(), "{proj}: size");
        for (i, (g, w)) in got.iter().zip(want.data().chunks_exact(2)).enumerate() {
            let w = bf16::from_bits(u16::from_le_bytes([w[0], w[1]]));
            ensure!(
                bf16::from_f32(*g) == w,
                "{proj} element {i}: {g} rounds to {}, fixture {w}",
                bf16::from_f32(*g)
            );
        }
    }
    Ok(())
}

#[test]
fn fixture_headers_parse() -> Result<()> {
    for (name, tensors, kvs, arch) in [
        ("mixtral_tiny.f32.gguf", 43, 25, "llama"),
        ("qwen3_moe_tiny.f32.gguf", 51, 27, "qwen3moe"),
        ("qwen3_moe_tiny.q8_0.gguf", 51, 27, "qwen3moe"),
    ] {
        let f = GgufFile::open(gguf_fixture(name))?;
        let h = f.header();
        ensure!(
            h.version == 3 && h.alignment == 32 && h.data_start % 32 == 0,
            "{name}: {h:?}"
        );
        ensure!(
            h.tensors.len() == tensors && h.metadata.len() == kvs,
            "{name}: counts"
        );
        ensure!(f.get("general.architecture").and_then(MetaValue::as_str) == Some(arch));
        ensure!(
            f.get("tokenizer.ggml.tokens")
                .and_then(MetaValue::as_array)
                .map(<[_]>::len)
                == Some(1024)
        );
        let exps = f.tensor("blk.0.ffn_gate_exps.weight").context("experts")?;
        ensure!(exps.dims.len() == 3 && exps.shape()[0] == exps.dims[2] as usize);
    }
    Ok(())
}

#[test]
fn synthesised_configs_agree_with_the_hf_fixtures() -> Result<()> {
    for (gguf, hf) in [
        ("mixtral_tiny.f32.gguf", "mixtral_tiny"),
        ("qwen3_moe_tiny.q8_0.gguf", "qwen3_moe_tiny"),
    ] {
        let ck = GgufCheckpoint::open(gguf_fixture(gguf))?;
        let want: serde_json::Value = serde_json::from_str(&fs_err::read_to_string(
            common::fixtures().join(hf).join("config.json"),
        )?)?;
        let got = ck.config_json();
        for key in [
            "model_type",
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "norm_topk_prob",
            "tie_word_embeddings",
            "bos_token_id",
            "eos_token_id",
            "max_position_embeddings",
        ] {
            ensure!(
                got.get(key) == want.get(key),
                "{gguf} {key}: {:?} != {:?}",
                got.get(key),
                want.get(key)
            );
        }
        let experts = want.get("num_local_experts");
        ensure!(
            got.get("num_local_experts").or(got.get("num_experts")) == experts,
            "{gguf} experts"
        );
        let eps = got["rms_norm_eps"].as_f64().context("eps")? as f32;
        ensure!(
            eps == want["rms_norm_eps"].as_f64().context("eps")? as f32,
            "{gguf} eps"
        );
        ensure!(
            got["rope_theta"] == want["rope_parameters"]["rope_theta"],
            "{gguf} theta"
        );
    }
    Ok(())
}

#[test]
fn q8_0_tensors_dequantize_close_to_the_f32_file() -> Result<()> {
    let f32s = GgufCheckpoint::open(gguf_fixture("qwen3_moe_tiny.f32.gguf"))?;
    let q8 = GgufCheckpoint::open(gguf_fixture("qwen3_moe_tiny.q8_0.gguf"))?;
    ensure!(f32s.tensor_names() == q8.tensor_names(), "same HF names");
    let mut worst = 0f32;
    for name in q8.tensor_names() {
        let (a, b) = (f32s.load(name)?, q8.load(name)?);
        ensure!(a.shape == b.shape, "{name}: shape");
        let quantized = q8.info(name).context("info")?.1.ggml_type == GgmlType::Q8_0;
        let d = a
            .into_f32()
            .iter()
            .zip(b.into_f32())
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        ensure!(
            quantized || d == 0.0,
            "{name}: F32 in both files but differs by {d}"
        );
        worst = worst.max(d);
    }
    eprintln!("qwen3_moe_tiny q8_0 vs f32: max abs diff {worst:.2e}");
    // The fixture README measured 0.00287 against the HF weights.
    ensure!(worst > 0.0 && worst < 0.0029, "max abs diff {worst}");
    Ok(())
}

/// A hand-built GGUF: KVs as (key, type id, payload) and tensors as
/// (name, dims, type id, data); `alignment` pads the tensor data.
#[derive(Default)]
struct Builder {
    version: u32,
    kvs: Vec<(String, u32, Vec<u8>)>,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    alignment: u64,
}

fn gguf_str(s: &str) -> Vec<u8> {
    [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat()
}

impl Builder {
    fn new(version: u32, alignment: u64) -> Self {
        Self {
            version,
            alignment,
            ..Self::default()
        }
    }

    fn kv(mut self, key: &str, ty: u32, payload: Vec<u8>) -> Self {
        self.kvs.push((key.into(), ty, payload));
        self
    }

    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) -> Self {
        self.tensors.push((name.into(), dims.to_vec(), ty, data));
        self
    }

    fn build(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kvs.len() as u64).to_le_bytes());
        for (key, ty, payload) in &self.kvs {
            out.extend(gguf_str(key));
            out.extend(ty.to_le_bytes());
            out.extend(payload);
        }
        let mut offset = 0u64;
        let mut data = Vec::new();
        for (name, dims, ty, bytes) in &self.tensors {
            out.extend(gguf_str(name));
            out.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(ty.to_le_bytes());
            out.extend(offset.to_le_bytes());
            data.extend(bytes);
            data.resize(data.len().next_multiple_of(self.alignment as usize), 0);
            offset = data.len() as u64;
        }
        out.resize(out.len().next_multiple_of(self.alignment as usize), 0);
        out.extend(data);
        out
    }
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    fs_err::write(&path, bytes)?;
    Ok(path)
}

#[test]
fn hand_built_v2_file_with_every_value_type_custom_alignment_and_unknown_types() -> Result<()> {
    let floats: Vec<u8> = [1.0f32, -2.5, 3.25, 0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let strings = [
        &8u32.to_le_bytes()[..],
        &2u64.to_le_bytes(),
        &gguf_str("a b"),
        &gguf_str("ü"),
    ]
    .concat();
    let bytes = Builder::new(2, 64)
        .kv("general.alignment", 4, 64u32.to_le_bytes().to_vec())
        .kv("u8", 0, vec![200])
        .kv("i16", 3, (-7i16).to_le_bytes().to_vec())
        .kv("f64", 12, 0.125f64.to_le_bytes().to_vec())
        .kv("flag", 7, vec![1])
        .kv("list", 9, strings)
        .kv("i64", 11, (-1i64).to_le_bytes().to_vec())
        .tensor("plain", &[2, 2], 0, floats)
        .tensor("from_the_future", &[32], 57, vec![0; 20])
        .tensor("q5_0", &[32], 6, vec![0; 22])
        .tensor("q8_k", &[256], 15, vec![0; 292])
        .build();
    let dir = tempfile::tempdir()?;
    let path = write_tmp(dir.path(), "hand.gguf", &bytes)?;
    let f = GgufFile::open(&path)?;
    ensure!(
        f.header().version == 2 && f.header().alignment == 64 && f.header().data_start % 64 == 0
    );
    ensure!(f.get("u8") == Some(&MetaValue::U8(200)) && f.get("i16") == Some(&MetaValue::I16(-7)));
    ensure!(
        f.get("f64").and_then(MetaValue::as_f64) == Some(0.125)
            && f.get("flag") == Some(&MetaValue::Bool(true))
    );
    ensure!(
        f.get("list")
            .and_then(MetaValue::as_array)
            .map(|a| a[1].as_str() == Some("ü"))
            == Some(true)
    );
    ensure!(f.get("i64").and_then(MetaValue::as_u64).is_none());
    ensure!(f.dequantize("plain")? == [1.0, -2.5, 3.25, 0.5]);
    ensure!(f.dequantize("q5_0")? == [0.0; 32]);
    // Q8_K is known (its size is checked) but only activations use it
    for (tensor, what) in [("from_the_future", "ggml type id 57"), ("q8_k", "Q8_K")] {
        let msg = f.dequantize(tensor).unwrap_err().to_string();
        ensure!(
            msg.contains(tensor) && msg.contains(what) && msg.contains("hand.gguf"),
            "{msg}"
        );
    }
    Ok(())
}

#[test]
fn unsupported_architectures_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    for arch in ["qwen3", "qwen2", "gemma3"] {
        let bytes = Builder::new(3, 32)
            .kv("general.architecture", 8, gguf_str(arch))
            .build();
        let path = write_tmp(dir.path(), &format!("{arch}.gguf"), &bytes)?;
        let msg = GgufCheckpoint::open(&path).unwrap_err().to_string();
        ensure!(
            msg.contains(arch) && msg.contains("not supported") && msg.contains(".gguf"),
            "{msg}"
        );
    }
    // Per-layer head counts that differ are refused by key.
    let kv = [
        &5u32.to_le_bytes()[..],
        &2u64.to_le_bytes(),
        &2i32.to_le_bytes(),
        &4i32.to_le_bytes(),
    ]
    .concat();
    let bytes = Builder::new(3, 32)
        .kv("general.architecture", 8, gguf_str("llama"))
        .kv("llama.attention.head_count", 4, 4u32.to_le_bytes().to_vec())
        .kv("llama.attention.head_count_kv", 9, kv)
        .build();
    let msg = GgufCheckpoint::open(write_tmp(dir.path(), "kv.gguf", &bytes)?)
        .unwrap_err()
        .to_string();
    ensure!(
        msg.contains("head_count_kv") && msg.contains("differ"),
        "{msg}"
    );
    Ok(())
}

/// Parsing must fail (not panic) and name the file; whatever parses must
/// load or fail per tensor, naming it.
fn check_no_panic(path: &Path, bytes: &[u8], must_fail: bool) -> Result<()> {
    match GgufHeader::parse(path, bytes) {
        Err(e) => ensure!(
            e.to_string().contains("fuzz.gguf"),
            "error does not name the file: {e}"
        ),
        Ok(h) => ensure!(
            !must_fail,
            "{} bytes parsed as {} tensors",
            bytes.len(),
            h.tensors.len()
        ),
    }
    Ok(())
}

#[test]
fn truncated_and_corrupted_files_are_errors_not_panics() -> Result<()> {
    let full = fs_err::read(gguf_fixture("qwen3_moe_tiny.q8_0.gguf"))?;
    let path = Path::new("fuzz.gguf");
    let header = GgufHeader::parse(path, &full)?;
    let header_end = header.data_start as usize;
    let data_end = header
        .tensors
        .iter()
        .map(|t| t.offset + t.size.unwrap_or(0))
        .max()
        .unwrap_or(0);
    let data_end = header_end + data_end as usize;
    // Every 7th cut inside the header, then cuts through the data (a cut in
    // the padding after the last tensor leaves a valid file).
    let cuts = (0..header_end)
        .step_by(7)
        .chain((header_end..full.len()).step_by(4099));
    for n in cuts {
        check_no_panic(path, &full[..n], n < data_end)?;
    }
    // Flip bytes of the fixed header, the first KVs and the tensor table.
    let table = header_end.saturating_sub(51 * 120);
    let spots = (0..600).chain((table..header_end).step_by(3));
    let mut bytes = full.clone();
    for i in spots {
        for flip in [0xFF, 0x80, 0x01] {
            bytes[i] ^= flip;
            check_no_panic(path, &bytes, i < 4)?;
            bytes[i] ^= flip;
        }
    }
    // Through a real file: corrupt the tensor types and dims, then load
    // every HF tensor of whatever still opens.
    let dir = tempfile::tempdir()?;
    let mut opened = 0;
    for (i, i_flip) in (table..header_end)
        .step_by(37)
        .zip([0x01u8, 0x20, 0xFF].iter().cycle())
    {
        bytes[i] ^= i_flip;
        let p = write_tmp(dir.path(), "fuzz.gguf", &bytes)?;
        bytes[i] ^= i_flip;
        let Ok(ck) = GgufCheckpoint::open(&p) else {
            continue;
        };
        opened += 1;
        for name in ck.tensor_names() {
            if let Err(e) = ck.load(name) {
                let msg = e.to_string();
                ensure!(msg.contains("fuzz.gguf") || msg.contains(name), "{msg}");
            }
        }
    }
    ensure!(
        opened > 0,
        "no corrupted variant opened; the load sweep tested nothing"
    );
    Ok(())
}

/// Part `no` (0-based) of a hand-built split into `count` announcing
/// `total` tensors, with one f32 tensor `t{no}` of value `no`; the first part
/// also carries the model metadata, the second its own 64-byte alignment
/// (each part is a complete container).
fn split_part(no: u16, count: u16, total: i32) -> Builder {
    let alignment = if no == 1 { 64 } else { 32 };
    let mut b = Builder::new(3, alignment);
    if no == 0 {
        b = b.kv("general.architecture", 8, gguf_str("llama"));
    }
    if no == 1 {
        b = b.kv("general.alignment", 4, 64u32.to_le_bytes().to_vec());
    }
    let value = f32::from(no).to_le_bytes().repeat(3);
    b.kv("split.no", 2, no.to_le_bytes().to_vec())
        .kv("split.count", 2, count.to_le_bytes().to_vec())
        .kv("split.tensors.count", 5, total.to_le_bytes().to_vec())
        .tensor(&format!("t{no}"), &[3], 0, value)
}

fn split_name(no: u16, count: u16) -> String {
    format!("model-{:05}-of-{count:05}.gguf", no + 1)
}

/// Writes parts `0..count` of a 3-tensor split, `edit` changing any of them.
fn write_split(dir: &Path, count: u16, edit: impl Fn(u16, Builder) -> Builder) -> Result<()> {
    for no in 0..count {
        let b = edit(no, split_part(no, count, i32::from(count)));
        write_tmp(dir, &split_name(no, count), &b.build())?;
    }
    Ok(())
}

#[test]
fn split_parts_are_merged_from_whichever_part_is_given() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_split(dir.path(), 3, |_, b| b)?;
    for given in 0..3 {
        let f = GgufFile::open(dir.path().join(split_name(given, 3)))?;
        ensure!(
            f.path() == dir.path().join(split_name(0, 3)),
            "path() is the first part"
        );
        let parts: Vec<_> = f.part_paths().map(Path::to_path_buf).collect();
        ensure!(
            parts
                == (0..3)
                    .map(|n| dir.path().join(split_name(n, 3)))
                    .collect::<Vec<_>>()
        );
        ensure!(f.get("general.architecture").and_then(MetaValue::as_str) == Some("llama"));
        ensure!(f.tensors().len() == 3, "{} tensors", f.tensors().len());
        for no in 0..3u16 {
            let name = format!("t{no}");
            ensure!(
                f.dequantize(&name)? == [f32::from(no); 3],
                "{name} from part {no}"
            );
            ensure!(f.tensor_path(&name) == Some(parts[no as usize].as_path()));
        }
    }
    Ok(())
}

#[test]
fn split_errors_name_the_part_and_key() -> Result<()> {
    let err = |dir: &Path, given: u16, count: u16| -> String {
        match GgufFile::open(dir.join(split_name(given, count))) {
            Ok(_) => "opened".into(),
            Err(e) => e.to_string(),
        }
    };
    // A missing middle part, from the first and from the last.
    let dir = tempfile::tempdir()?;
    write_split(dir.path(), 3, |_, b| b)?;
    fs_err::remove_file(dir.path().join(split_name(1, 3)))?;
    for given in [0, 2] {
        let e = err(dir.path(), given, 3);
        ensure!(
            e.contains("model-00002-of-00003.gguf") && e.contains("missing"),
            "{e}"
        );
    }
    // A part that says it belongs to a split into 4.
    let dir = tempfile::tempdir()?;
    write_split(
        dir.path(),
        3,
        |no, b| {
            if no == 2 { split_part(2, 4, 3) } else { b }
        },
    )?;
    let e = err(dir.path(), 0, 3);
    ensure!(
        e.contains("model-00003-of-00003.gguf") && e.contains("split.count"),
        "{e}"
    );
    // A part numbered as another.
    let dir = tempfile::tempdir()?;
    write_split(
        dir.path(),
        2,
        |no, b| {
            if no == 1 { split_part(0, 2, 2) } else { b }
        },
    )?;
    let e = err(dir.path(), 0, 2);
    ensure!(
        e.contains("model-00002-of-00002.gguf") && e.contains("split.no 1"),
        "{e}"
    );
    // A tensor in two parts.
    let dir = tempfile::tempdir()?;
    write_split(dir.path(), 2, |no, b| {
        if no == 1 {
            b.tensor("t0", &[1], 0, vec![0; 4])
        } else {
            b
        }
    })?;
    let e = err(dir.path(), 0, 2);
    ensure!(
        e.contains("`t0`") && e.contains("model-00001-of-00002.gguf"),
        "{e}"
    );
    // Fewer tensors than announced.
    let dir = tempfile::tempdir()?;
    write_split(dir.path(), 2, |no, _| split_part(no, 2, 5))?;
    let e = err(dir.path(), 1, 2);
    ensure!(
        e.contains("split.tensors.count") && e.contains("5 tensors announced, 2 found"),
        "{e}"
    );
    // split.no out of range, and a part not named as llama.cpp names them.
    let dir = tempfile::tempdir()?;
    let path = write_tmp(
        dir.path(),
        "model-00001-of-00002.gguf",
        &split_part(2, 2, 2).build(),
    )?;
    let e = GgufFile::open(&path).map(|_| ()).unwrap_err().to_string();
    ensure!(
        e.contains("split.no") && e.contains("part 2 (0-based) of a split into 2"),
        "{e}"
    );
    let path = write_tmp(dir.path(), "renamed.gguf", &split_part(0, 2, 2).build())?;
    let e = GgufFile::open(&path).map(|_| ()).unwrap_err().to_string();
    ensure!(
        e.contains("renamed.gguf") && e.contains("-00001-of-00002.gguf"),
        "{e}"
    );
    Ok(())
}

/// A one-layer `deepseek2` header (MLA: 4 heads, nope 16, rope 8, v 16,
/// kv_lora 32) with a token embedding; tests add the rest.
fn deepseek2_base() -> Builder {
    let u32_kv = |b: Builder, key: &str, v: u32| {
        b.kv(&format!("deepseek2.{key}"), 4, v.to_le_bytes().to_vec())
    };
    let mut b = Builder::new(3, 32).kv("general.architecture", 8, gguf_str("deepseek2"));
    for (key, v) in [
        ("block_count", 1),
        ("embedding_length", 8),
        ("feed_forward_length", 16),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 1),
        ("attention.kv_lora_rank", 32),
        ("attention.key_length", 40),
        ("attention.value_length", 32),
        ("attention.key_length_mla", 24),
        ("attention.value_length_mla", 16),
        ("rope.dimension_count", 8),
    ] {
        b = u32_kv(b, key, v);
    }
    b.kv(
        "deepseek2.attention.layer_norm_rms_epsilon",
        6,
        1e-6f32.to_le_bytes().to_vec(),
    )
    .tensor("token_embd.weight", &[8, 4], 0, vec![0; 128])
}

fn f32_zeros(dims: &[u64]) -> Vec<u8> {
    vec![0; 4 * dims.iter().product::<u64>() as usize]
}

#[test]
fn deepseek2_config_and_split_kv_b_errors_name_key_and_tensor() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let open = |name: &str, b: Builder| -> Result<std::result::Result<GgufCheckpoint, String>> {
        let path = write_tmp(dir.path(), name, &b.build())?;
        Ok(GgufCheckpoint::open(&path).map_err(|e| e.to_string()))
    };
    // The MLA sizes come from the *_mla keys, not the latent key_length.
    let ck = open("ok.gguf", deepseek2_base())?.map_err(anyhow::Error::msg)?;
    let c = ck.config_json();
    ensure!(
        (
            c["qk_nope_head_dim"].as_u64(),
            c["v_head_dim"].as_u64(),
            c["num_key_value_heads"].as_u64()
        ) == (Some(16), Some(16), Some(4)),
        "{c}"
    );
    ensure!(
        c["q_lora_rank"].is_null() && c["model_type"] == "deepseek_v3",
        "{c}"
    );
    // attn_k_b without its attn_v_b.
    let k_dims = [16, 32, 4];
    let b = deepseek2_base().tensor("blk.0.attn_k_b.weight", &k_dims, 0, f32_zeros(&k_dims));
    let e = open("k_only.gguf", b)?.err().unwrap_or_default();
    ensure!(
        e.contains("blk.0.attn_k_b.weight") && e.contains("attn_v_b"),
        "{e}"
    );
    // attn_v_b without its attn_k_b.
    let v_ok = [32, 16, 4];
    let b = deepseek2_base().tensor("blk.0.attn_v_b.weight", &v_ok, 0, f32_zeros(&v_ok));
    let e = open("v_only.gguf", b)?.err().unwrap_or_default();
    ensure!(
        e.contains("blk.0.attn_v_b.weight") && e.contains("attn_k_b"),
        "{e}"
    );
    // A pair whose value rows disagree with value_length_mla.
    let v_dims = [32, 8, 4];
    let b = deepseek2_base()
        .tensor("blk.0.attn_k_b.weight", &k_dims, 0, f32_zeros(&k_dims))
        .tensor("blk.0.attn_v_b.weight", &v_dims, 0, f32_zeros(&v_dims));
    let e = open("v_dims.gguf", b)?.err().unwrap_or_default();
    ensure!(
        e.contains("blk.0.attn_k_b.weight") && e.contains("v_head_dim 16"),
        "{e}"
    );
    // An unknown gating function.
    let mut b = deepseek2_base();
    for (key, v) in [
        ("expert_count", 4u32),
        ("expert_used_count", 2),
        ("expert_feed_forward_length", 8),
        ("expert_gating_func", 3),
    ] {
        b = b.kv(&format!("deepseek2.{key}"), 4, v.to_le_bytes().to_vec());
    }
    let e = open("gating.gguf", b)?.err().unwrap_or_default();
    ensure!(
        e.contains("deepseek2.expert_gating_func") && e.contains("softmax"),
        "{e}"
    );
    // YaRN without its attention temperature.
    let b = deepseek2_base()
        .kv("deepseek2.rope.scaling.type", 8, gguf_str("yarn"))
        .kv(
            "deepseek2.rope.scaling.factor",
            6,
            40f32.to_le_bytes().to_vec(),
        );
    let e = open("yarn.gguf", b)?.err().unwrap_or_default();
    ensure!(
        e.contains("deepseek2.rope.scaling.yarn_log_multiplier"),
        "{e}"
    );
    Ok(())
}
