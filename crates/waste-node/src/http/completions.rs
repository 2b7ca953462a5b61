//! `POST /v1/chat/completions` and `POST /v1/completions`: the body is
//! turned into the same Generate request the gRPC service takes (so both
//! front ends validate and sample alike), run through
//! [`Node::start_generation`], and answered as one JSON object or as
//! server-sent events (`data: {chunk}` … `data: [DONE]`), OpenAI's shapes,
//! plus a `waste` object with the node's statistics.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use waste_model::FinishReason;
use waste_model::chat::tools::ToolCallFormat;
use waste_model::sampling::Logprobs;
use waste_proto::node::v1 as pb;

use super::ApiError;
use super::openai::{ChatRequest, CompletionRequest, Prompt, Sampling, template_messages};
use crate::generate::{Event, GenerateJob, Summary};
use crate::node::Node;
use crate::{limits, request};

/// Which endpoint a generation answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// A request ready to run, and how to answer it.
struct Ask {
    kind: Kind,
    job: GenerateJob,
    session: Option<String>,
    stream: bool,
    include_usage: bool,
    /// Tool calls to look for in the output.
    tools: Option<ToolCallFormat>,
    /// `/v1/completions` with `echo`: the prompt text goes first.
    echo: Option<String>,
}

pub async fn chat(State(node): State<Arc<Node>>, body: Bytes) -> Response {
    let ask = ask(&node, Kind::Chat, &body);
    respond(node, ask).await
}

pub async fn completion(State(node): State<Arc<Node>>, body: Bytes) -> Response {
    let ask = ask(&node, Kind::Text, &body);
    respond(node, ask).await
}

/// Parses and checks a request body as `kind`'s handler does, without
/// running it: every refusal a client can provoke from the body alone (the
/// fuzz target `http_request` drives this).
pub fn check(node: &Node, kind: Kind, body: &[u8]) -> Result<(), ApiError> {
    ask(node, kind, body).map(drop)
}

fn ask(node: &Node, kind: Kind, body: &[u8]) -> Result<Ask, ApiError> {
    match kind {
        Kind::Chat => parse::<ChatRequest>(body).and_then(|r| chat_ask(node, &r)),
        Kind::Text => parse::<CompletionRequest>(body).and_then(|r| completion_ask(node, r)),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

fn tokenizer(node: &Node) -> Result<&waste_model::Tokenizer, ApiError> {
    node.tokenizer.as_ref().ok_or_else(|| {
        ApiError::bad_request("this model has no tokenizer: send token ids to /v1/completions")
    })
}

fn chat_ask(node: &Node, r: &ChatRequest) -> Result<Ask, ApiError> {
    if let Some(model) = &r.model {
        node.check_model(model)?;
    }
    let template = node.chat_template.as_ref().ok_or_else(|| {
        ApiError::bad_request("this model has no chat template: use /v1/completions")
    })?;
    limits::messages(r.messages.len())?;
    let kwargs = match &r.chat_template_kwargs {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(v) => limits::template_kwargs(v.clone())?,
    };
    let messages =
        template_messages(&r.messages).map_err(|m| ApiError::bad_param("messages", m))?;
    let choice = r
        .tool_choice
        .as_ref()
        .map(|c| c.as_str().unwrap_or("a named function"));
    let tools = match (&r.tools, choice) {
        (None, _) | (Some(_), Some("none")) => None,
        (Some(t), Some("auto") | None) if !t.is_empty() => Some(t),
        (Some(_), Some("auto") | None) => None,
        (Some(_), Some(other)) => {
            return Err(ApiError::bad_param(
                "tool_choice",
                format!("tool_choice {other:?} is not supported: use \"auto\" or \"none\""),
            ));
        }
    };
    if tools.is_some() && !template.supports_tools() {
        return Err(ApiError::bad_param(
            "tools",
            "this model's chat template does not render tools",
        ));
    }
    let tools_json = tools.map(|t| Value::Array(t.clone()));
    let text = template
        .render_json(&messages, true, tools_json.as_ref(), &kwargs)
        .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    let prompt = tokenizer(node)?
        .encode(&text, false)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let json = match r.response_format.as_ref().map(|f| f.kind.as_str()) {
        None | Some("text") => false,
        Some("json_object") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "response_format",
                format!(
                    "response_format {other:?} is not supported: use \"text\" or \"json_object\""
                ),
            ));
        }
    };
    let top = r.top_logprobs.unwrap_or(0);
    if top > 20 || (top > 0 && !r.logprobs) {
        return Err(ApiError::bad_param(
            "top_logprobs",
            "top_logprobs takes 0..=20 and needs logprobs: true",
        ));
    }
    let mut ask = build(node, Kind::Chat, prompt, &r.sampling)?;
    ask.job.logprobs = r.logprobs;
    ask.job.top_logprobs = top as usize;
    ask.job.json = json;
    ask.tools = tools.and(template.tool_call_format());
    ask.job.keep_special_text = ask.tools.is_some();
    Ok(ask)
}

