#!/usr/bin/env python3
"""Writes a DeepSeek-V3 / Kimi-K2 Hugging Face folder (bf16 or f32
safetensors, e.g. shared/fixtures/deepseek_v3_tiny) as an f32 GGUF of
llama.cpp's `deepseek2` architecture, laid out as llama.cpp's
convert_hf_to_gguf.py (class DeepseekV2Model) writes it, with gguf-py's own
writer: the test input for waste's `deepseek2` reader.

What it mirrors from the converter:
- metadata: `deepseek2.*` keys (head_count_kv 1: MLA is stored as MQA;
  key_length = kv_lora_rank + qk_rope_head_dim, value_length = kv_lora_rank,
  the per-head sizes in key_length_mla / value_length_mla), MoE keys
  (expert_count, expert_used_count, expert_shared_count,
  expert_feed_forward_length, leading_dense_block_count,
  expert_weights_scale, expert_weights_norm, expert_gating_func 2 = sigmoid,
  expert_group_count / expert_group_used_count), YaRN keys (type, factor,
  original_context_length, yarn_beta_fast / yarn_beta_slow, and
  yarn_log_multiplier = 0.1 * mscale_all_dim, the converter's legacy
  convention), bos / eos ids;
- tensors: llama.cpp names, routed experts stacked into 3-D
  `ffn_{gate,up,down}_exps` [n_expert, out, in], `e_score_correction_bias`
  as `exp_probs_b.bias`, no row permutation (deepseek2 ropes adjacent pairs,
  as DeepSeek's interleaved rope does);
- MLA's kv_b_proj [n_head * (nope + v), kv_lora], in either form:
  `--kv-b`: as is, `attn_kv_b` (converters before llama.cpp's MLA
  absorption); `--split-kv-b`: per head, the first `nope` rows transposed
  into `attn_k_b` [n_head, kv_lora, nope] and the other `v` rows as
  `attn_v_b` [n_head, v, kv_lora] (newer converters).

Usage: make-deepseek2-gguf.py HF_DIR OUT.gguf (--kv-b | --split-kv-b)
(pinned: gguf==0.17.1 numpy==2.4.6, see scripts/test-env.sh).
"""

import json
import pathlib
import struct
import sys

import numpy as np
from gguf import ExpertGatingFuncType, GGUFWriter, RopeScalingType


def read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
    """Every tensor as float32 (bf16 widened exactly)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        buf = data[start:end]
        if t["dtype"] == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        elif t["dtype"] == "F32":
            values = np.frombuffer(buf, dtype="<f4")
        else:
            raise SystemExit(f"{path}: {name}: dtype {t['dtype']} not handled")
        out[name] = values.reshape(t["shape"]).astype(np.float32)
    return out


def main() -> None:
    hf, out, form = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if form not in ("--kv-b", "--split-kv-b"):
        raise SystemExit(f"unknown form {form}")
    c = json.loads((hf / "config.json").read_text())
    tensors = {}
    # model.safetensors or its shards (not goldens.safetensors).
    for f in sorted(hf.glob("model*.safetensors")):
        tensors.update(read_safetensors(f))
    write(c, tensors, out, form, hf.name)


def write(c: dict, tensors: dict, out, form: str, name: str, kv=()) -> None:
    """`tensors` (Hugging Face names, float32) of config `c` as a deepseek2
    GGUF at `out`; `kv` adds (key, value, type, sub-type) fields, e.g. a
    tokenizer's."""
    rope = c.get("rope_scaling") or c.get("rope_parameters") or {}
    a = "deepseek2"
    w = GGUFWriter(out, a)
    w.add_name(name)
    for key, val, vtype, sub in kv:
        w.add_key_value(key, val, vtype, sub)
    w.add_file_type(0)  # ALL_F32
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(1)
    w.add_rope_freq_base(rope.get("rope_theta", c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_uint32(f"{a}.expert_group_count", c["n_group"])
    w.add_uint32(f"{a}.expert_group_used_count", c["topk_group"])
    gating = ExpertGatingFuncType.SIGMOID if c.get("scoring_func", "sigmoid") == "sigmoid" else ExpertGatingFuncType.SOFTMAX
    w.add_expert_gating_func(gating)
    w.add_leading_dense_block_count(c["first_k_dense_replace"])
    w.add_vocab_size(c["vocab_size"])
    if c.get("q_lora_rank") is not None:
        w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(c["kv_lora_rank"])
    w.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
    w.add_value_length(c["kv_lora_rank"])
    w.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
    w.add_value_length_mla(c["v_head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_shared_count(c["n_shared_experts"])
    w.add_expert_weights_scale(c["routed_scaling_factor"])
    if c.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(c["qk_rope_head_dim"])
    if rope.get("rope_type", rope.get("type")) == "yarn":
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key in ("beta_fast", "beta_slow"):
            if key in rope:
                w.add_float32(f"{a}.rope.scaling.yarn_{key}", rope[key])
        w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])

    def add(name: str, t: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))

    add("token_embd.weight", tensors["model.embed_tokens.weight"])
    add("output_norm.weight", tensors["model.norm.weight"])
    if "lm_head.weight" in tensors and not c.get("tie_word_embeddings"):
        add("output.weight", tensors["lm_head.weight"])
    heads, nope, v = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"]
    for i in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        same = {
            "input_layernorm": "attn_norm",
            "post_attention_layernorm": "ffn_norm",
            "self_attn.q_proj": "attn_q",
            "self_attn.q_a_proj": "attn_q_a",
            "self_attn.q_a_layernorm": "attn_q_a_norm",
            "self_attn.q_b_proj": "attn_q_b",
            "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
            "self_attn.kv_a_layernorm": "attn_kv_a_norm",
            "self_attn.o_proj": "attn_output",
            "mlp.gate_proj": "ffn_gate",
            "mlp.up_proj": "ffn_up",
            "mlp.down_proj": "ffn_down",
            "mlp.gate": "ffn_gate_inp",
            "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
            "mlp.shared_experts.up_proj": "ffn_up_shexp",
            "mlp.shared_experts.down_proj": "ffn_down_shexp",
        }
        for hf_name, gguf_name in same.items():
            if p + hf_name + ".weight" in tensors:
                add(b + gguf_name + ".weight", tensors[p + hf_name + ".weight"])
        bias = p + "mlp.gate.e_score_correction_bias"
        if bias in tensors:
            add(b + "exp_probs_b.bias", tensors[bias])
        kv_b = tensors[p + "self_attn.kv_b_proj.weight"]
        if form == "--kv-b":
            add(b + "attn_kv_b.weight", kv_b)
        else:
            per_head = kv_b.reshape(heads, nope + v, kv_b.shape[-1])
            add(b + "attn_k_b.weight", per_head[:, :nope, :].transpose(0, 2, 1))
            add(b + "attn_v_b.weight", per_head[:, nope:, :])
        if f"{p}mlp.experts.0.gate_proj.weight" in tensors:
            for proj, gguf_name in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
                stacked = np.stack(
                    [tensors[f"{p}mlp.experts.{e}.{proj}.weight"] for e in range(c["n_routed_experts"])]
                )
                add(b + gguf_name + ".weight", stacked)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
