//! Kimi's tokenizer files: `tiktoken.model` plus `tokenizer_config.json`, which Kimi K2/K3,
//! Kimi-Linear and Moonlight ship instead of a `tokenizer.json`.
//!
//! * `tiktoken.model` holds one line per BPE token, `<base64 of the token's bytes> <rank>`,
//!   ranks `0..n` (Kimi: n = 163,584). The rank is the token id and the merge priority.
//! * The `n..n+256` ids after the ranks are special. `added_tokens_decoder` in
//!   `tokenizer_config.json` names some (`[BOS]` = n, `[EOS]`, `<|im_end|>`, …); the others are
//!   `<|reserved_token_{id}|>`, as `tokenization_kimi.py` builds them.
//! * The pre-tokenisation regex is [`KIMI_PAT_STR`], always. Kimi writes it in
//!   `tokenization_kimi.py`, not in a data file, and every release so far uses this one; a
//!   folder whose Python code uses another would need its pattern added here.
//!
//! From one table this builds the exact tiktoken codec (`bpe.rs`) and a
//! `tokenizers::Tokenizer` with the same ids — what transformers' `TikTokenConverter` makes —
//! which spells tokens and answers vocabulary questions for the wrapper. Kimi's Python
//! also cuts texts into 400k-character chunks and at 25k-character runs of (non-)whitespace
//! before encoding, to dodge a tiktoken stack overflow; waste's encoder has no such limit and
//! does not cut, so only texts holding such runs can tokenise differently.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use base64::Engine as _;
use serde_json::{Map, Value};
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::bpe::TiktokenBpe;
use super::{Result, TokenizerError, config_err};

