//! Tool calls in generated text, in the syntax each model family was
//! trained to write (the chat template renders the tools and the earlier
//! calls; the model answers in kind). The format is told from the template:
//!
//! - Hermes / Qwen: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one block per call;
//! - Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>`;
//! - DeepSeek-V3: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`;
//! - Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`.
//!
//! The text must be decoded with special tokens kept: most markers are
//! special tokens.

/// A tool-call syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallFormat {
    Hermes,
    KimiK2,
    DeepSeekV3,
    Mistral,
}

/// One call: the function's name and its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The id the model gave the call (Kimi K2 writes one), if any.
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

const KIMI_SECTION: &str = "<|tool_calls_section_begin|>";
const KIMI_CALL: &str = "<|tool_call_begin|>";
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";
const DS_SECTION: &str = "<｜tool▁calls▁begin｜>";
const DS_CALL: &str = "<｜tool▁call▁begin｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";

impl ToolCallFormat {
    /// The format a chat template teaches, if it teaches one.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains(KIMI_SECTION) {
            Some(Self::KimiK2)
        } else if template.contains("tool▁calls▁begin") {
            Some(Self::DeepSeekV3)
        } else if template.contains("<tool_call>") {
            Some(Self::Hermes)
        } else if template.contains("[TOOL_CALLS]") {
            Some(Self::Mistral)
        } else {
            None
        }
    }

    /// The text that opens the calls: content stops where it appears.
    pub fn start_marker(self) -> &'static str {
        match self {
            Self::Hermes => "<tool_call>",
            Self::KimiK2 => KIMI_SECTION,
            Self::DeepSeekV3 => DS_SECTION,
            Self::Mistral => "[TOOL_CALLS]",
        }
    }

    /// Splits generated text into the content before the calls and the
    /// calls. A call that does not parse (cut off by the token limit, or
    /// malformed) is left out; the content is everything before the first
    /// marker, or the whole text when there is none.
    pub fn parse(self, text: &str) -> (String, Vec<ToolCall>) {
        let Some(start) = text.find(self.start_marker()) else {
            return (text.to_string(), Vec::new());
        };
        let (content, calls) = text.split_at(start);
        let calls = match self {
            Self::Hermes => hermes(calls),
            Self::KimiK2 => kimi(calls),
            Self::DeepSeekV3 => deepseek(calls),
            Self::Mistral => mistral(calls),
        };
        (content.trim_end().to_string(), calls)
    }
}

/// `{"name": …, "arguments": {…} | "…"}` as a call.
fn from_object(v: &serde_json::Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
        None => "{}".to_string(),
    };
    Some(ToolCall {
        id: v.get("id").and_then(|i| i.as_str()).map(str::to_string),
        name,
        arguments,
    })
}

fn hermes(text: &str) -> Vec<ToolCall> {
    text.split("<tool_call>")
        .skip(1)
        .filter_map(|block| {
            let body = block.split("</tool_call>").next()?;
            from_object(&serde_json::from_str(body.trim()).ok()?)
        })
        .collect()
}

fn kimi(text: &str) -> Vec<ToolCall> {
    text.split(KIMI_CALL)
        .skip(1)
        .filter_map(|block| {
            let (head, rest) = block.split_once(KIMI_ARGS)?;
            let args = rest.split(KIMI_CALL_END).next()?.trim();
            serde_json::from_str::<serde_json::Value>(args).ok()?;
            // `functions.NAME:INDEX` is the call's id.
            let id = head.trim();
            let name = id.strip_prefix("functions.").unwrap_or(id);
            let name = name.rsplit_once(':').map_or(name, |(n, _)| n);
            Some(ToolCall {
                id: Some(id.to_string()),
                name: name.to_string(),
                arguments: args.to_string(),
            })
        })
        .collect()
}

fn deepseek(text: &str) -> Vec<ToolCall> {
    text.split(DS_CALL)
        .skip(1)
        .filter_map(|block| {
            let block = block.split(DS_CALL_END).next()?;
            let (_, rest) = block.split_once(DS_SEP)?;
            let (name, args) = rest.split_once('\n')?;
            let args = args.trim();
            let args = args.strip_prefix("```json").unwrap_or(args);
            let args = args.strip_suffix("```").unwrap_or(args).trim();
            serde_json::from_str::<serde_json::Value>(args).ok()?;
            Some(ToolCall {
                id: None,
                name: name.trim().to_string(),
                arguments: args.to_string(),
            })
        })
        .collect()
}

fn mistral(text: &str) -> Vec<ToolCall> {
    let body = text.trim_start_matches("[TOOL_CALLS]").trim();
    // The list may be followed by an end-of-text marker.
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<serde_json::Value>();
    match stream.next() {
        Some(Ok(serde_json::Value::Array(calls))) => calls.iter().filter_map(from_object).collect(),
        Some(Ok(obj @ serde_json::Value::Object(_))) => from_object(&obj).into_iter().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn the_format_is_told_from_the_template() {
        let qwen = "{%- if tools %}<tools>{{ tool | tojson }}</tools> <tool_call>\\n{\"name\": ";
        assert_eq!(ToolCallFormat::detect(qwen), Some(ToolCallFormat::Hermes));
        let kimi = "{%- if message.tool_calls -%}<|tool_calls_section_begin|>";
        assert_eq!(ToolCallFormat::detect(kimi), Some(ToolCallFormat::KimiK2));
        let ds = "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}";
        assert_eq!(ToolCallFormat::detect(ds), Some(ToolCallFormat::DeepSeekV3));
        assert_eq!(
            ToolCallFormat::detect("[TOOL_CALLS]"),
            Some(ToolCallFormat::Mistral)
        );
        assert_eq!(ToolCallFormat::detect("{{ messages }}"), None);
    }

    #[test]
    fn hermes_calls_and_the_content_before_them() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let (content, calls) = ToolCallFormat::Hermes.parse(text);
        assert_eq!(content, "Let me check.");
        assert_eq!(
            calls,
            [
                call("get_weather", r#"{"city":"Paris"}"#),
                call("now", "{}")
            ]
        );
        // Cut off by the token limit: the broken call is dropped.
        let (_, calls) = ToolCallFormat::Hermes.parse("<tool_call>\n{\"name\": \"a\", \"argu");
        assert!(calls.is_empty());
        let (content, calls) = ToolCallFormat::Hermes.parse("no calls here");
        assert_eq!((content.as_str(), calls.len()), ("no calls here", 0));
    }

    #[test]
    fn kimi_k2_calls_keep_their_ids() {
        let text = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{\"q\": \"x\"}<|tool_call_end|><|tool_calls_section_end|>";
        let (content, calls) = ToolCallFormat::KimiK2.parse(text);
        assert_eq!(content, "");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].id.as_deref(), Some("functions.get_weather:0"));
        assert_eq!(calls[0].arguments, "{\"city\": \"Beijing\"}");
        assert_eq!(calls[1].name, "search");
    }

    #[test]
    fn deepseek_v3_calls_in_fenced_json() {
        let text = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Hangzhou\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let (content, calls) = ToolCallFormat::DeepSeekV3.parse(text);
        assert_eq!(content, "Sure.");
        assert_eq!(calls, [call("get_weather", "{\"city\": \"Hangzhou\"}")]);
    }

    #[test]
    fn mistral_call_lists() {
        let text = "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]</s>";
        let (_, calls) = ToolCallFormat::Mistral.parse(text);
        assert_eq!(calls, [call("add", r#"{"a":1,"b":2}"#)]);
    }
}
