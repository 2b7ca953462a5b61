//! Turns protocol requests into domain inputs: the request checked against
//! the protocol's bounds ([`crate::limits`]), the prompt tokenized (plain
//! text, chat messages rendered with the checkpoint's template, or ids),
//! sampling options over the checkpoint's defaults and the node's default
//! `max_tokens`, validated; and builds the Tokenize and Info replies.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use waste_model::SamplingParams;
use waste_proto::node::v1 as pb;

use crate::generate::{Event, GenerateJob};
use crate::node::Node;
use crate::{Error, Result, limits};

/// Checks and starts a Generate request; a refusal is counted.
pub fn start(node: &Arc<Node>, req: &pb::GenerateRequest) -> Result<mpsc::Receiver<Result<Event>>> {
    let job = job(node, req).inspect_err(|e| node.metrics.rejected(e))?;
    node.start_generation(job, req.session_id.clone())
}

/// The tokens of a Generate request and how to sample after them.
pub fn job(node: &Node, req: &pb::GenerateRequest) -> Result<GenerateJob> {
    let vocab = node.engine.model.config().vocab_size;
    let kwargs = limits::generate(req, vocab)?;
    let prompt = match &req.input {
        Some(pb::generate_request::Input::Prompt(text)) => tokenizer(node)?.encode(text, true)?,
        Some(pb::generate_request::Input::Messages(chat)) => {
            let text = render(node, chat, &kwargs)?;
            tokenizer(node)?.encode(&text, false)?
        }
        Some(pb::generate_request::Input::TokenIds(ids)) => ids.ids.clone(),
        None => return Err(no_input()),
    };
    if prompt.is_empty() {
        return Err(Error::BadRequest("the prompt is empty".into()));
    }
    // A tokenizer may know more ids than the model has embeddings.
    if let Some(id) = prompt.iter().find(|&&id| id as usize >= vocab) {
        return Err(Error::BadRequest(format!(
            "token id {id} is outside the vocabulary of {vocab}"
        )));
    }
    if prompt.len() >= node.ctx_size {
        return Err(Error::ContextOverflow {
            needed: prompt.len() + 1,
            capacity: node.ctx_size,
        });
    }
    let params = sampling(node, req.sampling.as_ref())?;
    let mut eos = node.eos.clone();
    if let Some(s) = &req.sampling {
        eos.extend(&s.stop_token_ids);
    }
    if !params.stop.is_empty() && node.tokenizer.is_none() {
        return Err(Error::BadRequest(
            "stop strings need a tokenizer; this backbone has none".into(),
        ));
    }
    Ok(GenerateJob {
        logprobs: req.logprobs,
        ..GenerateJob::new(prompt, params, eos)
    })
}

/// Request options over the checkpoint's defaults, validated. `max_tokens`
/// 0 (or no options) takes the node's `default_max_tokens`, itself 0 for
/// "until a stop condition or the end of the context".
fn sampling(node: &Node, o: Option<&pb::SamplingOptions>) -> Result<SamplingParams> {
    let mut p = node.defaults.clone();
    p.max_tokens = max_tokens(
        o.map_or(0, |o| o.max_tokens),
        node.config.default_max_tokens,
    );
    if let Some(o) = o {
        p.temperature = o.temperature.unwrap_or(p.temperature);
        p.top_k = o.top_k.map_or(p.top_k, |k| k as usize);
        p.top_p = o.top_p.unwrap_or(p.top_p);
        p.min_p = o.min_p;
        p.repetition_penalty = o.repetition_penalty.unwrap_or(p.repetition_penalty);
        p.presence_penalty = o.presence_penalty;
        p.frequency_penalty = o.frequency_penalty;
        p.seed = o.seed;
        p.stop.clone_from(&o.stop);
        p.ignore_eos = o.ignore_eos;
    }
    p.validate().map_err(|e| Error::BadRequest(e.to_string()))?;
    Ok(p)
}

