//! The tokenizer: a thin, offline wrapper over Hugging Face `tokenizers` loaded from
//! `tokenizer.json`, plus what `tokenizer_config.json` adds (special tokens, `add_bos_token`,
//! the chat template) and an incremental detokenizer for streaming ([`DecodeStream`],
//! `stream.rs`).
//!
//! Folders without a `tokenizer.json` but with a `tiktoken.model` (Kimi K2/K3, Kimi-Linear) are
//! read by `tiktoken.rs` into the same wrapper. Their text is encoded and decoded by `bpe.rs`,
//! which follows tiktoken exactly where `tokenizers`' BPE model and byte-level decoder could
//! differ; the rest (token spelling, vocabulary, [`Tokenizer::inner`]) uses a
//! `tokenizers::Tokenizer` built with the same ids.
//!
//! It does not render chat templates (`chat.rs`) or read `config.json` /
//! `generation_config.json`: their `eos_token_id` values are handed in by the caller through
//! [`Tokenizer::add_eos_token_ids`] (parse them with [`token_ids_from_json`]).

mod bpe;
mod stream;
mod tiktoken;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

pub use stream::DecodeStream;
pub use tiktoken::{KIMI_PAT_STR, RESERVED_SPECIAL_TOKENS};

/// What can go wrong loading or running a tokenizer. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A file could not be read (`fs_err` puts the path in the message).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The model folder has neither `tokenizer.json` nor `tiktoken.model`.
    #[error("no tokenizer.json or tiktoken.model in {}", dir.display())]
    Missing { dir: PathBuf },
    /// `tokenizer.json` is not a tokenizer the `tokenizers` crate understands, or a
    /// `tiktoken.model` cannot be made into one (no ranks, a special token spelled like a BPE
    /// token).
    #[error("{}: cannot load tokenizer: {message}", path.display())]
    Load { path: PathBuf, message: String },
    /// A line of `tiktoken.model` is not `<base64 token bytes> <rank>` with a rank in range.
    #[error("{}:{line}: {reason}", path.display())]
    BadRankLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Two lines of `tiktoken.model` give the same rank.
    #[error("{}:{line}: rank {rank} was already given on line {first_line}", path.display())]
    DuplicateRank {
        path: PathBuf,
        line: usize,
        rank: u32,
        first_line: usize,
    },
    /// Two lines of `tiktoken.model` rank the same token bytes.
    #[error("{}:{line}: the token of line {first_line} again", path.display())]
    DuplicateToken {
        path: PathBuf,
        line: usize,
        first_line: usize,
    },
    /// `tokenizer_config.json` (or `chat_template.json`) is malformed.
    #[error("{}: {message}", path.display())]
    Config { path: PathBuf, message: String },
    /// Encoding a text failed.
    #[error("{}: encode failed: {message}", path.display())]
    Encode { path: PathBuf, message: String },
    /// Decoding ids failed.
    #[error("{}: decode failed: {message}", path.display())]
    Decode { path: PathBuf, message: String },
}

type Result<T> = std::result::Result<T, TokenizerError>;

/// A special token named in `tokenizer_config.json`. `id` is `None` when the vocabulary lacks
/// the token: the text still matters to chat templates (`bos_token`), the id does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialToken {
    pub content: String,
    pub id: Option<u32>,
}

/// The special tokens of `tokenizer_config.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<SpecialToken>,
    pub eos: Option<SpecialToken>,
    pub pad: Option<SpecialToken>,
    pub unk: Option<SpecialToken>,
    /// `add_bos_token` when the config states it; `None` leaves BOS to the post-processor.
    pub add_bos_token: Option<bool>,
}

/// A loaded tokenizer with its special tokens, chat template and stop ids.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Set for `tiktoken.model` folders: encodes and decodes instead of `inner` (same ids,
    /// tiktoken's merges and special-token bytes).
    tiktoken: Option<Arc<bpe::TiktokenBpe>>,
    /// The `tokenizer.json` (or `tiktoken.model`) it came from, for error messages.
    path: PathBuf,
    special: SpecialTokens,
    chat_template: Option<String>,
    eos_ids: Vec<u32>,
    /// `Some(true)`: prepend BOS when the post-processor does not; `Some(false)`: strip the BOS
    /// the post-processor adds. HF's Llama/Gemma tokenizers rebuild their post-processor from
    /// `add_bos_token`, so the config flag wins over `tokenizer.json`.
    bos_fix: Option<bool>,
}

