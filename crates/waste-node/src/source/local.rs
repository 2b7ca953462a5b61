//! Local mode: the node reads the `experts/` folder itself through the
//! O_DIRECT IO engine of waste-format (no gRPC hop). Records stay in the
//! engine's pooled buffers until computed ([`RecordBytes::Pooled`]); only
//! the cache copies them out, so it never holds IO buffers.

use std::path::Path;
use std::sync::Arc;

use waste_format::io::{Check, DirectMode, EngineConfig, OnRecord, RecordReader as FormatReader};

use super::{Done, Priority, RecordBytes, RecordReader};
use crate::{Error, Result};

#[derive(Debug)]
pub struct LocalReader {
    reader: Arc<FormatReader>,
}

impl LocalReader {
    pub fn open(dir: &Path, mode: DirectMode, cfg: EngineConfig) -> Result<Self> {
        Ok(Self {
            reader: Arc::new(FormatReader::open(dir, mode, cfg)?),
        })
    }

    pub fn experts(&self) -> &waste_format::ExpertsDir {
        self.reader.experts()
    }
}

impl RecordReader for LocalReader {
    fn fetch(&self, layer: u32, ids: &[u32], priority: Priority, done: Done) {
        let pairs: Vec<(u32, u32)> = ids.iter().map(|&e| (layer, e)).collect();
        let on_record: OnRecord = {
            let done = Arc::clone(&done);
            let pairs = pairs.clone();
            Arc::new(move |i, r| {
                let (layer, expert) = pairs[i];
                done(
                    layer,
                    expert,
                    r.map(|rec| RecordBytes::Pooled(rec.buf))
                        .map_err(Error::from),
                );
            })
        };
        if let Err(e) = self
            .reader
            .read(&pairs, priority, Check::Here, &on_record, None)
        {
            // Nothing was queued (an id out of range): fail every waiter with the cause.
            let msg = e.to_string();
            for &(layer, expert) in &pairs {
                done(layer, expert, Err(Error::BadRequest(msg.clone())));
            }
        }
    }

    fn settle(&self, layer: u32, chosen: &[u32]) -> Vec<u32> {
        experts_of(self.reader.settle_prefetch(layer, chosen))
    }

    fn revise(&self, layer: u32, guess: &[u32]) -> Vec<u32> {
        experts_of(self.reader.revise_prefetch(layer, guess))
    }

    fn idle_reserve(&self) -> u64 {
        self.reader.engine().pool().idle_bytes() as u64
    }

    fn reserve_taken_by(&self, layer: u32, reads: usize) -> u64 {
        let len = self.record_bytes(layer).unwrap_or(0);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.reader.engine().pool().growth_for(reads, len) as u64
    }

    fn record_bytes(&self, layer: u32) -> Option<u64> {
        self.reader
            .experts()
            .index()
            .layer(layer)
            .map(|l| l.record_len)
    }

    fn mode(&self) -> &'static str {
        "local"
    }
}

/// The experts of withdrawn `(layer, expert)` reads (all of one layer).
fn experts_of(withdrawn: Vec<(u32, u32)>) -> Vec<u32> {
    withdrawn.into_iter().map(|(_, expert)| expert).collect()
}
