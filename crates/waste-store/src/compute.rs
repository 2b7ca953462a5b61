//! ComputeExperts: the routed experts of one layer run next to the disk.
//! A request is checked completely before any read; then the layer's
//! experts are taken from its stream's PrefetchExperts guess where it holds
//! them (`staging.rs`; a guessed read that failed is read again) or read
//! through the engine, and run as they arrive (one expert computes while
//! later ones are still being read), each on all the tokens that chose it,
//! on a blocking thread (the kernels parallelise with rayon). Outputs are
//! then summed per token in ascending expert order, `out += w * y`, as the
//! model's own MoE combine does, so compute-at-store reproduces the node's
//! local result.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::mpsc;
use waste_format::io::{Check, OnRecord, Priority, Record};
use waste_format::{ExpertsIndex, LayerEntry};
use waste_kernels::{Activation, ExpertFfn, PackedExpert};

use crate::config::Limits;
use crate::error::{Error, Result};
use crate::store::Store;

/// One (token, expert) routing decision and its final gate weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    pub token: u32,
    pub expert: u32,
    pub weight: f32,
}

/// A ComputeExperts request, decoded.
#[derive(Debug, Clone)]
pub struct ComputeRequest {
    pub layer: u32,
    pub n_tokens: u32,
    pub d_model: u32,
    /// n_tokens x d_model f32, little-endian.
    pub activations: bytes::Bytes,
    pub routes: Vec<Route>,
    /// The generation it serves: records come from this stream's guess.
    pub stream: u64,
}

impl From<waste_proto::store::v1::ComputeExpertsRequest> for ComputeRequest {
    /// The request as decoded from the wire; checking it is [`plan_compute`]'s.
    fn from(req: waste_proto::store::v1::ComputeExpertsRequest) -> Self {
        Self {
            layer: req.layer,
            n_tokens: req.n_tokens,
            d_model: req.d_model,
            routes: req
                .routes
                .iter()
                .map(|r| Route {
                    token: r.token,
                    expert: r.expert,
                    weight: r.weight,
                })
                .collect(),
            activations: req.activations,
            stream: req.stream,
        }
    }
}

/// The result: per token the weighted sum of its experts' outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeOutput {
    /// (n_tokens, d_model).
    pub output: Vec<f32>,
    pub disk_bytes_read: u64,
    pub experts_used: u32,
    /// Experts whose prefetched record had landed when the request came.
    pub experts_in_ram: u32,
}

/// A checked request: the input rows and, per expert in ascending order,
/// the tokens (ascending) that chose it with their weights.
#[derive(Debug, Clone)]
pub struct ComputePlan {
    pub layer: u32,
    pub n_tokens: usize,
    pub d_model: usize,
    pub d_ff: usize,
    /// (n_tokens, d_model).
    pub x: Vec<f32>,
    pub experts: Vec<(u32, Vec<(u32, f32)>)>,
}