/// The token limit of a request asking for `requested` (0: not given) on
/// a node whose default is `default` (0: none); None is no limit.
fn max_tokens(requested: u32, default: usize) -> Option<usize> {
    match (requested, default) {
        (0, 0) => None,
        (0, default) => Some(default),
        (n, _) => Some(n as usize),
    }
}

fn tokenizer(node: &Node) -> Result<&waste_model::Tokenizer> {
    node.tokenizer.as_ref().ok_or_else(|| {
        Error::BadRequest("this backbone has no tokenizer.json: send token_ids".into())
    })
}

/// Chat messages rendered with the checkpoint's template, which sees the
/// chat's template variables (`kwargs`, checked by [`limits`]) too.
fn render(node: &Node, chat: &pb::Chat, kwargs: &Map<String, Value>) -> Result<String> {
    let template = node.chat_template.as_ref().ok_or_else(|| {
        Error::BadRequest("this checkpoint has no chat template: send a prompt".into())
    })?;
    let messages: Value = chat
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    Ok(template.render_json(&messages, !chat.continue_final_message, None, kwargs)?)
}

/// What [`limits`] already refused; kept an error rather than a panic.
fn no_input() -> Error {
    Error::OutOfBounds {
        limit: &limits::INPUT,
        got: "none".into(),
    }
}

pub fn tokenize(node: &Node, req: &pb::TokenizeRequest) -> Result<pb::TokenizeResponse> {
    let kwargs = limits::tokenize(req)?;
    let tok = tokenizer(node)?;
    let (ids, rendered) = match &req.input {
        Some(pb::tokenize_request::Input::Text(t)) => {
            (tok.encode(t, req.add_special_tokens)?, String::new())
        }
        Some(pb::tokenize_request::Input::Messages(chat)) => {
            let text = render(node, chat, &kwargs)?;
            (tok.encode(&text, false)?, text)
        }
        None => return Err(no_input()),
    };
    let tokens = ids
        .iter()
        .map(|&id| tok.id_to_token(id).unwrap_or_default())
        .collect();
    Ok(pb::TokenizeResponse {
        token_ids: ids,
        tokens,
        rendered,
    })
}

pub fn info(node: &Node) -> pb::InfoResponse {
    let cfg = node.engine.model.config();
    let mode = match node.config.expert_mode {
        crate::ExpertMode::Local => pb::ExpertMode::Local,
        crate::ExpertMode::Fetch => pb::ExpertMode::Fetch,
        crate::ExpertMode::ComputeAtStore => pb::ExpertMode::ComputeAtStore,
    };
    let n_moe = (0..cfg.num_hidden_layers)
        .filter(|&l| node.engine.model.is_moe_layer(l))
        .count();
    let p = node.plan;
    pb::InfoResponse {
        model_id: node.model_id(),
        architecture: cfg.model_type.clone(),
        vocab_size: cfg.vocab_size as u32,
        context_size: node.ctx_size as u32,
        expert_mode: mode as i32,
        expert_format: node
            .store
            .as_ref()
            .map(|s| s.info().expert_format.clone())
            .unwrap_or_default(),
        n_layers: cfg.num_hidden_layers as u32,
        n_moe_layers: n_moe as u32,
        n_experts: cfg.moe.as_ref().map_or(0, |m| m.num_experts as u32),
        top_k: cfg.moe.as_ref().map_or(0, |m| m.top_k as u32),
        ram: Some(pb::RamPlan {
            budget_bytes: p.budget,
            backbone_bytes: p.backbone,
            kv_cache_bytes: p.kv_per_session * p.sessions,
            prefetch_bytes: p.in_flight,
            expert_cache_bytes: p.expert_cache,
        }),
        has_chat_template: node.chat_template.is_some(),
        eos_token_ids: node.eos.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::max_tokens;

    #[test]
    fn max_tokens_zero_takes_the_node_default_and_a_zero_default_is_no_limit() {
        assert_eq!(max_tokens(0, 1024), Some(1024));
        assert_eq!(max_tokens(7, 1024), Some(7));
        assert_eq!(max_tokens(0, 0), None);
        assert_eq!(max_tokens(7, 0), Some(7));
    }
}
