//! The backbone's precision by tensor class (`--backbone q8|q4|q3|auto`):
//! which block format each class of weight matrices is stored and held in.
//! Classes are `waste inspect`'s ([`tensor_class`]). Rules that no choice
//! breaks: routers keep their source precision (bf16 or f32, never below 8
//! bits), norms and other vectors theirs (16 or 32 bits), and nothing goes
//! below `q3` (3.25 bits per weight).
//!
//! `auto` starts every class at `q8` and demotes classes one step at a time
//! (`q8` → `q4` → the class's 3-bit format, `q3` or `q3-tcq`) in
//! [`demotion_order`] until the RAM plan fits: the step that saves the most
//! bytes per unit of measured sensitivity first.
//! The sensitivity ([`SENSITIVITY`]) is measured on the real upcycled
//! SmolLM2 (docs/QUANT.md: next-token KL with only that class rounded),
//! per parameter so that it carries over to a release shape (`--like`).

use std::fmt;
use std::str::FromStr;

use waste_kernels::Format;

use crate::inspect::tensor_class;

use super::names::is_router;

/// The classes whose weight matrices the backbone format sets, by
/// [`tensor_class`]'s names. Routers and norms are not among them.
pub const MATRIX_CLASSES: [&str; 9] = [
    "embeddings",
    "lm_head",
    "attention",
    "attention values",
    "attention residuals",
    "latent projections",
    "shared experts",
    "dense ffn",
    "other",
];

/// The formats a class may take: `q8`, `q4`, and at 3.25 bits `q3` or
/// `q3-tcq` (trellis-coded: less weight error, a slower decode).
pub const FORMATS: [Format; 4] = [Format::Q8, Format::Q4, Format::Q3, Format::Q3Tcq];

/// A block format for each class of [`MATRIX_CLASSES`], or none: the class
/// keeps its source precision (as `--backbone native` would).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassFormats([Option<Format>; MATRIX_CLASSES.len()]);

impl ClassFormats {
    /// Every class in `format`.
    pub const fn uniform(format: Format) -> Self {
        Self([Some(format); MATRIX_CLASSES.len()])
    }

    /// The format of `class`, `None` for a class kept in its source
    /// precision (routers and norms always are).
    pub fn get(&self, class: &str) -> Option<Format> {
        let i = MATRIX_CLASSES.iter().position(|c| *c == class)?;
        self.0[i]
    }

    /// Sets the format of `class` (one of [`MATRIX_CLASSES`]; others are ignored).
    pub fn set(&mut self, class: &str, format: Format) {
        if let Some(i) = MATRIX_CLASSES.iter().position(|c| *c == class) {
            self.0[i] = Some(format);
        }
    }

    /// The format a backbone tensor `name` of `shape` is stored in: a 2-D
    /// `<p>.weight` that is not a router takes its class's; `None` keeps
    /// the tensor's own precision.
    pub fn of_tensor(&self, name: &str, shape: &[usize]) -> Option<Format> {
        let weight = shape.len() == 2 && !is_router(name) && name.ends_with(".weight");
        if weight {
            self.get(tensor_class(name))
        } else {
            None
        }
    }

    /// The one format of every class, if they share one.
    pub fn single(&self) -> Option<Format> {
        let first = self.0[0]?;
        self.0.iter().all(|f| *f == Some(first)).then_some(first)
    }

    /// The classes given a format and their formats, in [`MATRIX_CLASSES`]' order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Format)> + '_ {
        MATRIX_CLASSES
            .iter()
            .copied()
            .zip(self.0.iter().copied())
            .filter_map(|(c, f)| Some((c, f?)))
    }
}

