//! The Kimi hybrids against their goldens: Kimi-Linear (transformers' own
//! implementation) and Kimi K3 (release layout, MXFP4 experts, attention
//! residuals, LatentMoE). Logits at every position within 1e-3, router sets
//! identical, per-layer live sums and AttnRes read weights within 1e-3 of
//! each layer's max, and the greedy continuation through the cache.

use std::collections::HashMap;

use anyhow::{Context, Result, ensure};
use waste_e2e::{Goldens, check_greedy, fixture, max_abs_diff};
use waste_format::Checkpoint;
use waste_model::{LogitsFor, Model, ModelConfig, NoTrace, Routing, SourceExperts, Trace};

const LOGIT_TOL: f32 = 1e-3;
const HIDDEN_REL_TOL: f32 = 1e-3;

/// A Kimi fixture's goldens and its prompts (`goldens.json`).
struct KimiGoldens {
    goldens: Goldens,
    prompts: Vec<Vec<u32>>,
}

impl KimiGoldens {
    fn open(dir: &str) -> Result<Self> {
        let json: serde_json::Value =
            serde_json::from_str(&fs_err::read_to_string(fixture(dir).join("goldens.json"))?)?;
        let prompts = json["prompts"]
            .as_array()
            .context("prompts")?
            .iter()
            .map(|p| {
                p["input_ids"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(serde_json::Value::as_u64)
                            .map(|v| v as u32)
                            .collect()
                    })
                    .context("input_ids")
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            goldens: Goldens::open(dir)?,
            prompts,
        })
    }

    fn get(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        self.goldens.values(name)
    }

    fn f32(&self, name: &str) -> Result<Vec<f32>> {
        Ok(self
            .get(name)?
            .with_context(|| format!("golden {name} missing"))?
            .1)
    }
}

fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// Every traced tensor by (layer, name), and routings by layer.
#[derive(Default)]
struct Recorder {
    tensors: HashMap<(usize, String), Vec<f32>>,
    routing: HashMap<usize, Routing>,
}

impl Trace for Recorder {
    fn tensor(&mut self, layer: usize, name: &str, data: &[f32]) {
        self.tensors
            .insert((layer, name.to_string()), data.to_vec());
    }

    fn routing(&mut self, routing: &Routing) {
        self.routing.insert(routing.layer, routing.clone());
    }
}

