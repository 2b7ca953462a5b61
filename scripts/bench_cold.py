"""Cold runs for bench-vs-llama.py: each engine starts with the page cache
dropped, inside a memory cgroup capped below the model's size, on a block
device whose readahead is set to the same value for both (128 KiB unless
asked), and decodes a fixed number of tokens. Reported per run: decode tok/s
and the bytes the engine's process read from the device while it decoded
(`/proc/PID/io` read_bytes, sampled when decoding starts and when it ends),
per decoded token.

Needs root (cgroups, drop_caches, readahead). cgroup v2 (`memory.max`,
swap off) or v1 (`memory.limit_in_bytes`, swappiness 0), whichever the
machine mounts.
"""

import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time

CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")


def drop_caches() -> None:
    os.sync()
    pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")


class Cgroup:
    """A memory cgroup of `cap` bytes that child processes enter before exec."""

    def __init__(self, cap: int, name: str) -> None:
        self.cap = cap
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            self.dir = CGROUP_ROOT / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "memory.max").write_text(f"{cap}\n")
            with contextlib.suppress(OSError):
                (self.dir / "memory.swap.max").write_text("0\n")
            self.kind = "v2 memory.max"
        elif (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists():
            self.dir = CGROUP_ROOT / "memory" / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "memory.limit_in_bytes").write_text(f"{cap}\n")
            with contextlib.suppress(OSError):
                (self.dir / "memory.swappiness").write_text("0\n")
            self.kind = "v1 memory.limit_in_bytes"
        else:
            raise SystemExit("no memory cgroup (v2 memory.max or v1 memory.limit_in_bytes) is mounted")

    def enter(self) -> None:
        """preexec_fn: the child joins the cgroup before it execs."""
        (self.dir / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def close(self) -> None:
        for _ in range(50):
            if not (self.dir / "cgroup.procs").read_text().split():
                break
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            self.dir.rmdir()


def block_queue(path: pathlib.Path) -> pathlib.Path:
    """The queue/ folder of the block device holding `path` (a partition's
    parent disk)."""
    dev = os.stat(path).st_dev
    sys_dev = pathlib.Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()
    if (sys_dev / "partition").exists():
        sys_dev = sys_dev.parent
    queue = sys_dev / "queue"
    if not (queue / "read_ahead_kb").exists():
        raise SystemExit(f"{path}: no read_ahead_kb for its device ({sys_dev})")
    return queue


@contextlib.contextmanager
def readahead(path: pathlib.Path, kb: int):
    """Sets the readahead of `path`'s device to `kb` KiB, restored after."""
    f = block_queue(path) / "read_ahead_kb"
    before = f.read_text().strip()
    f.write_text(f"{kb}\n")
    try:
        yield before
    finally:
        f.write_text(f"{before}\n")


def read_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/{pid}/io has no read_bytes")


def llama_without_extra_bufts() -> None:
    """Makes llama-cpp-python load models with `use_extra_bufts = false`:
    its weights stay in the mapped file's plain layout, as llama.cpp runs
    without its extra buffer types (AMX and AVX-512 repacked layouts)."""
    import llama_cpp.llama_cpp as C

    defaults = C.llama_model_default_params

    def mapped_only():
        p = defaults()
        p.use_extra_bufts = False
        return p

    C.llama_model_default_params = mapped_only


# llama.cpp's extra buffer types repack some weights into anonymous memory
# at load, which a cap below the model cannot hold: cold, it runs from its
# mapped file ([`llama_without_extra_bufts`]). argv[5]: this folder.
LLAMA_RUNNER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[5])
import bench_cold
bench_cold.llama_without_extra_bufts()
from llama_cpp import Llama
model, threads, decode, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
def rb():
    for line in open("/proc/self/io"):
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=1024,
            n_batch=512, logits_all=False, verbose=False, use_mmap=True)
t0 = time.perf_counter(); llm.eval(prompt); t1 = time.perf_counter()
b0 = rb()
for i in range(decode):
    llm.eval([(prompt[-1] + 7 * i) % 256 + 2])
t2 = time.perf_counter()
print(json.dumps({"prefill_s": t1 - t0, "decode_tps": decode / (t2 - t1), "decode_read": rb() - b0}))
"""


def cold_llama(gguf: pathlib.Path, cap: int, prompt: list[int], decode: int, threads: int) -> dict:
    drop_caches()
    cg = Cgroup(cap, f"waste-bench-llama-{os.getpid()}")
    try:
        out = subprocess.run(
            [sys.executable, "-c", LLAMA_RUNNER, str(gguf), str(threads), str(decode), json.dumps(prompt),
             str(pathlib.Path(__file__).resolve().parent)],
            preexec_fn=cg.enter, capture_output=True, text=True, check=True,
        )
    finally:
        cg.close()
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"decode_tps": r["decode_tps"], "read_per_token": r["decode_read"] / decode}


STATS = re.compile(r"(\d+) tokens · ([\d.]+) tok/s")


def ask(waste: str, addr: str, prompt: list[int], tokens: int, env: dict, node: subprocess.Popen,
        session: str | None = "cold") -> str:
    """`waste generate` (on the node's session, if given); its stderr (the statistics)."""
    out = subprocess.run([waste, "generate", "--node", f"http://{addr}", "--tokens", ",".join(map(str, prompt)),
                          "--max-tokens", str(tokens), "--ignore-eos", "--temperature", "0"]
                         + (["--session", session] if session else []),
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        node.terminate()
        raise SystemExit(f"waste generate failed:\n{out.stderr[-2000:]}\nnode:\n{node.stderr.read()[-3000:]}")
    return out.stderr


def start_node(waste: str, store: pathlib.Path, threads: int, env: dict, preexec=None):
    """`waste node --model store` on a free loopback port: (process, address)."""
    node = subprocess.Popen(
        [waste, "node", "--model", str(store), "--listen", "127.0.0.1:0", "--ctx-size", "1024",
         "--max-sessions", "1", "--threads", str(threads)],
        preexec_fn=preexec, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    for line in node.stdout:
        m = re.search(r"listening on (\S+)", line)
        if m:
            return node, m.group(1)
    raise SystemExit(f"waste node did not start:\n{node.stderr.read()[-2000:]}")


def cold_waste(waste: str, store: pathlib.Path, cap: int, prompt: list[int], decode: int, threads: int,
               env: dict) -> dict:
    """`waste node` on `store` inside the cap (its default RAM budget reads
    the cgroup's limit), asked by `waste generate` from outside the cgroup."""
    drop_caches()
    cg = Cgroup(cap, f"waste-bench-waste-{os.getpid()}")
    node, addr = start_node(waste, store, threads, env, cg.enter)
    try:
        # One token first: the prompt and the load's last reads are not decode.
        ask(waste, addr, prompt, 1, env, node)
        b0 = read_bytes(node.pid)
        out = ask(waste, addr, prompt + [prompt[0]], decode, env, node)
        b1 = read_bytes(node.pid)
    finally:
        node.terminate()
        node.wait()
        cg.close()
    m = STATS.search(out)
    if not m:
        raise SystemExit(f"no statistics line from waste generate:\n{out[-2000:]}")
    return {"decode_tps": float(m.group(2)), "read_per_token": (b1 - b0) / decode}