/// `q4`, or for a mix `embeddings=q8,lm_head=q4,...` (the stable name
/// recorded in a store's manifest; classes left out keep their source
/// precision).
impl fmt::Display for ClassFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(one) = self.single() {
            return f.write_str(one.name());
        }
        let parts: Vec<String> = self.iter().map(|(c, fm)| format!("{c}={fm}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// Parses `q8`, `q4`, `q3`, `q3-tcq` (every class) or `class=format,...` (those
/// classes; the rest keep their source precision). Formats outside
/// [`FORMATS`] (below 3.25 bits, or not block formats) are refused.
impl FromStr for ClassFormats {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let format = |f: &str| {
            FORMATS
                .into_iter()
                .find(|l| l.name() == f)
                .ok_or_else(|| format!("backbone format {f:?}: one of q8, q4, q3, q3-tcq"))
        };
        if !s.contains('=') {
            return Ok(Self::uniform(format(s)?));
        }
        let mut out = Self([None; MATRIX_CLASSES.len()]);
        for part in s.split(',') {
            let (class, fmt) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected class=format"))?;
            let class = class.replace('_', " ");
            let class = if class == "lm head" {
                "lm_head".into()
            } else {
                class
            };
            if !MATRIX_CLASSES.contains(&class.as_str()) {
                return Err(format!(
                    "{class:?} is no backbone class with a format ({})",
                    MATRIX_CLASSES.join(", ")
                ));
            }
            out.set(&class, format(fmt)?);
        }
        Ok(out)
    }
}

/// Measured sensitivity of one class: the mean next-token KL (nats) of the
/// upcycled SmolLM2 with only that class's matrices at `q4` and at its
/// 3-bit format, everything else exact, divided by the class's parameters
/// in millions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sensitivity {
    pub class: &'static str,
    /// Where the figure comes from (the SmolLM2 class measured).
    pub measured_as: &'static str,
    /// KL per million parameters at `q4`.
    pub q4: f64,
    /// The class's last step: of `q3` and `q3-tcq` (the same 3.25 bits),
    /// the one whose KL measured lower on the class.
    pub three_bit: Format,
    /// KL per million parameters at `three_bit`.
    pub three_bit_kl: f64,
}

/// The measured sensitivity of every class `auto` demotes (docs/QUANT.md,
/// "Backbone precision by class", has the commands and the raw figures).
///
/// Measured on SmolLM2-135M-Instruct (Q4_1 GGUF) upcycled to 8 experts,
/// top-2: mean next-token KL over the first 400 tokens of
/// `tests/data/public_domain.txt` against the GGUF, with only that class
/// rounded (the rest, experts included, exact), divided by the class's
/// parameters: the tied embeddings (28.31 M: token table and output head)
/// 0.1100 nats at q4, 0.3475 at q3, 0.1621 at q3-tcq; attention's q/k/o
/// (23.22 M) 0.0297, 0.1395, 0.1014; its value projections (3.318 M)
/// 0.0647, 0.1647, 0.2170; the FFN (79.63 M, every expert a copy of it, so
/// all of them rounded is the FFN rounded) 0.1001, 0.5758, 0.3628. Each
/// class's 3-bit step is the lower of its two: the rotated trellis loses
/// only on the value projections. Classes SmolLM2 lacks take the figures
/// of the one they resemble: shared experts, the dense FFN and the latent
/// projections (matrices on the FFN path) the FFN's; attention residuals
/// and `other` attention's; `lm_head` and the embeddings the tied table's
/// (which measured both roles at once). Ties keep this order.
pub const SENSITIVITY: &[Sensitivity] = &[
    Sensitivity {
        class: "shared experts",
        measured_as: "ffn",
        q4: 0.1001 / 79.63,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.3628 / 79.63,
    },
    Sensitivity {
        class: "latent projections",
        measured_as: "ffn",
        q4: 0.1001 / 79.63,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.3628 / 79.63,
    },
    Sensitivity {
        class: "dense ffn",
        measured_as: "ffn",
        q4: 0.1001 / 79.63,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.3628 / 79.63,
    },
    Sensitivity {
        class: "attention",
        measured_as: "attention",
        q4: 0.0297 / 23.22,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.1014 / 23.22,
    },
    Sensitivity {
        class: "attention values",
        measured_as: "attention values",
        q4: 0.0647 / 3.318,
        three_bit: Format::Q3,
        three_bit_kl: 0.1647 / 3.318,
    },
    Sensitivity {
        class: "attention residuals",
        measured_as: "attention",
        q4: 0.0297 / 23.22,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.1014 / 23.22,
    },
    Sensitivity {
        class: "other",
        measured_as: "attention",
        q4: 0.0297 / 23.22,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.1014 / 23.22,
    },
    Sensitivity {
        class: "embeddings",
        measured_as: "tied embeddings",
        q4: 0.1100 / 28.31,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.1621 / 28.31,
    },
    Sensitivity {
        class: "lm_head",
        measured_as: "tied embeddings",
        q4: 0.1100 / 28.31,
        three_bit: Format::Q3Tcq,
        three_bit_kl: 0.1621 / 28.31,
    },
];

