//! The chat templates' `tojson` filter, written to match Python's `json.dumps` byte for byte.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, Value};

/// transformers replaces Jinja's `tojson` (which escapes `<>&'` for HTML) with
/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, and
/// prompts must match byte for byte, so this reproduces `json.dumps` output.
#[allow(clippy::needless_pass_by_value)] // minijinja hands keyword arguments over by value
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<String, JinjaError> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            None => " ".repeat(usize::try_from(v.as_i64().unwrap_or(0).max(0)).unwrap_or(0)),
        }),
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let part = |i: usize| -> std::result::Result<String, JinjaError> {
                let item = v.get_item(&Value::from(i))?;
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "separators must be two strings",
                    )
                })
            };
            (part(0)?, part(1)?)
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(out)
}

struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

/// Deeper than this is a self-referencing value, not data.
const MAX_JSON_DEPTH: usize = 256;

fn write_json(
    out: &mut String,
    value: &Value,
    style: &JsonStyle,
    depth: usize,
) -> std::result::Result<(), JinjaError> {
    if depth > MAX_JSON_DEPTH {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => {
            let _ = write!(out, "{value}");
        }
        ValueKind::Number => out.push_str(&python_float(
            f64::try_from(value.clone()).unwrap_or(f64::NAN),
        )),
        ValueKind::String | ValueKind::Plain | ValueKind::Invalid => {
            write_json_str(
                out,
                value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned)
                    .as_str(),
                style.ensure_ascii,
            );
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                let key = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None if key.is_none() => "null".to_owned(),
                    None if key.kind() == ValueKind::Bool => key.is_true().to_string(),
                    None => key.to_string(),
                };
                entries.push((key, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, style, depth, ('{', '}'), entries.len(), |out, i| {
                write_json_str(out, &entries[i].0, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, &entries[i].1, style, depth + 1)
            })?;
        }
        _ => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, style, depth, ('[', ']'), items.len(), |out, i| {
                write_json(out, &items[i], style, depth + 1)
            })?;
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    style: &JsonStyle,
    depth: usize,
    (open, close): (char, char),
    len: usize,
    mut item: impl FnMut(&mut String, usize) -> std::result::Result<(), JinjaError>,
) -> std::result::Result<(), JinjaError> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A JSON string literal as Python writes it: `\uXXXX` in lower-case hex, non-ASCII kept
/// unless `ensure_ascii`.
fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, positional for exponents -4..16,
/// otherwise `1e-05` style; non-finite values as `NaN` / `Infinity`.
fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{v:e}"); // shortest digits, e.g. "1.5e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{v}");
        if s.contains('.') { s } else { s + ".0" }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_floats() {
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.1), "0.1");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(1.5e16), "1.5e+16");
        assert_eq!(python_float(-0.0001), "-0.0001");
    }
}
