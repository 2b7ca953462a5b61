//! GGUF metadata values: the thirteen value types of the spec (arrays hold
//! any type, arrays of arrays included, to a depth cap), read from untrusted
//! bytes, plus the typed getters the config and tokenizer builders use.

use std::fmt;

use super::reader::Cursor;
use crate::error::Result;

/// Nesting limit for arrays of arrays; real files use one level.
const MAX_DEPTH: usize = 4;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    /// Reads a u32 type tag, then the value (`key` names errors).
    pub(super) fn read(c: &mut Cursor<'_>, key: &str) -> Result<Self> {
        let ty = c.u32("metadata value type")?;
        Self::read_typed(c, key, ty, 0)
    }

    fn read_typed(c: &mut Cursor<'_>, key: &str, ty: u32, depth: usize) -> Result<Self> {
        Ok(match ty {
            0 => Self::U8(c.u8(key)?),
            1 => Self::I8(c.u8(key)? as i8),
            2 => Self::U16(c.u16(key)?),
            3 => Self::I16(c.u16(key)? as i16),
            4 => Self::U32(c.u32(key)?),
            5 => Self::I32(c.u32(key)? as i32),
            6 => Self::F32(c.f32(key)?),
            7 => match c.u8(key)? {
                0 => Self::Bool(false),
                1 => Self::Bool(true),
                b => return Err(c.err(format!("`{key}`: bool byte {b} is not 0 or 1"))),
            },
            8 => Self::String(c.string(key)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(c.err(format!("`{key}`: arrays nested deeper than {MAX_DEPTH}")));
                }
                let item_ty = c.u32("array item type")?;
                let n = c.count(key, min_bytes(item_ty))?;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(Self::read_typed(c, key, item_ty, depth + 1)?);
                }
                Self::Array(items)
            }
            10 => Self::U64(c.u64(key)?),
            11 => Self::I64(c.u64(key)? as i64),
            12 => Self::F64(c.f64(key)?),
            other => return Err(c.err(format!("`{key}`: unknown metadata value type {other}"))),
        })
    }

    /// A non-negative integer of any integer type.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer, signed or not, that fits an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// A float or an integer, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }
}

/// Smallest encoding of one array item of type `ty` (unknown types: 1, the
/// item read then fails).
fn min_bytes(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => 1,
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(s) if s.chars().count() > 80 => {
                write!(f, "{:?}...", s.chars().take(80).collect::<String>())
            }
            Self::String(s) => write!(f, "{s:?}"),
            Self::Array(items) => write!(f, "[{} items]", items.len()),
            Self::Bool(b) => write!(f, "{b}"),
            Self::F32(v) => write!(f, "{v}"),
            Self::F64(v) => write!(f, "{v}"),
            other => match other.as_i64() {
                Some(v) => write!(f, "{v}"),
                None => write!(f, "{}", other.as_u64().unwrap_or_default()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn encode(ty: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = ty.to_le_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn reads_every_scalar_type_and_arrays() {
        let path = Path::new("t.gguf");
        let cases: Vec<(u32, Vec<u8>, MetaValue)> = vec![
            (0, vec![7], MetaValue::U8(7)),
            (1, vec![0xff], MetaValue::I8(-1)),
            (2, 513u16.to_le_bytes().to_vec(), MetaValue::U16(513)),
            (3, (-2i16).to_le_bytes().to_vec(), MetaValue::I16(-2)),
            (4, 9u32.to_le_bytes().to_vec(), MetaValue::U32(9)),
            (5, (-9i32).to_le_bytes().to_vec(), MetaValue::I32(-9)),
            (6, 1.5f32.to_le_bytes().to_vec(), MetaValue::F32(1.5)),
            (7, vec![1], MetaValue::Bool(true)),
            (
                10,
                u64::MAX.to_le_bytes().to_vec(),
                MetaValue::U64(u64::MAX),
            ),
            (11, (-5i64).to_le_bytes().to_vec(), MetaValue::I64(-5)),
            (12, 0.25f64.to_le_bytes().to_vec(), MetaValue::F64(0.25)),
        ];
        for (ty, payload, want) in cases {
            let bytes = encode(ty, &payload);
            let got = MetaValue::read(&mut Cursor::new(&bytes, path), "k").unwrap();
            assert_eq!(got, want);
        }
        // array of 2 strings
        let mut payload = 8u32.to_le_bytes().to_vec();
        payload.extend_from_slice(&2u64.to_le_bytes());
        for s in ["ab", "c"] {
            payload.extend_from_slice(&(s.len() as u64).to_le_bytes());
            payload.extend_from_slice(s.as_bytes());
        }
        let bytes = encode(9, &payload);
        let got = MetaValue::read(&mut Cursor::new(&bytes, path), "k").unwrap();
        assert_eq!(
            got,
            MetaValue::Array(vec![
                MetaValue::String("ab".into()),
                MetaValue::String("c".into())
            ])
        );
        assert_eq!(MetaValue::I32(-1).as_u64(), None);
        assert_eq!(MetaValue::U32(3).as_f64(), Some(3.0));
    }

    #[test]
    fn hostile_values_are_errors() {
        let path = Path::new("t.gguf");
        // bad bool, unknown type, array count far beyond the bytes
        for bytes in [
            encode(7, &[2]),
            encode(13, &[]),
            encode(
                9,
                &[&4u32.to_le_bytes()[..], &(1u64 << 60).to_le_bytes()].concat(),
            ),
        ] {
            let err = MetaValue::read(&mut Cursor::new(&bytes, path), "k").unwrap_err();
            assert!(err.to_string().contains("t.gguf"), "{err}");
        }
        // arrays nested past the cap: tag 9, then (item type 9, count 1) ...
        let mut bytes = 9u32.to_le_bytes().to_vec();
        for _ in 0..=MAX_DEPTH {
            bytes.extend_from_slice(&9u32.to_le_bytes());
            bytes.extend_from_slice(&1u64.to_le_bytes());
        }
        bytes.extend_from_slice(&[0; 64]);
        let err = MetaValue::read(&mut Cursor::new(&bytes, path), "k").unwrap_err();
        assert!(err.to_string().contains("nested"), "{err}");
    }
}
