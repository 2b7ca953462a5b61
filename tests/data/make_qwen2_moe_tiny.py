#!/usr/bin/env python3
"""Writes tests/data/qwen2_moe_tiny: a random `qwen2_moe` checkpoint (Qwen1.5-MoE /
Qwen2-57B-A14B architecture: q/k/v projections with bias, drawn at random
rather than transformers' zeros; softmax top-k routing without
renormalisation; one shared expert scaled by its own sigmoid gate) and the
goldens transformers computes for it.

It is ../shared/fixtures/make_fixtures.py (the generator of every other fixture)
run on one more checkpoint spec, so the checkpoint, the seed search for routing
margins, the goldens and their verification are made exactly as for
qwen3_moe_tiny. Needs torch and transformers (versions in the goldens' meta);
run once by hand, not by the test command:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy
    /tmp/tv/bin/python tests/data/make_qwen2_moe_tiny.py
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1].parent / "shared" / "fixtures"))
import make_fixtures as mf  # noqa: E402

SPEC = dict(
    arch="qwen2_moe", seed=1004,
    config=dict(
        vocab_size=1024, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        shared_expert_intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, num_experts=16, num_experts_per_tok=4, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[], qkv_bias=True, max_position_embeddings=4096,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
        rms_norm_eps=1e-6, hidden_act="silu", use_sliding_window=False,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    ))

_arch_classes = mf.arch_classes


def qwen2_moe_model(cfg):
    """Qwen2MoeForCausalLM(cfg) with its q/k/v biases drawn like the weights:
    transformers initialises biases to zero, which would leave the bias path
    untested."""
    model = mf.transformers.Qwen2MoeForCausalLM(cfg)
    g = mf.torch.Generator().manual_seed(cfg.num_hidden_layers * 7919 + 2)
    with mf.torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("_proj.bias"):
                p.copy_(mf.INIT_RANGE * mf.torch.randn(p.shape, generator=g))
    return model


qwen2_moe_model.__name__ = "Qwen2MoeForCausalLM"


def arch_classes(arch):
    if arch == "qwen2_moe":
        return mf.transformers.Qwen2MoeConfig, qwen2_moe_model
    return _arch_classes(arch)


def main():
    mf.arch_classes = arch_classes
    mf.MIN_GAP["qwen2_moe"] = mf.MIN_GAP["qwen3_moe"]
    mf.WORK.mkdir(parents=True, exist_ok=True)
    mf.log("versions", mf.versions())
    mf.make_checkpoint_with_goldens(HERE, "qwen2_moe_tiny", SPEC)
    reports = [mf.verify_goldens(HERE / "qwen2_moe_tiny")]
    mf.log("VERIFY", reports)
    if not all(r.get("ok") for r in reports):
        sys.exit("verification failed")


if __name__ == "__main__":
    main()
