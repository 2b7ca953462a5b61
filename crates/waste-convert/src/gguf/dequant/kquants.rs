//! The ggml k-quants this reader decodes: Q3_K, Q4_K and Q6_K, super-blocks
//! of 256 weights with one f16 scale and per-16/32 sub-block integer scales
//! (ggml-common.h `block_q3_K`, `block_q4_K`, `block_q6_K`). Operation order
//! follows ggml's `dequantize_row_*`: the sub-block scale is formed in f32
//! first (`d * sc`), then multiplied by the quant, never fused.

use super::f16_at;

/// Weights per super-block.
const QK_K: usize = 256;

/// Q4_K, 144 bytes per 256 weights (4.5 bpw): f16 `d`, f16 `dmin`, 12 bytes
/// of eight 6-bit (scale, min) pairs, 128 bytes of nibbles. Sub-block `j`
/// (32 weights) is `d * sc_j * q - dmin * m_j`; each 32-byte run of nibbles
/// holds sub-block 2k in its low and 2k+1 in its high nibbles.
pub fn dequantize_q4_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 144 * QK_K);
    for b in bytes.chunks_exact(144) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales: &[u8; 12] = b[4..16].try_into().expect("12-byte slice");
        for (k, qs) in b[16..144].chunks_exact(32).enumerate() {
            for (j, shift) in [(2 * k, 0), (2 * k + 1, 4)] {
                let (sc, m) = scale_min_k4(j, scales);
                let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
                out.extend(qs.iter().map(|&q| dl * f32::from((q >> shift) & 0x0F) - ml));
            }
        }
    }
    out
}

/// Scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block. Bytes 0..4
/// hold scales 0..4 and bytes 4..8 mins 0..4 in their low 6 bits; scales and
/// mins 4..8 keep their low nibbles in bytes 8..12 and their top 2 bits in
/// the spare top bits of bytes 0..4 (scales) and 4..8 (mins).
fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q6_K, 210 bytes per 256 weights (6.5625 bpw): 128 bytes of low nibbles,
/// 64 bytes of high 2-bit pairs, 16 i8 scales (one per 16 weights), f16 `d`.
/// `w = d * sc * (q - 32)` with q the 6-bit value. Each 128-weight half uses
/// 64 low-nibble bytes (weights l and l+64 share a byte, as do l+32 and
/// l+96) and 32 high bytes (bits 2i..2i+2 belong to quarter i).
pub fn dequantize_q6_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; bytes.len() / 210 * QK_K];
    for (b, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 208);
        for half in 0..2 {
            let ql = &b[64 * half..64 * half + 64];
            let qh = &b[128 + 32 * half..128 + 32 * half + 32];
            let sc = &b[192 + 8 * half..192 + 8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let is = l / 16;
                let q = [
                    (ql[l] & 0x0F) | (qh[l] & 3) << 4,
                    (ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4,
                    (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                    (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
                ];
                for (quarter, q) in q.into_iter().enumerate() {
                    let scale = d * f32::from(sc[is + 2 * quarter] as i8);
                    y[l + 32 * quarter] = scale * f32::from(q as i8 - 32);
                }
            }
        }
    }
    out
}

/// Q3_K, 110 bytes per 256 weights (3.4375 bpw): 32 bytes `hmask`, 64 bytes
/// of 2-bit lows, 12 bytes of sixteen 6-bit scales (biased by 32), f16 `d`.
/// `w = d * (sc - 32) * (low - (high bit set ? 0 : 4))`. Each 128-weight
/// half uses 32 low bytes, four 2-bit shifts of them making four runs of 32;
/// bit `4 * half + shift` of `hmask[l]` is the high bit of weight l of run.
pub fn dequantize_q3_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 110 * QK_K);
    for b in bytes.chunks_exact(110) {
        let d = f16_at(b, 108);
        let (hmask, qs) = (&b[0..32], &b[32..96]);
        let scales: &[u8; 12] = b[96..108].try_into().expect("12-byte slice");
        for half in 0..2 {
            for shift in 0..4 {
                for sub in 0..2 {
                    let s = 8 * half + 2 * shift + sub;
                    let dl = d * f32::from(scale_k3(s, scales));
                    for l in 16 * sub..16 * sub + 16 {
                        let low = ((qs[32 * half + l] >> (2 * shift)) & 3) as i8;
                        let high_set = (hmask[l] >> (4 * half + shift)) & 1 == 1;
                        out.push(dl * f32::from(low - if high_set { 0 } else { 4 }));
                    }
                }
            }
        }
    }
    out
}

