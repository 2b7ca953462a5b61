//! The conversion's settings as the command line states them: the expert
//! format (`--experts`), the backbone format (`--backbone`), parallelism
//! (`--jobs`) and sparse upcycling (`--upcycle E:K`), with their stable
//! names (recorded in the manifest and the resume fingerprint).

use std::str::FromStr;

use waste_kernels::{Format, Recipe};

use super::precision::ClassFormats;

/// How routed experts are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertsMode {
    /// Quantized with a waste-kernels recipe (`q3`, `q3-q4down`,
    /// `q3-tcq-q4down`, `q4`, `q8`).
    Recipe(Recipe),
    /// Every matrix in one block format that is no recipe (`q3-rtn`, the
    /// round-to-nearest baseline; `q3-tcq`, the trellis-coded format).
    Uniform(Format),
    /// Rounded to bf16.
    Bf16,
    /// Decoded to f32 (exact, large).
    F32,
    /// As the release stores them (bf16, fp8 blocks, int4, MXFP4; exact f32
    /// for encodings without a kernel): the exact path.
    Native,
}

impl ExpertsMode {
    pub fn name(self) -> String {
        match self {
            Self::Recipe(r) => r.name().to_string(),
            Self::Uniform(f) => f.name().to_string(),
            Self::Bf16 => "bf16".into(),
            Self::F32 => "f32".into(),
            Self::Native => "native".into(),
        }
    }
}

impl FromStr for ExpertsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "native" => Ok(Self::Native),
            "bf16" => Ok(Self::Bf16),
            "f32" => Ok(Self::F32),
            other => match (other.parse::<Recipe>(), other.parse::<Format>()) {
                (Ok(r), _) => Ok(Self::Recipe(r)),
                (_, Ok(f)) if Format::ALL.contains(&f) || Format::ROTATED.contains(&f) => {
                    Ok(Self::Uniform(f))
                }
                _ => Err(format!(
                    "unknown expert format {other:?} (q3, q3-q4down, q3-tcq-q4down, q4, q8, q3-rtn, q3-tcq, bf16, f32, native)"
                )),
            },
        }
    }
}

/// How the backbone's matrices are stored (routers, norms and other
/// vectors always keep their source precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackboneMode {
    /// As the source stores them (GGUF block formats are decoded to f32,
    /// GGUF bf16 stays bf16).
    Native,
    /// Rounded to bf16.
    Bf16,
    /// waste's block formats, one per tensor class (`q8`, `q4`, `q3`:
    /// every class in one; `class=format,...`: those classes, the rest as
    /// `native`), held packed in RAM by the node.
    Blocks(ClassFormats),
    /// A format per class chosen to fit a RAM budget (`--backbone auto`):
    /// the command line resolves it to [`BackboneMode::Blocks`] from the
    /// RAM plan before anything is converted.
    Auto,
}

impl BackboneMode {
    /// waste's 8-bit group format (`q8`) for every class.
    pub const Q8: Self = Self::Blocks(ClassFormats::uniform(Format::Q8));

    /// The stable name: `native`, `bf16`, `q8`, `q4`, `q3`, `auto`, or a
    /// chosen mix's `class=format,...`.
    pub fn name(self) -> String {
        match self {
            Self::Native => "native".into(),
            Self::Bf16 => "bf16".into(),
            Self::Blocks(f) => f.to_string(),
            Self::Auto => "auto".into(),
        }
    }
}

impl FromStr for BackboneMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "native" => Ok(Self::Native),
            "bf16" => Ok(Self::Bf16),
            "auto" => Ok(Self::Auto),
            other => other.parse().map(Self::Blocks).map_err(|e| {
                format!(
                    "{e} (--backbone: native, bf16, q8, q4, q3, q3-tcq, auto, or class=format,...)"
                )
            }),
        }
    }
}

/// Everything that decides what a conversion writes, and how fast.
#[derive(Debug, Clone)]
pub struct Options {
    pub experts: ExpertsMode,
    pub backbone: BackboneMode,
    /// Worker threads (quantization and decoding); 0 = every core.
    pub jobs: usize,
    /// `(experts, top_k)` of a sparse upcycling of a dense model.
    pub upcycle: Option<(usize, usize)>,
    /// Seed of the upcycled routers.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            experts: ExpertsMode::Recipe(Recipe::Q3),
            backbone: BackboneMode::Native,
            jobs: 0,
            upcycle: None,
            seed: 0,
        }
    }
}

/// Parses `E:K` (`--upcycle 8:2`).
pub fn parse_upcycle(s: &str) -> Result<(usize, usize), String> {
    let (e, k) = s
        .split_once(':')
        .ok_or_else(|| format!("--upcycle {s:?}: expected E:K, e.g. 8:2"))?;
    let parse = |v: &str| {
        v.parse::<usize>()
            .map_err(|_| format!("--upcycle {s:?}: {v:?} is not a count"))
    };
    Ok((parse(e)?, parse(k)?))
}
