//! Every bound `node.proto` documents on a request is enforced, on gRPC
//! (INVALID_ARGUMENT naming the field) and on HTTP (400 with OpenAI's error
//! object, `param` set), from one table written here from the proto's
//! comments; the node's own table (`waste_node::limits::LIMITS`) must list
//! exactly these fields, so a limit added there without a case here fails.
//! Also: an undecodable message is INVALID_ARGUMENT, template variables
//! reach the chat template, and a request without `max_tokens` generates the
//! node's `default_max_tokens`.

use std::collections::BTreeSet;

use anyhow::Result;
use serde_json::{Value, json};
use waste_e2e::harness::{chat_node_with, generate};
use waste_e2e::http;
use waste_proto::Code;
use waste_proto::node::v1 as pb;
use waste_proto::tonic;

/// The fixture's vocabulary (`mixtral_tiny`: 1024 ids).
const VOCAB: u32 = 1024;
/// The node's default_max_tokens in this test.
const DEFAULT_MAX: u32 = 5;

fn base() -> pb::GenerateRequest {
    pb::GenerateRequest {
        input: Some(pb::generate_request::Input::TokenIds(pb::TokenIds {
            ids: vec![1, 2, 3],
        })),
        sampling: Some(pb::SamplingOptions {
            max_tokens: 2,
            temperature: Some(0.0),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn chat(messages: &[(&str, &str)], kwargs: &str) -> pb::Chat {
    pb::Chat {
        messages: messages
            .iter()
            .map(|(role, content)| pb::ChatMessage {
                role: role.to_string(),
                content: content.to_string(),
            })
            .collect(),
        continue_final_message: false,
        template_kwargs_json: kwargs.to_string(),
    }
}

fn sampling(edit: impl FnOnce(&mut pb::SamplingOptions)) -> pb::GenerateRequest {
    let mut r = base();
    edit(r.sampling.as_mut().expect("base has sampling"));
    r
}

/// One out-of-bounds request: the proto field, the gRPC request, and the
/// HTTP endpoint, body and `param` (None where HTTP has no such field).
struct Case {
    field: &'static str,
    grpc: pb::GenerateRequest,
    http: Option<(&'static str, Value, &'static str)>,
}

fn cases() -> Vec<Case> {
    let user = [("user", "hi")];
    let chat_body = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().expect("an object") {
            b[k] = v.clone();
        }
        ("/v1/chat/completions", b, "")
    };
    let with_param = |(path, body, _): (&'static str, Value, &str), param| (path, body, param);
    let seventeen: Vec<String> = (0..17).map(|i| format!("s{i}")).collect();
    let long_stop = "x".repeat(257);
    let long_session = "s".repeat(129);
    vec![
        Case {
            field: "input",
            grpc: pb::GenerateRequest {
                input: None,
                ..base()
            },
            http: None,
        },
        Case {
            field: "messages.messages",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::Messages(chat(&[], ""))),
                ..base()
            },
            http: Some((
                "/v1/chat/completions",
                json!({"messages": [], "max_tokens": 2}),
                "messages",
            )),
        },
        Case {
            field: "messages.template_kwargs_json",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::Messages(chat(&user, "[1, 2]"))),
                ..base()
            },
            http: Some(with_param(
                chat_body(json!({"chat_template_kwargs": [1, 2]})),
                "chat_template_kwargs",
            )),
        },
        Case {
            field: "messages.template_kwargs_json",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::Messages(chat(
                    &user,
                    "{not json",
                ))),
                ..base()
            },
            http: Some(with_param(
                chat_body(json!({"chat_template_kwargs": "enable_thinking"})),
                "chat_template_kwargs",
            )),
        },
        Case {
            field: "messages.template_kwargs_json",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::Messages(chat(
                    &user,
                    &json!({"k": "v".repeat(64 << 10)}).to_string(),
                ))),
                ..base()
            },
            http: Some(with_param(
                chat_body(json!({"chat_template_kwargs": {"k": "v".repeat(64 << 10)}})),
                "chat_template_kwargs",
            )),
        },
        Case {
            field: "token_ids.ids",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::TokenIds(pb::TokenIds {
                    ids: vec![],
                })),
                ..base()
            },
            http: None,
        },
        Case {
            field: "token_ids.ids",
            grpc: pb::GenerateRequest {
                input: Some(pb::generate_request::Input::TokenIds(pb::TokenIds {
                    ids: vec![1, VOCAB],
                })),
                ..base()
            },
            http: Some((
                "/v1/completions",
                json!({"prompt": [1, VOCAB], "max_tokens": 2}),
                "prompt",
            )),
        },
        Case {
            field: "sampling.temperature",
            grpc: sampling(|s| s.temperature = Some(100.5)),
            http: Some(with_param(
                chat_body(json!({"temperature": 100.5})),
                "temperature",
            )),
        },
        Case {
            field: "sampling.temperature",
            grpc: sampling(|s| s.temperature = Some(-0.5)),
            http: Some(with_param(
                chat_body(json!({"temperature": -0.5})),
                "temperature",
            )),
        },
        Case {
            field: "sampling.top_p",
            grpc: sampling(|s| s.top_p = Some(0.0)),
            http: Some(with_param(chat_body(json!({"top_p": 1.5})), "top_p")),
        },
        Case {
            field: "sampling.min_p",
            grpc: sampling(|s| s.min_p = 1.5),
            http: Some(with_param(chat_body(json!({"min_p": -0.1})), "min_p")),
        },
        Case {
            field: "sampling.repetition_penalty",
            grpc: sampling(|s| s.repetition_penalty = Some(50.0)),
            http: Some(with_param(
                chat_body(json!({"repetition_penalty": 0.0})),
                "repetition_penalty",
            )),
        },
        Case {
            field: "sampling.presence_penalty",
            grpc: sampling(|s| s.presence_penalty = 2.5),
            http: Some(with_param(
                chat_body(json!({"presence_penalty": -2.5})),
                "presence_penalty",
            )),
        },
        Case {
            field: "sampling.frequency_penalty",
            grpc: sampling(|s| s.frequency_penalty = -2.5),
            http: Some(with_param(
                chat_body(json!({"frequency_penalty": 2.5})),
                "frequency_penalty",
            )),
        },
        Case {
            field: "sampling.stop",
            grpc: sampling(|s| s.stop.clone_from(&seventeen)),
            http: Some(with_param(chat_body(json!({"stop": seventeen})), "stop")),
        },
        Case {
            field: "sampling.stop",
            grpc: sampling(|s| s.stop = vec![long_stop.clone()]),
            http: Some(with_param(chat_body(json!({"stop": long_stop})), "stop")),
        },
        Case {
            field: "sampling.stop_token_ids",
            grpc: sampling(|s| s.stop_token_ids = vec![7; 65]),
            http: Some(with_param(
                chat_body(json!({"stop_token_ids": vec![7; 65]})),
                "stop_token_ids",
            )),
        },
        Case {
            field: "sampling.stop_token_ids",
            grpc: sampling(|s| s.stop_token_ids = vec![VOCAB]),
            http: Some(with_param(
                chat_body(json!({"stop_token_ids": [VOCAB]})),
                "stop_token_ids",
            )),
        },
        Case {
            field: "session_id",
            grpc: pb::GenerateRequest {
                session_id: Some(long_session.clone()),
                ..base()
            },
            http: Some(with_param(
                chat_body(json!({"session_id": long_session})),
                "session_id",
            )),
        },
        Case {
            field: "session_id",
            grpc: pb::GenerateRequest {
                session_id: Some(String::new()),
                ..base()
            },
            http: Some(with_param(
                chat_body(json!({"session_id": ""})),
                "session_id",
            )),
        },
    ]
}

