//! The OpenAI request bodies the node accepts, as sent by the `openai`
//! client libraries (fields it does not know are ignored, as llama.cpp's
//! server does), turned into one [`Ask`]: the prompt and how to sample.
//! Responses are built as JSON where they are sent (`completions.rs`).

use serde::Deserialize;
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
}

/// Sampling fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Not OpenAI's, but vLLM's and llama.cpp's.
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// waste: keep this conversation's attention state under this id, so
    /// the next turn prefills only what is new.
    pub session_id: Option<String>,
    /// waste: do not stop at end-of-sequence tokens.
    #[serde(default)]
    pub ignore_eos: bool,
    /// vLLM's: token ids that end generation like EOS.
    #[serde(default)]
    pub stop_token_ids: Vec<u32>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Value>,
    #[serde(flatten)]
    pub sampling: Sampling,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u32>,
    pub response_format: Option<ResponseFormat>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    /// vLLM's: extra chat template variables, one JSON object (for example
    /// `{"enable_thinking": false}`).
    pub chat_template_kwargs: Option<Value>,
}

/// `prompt` of `/v1/completions`: text or token ids, alone or in a list of one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions` (the legacy endpoint).
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: Sampling,
    /// The number of alternatives to report per token (0..=5), not a flag.
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: bool,
    pub suffix: Option<String>,
}

/// Chat messages as the template wants them: text parts joined into one
/// string, tool-call arguments (JSON text in OpenAI's API) as objects, which
/// is what Hugging Face templates index into. Images and audio are refused.
pub fn template_messages(messages: &[Value]) -> Result<Value, String> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(format!("messages[{i}] is not an object"));
        };
        let mut m = m.clone();
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(format!("messages[{i}].role is missing"));
        }
        match m.get("content") {
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => text.push_str(t),
                        (kind, _) => {
                            return Err(format!(
                                "messages[{i}].content[{j}]: only text parts are supported, not {}",
                                kind.unwrap_or("an untyped part")
                            ));
                        }
                    }
                }
                m.insert("content".into(), Value::String(text));
            }
            Some(Value::String(_)) => {}
            None | Some(Value::Null) => {
                m.insert("content".into(), Value::String(String::new()));
            }
            Some(_) => return Err(format!("messages[{i}].content must be a string or parts")),
        }
        if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
            for c in calls {
                if let Some(f) = c.get_mut("function")
                    && let Some(Value::String(args)) = f.get("arguments")
                    && let Ok(parsed) = serde_json::from_str::<Value>(args)
                {
                    f["arguments"] = parsed;
                }
            }
        }
        out.push(Value::Object(m));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_client_request_parses_with_unknown_fields_ignored() {
        let r: ChatRequest = serde_json::from_value(json!({
            "model": "m", "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.5, "stop": "x", "stream": true,
            "stream_options": {"include_usage": true}, "parallel_tool_calls": false,
        }))
        .unwrap();
        assert!(r.sampling.stream);
        assert_eq!(r.sampling.stop.unwrap().into_vec(), ["x"]);
        assert!(r.sampling.stream_options.unwrap().include_usage);
    }

    #[test]
    fn parts_are_joined_and_arguments_become_objects() {
        let m = template_messages(&[
            json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}),
        ])
        .unwrap();
        assert_eq!(m[0]["content"], "ab");
        assert_eq!(m[1]["content"], "");
        assert_eq!(m[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);
        let err = template_messages(&[json!({"role": "user", "content": [{"type": "image_url"}]})]);
        assert!(err.unwrap_err().contains("image_url"));
    }
}
