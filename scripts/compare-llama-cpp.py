#!/usr/bin/env python3
"""waste against llama.cpp on the GGUF presets people download.

For each preset (Q2_K ... Q8_0, IQ4_XS, Q4_0, and the IQ1/IQ2/IQ3 presets)
this quantizes one source GGUF with llama.cpp's own quantizer
(`llama_model_quantize`, through llama-cpp-python; the IQ1_*, IQ2_* and
IQ3_XXS presets, which refuse to run without an importance matrix, with a
uniform one: every column of every weight equally important), then on the
quantized file:

* `waste convert --experts native --backbone native` must succeed, and the
  store's expert bytes (`waste inspect --json`, record headers included)
  are compared with the file's expert tensor bytes (goal <= 1.05x);
* the logits of `waste forward --model FILE.gguf` and of `waste forward` on
  the native store are compared, position by position, with llama.cpp's
  (`logits_all`, F32 KV cache, raw token ids): relative error
  ||w - l|| / ||l|| and top-1 agreement (file, store);
* llama.cpp's own activation-rounding noise is measured the same way: the
  file's weights are dequantized by gguf-py into an F32 GGUF and llama.cpp
  runs that too (its F32 path rounds nothing): llama.cpp's quantized run
  against it is the noise. waste computes the types with an integer kernel
  with 8-bit activations as llama.cpp does (the backbone from the file,
  backbone and experts from the store: a file's experts are exact f32), the
  others exactly; an F32 file must agree within 1e-4.

The default source is a random `qwen3moe` (hidden 256, so every preset's
k-quants apply) carrying the byte-level BPE tokenizer of
../shared/fixtures/gguf/qwen3_moe_tiny.f32.gguf so llama.cpp loads it;
`--family deepseek2` makes a random DeepSeek-V3-shaped one instead (MLA
with q and kv latents, sigmoid group routing with a correction bias, a
shared expert, one dense layer in front; written by
make-deepseek2-gguf.py with the attention's kv_b split per head as
llama.cpp's converter does); `--source FILE.gguf` takes any F32/F16/BF16
GGUF. A benchmark and
test reference only: llama-cpp-python is never a dependency of waste.

Usage: compare-llama-cpp.py --waste target/release/waste --work DIR
       [--family qwen3moe|deepseek2 | --source FILE.gguf] [--presets Q4_K_M,Q8_0]
       [--json OUT.json]
(needs llama-cpp-python, gguf==0.17.1 and numpy; waste's safetensors
output is read by hand).
"""

import argparse
import ctypes
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants

PRESETS = [
    "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS", "Q4_0",
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ4_NL",
]
FIXTURE_TOKENIZER = (
    pathlib.Path(__file__).resolve().parent.parent.parent
    / "shared/fixtures/gguf/qwen3_moe_tiny.f32.gguf"
)
# 12 positions of token ids below every vocabulary used here.
TOKENS = [0, 17, 345, 2, 999, 64, 128, 700, 5, 512, 33, 256]
# Presets whose types llama.cpp quantizes only with an importance matrix.
NEEDS_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS"}
QUIET = {**os.environ, "RUST_LOG": "warn"}


def field_value(f):
    """A reader field as GGUFWriter.add_key_value takes it."""
    return f.contents(), f.types[0], (f.types[1] if len(f.types) > 1 else None)


def copy_kv(r: GGUFReader, w: GGUFWriter) -> None:
    """Every key-value pair but the header's and the architecture (the
    writer's constructor sets that one)."""
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        val, vtype, sub = field_value(f)
        w.add_key_value(k, val, vtype, sub)


