#!/usr/bin/env python3
"""Where a node's memory goes under a cap: one cold `waste node` run inside
a memory cgroup (bench_cold.py's: page cache dropped first, the same
prompt), the cgroup's memory.stat sampled every 0.25 s while it loads, takes
a 16-token prompt and decodes, then printed: the node's statistics line
(retention, prefetch accuracy), bytes the process read from the device per
decoded token, the cgroup's peak usage and its last rss/page-cache split,
and the node's RAM plan and prefetch-gate lines from its log.

Needs root. Usage (under `flock /tmp/cold.lock` on a shared machine):
    cap-account.py WASTE STORE CAP_BYTES [DECODE_TOKENS [NODE FLAGS...]]
"""

import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np

import bench_cold as bc

waste, store, cap = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
decode = int(sys.argv[4]) if len(sys.argv) > 4 else 16
extra = sys.argv[5:]
env = {**os.environ, "RUST_LOG": "info"}
prompt = [int(x) for x in np.random.default_rng(1).integers(2, 256, size=16)]
bc.drop_caches()
cg = bc.Cgroup(cap, f"cap-account-{os.getpid()}")
node = subprocess.Popen(
    [waste, "node", "--model", str(store), "--listen", "127.0.0.1:0", "--ctx-size", "1024",
     "--max-sessions", "1", "--threads", "2"] + extra,
    preexec_fn=cg.enter, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
addr = None
for line in node.stdout:
    if "listening on" in line:
        addr = line.split("listening on")[1].split()[0]
        break
if addr is None:
    raise SystemExit(f"waste node did not start:\n{node.stderr.read()[-2000:]}")
samples, stop = [], threading.Event()


def sample() -> None:
    keys = ("rss", "cache", "mapped_file", "active_file", "inactive_file")
    while not stop.is_set():
        st = dict(line.split() for line in (cg.dir / "memory.stat").read_text().splitlines())
        usage = int((cg.dir / "memory.usage_in_bytes").read_text())
        samples.append({k: int(st[k]) for k in keys} | {"usage": usage})
        time.sleep(0.25)


t = threading.Thread(target=sample)
t.start()
try:
    time.sleep(3)  # the warm-up reads land before the prompt
    first = bc.ask(waste, addr, prompt, 1, env, node)
    b0 = bc.read_bytes(node.pid)
    out = bc.ask(waste, addr, prompt + [prompt[0]], decode, env, node)
    b1 = bc.read_bytes(node.pid)
finally:
    stop.set()
    t.join()
    peak = int((cg.dir / "memory.max_usage_in_bytes").read_text())
    node.terminate()
    err = node.stderr.read()
    node.wait()
    cg.close()
print("prompt:", first.strip().splitlines()[-1])
print("decode:", out.strip().splitlines()[-1])
print(f"read per token {(b1 - b0) / decode / 1e6:.1f} MB; cgroup peak usage {peak / 1e6:.1f} MB")
print("last sample MB:", {k: round(v / 1e6, 1) for k, v in samples[-1].items()})
for line in err.splitlines():
    if "RAM plan" in line or "warming" in line or "prefetch reads" in line:
        print(line[-300:])
