//! ggml tensor type ids as GGUF files store them, with the block geometry of
//! every id ggml defines (so a tensor's byte size can be bounds-checked even
//! when [`super::dequantize`] does not decode it). Ids are kept as raw numbers: an id
//! this table does not know is data, not undefined behaviour (ggus reads the
//! id into a closed `#[repr(u32)]` enum, which is unsound on newer files).
//!
//! Ids and sizes follow ggml's `enum ggml_type` (ggml.h) and gguf-py's
//! `GGML_QUANT_SIZES`; retired ids (4, 5, 31-33, 36-38) are unknown here.

use std::fmt;

/// A ggml tensor type id. Any `u32` is representable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

impl GgmlType {
    pub const F32: Self = Self(0);
    pub const F16: Self = Self(1);
    pub const Q4_0: Self = Self(2);
    pub const Q4_1: Self = Self(3);
    pub const Q5_0: Self = Self(6);
    pub const Q5_1: Self = Self(7);
    pub const Q8_0: Self = Self(8);
    pub const Q8_1: Self = Self(9);
    pub const Q2_K: Self = Self(10);
    pub const Q3_K: Self = Self(11);
    pub const Q4_K: Self = Self(12);
    pub const Q5_K: Self = Self(13);
    pub const Q6_K: Self = Self(14);
    pub const Q8_K: Self = Self(15);
    pub const IQ2_XXS: Self = Self(16);
    pub const IQ2_XS: Self = Self(17);
    pub const IQ3_XXS: Self = Self(18);
    pub const IQ1_S: Self = Self(19);
    pub const IQ4_NL: Self = Self(20);
    pub const IQ3_S: Self = Self(21);
    pub const IQ2_S: Self = Self(22);
    pub const IQ4_XS: Self = Self(23);
    pub const I8: Self = Self(24);
    pub const I16: Self = Self(25);
    pub const I32: Self = Self(26);
    pub const I64: Self = Self(27);
    pub const F64: Self = Self(28);
    pub const IQ1_M: Self = Self(29);
    pub const BF16: Self = Self(30);
    pub const TQ1_0: Self = Self(34);
    pub const TQ2_0: Self = Self(35);
    pub const MXFP4: Self = Self(39);

    /// The 25 types [`super::dequantize`] decodes: every type llama.cpp's
    /// quantizer writes, plus the plain floats.
    pub const DECODABLE: [Self; 25] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::IQ1_S,
        Self::IQ1_M,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ2_S,
        Self::IQ3_XXS,
        Self::IQ3_S,
        Self::IQ4_NL,
        Self::IQ4_XS,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// Name, elements per block and bytes per block of every id ggml
    /// defines; `None` for ids it does not (yet) know.
    fn traits(self) -> Option<(&'static str, usize, usize)> {
        Some(match self.0 {
            0 => ("F32", 1, 4),
            1 => ("F16", 1, 2),
            2 => ("Q4_0", 32, 18),
            3 => ("Q4_1", 32, 20),
            6 => ("Q5_0", 32, 22),
            7 => ("Q5_1", 32, 24),
            8 => ("Q8_0", 32, 34),
            9 => ("Q8_1", 32, 36),
            10 => ("Q2_K", 256, 84),
            11 => ("Q3_K", 256, 110),
            12 => ("Q4_K", 256, 144),
            13 => ("Q5_K", 256, 176),
            14 => ("Q6_K", 256, 210),
            15 => ("Q8_K", 256, 292),
            16 => ("IQ2_XXS", 256, 66),
            17 => ("IQ2_XS", 256, 74),
            18 => ("IQ3_XXS", 256, 98),
            19 => ("IQ1_S", 256, 50),
            20 => ("IQ4_NL", 32, 18),
            21 => ("IQ3_S", 256, 110),
            22 => ("IQ2_S", 256, 82),
            23 => ("IQ4_XS", 256, 136),
            24 => ("I8", 1, 1),
            25 => ("I16", 1, 2),
            26 => ("I32", 1, 4),
            27 => ("I64", 1, 8),
            28 => ("F64", 1, 8),
            29 => ("IQ1_M", 256, 56),
            30 => ("BF16", 1, 2),
            34 => ("TQ1_0", 256, 54),
            35 => ("TQ2_0", 256, 66),
            39 => ("MXFP4", 32, 17),
            _ => return None,
        })
    }

    /// ggml's name of the type (`Q4_K`), if the id is known.
    pub fn name(self) -> Option<&'static str> {
        self.traits().map(|t| t.0)
    }

    /// (elements per block, bytes per block), if the id is known.
    pub fn block(self) -> Option<(usize, usize)> {
        self.traits().map(|t| (t.1, t.2))
    }

    /// Whether [`super::dequantize`] decodes this type (one of
    /// [`Self::DECODABLE`]). The integer types, F64 and the activation-only
    /// Q8_1/Q8_K are not decoded: no weight quantizer writes them.
    pub fn is_decodable(self) -> bool {
        Self::DECODABLE.contains(&self)
    }

    /// Bytes of `n_per_row` elements, or `None` if the type is unknown, the
    /// row is not a whole number of blocks, or the size overflows.
    pub fn row_bytes(self, n_per_row: u64) -> Option<u64> {
        let (block, size) = self.block()?;
        let (block, size) = (block as u64, size as u64);
        if !n_per_row.is_multiple_of(block) {
            return None;
        }
        (n_per_row / block).checked_mul(size)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "ggml type id {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_ids() {
        assert_eq!(GgmlType::MXFP4.to_string(), "MXFP4");
        assert_eq!(GgmlType(4).to_string(), "ggml type id 4");
        assert_eq!(GgmlType(u32::MAX).block(), None);
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q8_0.row_bytes(33), None);
        assert_eq!(GgmlType::F32.row_bytes(u64::MAX), None);
        assert!(GgmlType(6).is_decodable());
        assert!(!GgmlType::Q8_K.is_decodable() && !GgmlType(4).is_decodable());
        for ty in GgmlType::DECODABLE {
            assert!(ty.block().is_some(), "{ty}");
        }
    }
}
