#!/usr/bin/env python3
"""waste's GGUF kernels against llama.cpp's own, type by type, one core.

`waste bench kernels --json` measures waste's products (GB/s of weight
bytes, streaming over a set of matrices 4x the last-level cache, and
resident); `scripts/llama-kernels/harness.c`, linked against the libggml of
an installed llama-cpp-python, measures llama.cpp's MUL_MAT node on the
same shape and stream size the same way: its plain vec_dot path
(`use_extra_bufts=False`) and, for the types it repacks on this CPU, its
repacked GEMV (its default). With `--n N` both multiply N activation
rows at once, a prefill's batch (llama.cpp's GEMM paths: repacked GEMM,
llamafile's sgemm, or vec_dot per row and column). Rounds alternate the order of the two
engines; the table gives medians over rounds and the ratio of waste's
dispatched kernel table to llama.cpp's default path.

Run with the Python of a venv that has llama-cpp-python (native build):

    /work/llamacpp-venv/bin/python scripts/bench-llama-kernels.py \\
        --waste target/release/waste --work /tmp/llk --types q4_k,q6_k,q3_k

The harness needs ggml's headers, which the wheel does not install: they
come from llama-cpp-python's source package of the same version, fetched
from PyPI into --work once (or pass --llama-include DIR).

A benchmark only: llama.cpp is never a dependency of waste.
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tarfile
import urllib.request

# ggml_type ids (ggml.h), by waste's format names.
GGML_TYPES = {
    "q4_0": 2, "q8_0": 8, "q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13, "q6_k": 14,
    "iq2_xxs": 16, "iq2_xs": 17, "iq3_xxs": 18, "iq3_s": 21, "iq2_s": 22, "iq4_nl": 20, "iq4_xs": 23,
}


def llc_bytes() -> int:
    """The largest cache of cpu0, as `waste bench kernels` reads it."""
    best = 0
    for i in range(8):
        p = pathlib.Path(f"/sys/devices/system/cpu/cpu0/cache/index{i}/size")
        if not p.exists():
            continue
        s = p.read_text().strip()
        mul = {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1)
        best = max(best, int(s.rstrip("KM")) * mul)
    return best or 32 << 20


def include_dir(work: pathlib.Path, version: str) -> pathlib.Path:
    """ggml's headers from llama-cpp-python's sdist of `version`."""
    inc = work / f"llama_cpp_python-{version}" / "vendor/llama.cpp/ggml/include"
    if inc.is_dir():
        return inc
    name = f"llama_cpp_python-{version}.tar.gz"
    req = urllib.request.Request("https://pypi.org/simple/llama-cpp-python/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req))["files"]
    url = next(f["url"] for f in files if f["filename"] == name)
    tgz = work / url.rsplit("/", 1)[1]
    print(f"fetching {url}", file=sys.stderr)
    urllib.request.urlretrieve(url, tgz)
    with tarfile.open(tgz) as t:
        members = [m for m in t.getmembers() if "/vendor/llama.cpp/ggml/include/" in m.name]
        t.extractall(work, members=members, filter="data")
    return inc


def build_harness(work: pathlib.Path, include: pathlib.Path) -> pathlib.Path:
    import llama_cpp

    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
    src = pathlib.Path(__file__).parent / "llama-kernels" / "harness.c"
    exe = work / "llama-kernels-harness"
    subprocess.run(
        ["gcc", "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", str(src), f"-I{include}", f"-L{lib}",
         "-lggml", "-lggml-base", "-lggml-cpu", "-lm", f"-Wl,-rpath,{lib}", "-o", str(exe)],
        check=True,
    )
    return exe


def run_llama(exe, ty, rows, cols, stream, repeats, buft, tokens):
    out = subprocess.run([str(exe), str(GGML_TYPES[ty]), str(rows), str(cols), str(stream), str(repeats), buft,
                          str(tokens)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_waste(waste, ty, rows, cols, repeats, tokens):
    p = subprocess.run([waste, "bench", "kernels", "--formats", ty, "--shapes", f"{rows}x{cols}",
                        "--repeats", str(repeats), "--n", str(tokens), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"waste bench kernels --formats {ty} failed:\n{p.stderr.strip()}")
    figs = json.loads(p.stdout)["figures"]
    res = {}
    for mode in ("streaming", "resident"):
        # the table this CPU dispatches (on Zen 4 `avx512-vnni-half`, not
        # the widest listed)
        (f,) = [f for f in figs if f["mode"] == mode and f["dispatched"]]
        res[mode] = (f["gbps_per_core"], f["isa"], f["read_gbps_per_core"])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--waste", required=True)
    ap.add_argument("--work", type=pathlib.Path, required=True)
    ap.add_argument("--types", default="q4_k,q6_k,q5_k,q3_k,q2_k,q8_0,q4_0,iq4_xs,iq4_nl")
    ap.add_argument("--shapes", default="2048x7168")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=1,
                    help="activation rows per product: 1 = decode's matrix-vector product, more = a prefill's batch")
    ap.add_argument("--llama-include", type=pathlib.Path)
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    import llama_cpp

    a.work.mkdir(parents=True, exist_ok=True)
    include = a.llama_include or include_dir(a.work, llama_cpp.__version__)
    exe = build_harness(a.work, include)
    stream = 4 * llc_bytes()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    types = a.types.split(",")
    for ty in types:
        if ty not in GGML_TYPES:
            sys.exit(f"unknown type {ty}; known: {', '.join(GGML_TYPES)}")
    samples = {}  # (ty, shape, mode) -> {"waste": [], "plain": [], "repack": [], ...}
    for rnd in range(a.rounds):
        for ty in types:
            for rows, cols in shapes:
                order = ["waste", "llama"] if rnd % 2 == 0 else ["llama", "waste"]
                for who in order:
                    if who == "waste":
                        w = run_waste(a.waste, ty, rows, cols, a.repeats, a.n)
                        for mode, (gbps, isa, read) in w.items():
                            s = samples.setdefault((ty, rows, cols, mode), {})
                            s.setdefault("waste", []).append(gbps)
                            s.setdefault("waste_read", []).append(read)
                            s["isa"] = isa
                    else:
                        for buft in ("plain", "repack"):
                            r = run_llama(exe, ty, rows, cols, stream, a.repeats, buft, a.n)
                            for mode in ("streaming", "resident"):
                                s = samples.setdefault((ty, rows, cols, mode), {})
                                if r["supported"]:
                                    s.setdefault(buft, []).append(r[mode])
                                    s.setdefault("llama_read", []).append(r["read_" + mode])
                print(f"round {rnd + 1}/{a.rounds}: {ty} {rows}x{cols} done", file=sys.stderr)
    med = lambda v: statistics.median(v) if v else float("nan")  # noqa: E731
    rows_out = []
    print("| type | shape | mode | waste (table) | llama.cpp vec_dot | llama.cpp repacked | waste / llama.cpp default | waste / vec_dot | read waste / llama |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (ty, r, c, mode), s in samples.items():
        wv, pl, rp = med(s["waste"]), med(s.get("plain", [])), med(s.get("repack", []))
        default = rp if s.get("repack") else pl
        rows_out.append({"type": ty, "rows": r, "cols": c, "mode": mode, "waste_gbps": wv, "waste_isa": s["isa"],
                         "llama_vec_dot_gbps": pl, "llama_repacked_gbps": rp if s.get("repack") else None,
                         "ratio_to_llama_default": wv / default, "ratio_to_vec_dot": wv / pl,
                         "waste_read_gbps": med(s["waste_read"]), "llama_read_gbps": med(s["llama_read"])})
        rp_s = f"{rp:.2f}" if s.get("repack") else "—"
        print(f"| {ty.upper()} | {r}x{c} | {mode} | {wv:.2f} ({s['isa']}) | {pl:.2f} | {rp_s} | {wv / default:.2f} | "
              f"{wv / pl:.2f} | {med(s['waste_read']):.1f} / {med(s['llama_read']):.1f} |")
    if a.json:
        a.json.write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