fn completion_ask(node: &Node, r: CompletionRequest) -> Result<Ask, ApiError> {
    if let Some(model) = &r.model {
        node.check_model(model)?;
    }
    if r.suffix.is_some() {
        return Err(ApiError::bad_param(
            "suffix",
            "suffix (fill-in-the-middle) is not supported",
        ));
    }
    let one = |n: usize| {
        (n == 1)
            .then_some(())
            .ok_or_else(|| ApiError::bad_param("prompt", "give one prompt per request"))
    };
    let (prompt, text) = match r.prompt {
        Prompt::Text(t) => (
            tokenizer(node)?
                .encode(&t, true)
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            t,
        ),
        Prompt::Texts(mut v) => {
            one(v.len())?;
            let t = v.remove(0);
            (
                tokenizer(node)?
                    .encode(&t, true)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
                t,
            )
        }
        Prompt::Ids(ids) => (ids, String::new()),
        Prompt::IdLists(mut v) => {
            one(v.len())?;
            (v.remove(0), String::new())
        }
    };
    let top = r.logprobs.unwrap_or(0);
    if top > 5 {
        return Err(ApiError::bad_param(
            "logprobs",
            "logprobs takes 0..=5 on /v1/completions",
        ));
    }
    let mut ask = build(node, Kind::Text, prompt, &r.sampling)?;
    ask.job.logprobs = r.logprobs.is_some();
    ask.job.top_logprobs = top as usize;
    ask.echo = r.echo.then_some(text);
    Ok(ask)
}

/// The fields both endpoints share, through the gRPC request's validation.
fn build(node: &Node, kind: Kind, prompt: Vec<u32>, s: &Sampling) -> Result<Ask, ApiError> {
    if s.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_param("n", "only n = 1 is supported"));
    }
    // Absent or 0: the node's default_max_tokens, as on gRPC.
    let max = s.max_completion_tokens.or(s.max_tokens).unwrap_or(0);
    let top_k = match s.top_k {
        Some(k) if k < -1 => {
            return Err(ApiError::bad_param(
                "top_k",
                "top_k must be -1, 0 or positive",
            ));
        }
        Some(k) if k > 0 => Some(k as u32),
        _ => None,
    };
    let req = pb::GenerateRequest {
        input: Some(pb::generate_request::Input::TokenIds(pb::TokenIds {
            ids: prompt,
        })),
        sampling: Some(pb::SamplingOptions {
            max_tokens: max,
            temperature: s.temperature,
            top_k,
            top_p: s.top_p,
            min_p: s.min_p.unwrap_or(0.0),
            repetition_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty.unwrap_or(0.0),
            frequency_penalty: s.frequency_penalty.unwrap_or(0.0),
            seed: s.seed,
            stop: s
                .stop
                .clone()
                .map(super::openai::Stop::into_vec)
                .unwrap_or_default(),
            ignore_eos: s.ignore_eos,
            stop_token_ids: s.stop_token_ids.clone(),
        }),
        session_id: s.session_id.clone(),
        ..Default::default()
    };
    Ok(Ask {
        kind,
        job: request::job(node, &req)?,
        session: req.session_id,
        stream: s.stream,
        include_usage: s.stream_options.as_ref().is_some_and(|o| o.include_usage),
        tools: None,
        echo: None,
    })
}

