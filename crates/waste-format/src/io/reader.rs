//! Reads expert records of an `experts/` folder through the [`IoEngine`]:
//! ids are located (and range-checked) up front, every layer file is opened
//! once for direct IO, and each record is verified against its checksum on
//! the IO thread that read it, so consumers only ever see whole, checked
//! records or an error naming the layer and expert.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

use super::buffer::PooledBuf;
use super::direct::{DirectFile, DirectMode};
use super::engine::{EngineConfig, IoEngine, Priority, ReadJob, Settle};
use crate::error::Result;
use crate::experts::{ExpertsDir, RecordLocation};

/// One record read and verified: its bytes live in a pooled aligned buffer
/// that returns to the engine's pool when this (or the last owner of the
/// buffer) is dropped.
#[derive(Debug)]
pub struct Record {
    pub loc: RecordLocation,
    pub buf: PooledBuf,
}

impl AsRef<[u8]> for Record {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

/// Called on an IO thread with the index of the id in the request and its record.
pub type OnRecord = Arc<dyn Fn(usize, Result<Record>) + Send + Sync>;

/// An `experts/` folder opened for engine reads.
#[derive(Debug)]
pub struct RecordReader {
    dir: ExpertsDir,
    files: HashMap<u32, Arc<DirectFile>>,
    engine: IoEngine,
    direct: bool,
}

impl RecordReader {
    /// Opens and checks `dir` (see [`ExpertsDir::open`]) and its layer files.
    pub fn open(dir: &Path, mode: DirectMode, cfg: EngineConfig) -> Result<Self> {
        let dir = ExpertsDir::open(dir)?;
        let mut files = HashMap::new();
        let mut direct = true;
        for l in &dir.index().layers {
            let f = DirectFile::open(&dir.dir().join(&l.file), mode)?;
            direct &= f.is_direct();
            files.insert(l.layer, Arc::new(f));
        }
        Ok(Self {
            dir,
            files,
            engine: IoEngine::new(cfg),
            direct,
        })
    }

    pub fn experts(&self) -> &ExpertsDir {
        &self.dir
    }

    pub fn engine(&self) -> &IoEngine {
        &self.engine
    }

    /// True when every layer file bypasses the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Locates every id (errors before any read for an unknown layer or
    /// expert), then queues the reads; `on_record(i, record)` runs on an IO
    /// thread as record `ids[i]` completes, in completion order, checked
    /// against its checksum as `check` says. Reads not started when
    /// `cancel` becomes true are skipped (`on_record` still runs).
    pub fn read(
        &self,
        ids: &[(u32, u32)],
        priority: Priority,
        check: Check,
        on_record: &OnRecord,
        cancel: Option<&Arc<AtomicBool>>,
    ) -> Result<()> {
        let locs = ids
            .iter()
            .map(|&(layer, expert)| self.dir.locate(layer, expert))
            .collect::<Result<Vec<_>>>()?;
        let jobs = locs
            .into_iter()
            .enumerate()
            .map(|(i, loc)| {
                let on_record = Arc::clone(on_record);
                ReadJob {
                    file: Arc::clone(&self.files[&loc.layer]),
                    tag: tag(loc.layer, loc.expert),
                    offset: loc.offset,
                    len: loc.len,
                    cancel: cancel.cloned(),
                    done: Box::new(move |r| {
                        let r = r.and_then(|buf| {
                            if check == Check::Here {
                                loc.verify(&buf)?;
                            }
                            Ok(Record { loc, buf })
                        });
                        on_record(i, r);
                    }),
                }
            })
            .collect();
        self.engine.submit(jobs, priority);
        Ok(())
    }

    /// Once `layer`'s experts are known to be `chosen`: its prefetch reads
    /// of chosen experts become demand reads (the rest of one started is
    /// read as demand), the others are withdrawn (returned as `(layer,
    /// expert)`, their `on_record` never run; one started stops after the
    /// segments already running). Other layers' prefetches are left alone.
    pub fn settle_prefetch(&self, layer: u32, chosen: &[u32]) -> Vec<(u32, u32)> {
        self.decide_prefetch(layer, chosen, Settle::Promote)
    }

    /// A newer guess for `layer` replaces an older one: its prefetch reads
    /// outside `guess` are withdrawn (as by [`Self::settle_prefetch`]),
    /// the rest stay prefetch reads.
    pub fn revise_prefetch(&self, layer: u32, guess: &[u32]) -> Vec<(u32, u32)> {
        self.decide_prefetch(layer, guess, Settle::Keep)
    }

    /// `listed` of `layer` get `listed_gets`; its other queued guesses are withdrawn.
    fn decide_prefetch(&self, layer: u32, listed: &[u32], listed_gets: Settle) -> Vec<(u32, u32)> {
        self.engine
            .settle_prefetch(|tag| {
                let (l, e) = untag(tag);
                if l != layer {
                    Settle::Keep
                } else if listed.contains(&e) {
                    listed_gets
                } else {
                    Settle::Withdraw
                }
            })
            .into_iter()
            .map(untag)
            .collect()
    }

    /// Blocking form of [`RecordReader::read`]: the records in completion
    /// order, as `(index in ids, record)`. Do not call it on an async worker.
    pub fn read_blocking(
        &self,
        ids: &[(u32, u32)],
        priority: Priority,
    ) -> Result<impl Iterator<Item = (usize, Result<Record>)> + use<>> {
        let (tx, rx) = mpsc::channel();
        let on_record: OnRecord = Arc::new(move |i, r| {
            // The receiver may be gone (caller stopped early): the record is dropped.
            let _ = tx.send((i, r));
        });
        self.read(ids, priority, Check::Here, &on_record, None)?;
        Ok(rx.into_iter().take(ids.len()))
    }
}

/// Where a record read is checked against its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Here, before `on_record` sees it: a corrupted record is an error
    /// naming its layer and expert.
    Here,
    /// By whoever the record is sent to (a FetchExperts client that checks
    /// each record as it puts it together): the bytes go on as read.
    ByReceiver,
}

/// A read's engine tag: its layer and expert.
fn tag(layer: u32, expert: u32) -> u64 {
    (u64::from(layer) << 32) | u64::from(expert)
}

fn untag(tag: u64) -> (u32, u32) {
    ((tag >> 32) as u32, tag as u32)
}
