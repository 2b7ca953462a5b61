#!/usr/bin/env python3
"""waste against llama.cpp, side by side, on the same synthetic MoE with the
model warm in RAM: decode tok/s and prefill at 64 and 512 prompt tokens,
both engines on the same thread count and the same token ids, runs
alternated A/B (`--runs`, default 3 each), medians and ratios in one table.

Steps (cached in --work, so a rerun only measures):
1. `waste synth --like qwen3-30b-a3b` (bf16 safetensors; size by --layers,
   --experts, --vocab);
2. that folder written as a BF16 `qwen3moe` GGUF with gguf-py (tensor names
   and expert stacking as llama.cpp's converter lays them out; a byte-level
   vocabulary so llama.cpp loads it) and quantized by llama.cpp's own
   quantizer (`llama_model_quantize`) into each --presets file;
3. per preset, a waste store of that GGUF with `--experts native`
   (`--backbone native`: waste runs the file's own blocks) and, once, a store
   of the safetensors in waste's default formats (`--experts q3 --backbone q8`);
4. llama.cpp through llama-cpp-python (`Llama.eval` of the prompt, then one
   token at a time), waste through a `waste node` per store kept running
   as llama.cpp's model is (its expert cache filled by a first request),
   asked by `waste generate --tokens ... --ignore-eos` (WasteNode says how
   prefill and decode are timed). Both hold their attention cache in f16,
   llama.cpp's default (`--cache-type f32`: waste's exact cache instead).

With --cold (root): the same files decoded cold, each run after dropping the
page cache, inside a memory cgroup of --cold-cap bytes (default: half the
GGUF), with the device's readahead at --readahead-kb (restored after):
llama.cpp mapping the GGUF, waste's node on the native store and on the
default store under its default RAM budget (which reads the cgroup's
limit). Decode tok/s and bytes read from the device per decoded token
(bench_cold.py says how each is taken).

A benchmark only: llama-cpp-python is never a dependency of waste.

Usage: bench-vs-llama.py --waste target/release/waste --work DIR
       [--layers 2] [--experts 32] [--vocab 8192] [--presets Q4_K_M,Q3_K_M]
       [--threads 2] [--decode 32] [--runs 3] [--cache-type f16|f32] [--json OUT]
       [--cold [--cold-only] [--cold-cap BYTES] [--cold-decode 16] [--readahead-kb 128]]
"""

import argparse
import ctypes
import json
import os
import pathlib
import statistics
import struct
import subprocess
import time

import numpy as np
from gguf import GGUFWriter, LlamaFileType

import bench_cold

QUIET = {**os.environ, "RUST_LOG": "warn"}


def read_safetensors(folder: pathlib.Path):
    """name -> float32/bf16-widened numpy array, for every shard."""
    out = {}
    for shard in sorted(folder.glob("*.safetensors")):
        raw = shard.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            buf = raw[8 + n + a : 8 + n + b]
            if t["dtype"] == "BF16":
                v = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
                arr = v.view(np.float32)
            elif t["dtype"] == "F32":
                arr = np.frombuffer(buf, dtype="<f4")
            else:
                raise SystemExit(f"{name}: {t['dtype']} is not handled here")
            out[name] = arr.reshape(t["shape"])
    return out


def to_gguf(hf: pathlib.Path, out: pathlib.Path) -> None:
    """A qwen3_moe safetensors folder as an F32 `qwen3moe` GGUF."""
    c = json.loads((hf / "config.json").read_text())
    t = read_safetensors(hf)
    w = GGUFWriter(out, "qwen3moe")
    w.add_name("bench-vs-llama")
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(4096)
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_freq_base(float(c["rope_theta"]))
    w.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_file_type(LlamaFileType.ALL_F32)
    vocab = c["vocab_size"]
    # Bytes, one merge (llama.cpp wants some), then placeholders: token ids
    # are all either engine is given.
    tokens = [bytes([i]).decode("latin-1") for i in range(256)] + ["ab"]
    tokens += [f"<t{i}>" for i in range(257, vocab)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * vocab)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_tensor("token_embd.weight", t["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", t["model.norm.weight"])
    w.add_tensor("output.weight", t["lm_head.weight"])
    for i in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for src, dst in [
            ("input_layernorm", "attn_norm"),
            ("post_attention_layernorm", "ffn_norm"),
            ("self_attn.q_proj", "attn_q"),
            ("self_attn.k_proj", "attn_k"),
            ("self_attn.v_proj", "attn_v"),
            ("self_attn.o_proj", "attn_output"),
            ("self_attn.q_norm", "attn_q_norm"),
            ("self_attn.k_norm", "attn_k_norm"),
            ("mlp.gate", "ffn_gate_inp"),
        ]:
            w.add_tensor(b + dst + ".weight", t[p + src + ".weight"])
        for proj, dst in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]:
            stack = np.stack([t[f"{p}mlp.experts.{e}.{proj}.weight"] for e in range(c["num_experts"])])
            w.add_tensor(b + dst + ".weight", stack)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: pathlib.Path, out: pathlib.Path, preset: str, threads: int) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{preset}")
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize {preset} failed")