impl Tokenizer {
    /// Loads `tokenizer.json` alone: no special-token names, no chat template, no stop ids.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let bytes = fs_err::read(&path)?;
        Self::from_bytes(&bytes, path)
    }

    /// Builds a tokenizer from an in-memory `tokenizer.json` plus, when given, the
    /// `tokenizer_config.json` fields (special tokens, `add_bos_token`, `chat_template`): for
    /// tokenizers that come without files, such as one rebuilt from a GGUF file's metadata.
    /// `origin` names the source in errors (the GGUF path, say).
    pub fn from_json_str(
        tokenizer_json: &str,
        config: Option<&Value>,
        origin: impl Into<PathBuf>,
    ) -> Result<Self> {
        let origin = origin.into();
        let mut tok = Self::from_bytes(tokenizer_json.as_bytes(), origin.clone())?;
        match config {
            None => {}
            Some(Value::Object(config)) => tok.apply_config(&origin, config)?,
            Some(_) => {
                return Err(config_err(
                    &origin,
                    "tokenizer config is not a JSON object".into(),
                ));
            }
        }
        Ok(tok)
    }

    fn from_bytes(bytes: &[u8], path: PathBuf) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Load {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Self::from_inner(inner, None, path)
    }

    fn from_inner(
        mut inner: tokenizers::Tokenizer,
        tiktoken: Option<bpe::TiktokenBpe>,
        path: PathBuf,
    ) -> Result<Self> {
        // An LLM prompt must never be cut or padded behind the caller's back, whatever
        // tokenizer.json says about truncation and padding.
        inner
            .with_truncation(None)
            .map_err(|e| TokenizerError::Load {
                path: path.clone(),
                message: e.to_string(),
            })?;
        inner.with_padding(None);
        Ok(Self {
            inner,
            tiktoken: tiktoken.map(Arc::new),
            path,
            special: SpecialTokens::default(),
            chat_template: None,
            eos_ids: Vec::new(),
            bos_fix: None,
        })
    }

    /// Loads a Hugging Face model folder: `tokenizer.json` — or, when there is none,
    /// `tiktoken.model` (Kimi; its special ids are named by `tokenizer_config.json`) — then
    /// `tokenizer_config.json` when present (special tokens, `add_bos_token`, `chat_template`),
    /// then the chat template from `chat_template.jinja`, which newer transformers write instead
    /// and which wins, or from `chat_template.json` (processor folders) as a last resort.
    /// A `tokenizer.json` wins over `tiktoken.model`: it is what transformers' fast tokenizer
    /// would load from such a folder.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let tokenizer_json = dir.join("tokenizer.json");
        let tiktoken_model = dir.join("tiktoken.model");
        if !tokenizer_json.is_file() && !tiktoken_model.is_file() {
            return Err(TokenizerError::Missing {
                dir: dir.to_path_buf(),
            });
        }
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            Some(read_json_object(&config_path)?)
        } else {
            None
        };
        let mut tok = if tokenizer_json.is_file() {
            Self::from_file(&tokenizer_json)?
        } else {
            let config = config.as_ref().map(|c| (config_path.as_path(), c));
            let loaded = tiktoken::load(&tiktoken_model, config)?;
            Self::from_inner(loaded.inner, Some(loaded.bpe), tiktoken_model)?
        };
        if let Some(config) = &config {
            tok.apply_config(&config_path, config)?;
        }
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            tok.chat_template = Some(fs_err::read_to_string(&jinja)?);
        } else if tok.chat_template.is_none() {
            let json = dir.join("chat_template.json");
            if json.is_file() {
                let config = read_json_object(&json)?;
                tok.chat_template = chat_template_from(&json, config.get("chat_template"))?;
            }
        }
        Ok(tok)
    }

    fn apply_config(&mut self, path: &Path, config: &serde_json::Map<String, Value>) -> Result<()> {
        let token = |key: &str| -> Result<Option<SpecialToken>> {
            Ok(
                token_content(path, key, config.get(key))?.map(|content| SpecialToken {
                    id: self.inner.token_to_id(&content),
                    content,
                }),
            )
        };
        let add_bos_token = match config.get("add_bos_token") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(config_err(
                    path,
                    format!("add_bos_token is {other}, not a bool"),
                ));
            }
        };
        self.special = SpecialTokens {
            bos: token("bos_token")?,
            eos: token("eos_token")?,
            pad: token("pad_token")?,
            unk: token("unk_token")?,
            add_bos_token,
        };
        self.chat_template = chat_template_from(path, config.get("chat_template"))?;
        if let Some(id) = self.special.eos.as_ref().and_then(|t| t.id) {
            self.add_eos_token_ids([id]);
        }
        self.bos_fix = self.bos_fix_for(add_bos_token);
        Ok(())
    }

    /// Whether `encode(.., true)` must add or remove a BOS to honour `add_bos_token`.
    fn bos_fix_for(&self, add_bos_token: Option<bool>) -> Option<bool> {
        let want = add_bos_token?;
        let bos = self.special.bos.as_ref()?.id?;
        // Probe the post-processor with a one-character text: it either puts BOS first or not.
        // A tiktoken folder has no post-processor (`encode_raw`).
        let has = self.encode_raw("a", true).ok()?.first() == Some(&bos);
        (want != has).then_some(want)
    }

    /// Token ids of `text`. `add_special_tokens` runs the post-processor (BOS/EOS as the
    /// tokenizer defines them, corrected by `add_bos_token`); chat prompts rendered from a
    /// template already hold their special tokens and are encoded with `false`, as HF does.
    ///
    /// Special tokens in `text` are always matched as such, whatever `add_special_tokens` says:
    /// `tokenizers` does that for added tokens, tiktoken with `allowed_special="all"`, which is
    /// how Kimi's Python encodes by default.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let mut ids = self.encode_raw(text, add_special_tokens)?;
        if add_special_tokens {
            let bos = self.special.bos.as_ref().and_then(|t| t.id);
            match (self.bos_fix, bos) {
                (Some(true), Some(bos)) if ids.first() != Some(&bos) => ids.insert(0, bos),
                (Some(false), Some(bos)) if ids.first() == Some(&bos) => {
                    ids.remove(0);
                }
                _ => {}
            }
        }
        Ok(ids)
    }

    /// Ids from the post-processor (HF) or tiktoken, before the `add_bos_token` correction.
    fn encode_raw(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encode_err = |message: String| TokenizerError::Encode {
            path: self.path.clone(),
            message,
        };
        match &self.tiktoken {
            Some(bpe) => bpe.encode(text).map_err(encode_err),
            None => self
                .inner
                .encode_fast(text, add_special_tokens)
                .map(|encoding| encoding.get_ids().to_vec())
                .map_err(|e| encode_err(e.to_string())),
        }
    }

    /// Text of `ids`. Ids outside the vocabulary are skipped (that is what `tokenizers` does).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(bpe) = &self.tiktoken {
            return Ok(bpe.decode(ids, skip_special_tokens));
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// The id of a token string (added tokens included), exactly as spelled in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary string of an id (byte-level tokens keep their `Ġ` spelling).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of distinct tokens, added tokens included. The model's embedding may be larger.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The ids that end a generation: the config's `eos_token` plus any the caller added.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Adds stop ids, e.g. `eos_token_id` of `config.json` / `generation_config.json`, which may
    /// list several (Llama 3: `<|end_of_text|>`, `<|eom_id|>`, `<|eot_id|>`). Duplicates are dropped.
    pub fn add_eos_token_ids(&mut self, ids: impl IntoIterator<Item = u32>) {
        for id in ids {
            if !self.eos_ids.contains(&id) {
                self.eos_ids.push(id);
            }
        }
    }

    /// The special tokens read from `tokenizer_config.json`.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Text of the BOS token, for chat templates.
    pub fn bos_token(&self) -> Option<&str> {
        self.special.bos.as_ref().map(|t| t.content.as_str())
    }

    /// Text of the EOS token, for chat templates.
    pub fn eos_token(&self) -> Option<&str> {
        self.special.eos.as_ref().map(|t| t.content.as_str())
    }

    /// The default chat template source, if the folder has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The `tokenizer.json` (or `tiktoken.model`) this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The wrapped `tokenizers` tokenizer, for what this wrapper does not expose. For a
    /// `tiktoken.model` folder it is the converted tokenizer (same vocabulary, specials and
    /// decoder); encode and decode through [`Tokenizer::encode`] and [`Tokenizer::decode`],
    /// which alone follow tiktoken exactly.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// Token ids from an `eos_token_id`-style JSON value: an integer, a list of integers or null.
