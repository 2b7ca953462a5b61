#!/usr/bin/env python3
"""Writes a small random `qwen3moe` GGUF whose routed-expert tensors are
stored in the ggml types given, with gguf-py's own writer: the test input
for `waste convert --experts native` keeping a GGUF's blocks as stored.

Shape: hidden 256, 4 heads of 64 (2 KV heads), 4 experts per layer (top-2)
of width 256, vocabulary 512, so every row is a whole number of blocks of
every type (256 weights for the k- and i-quants). TYPES (comma-separated
ggml names) are handed out in order to each layer's gate, up and down
expert tensors, three a layer, as many layers as that takes (the last
layer repeats its last type). The backbone is F32, or with `--backbone T`
every 2-D backbone tensor but the router in type T (one gguf-py can
quantize).

Expert blocks: F32, F16 and BF16 from Gaussian weights; types gguf-py can
quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0) quantized by it from
Gaussian weights; the others tiled from the blocks of
crates/waste-kernels/tests/data/ggml/<TYPE>.bin (scripts/gen-ggml-fixtures.py),
keeping only blocks whose reference decode is finite and within ±8, in a
seeded random order. Any sequence of valid blocks is a valid tensor.
gguf-py 0.17.1 has no MXFP4, so this script cannot write it.

Usage: make-qwen3moe-gguf.py OUT.gguf TYPES [--backbone TYPE]
(pinned: gguf==0.17.1 numpy==2.4.6, see scripts/test-env.sh).
"""

import pathlib
import struct
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import GGUFWriter, quants

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 256, 4, 2, 64
EXPERTS, TOP_K, EXPERT_FF, VOCAB = 4, 2, 256, 512
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "crates/waste-kernels/tests/data/ggml"
QUANTIZED_BY_GGUF_PY = {T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0}

rng = np.random.default_rng(20260421)


def gaussian(shape, scale=0.05) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def fixture_blocks(ty: T) -> np.ndarray:
    """The fixture's blocks whose reference values are finite and small."""
    raw = (FIXTURES / f"{ty.name}.bin").read_bytes()
    if raw[:8] != b"WGGMLFX1":
        raise SystemExit(f"{ty.name}.bin: not a waste ggml fixture")
    tid, n, size, qk = struct.unpack("<4I", raw[8:24])
    if (tid, (qk, size)) != (ty.value, GGML_QUANT_SIZES[ty]):
        raise SystemExit(f"{ty.name}.bin: type {tid} {qk}/{size} is not {ty.name}")
    blocks = np.frombuffer(raw, dtype=np.uint8, count=n * size, offset=24).reshape(n, size)
    values = np.frombuffer(raw, dtype="<f4", count=n * qk, offset=24 + n * size).reshape(n, qk)
    keep = np.all(np.isfinite(values) & (np.abs(values) <= 8.0), axis=1)
    if not keep.any():
        raise SystemExit(f"{ty.name}.bin: no block decodes within ±8")
    return blocks[keep]


def tensor(ty: T, shape: tuple[int, ...]) -> tuple[np.ndarray, T | None]:
    """Data for add_tensor of logical numpy `shape` in type `ty`."""
    if ty == T.F32:
        return gaussian(shape), None
    if ty == T.F16:
        return gaussian(shape).astype(np.float16), None
    if ty == T.BF16 or ty in QUANTIZED_BY_GGUF_PY:
        return quants.quantize(gaussian(shape), ty), ty
    qk, size = GGML_QUANT_SIZES[ty]
    blocks = fixture_blocks(ty)
    n = int(np.prod(shape)) // qk
    pick = rng.integers(0, len(blocks), size=n)
    data = blocks[pick].reshape(*shape[:-1], shape[-1] // qk * size)
    return np.ascontiguousarray(data), ty


def main() -> None:
    args = sys.argv[1:]
    backbone = T.F32
    if "--backbone" in args:
        i = args.index("--backbone")
        backbone = T[args[i + 1]]
        del args[i : i + 2]
    out, names = args[0], args[1].split(",")
    types = [T[n] for n in names]
    layers = (len(types) + 2) // 3
    types += [types[-1]] * (3 * layers - len(types))

    a = "qwen3moe"
    w = GGUFWriter(out, a)
    w.add_name("qwen3moe-ggml-types")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(EXPERT_FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(TOP_K)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def add(name: str, ty: T, shape: tuple[int, ...]) -> None:
        data, raw = tensor(ty, shape)
        w.add_tensor(name, data, raw_dtype=raw)

    def add_norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + gaussian((n,), 0.1)).astype(np.float32))

    add("token_embd.weight", backbone, (VOCAB, HIDDEN))
    add_norm("output_norm.weight", HIDDEN)
    add("output.weight", backbone, (VOCAB, HIDDEN))
    for i in range(layers):
        b = f"blk.{i}."
        add_norm(b + "attn_norm.weight", HIDDEN)
        add(b + "attn_q.weight", backbone, (HEADS * HEAD_DIM, HIDDEN))
        add(b + "attn_k.weight", backbone, (KV_HEADS * HEAD_DIM, HIDDEN))
        add(b + "attn_v.weight", backbone, (KV_HEADS * HEAD_DIM, HIDDEN))
        add(b + "attn_output.weight", backbone, (HIDDEN, HEADS * HEAD_DIM))
        add_norm(b + "attn_q_norm.weight", HEAD_DIM)
        add_norm(b + "attn_k_norm.weight", HEAD_DIM)
        add_norm(b + "ffn_norm.weight", HIDDEN)
        w.add_tensor(b + "ffn_gate_inp.weight", gaussian((EXPERTS, HIDDEN), 0.5))
        gate, up, down = types[3 * i : 3 * i + 3]
        add(b + "ffn_gate_exps.weight", gate, (EXPERTS, EXPERT_FF, HIDDEN))
        add(b + "ffn_up_exps.weight", up, (EXPERTS, EXPERT_FF, HIDDEN))
        add(b + "ffn_down_exps.weight", down, (EXPERTS, HIDDEN, EXPERT_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
