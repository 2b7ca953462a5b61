#!/usr/bin/env python3
"""Quantizing speed of `waste quantize` (issue 23's measure).

For each format: the user + system CPU time of `waste quantize --format F` on
every given safetensors file, best of N runs, less the same for `--format q8`
on the same files (reading, widening to f32, dequantizing and writing cost
the same for every format, and q8 is a plain round). Prints weights per
CPU-second of quantizing per format, and one JSON line with `--json`.
Each format is also run with `WASTE_KERNELS=ref` (the scalar search, the
baseline) in the same runs, and the ratio is printed.

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


def cpu_seconds(cmd, kernels):
    """User + system seconds of one child process run to completion."""
    env = dict(os.environ)
    env.pop("WASTE_KERNELS", None)
    if kernels:
        env["WASTE_KERNELS"] = kernels
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_format(waste, fmt, files, out_dir, kernels=None):
    """CPU seconds of quantizing every file once to `fmt`."""
    total = 0.0
    for i, f in enumerate(files):
        out = os.path.join(out_dir, f"{fmt}-{i}.safetensors")
        cmd = [waste, "quantize", "--in", f, "--format", fmt, "--out", out]
        total += cpu_seconds(cmd, kernels)
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
        # Formats and kernels alternate within each run so that a busy
        # moment of the machine does not land on one of them only.
        for _ in range(a.runs):
            for key, fmt, kernels in [("q8", "q8", None)] + [
                    k for f in formats for k in [(f, f, None), (f + "/ref", f, "ref")]]:
                t = run_format(a.waste, fmt, a.files, d, kernels)
                best[key] = min(best.get(key, float("inf")), t)
    result = {"weights": weights, "runs": a.runs, "cpu_s": best, "weights_per_cpu_s": {}}

    def rate(key):
        extra = best[key] - best["q8"]
        return weights / extra if extra > 0 else float("inf")

    for fmt in formats:
        fast, ref = rate(fmt), rate(fmt + "/ref")
        result["weights_per_cpu_s"][fmt] = fast
        result["weights_per_cpu_s"][fmt + "/ref"] = ref
        if not a.json:
            print(f"{fmt}: {best[fmt]:.3f} CPU-s (WASTE_KERNELS=ref {best[fmt + '/ref']:.3f}), "
                  f"q8 {best['q8']:.3f} CPU-s, {weights} weights: {fast / 1e6:.1f} M weights "
                  f"per CPU-second of quantizing (ref {ref / 1e6:.1f} M, {fast / ref:.2f}x)")
    if a.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
