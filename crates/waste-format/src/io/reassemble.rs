//! Client side of `ExpertStore.FetchExperts`: puts streamed chunks back into
//! whole records and verifies each against the checksum the chunks carry;
//! records that arrive whole (the store's bulk channel) are read in place
//! and verified the same way.
//! The checksum is computed as the bytes are copied in, a block at a time
//! while each block is still in cache, rather than in a second pass over
//! the finished record (memory bandwidth is what a node runs short of).
//! Plain format knowledge (record bytes + xxh3), with no gRPC types, so the
//! node uses it without depending on the store. Memory is bounded by the
//! request: a chunk for an id that was not asked for, a length other than
//! the one announced by the store's `Info`, or a gap or overlap is an error
//! before anything is allocated for it.

use std::collections::HashMap;
use std::hash::Hasher;
use std::path::Path;

use super::buffer::{BufferPool, RecordBytes};
use crate::checksum;
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
    /// The chunk's bytes, as the slices they arrived in (in order).
    pub data: &'a [&'a [u8]],
}

impl ChunkView<'_> {
    fn data_len(&self) -> usize {
        self.data.iter().map(|d| d.len()).sum()
    }
}

/// A record put back together and verified.
#[derive(Debug)]
pub struct FetchedRecord {
    pub layer: u32,
    pub expert: u32,
    pub checksum: u64,
    pub bytes: RecordBytes,
}

#[derive(Debug)]
struct Pending {
    /// Length the store announced for this layer's records.
    len: u64,
    partial: Option<Partial>,
}

/// A record being received.
struct Partial {
    bytes: RecordBytes,
    /// Running checksum of `bytes`.
    hasher: checksum::Running,
    /// The checksum the first chunk carried.
    expected: u64,
}

impl std::fmt::Debug for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partial")
            .field("bytes", &self.bytes.len())
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

/// Bytes copied between updates of the running checksum: small enough that
/// the block is still in L2 when it is hashed.
const HASH_BLOCK: usize = 64 << 10;
/// Bytes read from a socket into a whole record between updates of its
/// checksum: fewer reads than [`HASH_BLOCK`] (loopback bulk fetch 1.56-1.66
/// -> 1.33-1.42 x a plain socket's CPU per GB, docs/BENCH.md), and still
/// in L2 when hashed.
const WHOLE_BLOCK: usize = 256 << 10;

/// Reassembles the records of one fetch.
#[derive(Debug, Default)]
pub struct Reassembler {
    pending: HashMap<(u32, u32), Pending>,
    /// Where records are put together while it has a buffer free.
    pool: Option<BufferPool>,
}

impl Reassembler {
    /// Expects each `(layer, expert, record_len)` once; `record_len` is the
    /// layer's `MoeLayer.record_bytes` from the store's `Info`.
    pub fn new(expected: impl IntoIterator<Item = (u32, u32, u64)>) -> Self {
        let pending = expected
            .into_iter()
            .map(|(layer, expert, len)| ((layer, expert), Pending { len, partial: None }))
            .collect();
        Self {
            pending,
            pool: None,
        }
    }

    /// Puts records together in buffers of `pool` while it has one free
    /// (else in vectors; it never waits). A fetching node's records are
    /// megabytes each: fresh ones cost a page fault per 4 KiB, with the
    /// kernel zeroing every page, more CPU than the copy into them
    /// (docs/BENCH.md); the pool's buffers are reused and in huge pages.
    pub fn in_pool(mut self, pool: &BufferPool) -> Self {
        self.pool = Some(pool.clone());
        self
    }

    /// Records requested and not complete yet.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }

    /// The pending record `(layer, expert)`, if `total_len` is its length.
    fn expect(
        pending: &mut HashMap<(u32, u32), Pending>,
        layer: u32,
        expert: u32,
        total_len: u64,
    ) -> Result<&mut Pending> {
        let bad = |reason: String| Error::BadChunk {
            layer,
            expert,
            reason,
        };
        let p = pending
            .get_mut(&(layer, expert))
            .ok_or_else(|| bad("not requested, or already complete".into()))?;
        if total_len != p.len {
            return Err(bad(format!(
                "total_len {total_len} but the store's records of this layer are {} bytes",
                p.len
            )));
        }
        Ok(p)
    }