def build_source(out: pathlib.Path) -> None:
    """A random 2-layer qwen3moe in F32 with the fixture's tokenizer."""
    tok = GGUFReader(FIXTURE_TOKENIZER)
    vocab = len(tok.fields["tokenizer.ggml.tokens"].contents())
    hidden, heads, kv, hd, experts, top_k, ff, layers = 256, 4, 2, 64, 8, 2, 512, 2
    rng = np.random.default_rng(20261203)

    def g(shape, s):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    w = GGUFWriter(out, "qwen3moe")
    w.add_name("compare-llama-cpp")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(experts)
    w.add_expert_used_count(top_k)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_expert_feed_forward_length(ff)
    w.add_file_type(0)
    for k, f in tok.fields.items():
        if k.startswith("tokenizer."):
            val, vtype, sub = field_value(f)
            w.add_key_value(k, val, vtype, sub)
    w.add_tensor("token_embd.weight", g((vocab, hidden), 1.0))
    w.add_tensor("output_norm.weight", 1.0 + g((hidden,), 0.1))
    w.add_tensor("output.weight", g((vocab, hidden), hidden**-0.5))
    for i in range(layers):
        b = f"blk.{i}."
        s = hidden**-0.5
        w.add_tensor(b + "attn_norm.weight", 1.0 + g((hidden,), 0.1))
        w.add_tensor(b + "attn_q.weight", g((heads * hd, hidden), s))
        w.add_tensor(b + "attn_k.weight", g((kv * hd, hidden), s))
        w.add_tensor(b + "attn_v.weight", g((kv * hd, hidden), s))
        w.add_tensor(b + "attn_output.weight", g((hidden, heads * hd), (heads * hd) ** -0.5))
        w.add_tensor(b + "attn_q_norm.weight", 1.0 + g((hd,), 0.1))
        w.add_tensor(b + "attn_k_norm.weight", 1.0 + g((hd,), 0.1))
        w.add_tensor(b + "ffn_norm.weight", 1.0 + g((hidden,), 0.1))
        w.add_tensor(b + "ffn_gate_inp.weight", g((experts, hidden), 1.0))
        w.add_tensor(b + "ffn_gate_exps.weight", g((experts, ff, hidden), s))
        w.add_tensor(b + "ffn_up_exps.weight", g((experts, ff, hidden), s))
        w.add_tensor(b + "ffn_down_exps.weight", g((experts, hidden, ff), ff**-0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_copy(src: pathlib.Path, out: pathlib.Path) -> None:
    """`src` with every quantized tensor widened to F32 by gguf-py."""
    r = GGUFReader(src)
    w = GGUFWriter(out, r.fields["general.architecture"].contents())
    copy_kv(r, w)
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # numpy order
        data = quants.dequantize(t.data, t.tensor_type)
        w.add_tensor(t.name, np.ascontiguousarray(data.reshape(shape), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_deepseek2_source(out: pathlib.Path) -> None:
    """A random 3-layer DeepSeek-V3-shaped model in F32 (one dense layer,
    two MoE layers) with the fixture's tokenizer, in llama.cpp's deepseek2
    layout."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_deepseek2_gguf", pathlib.Path(__file__).with_name("make-deepseek2-gguf.py"))
    ds2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ds2)
    tok = GGUFReader(FIXTURE_TOKENIZER)
    vocab = len(tok.fields["tokenizer.ggml.tokens"].contents())
    hidden, heads, nope, rope, v, q_lora, kv_lora = 256, 4, 32, 32, 32, 256, 256
    experts, inter, moe_inter, layers = 8, 512, 256, 3
    c = {
        "hidden_size": hidden, "intermediate_size": inter, "moe_intermediate_size": moe_inter,
        "num_attention_heads": heads, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
        "v_head_dim": v, "q_lora_rank": q_lora, "kv_lora_rank": kv_lora,
        "num_hidden_layers": layers, "first_k_dense_replace": 1, "n_routed_experts": experts,
        "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "n_shared_experts": 1,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "vocab_size": vocab,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 1024, "beta_fast": 32.0,
                            "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "bos_token_id": int(tok.fields["tokenizer.ggml.bos_token_id"].contents()),
        "eos_token_id": int(tok.fields["tokenizer.ggml.eos_token_id"].contents()),
    }
    rng = np.random.default_rng(20261203)

    def g(shape, s):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    def norm(n):
        return 1.0 + g((n,), 0.1)

    t = {
        "model.embed_tokens.weight": g((vocab, hidden), 1.0),
        "model.norm.weight": norm(hidden),
        "lm_head.weight": g((vocab, hidden), hidden**-0.5),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {
            p + "input_layernorm.weight": norm(hidden),
            p + "post_attention_layernorm.weight": norm(hidden),
            p + "self_attn.q_a_proj.weight": g((q_lora, hidden), hidden**-0.5),
            p + "self_attn.q_a_layernorm.weight": norm(q_lora),
            p + "self_attn.q_b_proj.weight": g((heads * (nope + rope), q_lora), q_lora**-0.5),
            p + "self_attn.kv_a_proj_with_mqa.weight": g((kv_lora + rope, hidden), hidden**-0.5),
            p + "self_attn.kv_a_layernorm.weight": norm(kv_lora),
            p + "self_attn.kv_b_proj.weight": g((heads * (nope + v), kv_lora), kv_lora**-0.5),
            p + "self_attn.o_proj.weight": g((hidden, heads * v), (heads * v) ** -0.5),
        }
        ffn = [("mlp.", inter)] if i < c["first_k_dense_replace"] else [("mlp.shared_experts.", moe_inter)] + [
            (f"mlp.experts.{e}.", moe_inter) for e in range(experts)]
        for prefix, n in ffn:
            t |= {
                p + prefix + "gate_proj.weight": g((n, hidden), hidden**-0.5),
                p + prefix + "up_proj.weight": g((n, hidden), hidden**-0.5),
                p + prefix + "down_proj.weight": g((hidden, n), n**-0.5),
            }
        if i >= c["first_k_dense_replace"]:
            # Router logits of unit scale: larger ones saturate the sigmoid
            # to ties at 1.0, where rounding noise alone picks the experts.
            t[p + "mlp.gate.weight"] = g((experts, hidden), hidden**-0.5)
            t[p + "mlp.gate.e_score_correction_bias"] = g((experts,), 0.1)
    kv = [(k, *field_value(f)) for k, f in tok.fields.items()
          if k.startswith("tokenizer.") and not k.endswith(("bos_token_id", "eos_token_id"))]
    ds2.write(c, t, out, "--split-kv-b", "compare-llama-cpp-deepseek2", kv)


def uniform_imatrix(src: pathlib.Path):
    """llama.cpp's importance-matrix entries for every weight of `src`: ones,
    one per column of each row (per expert for stacked experts), as its C
    API takes them (an array ended by a null name). The arrays stay
    referenced by the returned tuple while llama.cpp reads them."""
    import llama_cpp

    names, values = [], []
    for t in GGUFReader(src).tensors:
        ne = [int(d) for d in t.shape]  # ggml order: ne[0] is the row length
        if len(ne) < 2:
            continue
        n = ne[0] * (ne[2] if len(ne) > 2 else 1)
        names.append(t.name.encode())
        values.append((ctypes.c_float * n)(*([1.0] * n)))
    entries = (llama_cpp.llama_model_imatrix_data * (len(names) + 1))()
    for e, name, v in zip(entries, names, values):
        e.name = name
        e.data = ctypes.cast(v, ctypes.POINTER(ctypes.c_float))
        e.size = len(v)
    return entries, names, values


def quantize(src: pathlib.Path, out: pathlib.Path, preset: str) -> None:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{preset}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    if preset in NEEDS_IMATRIX:
        imatrix = uniform_imatrix(src)
        params.imatrix = ctypes.cast(imatrix[0], ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {preset}: {rc}")


def llama_logits(path: pathlib.Path) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(path),
        logits_all=True,
        n_ctx=64,
        n_batch=64,
        n_threads=2,
        verbose=False,
        type_k=0,
        type_v=0,
    )
    llm.reset()
    llm.eval(TOKENS)
    return np.array(llm.scores[: len(TOKENS)], dtype=np.float32)


def read_logits(path: pathlib.Path) -> np.ndarray:
    """The `logits` tensor of waste forward's safetensors output."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    t = header["logits"]
    a, b = t["data_offsets"]
    assert t["dtype"] == "F32"
    return np.frombuffer(raw[8 + n + a : 8 + n + b], dtype="<f4").reshape(t["shape"])


def waste_logits(waste: str, model: pathlib.Path, out: pathlib.Path) -> np.ndarray:
    subprocess.run(
        [waste, "forward", "--model", str(model), "--tokens", ",".join(map(str, TOKENS)), "--out", str(out)],
        check=True,
        env=QUIET,
    )
    return read_logits(out)


def rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-position ||a - b|| / ||b||."""
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


def expert_bytes(path: pathlib.Path) -> int:
    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors if "_exps." in t.name)


def types_of(path: pathlib.Path) -> str:
    seen = {}
    for t in GGUFReader(path).tensors:
        seen[t.tensor_type.name] = seen.get(t.tensor_type.name, 0) + 1
    return ",".join(f"{k}x{v}" for k, v in sorted(seen.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waste", required=True)
    ap.add_argument("--work", required=True, type=pathlib.Path)
    ap.add_argument("--source", type=pathlib.Path)
    ap.add_argument("--family", choices=["qwen3moe", "deepseek2"], default="qwen3moe")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    src = a.source or a.work / f"source.{a.family}.f32.gguf"
    if a.source is None and not src.exists():
        {"qwen3moe": build_source, "deepseek2": build_deepseek2_source}[a.family](src)

    rows = []
    base_w = waste_logits(a.waste, src, a.work / "source.logits.safetensors")
    base_l = llama_logits(src)
    rows.append(
        {
            "preset": "source",
            "types": types_of(src),
            "waste_vs_llama_max": float(rel(base_w, base_l).max()),
            "top1": int((base_w.argmax(-1) == base_l.argmax(-1)).sum()),
        }
    )
    for preset in a.presets.split(","):
        q = a.work / f"{preset}.gguf"
        quantize(src, q, preset)
        deq = a.work / f"{preset}.deq.gguf"
        dequantized_copy(q, deq)
        store = a.work / f"{preset}.store"
        shutil.rmtree(store, ignore_errors=True)  # a previous run's
        subprocess.run(
            [a.waste, "convert", str(q), str(store), "--experts", "native", "--backbone", "native"],
            check=True,
            capture_output=True,
        )
        rep = json.loads(
            subprocess.run(
                [a.waste, "inspect", "--json", str(store)], check=True, capture_output=True
            ).stdout
        )
        w = waste_logits(a.waste, q, a.work / f"{preset}.logits.safetensors")
        ws = waste_logits(a.waste, store, a.work / f"{preset}.store.logits.safetensors")
        lq = llama_logits(q)
        ld = llama_logits(deq)
        rows.append(
            {
                "preset": preset,
                "types": types_of(q),
                "expert_bytes_ratio": rep["experts"]["bytes"] / expert_bytes(q),
                "waste_vs_llama_max": float(rel(w, lq).max()),
                "llama_noise_max": float(rel(lq, ld).max()),
                "waste_vs_dequant_max": float(rel(w, ld).max()),
                "store_vs_file_max": float(rel(ws, w).max()),
                "store_vs_llama_max": float(rel(ws, lq).max()),
                "store_top1": int((ws.argmax(-1) == lq.argmax(-1)).sum()),
                "top1": int((w.argmax(-1) == lq.argmax(-1)).sum()),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'preset':8} {'experts x':>9} {'file/llama':>10} {'store/llama':>11} {'llama noise':>11} {'file/deq':>9} {'top-1':>11}  types")
    for r in rows:
        nan = float("nan")
        print(
            f"{r['preset']:8} {r.get('expert_bytes_ratio', nan):9.4f} "
            f"{r['waste_vs_llama_max']:10.2e} {r.get('store_vs_llama_max', nan):11.2e} "
            f"{r.get('llama_noise_max', nan):11.2e} {r.get('waste_vs_dequant_max', nan):9.2e} "
            f"{r['top1']:3d},{r.get('store_top1', r['top1']):3d}/{len(TOKENS)}  {r['types']}"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())
