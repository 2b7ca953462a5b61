//! The Node API beyond Generate's happy path: sessions reuse their state for
//! the next turn (and give the tokens of a fresh run), a session is used by
//! one request at a time, Tokenize and Info answer, and bad requests get
//! INVALID_ARGUMENT while the node stays up.

use anyhow::Result;
use waste_format::Checkpoint;
use waste_kernels::Format;
use waste_proto::Code;
use waste_proto::node::v1 as pb;

use waste_e2e::harness::{RunningNode, generate, local_config, write_experts};
use waste_e2e::{Goldens, fixture};

/// The node's context: long enough that a generation of all of it
/// outlasts the test's next request.
const CTX: u32 = 4096;

fn request(prompt: &[u32], n: u32, session: Option<&str>) -> pb::GenerateRequest {
    pb::GenerateRequest {
        session_id: session.map(str::to_string),
        ..waste_e2e::harness::greedy_request(prompt, n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_tokenize_info_and_bad_requests() -> Result<()> {
    let dir = "mixtral_tiny";
    // A backbone folder: the fixture's weights and config plus the SmolLM2
    // tokenizer files (Tokenize does not need the vocabularies to agree).
    let backbone = tempfile::tempdir()?;
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::os::unix::fs::symlink(fixture(dir).join(f), backbone.path().join(f))?;
    }
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::os::unix::fs::symlink(fixture("tokenizer").join(f), backbone.path().join(f))?;
    }
    let experts = tempfile::tempdir()?;
    write_experts(&Checkpoint::open(fixture(dir))?, experts.path(), Format::Q8)?;
    let mut cfg = local_config(backbone.path().to_path_buf(), experts.path().to_path_buf());
    cfg.ctx_size = Some(CTX as usize);
    let node = RunningNode::start(cfg).await?;
    let mut client = node.client().await?;

    // Sessions: the second turn extends the first and reuses its state.
    let prompt = Goldens::open(dir)?.ids("input_ids/len7")?;
    let (first, _, s1) = generate(&mut client, request(&prompt, 6, Some("chat"))).await?;
    assert_eq!(s1.cached_prompt_tokens, 0);
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend([5, 6, 7]);
    let (second, _, s2) = generate(&mut client, request(&turn2, 6, Some("chat"))).await?;
    assert!(
        s2.cached_prompt_tokens >= prompt.len() as u32,
        "cached {}",
        s2.cached_prompt_tokens
    );
    let (fresh, _, s3) = generate(&mut client, request(&turn2, 6, None)).await?;
    assert_eq!(s3.cached_prompt_tokens, 0);
    assert_eq!(
        second, fresh,
        "reusing the session's state changed the tokens"
    );

    // One request per session at a time. The busy generation asks for the
    // whole context and is left unread on a client with a 1 KiB window: it
    // stalls once the node's queue and send buffer are full, rather than
    // finishing before the second request arrives.
    let longest = CTX - prompt.len() as u32 - 1;
    let mut busy = node
        .stalling_client(1024)
        .await?
        .generate(request(&prompt, longest, Some("busy")))
        .await?
        .into_inner();
    let _ = busy.message().await?;
    let err = client
        .clone()
        .generate(request(&prompt, 1, Some("busy")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err}");
    drop(busy); // the client leaves: the node stops that generation

    // Tokenize and Info.
    let t = client
        .tokenize(pb::TokenizeRequest {
            input: Some(pb::tokenize_request::Input::Text("Hello world".into())),
            add_special_tokens: false,
        })
        .await?
        .into_inner();
    assert!(!t.token_ids.is_empty() && t.token_ids.len() == t.tokens.len());
    let info = client.info(pb::InfoRequest {}).await?.into_inner();
    assert_eq!(info.architecture, "mixtral");
    assert_eq!(info.vocab_size, 1024);
    assert_eq!(info.context_size, CTX);
    assert_eq!(info.expert_mode, pb::ExpertMode::Local as i32);
    assert!(
        info.ram
            .is_some_and(|r| r.backbone_bytes > 0 && r.budget_bytes == 2 << 30)
    );

    // Bad requests: INVALID_ARGUMENT, and the node keeps serving.
    for bad in [
        request(&[], 4, None),
        request(&[5000], 4, None),
        request(&vec![3; CTX as usize + 1], 4, None),
    ] {
        let err = client.generate(bad).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    }
    let mut bad_sampling = request(&prompt, 4, None);
    bad_sampling.sampling.as_mut().unwrap().top_p = Some(7.0);
    assert_eq!(
        client.generate(bad_sampling).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let (again, _, _) = generate(&mut client, request(&prompt, 6, None)).await?;
    assert_eq!(again, first);
    Ok(())
}
