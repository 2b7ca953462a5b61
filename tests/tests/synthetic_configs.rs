//! The optimized forward (absorbed MLA, KV cache, rayon, bf16 kept in place)
//! against the naive f32 reference on seeded random checkpoints of every
//! family, with shapes the fixtures never have: catches code that only works
//! for the fixture shapes. Also checks that decoding token by token through
//! the cache gives the full-sequence logits.

use anyhow::{Result, ensure};
use waste_e2e::{Family, max_abs_diff, random_checkpoint, reference_logits};
use waste_model::{LogitsFor, Model, ModelConfig, NoTrace, SourceExperts};

const SEEDS: std::ops::Range<u64> = 0..8;
const TOKENS: usize = 12;

fn tolerance(want: &[f32]) -> f32 {
    1e-4 * want.iter().fold(1f32, |m, v| m.max(v.abs()))
}

fn check(family: Family, seed: u64) -> Result<()> {
    let (json, src) = random_checkpoint(family, seed);
    let config = ModelConfig::from_json(&json)?;
    let vocab = config.vocab_size as u32;
    let tokens: Vec<u32> = (0..TOKENS as u32)
        .map(|i| (i * 7919 + seed as u32 * 31) % vocab)
        .collect();
    let want = reference_logits(&json, &src, &tokens)?;
    let model = Model::load(config, &src)?;
    let experts = SourceExperts::new(&src, model.config(), usize::MAX);

    let mut cache = model.new_cache(TOKENS);
    let full = model.forward(&tokens, &mut cache, &experts, LogitsFor::All, &mut NoTrace)?;
    let tol = tolerance(&want);
    let d = max_abs_diff(&full, &want);
    ensure!(
        d <= tol,
        "{family:?} seed {seed}: full forward differs from the reference by {d} (tol {tol})"
    );

    // Prefill a few tokens, then one at a time through the cache.
    let mut cache = model.new_cache(TOKENS);
    let split = 5;
    let mut stepwise = model.forward(
        &tokens[..split],
        &mut cache,
        &experts,
        LogitsFor::All,
        &mut NoTrace,
    )?;
    for &t in &tokens[split..] {
        stepwise.extend(model.forward(
            &[t],
            &mut cache,
            &experts,
            LogitsFor::Last,
            &mut NoTrace,
        )?);
    }
    let d = max_abs_diff(&stepwise, &want);
    ensure!(
        d <= tol,
        "{family:?} seed {seed}: cached decode differs from the reference by {d} (tol {tol})"
    );
    Ok(())
}

fn check_family(family: Family) -> Result<()> {
    SEEDS.clone().try_for_each(|seed| check(family, seed))
}

#[test]
fn llama_matches_reference() -> Result<()> {
    check_family(Family::named("llama"))
}

#[test]
fn mixtral_matches_reference() -> Result<()> {
    check_family(Family::named("mixtral"))
}

#[test]
fn qwen3_moe_matches_reference() -> Result<()> {
    check_family(Family::named("qwen3_moe"))
}

#[test]
fn deepseek_v3_matches_reference() -> Result<()> {
    check_family(Family::named("deepseek_v3"))
}

#[test]
fn qwen2_moe_matches_reference() -> Result<()> {
    check_family(Family::named("qwen2_moe"))
}

/// Every family of the registry is generated here, or named with its
/// reason in `NOT_GENERATED`: a new family cannot be left out silently.
#[test]
fn every_registry_family_is_generated_or_excused() {
    let generated: Vec<&str> = Family::all().iter().map(Family::name).collect();
    for f in waste_family::FAMILIES {
        let excused = waste_e2e::synth::NOT_GENERATED.contains(&f.name);
        assert!(
            generated.contains(&f.name) != excused,
            "{}: generated {}, excused {excused}",
            f.name,
            generated.contains(&f.name)
        );
    }
}
