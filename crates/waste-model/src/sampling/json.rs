//! JSON mode (OpenAI's `response_format: {"type": "json_object"}`): at each
//! step every token whose bytes cannot extend the text so far into valid
//! JSON is masked out, so what the model writes is always a prefix of a JSON
//! object, and the generation ends the moment the object closes.
//!
//! [`JsonPrefix`] is a byte-level pushdown recogniser of RFC 8259 prefixes
//! (strings with escapes and `\u` digits, numbers, literals, nesting up to
//! [`MAX_DEPTH`]) that is `Copy`, so testing a candidate token costs a copy
//! and a few byte steps, not an allocation: masking a 160k vocabulary is a
//! few milliseconds, small beside a forward step. Runs of whitespace are
//! capped ([`MAX_WHITESPACE`]) so a model cannot stall in blank space.

use crate::tokenizer::Tokenizer;

/// Deepest nesting of objects and arrays accepted.
pub const MAX_DEPTH: usize = 128;
/// Longest run of whitespace between tokens of the JSON text.
pub const MAX_WHITESPACE: u8 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Str {
    Plain,
    /// After a backslash.
    Escape,
    /// Hex digits of a `\u` escape still to come.
    Unicode(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    /// `-`
    Minus,
    /// A leading `0`.
    Zero,
    Int,
    /// `.` with no digit yet.
    Dot,
    Frac,
    /// `e` / `E`.
    Exp,
    ExpSign,
    ExpDigits,
}

impl Num {
    /// A number may end here.
    fn complete(self) -> bool {
        matches!(self, Self::Zero | Self::Int | Self::Frac | Self::ExpDigits)
    }

    fn step(self, b: u8) -> Option<Self> {
        let digit = b.is_ascii_digit();
        Some(match (self, b) {
            (Self::Minus, b'0') => Self::Zero,
            (Self::Minus, _) if digit => Self::Int,
            (Self::Int, _) if digit => Self::Int,
            (Self::Zero | Self::Int, b'.') => Self::Dot,
            (Self::Dot | Self::Frac, _) if digit => Self::Frac,
            (Self::Zero | Self::Int | Self::Frac, b'e' | b'E') => Self::Exp,
            (Self::Exp, b'+' | b'-') => Self::ExpSign,
            (Self::Exp | Self::ExpSign | Self::ExpDigits, _) if digit => Self::ExpDigits,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the root value.
    Start,
    /// A value is due (after `:`, or `,` in an array).
    Value,
    /// After `{`: a key or `}`.
    ObjectOpen,
    /// After `,` in an object: a key.
    Key,
    KeyString(Str),
    /// After a key: `:`.
    Colon,
    /// After `[`: a value or `]`.
    ArrayOpen,
    String(Str),
    Number(Num),
    /// The rest of `true`, `false` or `null`.
    Literal(&'static [u8], u8),
    /// After a value: `,`, a closing bracket, or the end at the root.
    AfterValue,
}

/// Where a JSON text is after the bytes fed so far. `Copy` on purpose: see
/// the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonPrefix {
    state: State,
    /// Bit i set: level i is an object (else an array).
    kinds: [u64; MAX_DEPTH / 64],
    depth: u8,
    whitespace: u8,
    root_object: bool,
}

impl JsonPrefix {
    /// Any JSON value at the root.
    pub fn any() -> Self {
        Self {
            state: State::Start,
            kinds: [0; MAX_DEPTH / 64],
            depth: 0,
            whitespace: 0,
            root_object: false,
        }
    }

    /// An object at the root (`json_object` mode).
    pub fn object() -> Self {
        Self {
            root_object: true,
            ..Self::any()
        }
    }

    /// The root value is complete: nothing but whitespace may follow.
    pub fn is_complete(&self) -> bool {
        self.depth == 0
            && match self.state {
                State::AfterValue => true,
                State::Number(n) => n.complete(),
                _ => false,
            }
    }

    /// Feeds `bytes`; false (and the state unspecified) if they cannot
    /// continue a JSON text.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.step(b))
    }

    fn push(&mut self, object: bool) -> bool {
        let d = self.depth as usize;
        if d >= MAX_DEPTH {
            return false;
        }
        let (word, bit) = (d / 64, d % 64);
        if object {
            self.kinds[word] |= 1 << bit;
        } else {
            self.kinds[word] &= !(1 << bit);
        }
        self.depth += 1;
        true
    }

    /// Closes the innermost level if it is an object (`}`) or array (`]`).
    fn pop(&mut self, object: bool) -> bool {
        let Some(d) = (self.depth as usize).checked_sub(1) else {
            return false;
        };
        if (self.kinds[d / 64] >> (d % 64) & 1 == 1) != object {
            return false;
        }
        self.depth -= 1;
        self.state = State::AfterValue;
        true
    }

    fn in_object(&self) -> bool {
        let d = self.depth as usize - 1;
        self.kinds[d / 64] >> (d % 64) & 1 == 1
    }

    /// The start of a value.
    fn value(&mut self, b: u8) -> bool {
        self.state = match b {
            b'{' => return self.push(true) && self.set(State::ObjectOpen),
            b'[' => return self.push(false) && self.set(State::ArrayOpen),
            b'"' => State::String(Str::Plain),
            b'-' => State::Number(Num::Minus),
            b'0' => State::Number(Num::Zero),
            b'1'..=b'9' => State::Number(Num::Int),
            b't' => State::Literal(b"rue", 0),
            b'f' => State::Literal(b"alse", 0),
            b'n' => State::Literal(b"ull", 0),
            _ => return false,
        };
        true
    }

    fn set(&mut self, s: State) -> bool {
        self.state = s;
        true
    }

    fn step(&mut self, b: u8) -> bool {
        let space = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let between_tokens = !matches!(
            self.state,
            State::String(_) | State::KeyString(_) | State::Literal(..) | State::Number(_)
        );
        if space && between_tokens {
            self.whitespace += 1;
            return self.whitespace <= MAX_WHITESPACE;
        }
        self.whitespace = 0;
        match self.state {
            State::Start => {
                if self.root_object && b != b'{' {
                    return false;
                }
                self.value(b)
            }
            State::Value => self.value(b),
            State::ArrayOpen => b == b']' && self.pop(false) || self.value(b),
            State::ObjectOpen => match b {
                b'}' => self.pop(true),
                b'"' => self.set(State::KeyString(Str::Plain)),
                _ => false,
            },
            State::Key => b == b'"' && self.set(State::KeyString(Str::Plain)),
            State::KeyString(s) => match string_step(s, b) {
                Some(None) => self.set(State::Colon),
                Some(Some(s)) => self.set(State::KeyString(s)),
                None => false,
            },
            State::Colon => b == b':' && self.set(State::Value),
            State::String(s) => match string_step(s, b) {
                Some(None) => self.set(State::AfterValue),
                Some(Some(s)) => self.set(State::String(s)),
                None => false,
            },
            State::Literal(rest, at) => {
                if rest.get(at as usize) != Some(&b) {
                    return false;
                }
                let at = at + 1;
                self.set(if at as usize == rest.len() {
                    State::AfterValue
                } else {
                    State::Literal(rest, at)
                })
            }
            State::Number(n) => match n.step(b) {
                Some(n) => self.set(State::Number(n)),
                // The number ends here; the byte belongs to what follows.
                None => n.complete() && self.set(State::AfterValue) && self.after_value(b),
            },
            State::AfterValue => self.after_value(b),
        }
    }

    fn after_value(&mut self, b: u8) -> bool {
        if space_byte(b) {
            self.whitespace = 1;
            return true;
        }
        if self.depth == 0 {
            return false;
        }
        match b {
            b',' => {
                let next = if self.in_object() {
                    State::Key
                } else {
                    State::Value
                };
                self.set(next)
            }
            b'}' => self.pop(true),
            b']' => self.pop(false),
            _ => false,
        }
    }
}

fn space_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// One byte inside a string: `Some(None)` closes it, `Some(Some(s))` goes
/// on, `None` is invalid (a control character, a bad escape or hex digit).
fn string_step(s: Str, b: u8) -> Option<Option<Str>> {
    match s {
        Str::Plain => match b {
            b'"' => Some(None),
            b'\\' => Some(Some(Str::Escape)),
            0..=0x1f => None,
            _ => Some(Some(Str::Plain)),
        },
        Str::Escape => match b {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(Some(Str::Plain)),
            b'u' => Some(Some(Str::Unicode(4))),
            _ => None,
        },
        Str::Unicode(n) => b.is_ascii_hexdigit().then_some(Some(if n == 1 {
            Str::Plain
        } else {
            Str::Unicode(n - 1)
        })),
    }
}

/// The bytes each token id stands for, or `None` for special tokens and
/// ids whose bytes cannot be known (they are never allowed in JSON mode).
/// Byte-level BPE vocabularies map GPT-2's stand-in characters back to
/// bytes; SentencePiece ones read `<0xNN>` byte tokens and `▁` as a space.
pub fn vocab_bytes(tokenizer: &Tokenizer) -> Vec<Option<Box<[u8]>>> {
    let inner = tokenizer.inner();
    let byte_level = matches!(
        inner.get_decoder(),
        Some(tokenizers::DecoderWrapper::ByteLevel(_))
    );
    let unbyte = byte_level.then(byte_level_inverse);
    let added = inner.get_added_tokens_decoder();
    (0..inner.get_vocab_size(true) as u32)
        .map(|id| {
            if added.get(&id).is_some_and(|t| t.special) {
                return None;
            }
            let piece = inner.id_to_token(id)?;
            if let Some(hex) = piece
                .strip_prefix("<0x")
                .and_then(|p| p.strip_suffix('>'))
                .filter(|h| h.len() == 2)
            {
                return u8::from_str_radix(hex, 16).ok().map(|b| Box::from([b]));
            }
            match &unbyte {
                Some(map) if !added.contains_key(&id) => piece
                    .chars()
                    .map(|c| map.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .map(Vec::into_boxed_slice),
                _ => Some(
                    piece
                        .replace('\u{2581}', " ")
                        .into_bytes()
                        .into_boxed_slice(),
                ),
            }
        })
        .collect()
}

/// GPT-2's `bytes_to_unicode`, inverted: stand-in character → byte.
fn byte_level_inverse() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| {
        (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            let c = if printable(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).expect("below 0x200");
                next += 1;
                c
            };
            (c, b)
        })
        .collect()
}

/// JSON mode over a vocabulary: masks logits, follows the chosen tokens.
#[derive(Debug, Clone)]
pub struct JsonConstraint<'v> {
    vocab: &'v [Option<Box<[u8]>>],
    prefix: JsonPrefix,
}

impl<'v> JsonConstraint<'v> {
    /// A JSON object to be written with tokens of `vocab` ([`vocab_bytes`]).
    pub fn object(vocab: &'v [Option<Box<[u8]>>]) -> Self {
        Self {
            vocab,
            prefix: JsonPrefix::object(),
        }
    }

    /// Sets to -inf every logit whose token cannot continue the JSON text;
    /// returns how many tokens remain allowed.
    pub fn mask(&self, logits: &mut [f32]) -> usize {
        let mut allowed = 0;
        for (id, l) in logits.iter_mut().enumerate() {
            let ok = self
                .vocab
                .get(id)
                .and_then(Option::as_ref)
                .is_some_and(|b| {
                    let mut p = self.prefix;
                    !b.is_empty() && p.feed(b)
                });
            if ok {
                allowed += 1;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        allowed
    }

    /// Follows a chosen token; false if it was not allowed.
    pub fn advance(&mut self, token: u32) -> bool {
        match self.vocab.get(token as usize).and_then(Option::as_ref) {
            Some(b) => self.prefix.feed(b),
            None => false,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.prefix.is_complete()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(root_object: bool, text: &str) -> Option<bool> {
        let mut p = if root_object {
            JsonPrefix::object()
        } else {
            JsonPrefix::any()
        };
        p.feed(text.as_bytes()).then(|| p.is_complete())
    }

    /// Seeded JSON documents from serde_json's own printer (compact and pretty).
    fn documents() -> Vec<String> {
        let values = [
            serde_json::json!({}),
            serde_json::json!({"a": 1, "b": [true, false, null], "c": {"d": "x\"y\\z\n\u{1F600}"}}),
            serde_json::json!({"n": -0.5e-3, "m": 12345678901234u64, "z": 0, "e": 1E+5, "arr": [[], [{}], [1, [2, [3]]]]}),
            serde_json::json!({"unicode": "\u{0007}\u{00e9}\u{4e2d}", "empty": "", "k k": " "}),
        ];
        values
            .iter()
            .flat_map(|v| {
                [
                    serde_json::to_string(v).unwrap(),
                    serde_json::to_string_pretty(v).unwrap(),
                ]
            })
            .collect()
    }

    #[test]
    fn every_prefix_of_a_valid_document_is_accepted_and_only_the_whole_is_complete() {
        for doc in documents() {
            let bytes = doc.as_bytes();
            for end in 0..bytes.len() {
                let mut p = JsonPrefix::object();
                assert!(
                    p.feed(&bytes[..end]),
                    "prefix {:?}",
                    &doc[..end.min(doc.len())]
                );
                assert!(!p.is_complete(), "complete too early: {:?}", &bytes[..end]);
            }
            assert_eq!(accepts(true, &doc), Some(true), "{doc}");
        }
    }

    #[test]
    fn agrees_with_serde_json_on_whole_texts() {
        let cases = [
            "{}",
            "{\"a\":1}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":-}",
            "{\"a\":1e}",
            "{\"a\":tru}",
            "{\"a\":true,}",
            "{,}",
            "{\"a\" 1}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"\\u12a4\"}",
            "{\"a\":[1,2,]}",
            "{\"a\":[1 2]}",
            "{\"a\":{\"b\":[{}]}}",
            "{\"a\":\"tab\there\"}",
            "{'a':1}",
            "{\"a\":1}}",
            "{\"a\":-0.0e+0}",
            "{\"a\":[}",
            "{\"a\":[]]",
            "{\"a\":null}",
            "{\"a\":nul}",
        ];
        for text in cases {
            let serde_ok = serde_json::from_str::<serde_json::Value>(text).is_ok();
            let ours = accepts(true, text) == Some(true);
            assert_eq!(ours, serde_ok, "{text:?}");
        }
    }

    #[test]
    fn the_root_must_be_an_object_and_nothing_may_follow_it() {
        assert_eq!(accepts(true, "[1]"), None);
        assert_eq!(accepts(true, "  \"x\""), None);
        assert_eq!(accepts(true, "  {\"x\": 1}\n"), Some(true));
        assert_eq!(accepts(true, "{} {}"), None);
        assert_eq!(accepts(false, "[1, 2]"), Some(true));
        assert_eq!(accepts(false, "12"), Some(true));
    }

    #[test]
    fn whitespace_runs_and_depth_are_bounded() {
        let blank = " ".repeat(MAX_WHITESPACE as usize);
        assert!(accepts(true, &format!("{{{blank}")).is_some());
        assert!(accepts(true, &format!("{{{blank} ")).is_none());
        let deep = format!("{{\"a\":{}", "[".repeat(MAX_DEPTH - 1));
        assert!(accepts(true, &deep).is_some());
        assert!(accepts(true, &format!("{deep}[")).is_none());
    }

    #[test]
    fn the_mask_keeps_exactly_the_tokens_that_continue_the_text() {
        let vocab: Vec<Option<Box<[u8]>>> = ["{", "}", "\"a", "\":", " 1", "x", "", "}\n"]
            .iter()
            .map(|s| Some(Box::from(s.as_bytes())))
            .chain([None])
            .collect();
        let mut c = JsonConstraint::object(&vocab);
        let mut logits = vec![0.0; vocab.len()];
        assert_eq!(c.mask(&mut logits), 1);
        assert!(logits[0].is_finite() && logits[1].is_infinite() && logits[8].is_infinite());
        for t in [0, 2, 3, 4] {
            assert!(c.advance(t));
        }
        let mut logits = vec![0.0; vocab.len()];
        c.mask(&mut logits);
        let allowed: Vec<usize> = (0..vocab.len())
            .filter(|&i| logits[i].is_finite())
            .collect();
        assert_eq!(allowed, [1, 7], "close, or close and a newline");
        assert!(c.advance(7));
        assert!(c.is_complete());
    }
}