/// One demotion: `class` from the step above to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demotion {
    pub class: &'static str,
    pub to: Format,
}

/// Bits per weight of a backbone format (its blocks, every scale counted).
fn bits(format: Format) -> f64 {
    8.0 * format.block_bytes() as f64 / 32.0
}

/// The demotions in `auto`'s order: by bits saved per unit of added
/// sensitivity (both per parameter, so the order holds for any model's
/// class sizes), largest first; a class's 3-bit step never before its `q4`
/// step (when the ratio says otherwise, the two go together at the `q4`
/// step's place).
pub fn demotion_order(table: &[Sensitivity]) -> Vec<Demotion> {
    let mut steps: Vec<(f64, Demotion)> = Vec::new();
    for s in table {
        let to_q4 = (bits(Format::Q8) - bits(Format::Q4)) / s.q4.max(f64::MIN_POSITIVE);
        let to_q3 =
            (bits(Format::Q4) - bits(s.three_bit)) / (s.three_bit_kl - s.q4).max(f64::MIN_POSITIVE);
        steps.push((
            to_q4,
            Demotion {
                class: s.class,
                to: Format::Q4,
            },
        ));
        steps.push((
            to_q3.min(to_q4),
            Demotion {
                class: s.class,
                to: s.three_bit,
            },
        ));
    }
    // Stable: ties keep the table's order, and a q3 step at its q4 step's
    // ratio stays behind it.
    steps.sort_by(|a, b| b.0.total_cmp(&a.0));
    steps.into_iter().map(|(_, d)| d).collect()
}

