//! What the kernel tests share: the ggml block fixtures of
//! `tests/data/ggml/` (written by `scripts/gen-ggml-fixtures.py`): per
//! type, blocks and gguf-py's float32 decode of them, the independent
//! truth the ggml tests compare against; the values quantized activations
//! stand for; and seeded test values.

#![allow(dead_code)] // each test target uses its own part of this

use std::path::PathBuf;

use waste_kernels::ggml::GgmlType;
use waste_kernels::ggml::act::{GgmlActs, Pairing, dequantize_q8k};

/// One fixture: its blocks' geometry and bytes, and the reference values.
pub struct Fixture {
    pub block: usize,
    pub qk: usize,
    pub bytes: Vec<u8>,
    pub want: Vec<f32>,
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize
}

pub fn fixture(ty: GgmlType) -> Fixture {
    let name = ty.name().expect("known type");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/ggml")
        .join(format!("{name}.bin"));
    let raw = fs_err::read(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&raw[..8], b"WGGMLFX1", "{name}: magic");
    let (id, n, block, qk) = (
        u32_at(&raw, 8),
        u32_at(&raw, 12),
        u32_at(&raw, 16),
        u32_at(&raw, 20),
    );
    assert_eq!(
        (id as u32, Some((qk, block))),
        (ty.0, ty.block()),
        "{name}: header"
    );
    let (bytes, values) = raw[24..].split_at(n * block);
    assert_eq!(values.len(), n * qk * 4, "{name}: file size");
    let want = values
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Fixture {
        block,
        qk,
        bytes: bytes.to_vec(),
        want,
    }
}

/// Seeded Gaussian-ish values (sum of uniforms) from a 64-bit LCG.
pub fn seeded(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut u = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    (0..len).map(|_| (u() + u() + u() + u()) * scale).collect()
}

/// The values the quantized activations stand for, (n, cols).
pub fn dequantized_acts(acts: &GgmlActs, pairing: Pairing) -> Vec<f32> {
    let mut out = vec![0f32; acts.n * acts.cols];
    match pairing {
        Pairing::Q8K => {
            for (b, o) in acts.q8k.iter().zip(out.chunks_exact_mut(256)) {
                dequantize_q8k(b, o);
            }
        }
        Pairing::Q8_0 => {
            for (b, o) in acts.q8_0.iter().zip(out.chunks_exact_mut(32)) {
                let d = half::f16::from_bits(u16::from_le_bytes(b.d)).to_f32();
                for (o, &q) in o.iter_mut().zip(&b.qs) {
                    *o = d * f32::from(q as i8);
                }
            }
        }
    }
    out
}
