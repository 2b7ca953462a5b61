//! The tonic ExpertStore service: decode the request, call the store's
//! domain function, encode the answer. Errors leave only through `?` and
//! `status.rs`.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::{Stream, StreamExt};
use waste_format::io::{Check, Priority};
use waste_proto::store::v1::expert_store_server::ExpertStore;
use waste_proto::store::v1::{
    ChecksumAlgorithm, ComputeExpertsRequest, ComputeExpertsResponse, ExpertChunk,
    FetchExpertsRequest, FetchPriority, InfoRequest, InfoResponse, MoeLayer,
    PrefetchExpertsRequest, PrefetchExpertsResponse,
};
use waste_proto::{Request, Response, Status};

use crate::compute::ComputeRequest;
use crate::store::Store;

#[derive(Debug, Clone)]
pub struct ExpertStoreService {
    store: Arc<Store>,
    /// What `Info.bulk_fetch` says.
    bulk_fetch: bool,
}

impl ExpertStoreService {
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            bulk_fetch: false,
        }
    }

    /// Tells clients (`Info.bulk_fetch`) that the bulk channel is served
    /// beside this service.
    pub fn offering_bulk(mut self, on: bool) -> Self {
        self.bulk_fetch = on;
        self
    }
}

/// `Info` from the store's index and limits.
pub fn info_response(store: &Store, bulk_fetch: bool) -> InfoResponse {
    let index = store.index();
    let l = store.limits();
    let version = index.format_version;
    InfoResponse {
        model_name: store.model_name().to_string(),
        architecture: index.model_type.clone(),
        manifest_hash: store.manifest_hash().to_string(),
        format_version_major: version.major.into(),
        format_version_minor: version.minor.into(),
        n_moe_layers: index.layers.len() as u32,
        n_experts_per_layer: index.layers.first().map_or(0, |l| l.n_experts),
        top_k: index.top_k,
        expert_format: index.expert_format.clone(),
        layers: index
            .layers
            .iter()
            .map(|l| MoeLayer {
                layer: l.layer,
                n_experts: l.n_experts,
                d_model: l.d_model,
                d_ff: l.d_ff,
                record_bytes: l.record_len,
            })
            .collect(),
        checksum_algorithm: ChecksumAlgorithm::Xxh3.into(),
        max_chunk_bytes: l.max_chunk_bytes,
        max_fetch_experts: l.max_fetch_experts,
        max_compute_tokens: l.max_compute_tokens,
        max_compute_routes: l.max_compute_routes,
        max_message_bytes: l.max_message_bytes.into(),
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        experts_index_sha256: store.manifest_hash().to_string(),
        bulk_fetch,
    }
}

/// The ids, priority and checksum check of a FetchExperts request.
pub(crate) fn fetch_args(req: &FetchExpertsRequest) -> (Vec<(u32, u32)>, Priority, Check) {
    let ids = req.experts.iter().map(|e| (e.layer, e.expert)).collect();
    let priority = match req.priority() {
        FetchPriority::Prefetch => Priority::Prefetch,
        FetchPriority::Demand | FetchPriority::Unspecified => Priority::Demand,
    };
    let check = if req.client_verifies {
        Check::ByReceiver
    } else {
        Check::Here
    };
    (ids, priority, check)
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<ExpertChunk, Status>> + Send>>;

#[tonic::async_trait]
impl ExpertStore for ExpertStoreService {
    async fn info(&self, _req: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        Ok(Response::new(info_response(&self.store, self.bulk_fetch)))
    }

    type FetchExpertsStream = ChunkStream;

    /// The daemon answers FetchExperts in [`crate::fetch_route`], without
    /// tonic's encode copy; this is the same call through tonic's codec,
    /// for a server built on the generated service alone.
    async fn fetch_experts(
        &self,
        req: Request<FetchExpertsRequest>,
    ) -> Result<Response<ChunkStream>, Status> {
        let req = req.into_inner();
        self.store
            .check_identity(&req.expect_experts_index_sha256)?;
        let (ids, priority, check) = fetch_args(&req);
        let stream = self.store.fetch(&ids, priority, check)?.map(|r| {
            let c = r?;
            Ok(ExpertChunk {
                layer: c.layer,
                expert: c.expert,
                offset: c.offset,
                total_len: c.total_len,
                checksum: c.checksum,
                data: c.data,
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn prefetch_experts(
        &self,
        req: Request<PrefetchExpertsRequest>,
    ) -> Result<Response<PrefetchExpertsResponse>, Status> {
        let req = req.into_inner();
        self.store
            .check_identity(&req.expect_experts_index_sha256)?;
        let ids: Vec<(u32, u32)> = req.experts.iter().map(|e| (e.layer, e.expert)).collect();
        let (staged, bytes_queued) = self.store.prefetch(req.stream, &ids)?;
        Ok(Response::new(PrefetchExpertsResponse {
            staged,
            bytes_queued,
        }))
    }

    async fn compute_experts(
        &self,
        req: Request<ComputeExpertsRequest>,
    ) -> Result<Response<ComputeExpertsResponse>, Status> {
        let req = req.into_inner();
        self.store
            .check_identity(&req.expect_experts_index_sha256)?;
        let (n_tokens, d_model) = (req.n_tokens, req.d_model);
        let out = self.store.compute(ComputeRequest::from(req)).await?;
        let output: Vec<u8> = out.output.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(Response::new(ComputeExpertsResponse {
            n_tokens,
            d_model,
            output: output.into(),
            disk_bytes_read: out.disk_bytes_read,
            experts_used: out.experts_used,
            experts_in_ram: out.experts_in_ram,
        }))
    }
}
