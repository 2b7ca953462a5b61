//! Public-API tests of chat templates: the SmolLM2 goldens of `cases.json` (text and ids) and
//! the Jinja behaviour HF templates rely on.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use waste_model::chat::{ChatTemplate, ChatTemplateError, Message};
use waste_model::tokenizer::{Tokenizer, token_ids_from_json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/tokenizer")
}

fn render(source: &str, messages: &[Message]) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(source, Some("<s>"), Some("</s>"))?.render(messages, true, None)
}

#[test]
fn smollm2_cases_render_and_tokenize_like_transformers() -> Result<()> {
    let tok = Tokenizer::from_dir(fixtures())?;
    let source = fs_err::read_to_string(fixtures().join("chat_template.jinja"))?;
    let template = ChatTemplate::new(&source, tok.bos_token(), tok.eos_token())?;
    let cases: Value =
        serde_json::from_str(&fs_err::read_to_string(fixtures().join("cases.json"))?)?;
    let mut seen = 0;
    for case in cases["cases"].as_array().context("cases")? {
        if case["kind"] != "chat_template" {
            continue;
        }
        seen += 1;
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone())?;
        let add_generation_prompt = case["add_generation_prompt"].as_bool().context("flag")?;
        let text = template.render(&messages, add_generation_prompt, None)?;
        assert_eq!(text, case["text"].as_str().context("text")?);
        assert_eq!(tok.encode(&text, false)?, token_ids_from_json(&case["ids"]));
        // The JSON path renders the same.
        let json_text = template.render_json(
            &case["messages"],
            add_generation_prompt,
            None,
            &serde_json::Map::new(),
        )?;
        assert_eq!(json_text, text);
    }
    assert_eq!(seen, 3);
    Ok(())
}

#[test]
fn hf_jinja_environment() -> Result<()> {
    let msgs = [
        Message::new("system", "  Be brief.  "),
        Message::new("user", "hi"),
    ];
    // pycompat string methods, negative indexing, special tokens, generation prompt flag.
    let t = "{{ bos_token }}{{ messages[0].content.strip().upper() }}|{{ messages[-1]['role'] }}\
             {% if add_generation_prompt %}|gen{% endif %}{{ eos_token }}";
    assert_eq!(render(t, &msgs)?, "<s>BE BRIEF.|user|gen</s>");
    // trim_blocks + lstrip_blocks: block lines leave no blank lines or indentation behind.
    let t = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}\nend";
    assert_eq!(render(t, &msgs)?, "hi\nend");
    // loop controls and namespace(), as in Llama / Qwen templates.
    let t = "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\
             {% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}";
    assert_eq!(render(t, &msgs)?, "1");
    // tools is none when absent, as transformers passes tools=None; booleans print as Python.
    assert_eq!(
        render("{{ tools is none }}|{{ tools is defined }}", &msgs)?,
        "True|True"
    );
    // transformers' {% generation %} marker renders its body.
    assert_eq!(
        render("a{% generation %}b{% endgeneration %}c", &msgs)?,
        "abc"
    );
    Ok(())
}

#[test]
fn tojson_matches_python_json_dumps() -> Result<()> {
    let t = r#"{{ {"b": 1, "a": [1, 2.5, none, true, "é<\"\n"], "e": {}} | tojson }}"#;
    assert_eq!(
        render(t, &[])?,
        r#"{"b": 1, "a": [1, 2.5, null, true, "é<\"\n"], "e": {}}"#
    );
    let t = r#"{{ {"b": [1], "a": "é"} | tojson(indent=2, sort_keys=true, ensure_ascii=true) }}"#;
    assert_eq!(
        render(t, &[])?,
        "{\n  \"a\": \"\\u00e9\",\n  \"b\": [\n    1\n  ]\n}"
    );
    let t = r#"{{ [1, {"k": "v"}] | tojson(separators=(",", ":")) }}"#;
    assert_eq!(render(t, &[])?, r#"[1,{"k":"v"}]"#);
    assert!(render("{{ 1 | tojson(bogus=1) }}", &[]).is_err());

    // Tools as the caller passes them: JSON in, JSON out.
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"x": 1e-5}}}]);
    let template = ChatTemplate::new(
        "{% for t in tools %}{{ t | tojson }}{% endfor %}",
        None,
        None,
    )?;
    let text = template.render(&[], false, Some(&tools))?;
    let back: Value = serde_json::from_str(&text)?;
    assert_eq!(back, tools[0]);
    assert!(text.contains("1e-05"), "{text}");
    Ok(())
}

#[test]
fn render_json_passes_extra_fields_and_kwargs() -> Result<()> {
    let template = ChatTemplate::new(
        "{% for m in messages %}{{ m.role }}:{{ m.tool_calls[0].function.name if m.tool_calls else m.content }};{% endfor %}{{ enable_thinking }}",
        None,
        None,
    )?;
    let messages = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "get_time"}}]}
    ]);
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("enable_thinking".into(), json!(false));
    assert_eq!(
        template.render_json(&messages, false, None, &kwargs)?,
        "user:hi;assistant:get_time;False"
    );
    assert!(
        template
            .render_json(&json!({"role": "user"}), false, None, &kwargs)
            .is_err()
    );
    Ok(())
}

#[test]
fn raise_exception_strftime_and_errors() -> Result<()> {
    let t = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}ok";
    let err = render(t, &[Message::new("assistant", "x")])
        .err()
        .context("no error")?;
    match err {
        ChatTemplateError::Raised { message } => {
            assert_eq!(message, "Conversation must start with user");
        }
        other => panic!("expected Raised, got {other}"),
    }
    assert_eq!(render(t, &[Message::new("user", "x")])?, "ok");

    // strftime_now("%d %b %Y"): "26 Jul 2024"-shaped.
    let date = render("{{ strftime_now('%d %b %Y') }}", &[])?;
    let parts: Vec<&str> = date.split(' ').collect();
    assert_eq!(parts.len(), 3, "{date}");
    assert!(
        parts[0].len() == 2 && parts[1].len() == 3 && parts[2].len() == 4,
        "{date}"
    );

    let err = ChatTemplate::new("{% if %}", None, None)
        .err()
        .context("bad syntax compiled")?;
    assert!(matches!(err, ChatTemplateError::Syntax { .. }), "{err}");
    let err = render("{{ messages.nope.deeper }}", &[])
        .err()
        .context("rendered")?;
    assert!(matches!(err, ChatTemplateError::Render { .. }), "{err}");
    // Undefined special tokens render empty, as in Jinja2.
    let plain = ChatTemplate::new("[{{ bos_token }}]", None, None)?;
    assert_eq!(plain.render(&[], false, None)?, "[]");
    Ok(())
}
