//! Every bound `proto/waste/node/v1/node.proto` documents on a request, in
//! one table ([`LIMITS`]), and the checks that enforce them at the service
//! boundary for gRPC and HTTP alike (the HTTP API builds the same
//! `GenerateRequest`, or calls the same checks for what it renders itself).
//! A value out of bounds is [`Error::OutOfBounds`], naming the field and
//! the bound: INVALID_ARGUMENT, or HTTP 400 with `param` set. The tests walk
//! the table, so a limit added here without a test entry fails them.
//! Does not own the sampling domains of the model crate
//! (`SamplingParams::validate`), which still apply to the merged defaults.

use serde_json::{Map, Value};
use waste_proto::node::v1 as pb;

use crate::{Error, Result};

/// One documented bound of a request field.
#[derive(Debug, PartialEq, Eq)]
pub struct Limit {
    /// The field as the gRPC request names it (dotted path from the request).
    pub field: &'static str,
    /// The OpenAI HTTP parameter carrying it, where there is one.
    pub param: Option<&'static str>,
    /// The bound as the error message states it.
    pub bound: &'static str,
}

pub const MAX_TEMPERATURE: f32 = 100.0;
pub const MAX_REPETITION_PENALTY: f32 = 10.0;
pub const MAX_STOP_STRINGS: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;
pub const MAX_STOP_TOKEN_IDS: usize = 64;
pub const MAX_SESSION_ID_BYTES: usize = 128;
pub const MAX_TEMPLATE_KWARGS_BYTES: usize = 64 << 10;

pub const INPUT: Limit = Limit {
    field: "input",
    param: None,
    bound: "exactly one input (prompt, messages or token_ids; text or messages for Tokenize)",
};
pub const MESSAGES: Limit = Limit {
    field: "messages.messages",
    param: Some("messages"),
    bound: "at least one message",
};
pub const TEMPLATE_KWARGS: Limit = Limit {
    field: "messages.template_kwargs_json",
    param: Some("chat_template_kwargs"),
    bound: "one JSON object of at most 65536 bytes",
};
pub const TOKEN_IDS: Limit = Limit {
    field: "token_ids.ids",
    param: Some("prompt"),
    bound: "at least one id, each below the vocabulary size",
};
pub const TEMPERATURE: Limit = Limit {
    field: "sampling.temperature",
    param: Some("temperature"),
    bound: "0 to 100",
};
pub const TOP_P: Limit = Limit {
    field: "sampling.top_p",
    param: Some("top_p"),
    bound: "above 0 and at most 1",
};
pub const MIN_P: Limit = Limit {
    field: "sampling.min_p",
    param: Some("min_p"),
    bound: "0 to 1",
};
pub const REPETITION_PENALTY: Limit = Limit {
    field: "sampling.repetition_penalty",
    param: Some("repetition_penalty"),
    bound: "above 0 and at most 10",
};
pub const PRESENCE_PENALTY: Limit = Limit {
    field: "sampling.presence_penalty",
    param: Some("presence_penalty"),
    bound: "-2 to 2",
};
pub const FREQUENCY_PENALTY: Limit = Limit {
    field: "sampling.frequency_penalty",
    param: Some("frequency_penalty"),
    bound: "-2 to 2",
};
pub const STOP: Limit = Limit {
    field: "sampling.stop",
    param: Some("stop"),
    bound: "at most 16 strings of 1 to 256 bytes each",
};
pub const STOP_TOKEN_IDS: Limit = Limit {
    field: "sampling.stop_token_ids",
    param: Some("stop_token_ids"),
    bound: "at most 64 ids, each below the vocabulary size",
};
pub const SESSION_ID: Limit = Limit {
    field: "session_id",
    param: Some("session_id"),
    bound: "1 to 128 bytes",
};

