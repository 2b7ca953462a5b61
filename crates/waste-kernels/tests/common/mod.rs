//! The ggml block fixtures of `tests/data/ggml/` (written by
//! `scripts/gen-ggml-fixtures.py`): per type, blocks and gguf-py's float32
//! decode of them, the independent truth the ggml tests compare against.

#![allow(dead_code)] // each test target uses its own part of this

use std::path::PathBuf;

use waste_kernels::ggml::GgmlType;

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
