//! Kimi-style tokenizer folders (`tiktoken.model` + `tokenizer_config.json`, no
//! `tokenizer.json`) against OpenAI's Python `tiktoken` as the independent truth.
//!
//! No real Kimi `tiktoken.model` is available offline, so `tiktoken_reference.py` trains a
//! small rank table (and writes a hand-made one), encodes ~70 texts with `tiktoken` itself and
//! prints the ids. It needs `python3` and `pip install tiktoken==0.14.0` (`.ci/run` installs
//! it); without them the test fails, it does not skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use waste_model::tokenizer::{
    DecodeStream, RESERVED_SPECIAL_TOKENS, Tokenizer, TokenizerError, token_ids_from_json,
};

const PIP: &str = "python3 -m pip install tiktoken==0.14.0";

/// Runs the generator into `out` and returns its JSON.
fn reference(out: &Path) -> Result<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tiktoken_reference.py");
    let output = match Command::new("python3").arg(&script).arg(out).output() {
        Ok(output) => output,
        Err(e) => bail!("cannot run python3 ({e}); install Python 3, then `{PIP}`"),
    };
    if !output.status.success() {
        bail!(
            "{} failed ({}); is tiktoken installed? `{PIP}`\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("tiktoken_reference.py printed no JSON")
}

fn cases(folder: &Value) -> Result<Vec<(String, Vec<u32>)>> {
    let cases = folder["cases"].as_array().context("no cases")?;
    cases
        .iter()
        .map(|c| {
            let text = c["text"].as_str().context("case text")?.to_owned();
            Ok((text, token_ids_from_json(&c["ids"])))
        })
        .collect()
}

#[test]
fn tiktoken_folders_encode_like_python_tiktoken() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let truth = reference(dir.path())?;
    for name in ["trained", "untrained"] {
        let folder = &truth["folders"][name];
        let tok = Tokenizer::from_dir(dir.path().join(name))?;
        let n = u32::try_from(folder["n_ranks"].as_u64().context("n_ranks")?)?;
        assert_eq!(
            tok.vocab_size(),
            (n + RESERVED_SPECIAL_TOKENS) as usize,
            "{name}"
        );
        let cases = cases(folder)?;
        assert!(cases.len() >= 30, "{name}: {} cases", cases.len());
        for (text, ids) in &cases {
            assert_eq!(&tok.encode(text, false)?, ids, "{name}: encode {text:?}");
            // No post-processor and no add_bos_token: `true` adds nothing either.
            assert_eq!(
                &tok.encode(text, true)?,
                ids,
                "{name}: encode {text:?} with specials"
            );
            assert_eq!(&tok.decode(ids, false)?, text, "{name}: decode {text:?}");
            let mut stream = DecodeStream::new(false);
            let mut streamed = String::new();
            for &id in ids {
                streamed.push_str(&stream.step(&tok, id)?.unwrap_or_default());
            }
            streamed.push_str(&stream.flush(&tok)?.unwrap_or_default());
            assert_eq!(&streamed, text, "{name}: streamed {text:?}");
        }
    }
    Ok(())
}

#[test]
fn tiktoken_specials_come_from_tokenizer_config() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let truth = reference(dir.path())?;
    let n = u32::try_from(
        truth["folders"]["trained"]["n_ranks"]
            .as_u64()
            .context("n")?,
    )?;
    let tok = Tokenizer::from_dir(dir.path().join("trained"))?;
    assert_eq!(tok.path(), dir.path().join("trained/tiktoken.model"));
    assert_eq!(tok.bos_token(), Some("[BOS]"));
    assert_eq!(
        tok.special_tokens().bos.as_ref().and_then(|t| t.id),
        Some(n)
    );
    assert_eq!(tok.eos_token_ids(), [n + 1]);
    assert_eq!(
        tok.special_tokens().pad.as_ref().and_then(|t| t.id),
        Some(n + 255)
    );
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(n + 2));
    let reserved = format!("<|reserved_token_{}|>", n + 5);
    assert_eq!(tok.id_to_token(n + 5).as_deref(), Some(reserved.as_str()));
    assert_eq!(tok.id_to_token(n + RESERVED_SPECIAL_TOKENS), None);
    // Byte-level spelling, as a converted tokenizer.json would have it.
    let space_a = tok.encode(" a", false)?;
    assert_eq!(space_a.len(), 1);
    assert_eq!(tok.id_to_token(space_a[0]).as_deref(), Some("Ġa"));

    // skip_special_tokens drops special ids but keeps the tool-call marker, which the config
    // marks "special": false, as transformers does.
    let marker = "<|tool_calls_section_begin|>";
    let ids = tok.encode(&format!("[BOS]hi{marker}<|im_end|>"), false)?;
    assert_eq!(tok.decode(&ids, true)?, format!("hi{marker}"));
    assert_eq!(tok.decode(&[n, u32::MAX, n + 1], false)?, "[BOS][EOS]");

    // add_bos_token works as for tokenizer.json folders.
    let trained = dir.path().join("trained/tokenizer_config.json");
    let mut config: Value = serde_json::from_str(&fs_err::read_to_string(&trained)?)?;
    config["add_bos_token"] = Value::Bool(true);
    std::fs::write(&trained, config.to_string())?;
    let tok = Tokenizer::from_dir(dir.path().join("trained"))?;
    assert_eq!(tok.encode("hi", true)?.first(), Some(&n));
    assert_ne!(tok.encode("hi", false)?.first(), Some(&n));
    Ok(())
}

