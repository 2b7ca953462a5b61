//! The node's OpenAI-compatible HTTP API driven by the official Python
//! `openai` client (`tests/python/openai_api.py`, installed by `.ci/run`)
//! against a node on a native-expert fixture store: streamed and
//! non-streamed chat, usage, a stop string, seeded sampling, logprobs, JSON
//! mode, the legacy endpoint, 400s in OpenAI's error shape, and `/metrics`
//! read by the Prometheus client's own parser. Then the bearer token, and
//! routes and model names: `/v1/models/{id}`, aliases, OpenAI-shaped 404 and
//! 405 for anything unrouted while gRPC keeps working on the same port.

use std::process::Command;

use anyhow::{Context, Result};
use serde_json::json;
use waste_e2e::harness::{chat_node, chat_node_with};
use waste_e2e::http;
use waste_proto::node::v1 as pb;

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
    let get = |path: &'static str, auth: Option<&'static str>| {
        http::request(node.addr, "GET", path, None, auth)
    };
    assert_eq!(get("/health", None).await?.status, 200);
    let reply = get("/v1/models", None).await?;
    assert_eq!(reply.status, 401, "{}", reply.body);
    assert_eq!(reply.json()?["error"]["code"], "invalid_api_key");
    assert_eq!(get("/v1/models", Some("Bearer wrong")).await?.status, 401);
    assert_eq!(get("/v1/models", Some("Basic s3cret")).await?.status, 401);
    assert_eq!(get("/v1/models", Some("Bearer ")).await?.status, 401);
    // RFC 7235: the scheme is case-insensitive; the token is not.
    for ok in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        assert_eq!(get("/v1/models", Some(ok)).await?.status, 200, "{ok}");
    }
    assert_eq!(get("/v1/models", Some("Bearer S3CRET")).await?.status, 401);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_and_model_names_answer_as_openai_clients_expect() -> Result<()> {
    let (node, _dir) = chat_node_with("mixtral_tiny", |cfg, _| {
        cfg.model_name = vec!["tiny".into(), "org/tiny-alias".into()];
    })
    .await?;
    let addr = node.addr;

    // The model, by its id and by an alias; the id is the one Info reports.
    let info = node
        .client()
        .await?
        .info(pb::InfoRequest {})
        .await?
        .into_inner();
    assert_eq!(info.model_id, "tiny");
    let list = http::get(addr, "/v1/models").await?.json()?;
    assert_eq!(list["data"][0]["id"], "tiny", "{list}");
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");
    for id in ["tiny", "org/tiny-alias"] {
        let reply = http::get(addr, &format!("/v1/models/{id}")).await?;
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        let m = reply.json()?;
        assert_eq!(
            (m["id"].as_str(), m["object"].as_str()),
            (Some(id), Some("model"))
        );
    }
    let reply = http::get(addr, "/v1/models/gpt-4").await?;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.json()?["error"]["code"], "model_not_found");

    // A generation naming another model is refused; an alias is served.
    let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let reply = http::post(addr, "/v1/chat/completions", &chat("gpt-4")).await?;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let e = &reply.json()?["error"];
    assert_eq!(
        (e["code"].as_str(), e["param"].as_str()),
        (Some("model_not_found"), Some("model"))
    );
    let body = json!({"model": "gpt-4", "prompt": "hi", "max_tokens": 2});
    assert_eq!(
        http::post(addr, "/v1/completions", &body).await?.status,
        404
    );
    let reply = http::post(addr, "/v1/chat/completions", &chat("org/tiny-alias")).await?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()?["model"], "tiny");

    // Anything unrouted: OpenAI's error object, 404 or 405.
    for (method, path, status) in [
        ("GET", "/", 404),
        ("POST", "/v1/embeddings", 404),
        ("GET", "/v1/nothing", 404),
        ("GET", "/v1/chat/completions", 405),
        ("DELETE", "/v1/models", 405),
    ] {
        let reply = http::request(addr, method, path, None, None).await?;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        let e = &reply.json()?["error"];
        assert!(e["message"].is_string(), "{method} {path}: {}", reply.body);
    }
    // gRPC still rides on the same router.
    node.client().await?.info(pb::InfoRequest {}).await?;
    Ok(())
}
