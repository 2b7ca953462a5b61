//! Client side of `ExpertStore.FetchExperts`: puts streamed chunks back into
//! whole records and verifies each against the checksum the chunks carry.
//! Plain format knowledge (record bytes + xxh3), with no gRPC types, so the
//! node uses it without depending on the store. Memory is bounded by the
//! request: a chunk for an id that was not asked for, a length other than
//! the one announced by the store's `Info`, or a gap or overlap is an error
//! before anything is allocated for it.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::checksum::checksum;
use crate::error::{Error, Result};
use crate::experts::layer_file_name;

/// The fields of one `ExpertChunk`, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct ChunkView<'a> {
    pub layer: u32,
    pub expert: u32,
    /// Offset of `data` in the record.
    pub offset: u64,
    /// Length of the whole record.
    pub total_len: u64,
    /// xxh3-64 of the whole record.
    pub checksum: u64,
    pub data: &'a [u8],
}

/// A record put back together and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    pub layer: u32,
    pub expert: u32,
    pub checksum: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
struct Pending {
    /// Length the store announced for this layer's records.
    len: u64,
    /// Bytes so far and the checksum the first chunk carried.
    partial: Option<(Vec<u8>, u64)>,
}

/// Reassembles the records of one fetch.
#[derive(Debug, Default)]
pub struct Reassembler {
    pending: HashMap<(u32, u32), Pending>,
}

impl Reassembler {
    /// Expects each `(layer, expert, record_len)` once; `record_len` is the
    /// layer's `MoeLayer.record_bytes` from the store's `Info`.
    pub fn new(expected: impl IntoIterator<Item = (u32, u32, u64)>) -> Self {
        let pending = expected
            .into_iter()
            .map(|(layer, expert, len)| ((layer, expert), Pending { len, partial: None }))
            .collect();
        Self { pending }
    }

    /// Records requested and not complete yet.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }

    /// Adds one chunk; returns the record it completes, verified.
    pub fn push(&mut self, c: ChunkView<'_>) -> Result<Option<FetchedRecord>> {
        let bad = |reason: String| Error::BadChunk {
            layer: c.layer,
            expert: c.expert,
            reason,
        };
        let key = (c.layer, c.expert);
        let p = self
            .pending
            .get_mut(&key)
            .ok_or_else(|| bad("not requested, or already complete".into()))?;
        if c.total_len != p.len {
            return Err(bad(format!(
                "total_len {} but the store's records of this layer are {} bytes",
                c.total_len, p.len
            )));
        }
        if c.data.is_empty() {
            return Err(bad(format!("empty chunk at offset {}", c.offset)));
        }
        let (buf, sum) = p.partial.get_or_insert_with(|| {
            // Sized by the announced length, checked above: bounded by the request.
            (Vec::with_capacity(p.len as usize), c.checksum)
        });
        if c.offset != buf.len() as u64 {
            return Err(bad(format!(
                "chunk at offset {} but {} bytes were received (gap or overlap)",
                c.offset,
                buf.len()
            )));
        }
        if c.checksum != *sum {
            return Err(bad(format!(
                "checksum {:016x} differs from the first chunk's {sum:016x}",
                c.checksum
            )));
        }
        if c.offset + c.data.len() as u64 > p.len {
            return Err(bad(format!(
                "{} bytes at offset {} run past the {}-byte record",
                c.data.len(),
                c.offset,
                p.len
            )));
        }
        buf.extend_from_slice(c.data);
        if (buf.len() as u64) < p.len {
            return Ok(None);
        }
        let (bytes, expected) = self
            .pending
            .remove(&key)
            .and_then(|p| p.partial)
            .expect("present: just extended");
        let found = checksum(&bytes);
        if found != expected {
            return Err(Error::ChecksumMismatch {
                // A client does not know the record's place in the store's
                // file; the file name and layer/expert pinpoint it there.
                path: PathBuf::from(layer_file_name(c.layer)),
                layer: c.layer,
                expert: c.expert,
                offset: 0,
                expected,
                found,
            });
        }
        Ok(Some(FetchedRecord {
            layer: c.layer,
            expert: c.expert,
            checksum: expected,
            bytes,
        }))
    }

    /// Errors naming the first record still incomplete (the stream ended early).
    pub fn finish(self) -> Result<()> {
        match self.pending.into_iter().min_by_key(|(k, _)| *k) {
            None => Ok(()),
            Some(((layer, expert), p)) => Err(Error::BadChunk {
                layer,
                expert,
                reason: format!(
                    "stream ended with {} of {} bytes",
                    p.partial.map_or(0, |(b, _)| b.len()),
                    p.len
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk<'a>(e: u32, off: u64, data: &'a [u8], total: u64, sum: u64) -> ChunkView<'a> {
        ChunkView {
            layer: 3,
            expert: e,
            offset: off,
            total_len: total,
            checksum: sum,
            data,
        }
    }

    #[test]
    fn interleaved_chunks_reassemble_and_verify() {
        let a: Vec<u8> = (0..100u8).collect();
        let b: Vec<u8> = (0..100u8).rev().collect();
        let (sa, sb) = (checksum(&a), checksum(&b));
        let mut r = Reassembler::new([(3, 0, 100), (3, 1, 100)]);
        assert!(r.push(chunk(0, 0, &a[..60], 100, sa)).unwrap().is_none());
        assert!(r.push(chunk(1, 0, &b[..10], 100, sb)).unwrap().is_none());
        let ra = r.push(chunk(0, 60, &a[60..], 100, sa)).unwrap().unwrap();
        assert_eq!((ra.expert, ra.bytes), (0, a.clone()));
        let err = Reassembler::new([(3, 1, 100)]).finish().unwrap_err();
        assert!(err.to_string().contains("layer 3 expert 1"), "{err}");
        assert!(r.finish().is_err(), "expert 1 incomplete");
    }

    #[test]
    fn bad_chunks_and_corruption_are_errors() {
        let a: Vec<u8> = (0..100u8).collect();
        let s = checksum(&a);
        let mut r = Reassembler::new([(3, 0, 100)]);
        assert!(r.push(chunk(9, 0, &a, 100, s)).is_err(), "not requested");
        assert!(r.push(chunk(0, 0, &a, 1 << 40, s)).is_err(), "huge total");
        assert!(r.push(chunk(0, 10, &a[..10], 100, s)).is_err(), "gap");
        assert!(r.push(chunk(0, 0, &[], 100, s)).is_err(), "empty");
        let mut r = Reassembler::new([(3, 0, 100)]);
        r.push(chunk(0, 0, &a[..50], 100, s)).unwrap();
        assert!(r.push(chunk(0, 50, &a[..60], 100, s)).is_err(), "overrun");
        let mut bad = a.clone();
        bad[7] ^= 1;
        let mut r = Reassembler::new([(3, 0, 100)]);
        let err = r.push(chunk(0, 0, &bad, 100, s)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ChecksumMismatch {
                    layer: 3,
                    expert: 0,
                    ..
                }
            ),
            "{err}"
        );
    }
}