class Llama:
    def __init__(self, path: pathlib.Path, threads: int, extra_bufts: bool = True):
        from llama_cpp import Llama as L

        if not extra_bufts:
            # llama.cpp's AMX buffers crash some machines (llama.cpp issue
            # 20824): the weights then stay in its plain mapped layout.
            bench_cold.llama_without_extra_bufts()
        self.llm = L(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=threads,
                     n_threads_batch=threads, verbose=False)

    def run(self, prompt: list[int], decode: int) -> tuple[float, float]:
        """(prompt tok/s, decode tok/s)."""
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(prompt)
        t1 = time.perf_counter()
        for i in range(decode):
            self.llm.eval([(prompt[-1] + 7 * i) % 256 + 2])
        t2 = time.perf_counter()
        return len(prompt) / (t1 - t0), decode / (t2 - t1)


class WasteNode:
    """A warm `waste node` on one store, as llama.cpp's model stays loaded:
    started once, its expert cache filled by one request, then asked by
    `waste generate`. Prefill is timed as the wall time of a one-token
    answer to the prompt less that of a one-token prompt (the process and
    connection cost), decode by the node's own statistics."""

    def __init__(self, waste: str, store: pathlib.Path, threads: int, warm_prompt: list[int]):
        self.waste = waste
        self.node, self.addr = bench_cold.start_node(waste, store, threads, QUIET)
        bench_cold.ask(waste, self.addr, warm_prompt, 8, QUIET, self.node, None)

    def timed(self, prompt: list[int], tokens: int) -> tuple[float, str]:
        t0 = time.perf_counter()
        out = bench_cold.ask(self.waste, self.addr, prompt, tokens, QUIET, self.node, None)
        return time.perf_counter() - t0, out

    def run(self, prompt: list[int], decode: int) -> tuple[float, float]:
        """(prompt tok/s, decode tok/s)."""
        one, _ = self.timed(prompt[:1], 1)
        full, _ = self.timed(prompt, 1)
        _, stats = self.timed(prompt, decode)
        m = bench_cold.STATS.search(stats)
        if not m:
            raise SystemExit(f"no statistics line from waste generate:\n{stats[-2000:]}")
        return (len(prompt) - 1) / max(full - one, 1e-6), float(m.group(2))

    def close(self) -> None:
        self.node.terminate()
        self.node.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waste", required=True)
    ap.add_argument("--work", required=True, type=pathlib.Path)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--presets", default="Q4_K_M,Q3_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--cold", action="store_true", help="also decode cold under a memory cgroup (root)")
    ap.add_argument("--cold-only", action="store_true", help="only the cold runs")
    ap.add_argument("--cold-cap", type=int, help="the cgroup's memory limit in bytes (default: half the GGUF)")
    ap.add_argument("--cold-decode", type=int, default=16)
    ap.add_argument("--readahead-kb", type=int, default=128)
    ap.add_argument("--cache-type", choices=["f16", "f32"], default="f16",
                    help="waste's attention cache (default f16: llama.cpp's own default cache type)")
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="warm llama.cpp without its extra buffer types (AMX, repacked layouts): "
                         "where its AMX path crashes (llama.cpp issue 20824)")
    a = ap.parse_args()
    QUIET["WASTE_NODE_CACHE_TYPE"] = a.cache_type
    a.work.mkdir(parents=True, exist_ok=True)
    hf = a.work / "hf"
    if not (hf / "config.json").exists():
        subprocess.run([a.waste, "synth", "--like", "qwen3-30b-a3b", "--layers", str(a.layers),
                        "--experts", str(a.experts), "--vocab", str(a.vocab), "--dtype", "bf16", str(hf)],
                       check=True, env=QUIET)
    f32 = a.work / "model.f32.gguf"
    if not f32.exists():
        to_gguf(hf, f32)
    rows = []
    targets = []
    for preset in a.presets.split(","):
        q = a.work / f"{preset}.gguf"
        if not q.exists():
            quantize(f32, q, preset, a.threads)
        store = a.work / f"{preset}.store"
        if not (store / "manifest.json").exists():
            subprocess.run([a.waste, "convert", str(q), str(store), "--experts", "native", "--backbone", "native"],
                           check=True, env=QUIET, capture_output=True)
        targets.append((preset, q, store))
    default = a.work / "default.store"
    if not (default / "manifest.json").exists():
        subprocess.run([a.waste, "convert", str(hf), str(default), "--experts", "q3", "--backbone", "q8"],
                       check=True, env=QUIET, capture_output=True)
    rng = np.random.default_rng(0)
    warm_prompt = [int(x) for x in np.random.default_rng(2).integers(2, 256, size=512)]
    for preset, q, store in [] if a.cold_only else targets:
        llm = Llama(q, a.threads, extra_bufts=not a.no_extra_bufts)
        nodes = {"waste": WasteNode(a.waste, store, a.threads, warm_prompt),
                 "waste_default": WasteNode(a.waste, default, a.threads, warm_prompt)}
        for n in (64, 512):
            prompt = [int(x) for x in rng.integers(2, 256, size=n)]
            res = {"llama": [], "waste": [], "waste_default": []}
            for _ in range(a.runs):
                res["llama"].append(llm.run(prompt, a.decode))
                for k, node in nodes.items():
                    res[k].append(node.run(prompt, a.decode))
            med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in res.items()}
            rows.append({"preset": preset, "prompt": n, "medians": med, "runs": res})
            print(json.dumps(rows[-1]["medians"] | {"preset": preset, "prompt": n}), flush=True)
        for node in nodes.values():
            node.close()
        del llm
    if rows:
        print_warm(rows, a.no_extra_bufts)
    cold = cold_runs(a, targets, default) if a.cold or a.cold_only else []
    if a.json:
        a.json.write_text(json.dumps({"warm": rows, "cold": cold}, indent=1))


