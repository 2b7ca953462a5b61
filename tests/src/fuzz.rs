//! Fuzz entry points: one function per target, each taking arbitrary bytes. An error is the
//! expected answer to garbage; a panic, an abort or a sanitizer report is the bug.
//! `fuzz/fuzz_targets/<target>.rs` calls these under libFuzzer (`scripts/fuzz.sh`), and
//! `tests/fuzz_replay.rs` replays the checked-in corpus and every crash file through them on
//! the stable toolchain, so a fixed crash stays fixed.
//!
//! Readers that only take a path (safetensors shards, the store's JSON files, a GGUF
//! checkpoint) get the bytes through a per-thread scratch folder.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use prost::Message;
use waste_convert::GgufCheckpoint;
use waste_convert::gguf::GgufHeader;
use waste_format::{Checkpoint, ExpertsDir, ExpertsIndex, LayerEntry, Manifest};
use waste_kernels::record::{PackedExpert, RecordHeader};
use waste_kernels::{Activation, ExpertFfn, Format};
use waste_node::Node;
use waste_proto::node::v1 as node_pb;
use waste_proto::store::v1 as store_pb;
use waste_store::compute::ComputeRequest;

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` and corpus folder.
pub const TARGETS: &[(&str, Entry)] = &[
    ("safetensors", safetensors),
    ("gguf", gguf),
    ("store_index", store_index),
    ("expert_record", expert_record),
    ("store_request", store_request),
    ("node_request", node_request),
    ("http_request", http_request),
    ("fetch_chunks", fetch_chunks),
];

/// A fuzz entry function.
pub type Entry = fn(&[u8]);

/// Tensors larger than this are not loaded: the header is the target, not dequantization
/// throughput.
const MAX_LOAD_ELEMENTS: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// Writes `data` to `name` in this thread's scratch folder and returns the folder.
fn scratch(name: &str, data: &[u8]) -> PathBuf {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let dir = s.get_or_insert_with(|| tempfile::tempdir().expect("create a scratch folder"));
        fs_err::write(dir.path().join(name), data).expect("write into the scratch folder");
        dir.path().to_path_buf()
    })
}

/// A safetensors file as a single-file checkpoint: header, layout classification, and the
/// bytes of every small tensor decoded.
pub fn safetensors(data: &[u8]) {
    let dir = scratch("model.safetensors", data);
    let Ok(ckpt) = Checkpoint::open(dir.join("model.safetensors")) else {
        return;
    };
    for name in ckpt.stored_names() {
        let _ = ckpt.stored(name);
    }
    for name in ckpt.tensor_names() {
        if let Ok(info) = ckpt.info(name)
            && info
                .shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .is_some_and(|n| n <= MAX_LOAD_ELEMENTS)
        {
            let _ = ckpt.load(name);
        }
    }
}

/// GGUF header and metadata: the in-memory parse, then (for a file that parses) the
/// checkpoint view: config and tokenizer derived from the metadata, tensor shapes.
pub fn gguf(data: &[u8]) {
    if GgufHeader::parse(Path::new("fuzz.gguf"), data).is_err() {
        return;
    }
    let dir = scratch("model.gguf", data);
    let Ok(ckpt) = GgufCheckpoint::open(dir.join("model.gguf")) else {
        return;
    };
    let _ = ckpt.config_json();
    let _ = ckpt.tokenizer_json();
    for name in ckpt.tensor_names() {
        let _ = ckpt.info(name);
    }
}

/// The store's JSON files and layer-file header: the same bytes as `experts/index.json`,
/// as `manifest.json` and as a layer file's header.
pub fn store_index(data: &[u8]) {
    let dir = scratch("index.json", data);
    if ExpertsIndex::load(&dir).is_ok() {
        let _ = ExpertsDir::open(&dir);
    }
    let dir = scratch("manifest.json", data);
    let _ = Manifest::load_verified(&dir);
    let _ = waste_format::experts::LayerHeader::decode(data, Path::new("fuzz.bin"));
}

/// An expert record as the store serves it and the node consumes it: header, bounds of the
/// three matrices, then one row through the FFN.
pub fn expert_record(data: &[u8]) {
    let _ = RecordHeader::from_bytes(data);
    let Ok(expert) = PackedExpert::parse(data) else {
        return;
    };
    let d = expert.d_model();
    let x = vec![0.5f32; d];
    let mut out = vec![0f32; d];
    let _ = expert.forward(&x, 1, Activation::Silu, &mut out);
}

/// The store's request checks on a decoded FetchExperts or ComputeExperts message (first
/// byte: which), against a two-layer store.
pub fn store_request(data: &[u8]) {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    let index = store_index_fixture();
    let limits = waste_store::Limits::default();
    if which & 1 == 0 {
        let Ok(req) = store_pb::FetchExpertsRequest::decode(msg) else {
            return;
        };
        let ids: Vec<(u32, u32)> = req.experts.iter().map(|e| (e.layer, e.expert)).collect();
        let _ = req.priority();
        let _ = waste_store::fetch::validate_fetch(index, &ids, limits.max_fetch_experts);
    } else {
        let Ok(req) = store_pb::ComputeExpertsRequest::decode(msg) else {
            return;
        };
        // As the service converts it.
        let req = ComputeRequest::from(req);
        let _ = waste_store::compute::plan_compute(index, &limits, &req);
    }
}

fn store_index_fixture() -> &'static ExpertsIndex {
    static INDEX: OnceLock<ExpertsIndex> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = ExpertsIndex::new("qwen3_moe", "q8", Format::Q8.id(), 2);
        for layer in [0, 2] {
            index.layers.push(LayerEntry {
                layer,
                file: format!("layer_{layer}.bin"),
                n_experts: 8,
                d_model: 64,
                d_ff: 32,
                record_len: 8192,
                stride: 8192,
                data_offset: 4096,
                checksums: vec![0; 8],
            });
        }
        index
    })
}

/// The node's request-to-job conversion on a decoded GenerateRequest or TokenizeRequest
/// (first byte: which), against a node with a tokenizer and chat template.
pub fn node_request(data: &[u8]) {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    let node = fuzz_node();
    if which & 1 == 0 {
        if let Ok(req) = node_pb::GenerateRequest::decode(msg) {
            let _ = waste_node::request::job(node, &req);
        }
    } else if let Ok(req) = node_pb::TokenizeRequest::decode(msg) {
        let _ = waste_node::request::tokenize(node, &req);
    }
}

/// An OpenAI request body (first byte: chat or text completion) through the node's HTTP
/// parsing and checks, the ones the handler runs before generating.
pub fn http_request(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let kind = if which & 1 == 0 {
        waste_node::http::Kind::Chat
    } else {
        waste_node::http::Kind::Text
    };
    let _ = waste_node::http::check(fuzz_node(), kind, body);
}

/// The node's side of FetchExperts: the store's gRPC-framed `ExpertChunk` bytes, cut into
/// DATA frames of the length the first byte gives, through the chunk decoder and the
/// record reassembler (expecting experts 0..4 of layer 1, records of 8 KiB).
pub fn fetch_chunks(data: &[u8]) {
    use waste_format::io::{BufferPool, ChunkView, Reassembler};
    use waste_proto::fetch::wire::ChunkDecoder;
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let mut decoder = ChunkDecoder::new(1 << 16);
    // Room for two of the four records: both ways of putting one together.
    let pool = BufferPool::new(2 * 8192);
    let mut records = Reassembler::new((0..4).map(|e| (1, e, 8192))).in_pool(&pool);
    for frame in stream.chunks(usize::from(cut).max(1)) {
        decoder.push(bytes::Bytes::copy_from_slice(frame));
        loop {
            let chunk = match decoder.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(_) => return,
            };
            let data: Vec<&[u8]> = chunk.data.iter().map(|d| &d[..]).collect();
            let view = ChunkView {
                layer: chunk.head.layer,
                expert: chunk.head.expert,
                offset: chunk.head.offset,
                total_len: chunk.head.total_len,
                checksum: chunk.head.checksum,
                data: &data,
            };
            if records.push(view).is_err() {
                return;
            }
        }
    }
    let _ = records.finish();
}

/// A local-mode node on fixture `qwen3_moe_tiny` with a byte-level tokenizer and a chat
/// template, loaded once per process. Its folders and runtime live as long as the process.
fn fuzz_node() -> &'static Node {
    type Loaded = (Arc<Node>, tempfile::TempDir, tokio::runtime::Runtime);
    static NODE: OnceLock<Loaded> = OnceLock::new();
    &NODE
        .get_or_init(|| {
            let tmp = tempfile::tempdir().expect("create the node's folder");
            let cfg = crate::harness::text_node_config("qwen3_moe_tiny", tmp.path())
                .expect("write the node's folders");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build a runtime");
            let node = rt.block_on(Node::load(cfg)).expect("load the fuzz node");
            (node, tmp, rt)
        })
        .0
}
