//! The node's OpenAI-compatible HTTP API driven by the official Python
//! `openai` client (`tests/python/openai_api.py`, installed by `.ci/run`)
//! against a node on a native-expert fixture store: streamed and
//! non-streamed chat, usage, a stop string, seeded sampling, logprobs, JSON
//! mode, the legacy endpoint, 400s in OpenAI's error shape, and `/metrics`
//! read by the Prometheus client's own parser. Then the bearer token.

use std::process::Command;

use anyhow::{Context, Result};
use waste_e2e::harness::chat_node;

fn python() -> Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/openai_api.py");
    let mut c = Command::new("python3");
    c.arg(script);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_gets_what_it_expects() -> Result<()> {
    let (node, _dir) = chat_node("qwen3_moe_tiny", None).await?;
    let base = format!("http://{}/v1", node.addr);
    let out = tokio::task::spawn_blocking(move || python().arg(&base).output())
        .await?
        .context("run python3 (the tests need it, with `pip install openai prometheus_client`)")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the OpenAI client checks failed\n{stdout}\n{stderr}\n(missing modules? pip install openai prometheus_client)"
    );
    assert!(stdout.contains("all OpenAI API checks passed"), "{stdout}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_token_guards_the_api_but_not_health() -> Result<()> {
    let (node, _dir) = chat_node("mixtral_tiny", Some("s3cret")).await?;
    let url = |p: &str| format!("http://{}{p}", node.addr);
    let client = reqwest_free::Client;
    assert_eq!(client.get(&url("/health"), None).await?.0, 200);
    let (status, body) = client.get(&url("/v1/models"), None).await?;
    assert_eq!(status, 401, "{body}");
    let err: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(err["error"]["code"], "invalid_api_key");
    assert_eq!(client.get(&url("/v1/models"), Some("wrong")).await?.0, 401);
    assert_eq!(client.get(&url("/v1/models"), Some("s3cret")).await?.0, 200);
    Ok(())
}

/// A minimal HTTP/1.1 GET over a TCP stream: enough for status codes, with
/// no HTTP client crate in the tree for one test.
mod reqwest_free {
    use anyhow::{Context, Result};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    pub struct Client;

    impl Client {
        pub async fn get(&self, url: &str, token: Option<&str>) -> Result<(u16, String)> {
            let rest = url.strip_prefix("http://").context("http URL")?;
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let mut s = tokio::net::TcpStream::connect(host).await?;
            let auth = token
                .map(|t| format!("Authorization: Bearer {t}\r\n"))
                .unwrap_or_default();
            let req =
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await?;
            let mut buf = String::new();
            s.read_to_string(&mut buf).await?;
            let status = buf.split(' ').nth(1).context("status line")?.parse()?;
            let body = buf
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            Ok((status, body))
        }
    }
}
