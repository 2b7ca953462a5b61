//! The raw bound: the same layer files read with O_DIRECT by `qd` plain
//! threads, each doing one expert-sized `pread` at a time into its own
//! aligned buffer, no engine, no checksum, no gRPC. QD1 and QD16 of this
//! are what the served figures are divided by.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use waste_format::ExpertsDir;
use waste_format::io::{BufferPool, DirectFile, DirectMode};

use crate::error::{Error, Result};

/// Opens every layer file with O_DIRECT (required: the comparison needs it).
pub fn open_direct(dir: &ExpertsDir) -> Result<HashMap<u32, Arc<DirectFile>>> {
    dir.index()
        .layers
        .iter()
        .map(|l| {
            let f = DirectFile::open(&dir.dir().join(&l.file), DirectMode::Require)?;
            Ok((l.layer, Arc::new(f)))
        })
        .collect()
}

/// Reads every (layer, expert) once with `qd` threads; returns (bytes, seconds).
pub fn read_all(
    dir: &ExpertsDir,
    files: &HashMap<u32, Arc<DirectFile>>,
    reads: &[(u32, u32)],
    qd: usize,
) -> Result<(u64, f64)> {
    let locs = reads
        .iter()
        .map(|&(l, e)| dir.locate(l, e))
        .collect::<waste_format::Result<Vec<_>>>()?;
    let max_len = locs.iter().map(|l| l.len).max().unwrap_or(0);
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let bytes = std::thread::scope(|s| {
        let workers: Vec<_> = (0..qd.max(1))
            .map(|_| {
                s.spawn(|| -> Result<u64> {
                    let pool = BufferPool::new(max_len + 4096);
                    let mut buf = pool.acquire(max_len);
                    let mut bytes = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(loc) = locs.get(i) else {
                            return Ok(bytes);
                        };
                        files[&loc.layer].read_into(loc.offset, loc.len, &mut buf)?;
                        bytes += buf.len() as u64;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().map_err(|_| Error::Internal {
                    what: "raw read thread panicked".into(),
                })?
            })
            .sum::<Result<u64>>()
    })?;
    Ok((bytes, started.elapsed().as_secs_f64()))
}
