//! FetchExperts: validates a batch, queues its reads (in disk order, via the
//! IO engine), and streams each record as it completes, cut into chunks of
//! at most `max_chunk_bytes` that borrow the read buffer (`Bytes::from_owner`:
//! no copy until the gRPC encoder). The buffer returns to the engine's pool
//! when its last chunk is encoded, which is what bounds memory when a client
//! reads slowly. Dropping the stream (client gone) cancels unstarted reads.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use waste_format::ExpertsIndex;
use waste_format::io::{Check, OnRecord, Priority, Record};

use crate::error::{Error, Result};
use crate::store::{Permit, Store};

/// One chunk of one record, ready to encode.
#[derive(Debug, Clone)]
pub struct RecordChunk {
    pub layer: u32,
    pub expert: u32,
    pub offset: u64,
    pub total_len: u64,
    pub checksum: u64,
    pub data: Bytes,
}

/// Refuses empty, oversized or duplicate batches and unknown ids, before any read.
pub fn validate_fetch(index: &ExpertsIndex, ids: &[(u32, u32)], max: u32) -> Result<()> {
    let bad = |reason: String| Err(Error::BadRequest { reason });
    if ids.is_empty() {
        return bad("no experts requested".into());
    }
    if ids.len() > max as usize {
        return bad(format!(
            "{} experts requested, at most {max} per call",
            ids.len()
        ));
    }
    let mut seen = HashSet::with_capacity(ids.len());
    for &(layer, expert) in ids {
        let Some(l) = index.layer(layer) else {
            return bad(format!("layer {layer} has no experts in this store"));
        };
        if expert >= l.n_experts {
            return bad(format!(
                "layer {layer} expert {expert} is out of range (the layer has {})",
                l.n_experts
            ));
        }
        if !seen.insert((layer, expert)) {
            return bad(format!("layer {layer} expert {expert} requested twice"));
        }
    }
    Ok(())
}

impl Store {
    /// Starts a fetch: validation and admission errors come back before any
    /// chunk; read errors (DATA_LOSS naming layer and expert; a corrupted
    /// record only with `Check::Here`) end the stream.
    pub fn fetch(
        self: &Arc<Self>,
        ids: &[(u32, u32)],
        priority: Priority,
        check: Check,
    ) -> Result<FetchStream> {
        let permit = self.admit(priority)?;
        self.metrics()
            .fetch_requests
            .fetch_add(1, Ordering::Relaxed);
        let checked = validate_fetch(self.index(), ids, self.limits().max_fetch_experts);
        self.count_outcome(&checked);
        checked?;
        let (tx, rx) = mpsc::unbounded_channel();
        let on_record: OnRecord = Arc::new(move |_, r| {
            // A closed receiver means the client left; the record is dropped.
            let _ = tx.send(r);
        });
        let cancel = Arc::new(AtomicBool::new(false));
        self.reader()
            .read(ids, priority, check, &on_record, Some(&cancel))?;
        Ok(FetchStream {
            store: Arc::clone(self),
            rx,
            remaining: ids.len(),
            current: None,
            max_chunk: self.limits().max_chunk_bytes as usize,
            started: Instant::now(),
            cancel,
            done: false,
            _permit: permit,
        })
    }
}

/// The chunks of one fetch, in record-completion order.
#[derive(Debug)]
pub struct FetchStream {
    store: Arc<Store>,
    rx: mpsc::UnboundedReceiver<waste_format::Result<Record>>,
    remaining: usize,
    /// The record being cut: its bytes, header fields and next offset.
    current: Option<(Bytes, RecordChunk)>,
    max_chunk: usize,
    started: Instant,
    cancel: Arc<AtomicBool>,
    done: bool,
    _permit: Permit,
}

impl FetchStream {
    fn next_chunk(&mut self) -> Option<RecordChunk> {
        let (bytes, head) = self.current.as_mut()?;
        let start = head.offset as usize;
        let end = (start + self.max_chunk).min(bytes.len());
        let chunk = RecordChunk {
            offset: start as u64,
            data: bytes.slice(start..end),
            ..head.clone()
        };
        head.offset = end as u64;
        if end == bytes.len() {
            self.current = None;
        }
        Some(chunk)
    }

    fn finish(&mut self, ok: bool) {
        self.done = true;
        let m = self.store.metrics();
        if ok {
            m.fetch_latency.observe(self.started.elapsed());
        } else {
            m.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Stream for FetchStream {
    type Item = Result<RecordChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(c) = self.next_chunk() {
            return Poll::Ready(Some(Ok(c)));
        }
        if self.done || self.remaining == 0 {
            if !self.done {
                self.finish(true);
            }
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.finish(false);
                Poll::Ready(Some(Err(Error::Internal {
                    what: "the IO engine dropped a read".into(),
                })))
            }
            Poll::Ready(Some(Err(e))) => {
                self.finish(false);
                let e = Error::from(e);
                self.store.count_corrupt(&e);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(record))) => {
                self.remaining -= 1;
                let m = self.store.metrics();
                m.records_served.fetch_add(1, Ordering::Relaxed);
                m.bytes_served
                    .fetch_add(record.loc.len as u64, Ordering::Relaxed);
                let head = RecordChunk {
                    layer: record.loc.layer,
                    expert: record.loc.expert,
                    offset: 0,
                    total_len: record.loc.len as u64,
                    checksum: record.loc.checksum,
                    data: Bytes::new(),
                };
                self.current = Some((Bytes::from_owner(record.buf), head));
                let c = self.next_chunk().expect("records are never empty");
                Poll::Ready(Some(Ok(c)))
            }
        }
    }
}

impl Drop for FetchStream {
    fn drop(&mut self) {
        // Reads of a stream nobody reads any more are skipped.
        self.cancel.store(true, Ordering::Relaxed);
    }
}