/// A template that shows whether it saw `enable_thinking = false`.
const TEMPLATE: &str = "{% if enable_thinking is defined and not enable_thinking %}/no_think {% endif %}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_limit_is_enforced_on_grpc_and_http() -> Result<()> {
    let (node, _dir) = chat_node_with("mixtral_tiny", |cfg, tokenizer| {
        cfg.default_max_tokens = DEFAULT_MAX as usize;
        tokenizer["chat_template"] = TEMPLATE.into();
    })
    .await?;
    let mut client = node.client().await?;
    let cases = cases();

    // The table covers the node's limits, no more and no fewer.
    let listed: BTreeSet<&str> = waste_node::limits::LIMITS.iter().map(|l| l.field).collect();
    let tested: BTreeSet<&str> = cases.iter().map(|c| c.field).collect();
    assert_eq!(
        listed, tested,
        "limits without a case, or cases without a limit"
    );

    for case in cases {
        let err = client.generate(case.grpc.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}: {err}", case.field);
        assert!(
            err.message().contains(case.field),
            "{}: the message does not name the field: {}",
            case.field,
            err.message()
        );
        if let Some((path, body, param)) = case.http {
            let reply = http::post(node.addr, path, &body).await?;
            assert_eq!(reply.status, 400, "{}: {}", case.field, reply.body);
            let e = &reply.json()?["error"];
            assert_eq!(e["param"], param, "{}: {e}", case.field);
            assert_eq!(e["type"], "invalid_request_error", "{}", case.field);
        }
    }
    // Tokenize checks its input alike.
    for input in [
        None,
        Some(pb::tokenize_request::Input::Messages(chat(&[], ""))),
    ] {
        let err = client
            .tokenize(pb::TokenizeRequest {
                input,
                add_special_tokens: false,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    }
    let metrics = http::get(node.addr, "/metrics").await?.body;
    assert!(
        metrics
            .lines()
            .any(|l| l
                .starts_with("waste_node_requests_rejected_total{reason=\"invalid_argument\"}")),
        "{metrics}"
    );

    // Still serving, and the bounds themselves pass.
    let at_bounds = sampling(|s| {
        s.temperature = Some(100.0);
        s.repetition_penalty = Some(10.0);
        s.stop = (b'a'..b'a' + 16)
            .map(|c| char::from(c).to_string().repeat(256))
            .collect();
        s.stop_token_ids = vec![VOCAB - 1; 64];
    });
    let (_, _, stats) = generate(&mut client, at_bounds).await?;
    assert!(stats.generated_tokens > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_messages_are_invalid_argument() -> Result<()> {
    let (node, _dir) = chat_node_with("mixtral_tiny", |_, _| {}).await?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect()
        .await?;
    // `Stats` has a varint as field 1, where both requests have a string.
    let wrong = pb::Stats {
        finish_reason: 1,
        ..Default::default()
    };
    let path = |p: &'static str| tonic::codegen::http::uri::PathAndQuery::from_static(p);
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    let err = grpc
        .server_streaming(
            tonic::Request::new(wrong.clone()),
            path("/waste.node.v1.Node/Generate"),
            waste_proto::codec::NodeCodec::<pb::Stats, pb::GenerateResponse>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    grpc.ready().await?;
    let err = grpc
        .unary(
            tonic::Request::new(wrong),
            path("/waste.node.v1.Node/Tokenize"),
            waste_proto::codec::NodeCodec::<pb::Stats, pb::TokenizeResponse>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    // An unknown method of a served service is gRPC's UNIMPLEMENTED.
    grpc.ready().await?;
    let err = grpc
        .unary(
            tonic::Request::new(pb::InfoRequest {}),
            path("/waste.node.v1.Node/Nope"),
            waste_proto::codec::NodeCodec::<pb::InfoRequest, pb::InfoResponse>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_kwargs_reach_the_template_and_max_tokens_defaults() -> Result<()> {
    let (node, _dir) = chat_node_with("mixtral_tiny", |cfg, tokenizer| {
        cfg.default_max_tokens = DEFAULT_MAX as usize;
        tokenizer["chat_template"] = TEMPLATE.into();
    })
    .await?;
    let mut client = node.client().await?;
    let user = [("user", "hi")];
    let rendered = |kwargs: &'static str| {
        let mut client = client.clone();
        async move {
            let input = Some(pb::tokenize_request::Input::Messages(chat(&user, kwargs)));
            let t = client
                .tokenize(pb::TokenizeRequest {
                    input,
                    add_special_tokens: false,
                })
                .await?
                .into_inner();
            anyhow::Ok((t.rendered, t.token_ids.len()))
        }
    };
    let (plain, plain_len) = rendered("").await?;
    let (thinking_off, off_len) = rendered(r#"{"enable_thinking": false}"#).await?;
    assert_eq!(plain, "user: hi\nassistant: ");
    assert_eq!(thinking_off, "/no_think user: hi\nassistant: ");

    // HTTP's chat_template_kwargs: the prompt is the one Tokenize counts.
    let addr = node.addr;
    let prompt_tokens = |kwargs: Option<Value>| async move {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
        if let Some(k) = kwargs {
            body["chat_template_kwargs"] = k;
        }
        let reply = http::post(addr, "/v1/chat/completions", &body).await?;
        anyhow::ensure!(reply.status == 200, "{}", reply.body);
        Ok(reply.json()?["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap_or(0) as usize)
    };
    assert_eq!(prompt_tokens(None).await?, plain_len);
    assert_eq!(
        prompt_tokens(Some(json!({"enable_thinking": false}))).await?,
        off_len
    );

    // No max_tokens, or 0 (the same in proto3): the node's default, on
    // both front ends.
    let req = sampling(|s| {
        s.max_tokens = 0;
        s.ignore_eos = true;
    });
    let (_, _, stats) = generate(&mut client, req).await?;
    assert_eq!(stats.generated_tokens, DEFAULT_MAX);
    for max_tokens in [None, Some(0)] {
        let mut body = json!({"prompt": [1, 2, 3], "temperature": 0, "ignore_eos": true});
        if let Some(m) = max_tokens {
            body["max_tokens"] = json!(m);
        }
        let reply = http::post(addr, "/v1/completions", &body).await?;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json()?["usage"]["completion_tokens"],
            DEFAULT_MAX,
            "{}",
            reply.body
        );
    }
    Ok(())
}
