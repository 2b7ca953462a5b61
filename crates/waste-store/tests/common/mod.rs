//! Shared by the store's integration tests: a tiny store of real packed
//! expert records (small random experts quantized by the kernels) in a
//! tempdir, and a server started in-process on `127.0.0.1:0` (the listener
//! is bound before the server task starts, so no test waits or sleeps).

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use waste_format::experts::{ExpertActivation, LayerHeader};
use waste_format::io::{ChunkView, FetchedRecord, Reassembler};
use waste_format::{ExpertsIndex, LayerWriter};
use waste_kernels::ggml::GgmlType;
use waste_kernels::record::build_record_raw;
use waste_kernels::{Format, quantize_expert};
use waste_proto::store::v1::expert_store_client::ExpertStoreClient;
use waste_proto::store::v1::{
    ComputeExpertsRequest, ExpertChunk, ExpertId, FetchExpertsRequest, Route,
};
use waste_proto::transport::{Channel, Endpoint};
use waste_store::Config;

pub const LAYERS: [u32; 2] = [1, 3];
pub const N_EXPERTS: u32 = 6;
pub const D_MODEL: usize = 64;
pub const D_FF: usize = 96;

/// Deterministic pseudo-random values in [-scale, scale].
pub fn values(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// GGUF block types whose only scale is an f16 in a block's first two
/// bytes, which [`native_bytes`] can fill with random valid blocks.
pub const GGML_D_FIRST: [GgmlType; 4] = [
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
];

/// Packed bytes of a (rows, cols) matrix in a native (release) format:
/// random codes that decode to small finite values, then its scale plane
/// filled with one modest scale (layouts: waste_kernels::native).
pub fn native_bytes(format: Format, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let v = values(seed, rows * cols, 0.2);
    let mut codes: Vec<u8> = match format {
        Format::Bf16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect(),
        Format::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        // E4M3FN with the top exponent bit clear: |value| < 1, never NaN.
        Format::Fp8Block128 => v.iter().map(|x| (x.to_bits() >> 13) as u8 & 0xB7).collect(),
        Format::Int4G32 => (0..rows * 4 * cols.div_ceil(8))
            .map(|i| v[i % v.len()].to_bits() as u8)
            .collect(),
        Format::Mxfp4 => (0..rows * cols.div_ceil(2))
            .map(|i| (v[i % v.len()].to_bits() >> 7) as u8)
            .collect(),
        // Random blocks whose one f16 scale is their first two bytes (Q4_0,
        // Q5_0, Q8_0, IQ4_NL), set to a modest value.
        Format::Ggml(t) => {
            let (_, block) = t.block().expect("a decodable ggml type");
            let mut b: Vec<u8> = (0..format.packed_size(rows, cols).unwrap())
                .map(|i| (v[i % v.len()].to_bits() >> 9) as u8)
                .collect();
            for blk in b.chunks_exact_mut(block) {
                blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
            }
            b
        }
        other => panic!("{other:?} is not native"),
    };
    let total = format.packed_size(rows, cols).unwrap();
    let scale: Vec<u8> = match format {
        Format::Fp8Block128 => 0.05f32.to_le_bytes().to_vec(),
        Format::Int4G32 => half::bf16::from_f32(0.02).to_le_bytes().to_vec(),
        Format::Mxfp4 => vec![127 - 5], // 2^-5
        _ => vec![],
    };
    while codes.len() < total {
        codes.extend_from_slice(&scale);
    }
    assert_eq!(codes.len(), total, "{format:?} planes");
    codes
}

/// A ComputeExperts request: `x` (n_tokens x d_model f32, sent
/// little-endian) and (token, expert, weight) routes.
pub fn compute_request(
    layer: u32,
    n_tokens: u32,
    d_model: u32,
    x: &[f32],
    routes: &[(u32, u32, f32)],
) -> ComputeExpertsRequest {
    ComputeExpertsRequest {
        layer,
        n_tokens,
        d_model,
        activations: x
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        routes: routes
            .iter()
            .map(|&(token, expert, weight)| Route {
                token,
                expert,
                weight,
            })
            .collect(),
        stream: 0,
        expect_experts_index_sha256: String::new(),
    }
}

/// Writes `dir` as an experts folder: layers 1 and 3, six experts each,
/// every record in `formats` (gate, up, down): quantized from random
/// weights, or random native bytes for formats without a quantizer.
pub fn write_store(dir: &Path, formats: [Format; 3], activation: ExpertActivation) {
    write_store_shaped(dir, formats, activation, (D_MODEL, D_FF));
}

/// [`write_store`] with experts of `(d_model, d_ff)`.
pub fn write_store_shaped(
    dir: &Path,
    formats: [Format; 3],
    activation: ExpertActivation,
    (d_model, d_ff): (usize, usize),
) {
    let mut index = ExpertsIndex::new("test_moe", formats[0].name(), formats[0].id(), 2);
    index.activation = activation;
    for layer in LAYERS {
        let records: Vec<Vec<u8>> = (0..N_EXPERTS)
            .map(|e| {
                let seed = u64::from(layer * 100 + e);
                if !formats[0].has_quantizer() {
                    let shapes = [(d_ff, d_model), (d_ff, d_model), (d_model, d_ff)];
                    let m: Vec<Vec<u8>> = (0..3)
                        .map(|i| {
                            native_bytes(formats[i], shapes[i].0, shapes[i].1, seed * 3 + i as u64)
                        })
                        .collect();
                    let parts = [0, 1, 2].map(|i| (formats[i], &m[i][..]));
                    return build_record_raw(d_model, d_ff, parts).unwrap();
                }
                let w = |k: u64| values(seed * 3 + k, d_model * d_ff, 0.2);
                let (rec, _) =
                    quantize_expert(formats, d_model, d_ff, &w(0), &w(1), &w(2)).unwrap();
                rec
            })
            .collect();
        let h = LayerHeader::new(
            layer,
            N_EXPERTS,
            formats[0].id(),
            d_model as u32,
            d_ff as u32,
            records[0].len() as u64,
        );
        let mut w = LayerWriter::create(dir, h).unwrap();
        for r in &records {
            w.push(r).unwrap();
        }
        index.layers.push(w.finish().unwrap());
    }
    index.save(dir).unwrap();
    waste_format::completion::mark_complete(dir, "test").unwrap();
}

/// A FetchExpertsRequest for `ids` (layer, expert), at the default priority.
pub fn fetch_request(ids: &[(u32, u32)], client_verifies: bool) -> FetchExpertsRequest {
    FetchExpertsRequest {
        experts: ids
            .iter()
            .map(|&(layer, expert)| ExpertId { layer, expert })
            .collect(),
        priority: 0,
        expect_experts_index_sha256: String::new(),
        client_verifies,
    }
}

/// Puts one chunk as the generated client returns it into `asm`.
pub fn push_chunk(
    asm: &mut Reassembler,
    c: &ExpertChunk,
) -> waste_format::Result<Option<FetchedRecord>> {
    asm.push(ChunkView {
        layer: c.layer,
        expert: c.expert,
        offset: c.offset,
        total_len: c.total_len,
        checksum: c.checksum,
        data: &[&c.data],
    })
}

/// A tiny q8 store in a tempdir, and a config serving it.
pub fn tiny() -> (tempfile::TempDir, Config) {
    tiny_with([Format::Q8; 3], ExpertActivation::Silu)
}

pub fn tiny_with(
    formats: [Format; 3],
    activation: ExpertActivation,
) -> (tempfile::TempDir, Config) {
    shaped(formats, activation, (D_MODEL, D_FF))
}

/// A store of `(d_model, d_ff)` experts in a tempdir, and a config serving it.
pub fn shaped(
    formats: [Format; 3],
    activation: ExpertActivation,
    dims: (usize, usize),
) -> (tempfile::TempDir, Config) {
    let tmp = tempfile::tempdir().unwrap();
    let experts = tmp.path().join("experts");
    fs_err::create_dir_all(&experts).unwrap();
    write_store_shaped(&experts, formats, activation, dims);
    let cfg = Config {
        experts,
        metrics_log_secs: 0,
        ..Config::default()
    };
    (tmp, cfg)
}

/// Flips one bit inside the stored record of `layer`/`expert`.
pub fn corrupt_record(cfg: &Config, layer: u32, expert: u32) {
    let loc = waste_format::ExpertsDir::open(&cfg.experts)
        .unwrap()
        .locate(layer, expert)
        .unwrap();
    let path = cfg
        .experts
        .join(waste_format::experts::layer_file_name(layer));
    let mut bytes = fs_err::read(&path).unwrap();
    bytes[loc.offset as usize + 1000] ^= 0x20;
    fs_err::write(&path, &bytes).unwrap();
}

pub fn experts_dir(cfg: &Config) -> PathBuf {
    cfg.experts.clone()
}

/// A store running in-process; cancel `shutdown` and await `handle` to stop it.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub shutdown: CancellationToken,
    pub handle: tokio::task::JoinHandle<waste_store::Result<()>>,
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A channel with the transport settings the store documents.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.url())
            .unwrap()
            .max_frame_size(Some(waste_store::MAX_FRAME_SIZE))
            .connect()
            .await
            .unwrap()
    }

    /// A client whose 16 KiB flow-control windows keep the server from
    /// sending a whole stream ahead of the reader (calls stay in flight).
    pub async fn slow_client(&self) -> ExpertStoreClient<Channel> {
        let channel = Endpoint::from_shared(self.url())
            .unwrap()
            .initial_stream_window_size(Some(16 << 10))
            .initial_connection_window_size(Some(16 << 10))
            .connect()
            .await
            .unwrap();
        ExpertStoreClient::new(channel)
    }

    pub async fn client(&self) -> ExpertStoreClient<Channel> {
        ExpertStoreClient::new(self.channel().await).max_decoding_message_size(64 << 20)
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.handle.await.unwrap().unwrap();
    }
}

pub async fn start(cfg: Config) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(waste_store::run(cfg, listener, shutdown.clone()));
    Running {
        addr,
        shutdown,
        handle,
    }
}
