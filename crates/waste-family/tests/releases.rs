//! The synthetic releases the registry declares: unique `--like` names, in
//! the order the CLI lists them, and each family's tensor list consistent
//! with its own config.json and with the registry's routed-expert names.

use waste_family::release::{Like, Options, build};
use waste_family::{by_model_type, expert_projection, is_moe_block};

fn options(like: Like) -> Options {
    Options {
        like,
        layers: Some(3),
        experts: Some(4),
        vocab: Some(64),
        bf16: false,
        seed: 0,
    }
}

#[test]
fn like_names_are_unique_and_parse_back() {
    let names: Vec<&str> = Like::all().map(Like::name).collect();
    assert_eq!(
        names,
        [
            "deepseek-v3",
            "kimi-k2",
            "kimi-k2-thinking",
            "qwen3-30b-a3b",
            "kimi-k3"
        ]
    );
    for like in Like::all() {
        assert_eq!(like.name().parse::<Like>(), Ok(like));
    }
    let err = "gpt-5".parse::<Like>().unwrap_err();
    assert!(err.contains("deepseek-v3, kimi-k2"), "{err}");
}

#[test]
fn each_release_has_its_config_layers_and_registered_expert_names() {
    for like in Like::all() {
        let (config, tensors) = build(&options(like));
        let model_type = config["model_type"].as_str().unwrap();
        assert_eq!(model_type, like.release().model_type);
        let family = by_model_type(model_type).expect("a registered model type");
        let text = config.get("text_config").unwrap_or(&config);
        assert_eq!(text["num_hidden_layers"], 3, "{}", like.name());
        let experts: Vec<&str> = tensors
            .iter()
            .filter_map(|t| t.name.split_once(".experts."))
            .filter(|(a, _)| !a.ends_with("shared"))
            .map(|(a, _)| a.rsplit('.').next().unwrap())
            .collect();
        assert!(!experts.is_empty(), "{}", like.name());
        for block in experts {
            assert!(is_moe_block(block), "{block}");
            assert_eq!(block, family.moe.block, "{}", like.name());
        }
        for t in &tensors {
            if let Some((_, rest)) = t.name.split_once(".experts.0.") {
                let proj = rest.split('.').next().unwrap();
                assert!(expert_projection(proj).is_some(), "{}", t.name);
            }
        }
    }
}