def print_warm(rows: list[dict], no_extra_bufts: bool) -> None:
    print(f"attention cache: llama.cpp f16, waste {QUIET['WASTE_NODE_CACHE_TYPE']}")
    if no_extra_bufts:
        print("llama.cpp without its extra buffer types (AMX and repacked layouts; llama.cpp issue 20824)")
    print(f"{'file':8} {'prompt':>6} | {'prefill tok/s: llama':>20} {'waste':>7} {'ratio':>6} | "
          f"{'decode tok/s: llama':>19} {'waste':>7} {'ratio':>6} | "
          f"{'waste q3/q8: prefill':>20} {'ratio':>6} {'decode':>7} {'ratio':>6}")
    for r in rows:
        m = r["medians"]
        llama, waste, default = m["llama"], m["waste"], m["waste_default"]
        print(f"{r['preset']:8} {r['prompt']:6d} | {llama[0]:20.1f} {waste[0]:7.1f} "
              f"{waste[0] / llama[0]:6.2f} | {llama[1]:19.2f} {waste[1]:7.2f} "
              f"{waste[1] / llama[1]:6.2f} | {default[0]:20.1f} {default[0] / llama[0]:6.2f} "
              f"{default[1]:7.2f} {default[1] / llama[1]:6.2f}")


def cold_runs(a, targets, default: pathlib.Path) -> list[dict]:
    """Each preset's GGUF in llama.cpp against its native store and the
    default store in waste, cold under the cap, alternated."""
    rows = []
    with bench_cold.readahead(a.work, a.readahead_kb) as before:
        print(f"cold runs: readahead {a.readahead_kb} KiB (was {before}), {a.cold_decode} tokens each", flush=True)
        for preset, q, store in targets:
            cap = a.cold_cap or q.stat().st_size // 2
            prompt = [int(x) for x in np.random.default_rng(1).integers(2, 256, size=16)]
            res = {"llama": [], "waste": [], "waste_default": []}
            for _ in range(a.runs):
                res["llama"].append(bench_cold.cold_llama(q, cap, prompt, a.cold_decode, a.threads))
                res["waste"].append(bench_cold.cold_waste(a.waste, store, cap, prompt, a.cold_decode, a.threads, QUIET))
                res["waste_default"].append(
                    bench_cold.cold_waste(a.waste, default, cap, prompt, a.cold_decode, a.threads, QUIET))
                print(json.dumps({k: v[-1] for k, v in res.items()} | {"preset": preset}), flush=True)
            med = {k: {f: statistics.median(r[f] for r in v) for f in ("decode_tps", "read_per_token")}
                   for k, v in res.items()}
            rows.append({"preset": preset, "cap": cap, "gguf_bytes": q.stat().st_size, "medians": med, "runs": res})
    print(f"{'file':8} {'cap MB':>7} | {'cold decode tok/s: llama':>24} {'waste':>7} {'ratio':>6} "
          f"{'q3/q8':>6} | {'MB read/token: llama':>20} {'waste':>7} {'ratio':>6} {'q3/q8':>6}")
    for r in rows:
        m = r["medians"]
        print(f"{r['preset']:8} {r['cap'] / 1e6:7.0f} | {m['llama']['decode_tps']:24.2f} "
              f"{m['waste']['decode_tps']:7.2f} {m['waste']['decode_tps'] / m['llama']['decode_tps']:6.2f} "
              f"{m['waste_default']['decode_tps']:6.2f} | {m['llama']['read_per_token'] / 1e6:20.1f} "
              f"{m['waste']['read_per_token'] / 1e6:7.1f} "
              f"{m['waste']['read_per_token'] / max(m['llama']['read_per_token'], 1):6.2f} "
              f"{m['waste_default']['read_per_token'] / 1e6:6.1f}")
    return rows


if __name__ == "__main__":
    main()
