//! Property tests of the sampler and the stop-string matcher, each checked against an
//! independent truth: argmax, softmax probabilities, reproducibility, and the one-shot
//! "text before the first stop string".

use waste_model::sampling::{Sampler, SamplingParams, StopMatcher, argmax, logprobs};

/// splitmix64, independent of the sampler's generator, for test inputs.
struct TestRng(u64);

impl TestRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Logits in [-8, 8), quantised so that ties happen.
    fn logits(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() % 64) as f32 / 4.0 - 8.0)
            .collect()
    }
}

fn params(temperature: f32, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

fn first_max(logits: &[f32]) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    logits.iter().position(|&l| l == max).unwrap() as u32
}

fn softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f64> = logits
        .iter()
        .map(|&l| (f64::from(l - max) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

fn frequencies(sampler: &mut Sampler, logits: &[f32], previous: &[u32], draws: usize) -> Vec<f64> {
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..draws {
        counts[sampler.sample(logits, previous) as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / draws as f64).collect()
}

#[test]
fn greedy_is_argmax_with_ties_to_the_lowest_id() {
    let mut rng = TestRng(1);
    let mut sampler = Sampler::new(SamplingParams::default());
    for n in [1, 2, 7, 300] {
        for _ in 0..50 {
            let logits = rng.logits(n);
            assert_eq!(sampler.sample(&logits, &[]), first_max(&logits));
            assert_eq!(argmax(&logits), first_max(&logits));
        }
    }
    assert_eq!(sampler.sample(&[1.0, 3.0, 3.0, 2.0], &[]), 1);
}

#[test]
fn top_k_1_is_greedy_at_any_temperature() {
    let mut rng = TestRng(2);
    for temperature in [0.1, 1.0, 5.0, 1000.0] {
        let mut sampler = Sampler::new(SamplingParams {
            top_k: 1,
            ..params(temperature, 3)
        });
        for _ in 0..100 {
            let logits = rng.logits(50);
            assert_eq!(sampler.sample(&logits, &[]), first_max(&logits));
        }
    }
}

#[test]
fn same_seed_same_sequence() {
    let p = SamplingParams {
        top_p: 0.9,
        top_k: 40,
        min_p: 0.01,
        ..params(1.0, 42)
    };
    let (mut a, mut b) = (Sampler::new(p.clone()), Sampler::new(p.clone()));
    let mut other = Sampler::new(SamplingParams {
        seed: Some(43),
        ..p
    });
    let mut rng = TestRng(4);
    let (mut seq_a, mut seq_b, mut seq_other) = (vec![], vec![], vec![]);
    for _ in 0..200 {
        let logits = rng.logits(100);
        seq_a.push(a.sample(&logits, &seq_a));
        seq_b.push(b.sample(&logits, &seq_b));
        seq_other.push(other.sample(&logits, &seq_other));
    }
    assert_eq!(seq_a, seq_b);
    assert_ne!(seq_a, seq_other);
    assert_eq!(a.seed(), 42);
    // Unseeded samplers get different seeds.
    assert_ne!(
        Sampler::new(SamplingParams::default()).seed(),
        Sampler::new(SamplingParams::default()).seed()
    );
}

#[test]
fn frequencies_match_softmax() {
    let logits = [1.0, 2.0, 0.5, -1.0, 3.0];
    for temperature in [0.7, 1.0, 2.5] {
        let mut sampler = Sampler::new(params(temperature, 5));
        let freq = frequencies(&mut sampler, &logits, &[], 20_000);
        for (f, p) in freq.iter().zip(softmax(&logits, temperature)) {
            // 4.5 standard deviations of a binomial frequency at n = 20k is under 0.016.
            assert!((f - p).abs() < 0.016, "T={temperature}: {freq:?} vs {p}");
        }
    }
}

#[test]
fn top_p_keeps_the_nucleus() {
    let mut rng = TestRng(6);
    for _ in 0..20 {
        let logits = rng.logits(30);
        let mut sampler = Sampler::new(SamplingParams {
            top_p: 0.01,
            ..params(1.0, 7)
        });
        for _ in 0..50 {
            assert_eq!(sampler.sample(&logits, &[]), first_max(&logits));
        }
    }
    // p = (0.5, 0.3, 0.2): top_p 0.75 keeps the first two, renormalised to 0.625 / 0.375.
    let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
    let mut sampler = Sampler::new(SamplingParams {
        top_p: 0.75,
        ..params(1.0, 8)
    });
    let freq = frequencies(&mut sampler, &logits, &[], 20_000);
    assert_eq!(freq[2], 0.0);
    assert!((freq[0] - 0.625).abs() < 0.016, "{freq:?}");
}

#[test]
fn min_p_filters_unlikely_tokens() {
    // p = (0.5, 0.3, 0.15, 0.05); min_p 0.25 keeps p >= 0.125: the first three.
    let logits = [0.5f32.ln(), 0.3f32.ln(), 0.15f32.ln(), 0.05f32.ln()];
    let mut sampler = Sampler::new(SamplingParams {
        min_p: 0.25,
        ..params(1.0, 9)
    });
    let freq = frequencies(&mut sampler, &logits, &[], 20_000);
    assert_eq!(freq[3], 0.0);
    for (f, p) in freq.iter().zip([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95]) {
        assert!((f - p).abs() < 0.016, "{freq:?}");
    }
    // min_p 1 keeps only the most likely token.
    let mut sampler = Sampler::new(SamplingParams {
        min_p: 1.0,
        ..params(3.0, 10)
    });
    assert!((0..200).all(|_| sampler.sample(&logits, &[]) == 0));
}

#[test]
fn repetition_penalty_lowers_a_repeated_token() {
    let logits = [2.0, 1.0, -0.5, 0.5];
    let penalised = SamplingParams {
        repetition_penalty: 2.0,
        ..params(1.0, 11)
    };
    let mut plain = Sampler::new(params(1.0, 11));
    let mut sampler = Sampler::new(penalised);
    let before = frequencies(&mut plain, &logits, &[0, 2, 0], 20_000);
    let after = frequencies(&mut sampler, &logits, &[0, 2, 0], 20_000);
    assert!(after[0] < before[0] - 0.1, "{before:?} -> {after:?}");
    // HF rule: 2.0 / 2 = 1.0, -0.5 * 2 = -1.0, each once however often repeated.
    let expected = logprobs(&[1.0, 1.0, -1.0, 0.5], 0, 4);
    let got = sampler.logprobs(0, 4);
    assert!(
        (got.logprob - expected.logprob).abs() < 1e-6,
        "{got:?} vs {expected:?}"
    );
    assert!((after[0] - softmax(&[1.0, 1.0, -1.0, 0.5], 1.0)[0]).abs() < 0.016);
}

#[test]
fn presence_and_frequency_penalties_follow_openai() {
    let p = SamplingParams {
        presence_penalty: 0.25,
        frequency_penalty: 0.5,
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(p);
    // Token 1 appeared 3 times: 3.0 - 3 * 0.5 - 0.25 = 1.25 < 2.0.
    assert_eq!(sampler.sample(&[2.0, 3.0, 0.0], &[1, 1, 1]), 0);
    let expected = logprobs(&[2.0, 1.25, 0.0], 1, 0);
    assert!((sampler.logprobs(1, 0).logprob - expected.logprob).abs() < 1e-6);
}

#[test]
fn logprobs_are_a_log_softmax() {
    let logits = [0.5, 3.0, -1.0, 3.0, 2.0];
    let lp = logprobs(&logits, 4, 3);
    let total: f64 = (0..5)
        .map(|i| f64::from(logprobs(&logits, i, 0).logprob).exp())
        .sum();
    assert!((total - 1.0).abs() < 1e-5);
    assert!((lp.logprob - (softmax(&logits, 1.0)[4].ln() as f32)).abs() < 1e-5);
    let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
    assert_eq!(ids, [1, 3, 4]);
    assert_eq!(logprobs(&logits, 99, 10).logprob, f32::NEG_INFINITY);
    assert_eq!(logprobs(&logits, 0, 10).top.len(), 5);
}

#[test]
fn bad_input_never_panics() {
    for p in [
        params(f32::NAN, 1),
        SamplingParams {
            top_p: f32::NAN,
            min_p: f32::NAN,
            repetition_penalty: -1.0,
            ..params(1.0, 1)
        },
        SamplingParams {
            top_p: 0.0,
            min_p: 7.0,
            top_k: 1_000_000,
            ..params(f32::INFINITY, 1)
        },
    ] {
        assert!(p.validate().is_err());
        let mut sampler = Sampler::new(p);
        assert_eq!(sampler.sample(&[], &[5]), 0);
        assert_eq!(sampler.sample(&[f32::NAN, f32::NAN], &[]), 0);
        assert_eq!(
            sampler.sample(&[f32::NEG_INFINITY, 1.0, f32::NAN], &[u32::MAX]),
            1
        );
    }
    assert!(SamplingParams::default().validate().is_ok());
    let empty_stop = SamplingParams {
        stop: vec![String::new()],
        ..SamplingParams::default()
    };
    assert!(empty_stop.validate().is_err());
}

/// The truth for stop strings, computed on the whole text: the match that ends first
/// (ties: the one that starts first) cuts the text.
fn one_shot(text: &str, stops: &[&str]) -> (String, Option<usize>) {
    let best = stops
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .filter_map(|(i, s)| text.find(s).map(|start| (start + s.len(), start, i)))
        .min();
    match best {
        Some((_, start, i)) => (text[..start].to_owned(), Some(i)),
        None => (text.to_owned(), None),
    }
}

fn streamed(pieces: &[&str], stops: &[&str]) -> (String, Option<usize>) {
    let mut matcher = StopMatcher::new(stops);
    let mut out = String::new();
    for piece in pieces {
        let step = matcher.push(piece);
        out.push_str(&step.text);
        if step.stop.is_some() {
            assert!(matcher.is_stopped());
            assert_eq!(matcher.push("more"), Default::default());
            return (out, step.stop);
        }
    }
    out.push_str(&matcher.finish());
    (out, None)
}

#[test]
fn stop_matcher_is_independent_of_how_text_is_split() {
    let stops = ["bc", "abcd", "é!", "</s>", "xyz", ""];
    let texts = [
        "aabcd",
        "abcd",
        "no stop here é",
        "ééé!",
        "xy",
        "x",
        "",
        "xyxyz tail",
        "hello wor</s>ld",
        "<</s",
        "a</s>bc",
        "ab",
        "日本語é!xyz",
    ];
    let mut rng = TestRng(12);
    for text in texts {
        let truth = one_shot(text, &stops);
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        // Every split into two pieces.
        for &cut in &cuts {
            assert_eq!(
                streamed(&[&text[..cut], &text[cut..]], &stops),
                truth,
                "{text:?} cut at {cut}"
            );
        }
        // One character at a time.
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(streamed(&pieces, &stops), truth, "{text:?} by chars");
        // Random multi-way splits, empty pieces included.
        for _ in 0..50 {
            let mut bounds: Vec<usize> = (0..4)
                .map(|_| cuts[(rng.next() as usize) % cuts.len()])
                .collect();
            bounds.extend([0, text.len()]);
            bounds.sort_unstable();
            let pieces: Vec<&str> = bounds.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            assert_eq!(streamed(&pieces, &stops), truth, "{text:?} as {pieces:?}");
        }
    }
    assert_eq!(one_shot("aabcd", &stops), ("aa".to_owned(), Some(0)));
    // Without stop strings everything passes straight through.
    let mut none = StopMatcher::new::<&str>(&[]);
    assert_eq!(none.push("abc").text, "abc");
}