/// Every limit above; the README's API section lists the same.
pub const LIMITS: &[&Limit] = &[
    &INPUT,
    &MESSAGES,
    &TEMPLATE_KWARGS,
    &TOKEN_IDS,
    &TEMPERATURE,
    &TOP_P,
    &MIN_P,
    &REPETITION_PENALTY,
    &PRESENCE_PENALTY,
    &FREQUENCY_PENALTY,
    &STOP,
    &STOP_TOKEN_IDS,
    &SESSION_ID,
];

/// `Ok` when `ok`, else the limit broken by `got`.
fn check(ok: bool, limit: &'static Limit, got: impl std::fmt::Display) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::OutOfBounds {
            limit,
            got: got.to_string(),
        })
    }
}

/// Checks every bound of a Generate request except the prompt's length in
/// tokens (known once it is tokenized). `vocab` is the vocabulary size.
/// Returns a chat's template variables (none for other inputs), parsed once.
pub fn generate(req: &pb::GenerateRequest, vocab: usize) -> Result<Map<String, Value>> {
    let kwargs = match &req.input {
        None => return check(false, &INPUT, "none").map(|()| Map::new()),
        Some(pb::generate_request::Input::Prompt(_)) => Map::new(),
        Some(pb::generate_request::Input::Messages(chat)) => self::chat(chat)?,
        Some(pb::generate_request::Input::TokenIds(t)) => {
            token_ids(&t.ids, vocab)?;
            Map::new()
        }
    };
    if let Some(s) = &req.sampling {
        sampling(s, vocab)?;
    }
    if let Some(id) = &req.session_id {
        check(
            (1..=MAX_SESSION_ID_BYTES).contains(&id.len()),
            &SESSION_ID,
            format_args!("{} bytes", id.len()),
        )?;
    }
    Ok(kwargs)
}

/// Checks a Tokenize request's input; returns a chat's template variables.
pub fn tokenize(req: &pb::TokenizeRequest) -> Result<Map<String, Value>> {
    match &req.input {
        None => check(false, &INPUT, "none").map(|()| Map::new()),
        Some(pb::tokenize_request::Input::Text(_)) => Ok(Map::new()),
        Some(pb::tokenize_request::Input::Messages(chat)) => self::chat(chat),
    }
}

/// Checks a chat; returns its template variables.
pub fn chat(chat: &pb::Chat) -> Result<Map<String, Value>> {
    messages(chat.messages.len())?;
    if chat.template_kwargs_json.is_empty() {
        return Ok(Map::new());
    }
    let len = chat.template_kwargs_json.len();
    check(
        len <= MAX_TEMPLATE_KWARGS_BYTES,
        &TEMPLATE_KWARGS,
        format_args!("{len} bytes"),
    )?;
    let value: Value =
        serde_json::from_str(&chat.template_kwargs_json).map_err(|e| Error::OutOfBounds {
            limit: &TEMPLATE_KWARGS,
            got: format!("not JSON ({e})"),
        })?;
    template_kwargs(value)
}

/// Checks the number of chat messages.
pub fn messages(n: usize) -> Result<()> {
    check(n > 0, &MESSAGES, "no messages")
}

