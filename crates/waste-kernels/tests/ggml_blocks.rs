//! waste's ggml decoders against an independent one: every fixture under
//! `tests/data/ggml/` (written by `scripts/gen-ggml-fixtures.py`) holds
//! random and gguf-py-quantized blocks of one type with gguf-py's float32
//! decode of them (ggml's C semantics transcribed in numpy for MXFP4, which
//! gguf-py 0.17.1 lacks); the decode here must equal it bit for bit. Also:
//! the fixtures reach every entry of every i-quant grid, and truncated or
//! misaligned input is refused, never a panic.

use std::collections::BTreeSet;

use waste_kernels::ggml::{self, GgmlType};

mod common;

use common::fixture;

#[test]
fn every_type_decodes_bit_identically_to_gguf_py() {
    for ty in GgmlType::DECODABLE {
        let f = fixture(ty);
        let got = ggml::dequantize(ty, &f.bytes).unwrap_or_else(|| panic!("{ty}: not decoded"));
        assert_eq!(got.len(), f.want.len(), "{ty}: length");
        let bad: Vec<usize> = (0..got.len())
            .filter(|&i| got[i].to_bits() != f.want[i].to_bits())
            .collect();
        if let Some(&i) = bad.first() {
            panic!(
                "{ty}: {} of {} values differ; first at weight {} of block {}: {:e} (0x{:08x}) != gguf-py {:e} (0x{:08x})",
                bad.len(),
                got.len(),
                i % f.qk,
                i / f.qk,
                got[i],
                got[i].to_bits(),
                f.want[i],
                f.want[i].to_bits()
            );
        }
        // dequantize_into over a split gives the same values
        let half = f.bytes.len() / f.block / 2;
        let mut out = vec![0f32; got.len()];
        let (a, b) = out.split_at_mut(half * f.qk);
        ggml::dequantize_into(ty, &f.bytes[..half * f.block], a).expect("first half");
        ggml::dequantize_into(ty, &f.bytes[half * f.block..], b).expect("second half");
        assert!(
            out.iter()
                .zip(&got)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{ty}: split"
        );
    }
}

/// Grid entries (index, grid size) each block of an i-quant fixture reads.
fn grid_indices(ty: GgmlType, b: &[u8]) -> (Vec<usize>, usize) {
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    match ty {
        GgmlType::IQ2_XXS => (
            (0..32)
                .map(|e| usize::from(b[2 + 8 * (e / 4) + e % 4]))
                .collect(),
            256,
        ),
        GgmlType::IQ2_XS => ((0..32).map(|e| u16_at(2 + 2 * e) & 511).collect(), 512),
        GgmlType::IQ2_S => (
            (0..32)
                .map(|e| {
                    usize::from(b[2 + e]) | usize::from((b[66 + e / 4] >> (2 * (e % 4))) & 3) << 8
                })
                .collect(),
            1024,
        ),
        GgmlType::IQ3_XXS => ((0..64).map(|e| usize::from(b[2 + e])).collect(), 256),
        GgmlType::IQ3_S => (
            (0..64)
                .map(|e| usize::from(b[2 + e]) | usize::from((b[66 + e / 8] >> (e % 8)) & 1) << 8)
                .collect(),
            512,
        ),
        GgmlType::IQ1_S => (
            (0..32)
                .map(|e| {
                    usize::from(b[2 + e]) | ((u16_at(34 + 2 * (e / 4)) >> (3 * (e % 4))) & 7) << 8
                })
                .collect(),
            2048,
        ),
        GgmlType::IQ1_M => (
            (0..32)
                .map(|e| usize::from(b[e]) | usize::from((b[32 + e / 2] >> (4 * (e % 2))) & 7) << 8)
                .collect(),
            2048,
        ),
        _ => unreachable!("{ty} has no grid"),
    }
}

/// Bit-identical decodes prove the tables right only for the entries the
/// fixtures reach; they reach all of them. (The indices are read here as
/// the decoders read them; since the decodes agree with gguf-py and no grid
/// repeats an entry, gguf-py reads the same ones.)
#[test]
fn fixtures_reach_every_grid_entry() {
    for ty in [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ] {
        let f = fixture(ty);
        let mut seen = BTreeSet::new();
        let mut size = 0;
        for b in f.bytes.chunks_exact(f.block) {
            let (idx, n) = grid_indices(ty, b);
            seen.extend(idx);
            size = n;
        }
        assert_eq!(seen.len(), size, "{ty}: grid entries reached");
    }
}

#[test]
fn truncated_or_misaligned_input_is_refused_without_panic() {
    for ty in GgmlType::DECODABLE {
        let f = fixture(ty);
        let two = &f.bytes[..2 * f.block];
        for cut in [1, f.block - 1, f.block + 1, 2 * f.block - 1] {
            if cut % f.block != 0 {
                assert!(
                    ggml::dequantize(ty, &two[..cut]).is_none(),
                    "{ty}: {cut} bytes"
                );
            }
        }
        // an output of the wrong length
        let mut short = vec![0f32; 2 * f.qk - 1];
        assert!(
            ggml::dequantize_into(ty, two, &mut short).is_none(),
            "{ty}: short output"
        );
        let mut long = vec![0f32; 2 * f.qk + 1];
        assert!(
            ggml::dequantize_into(ty, two, &mut long).is_none(),
            "{ty}: long output"
        );
        // a view at any byte offset (blocks have align 1)
        assert!(
            ggml::dequantize(ty, &f.bytes[1..=2 * f.block]).is_some(),
            "{ty}: offset view"
        );
    }
}

#[test]
fn every_byte_pattern_decodes_without_panic() {
    for ty in GgmlType::DECODABLE {
        let (_, block) = ty.block().expect("known");
        for fill in [0x00, 0xff, 0x80, 0x7f, 0x55] {
            let y = ggml::dequantize(ty, &vec![fill; 3 * block]).expect("whole blocks");
            assert_eq!(Some(y.len()), ggml::element_count(ty, 3 * block), "{ty}");
        }
    }
}
