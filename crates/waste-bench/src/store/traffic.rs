//! The reads a benchmark run makes: decode-shaped batches (top-k distinct
//! random experts of one layer, then the next layer, and so on, token after
//! token) until a byte budget is reached. Raw and served runs of a pair use
//! the same kind of traffic, with different seeds so no run re-reads the
//! records the previous one just read.

use waste_format::ExpertsIndex;

use waste_store::synth::Rng;

/// Batches of (layer, expert), each one layer's top-k for one token.
pub fn decode_batches(index: &ExpertsIndex, budget_bytes: u64, seed: u64) -> Vec<Vec<(u32, u32)>> {
    let mut rng = Rng::new(seed);
    let mut batches = Vec::new();
    let mut bytes = 0u64;
    let k = index.top_k.max(1);
    'tokens: loop {
        for l in &index.layers {
            let take = k.min(l.n_experts);
            let mut batch: Vec<(u32, u32)> = Vec::with_capacity(take as usize);
            while batch.len() < take as usize {
                let e = (rng.next_u64() % u64::from(l.n_experts)) as u32;
                if !batch.iter().any(|&(_, x)| x == e) {
                    batch.push((l.layer, e));
                }
            }
            bytes += u64::from(take) * l.record_len;
            batches.push(batch);
            if bytes >= budget_bytes {
                break 'tokens;
            }
        }
        if index.layers.is_empty() {
            break;
        }
    }
    batches
}

/// Bytes the batches read.
pub fn batch_bytes(index: &ExpertsIndex, batches: &[Vec<(u32, u32)>]) -> u64 {
    batches
        .iter()
        .flatten()
        .map(|(l, _)| index.layer(*l).map_or(0, |e| e.record_len))
        .sum()
}