/// A folder holding `tiktoken.model` with `lines` (and no config).
fn folder_with_ranks(lines: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("tiktoken.model"), lines)?;
    Ok(dir)
}

fn load_err(dir: &Path) -> Result<TokenizerError> {
    Tokenizer::from_dir(dir)
        .err()
        .with_context(|| format!("{} loaded", dir.display()))
}

#[test]
fn broken_tiktoken_files_are_errors_naming_file_and_line() -> Result<()> {
    // "YQ==" = "a", "Yg==" = "b", "YWI=" = "ab"
    let base = "YQ== 0\nYg== 1\n";
    for (lines, line, what) in [
        (format!("{base}YWI=\n"), 3, "expected"),
        (format!("{base}YWI= 2 extra\n"), 3, "expected"),
        (format!("{base}\nY!I= 2\n"), 4, "base64"),
        (format!("{base}YWI= -2\n"), 3, "not a non-negative"),
        (format!("{base}YWI= 7\n"), 3, "out of range"),
    ] {
        let dir = folder_with_ranks(&lines)?;
        let err = load_err(dir.path())?;
        assert!(
            matches!(err, TokenizerError::BadRankLine { line: l, .. } if l == line),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("tiktoken.model:{line}:")) && msg.contains(what),
            "{msg}"
        );
    }

    let dir = folder_with_ranks(&format!("{base}YWI= 1\n"))?;
    let err = load_err(dir.path())?;
    assert!(
        matches!(
            err,
            TokenizerError::DuplicateRank {
                line: 3,
                rank: 1,
                first_line: 2,
                ..
            }
        ),
        "{err}"
    );
    let dir = folder_with_ranks(&format!("{base}YQ== 2\r\n"))?;
    let err = load_err(dir.path())?;
    assert!(
        matches!(
            err,
            TokenizerError::DuplicateToken {
                line: 3,
                first_line: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("tiktoken.model:3:"), "{err}");
    let dir = folder_with_ranks("\n\n")?;
    assert!(matches!(load_err(dir.path())?, TokenizerError::Load { .. }));

    // Neither tokenizer.json nor tiktoken.model.
    let empty = tempfile::tempdir()?;
    let err = load_err(empty.path())?;
    assert!(matches!(err, TokenizerError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("tiktoken.model"), "{err}");

    // Special ids that clash with ranks or with each other.
    for config in [
        r#"{"added_tokens_decoder": {"1": {"content": "<x>"}}}"#,
        r#"{"added_tokens_decoder": {"2": {"content": "<x>"}, "3": {"content": "<x>"}}}"#,
        r#"{"added_tokens_decoder": {"two": {"content": "<x>"}}}"#,
        r#"{"added_tokens_decoder": {"2": {"content": ""}}}"#,
        r#"{"added_tokens_decoder": {"4000000000": {"content": "<x>"}}}"#,
        r#"{"added_tokens_decoder": []}"#,
    ] {
        let dir = folder_with_ranks(base)?;
        std::fs::write(dir.path().join("tokenizer_config.json"), config)?;
        let err = load_err(dir.path())?;
        assert!(
            matches!(err, TokenizerError::Config { .. }),
            "{config}: {err}"
        );
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    }
    Ok(())
}

#[test]
fn tokenizer_json_wins_over_tiktoken_model() -> Result<()> {
    let fixtures: PathBuf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/tokenizer");
    let dir = folder_with_ranks("not a rank table")?;
    std::fs::copy(
        fixtures.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )?;
    let tok = Tokenizer::from_dir(dir.path())?;
    assert_eq!(tok.path(), dir.path().join("tokenizer.json"));
    assert!(!tok.encode("Hello", false)?.is_empty());
    Ok(())
}
