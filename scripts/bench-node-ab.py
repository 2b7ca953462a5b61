#!/usr/bin/env python3
"""Two or more `waste` builds side by side on one store, as a warm
`waste node` each (started like bench-vs-llama.py starts it), requests
alternated between the builds within each round, medians per build.

decode: per round and build, a one-token answer to the prompt, then
  --decode tokens after it; reports the node's decode tok/s and its CPU
  milliseconds per decoded token (`/proc/PID/stat` utime + stime of the
  long request less those of the one-token request, over --decode - 1
  tokens), so builds compare on a shared machine by CPU as well as wall.
  With --phases the nodes run with WASTE_PHASES=1 and each generation's
  per-phase line is printed.
prefill: per round and build, a one-token answer to a one-token prompt and
  to the prompt, timed from outside; prefill tok/s is (prompt - 1) over the
  difference (the process and connection cost taken out), as
  bench-vs-llama.py times waste's prefill.
first: per start, a node started, then a one-token answer to the prompt
  four times, the first as soon as the node prints "listening on";
  reports each time and the first over the median of the other three.

Usage: bench-node-ab.py --store DIR --waste BIN[,BIN...] [--mode decode|prefill|first]
       [--prompt 64] [--decode 64] [--runs 5] [--threads 2] [--phases]
"""

import argparse
import os
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_cold  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def decode(a, prompt: list[int], env: dict) -> None:
    nodes = start(a, env)
    res: dict[str, list[tuple[float, float]]] = {b: [] for b in a.waste}
    try:
        for _ in range(a.runs):
            for b in a.waste:
                node, addr = nodes[b]
                c0 = cpu_seconds(node.pid)
                bench_cold.ask(b, addr, prompt, 1, env, node, None)
                c1 = cpu_seconds(node.pid)
                out = bench_cold.ask(b, addr, prompt, a.decode, env, node, None)
                c2 = cpu_seconds(node.pid)
                m = bench_cold.STATS.search(out)
                if not m:
                    raise SystemExit(f"no statistics line from waste generate:\n{out[-2000:]}")
                per_token = 1000 * ((c2 - c1) - (c1 - c0)) / (a.decode - 1)
                res[b].append((float(m.group(2)), per_token))
    finally:
        for node, _ in nodes.values():
            node.terminate()
            node.wait()
    base = statistics.median(t for t, _ in res[a.waste[0]])
    base_cpu = statistics.median(c for _, c in res[a.waste[0]])
    for b in a.waste:
        tps = statistics.median(t for t, _ in res[b])
        cpu = statistics.median(c for _, c in res[b])
        print(f"{b}: decode {tps:.1f} tok/s ({tps / base:.2f} x), CPU {cpu:.2f} ms/token "
              f"({cpu / base_cpu:.2f} x); runs {[round(t, 1) for t, _ in res[b]]}")
        if a.phases:
            for line in nodes[b][0].stderr.read().splitlines():
                if "decode ms per step" in line:
                    print("   ", line.split("decode ms per step", 1)[1].lstrip(": "))


def start(a, env: dict) -> dict:
    """A warm node per build, its expert cache filled by a first request."""
    warm = [int(x) for x in np.random.default_rng(2).integers(2, 256, size=512)]
    nodes = {}
    for b in a.waste:
        node, addr = bench_cold.start_node(b, a.store, a.threads, env)
        bench_cold.ask(b, addr, warm, 8, env, node, None)
        nodes[b] = (node, addr)
    return nodes


def prefill(a, prompt: list[int], env: dict) -> None:
    nodes = start(a, env)
    res: dict[str, list[float]] = {b: [] for b in a.waste}
    try:
        for _ in range(a.runs):
            for b in a.waste:
                node, addr = nodes[b]
                t0 = time.perf_counter()
                bench_cold.ask(b, addr, prompt[:1], 1, env, node, None)
                t1 = time.perf_counter()
                bench_cold.ask(b, addr, prompt, 1, env, node, None)
                t2 = time.perf_counter()
                res[b].append((len(prompt) - 1) / max((t2 - t1) - (t1 - t0), 1e-6))
    finally:
        for node, _ in nodes.values():
            node.terminate()
            node.wait()
    base = statistics.median(res[a.waste[0]])
    for b in a.waste:
        tps = statistics.median(res[b])
        print(f"{b}: prefill {tps:.1f} tok/s ({tps / base:.2f} x); runs {[round(t) for t in res[b]]}")


def first(a, prompt: list[int], env: dict) -> None:
    for _ in range(a.runs):
        for b in a.waste:
            node, addr = bench_cold.start_node(b, a.store, a.threads, env)
            times = []
            try:
                for _ in range(4):
                    t = time.perf_counter()
                    bench_cold.ask(b, addr, prompt, 1, env, node, None)
                    times.append(time.perf_counter() - t)
            finally:
                node.terminate()
                node.wait()
            rest = statistics.median(times[1:])
            print(f"{b}: {' '.join(f'{t:.3f}' for t in times)} s; first / rest {times[0] / rest:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, type=pathlib.Path)
    ap.add_argument("--waste", required=True, help="builds, comma-separated; the first is the baseline")
    ap.add_argument("--mode", choices=["decode", "prefill", "first"], default="decode")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (random ids)")
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--phases", action="store_true", help="log each generation's phases (WASTE_PHASES=1)")
    a = ap.parse_args()
    a.waste = a.waste.split(",")
    if a.decode < 2:
        raise SystemExit("--decode must be at least 2")
    env = {**os.environ, "RUST_LOG": "info" if a.phases else "warn"}
    if a.phases:
        env["WASTE_PHASES"] = "1"
    prompt = [int(x) for x in np.random.default_rng(1).integers(2, 256, size=a.prompt)]
    {"decode": decode, "prefill": prefill, "first": first}[a.mode](a, prompt, env)


if __name__ == "__main__":
    main()