fn check(dir: &str) -> Result<()> {
    let ckpt = Checkpoint::open(fixture(dir))?;
    let model = Model::load(ModelConfig::from_json(ckpt.config_json())?, &ckpt)?;
    let experts = SourceExperts::new(&ckpt, model.config(), usize::MAX);
    let g = KimiGoldens::open(dir)?;
    let layers = model.num_layers();

    for (p, ids) in g.prompts.iter().enumerate() {
        let mut rec = Recorder::default();
        let mut cache = model.new_cache(ids.len() + 32);
        let got = model.forward(ids, &mut cache, &experts, LogitsFor::All, &mut rec)?;
        let d = max_abs_diff(&got, &g.f32(&format!("prompt{p}.logits"))?);
        eprintln!(
            "{dir} prompt{p} ({} tokens): max abs logit diff {d:.2e}",
            ids.len()
        );
        ensure!(d <= LOGIT_TOL, "{dir} prompt{p}: logits differ by {d}");

        for (layer, r) in &rec.routing {
            let want = g.f32(&format!("prompt{p}.router.layer{layer}.topk_ids"))?;
            let want_w = g.f32(&format!("prompt{p}.router.layer{layer}.topk_weights"))?;
            for t in 0..r.n {
                let mut pairs: Vec<(u32, f32)> = r
                    .token_experts(t)
                    .iter()
                    .copied()
                    .zip(r.weights[t * r.top_k..(t + 1) * r.top_k].iter().copied())
                    .collect();
                pairs.sort_by_key(|p| p.0);
                for (k, (e, w)) in pairs.iter().enumerate() {
                    let (we, ww) = (want[t * r.top_k + k] as u32, want_w[t * r.top_k + k]);
                    ensure!(
                        *e == we,
                        "{dir} prompt{p} layer {layer} token {t}: experts differ ({e} vs {we})"
                    );
                    ensure!(
                        (w - ww).abs() < 1e-4,
                        "{dir} prompt{p} layer {layer} token {t}: weight {w} vs {ww}"
                    );
                }
            }
        }

        // Per-layer live sums and AttnRes read weights (recorded for the last prompt).
        let mut compared = 0;
        for layer in 0..layers {
            if let Some((_, want)) = g.get(&format!("prompt{p}.hidden.layer{layer}"))? {
                let got = &rec.tensors[&(layer, "layer_out".to_string())];
                let d = max_abs_diff(got, &want);
                ensure!(
                    d <= HIDDEN_REL_TOL * max_abs(&want),
                    "{dir} layer {layer}: hidden differs by {d}"
                );
                compared += 1;
            }
            for (golden, traced) in [
                ("pre_attn", "attn_res_pre_attn"),
                ("pre_mlp", "attn_res_pre_mlp"),
            ] {
                if let Some((_, want)) =
                    g.get(&format!("prompt{p}.attnres.layer{layer}.{golden}"))?
                {
                    let got = rec
                        .tensors
                        .get(&(layer, traced.to_string()))
                        .context("AttnRes read not traced")?;
                    let d = max_abs_diff(got, &want);
                    ensure!(
                        d <= 1e-3,
                        "{dir} layer {layer} {golden}: AttnRes weights differ by {d}"
                    );
                    compared += 1;
                }
            }
        }
        for (golden, traced) in [
            ("hidden.final_norm", "final_norm"),
            ("hidden.output_attn_res", "output_attn_res"),
            ("attnres.output", "attn_res_output"),
        ] {
            if let Some((_, want)) = g.get(&format!("prompt{p}.{golden}"))? {
                let got = &rec.tensors[&(layers, traced.to_string())];
                let d = max_abs_diff(got, &want);
                ensure!(
                    d <= HIDDEN_REL_TOL * max_abs(&want),
                    "{dir} {golden} differs by {d}"
                );
                compared += 1;
            }
        }

        if p + 1 == g.prompts.len() {
            eprintln!("{dir}: {compared} per-layer tensors compared");
            ensure!(compared > layers, "{dir}: per-layer goldens were not found");
        }

        // Greedy continuation through the cache.
        let want_tokens: Vec<u32> = g
            .f32(&format!("prompt{p}.generate.tokens"))?
            .into_iter()
            .map(|v| v as u32)
            .collect();
        let want_steps = g.f32(&format!("prompt{p}.generate.logits"))?;
        let mut cache = model.new_cache(ids.len() + 32);
        let what = format!("{dir} prompt{p}");
        check_greedy(
            &model,
            &mut cache,
            &experts,
            ids,
            &want_steps,
            &want_tokens,
            LOGIT_TOL,
            &what,
        )?;
    }
    Ok(())
}

/// A step of no tokens is refused (recurrent layers have no rows to split
/// their heads' output into) and leaves the cache as it was.
#[test]
fn an_empty_step_is_refused_and_changes_nothing() -> Result<()> {
    let dir = "kimi_k3_tiny";
    let ckpt = Checkpoint::open(fixture(dir))?;
    let model = Model::load(ModelConfig::from_json(ckpt.config_json())?, &ckpt)?;
    let experts = SourceExperts::new(&ckpt, model.config(), usize::MAX);
    let g = KimiGoldens::open(dir)?;
    let ids = &g.prompts[0];
    let mut cache = model.new_cache(ids.len() + 1);
    let empty = model.forward(&[], &mut cache, &experts, LogitsFor::All, &mut NoTrace);
    ensure!(
        matches!(empty, Err(waste_model::Error::EmptyStep)),
        "an empty step gave {:?}",
        empty.map(|l| l.len())
    );
    let got = model.forward(ids, &mut cache, &experts, LogitsFor::All, &mut NoTrace)?;
    let d = max_abs_diff(&got, &g.f32("prompt0.logits")?);
    ensure!(d <= LOGIT_TOL, "after the empty step: logits differ by {d}");
    Ok(())
}

#[test]
fn kimi_linear_tiny_matches_transformers() -> Result<()> {
    check("kimi_linear_tiny")
}

#[test]
fn kimi_k3_tiny_matches_the_reference() -> Result<()> {
    check("kimi_k3_tiny")
}