/// Checks every field against the layer and the limits (INVALID_ARGUMENT).
pub fn plan_compute(
    index: &ExpertsIndex,
    limits: &Limits,
    req: &ComputeRequest,
) -> Result<ComputePlan> {
    let bad = |reason: String| Err(Error::BadRequest { reason });
    let Some(l): Option<&LayerEntry> = index.layer(req.layer) else {
        return bad(format!("layer {} has no experts in this store", req.layer));
    };
    if req.n_tokens == 0 || req.n_tokens > limits.max_compute_tokens {
        return bad(format!(
            "n_tokens {} is not in 1..={}",
            req.n_tokens, limits.max_compute_tokens
        ));
    }
    if req.d_model != l.d_model {
        return bad(format!(
            "d_model {} but layer {} has {}",
            req.d_model, req.layer, l.d_model
        ));
    }
    let (n, d) = (req.n_tokens as usize, req.d_model as usize);
    if req.activations.len() as u64 != 4 * n as u64 * d as u64 {
        return bad(format!(
            "activations hold {} bytes, {n} x {d} f32 need {}",
            req.activations.len(),
            4 * n * d
        ));
    }
    if req.routes.len() > limits.max_compute_routes as usize {
        return bad(format!(
            "{} routes, at most {} per call",
            req.routes.len(),
            limits.max_compute_routes
        ));
    }
    let mut seen = HashSet::with_capacity(req.routes.len());
    let mut by_expert: BTreeMap<u32, Vec<(u32, f32)>> = BTreeMap::new();
    for r in &req.routes {
        if r.token >= req.n_tokens {
            return bad(format!(
                "route token {} is not below n_tokens {}",
                r.token, req.n_tokens
            ));
        }
        if r.expert >= l.n_experts {
            return bad(format!(
                "layer {} expert {} is out of range (the layer has {})",
                req.layer, r.expert, l.n_experts
            ));
        }
        if !r.weight.is_finite() {
            return bad(format!(
                "route (token {}, expert {}) has weight {}",
                r.token, r.expert, r.weight
            ));
        }
        if !seen.insert((r.token, r.expert)) {
            return bad(format!(
                "route (token {}, expert {}) appears twice",
                r.token, r.expert
            ));
        }
        by_expert
            .entry(r.expert)
            .or_default()
            .push((r.token, r.weight));
    }
    let experts = by_expert
        .into_iter()
        .map(|(e, mut rows)| {
            rows.sort_by_key(|&(t, _)| t);
            (e, rows)
        })
        .collect();
    let x = req
        .activations
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(ComputePlan {
        layer: req.layer,
        n_tokens: n,
        d_model: d,
        d_ff: l.d_ff as usize,
        x,
        experts,
    })
}

/// Runs one expert record on its tokens' rows: y, (rows, d_model). Errors
/// name the layer and expert if the record is not an expert of the
/// layer's shape.
pub fn expert_output(
    plan: &ComputePlan,
    expert: u32,
    rows: &[(u32, f32)],
    record: &[u8],
    act: Activation,
) -> Result<Vec<f32>> {
    let bad = |reason: String| Error::BadRecord {
        layer: plan.layer,
        expert,
        reason,
    };
    let e = PackedExpert::parse(record).map_err(|e| bad(e.to_string()))?;
    if (e.d_model(), e.d_ff()) != (plan.d_model, plan.d_ff) {
        return Err(bad(format!(
            "record is {}x{}, the layer is {}x{}",
            e.d_model(),
            e.d_ff(),
            plan.d_model,
            plan.d_ff
        )));
    }
    let d = plan.d_model;
    let x: Vec<f32> = rows
        .iter()
        .flat_map(|&(t, _)| plan.x[t as usize * d..][..d].iter().copied())
        .collect(); // (rows, d_model)
    let mut y = vec![0f32; rows.len() * d]; // (rows, d_model)
    e.forward(&x, rows.len(), act, &mut y)
        .map_err(|e| bad(e.to_string()))?;
    Ok(y)
}

/// Adds `w * y` of one expert into `out` (n_tokens, d_model), per row.
fn add_weighted(rows: &[(u32, f32)], y: &[f32], d: usize, out: &mut [f32]) {
    for (&(t, w), yr) in rows.iter().zip(y.chunks(d)) {
        for (o, v) in out[t as usize * d..][..d].iter_mut().zip(yr) {
            *o += v * w;
        }
    }
}

impl Store {
    /// Serves one ComputeExperts request.
    pub async fn compute(self: &Arc<Self>, req: ComputeRequest) -> Result<ComputeOutput> {
        let started = Instant::now();
        let _permit = self.admit(Priority::Demand)?;
        self.metrics()
            .compute_requests
            .fetch_add(1, Ordering::Relaxed);
        let r = self.compute_admitted(&req).await;
        self.count_outcome(&r);
        if r.is_ok() {
            self.metrics().compute_latency.observe(started.elapsed());
        }
        r
    }

