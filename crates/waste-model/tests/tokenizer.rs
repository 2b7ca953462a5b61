//! Public-API tests of the tokenizer against transformers/tokenizers output for SmolLM2
//! (`shared/fixtures/tokenizer/cases.json`): ids, decoded text, streaming decode and what
//! `tokenizer_config.json` adds.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;
use waste_model::tokenizer::{DecodeStream, Tokenizer, TokenizerError, token_ids_from_json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/tokenizer")
}

fn cases() -> Result<Vec<Value>> {
    let text = fs_err::read_to_string(fixtures().join("cases.json"))?;
    let json: Value = serde_json::from_str(&text)?;
    json["cases"]
        .as_array()
        .cloned()
        .context("cases.json has no cases")
}

fn ids_of(value: &Value) -> Vec<u32> {
    token_ids_from_json(value)
}

fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> Result<(String, Vec<String>)> {
    let mut decoder = DecodeStream::new(skip_special);
    let mut pieces = Vec::new();
    for &id in ids {
        if let Some(piece) = decoder.step(tok, id)? {
            pieces.push(piece);
        }
    }
    let tail = decoder.flush(tok)?;
    let mut text: String = pieces.concat();
    text.push_str(tail.as_deref().unwrap_or(""));
    Ok((text, pieces))
}

#[test]
fn every_case_encodes_and_decodes_like_transformers() -> Result<()> {
    let tok = Tokenizer::from_dir(fixtures())?;
    let cases = cases()?;
    assert_eq!(cases.len(), 34);
    for case in &cases {
        let text = case["text"].as_str().context("text")?;
        let ids = ids_of(&case["ids"]);
        assert_eq!(ids.len(), case["ids"].as_array().map_or(0, Vec::len));
        // The SmolLM2 post-processor adds nothing, so both modes give the fixture's ids.
        assert_eq!(tok.encode(text, true)?, ids, "encode {text:?}");
        assert_eq!(
            tok.encode(text, false)?,
            ids,
            "encode {text:?} without specials"
        );
        assert_eq!(
            tok.decode(&ids, false)?,
            case["decoded"].as_str().context("decoded")?
        );
        assert_eq!(
            tok.decode(&ids, true)?,
            case["decoded_skip_special"].as_str().context("skip")?
        );
        let tokens: Vec<String> = ids.iter().filter_map(|&id| tok.id_to_token(id)).collect();
        let expected: Vec<&str> = case["tokens"]
            .as_array()
            .context("tokens")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(tokens, expected, "tokens of {text:?}");
    }
    Ok(())
}