async fn respond(node: Arc<Node>, ask: Result<Ask, ApiError>) -> Response {
    let ask = match ask {
        Ok(a) => a,
        Err(e) => {
            if let Some(reason) = e.reason() {
                node.metrics.rejected_for(reason);
            }
            return e.into_response();
        }
    };
    // Counts its own refusals.
    let rx = match node.start_generation(ask.job.clone(), ask.session.clone()) {
        Ok(rx) => rx,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let answer = Answer::new(&node, &ask);
    if ask.stream {
        let (tx, events) = mpsc::channel(64);
        tokio::spawn(stream(node, ask, answer, rx, tx));
        return Sse::new(ReceiverStream::new(events))
            .keep_alive(KeepAlive::default())
            .into_response();
    }
    whole(node, ask, answer, rx).await
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// What is known of one answer while it is produced.
struct Answer {
    id: String,
    created: u64,
    model: String,
    text: String,
    completion_tokens: usize,
    /// One entry per generated token when logprobs were asked for.
    logprobs: Vec<TokenLogprob>,
    /// Bytes of `text` already sent as content (streaming with tools).
    sent: usize,
}

impl Answer {
    fn new(node: &Node, ask: &Ask) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let prefix = if ask.kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        };
        Self {
            id: format!("{prefix}-{created:x}{n:06x}"),
            created,
            model: node.model_id(),
            text: ask.echo.clone().unwrap_or_default(),
            completion_tokens: 0,
            logprobs: Vec::new(),
            sent: 0,
        }
    }

    fn token(&mut self, node: &Node, text: &str, ids: &[u32], lp: Option<&Logprobs>) {
        self.text.push_str(text);
        self.completion_tokens += ids.len();
        if let Some(lp) = lp {
            self.logprobs.push(TokenLogprob {
                chosen: Alternative::new(node, lp.token, lp.logprob),
                top: lp
                    .top
                    .iter()
                    .map(|&(id, l)| Alternative::new(node, id, l))
                    .collect(),
            });
        }
    }
}

/// A token as logprobs report it.
struct Alternative {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

/// A generated token's logprob and the most likely alternatives.
struct TokenLogprob {
    chosen: Alternative,
    top: Vec<Alternative>,
}

impl Alternative {
    fn new(node: &Node, id: u32, logprob: f32) -> Self {
        let (token, bytes) = token_text(node, id);
        Self {
            token,
            logprob,
            bytes,
        }
    }

    fn json(&self) -> Value {
        json!({"token": self.token, "logprob": self.logprob, "bytes": self.bytes})
    }
}

/// A token's text and bytes as logprobs report them.
fn token_text(node: &Node, id: u32) -> (String, Vec<u8>) {
    let bytes = node
        .json_vocab()
        .and_then(|v| v.get(id as usize)?.as_deref().map(<[u8]>::to_vec));
    match bytes {
        Some(b) => (String::from_utf8_lossy(&b).into_owned(), b),
        None => {
            let t = node
                .tokenizer
                .as_ref()
                .and_then(|t| t.id_to_token(id))
                .unwrap_or_default();
            let b = t.clone().into_bytes();
            (t, b)
        }
    }
}

fn finish_reason(s: &Summary, tool_calls: bool) -> &'static str {
    match s.finish {
        _ if tool_calls => "tool_calls",
        Some(FinishReason::Length | FinishReason::Context) => "length",
        _ => "stop",
    }
}

fn usage(a: &Answer, s: &Summary) -> Value {
    json!({"prompt_tokens": s.prompt_tokens, "completion_tokens": a.completion_tokens,
           "total_tokens": s.prompt_tokens + a.completion_tokens,
           "prompt_tokens_details": {"cached_tokens": s.cached_prompt_tokens}})
}

