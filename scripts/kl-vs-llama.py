#!/usr/bin/env python3
"""waste's expert formats against llama.cpp's quantizer on a real model, by KL.

The quantizer issue's quality check: the upcycled experts of the demo are
copies of SmolLM2's dense FFN, so the comparison is made on the dense model.
For each pair (llama.cpp type, waste format), by default (Q3_K, q3) and
(Q4_K, q4):

- llama.cpp: `llama_model_quantize` (llama-cpp-python) requantizes the GGUF
  with its FFN tensors (`blk.N.ffn_gate|up|down.weight`) overridden to the
  type and every other tensor kept as stored (`pure`, the file's own type,
  so nothing else is requantized; checked byte for byte below). Where a
  row length is not a multiple of 256 llama.cpp uses its fallback type for
  that tensor (SmolLM2's gate/up rows are 576 wide: IQ4_NL for Q3_K, Q5_0
  for Q4_K); the table names the types it wrote and their bits per weight.
- waste: `waste convert GGUF STORE --upcycle 8:2 --experts FORMAT` (the
  demo's conversion; backbone as stored).
- Both judged by `waste kl --model X --against GGUF` on the same text.

Run with a Python that has llama-cpp-python and gguf (the venv of
scripts/bench-vs-llama.py):

    /work/llamacpp-venv/bin/python scripts/kl-vs-llama.py --waste target/release/waste
"""

import argparse
import ctypes
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The FFN tensors, as llama.cpp's override pattern and as a full-name match.
FFN_PATTERN = r"ffn_(gate|up|down)\.weight"
FFN = re.compile(r"^blk\.\d+\." + FFN_PATTERN + "$")
# llama.cpp's log callback; the C side keeps the pointer, so it lives here.
_quiet = None


def quantize_ffn(src: pathlib.Path, out: pathlib.Path, qtype: str, threads: int) -> None:
    """`src` with its FFN tensors requantized by llama.cpp to `qtype`, the rest as stored."""
    import gguf
    import llama_cpp

    reader = gguf.GGUFReader(src)
    types = {t.name: int(t.tensor_type) for t in reader.tensors}
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(reader.fields["general.file_type"].contents())
    # `pure` gives every matrix the file type; the embeddings and the output
    # head have their own (SmolLM2: Q8_0 embeddings), kept as they are.
    if "token_embd.weight" in types:
        params.token_embedding_type = types["token_embd.weight"]
    if "output.weight" in types:
        params.output_tensor_type = types["output.weight"]
    params.nthread = threads
    params.allow_requantize = True
    params.pure = True
    overrides = (llama_cpp.llama_model_tensor_override * 2)()
    overrides[0].pattern = FFN_PATTERN.encode()
    overrides[0].type = int(getattr(gguf.GGMLQuantizationType, qtype))
    overrides[1].pattern = None
    params.tt_overrides = overrides
    global _quiet
    _quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p())
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize to {qtype} failed on {src}")


def ffn_types(orig: pathlib.Path, quant: pathlib.Path) -> dict:
    """FFN tensors' types and bits per weight in `quant`; fails if any other
    tensor differs from `orig`."""
    import gguf

    a = {t.name: t for t in gguf.GGUFReader(orig).tensors}
    b = {t.name: t for t in gguf.GGUFReader(quant).tensors}
    if a.keys() != b.keys():
        raise SystemExit(f"{quant}: tensor names differ from {orig}")
    types: dict[str, int] = {}
    bits = weights = 0
    for name, t in b.items():
        if FFN.match(name):
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
            bits += 8 * int(t.n_bytes)
            weights += int(t.n_elements)
        elif t.tensor_type != a[name].tensor_type or bytes(t.data) != bytes(a[name].data):
            raise SystemExit(f"{quant}: tensor {name} is not as stored in {orig}")
    if not types:
        raise SystemExit(f"{orig}: no FFN tensors (blk.N.ffn_gate|up|down.weight)")
    return {"types": types, "bpw": bits / weights}


def kl(waste: str, model: pathlib.Path, orig: pathlib.Path, text: pathlib.Path, limit: int) -> dict:
    out = subprocess.run(
        [waste, "kl", "--model", str(model), "--against", str(orig), "--text", str(text),
         "--limit", str(limit), "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def store_ffn_bpw(waste: str, store: pathlib.Path) -> float:
    """Expert bits per weight of a store, from `waste inspect --json`'s packed bytes."""
    info = json.loads(subprocess.run([waste, "inspect", str(store), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    return float(info["experts"]["bits_per_weight"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waste", default=str(ROOT / "target/release/waste"))
    ap.add_argument("--gguf", help="the dense GGUF (default: the demo's SmolLM2, scripts/fetch-smollm2.sh)")
    ap.add_argument("--work", default="/tmp/kl-vs-llama")
    ap.add_argument("--text", default=str(ROOT / "tests/data/public_domain.txt"))
    ap.add_argument("--limit", type=int, default=1024, help="tokens of the text scored")
    ap.add_argument("--pairs", default="Q3_K:q3,Q4_K:q4", help="llama.cpp type:waste format, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    orig = pathlib.Path(args.gguf or subprocess.run(
        [str(ROOT / "scripts/fetch-smollm2.sh")], check=True, capture_output=True, text=True).stdout.strip())
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    text = pathlib.Path(args.text)
    rows = []
    for pair in args.pairs.split(","):
        qtype, fmt = pair.split(":")
        qfile = work / f"ffn-{qtype}.gguf"
        if not qfile.exists():
            print(f"llama.cpp: FFN -> {qtype} ...", file=sys.stderr)
            quantize_ffn(orig, qfile, qtype, args.threads)
        lt = ffn_types(orig, qfile)
        store = work / f"{fmt}.store"
        if not (store / "manifest.json").exists():
            print(f"waste: convert --experts {fmt} ...", file=sys.stderr)
            subprocess.run([args.waste, "convert", str(orig), str(store), "--upcycle", "8:2",
                            "--experts", fmt], check=True, stdout=subprocess.DEVNULL)
        lk = kl(args.waste, qfile, orig, text, args.limit)
        wk = kl(args.waste, store, orig, text, args.limit)
        rows.append({
            "llama_type": qtype, "llama_ffn_types": lt["types"], "llama_ffn_bpw": lt["bpw"],
            "llama_kl": lk["mean_kl"], "llama_top1": lk["top1_agreement"],
            "waste_format": fmt, "waste_ffn_bpw": store_ffn_bpw(args.waste, store),
            "waste_kl": wk["mean_kl"], "waste_top1": wk["top1_agreement"],
            "positions": wk["positions"], "llama_ppl": lk["perplexity"], "waste_ppl": wk["perplexity"],
            "reference_ppl": wk["reference_perplexity"],
        })
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| llama.cpp | its FFN tensors | bpw | KL | top-1 | waste | bpw | KL | top-1 | KL waste / llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        types = ", ".join(f"{k} x{n}" for k, n in sorted(r["llama_ffn_types"].items(), key=lambda x: x[0]))
        print(f"| {r['llama_type']} | {types} | {r['llama_ffn_bpw']:.2f} | {r['llama_kl']:.4f} | "
              f"{100 * r['llama_top1']:.1f} % | {r['waste_format']} | {r['waste_ffn_bpw']:.2f} | "
              f"{r['waste_kl']:.4f} | {100 * r['waste_top1']:.1f} % | {r['waste_kl'] / r['llama_kl']:.2f} |")


if __name__ == "__main__":
    main()
