//! The IO engine reads records byte-identical to the files, in any batch
//! shape, with O_DIRECT where the file system allows it; a corrupted record
//! comes back as an error naming its layer and expert while the rest of the
//! batch still arrives; a tight in-flight bound still completes big batches.

use std::path::Path;

use waste_format::experts::{LayerHeader, layer_file_name};
use waste_format::io::{Check, DirectMode, EngineConfig, OnRecord, Priority, RecordReader};
use waste_format::{Error, ExpertsIndex, LayerWriter};

fn record(layer: u32, expert: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(layer * 7 + expert * 13) as u8
                ^ (i >> 8) as u8
        })
        .collect()
}

fn write_experts(dir: &Path, len: u64) {
    let mut index = ExpertsIndex::new("test", "q3", 1, 2);
    for layer in [1u32, 3] {
        let mut w = LayerWriter::create(dir, LayerHeader::new(layer, 6, 1, 64, 32, len)).unwrap();
        for e in 0..6 {
            w.push(&record(layer, e, len as usize)).unwrap();
        }
        index.layers.push(w.finish().unwrap());
    }
    index.save(dir).unwrap();
}

#[test]
fn batches_read_back_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 10_000);
    // Whole reads, segmented reads (10,000 bytes in 4 KiB segments), a tight pool.
    for (threads, inflight, segment) in [
        (1, 1 << 20, 0),
        (16, 1 << 20, 0),
        (4, 4096, 0),
        (3, 1 << 20, 4096),
        (16, 16384, 4096),
    ] {
        let cfg = EngineConfig {
            threads,
            inflight_bytes: inflight,
            segment_bytes: segment,
            ..EngineConfig::default()
        };
        let reader = RecordReader::open(tmp.path(), DirectMode::Prefer, cfg).unwrap();
        let ids: Vec<(u32, u32)> = [(3, 5), (1, 0), (3, 0), (1, 5), (1, 2), (3, 2)].into();
        let mut seen = vec![false; ids.len()];
        for (i, r) in reader.read_blocking(&ids, Priority::Demand).unwrap() {
            let r = r.unwrap();
            assert_eq!((r.loc.layer, r.loc.expert), ids[i]);
            assert_eq!(&r.buf[..], &record(ids[i].0, ids[i].1, 10_000)[..]);
            assert_eq!(r.buf.as_ptr() as usize % 4096, 0);
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(reader.engine().pool().in_use_bytes(), 0, "buffers returned");
    }
}

/// Guesses and demand mixed, records in 4 KiB segments, some guesses
/// settled while their reads may be running: every record that is read
/// arrives whole and byte-identical, and every buffer goes back.
#[test]
fn segmented_prefetch_and_demand_reads_arrive_byte_identical() {
    use std::sync::{Arc, mpsc};
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 10_000);
    for prefetch_reads in [1, 2, 16] {
        let cfg = EngineConfig {
            threads: 4,
            segment_bytes: 4096,
            prefetch_reads,
            ..EngineConfig::default()
        };
        let reader = RecordReader::open(tmp.path(), DirectMode::Prefer, cfg).unwrap();
        let (tx, rx) = mpsc::channel();
        let on_record: OnRecord = Arc::new(move |_, r| {
            let r = r.unwrap();
            tx.send((r.loc.layer, r.loc.expert, r.buf.to_vec()))
                .unwrap();
        });
        let guesses: Vec<(u32, u32)> = (0..6).map(|e| (3, e)).collect();
        reader
            .read(&guesses, Priority::Prefetch, Check::Here, &on_record, None)
            .unwrap();
        reader
            .read(
                &[(1, 2), (1, 4)],
                Priority::Demand,
                Check::Here,
                &on_record,
                None,
            )
            .unwrap();
        let withdrawn = reader.settle_prefetch(3, &[1, 5]);
        assert!(withdrawn.iter().all(|&(l, e)| l == 3 && e != 1 && e != 5));
        let expected = 2 + guesses.len() - withdrawn.len();
        drop(on_record);
        let got: Vec<_> = rx.iter().collect();
        assert_eq!(got.len(), expected);
        for (layer, expert, bytes) in got {
            assert!(!withdrawn.contains(&(layer, expert)));
            assert_eq!(bytes, record(layer, expert, 10_000), "({layer}, {expert})");
        }
        drop(reader);
    }
}

#[test]
fn out_of_range_ids_fail_before_any_read() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    let reader =
        RecordReader::open(tmp.path(), DirectMode::Prefer, EngineConfig::default()).unwrap();
    assert!(matches!(
        reader.read_blocking(&[(1, 0), (1, 6)], Priority::Demand),
        Err(Error::ExpertOutOfRange { .. })
    ));
    assert!(matches!(
        reader.read_blocking(&[(2, 0)], Priority::Prefetch),
        Err(Error::LayerNotFound { layer: 2 })
    ));
}

#[test]
fn a_corrupted_record_is_named_and_the_rest_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    let path = tmp.path().join(layer_file_name(3));
    let mut bytes = fs_err::read(&path).unwrap();
    bytes[4096 + 4 * 8192 + 17] ^= 0x10;
    fs_err::write(&path, &bytes).unwrap();
    // Whole reads, and segmented ones (5000 bytes in two 4 KiB segments).
    for segment_bytes in [0, 4096] {
        let cfg = EngineConfig {
            segment_bytes,
            ..EngineConfig::default()
        };
        let reader = RecordReader::open(tmp.path(), DirectMode::Prefer, cfg).unwrap();
        let results: Vec<_> = reader
            .read_blocking(&[(3, 3), (3, 4), (3, 5)], Priority::Demand)
            .unwrap()
            .collect();
        assert_eq!(results.len(), 3);
        for (i, r) in results {
            match (i, r) {
                (1, Err(e)) => {
                    assert!(
                        matches!(
                            e,
                            Error::ChecksumMismatch {
                                layer: 3,
                                expert: 4,
                                ..
                            }
                        ),
                        "{e}"
                    );
                    assert!(e.to_string().contains("layer 3 expert 4"));
                }
                (1, Ok(_)) => panic!("corruption not detected"),
                (_, r) => drop(r.unwrap()),
            }
        }
    }
}