/// The node's own statistics beside OpenAI's fields.
fn stats(s: &Summary) -> Value {
    json!({"time_to_first_token_ms": s.time_to_first_token.as_secs_f64() * 1e3,
           "tokens_per_second": s.decode_tokens_per_second(),
           "prefill_tokens_per_second": s.prefill_tokens_per_second(),
           "expert_bytes_per_token": s.bytes_per_token(),
           "retention": s.retention(), "prefetch_accuracy": s.prefetch_accuracy(),
           "cached_prompt_tokens": s.cached_prompt_tokens})
}

fn chat_logprobs(entries: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = e.chosen.json();
            v["top_logprobs"] = e.top.iter().map(Alternative::json).collect();
            v
        })
        .collect();
    json!({"content": content})
}

/// `/v1/completions`' parallel lists; `start` is the text offset of the first token.
fn legacy_logprobs(entries: &[TokenLogprob], start: usize) -> Value {
    let mut offset = start;
    let mut offsets = Vec::new();
    for e in entries {
        offsets.push(offset);
        offset += e.chosen.token.len();
    }
    let top: Vec<serde_json::Map<String, Value>> = entries
        .iter()
        .map(|e| {
            e.top
                .iter()
                .map(|a| (a.token.clone(), json!(a.logprob)))
                .collect()
        })
        .collect();
    json!({
        "tokens": entries.iter().map(|e| e.chosen.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": entries.iter().map(|e| e.chosen.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": offsets,
    })
}

fn tool_calls_json(calls: &[waste_model::chat::tools::ToolCall]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"index": i, "id": c.id.clone().unwrap_or_else(|| format!("call_{i}")), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    Value::Array(calls)
}

async fn whole(
    node: Arc<Node>,
    ask: Ask,
    mut a: Answer,
    mut rx: mpsc::Receiver<crate::Result<Event>>,
) -> Response {
    let summary = loop {
        match rx.recv().await {
            Some(Ok(Event::Token {
                text,
                ids,
                logprobs,
            })) => a.token(&node, &text, &ids, logprobs.as_ref()),
            Some(Ok(Event::Done(s))) => break s,
            Some(Err(e)) => return ApiError::from(e).into_response(),
            None => return ApiError::from(crate::Error::ShuttingDown).into_response(),
        }
    };
    let (content, calls) = match ask.tools {
        Some(f) => f.parse(&a.text),
        None => (a.text.clone(), Vec::new()),
    };
    let finish = finish_reason(&summary, !calls.is_empty());
    let logprobs = ask.job.logprobs.then(|| match ask.kind {
        Kind::Chat => chat_logprobs(&a.logprobs),
        Kind::Text => legacy_logprobs(&a.logprobs, ask.echo.as_ref().map_or(0, String::len)),
    });
    let choice = match ask.kind {
        Kind::Chat => {
            let mut message = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                message["tool_calls"] = tool_calls_json(&calls);
            }
            json!({"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish})
        }
        Kind::Text => {
            json!({"index": 0, "text": content, "logprobs": logprobs, "finish_reason": finish})
        }
    };
    let object = if ask.kind == Kind::Chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    axum::Json(json!({
        "id": a.id, "object": object, "created": a.created, "model": a.model,
        "choices": [choice], "usage": usage(&a, &summary), "waste": stats(&summary),
    }))
    .into_response()
}

type SseSender = mpsc::Sender<Result<SseEvent, Infallible>>;

/// Sends one `data:` event; false once the client has gone.
async fn send(tx: &SseSender, data: &Value) -> bool {
    tx.send(Ok(SseEvent::default().data(data.to_string())))
        .await
        .is_ok()
}

async fn stream(
    node: Arc<Node>,
    ask: Ask,
    mut a: Answer,
    mut rx: mpsc::Receiver<crate::Result<Event>>,
    tx: SseSender,
) {
    let object = if ask.kind == Kind::Chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let chunk = |a: &Answer, choice: Value| json!({"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": [choice]});
    let piece = |kind: Kind, text: &str, logprobs: Option<Value>, finish: Option<&str>| match kind {
        Kind::Chat => {
            json!({"index": 0, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": finish})
        }
        Kind::Text => {
            json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish})
        }
    };
    if ask.kind == Kind::Chat {
        let first = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
        if !send(&tx, &chunk(&a, first)).await {
            return;
        }
    }
    if let Some(echo) = &ask.echo
        && !send(&tx, &chunk(&a, piece(ask.kind, echo, None, None))).await
    {
        return;
    }
    a.sent = a.text.len();
    let summary = loop {
        let (text, ids, lp) = match rx.recv().await {
            Some(Ok(Event::Token {
                text,
                ids,
                logprobs,
            })) => (text, ids, logprobs),
            Some(Ok(Event::Done(s))) => break s,
            Some(Err(e)) => {
                let _ = send(&tx, &ApiError::from(e).body()).await;
                return;
            }
            None => return,
        };
        let before = a.logprobs.len();
        a.token(&node, &text, &ids, lp.as_ref());
        // With tools, content stops short of anything that may open a call.
        let upto = match ask.tools {
            Some(f) => safe_end(&a.text, f.start_marker()),
            None => a.text.len(),
        };
        let new = a.text[a.sent..upto].to_string();
        let logprobs = ask.job.logprobs.then(|| match ask.kind {
            Kind::Chat => chat_logprobs(&a.logprobs[before..]),
            Kind::Text => legacy_logprobs(&a.logprobs[before..], a.sent),
        });
        a.sent = upto;
        if (!new.is_empty() || logprobs.is_some())
            && !send(&tx, &chunk(&a, piece(ask.kind, &new, logprobs, None))).await
        {
            return;
        }
    };
    let calls = match ask.tools {
        Some(f) => {
            let (content, calls) = f.parse(&a.text);
            let rest = content
                .get(a.sent.min(content.len())..)
                .unwrap_or_default()
                .to_string();
            if !rest.is_empty() && !send(&tx, &chunk(&a, piece(ask.kind, &rest, None, None))).await
            {
                return;
            }
            if !calls.is_empty() {
                let delta = json!({"index": 0, "delta": {"tool_calls": tool_calls_json(&calls)}, "logprobs": null, "finish_reason": null});
                if !send(&tx, &chunk(&a, delta)).await {
                    return;
                }
            }
            calls
        }
        None => Vec::new(),
    };
    let finish = finish_reason(&summary, !calls.is_empty());
    let mut last = match ask.kind {
        Kind::Chat => chunk(
            &a,
            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}),
        ),
        Kind::Text => chunk(&a, piece(Kind::Text, "", None, Some(finish))),
    };
    last["waste"] = stats(&summary);
    if !send(&tx, &last).await {
        return;
    }
    if ask.include_usage {
        let mut u = chunk(&a, Value::Null);
        u["choices"] = json!([]);
        u["usage"] = usage(&a, &summary);
        if !send(&tx, &u).await {
            return;
        }
    }
    let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
}

/// The end of the text that can be sent as content: before `marker`, or
/// before a suffix that may be the start of it.
fn safe_end(text: &str, marker: &str) -> usize {
    if let Some(i) = text.find(marker) {
        return i;
    }
    (1..marker.len())
        .rev()
        .filter(|&n| marker.is_char_boundary(n))
        .find(|&n| text.ends_with(&marker[..n]))
        .map_or(text.len(), |n| text.len() - n)
}

#[cfg(test)]
mod tests {
    use super::safe_end;

    #[test]
    fn content_stops_short_of_a_possible_tool_call() {
        assert_eq!(safe_end("hello", "<tool_call>"), 5);
        assert_eq!(safe_end("hello <tool", "<tool_call>"), 6);
        assert_eq!(safe_end("hi <tool_call>{", "<tool_call>"), 3);
        assert_eq!(safe_end("a<", "<tool_call>"), 1);
    }
}
