//! The raw bound: the same layer files read with O_DIRECT by plain threads,
//! one per buffer given, each doing one expert-sized `pread` at a time
//! into its buffer, no engine, no checksum, no gRPC. The buffers live as
//! long as the benchmark, as the engine's pooled buffers live as long as
//! the store, and are laid out as the caller asks: huge pages as the
//! engine's are, or the 4 KiB pages of a plain heap buffer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use waste_format::ExpertsDir;
use waste_format::io::{AlignedBuf, BufferPool, DirectFile, DirectMode, Pages, PooledBuf};

use waste_store::error::{Error, Result};

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

/// `n` buffers laid out as `pages` says that hold any record of `dir`,
/// from a pool of their own.
pub fn buffers(dir: &ExpertsDir, n: usize, pages: Pages) -> Vec<PooledBuf> {
    let max_len = dir
        .index()
        .layers
        .iter()
        .map(|l| l.record_len as usize)
        .max()
        .unwrap_or(0);
    let pool = BufferPool::with_pages(n * AlignedBuf::capacity_with(max_len, pages), pages);
    (0..n).map(|_| pool.acquire(max_len)).collect()
}

/// Reads every (layer, expert) once, one thread per buffer of `bufs` (each
/// at least a record long); returns (bytes, seconds).
pub fn read_all(
    dir: &ExpertsDir,
    files: &HashMap<u32, Arc<DirectFile>>,
    reads: &[(u32, u32)],
    bufs: &mut [PooledBuf],
) -> Result<(u64, f64)> {
    let locs = reads
        .iter()
        .map(|&(l, e)| dir.locate(l, e))
        .collect::<waste_format::Result<Vec<_>>>()?;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let bytes = std::thread::scope(|s| {
        let workers: Vec<_> = bufs
            .iter_mut()
            .map(|buf| {
                let (locs, next) = (&locs, &next);
                s.spawn(move || -> Result<u64> {
                    let mut bytes = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(loc) = locs.get(i) else {
                            return Ok(bytes);
                        };
                        files[&loc.layer].read_into(loc.offset, loc.len, buf)?;
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