/// Kimi's `pat_str` (`tokenization_kimi.py`, the same in K2 and K3): Han runs; words with
/// optional English contractions, split at lower/upper case changes (`&&[^\p{Han}]` keeps Han
/// out of them); up to three digits; punctuation runs; newlines; other whitespace, the last
/// space left to the next word (`(?!\S)`). `fancy-regex`, which `tokenizers` is built with
/// here and which tiktoken itself uses, supports the class intersections and the look-ahead.
pub const KIMI_PAT_STR: &str = concat!(
    r"[\p{Han}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

/// Special ids reserved after the ranks (`num_reserved_special_tokens` in Kimi's Python).
pub const RESERVED_SPECIAL_TOKENS: u32 = 256;

/// How far past the reserved block `added_tokens_decoder` may name ids. Kimi names none there;
/// the cap keeps a broken config from asking for billions of filler `<|reserved_token_N|>` ids.
const MAX_EXTRA_SPECIAL_TOKENS: u32 = 1 << 16;

/// The largest `tiktoken.model` read (Kimi's is 2.8 MB): the file is read whole.
const MAX_RANK_FILE_BYTES: u64 = 1 << 28;

/// A tiktoken folder, ready for the wrapper.
pub(crate) struct Loaded {
    /// Same ids and specials as `bpe`: spells tokens, answers vocabulary questions.
    pub(crate) inner: tokenizers::Tokenizer,
    /// Encodes and decodes.
    pub(crate) bpe: TiktokenBpe,
}

/// Reads `tiktoken.model` and the special tokens of `config` (the parsed
/// `tokenizer_config.json` and its path). Bos/eos names are left to the wrapper, which reads
/// them from the same config for every tokenizer kind.
pub(crate) fn load(model: &Path, config: Option<(&Path, &Map<String, Value>)>) -> Result<Loaded> {
    let tokens = read_ranks(model)?;
    // Half the id space leaves room for the specials after the ranks without overflow.
    let n_ranks = u32::try_from(tokens.len())
        .ok()
        .filter(|&n| n <= u32::MAX / 2)
        .ok_or_else(|| TokenizerError::Load {
            path: model.to_path_buf(),
            message: format!("{} ranks do not fit 32-bit ids", tokens.len()),
        })?;
    let specials = special_tokens(n_ranks, config)?;
    let inner = hf_tokenizer(model, &tokens, &specials)?;
    let specials = specials
        .into_iter()
        .map(|t| (t.content, t.special))
        .collect();
    let bpe = TiktokenBpe::new(tokens, KIMI_PAT_STR, specials).map_err(|message| {
        TokenizerError::Load {
            path: model.to_path_buf(),
            message,
        }
    })?;
    Ok(Loaded { inner, bpe })
}

/// The token bytes of each rank, in rank order. Lines are split as tiktoken's
/// `load_tiktoken_bpe` splits them (empty lines skipped, `\r\n` accepted); the ranks must be
/// exactly `0..n`, each once, and no two lines may hold the same bytes.
fn read_ranks(path: &Path) -> Result<Vec<Vec<u8>>> {
    let size = fs_err::metadata(path)?.len();
    if size > MAX_RANK_FILE_BYTES {
        return Err(TokenizerError::Load {
            path: path.to_path_buf(),
            message: format!("{size} bytes is too large for a rank table"),
        });
    }
    let text = fs_err::read(path)?;
    let mut entries: Vec<(Vec<u8>, u32, usize)> = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let bad = |reason: String| TokenizerError::BadRankLine {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let mut fields = line
            .split(u8::is_ascii_whitespace)
            .filter(|f| !f.is_empty());
        let (Some(token), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad("expected `<base64 token bytes> <rank>`".into()));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(token)
            .map_err(|e| bad(format!("bad base64: {e}")))?;
        if bytes.is_empty() {
            return Err(bad("empty token".into()));
        }
        let rank = std::str::from_utf8(rank)
            .ok()
            .and_then(|r| r.parse::<u32>().ok())
            .ok_or_else(|| {
                let rank = String::from_utf8_lossy(rank);
                bad(format!(
                    "rank {rank:?} is not a non-negative 32-bit integer"
                ))
            })?;
        entries.push((bytes, rank, line_no));
    }
    let n = entries.len();
    if n == 0 {
        return Err(TokenizerError::Load {
            path: path.to_path_buf(),
            message: "no ranks".into(),
        });
    }
    let mut by_rank: Vec<Option<(Vec<u8>, usize)>> = vec![None; n];
    for (bytes, rank, line) in entries {
        let Some(slot) = by_rank.get_mut(rank as usize) else {
            return Err(TokenizerError::BadRankLine {
                path: path.to_path_buf(),
                line,
                reason: format!(
                    "rank {rank} is out of range: {n} ranks must be 0..={}",
                    n - 1
                ),
            });
        };
        if let Some((_, first_line)) = slot {
            return Err(TokenizerError::DuplicateRank {
                path: path.to_path_buf(),
                line,
                rank,
                first_line: *first_line,
            });
        }
        *slot = Some((bytes, line));
    }
    // n distinct ranks below n: every slot is filled.
    let by_rank: Vec<(Vec<u8>, usize)> = by_rank.into_iter().flatten().collect();
    let mut lines: HashMap<&[u8], usize> = HashMap::with_capacity(n);
    for (bytes, line) in &by_rank {
        if let Some(other) = lines.insert(bytes, *line) {
            return Err(TokenizerError::DuplicateToken {
                path: path.to_path_buf(),
                line: other.max(*line),
                first_line: other.min(*line),
            });
        }
    }
    Ok(by_rank.into_iter().map(|(bytes, _)| bytes).collect())
}

/// The special tokens, in id order from `n_ranks`: `added_tokens_decoder`'s names (with their
/// `special` flag, default true) and `<|reserved_token_{id}|>` for the unnamed ids of the
/// reserved block. Returned as `AddedToken`s so `tokenizers` numbers them from `n_ranks` on.
fn special_tokens(
    n_ranks: u32,
    config: Option<(&Path, &Map<String, Value>)>,
) -> Result<Vec<AddedToken>> {
    let mut named: BTreeMap<u32, (String, bool)> = BTreeMap::new();
    if let Some((path, config)) = config {
        let decoder = match config.get("added_tokens_decoder") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => {
                return Err(config_err(
                    path,
                    "added_tokens_decoder is not an object".into(),
                ));
            }
        };
        for (key, entry) in decoder.into_iter().flatten() {
            let err =
                |what: &str| config_err(path, format!("added_tokens_decoder[{key:?}]: {what}"));
            let id: u32 = key.parse().map_err(|_| err("the key is not a token id"))?;
            let content = match entry.get("content") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => return Err(err("no non-empty string \"content\"")),
            };
            let special = match entry.get("special") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(err("\"special\" is not a bool")),
            };
            if id < n_ranks {
                return Err(err(&format!(
                    "id {id} is a BPE rank (tiktoken.model ranks 0..={})",
                    n_ranks - 1
                )));
            }
            if id - n_ranks >= RESERVED_SPECIAL_TOKENS + MAX_EXTRA_SPECIAL_TOKENS {
                return Err(err(&format!(
                    "id {id} is more than {MAX_EXTRA_SPECIAL_TOKENS} past the reserved ids"
                )));
            }
            named.insert(id, (content, special));
        }
    }
    let end = named
        .last_key_value()
        .map_or(0, |(&id, _)| id + 1)
        .max(n_ranks + RESERVED_SPECIAL_TOKENS);
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut tokens = Vec::with_capacity((end - n_ranks) as usize);
    for id in n_ranks..end {
        let (content, special) = named
            .remove(&id)
            .unwrap_or_else(|| (format!("<|reserved_token_{id}|>"), true));
        if let Some(other) = ids.insert(content.clone(), id) {
            let path = config.map_or(Path::new("tokenizer_config.json"), |(p, _)| p);
            return Err(config_err(
                path,
                format!("special token {content:?} names both id {other} and id {id}"),
            ));
        }
        tokens.push(AddedToken::from(content, special));
    }
    Ok(tokens)
}