#[test]
fn decode_stream_concatenates_to_the_full_decode() -> Result<()> {
    let tok = Tokenizer::from_dir(fixtures())?;
    for case in &cases()? {
        let ids = ids_of(&case["ids"]);
        for (skip, key) in [(false, "decoded"), (true, "decoded_skip_special")] {
            let (text, pieces) = stream(&tok, &ids, skip)?;
            assert_eq!(
                text,
                case[key].as_str().context("decoded")?,
                "stream of {ids:?}"
            );
            // Every piece is whole characters: valid text never shows a replacement char.
            assert!(
                pieces
                    .iter()
                    .all(|p| !p.is_empty() && !p.contains('\u{FFFD}')),
                "{pieces:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn decode_stream_waits_for_complete_characters() -> Result<()> {
    let tok = Tokenizer::from_dir(fixtures())?;
    let ids = tok.encode("🙂", false)?;
    assert_eq!(ids, [10813, 38887]);
    let mut decoder = DecodeStream::new(false);
    assert_eq!(decoder.step(&tok, ids[0])?, None);
    assert_eq!(decoder.step(&tok, ids[1])?.as_deref(), Some("🙂"));
    assert_eq!(decoder.flush(&tok)?, None);

    // A stream cut mid-character flushes what decode() shows for the same ids.
    let mut decoder = DecodeStream::new(false);
    assert_eq!(decoder.step(&tok, ids[0])?, None);
    assert_eq!(decoder.flush(&tok)?, Some(tok.decode(&ids[..1], false)?));
    Ok(())
}

#[test]
fn special_tokens_and_template_come_from_the_folder() -> Result<()> {
    let mut tok = Tokenizer::from_dir(fixtures())?;
    assert_eq!(tok.vocab_size(), 49_152);
    let special = tok.special_tokens();
    let pair = |t: &Option<waste_model::tokenizer::SpecialToken>| {
        t.as_ref().map(|t| (t.content.clone(), t.id))
    };
    assert_eq!(pair(&special.bos), Some(("<|im_start|>".into(), Some(1))));
    assert_eq!(pair(&special.eos), Some(("<|im_end|>".into(), Some(2))));
    assert_eq!(pair(&special.pad), Some(("<|im_end|>".into(), Some(2))));
    assert_eq!(pair(&special.unk), Some(("<|endoftext|>".into(), Some(0))));
    assert_eq!(special.add_bos_token, None);
    assert_eq!(
        (tok.bos_token(), tok.eos_token()),
        (Some("<|im_start|>"), Some("<|im_end|>"))
    );
    assert_eq!(
        (tok.token_to_id("<|im_end|>"), tok.token_to_id("Hello")),
        (Some(2), Some(19556))
    );
    assert_eq!(tok.id_to_token(u32::MAX), None);

    let jinja = fs_err::read_to_string(fixtures().join("chat_template.jinja"))?;
    assert_eq!(tok.chat_template(), Some(jinja.as_str()));

    assert_eq!(tok.eos_token_ids(), [2]);
    // generation_config.json style: an int or a list.
    tok.add_eos_token_ids(token_ids_from_json(&serde_json::json!([2, 0])));
    tok.add_eos_token_ids(token_ids_from_json(&serde_json::json!(7)));
    assert_eq!(tok.eos_token_ids(), [2, 0, 7]);
    assert!(token_ids_from_json(&serde_json::json!([-1, "x", null])).is_empty());

    // tokenizer.json alone knows no special-token roles.
    let bare = Tokenizer::from_file(fixtures().join("tokenizer.json"))?;
    assert!(bare.eos_token_ids().is_empty() && bare.chat_template().is_none());
    assert_eq!(bare.encode("Hello, world!", true)?, [19556, 28, 905, 17]);
    Ok(())
}

/// A model folder in a temp dir with the fixture tokenizer.json and the given config.
fn folder_with_config(config: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        fixtures().join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )?;
    std::fs::write(dir.path().join("tokenizer_config.json"), config)?;
    Ok(dir)
}

#[test]
fn add_bos_token_from_the_config_wins() -> Result<()> {
    let dir = folder_with_config(
        r#"{"bos_token": {"__type": "AddedToken", "content": "<|im_start|>"}, "add_bos_token": true,
            "eos_token": "<|im_end|>", "chat_template": [{"name": "tool_use", "template": "T"},
            {"name": "default", "template": "D"}]}"#,
    )?;
    let tok = Tokenizer::from_dir(dir.path())?;
    assert_eq!(tok.encode("Hello", true)?, [1, 19556]);
    assert_eq!(tok.encode("Hello", false)?, [19556]);
    // No double BOS when the text already starts with it.
    assert_eq!(tok.encode("<|im_start|>Hello", true)?, [1, 19556]);
    assert_eq!(tok.chat_template(), Some("D"));

    std::fs::write(dir.path().join("chat_template.jinja"), "J")?;
    assert_eq!(Tokenizer::from_dir(dir.path())?.chat_template(), Some("J"));
    Ok(())
}

#[test]
fn bad_files_are_errors_naming_the_file() -> Result<()> {
    let empty = tempfile::tempdir()?;
    let err = Tokenizer::from_dir(empty.path())
        .err()
        .context("empty dir loaded")?;
    assert!(matches!(err, TokenizerError::Missing { .. }), "{err}");

    let garbage = empty.path().join("tokenizer.json");
    std::fs::write(&garbage, "{not json")?;
    let err = Tokenizer::from_file(&garbage)
        .err()
        .context("garbage loaded")?;
    assert!(matches!(err, TokenizerError::Load { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");

    let err = Tokenizer::from_file(empty.path().join("nope.json"))
        .err()
        .context("missing loaded")?;
    assert!(err.to_string().contains("nope.json"), "{err}");

    for config in [
        "[1]",
        "{\"bos_token\": 3}",
        "{\"add_bos_token\": \"yes\"}",
        "{\"chat_template\": 1}",
        "{",
    ] {
        let dir = folder_with_config(config)?;
        let err = Tokenizer::from_dir(dir.path())
            .err()
            .with_context(|| format!("{config} loaded"))?;
        assert!(
            matches!(err, TokenizerError::Config { .. }),
            "{config}: {err}"
        );
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    }
    Ok(())
}

#[test]
fn ids_outside_the_vocabulary_do_not_panic() -> Result<()> {
    let tok = Tokenizer::from_dir(fixtures())?;
    assert_eq!(tok.decode(&[19556, u32::MAX, 17], false)?, "Hello!");
    let (text, _) = stream(&tok, &[u32::MAX, 19556], false)?;
    assert_eq!(text, "Hello");
    Ok(())
}
