//! Chat templates: renders a Hugging Face `chat_template` (Jinja) into a prompt string with
//! minijinja, set up the way transformers sets up Jinja2 (`trim_blocks`, `lstrip_blocks`,
//! loop controls, Python string methods via minijinja-contrib's pycompat, `raise_exception`,
//! `strftime_now`, and a `tojson` that matches Python's `json.dumps`).
//!
//! It does not tokenize: encode the result with `add_special_tokens = false`, since the
//! template already writes the special tokens (HF's `apply_chat_template` does the same).

mod strftime;
mod tojson;
pub mod tools;

use std::fmt::Write as _;

use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Value};

/// What can go wrong with a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template does not parse.
    #[error("chat template does not compile: {message}")]
    Syntax { message: String },
    /// The template called `raise_exception`, usually over messages it does not accept
    /// (roles that do not alternate, a system message where none is allowed).
    #[error("chat template rejected the messages: {message}")]
    Raised { message: String },
    /// Rendering failed for another reason.
    #[error("chat template failed to render: {message}")]
    Render { message: String },
}

type Result<T> = std::result::Result<T, ChatTemplateError>;

/// One chat message. For tool calls, multimodal parts and other OpenAI-shaped fields, pass JSON
/// to [`ChatTemplate::render_json`] instead.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the special tokens it may reference.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template text, for what the environment does not tell (the tool-call syntax).
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`. `bos_token` and `eos_token` are the texts the template sees as
    /// `bos_token` / `eos_token` (left undefined when `None`, as HF does).
    pub fn new(source: &str, bos_token: Option<&str>, eos_token: Option<&str>) -> Result<Self> {
        let mut env = Environment::new();
        // transformers: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
        // extensions=[AssistantTracker, loopcontrols]); keep_trailing_newline stays False.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatTemplateError::Syntax {
                message: format!("{e:#}"),
            })?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime::strftime_now);
        env.add_filter("tojson", tojson::tojson);
        env.add_template_owned(NAME, strip_generation_tags(source))
            .map_err(|e| ChatTemplateError::Syntax {
                message: format!("{e:#}"),
            })?;
        Ok(Self {
            env,
            source: source.to_owned(),
            bos_token: bos_token.map(str::to_owned),
            eos_token: eos_token.map(str::to_owned),
        })
    }

    /// The template text as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The tool-call syntax the template teaches, if any ([`tools::ToolCallFormat`]).
    pub fn tool_call_format(&self) -> Option<tools::ToolCallFormat> {
        tools::ToolCallFormat::detect(&self.source)
    }

    /// Whether the template renders a `tools` list at all.
    pub fn supports_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// Renders `messages`; `add_generation_prompt` appends the assistant header, `tools` is
    /// the OpenAI tool list (the template sees `none` when absent).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from_pairs([("role", m.role.as_str()), ("content", m.content.as_str())])
            })
            .collect();
        self.render_value(
            Value::from(messages),
            add_generation_prompt,
            tools,
            &serde_json::Map::new(),
        )
    }

    /// Renders OpenAI-shaped JSON messages (an array of objects with any fields), plus extra
    /// template variables such as `enable_thinking` in `kwargs`.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        if !messages.is_array() {
            return Err(ChatTemplateError::Render {
                message: "messages must be a JSON array".into(),
            });
        }
        self.render_value(to_value(messages), add_generation_prompt, tools, kwargs)
    }

    fn render_value(
        &self,
        messages: Value,
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        // HF: render(messages=, tools=, documents=, add_generation_prompt=, **special_tokens,
        // **kwargs). Later pairs win in `from_pairs`, so the fixed names go last.
        let mut ctx: Vec<(String, Value)> = Vec::new();
        for (name, token) in [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
        ] {
            if let Some(token) = token {
                ctx.push((name.into(), Value::from(token.as_str())));
            }
        }
        ctx.extend(kwargs.iter().map(|(k, v)| (k.clone(), to_value(v))));
        ctx.push(("messages".into(), messages));
        ctx.push(("tools".into(), tools.map_or(Value::from(()), to_value)));
        ctx.push(("documents".into(), Value::from(())));
        ctx.push((
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        ));

        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatTemplateError::Render {
                message: format!("{e:#}"),
            })?;
        template
            .render(Value::from_pairs(ctx))
            .map_err(|e| match raised_message(&e) {
                Some(message) => ChatTemplateError::Raised { message },
                None => ChatTemplateError::Render {
                    message: format!("{e:#}"),
                },
            })
    }
}

/// The marker `raise_exception` attaches so that its errors are told apart from template bugs.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

fn raised_message(err: &JinjaError) -> Option<String> {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        source = e.source();
    }
    None
}

fn raise_exception(message: String) -> std::result::Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// JSON (as parsed by serde_json) to a template value, keeping object key order.
fn to_value(json: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match json {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => items.iter().map(to_value).collect(),
        J::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), to_value(v)))),
    }
}

/// transformers' `{% generation %}` blocks only mark assistant text for training masks and
/// minijinja does not know the tag: turn them into `{% if true %}`/`{% endif %}`, keeping
/// their `-`/`+` whitespace markers so the output is unchanged.
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        let inner = &tag[2..end];
        let body = inner
            .trim_start_matches(['-', '+'])
            .trim_end_matches(['-', '+'])
            .trim();
        let replacement = match body {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(word) => {
                let open = &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()];
                let close = &inner[inner.trim_end_matches(['-', '+']).len()..];
                let _ = write!(out, "{{%{open} {word} {close}%}}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_noops() {
        let s = strip_generation_tags("a{%- generation %}b{% endgeneration -%}c{% if x %}");
        assert_eq!(s, "a{%- if true %}b{% endif -%}c{% if x %}");
    }
}