/// The `tokenizers` twin of the table, as transformers' `TikTokenConverter` builds it: the
/// vocabulary spelled in GPT-2's byte-level alphabet, every split of a token into two tokens as
/// a merge (ordered by the token's rank, then the parts'), `ignore_merges` (a piece that is a
/// token is taken whole, as tiktoken does), Kimi's regex, a byte-level decoder, and the
/// specials added in id order so that they get ids `n_ranks..`.
fn hf_tokenizer(
    path: &Path,
    tokens: &[Vec<u8>],
    specials: &[AddedToken],
) -> Result<tokenizers::Tokenizer> {
    let load_err = |message: String| TokenizerError::Load {
        path: path.to_path_buf(),
        message,
    };
    let alphabet = byte_level_alphabet();
    let spell =
        |bytes: &[u8]| -> String { bytes.iter().map(|&b| alphabet[usize::from(b)]).collect() };
    let ids: HashMap<&[u8], u32> = tokens.iter().map(Vec::as_slice).zip(0..).collect();
    let mut merges = Vec::new();
    for token in tokens {
        let mut splits: Vec<(u32, u32)> = (1..token.len())
            .filter_map(|i| Some((*ids.get(&token[..i])?, *ids.get(&token[i..])?)))
            .collect();
        splits.sort_unstable();
        merges.extend(
            splits
                .into_iter()
                .map(|(l, r)| (spell(&tokens[l as usize]), spell(&tokens[r as usize]))),
        );
    }
    let vocab: Vocab = tokens.iter().map(|t| spell(t)).zip(0..).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(true)
        .build()
        .map_err(|e| load_err(format!("cannot build the BPE model: {e}")))?;
    let split = Split::new(
        SplitPattern::Regex(KIMI_PAT_STR.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| load_err(format!("bad pattern: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner
        .with_pre_tokenizer(Some(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, true, false).into(),
        ])))
        .with_decoder(Some(ByteLevel::default()));
    inner
        .add_tokens(specials.iter().cloned())
        .map_err(|e| load_err(format!("cannot add the special tokens: {e}")))?;
    let n_ranks = tokens.len() as u32;
    for (token, id) in specials.iter().zip(n_ranks..) {
        // `tokenizers` reuses the id of a vocabulary entry spelled like the special token.
        if inner.token_to_id(&token.content) != Some(id) {
            return Err(load_err(format!(
                "special token {:?} (id {id}) is spelled like a BPE token",
                token.content
            )));
        }
    }
    Ok(inner)
}

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the other 68 for
/// U+0100.. in byte order. Byte-level vocabularies spell token bytes with these characters.
fn byte_level_alphabet() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut alphabet = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        alphabet[usize::from(b)] = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("U+0100..U+0143 are chars")
        };
    }
    alphabet
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_is_gpt2s() {
        let a = byte_level_alphabet();
        assert_eq!(
            (a[b' ' as usize], a[b'\n' as usize], a[0], a[b'A' as usize]),
            ('Ġ', 'Ċ', 'Ā', 'A')
        );
        assert_eq!(a[0xAD], '\u{143}');
        let mut sorted = a.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
    }

    #[test]
    fn kimi_pattern_compiles_and_covers_every_character() {
        let re = tokenizers::utils::SysRegex::new(KIMI_PAT_STR).expect("fancy-regex takes it");
        let text = "Hello WORLD it's 12345 你好世界 ÀÉÎ naïve \t\n\n  x  👋🏽 ǅ ٣";
        let pieces: Vec<&str> = re.find_iter(text).map(|(s, e)| &text[s..e]).collect();
        assert_eq!(pieces.concat(), text);
        assert!(
            pieces.contains(&"你好世界") && pieces.contains(&"123") && pieces.contains(&" it's")
        );
    }
}
