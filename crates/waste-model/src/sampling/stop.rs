//! Stop strings over streamed text. Text that might be the start of a stop string is held back
//! until it is either ruled out (then emitted) or completed (then the generation stops and the
//! stop string itself is never emitted).
//!
//! Where stop strings overlap, the one that *completes first* in the stream wins (ties: the
//! one that starts first). That rule does not depend on how the text was cut into pieces, so
//! streamed and one-shot output agree.

/// What one [`StopMatcher::push`] releases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStep {
    /// Text that is now safe to show.
    pub text: String,
    /// Index (into the matcher's stop list) of the stop string that just completed.
    pub stop: Option<usize>,
}

/// Watches streamed text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text held back because its tail may begin a stop string.
    pending: String,
    longest: usize,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored: they would end every generation before it starts.
    pub fn new<S: AsRef<str>>(stops: &[S]) -> Self {
        let stops: Vec<String> = stops
            .iter()
            .map(|s| s.as_ref().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        Self {
            stops,
            pending: String::new(),
            longest,
            stopped: false,
        }
    }

    /// Feeds the next piece of text. After a stop, further pushes release nothing.
    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep::default();
        }
        self.pending.push_str(text);

        // The match that ends first; a stop string's first occurrence is its earliest end.
        let mut best: Option<(usize, usize, usize)> = None; // (end, start, stop index)
        for (index, stop) in self.stops.iter().enumerate() {
            if let Some(start) = self.pending.find(stop.as_str()) {
                let candidate = (start + stop.len(), start, index);
                if best.is_none_or(|b| candidate < b) {
                    best = Some(candidate);
                }
            }
        }
        if let Some((_, start, index)) = best {
            self.stopped = true;
            self.pending.truncate(start);
            return StopStep {
                text: std::mem::take(&mut self.pending),
                stop: Some(index),
            };
        }

        // Hold back the longest tail that is a proper prefix of some stop string. Only the last
        // `longest - 1` bytes can be one, so the scan is short.
        let len = self.pending.len();
        let hold_from = (len.saturating_sub(self.longest.saturating_sub(1))..len)
            .filter(|&i| self.pending.is_char_boundary(i))
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(len);
        let rest = self.pending.split_off(hold_from);
        StopStep {
            text: std::mem::replace(&mut self.pending, rest),
            stop: None,
        }
    }

    /// The generation ended without a stop string: releases what was held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Whether a stop string has completed.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The (non-empty) stop strings being watched.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }
}
