//! Record checksums: XXH3-64 of the record's bytes (unpadded). Fast enough
//! to check every record the store serves at NVMe speed.

/// Name of the algorithm as the index records it.
pub const ALGORITHM: &str = "xxh3-64";

pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}