    /// Starts a record whose bytes arrive whole and in order (the store's
    /// bulk channel), checked as a first chunk is. The caller reads them
    /// straight into its buffer ([`WholeRecord::next_block`]): no copy.
    pub fn begin_whole(
        &mut self,
        layer: u32,
        expert: u32,
        total_len: u64,
        checksum: u64,
    ) -> Result<WholeRecord> {
        let p = Self::expect(&mut self.pending, layer, expert, total_len)?;
        if p.partial.is_some() {
            return Err(Error::BadChunk {
                layer,
                expert,
                reason: "sent whole after chunks of it".into(),
            });
        }
        // Sized by the announced length, checked above: bounded by the request.
        let len = p.len as usize;
        self.pending.remove(&(layer, expert));
        Ok(WholeRecord {
            layer,
            expert,
            expected: checksum,
            bytes: RecordBytes::to_fill(len, self.pool.as_ref()),
            hasher: checksum::Running::new(),
            hashed: 0,
            handed_out: 0,
        })
    }

    /// A record that arrives whole, read in place: [`Reassembler::begin_whole`],
    /// each block filled in order by `fill` (a socket read into it), then
    /// verified ([`WholeRecord::finish`]).
    pub fn read_whole<E: From<Error>>(
        &mut self,
        layer: u32,
        expert: u32,
        total_len: u64,
        checksum: u64,
        mut fill: impl FnMut(&mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<FetchedRecord, E> {
        let mut rec = self.begin_whole(layer, expert, total_len, checksum)?;
        while let Some(block) = rec.next_block() {
            fill(block)?;
        }
        Ok(rec.finish()?)
    }

    /// Adds one chunk; returns the record it completes, verified.
    pub fn push(&mut self, c: ChunkView<'_>) -> Result<Option<FetchedRecord>> {
        let bad = |reason: String| Error::BadChunk {
            layer: c.layer,
            expert: c.expert,
            reason,
        };
        let key = (c.layer, c.expert);
        let p = Self::expect(&mut self.pending, c.layer, c.expert, c.total_len)?;
        let data_len = c.data_len();
        if data_len == 0 {
            return Err(bad(format!("empty chunk at offset {}", c.offset)));
        }
        let Partial {
            bytes: buf,
            hasher,
            expected: sum,
        } = p.partial.get_or_insert_with(|| Partial {
            // Sized by the announced length, checked above: bounded by the request.
            bytes: RecordBytes::with_capacity(p.len as usize, self.pool.as_ref()),
            hasher: checksum::Running::new(),
            expected: c.checksum,
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
        if c.offset + data_len as u64 > p.len {
            return Err(bad(format!(
                "{data_len} bytes at offset {} run past the {}-byte record",
                c.offset, p.len
            )));
        }
        for block in c.data.iter().flat_map(|d| d.chunks(HASH_BLOCK)) {
            buf.extend_from_slice(block);
            hasher.write(block);
        }
        if (buf.len() as u64) < p.len {
            return Ok(None);
        }
        let Partial {
            bytes,
            hasher,
            expected,
        } = self
            .pending
            .remove(&key)
            .and_then(|p| p.partial)
            .expect("present: just extended");
        verified(c.layer, c.expert, expected, hasher.finish(), bytes).map(Some)
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
                    p.partial.map_or(0, |r| r.bytes.len()),
                    p.len
                ),
            }),
        }
    }
}

/// The record, if its bytes hashed to the checksum the store announced.
fn verified(
    layer: u32,
    expert: u32,
    expected: u64,
    found: u64,
    bytes: RecordBytes,
) -> Result<FetchedRecord> {
    if found != expected {
        return Err(Error::ChecksumMismatch {
            // A client does not know the record's place in the store's
            // file; the store-relative file and layer/expert pinpoint it.
            path: Path::new("experts").join(layer_file_name(layer)),
            layer,
            expert,
            offset: 0,
            expected,
            found,
        });
    }
    Ok(FetchedRecord {
        layer,
        expert,
        checksum: expected,
        bytes,
    })
}

/// A record being read in place, block by block ([`Reassembler::begin_whole`]).
pub struct WholeRecord {
    layer: u32,
    expert: u32,
    expected: u64,
    bytes: RecordBytes,
    hasher: checksum::Running,
    /// Bytes hashed so far.
    hashed: usize,
    /// End of the last block handed out.
    handed_out: usize,
}

impl std::fmt::Debug for WholeRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeRecord")
            .field("layer", &self.layer)
            .field("expert", &self.expert)
            .field("len", &self.bytes.len())
            .field("hashed", &self.hashed)
            .finish_non_exhaustive()
    }
}

impl WholeRecord {
    /// The next block to fill (at most 256 KiB), once the block handed out
    /// before it is hashed while it is still in cache; None when the
    /// record is full. A block handed out counts as filled: a caller that
    /// could not fill it drops the record.
    pub fn next_block(&mut self) -> Option<&mut [u8]> {
        self.hash_filled();
        let len = self.bytes.len();
        if self.hashed == len {
            return None;
        }
        let end = (self.hashed + WHOLE_BLOCK).min(len);
        self.handed_out = end;
        Some(&mut self.bytes.as_mut_slice()[self.hashed..end])
    }

