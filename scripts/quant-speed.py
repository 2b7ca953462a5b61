#!/usr/bin/env python3
"""Quantizing speed of `waste quantize` (issue 23's measure).

For each format: the user + system CPU time of `waste quantize --format F` on
every given safetensors file, best of N runs, less the same for `--format q8`
on the same files (reading, widening to f32, dequantizing and writing cost
the same for every format, and q8 is a plain round). Prints weights per
CPU-second of quantizing per format, and one JSON line with `--json`.

    scripts/quant-speed.py [--waste target/release/waste] [--runs 3]
        [--formats q3,q4] [--json] FILE.safetensors...

Defaults to the 20 real matrices of ../shared/fixtures (docs/QUANT.md).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = [
    os.path.join(ROOT, "..", "shared", "fixtures", "real_weights",
                 "smollm2_135m_ffn_attn_bf16.safetensors"),
    os.path.join(ROOT, "..", "shared", "fixtures", "real_weights_ref",
                 "minilm_l6_f32.safetensors"),
]


def cpu_seconds(cmd):
    """User + system seconds of one child process run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_format(waste, fmt, files, out_dir):
    """CPU seconds of quantizing every file once to `fmt`."""
    total = 0.0
    for i, f in enumerate(files):
        out = os.path.join(out_dir, f"{fmt}-{i}.safetensors")
        total += cpu_seconds([waste, "quantize", "--in", f, "--format", fmt, "--out", out])
    return total


def count_weights(waste, files, out_dir):
    """Weights `waste quantize` quantizes in `files` (from its JSON report)."""
    n = 0
    for i, f in enumerate(files):
        out = os.path.join(out_dir, f"count-{i}.safetensors")
        rep = json.loads(subprocess.run(
            [waste, "quantize", "--in", f, "--format", "q8", "--out", out],
            check=True, capture_output=True, text=True).stdout)
        for v in rep.values():
            # q8 is exactly 8.5 bits per weight: 34 bytes per 32 weights.
            n += round(v["packed_bytes"] * 8 / v["bits_per_weight"])
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waste", default=os.path.join(ROOT, "target", "release", "waste"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--formats", default="q3,q4")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("files", nargs="*", default=FIXTURES)
    a = ap.parse_args()
    if a.runs < 1:
        sys.exit("--runs must be at least 1")
    formats = [f for f in a.formats.split(",") if f]
    with tempfile.TemporaryDirectory() as d:
        weights = count_weights(a.waste, a.files, d)
        best = {}
        # Formats alternate within each run so that a busy moment of the
        # machine does not land on one format only.
        for _ in range(a.runs):
            for fmt in ["q8"] + formats:
                t = run_format(a.waste, fmt, a.files, d)
                best[fmt] = min(best.get(fmt, float("inf")), t)
    result = {"weights": weights, "runs": a.runs, "cpu_s": best, "weights_per_cpu_s": {}}
    for fmt in formats:
        extra = best[fmt] - best["q8"]
        rate = weights / extra if extra > 0 else float("inf")
        result["weights_per_cpu_s"][fmt] = rate
        if not a.json:
            print(f"{fmt}: {best[fmt]:.3f} CPU-s, q8 {best['q8']:.3f} CPU-s, "
                  f"{weights} weights: {rate / 1e6:.1f} M weights per CPU-second of quantizing")
    if a.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