/// Template variables given as a JSON value (HTTP's `chat_template_kwargs`).
pub fn template_kwargs(value: Value) -> Result<Map<String, Value>> {
    match value {
        Value::Object(map) => {
            let len = Value::Object(map.clone()).to_string().len();
            check(
                len <= MAX_TEMPLATE_KWARGS_BYTES,
                &TEMPLATE_KWARGS,
                format_args!("{len} bytes"),
            )?;
            Ok(map)
        }
        other => Err(Error::OutOfBounds {
            limit: &TEMPLATE_KWARGS,
            got: format!("a JSON {}", json_kind(&other)),
        }),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks pre-tokenized input.
pub fn token_ids(ids: &[u32], vocab: usize) -> Result<()> {
    check(!ids.is_empty(), &TOKEN_IDS, "no ids")?;
    below_vocab(ids, vocab, &TOKEN_IDS)
}

/// Every id of `ids` is below `vocab`, else `limit` is what was broken.
fn below_vocab(ids: &[u32], vocab: usize, limit: &'static Limit) -> Result<()> {
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(id) => check(false, limit, format_args!("id {id} (vocabulary {vocab})")),
        None => Ok(()),
    }
}

/// Checks the sampling options the request sets (unset ones take the
/// checkpoint's defaults, checked by the model crate).
pub fn sampling(s: &pb::SamplingOptions, vocab: usize) -> Result<()> {
    if let Some(t) = s.temperature {
        check((0.0..=MAX_TEMPERATURE).contains(&t), &TEMPERATURE, t)?;
    }
    if let Some(p) = s.top_p {
        check(p > 0.0 && p <= 1.0, &TOP_P, p)?;
    }
    check((0.0..=1.0).contains(&s.min_p), &MIN_P, s.min_p)?;
    if let Some(r) = s.repetition_penalty {
        check(
            r > 0.0 && r <= MAX_REPETITION_PENALTY,
            &REPETITION_PENALTY,
            r,
        )?;
    }
    let p = s.presence_penalty;
    check((-2.0..=2.0).contains(&p), &PRESENCE_PENALTY, p)?;
    let f = s.frequency_penalty;
    check((-2.0..=2.0).contains(&f), &FREQUENCY_PENALTY, f)?;
    check(
        s.stop.len() <= MAX_STOP_STRINGS,
        &STOP,
        format_args!("{} strings", s.stop.len()),
    )?;
    if let Some(bad) = s
        .stop
        .iter()
        .find(|t| !(1..=MAX_STOP_BYTES).contains(&t.len()))
    {
        check(
            false,
            &STOP,
            format_args!("a string of {} bytes", bad.len()),
        )?;
    }
    let ids = &s.stop_token_ids;
    check(
        ids.len() <= MAX_STOP_TOKEN_IDS,
        &STOP_TOKEN_IDS,
        format_args!("{} ids", ids.len()),
    )?;
    below_vocab(ids, vocab, &STOP_TOKEN_IDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NaN is outside every range: a float compare with it is false.
    #[test]
    fn nan_and_infinities_are_out_of_every_float_range() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let cases = [
                pb::SamplingOptions {
                    temperature: Some(bad),
                    ..Default::default()
                },
                pb::SamplingOptions {
                    top_p: Some(bad),
                    ..Default::default()
                },
                pb::SamplingOptions {
                    min_p: bad,
                    ..Default::default()
                },
                pb::SamplingOptions {
                    repetition_penalty: Some(bad),
                    ..Default::default()
                },
                pb::SamplingOptions {
                    presence_penalty: bad,
                    ..Default::default()
                },
                pb::SamplingOptions {
                    frequency_penalty: bad,
                    ..Default::default()
                },
            ];
            for s in cases {
                assert!(sampling(&s, 10).is_err(), "{s:?}");
            }
        }
        sampling(&pb::SamplingOptions::default(), 10).unwrap();
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        let s = pb::SamplingOptions {
            temperature: Some(MAX_TEMPERATURE),
            top_p: Some(1.0),
            min_p: 1.0,
            repetition_penalty: Some(MAX_REPETITION_PENALTY),
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            stop: vec!["x".repeat(MAX_STOP_BYTES); MAX_STOP_STRINGS],
            stop_token_ids: vec![9; MAX_STOP_TOKEN_IDS],
            ..Default::default()
        };
        sampling(&s, 10).unwrap();
        let kwargs = serde_json::json!({"k": "v".repeat(MAX_TEMPLATE_KWARGS_BYTES - 8)});
        assert_eq!(kwargs.to_string().len(), MAX_TEMPLATE_KWARGS_BYTES);
        template_kwargs(kwargs).unwrap();
    }

    #[test]
    fn every_limit_is_listed_once() {
        let mut fields: Vec<_> = LIMITS.iter().map(|l| l.field).collect();
        fields.sort_unstable();
        fields.dedup();
        assert_eq!(fields.len(), LIMITS.len());
    }
}
