//! Record checksums: XXH3-64 of the record's bytes (unpadded). Fast enough
//! to check every record the store serves at NVMe speed. twox-hash picks
//! its AVX2 loop at run time (xxhash-rust picks at compile time, so a
//! portable build hashed with SSE2 at half the speed in cache,
//! docs/BENCH.md).

/// Name of the algorithm as the index records it.
pub const ALGORITHM: &str = "xxh3-64";

pub fn checksum(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// [`checksum`] over bytes that arrive in pieces (`std::hash::Hasher`:
/// `write` each piece, `finish` for the sum).
pub type Running = twox_hash::XxHash3_64;

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use super::*;

    /// XXH3-64 of the first `len` bytes of [`data`], from the xxHash C
    /// library (Python's `xxhash.xxh3_64_intdigest`): one length for each of
    /// the algorithm's paths (empty, 1-3, 4-8, 9-16, 17-128, 129-240 bytes,
    /// then stripes, blocks of 1024 bytes and a tail).
    const REFERENCE: [(usize, u64); 17] = [
        (0, 0x2d06800538d394c2),
        (1, 0xc44bdff4074eecdb),
        (3, 0x52aab5efb65ba70c),
        (4, 0xad400f5ff0348d48),
        (8, 0xa4525fd03fd9b3fb),
        (9, 0x34ef567b4f2f73ec),
        (16, 0x2f104d56be42214a),
        (17, 0x3e6df1cc1fb35f38),
        (128, 0x65313193ac18bfce),
        (129, 0x43107010904f124d),
        (240, 0x8aa7f1fc572d11d6),
        (241, 0xddb128241a3b606b),
        (1023, 0x43fd59e4d8c6fb49),
        (1024, 0x7e5f60b49bfb2c59),
        (1025, 0xc5307e2f77c7f6c4),
        (4173, 0x604db13e7581eb59),
        (1048577, 0x85e650c8684283b2),
    ];

    fn data(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B1) >> 7) as u8)
            .collect()
    }

    #[test]
    fn checksums_match_the_reference_implementation_whole_and_in_pieces() {
        let bytes = data(REFERENCE[REFERENCE.len() - 1].0);
        for (len, want) in REFERENCE {
            assert_eq!(checksum(&bytes[..len]), want, "{len} bytes");
            for piece in [1, 63, 64 << 10] {
                let mut running = Running::new();
                bytes[..len].chunks(piece).for_each(|p| running.write(p));
                assert_eq!(running.finish(), want, "{len} bytes in pieces of {piece}");
            }
        }
    }
}
