//! Errors of the model crate. Variants name the config key, tensor or layer at
//! fault so a user can tell a bad checkpoint from a bug.

use std::path::{Path, PathBuf};

use waste_kernels::TensorSourceError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config.json key (or one of the config synthesised from a GGUF
    /// file) is missing, mistyped, out of range or inconsistent with another.
    #[error("{}: `{key}`: {reason}", file.display())]
    Config {
        file: PathBuf,
        key: String,
        reason: String,
    },
    /// The checkpoint's architecture is not one waste implements.
    #[error("{}: `model_type`: {model_type:?} is not supported (supported: {supported})", file.display())]
    UnsupportedArchitecture {
        file: PathBuf,
        model_type: String,
        supported: &'static str,
    },
    /// A weight the architecture needs could not be loaded.
    #[error("weight {name}: {source}")]
    Weight {
        name: String,
        source: TensorSourceError,
    },
    /// A weight the config requires is not in the checkpoint.
    #[error("weight {name}: missing (the config implies shape {expected:?})")]
    MissingWeight { name: String, expected: Vec<usize> },
    /// A routed-expert weight the config has no place for (a layer or an
    /// expert id past the config's counts).
    #[error("weight {name}: {reason}")]
    UnexpectedWeight { name: String, reason: String },
    /// A weight has a shape other than the config implies.
    #[error("weight {name}: shape {got:?}, expected {expected:?}")]
    WeightShape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    /// A kernel rejected its operands (a bug or an inconsistent checkpoint).
    #[error("layer {layer}: {source}")]
    Kernel {
        layer: usize,
        source: waste_kernels::Error,
    },
    /// A step of no tokens: nothing to attend and no logits to return.
    #[error("a forward step needs at least one token")]
    EmptyStep,
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    /// A forward pass would run past the context the cache was sized for.
    #[error("context overflow: {needed} positions needed, the context holds {capacity}")]
    ContextOverflow { needed: usize, capacity: usize },
    /// The caller handed `apply_experts` a different set of experts than routed.
    #[error("layer {layer}: expected {expected} experts for this routing, got {got}")]
    ExpertCount {
        layer: usize,
        expected: usize,
        got: usize,
    },
    /// An expert whose shape does not fit the layer.
    #[error("layer {layer} expert {expert}: {what}")]
    ExpertShape {
        layer: usize,
        expert: u32,
        what: String,
    },
    /// A layer index past the model's last layer or a step called out of order.
    #[error("layer {layer}: {what}")]
    Step { layer: usize, what: &'static str },
    /// The expert provider failed to produce an expert.
    #[error("layer {layer} expert {expert}: {source}")]
    ExpertSource {
        layer: usize,
        expert: u32,
        source: TensorSourceError,
    },
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error(transparent)]
    ChatTemplate(#[from] crate::chat::ChatTemplateError),
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplingError),
}

pub type Result<T> = std::result::Result<T, Error>;

/// The file a config error is reported against until the caller names the real one.
pub(crate) const CONFIG_JSON: &str = "config.json";

impl Error {
    /// An error about config key `key`.
    pub(crate) fn config(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Config {
            file: PathBuf::from(CONFIG_JSON),
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// Names `file` as the config at fault (other errors pass unchanged).
    #[must_use]
    pub fn in_file(self, file: &Path) -> Self {
        match self {
            Self::Config { key, reason, .. } => Self::Config {
                file: file.to_path_buf(),
                key,
                reason,
            },
            Self::UnsupportedArchitecture {
                model_type,
                supported,
                ..
            } => Self::UnsupportedArchitecture {
                file: file.to_path_buf(),
                model_type,
                supported,
            },
            other => other,
        }
    }

    /// Whether the error says the model files are wrong (a bad config,
    /// an unsupported architecture, a weight missing or misshapen) rather
    /// than a bug or a bad request: the CLI's EX_DATAERR class.
    pub fn is_bad_model(&self) -> bool {
        matches!(
            self,
            Self::Config { .. }
                | Self::UnsupportedArchitecture { .. }
                | Self::Weight { .. }
                | Self::MissingWeight { .. }
                | Self::UnexpectedWeight { .. }
                | Self::WeightShape { .. }
                | Self::ExpertShape { .. }
        )
    }
}

/// Attaches the layer index to a kernel error.
pub(crate) trait KernelContext<T> {
    fn at_layer(self, layer: usize) -> Result<T>;
}

impl<T> KernelContext<T> for waste_kernels::Result<T> {
    fn at_layer(self, layer: usize) -> Result<T> {
        self.map_err(|source| Error::Kernel { layer, source })
    }
}