#[test]
fn direct_mode_is_used_where_supported() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    let buffered =
        RecordReader::open(tmp.path(), DirectMode::Off, EngineConfig::default()).unwrap();
    assert!(!buffered.is_direct());
    let preferred =
        RecordReader::open(tmp.path(), DirectMode::Prefer, EngineConfig::default()).unwrap();
    // tmpfs refuses O_DIRECT; then Require must fail and Prefer falls back.
    let required = RecordReader::open(tmp.path(), DirectMode::Require, EngineConfig::default());
    assert_eq!(required.is_ok(), preferred.is_direct());
}

/// An engine whose only IO thread is held inside the `on_record` of a
/// demand read of (1, 0) until the returned sender is used; completions
/// (layer, expert) arrive on the receiver in order.
fn held_engine(
    dir: &Path,
    threads: usize,
) -> (
    RecordReader,
    OnRecord,
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<(u32, u32)>,
) {
    use std::sync::{Arc, Mutex, mpsc};
    let cfg = EngineConfig {
        threads,
        prefetch_reads: 1,
        ..EngineConfig::default()
    };
    let reader = RecordReader::open(dir, DirectMode::Prefer, cfg).unwrap();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let gate = Mutex::new(gate_rx);
    let done = Mutex::new(done_tx);
    let on_record: OnRecord = Arc::new(move |_, r| {
        let r = r.unwrap();
        let key = (r.loc.layer, r.loc.expert);
        if key == (1, 0) {
            gate.lock().unwrap().recv().unwrap();
        }
        done.lock().unwrap().send(key).unwrap();
    });
    reader
        .read(&[(1, 0)], Priority::Demand, Check::Here, &on_record, None)
        .unwrap();
    (reader, on_record, gate_tx, done_rx)
}

#[test]
fn settled_prefetches_are_promoted_or_withdrawn_and_the_rest_keep_waiting() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    let (reader, on_record, gate, done) = held_engine(tmp.path(), 1);
    let guesses = [(3, 0), (3, 1), (3, 2), (1, 4)];
    reader
        .read(&guesses, Priority::Prefetch, Check::Here, &on_record, None)
        .unwrap();
    let mut withdrawn = reader.settle_prefetch(3, &[1]);
    withdrawn.sort_unstable();
    assert_eq!(withdrawn, [(3, 0), (3, 2)]);
    gate.send(()).unwrap();
    let order: Vec<_> = (0..3).map(|_| done.recv().unwrap()).collect();
    // The held demand read, the promoted guess (now demand), the kept one.
    assert_eq!(order, [(1, 0), (3, 1), (1, 4)]);
    assert!(
        done.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "a withdrawn read ran"
    );
}

/// A newer guess for a layer withdraws the older guess's queued reads it
/// does not repeat; the ones it repeats stay prefetch reads (after demand).
#[test]
fn a_revised_guess_withdraws_the_queued_reads_it_drops() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    let (reader, on_record, gate, done) = held_engine(tmp.path(), 1);
    reader
        .read(
            &[(3, 0), (3, 1), (1, 4)],
            Priority::Prefetch,
            Check::Here,
            &on_record,
            None,
        )
        .unwrap();
    reader
        .read(&[(1, 5)], Priority::Demand, Check::Here, &on_record, None)
        .unwrap();
    assert_eq!(reader.revise_prefetch(3, &[1, 2]), [(3, 0)]);
    gate.send(()).unwrap();
    let order: Vec<_> = (0..4).map(|_| done.recv().unwrap()).collect();
    // A guess is queued in the order given.
    assert_eq!(order, [(1, 0), (1, 5), (3, 1), (1, 4)]);
    assert!(
        done.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "a withdrawn read ran"
    );
}

#[test]
fn a_free_thread_takes_a_prefetch_while_demand_runs_but_not_while_it_waits() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path(), 5000);
    // The other thread is held inside a demand read: the guess may use the
    // free one (the device's queue stays full as a layer's reads drain).
    let (reader, on_record, gate, done) = held_engine(tmp.path(), 2);
    reader
        .read(&[(1, 4)], Priority::Prefetch, Check::Here, &on_record, None)
        .unwrap();
    assert_eq!(
        done.recv_timeout(std::time::Duration::from_secs(10)),
        Ok((1, 4)),
        "the guess did not start on the free thread"
    );
    // Now the free thread is held too: demand queued behind both goes
    // before a guess queued earlier.
    let (reader, on_record, gate2, done2) = held_engine(tmp.path(), 1);
    reader
        .read(&[(3, 1)], Priority::Prefetch, Check::Here, &on_record, None)
        .unwrap();
    reader
        .read(&[(3, 2)], Priority::Demand, Check::Here, &on_record, None)
        .unwrap();
    gate2.send(()).unwrap();
    assert_eq!(done2.recv().unwrap(), (1, 0));
    assert_eq!(done2.recv().unwrap(), (3, 2));
    assert_eq!(done2.recv().unwrap(), (3, 1));
    gate.send(()).unwrap();
    assert_eq!(done.recv().unwrap(), (1, 0));
}
