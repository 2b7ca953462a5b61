//! GGUF metadata counts are untrusted: the fixture with one `{arch}.*`
//! count rewritten past its range (or to zero) fails to open with an error
//! naming the file and the key, before the count sizes anything.

mod common;

use anyhow::{Result, ensure};
use waste_convert::GgufCheckpoint;

/// The fixture with the u32 value of metadata `key` replaced by `value`.
fn patched(key: &str, value: u32) -> Result<Vec<u8>> {
    let mut bytes = fs_err::read(common::fixtures().join("gguf/qwen3_moe_tiny.f32.gguf"))?;
    // A key is stored as its u64 length then its bytes, then a u32 type tag.
    let needle = [&(key.len() as u64).to_le_bytes()[..], key.as_bytes()].concat();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .ok_or_else(|| anyhow::anyhow!("{key} is not in the fixture"))?
        + needle.len();
    ensure!(
        bytes[at..at + 4] == 4u32.to_le_bytes(),
        "{key} is not a u32"
    );
    bytes[at + 4..at + 8].copy_from_slice(&value.to_le_bytes());
    Ok(bytes)
}

#[test]
fn counts_out_of_range_are_refused_by_key() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("patched.gguf");
    // The unpatched fixture opens: the limits do not refuse a real file.
    fs_err::write(&path, patched("qwen3moe.block_count", 4)?)?;
    GgufCheckpoint::open(&path)?;
    for (key, value) in [
        ("qwen3moe.block_count", u32::MAX),
        ("qwen3moe.block_count", 0),
        ("qwen3moe.attention.head_count", u32::MAX),
        ("qwen3moe.attention.head_count_kv", 0),
        ("qwen3moe.embedding_length", 1 << 20),
        ("qwen3moe.expert_count", 5000),
        ("qwen3moe.expert_used_count", 0),
        ("qwen3moe.expert_feed_forward_length", 1 << 21),
        ("qwen3moe.context_length", u32::MAX),
    ] {
        fs_err::write(&path, patched(key, value)?)?;
        let err = GgufCheckpoint::open(&path).unwrap_err();
        let msg = err.to_string();
        ensure!(
            matches!(&err, waste_convert::Error::GgufMetadata { key: k, .. } if k == key)
                && msg.contains("patched.gguf")
                && msg.contains(&value.to_string()),
            "{key} = {value}: {msg}"
        );
    }
    Ok(())
}