/// Scale `s` (0..16) of a Q3_K block, unbiased: its low nibble is in byte
/// `s % 8` (low nibble for s < 8, high for s >= 8), its top 2 bits in byte
/// `8 + s % 4` at bit `2 * (s / 4)`.
fn scale_k3(s: usize, b: &[u8; 12]) -> i8 {
    let low = if s < 8 { b[s] & 0x0F } else { b[s - 8] >> 4 };
    let high = (b[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | high << 4) as i8 - 32
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_bits().to_le_bytes()
    }

    /// Packs eight 6-bit (scale, min) pairs the way Q4_K stores them.
    fn pack_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = sc[j] | (sc[j + 4] >> 4) << 6;
            s[j + 4] = m[j] | (m[j + 4] >> 4) << 6;
            s[j + 8] = (sc[j + 4] & 0x0F) | (m[j + 4] & 0x0F) << 4;
        }
        s
    }

    #[test]
    fn q4_k_hand_built_block() {
        let sc = [1, 2, 3, 63, 17, 40, 5, 33];
        let m = [0, 7, 62, 1, 48, 9, 16, 31];
        let mut b = [f16_bytes(0.5), f16_bytes(0.25)].concat();
        b.extend(pack_k4(sc, m));
        // weight i of sub-block j has quant (i + j) % 16
        for k in 0..4 {
            b.extend(
                (0..32).map(|i| ((i + 2 * k) % 16) as u8 | (((i + 2 * k + 1) % 16) as u8) << 4),
            );
        }
        let got = dequantize_q4_k(&b);
        assert_eq!(got.len(), 256);
        for j in 0..8 {
            for i in 0..32 {
                let q = ((i + j) % 16) as f32;
                let want = 0.5 * f32::from(sc[j]) * q - 0.25 * f32::from(m[j]);
                assert_eq!(got[32 * j + i], want, "sub-block {j} weight {i}");
            }
        }
    }

    #[test]
    fn q6_k_hand_built_block() {
        // weight w has 6-bit quant (w * 7) % 64 and scale index w / 16
        let quant = |w: usize| ((w * 7) % 64) as u8;
        let scales: [i8; 16] = [
            1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 11, 0, 13, -14, 15, -16,
        ];
        let mut b = vec![0u8; 210];
        for w in 0..256 {
            let (half, r) = (w / 128, w % 128);
            let (quarter, l) = (r / 32, r % 32);
            let low_byte = 64 * half + l + if quarter % 2 == 1 { 32 } else { 0 };
            let nibble_shift = if quarter >= 2 { 4 } else { 0 };
            b[low_byte] |= (quant(w) & 0x0F) << nibble_shift;
            b[128 + 32 * half + l] |= (quant(w) >> 4) << (2 * quarter);
        }
        for (i, s) in scales.iter().enumerate() {
            b[192 + i] = *s as u8;
        }
        b[208..210].copy_from_slice(&f16_bytes(0.125));
        let got = dequantize_q6_k(&b);
        for (w, &got) in got.iter().enumerate() {
            let want = 0.125 * f32::from(scales[w / 16]) * (f32::from(quant(w)) - 32.0);
            assert_eq!(got, want, "weight {w}");
        }
    }

    #[test]
    fn q3_k_hand_built_block() {
        // weight w has 3-bit quant (w * 5) % 8 (stored as low 2 bits plus an
        // inverted high bit) and 6-bit scale index w / 16
        let quant = |w: usize| ((w * 5) % 8) as i8;
        let scale = |s: usize| (s * 4 + 1) as u8; // 1..61, biased values
        let mut b = vec![0u8; 110];
        for w in 0..256 {
            let (half, r) = (w / 128, w % 128);
            let (shift, l) = (r / 32, r % 32);
            let q = quant(w) - 4; // -4..3
            let (low, high_set) = if q < 0 { (q + 4, false) } else { (q, true) };
            b[32 + 32 * half + l] |= (low as u8) << (2 * shift);
            if high_set {
                b[l] |= 1 << (4 * half + shift);
            }
        }
        for s in 0..16 {
            let v = scale(s);
            b[96 + s % 8] |= (v & 0x0F) << if s < 8 { 0 } else { 4 };
            b[96 + 8 + s % 4] |= (v >> 4) << (2 * (s / 4));
        }
        b[108..110].copy_from_slice(&f16_bytes(-0.75));
        let got = dequantize_q3_k(&b);
        for (w, &got) in got.iter().enumerate() {
            let sc = f32::from(scale(w / 16) as i8 - 32);
            let want = -0.75 * sc * f32::from(quant(w) - 4);
            assert_eq!(got, want, "weight {w}");
        }
    }
}
