//! The streaming stop-string matcher against a naive reference that rescans all held text for
//! every stop on every piece: same text released by every push, same stop reported, same
//! remainder from `finish`, on random stops and random text cut at random places.

use proptest::prelude::*;
use waste_model::sampling::{StopMatcher, StopStep};

/// The obvious matcher: append the piece, look for every stop in everything held, then hold
/// back the longest tail that is a prefix of some stop.
struct Naive {
    stops: Vec<String>,
    pending: String,
    stopped: bool,
}

impl Naive {
    fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            stopped: false,
        }
    }

    fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep::default();
        }
        self.pending.push_str(text);
        let best = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                self.pending
                    .find(s.as_str())
                    .map(|at| (at + s.len(), at, i))
            })
            .min();
        if let Some((_, start, index)) = best {
            self.stopped = true;
            self.pending.truncate(start);
            return StopStep {
                text: std::mem::take(&mut self.pending),
                stop: Some(index),
            };
        }
        let hold_from = (0..=self.pending.len())
            .filter(|&i| self.pending.is_char_boundary(i))
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.pending[i..])))
            .unwrap_or(self.pending.len());
        let rest = self.pending.split_off(hold_from);
        StopStep {
            text: std::mem::replace(&mut self.pending, rest),
            stop: None,
        }
    }

    fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Few distinct characters, one to four bytes long, so stops overlap, repeat, share prefixes
/// and split multi-byte characters across pieces.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec!['a', 'b', 'é', '日', '🦀']),
        0..max,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// Cut points as fractions of the text, snapped to character boundaries; empty pieces included.
fn cut(text: &str, fractions: &[f64]) -> Vec<String> {
    let mut bounds: Vec<usize> = fractions
        .iter()
        .map(|f| {
            let mut at = (f * text.len() as f64) as usize;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        })
        .collect();
    bounds.extend([0, text.len()]);
    bounds.sort_unstable();
    bounds
        .windows(2)
        .map(|w| text[w[0]..w[1]].to_owned())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_push_releases_what_the_naive_matcher_releases(
        stops in proptest::collection::vec(text(6), 0..6),
        body in text(60),
        fractions in proptest::collection::vec(0.0..=1.0f64, 0..12),
    ) {
        let pieces = cut(&body, &fractions);
        let mut fast = StopMatcher::new(&stops);
        let mut naive = Naive::new(&stops);
        for piece in &pieces {
            prop_assert_eq!(fast.push(piece), naive.push(piece), "piece {:?} of {:?}", piece, pieces);
        }
        prop_assert_eq!(fast.is_stopped(), naive.stopped);
        prop_assert_eq!(fast.finish(), naive.finish());
        prop_assert_eq!(fast.push("ab"), naive.push("ab"));
    }
}

/// Stops far longer than any piece: the held tail grows across many pushes and is released at
/// once when the text leaves the stop's prefix.
#[test]
fn long_partial_matches_are_held_across_pieces_and_released_at_once() {
    let long = "ab".repeat(300);
    let stops = [long.clone() + "!", "b".repeat(50)];
    let mut fast = StopMatcher::new(&stops);
    let mut naive = Naive::new(&stops.map(String::from));
    let mut body = long.repeat(3);
    body.push('?');
    body.push_str(&long);
    body.push('!');
    for piece in cut(
        &body,
        &(1..200).map(|i| f64::from(i) / 200.0).collect::<Vec<_>>(),
    ) {
        assert_eq!(fast.push(&piece), naive.push(&piece), "{piece:?}");
    }
    assert!(fast.is_stopped());
}