/// Entries that are not non-negative 32-bit integers are ignored.
pub fn token_ids_from_json(value: &Value) -> Vec<u32> {
    let one = |v: &Value| v.as_u64().and_then(|id| u32::try_from(id).ok());
    match value {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        other => one(other).into_iter().collect(),
    }
}

fn config_err(path: &Path, message: String) -> TokenizerError {
    TokenizerError::Config {
        path: path.to_path_buf(),
        message,
    }
}

fn read_json_object(path: &Path) -> Result<serde_json::Map<String, Value>> {
    let text = fs_err::read_to_string(path)?;
    match serde_json::from_str(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(config_err(path, "not a JSON object".into())),
        Err(e) => Err(config_err(path, format!("invalid JSON: {e}"))),
    }
}

/// A special token entry: a string, an `AddedToken` object (`{"content": ...}`) or null.
fn token_content(path: &Path, key: &str, value: Option<&Value>) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(obj)) => match obj.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(config_err(path, format!("{key} has no string \"content\""))),
        },
        Some(other) => Err(config_err(path, format!("{key} is {other}, not a token"))),
    }
}

/// `chat_template`: a string, or a list of `{name, template}` of which HF uses "default".
fn chat_template_from(path: &Path, value: Option<&Value>) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(items)) => {
            let named = |item: &Value| {
                let name = item.get("name")?.as_str()?;
                Some((name.to_owned(), item.get("template")?.as_str()?.to_owned()))
            };
            let mut templates = Vec::with_capacity(items.len());
            for item in items {
                let pair = named(item).ok_or_else(|| {
                    config_err(
                        path,
                        "chat_template list entries need string name and template".into(),
                    )
                })?;
                templates.push(pair);
            }
            Ok(templates
                .into_iter()
                .find(|(name, _)| name == "default")
                .map(|(_, t)| t))
        }
        Some(_) => Err(config_err(
            path,
            "chat_template is neither a string nor a list".into(),
        )),
    }
}
