//! The tokenizer of a GGUF file rebuilt as a Hugging Face `tokenizer.json`
//! (JSON built in code, loadable by the `tokenizers` crate) plus the
//! `tokenizer_config.json` fields waste's tokenizer reads (special tokens,
//! `add_bos_token`, `chat_template`), from the `tokenizer.ggml.*` keys:
//!
//! * `gpt2`: byte-level BPE from `tokens` and `merges`; the pre-tokenizer
//!   follows `tokenizer.ggml.pre` (`smollm` splits digits first, `qwen2` and
//!   `llama-bpe` use their split regex, anything else plain ByteLevel, as
//!   transformers' GGUF conversion does for every name).
//! * `llama`: SentencePiece BPE with byte fallback from `tokens` and
//!   `scores`, merges derived from the scores when the file has none (as
//!   transformers' `GGUFTokenizerSkeleton` does), Metaspace pre-tokenizer.
//!
//! Token types (llama.cpp `LLAMA_TOKEN_TYPE_*`): 2 unknown and 3 control
//! become special added tokens, 4 user-defined plain added tokens.

use serde_json::{Map, Value, json};

use super::file::GgufFile;
use super::meta::MetaValue;
use crate::error::{Error, Result};

const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// The `tokenizer.ggml.*` keys, read once.
struct Vocab<'a> {
    file: &'a GgufFile,
    tokens: Vec<&'a str>,
    types: Vec<i64>,
}

impl<'a> Vocab<'a> {
    fn read(file: &'a GgufFile) -> Result<Self> {
        let tokens = string_array(file, "tokenizer.ggml.tokens")?
            .ok_or_else(|| err(file, "tokenizer.ggml.tokens", "missing"))?;
        let types = match file.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(MetaValue::as_i64).collect::<Option<Vec<_>>>())
                .filter(|t| t.len() == tokens.len())
                .ok_or_else(|| {
                    err(
                        file,
                        "tokenizer.ggml.token_type",
                        "not one integer per token",
                    )
                })?,
        };
        Ok(Self {
            file,
            tokens,
            types,
        })
    }

    fn id(&self, key: &str) -> Option<usize> {
        let id = self.file.get(key)?.as_u64()?;
        usize::try_from(id).ok().filter(|&i| i < self.tokens.len())
    }

    fn token(&self, key: &str) -> Option<&'a str> {
        self.id(key).map(|i| self.tokens[i])
    }

    /// The unknown token: by id, else the first token typed unknown.
    fn unk_token(&self) -> Option<&'a str> {
        self.token("tokenizer.ggml.unknown_token_id").or_else(|| {
            let i = self.types.iter().position(|&t| t == TYPE_UNKNOWN)?;
            Some(self.tokens[i])
        })
    }

    fn flag(&self, key: &str, default: bool) -> bool {
        self.file
            .get(key)
            .and_then(MetaValue::as_bool)
            .unwrap_or(default)
    }

    fn added_tokens(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (id, (&content, &ty)) in self.tokens.iter().zip(&self.types).enumerate() {
            let special = match ty {
                TYPE_UNKNOWN | TYPE_CONTROL => true,
                TYPE_USER_DEFINED => false,
                _ => continue,
            };
            out.push(json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            }));
        }
        out
    }

    fn vocab_map(&self) -> Map<String, Value> {
        // Later duplicates win, as in HF's `{t: i for i, t in enumerate(tokens)}`.
        self.tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), json!(i)))
            .collect()
    }

    /// BOS/EOS wrapping when `add_bos_token` / `add_eos_token` say so.
    fn post_processor(&self, add_bos_default: bool) -> Value {
        let mut single = Vec::new();
        let mut specials = Map::new();
        let mut special = |key: &str, list: &mut Vec<Value>| {
            if let (Some(id), Some(tok)) = (self.id(key), self.token(key)) {
                list.push(json!({"SpecialToken": {"id": tok, "type_id": 0}}));
                specials.insert(
                    tok.to_string(),
                    json!({"id": tok, "ids": [id], "tokens": [tok]}),
                );
            }
        };
        if self.flag("tokenizer.ggml.add_bos_token", add_bos_default) {
            special("tokenizer.ggml.bos_token_id", &mut single);
        }
        single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
        if self.flag("tokenizer.ggml.add_eos_token", false) {
            special("tokenizer.ggml.eos_token_id", &mut single);
        }
        let mut pair = single.clone();
        pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
        json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials})
    }
}

fn err(file: &GgufFile, key: &str, reason: impl Into<String>) -> Error {
    Error::GgufMetadata {
        path: file.path().to_path_buf(),
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn string_array<'a>(file: &'a GgufFile, key: &str) -> Result<Option<Vec<&'a str>>> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    v.as_array()
        .and_then(|a| a.iter().map(MetaValue::as_str).collect::<Option<Vec<_>>>())
        .map(Some)
        .ok_or_else(|| err(file, key, "not an array of strings"))
}

/// `tokenizer.json` for the file's `tokenizer.ggml.model`.
pub fn tokenizer_json(file: &GgufFile) -> Result<Value> {
    let model = file.get("tokenizer.ggml.model").and_then(MetaValue::as_str);
    let vocab = Vocab::read(file)?;
    let mut t = match model {
        Some("gpt2") => byte_level_bpe(&vocab)?,
        Some("llama") => sentencepiece_bpe(&vocab)?,
        other => {
            return Err(err(
                file,
                "tokenizer.ggml.model",
                format!("{other:?} is not supported (gpt2 or llama)"),
            ));
        }
    };
    t["version"] = json!("1.0");
    t["truncation"] = Value::Null;
    t["padding"] = Value::Null;
    t["added_tokens"] = json!(vocab.added_tokens());
    Ok(t)
}