    fn hash_filled(&mut self) {
        if self.handed_out > self.hashed {
            self.hasher
                .write(&self.bytes.as_ref()[self.hashed..self.handed_out]);
            self.hashed = self.handed_out;
        }
    }

    /// The record, verified against the announced checksum; an error if
    /// blocks are still to fill.
    pub fn finish(mut self) -> Result<FetchedRecord> {
        self.hash_filled();
        if self.hashed < self.bytes.len() {
            return Err(Error::BadChunk {
                layer: self.layer,
                expert: self.expert,
                reason: format!(
                    "finished with {} of {} bytes",
                    self.hashed,
                    self.bytes.len()
                ),
            });
        }
        verified(
            self.layer,
            self.expert,
            self.expected,
            self.hasher.finish(),
            self.bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::checksum::checksum;

    fn chunk<'a>(e: u32, off: u64, data: &'a [&'a [u8]], total: u64, sum: u64) -> ChunkView<'a> {
        ChunkView {
            layer: 3,
            expert: e,
            offset: off,
            total_len: total,
            checksum: sum,
            data,
        }
    }

    /// With a pool of one buffer, the first record started is put together
    /// in it and the second in a vector; both come out whole.
    #[test]
    fn interleaved_chunks_reassemble_and_verify() {
        let a: Vec<u8> = (0..100u8).collect();
        let b: Vec<u8> = (0..100u8).rev().collect();
        let (sa, sb) = (checksum(&a), checksum(&b));
        let pool = BufferPool::new(4096);
        let mut r = Reassembler::new([(3, 0, 100), (3, 1, 100)]).in_pool(&pool);
        assert!(r.push(chunk(0, 0, &[&a[..60]], 100, sa)).unwrap().is_none());
        assert!(r.push(chunk(1, 0, &[&b[..10]], 100, sb)).unwrap().is_none());
        let ra = r.push(chunk(0, 60, &[&a[60..]], 100, sa)).unwrap().unwrap();
        assert_eq!((ra.expert, ra.bytes.as_ref()), (0, &a[..]));
        assert!(ra.bytes.is_pooled());
        let rb = r.push(chunk(1, 10, &[&b[10..]], 100, sb)).unwrap().unwrap();
        assert_eq!((rb.expert, rb.bytes.as_ref()), (1, &b[..]));
        assert!(!rb.bytes.is_pooled(), "the pool's one buffer was taken");
        let err = Reassembler::new([(3, 1, 100)]).finish().unwrap_err();
        assert!(err.to_string().contains("layer 3 expert 1"), "{err}");
        let mut r = Reassembler::new([(3, 0, 100), (3, 1, 100)]);
        r.push(chunk(0, 0, &[&a], 100, sa)).unwrap();
        assert!(r.finish().is_err(), "expert 1 incomplete");
    }

    #[test]
    fn bad_chunks_and_corruption_are_errors() {
        let a: Vec<u8> = (0..100u8).collect();
        let s = checksum(&a);
        let mut r = Reassembler::new([(3, 0, 100)]);
        assert!(r.push(chunk(9, 0, &[&a], 100, s)).is_err(), "not requested");
        assert!(
            r.push(chunk(0, 0, &[&a], 1 << 40, s)).is_err(),
            "huge total"
        );
        assert!(r.push(chunk(0, 10, &[&a[..10]], 100, s)).is_err(), "gap");
        assert!(r.push(chunk(0, 0, &[], 100, s)).is_err(), "empty");
        let mut r = Reassembler::new([(3, 0, 100)]);
        r.push(chunk(0, 0, &[&a[..50]], 100, s)).unwrap();
        assert!(
            r.push(chunk(0, 50, &[&a[..60]], 100, s)).is_err(),
            "overrun"
        );
        let mut bad = a.clone();
        bad[7] ^= 1;
        let mut r = Reassembler::new([(3, 0, 100)]);
        let err = r.push(chunk(0, 0, &[&bad], 100, s)).unwrap_err();
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

    /// Fills a whole record's blocks from `data`, as a socket read would.
    fn fill(mut rec: WholeRecord, data: &[u8]) -> Result<FetchedRecord> {
        let mut at = 0;
        while let Some(block) = rec.next_block() {
            block.copy_from_slice(&data[at..at + block.len()]);
            at += block.len();
        }
        rec.finish()
    }

    /// A record read in place, across several hashing blocks, comes out
    /// as sent and verified against the one-shot checksum, in the pool's
    /// buffer while it has one (whose stale bytes are all overwritten) and
    /// in a vector after; a flipped bit anywhere fails it, naming it.
    #[test]
    fn whole_records_read_in_place_verify() {
        let len = 2 * WHOLE_BLOCK + 777;
        let rec: Vec<u8> = (0..len).map(|i| (i * 13 + i / 511) as u8).collect();
        let sum = checksum(&rec);
        let pool = BufferPool::new(len);
        {
            let mut stale = pool.acquire(len);
            stale.buf_mut().spare_mut().fill(0xee);
        }
        let mut r = Reassembler::new([(3, 0, len as u64), (3, 1, len as u64)]).in_pool(&pool);
        let a = fill(r.begin_whole(3, 0, len as u64, sum).unwrap(), &rec).unwrap();
        assert!(a.bytes.is_pooled());
        assert_eq!((a.layer, a.expert, a.bytes.as_ref()), (3, 0, &rec[..]));
        let b = fill(r.begin_whole(3, 1, len as u64, sum).unwrap(), &rec).unwrap();
        assert!(
            !b.bytes.is_pooled(),
            "the pool's one buffer is held by the first"
        );
        assert_eq!(b.bytes.as_ref(), &rec[..]);
        assert!(r.finish().is_ok());
        for i in [0, WHOLE_BLOCK - 1, WHOLE_BLOCK, len - 1] {
            let mut bad = rec.clone();
            bad[i] ^= 0x04;
            let mut r = Reassembler::new([(3, 2, len as u64)]);
            let err = fill(r.begin_whole(3, 2, len as u64, sum).unwrap(), &bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::ChecksumMismatch {
                        layer: 3,
                        expert: 2,
                        ..
                    }
                ),
                "byte {i}: {err}"
            );
        }
    }

    /// A whole record is checked as a first chunk is, and one not filled
    /// to its end is refused.
    #[test]
    fn whole_records_are_checked_before_and_after() {
        let a: Vec<u8> = (0..100u8).collect();
        let s = checksum(&a);
        let mut r = Reassembler::new([(3, 0, 100)]);
        assert!(r.begin_whole(3, 9, 100, s).is_err(), "not requested");
        assert!(r.begin_whole(3, 0, 1 << 40, s).is_err(), "another length");
        r.push(chunk(0, 0, &[&a[..10]], 100, s)).unwrap();
        assert!(r.begin_whole(3, 0, 100, s).is_err(), "begun in chunks");
        let mut r = Reassembler::new([(3, 0, 100)]);
        let rec = r.begin_whole(3, 0, 100, s).unwrap();
        assert!(r.begin_whole(3, 0, 100, s).is_err(), "begun twice");
        let err = rec.finish().unwrap_err();
        assert!(err.to_string().contains("0 of 100 bytes"), "{err}");
    }

    /// A record that arrives as many slices of odd sizes, across the
    /// hashing blocks, verifies against the one-shot checksum; one flipped
    /// bit anywhere fails it.
    #[test]
    fn the_running_checksum_equals_the_one_shot_checksum() {
        let len = 3 * HASH_BLOCK + 12_345;
        let rec: Vec<u8> = (0..len).map(|i| (i * 7 + i / 977) as u8).collect();
        let sum = checksum(&rec);
        let pool = BufferPool::new(len);
        let flips = [None, Some(0), Some(HASH_BLOCK), Some(len - 1)];
        for (flip, pooled) in flips.into_iter().flat_map(|f| [(f, false), (f, true)]) {
            let mut data = rec.clone();
            if let Some(i) = flip {
                data[i] ^= 0x10;
            }
            let mut r = Reassembler::new([(3, 0, len as u64)]);
            if pooled {
                r = r.in_pool(&pool);
            }
            // Chunks of 100,003 bytes, each in slices of 1 to 70,001 bytes.
            let mut out = None;
            for (ci, c) in data.chunks(100_003).enumerate() {
                let cuts = [1, 4_096, 70_001];
                let mut slices: Vec<&[u8]> = Vec::new();
                let mut rest = c;
                for k in cuts.iter().cycle() {
                    if rest.is_empty() {
                        break;
                    }
                    let (a, b) = rest.split_at((*k).min(rest.len()));
                    slices.push(a);
                    rest = b;
                }
                let view = chunk(0, (ci * 100_003) as u64, &slices, len as u64, sum);
                match r.push(view) {
                    Ok(Some(rec)) => out = Some(Ok(rec)),
                    Ok(None) => {}
                    Err(e) => out = Some(Err(e)),
                }
            }
            match (flip, out) {
                (None, Some(Ok(got))) => {
                    assert_eq!(got.bytes.as_ref(), &rec[..]);
                    assert_eq!(got.bytes.is_pooled(), pooled);
                }
                (Some(_), Some(Err(Error::ChecksumMismatch { .. }))) => {}
                (f, other) => panic!("flip {f:?}: {other:?}"),
            }
        }
    }
}