    async fn compute_admitted(self: &Arc<Self>, req: &ComputeRequest) -> Result<ComputeOutput> {
        let plan = Arc::new(plan_compute(self.index(), self.limits(), req)?);
        let mut out = vec![0f32; plan.n_tokens * plan.d_model]; // (n_tokens, d_model)
        if plan.experts.is_empty() {
            return Ok(ComputeOutput {
                output: out,
                disk_bytes_read: 0,
                experts_used: 0,
                experts_in_ram: 0,
            });
        }
        let ids: Vec<(u32, u32)> = plan.experts.iter().map(|(e, _)| (plan.layer, *e)).collect();
        // Records of the stream's guess are taken; the rest are read now.
        let experts: Vec<u32> = plan.experts.iter().map(|(e, _)| *e).collect();
        let slots = self.staging().take_layer(req.stream, plan.layer, &experts);
        let in_ram = slots.iter().flatten().filter(|s| s.has_landed()).count() as u32;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        // Unstarted reads are skipped if this future is dropped or fails.
        let _cancel_on_exit = CancelOnDrop(Arc::clone(&cancel));
        let demand: Vec<usize> = (0..ids.len()).filter(|&i| slots[i].is_none()).collect();
        self.read_into(&ids, &demand, &tx, &cancel)?;
        let mut waits = tokio::task::JoinSet::new();
        for (i, slot) in slots.into_iter().enumerate() {
            let Some(slot) = slot else { continue };
            let tx = tx.clone();
            waits.spawn(async move {
                // (index, outcome, read on demand): a guess whose read
                // failed or was skipped is read again below.
                let _ = tx.send((i, slot.take().await, false));
            });
        }
        // Each record is run as it lands and its buffer freed: guessed
        // and demand reads land in no set order, and waiting for one while
        // later ones held the buffers could stall the engine. Outputs wait
        // here only until those of the experts before them are added
        // (rows x d_model each, far smaller than their records).
        let mut ys: Vec<Option<Vec<f32>>> = vec![None; ids.len()];
        let mut summed = 0;
        let mut disk_bytes = 0u64;
        for _ in 0..ids.len() {
            let (i, record) = loop {
                let (i, r, on_demand) = rx.recv().await.ok_or_else(|| Error::Internal {
                    what: "the IO engine dropped a read".into(),
                })?;
                match r {
                    Ok(rec) => {
                        if on_demand {
                            disk_bytes += rec.loc.len as u64;
                        }
                        break (i, rec);
                    }
                    Err(_) if !on_demand => self.read_into(&ids, &[i], &tx, &cancel)?,
                    Err(e) => return Err(e.into()),
                }
            };
            let (plan2, act) = (Arc::clone(&plan), self.activation());
            let y = tokio::task::spawn_blocking(move || {
                let (expert, rows) = &plan2.experts[i];
                expert_output(&plan2, *expert, rows, &record.buf, act)
            })
            .await
            .map_err(|e| Error::Internal {
                what: format!("expert task: {e}"),
            })??;
            ys[i] = Some(y);
            // In ascending expert order, `out += w * y`, as the model's own
            // MoE combine sums: compute-at-store reproduces the local result.
            while let Some(y) = ys.get_mut(summed).and_then(Option::take) {
                add_weighted(&plan.experts[summed].1, &y, plan.d_model, &mut out);
                summed += 1;
            }
        }
        // Each index lands once (a failed guess is re-read, not re-sent).
        debug_assert_eq!(summed, ids.len(), "every output added");
        let m = self.metrics();
        m.records_served
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        m.bytes_served.fetch_add(disk_bytes, Ordering::Relaxed);
        Ok(ComputeOutput {
            output: out,
            disk_bytes_read: disk_bytes,
            experts_used: ids.len() as u32,
            experts_in_ram: in_ram,
        })
    }

    /// Reads `ids[i]` for each `i` of `which` on demand, each outcome sent
    /// to `tx` tagged with `i`.
    fn read_into(
        &self,
        ids: &[(u32, u32)],
        which: &[usize],
        tx: &Landed,
        cancel: &Arc<AtomicBool>,
    ) -> Result<()> {
        if which.is_empty() {
            return Ok(());
        }
        let (tx, which_ids) = (tx.clone(), which.to_vec());
        let batch: Vec<(u32, u32)> = which.iter().map(|&i| ids[i]).collect();
        let on_record: OnRecord = Arc::new(move |k, r| {
            let _ = tx.send((which_ids[k], r, true));
        });
        self.reader().read(
            &batch,
            Priority::Demand,
            Check::Here,
            &on_record,
            Some(cancel),
        )?;
        Ok(())
    }
}

/// Where a request's records land: (index in the request, outcome, read on demand).
type Landed = mpsc::UnboundedSender<(usize, waste_format::Result<Record>, bool)>;

struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