/// `auto`'s choice: every class at `q8`, then the demotions of `order` one
/// by one until `fits` says the plan fits. Returns the formats and whether
/// they fit (when even every class at 3 bits does not, those formats and
/// `false`).
pub fn choose(
    order: &[Demotion],
    mut fits: impl FnMut(&ClassFormats) -> bool,
) -> (ClassFormats, bool) {
    let mut formats = ClassFormats::uniform(Format::Q8);
    if fits(&formats) {
        return (formats, true);
    }
    for d in order {
        formats.set(d.class, d.to);
        if fits(&formats) {
            return (formats, true);
        }
    }
    (formats, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<Sensitivity> {
        vec![
            Sensitivity {
                class: "attention",
                measured_as: "attention",
                q4: 4.0,
                three_bit: Format::Q3,
                three_bit_kl: 10.0,
            },
            Sensitivity {
                class: "shared experts",
                measured_as: "experts",
                q4: 1.0,
                three_bit: Format::Q3Tcq,
                three_bit_kl: 1.5,
            },
            Sensitivity {
                class: "embeddings",
                measured_as: "embeddings",
                q4: 2.0,
                three_bit: Format::Q3,
                three_bit_kl: 20.0,
            },
        ]
    }

    #[test]
    fn the_order_saves_most_per_sensitivity_and_keeps_q4_before_q3() {
        let order = demotion_order(&table());
        let names: Vec<(&str, &str)> = order.iter().map(|d| (d.class, d.to.name())).collect();
        // shared q4: 4.25/1 = 4.25; shared q3: 1/0.5 = 2 -> 2; embeddings q4:
        // 2.125; attention q4 1.06; attention q3 1/6; embeddings q3 1/18.
        assert_eq!(
            names,
            [
                ("shared experts", "q4"),
                ("embeddings", "q4"),
                ("shared experts", "q3-tcq"),
                ("attention", "q4"),
                ("attention", "q3"),
                ("embeddings", "q3"),
            ]
        );
        for (i, d) in order.iter().enumerate() {
            if d.to != Format::Q4 {
                assert!(order[..i].contains(&Demotion {
                    class: d.class,
                    to: Format::Q4
                }));
            }
        }
    }

    #[test]
    fn the_measured_order_demotes_every_class_once_per_step() {
        let order = demotion_order(SENSITIVITY);
        assert_eq!(order.len(), 2 * SENSITIVITY.len());
        for s in SENSITIVITY {
            let steps: Vec<Format> = order
                .iter()
                .filter(|d| d.class == s.class)
                .map(|d| d.to)
                .collect();
            assert_eq!(steps, [Format::Q4, s.three_bit], "{}", s.class);
            assert_eq!(
                bits(s.three_bit),
                3.25,
                "{}: nothing below 3.25 bits",
                s.class
            );
        }
        for class in MATRIX_CLASSES {
            assert!(SENSITIVITY.iter().any(|s| s.class == class), "{class}");
        }
        // Measured: the FFN saves the most bits per unit of KL.
        assert_eq!(order[0].class, "shared experts");
    }

    #[test]
    fn choose_stops_at_the_first_fit_and_reports_a_miss() {
        let order = demotion_order(&table());
        let mut seen = 0;
        let (f, ok) = choose(&order, |f| {
            seen += 1;
            f.get("embeddings") == Some(Format::Q4)
        });
        assert!(ok);
        assert_eq!(seen, 3);
        assert_eq!(f.get("shared experts"), Some(Format::Q4));
        assert_eq!(f.get("attention"), Some(Format::Q8));
        assert_eq!(f.get("routers"), None);
        let (f, ok) = choose(&order, |_| false);
        assert!(!ok);
        assert_eq!(f.get("attention"), Some(Format::Q3));
        assert_eq!(
            f.get("shared experts"),
            Some(Format::Q3Tcq),
            "its own 3-bit step"
        );
        assert_eq!(f.get("dense ffn"), Some(Format::Q8), "not in the table");
    }

    #[test]
    fn names_are_stable_and_routers_norms_keep_their_precision() {
        assert_eq!(ClassFormats::uniform(Format::Q4).to_string(), "q4");
        let mut f = ClassFormats::uniform(Format::Q8);
        f.set("attention", Format::Q3);
        assert!(f.to_string().contains("attention=q3"));
        let q = "model.layers.0.self_attn.q_proj.weight";
        assert_eq!(f.of_tensor(q, &[8, 8]), Some(Format::Q3));
        assert_eq!(f.of_tensor("model.layers.0.mlp.gate.weight", &[8, 8]), None);
        assert_eq!(f.of_tensor("model.norm.weight", &[8]), None);
        assert_eq!(f.to_string().parse::<ClassFormats>().unwrap(), f);
        let one: ClassFormats = "attention=q4".parse().unwrap();
        assert_eq!(one.get("attention"), Some(Format::Q4));
        assert_eq!(one.get("embeddings"), None, "the rest keep their precision");
        assert_eq!(one.to_string(), "attention=q4");
        assert!("attention=q2".parse::<ClassFormats>().is_err());
        let values: ClassFormats = "attention_values=q3".parse().unwrap();
        assert_eq!(values.get("attention values"), Some(Format::Q3));
        let v = "model.layers.3.self_attn.v_proj.weight";
        assert_eq!(values.of_tensor(v, &[8, 8]), Some(Format::Q3));
        assert_eq!(values.of_tensor(q, &[8, 8]), None, "q is attention's");
        let tcq: ClassFormats = "shared_experts=q3-tcq".parse().unwrap();
        assert_eq!(tcq.get("shared experts"), Some(Format::Q3Tcq));
        assert_eq!(tcq.to_string().parse::<ClassFormats>().unwrap(), tcq);
        assert!("routers=q4".parse::<ClassFormats>().is_err());
        assert!("q3-rtn".parse::<ClassFormats>().is_err());
    }
}