fn byte_level_bpe(v: &Vocab<'_>) -> Result<Value> {
    let merges = string_array(v.file, "tokenizer.ggml.merges")?.ok_or_else(|| {
        err(
            v.file,
            "tokenizer.ggml.merges",
            "missing (a gpt2 tokenizer needs merges)",
        )
    })?;
    let merges = merges
        .iter()
        .map(|m| m.split_once(' ').map(|(a, b)| json!([a, b])))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            err(
                v.file,
                "tokenizer.ggml.merges",
                "an entry is not two tokens separated by a space",
            )
        })?;
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    let pre = match v.file.get("tokenizer.ggml.pre").and_then(MetaValue::as_str) {
        // SmolLM2 / StarCoder: every digit on its own, then GPT-2's regex.
        Some("smollm" | "starcoder") => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true),
        ]}),
        Some("qwen2") => split(QWEN2_SPLIT),
        Some("llama-bpe" | "llama3") => split(LLAMA3_SPLIT),
        _ => byte_level(true),
    };
    Ok(json!({
        "normalizer": null,
        "pre_tokenizer": pre,
        "post_processor": v.post_processor(false),
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": v.token("tokenizer.ggml.unknown_token_id"),
            "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": false,
            "vocab": v.vocab_map(), "merges": merges,
        },
    }))
}

fn sentencepiece_bpe(v: &Vocab<'_>) -> Result<Value> {
    let scores = match v.file.get("tokenizer.ggml.scores") {
        None => vec![0.0; v.tokens.len()],
        Some(s) => s
            .as_array()
            .and_then(|a| a.iter().map(MetaValue::as_f64).collect::<Option<Vec<_>>>())
            .filter(|s| s.len() == v.tokens.len())
            .ok_or_else(|| err(v.file, "tokenizer.ggml.scores", "not one number per token"))?,
    };
    let merges: Vec<Value> = match string_array(v.file, "tokenizer.ggml.merges")? {
        Some(m) => m
            .iter()
            .filter_map(|m| m.split_once(' '))
            .map(|(a, b)| json!([a, b]))
            .collect(),
        None => merges_from_scores(&v.tokens, &scores)
            .into_iter()
            .map(|(a, b)| json!([a, b]))
            .collect(),
    };
    let prefix = v.flag("tokenizer.ggml.add_space_prefix", true);
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    Ok(json!({
        "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u{2581}",
            "prepend_scheme": if prefix { "first" } else { "never" }, "split": false},
        "post_processor": v.post_processor(true),
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": v.unk_token(),
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
            "byte_fallback": true, "ignore_merges": false,
            "vocab": v.vocab_map(), "merges": merges,
        },
    }))
}

/// SentencePiece BPE has no merge list: every split of a token into two
/// tokens is a merge, ranked by the merged token's score (highest first),
/// ties within a token by the halves' scores, as transformers derives them.
fn merges_from_scores<'a>(tokens: &[&'a str], scores: &[f64]) -> Vec<(&'a str, &'a str)> {
    let score: std::collections::HashMap<&str, f64> =
        tokens.iter().copied().zip(scores.iter().copied()).collect();
    let mut merges: Vec<(&str, &str, f64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &tok in tokens {
        if !seen.insert(tok) {
            continue;
        }
        let mut local: Vec<(&str, &str, f64)> = tok
            .char_indices()
            .skip(1)
            .map(|(i, _)| tok.split_at(i))
            .filter(|(l, r)| score.contains_key(l) && score.contains_key(r))
            .map(|(l, r)| (l, r, score[tok]))
            .collect();
        local.sort_by(|a, b| {
            (score[b.0], score[b.1])
                .partial_cmp(&(score[a.0], score[a.1]))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        merges.extend(local);
    }
    merges.sort_by(|a, b| b.2.total_cmp(&a.2));
    merges.into_iter().map(|(l, r, _)| (l, r)).collect()
}

/// The `tokenizer_config.json` fields: special tokens by text,
/// `add_bos_token` and the chat template.
pub fn tokenizer_config(file: &GgufFile) -> Result<Value> {
    let vocab = Vocab::read(file)?;
    let model = file.get("tokenizer.ggml.model").and_then(MetaValue::as_str);
    let mut c = json!({
        "bos_token": vocab.token("tokenizer.ggml.bos_token_id"),
        "eos_token": vocab.token("tokenizer.ggml.eos_token_id"),
        "unk_token": vocab.unk_token(),
        "pad_token": vocab.token("tokenizer.ggml.padding_token_id"),
        "add_bos_token": vocab.flag("tokenizer.ggml.add_bos_token", model == Some("llama")),
    });
    if let Some(t) = file.get("tokenizer.chat_template") {
        let t = t
            .as_str()
            .ok_or_else(|| err(file, "tokenizer.chat_template", "not a string"))?;
        c["chat_template"] = json!(t);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_rank_by_merged_score() {
        let tokens = ["a", "b", "c", "ab", "bc", "abc"];
        let scores = [0.0, 0.0, 0.0, -1.0, -0.5, -2.0];
        let m = merges_from_scores(&tokens, &scores);
        assert_eq!(m, [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]);
    }
}
