#!/usr/bin/env python3
"""Runs `cargo build ARGS...` and shows one progress line with an ETA.

cargo's own bar counts crates, but a first build spends most of its time
in a few large ones (tokio, tonic, tokenizers, waste's own crates), so a
count says little about the time left. Here each crate is weighted by the
bytes of Rust source its targets compile (cargo metadata, before the build
starts), plus a fixed cost per crate for rustc's start-up; the share of
weight done so far and the time elapsed give the estimate. Diagnostics are
rendered to stderr as usual; the exit status is cargo's.

Usage: scripts/cargo-progress.py build --release -p waste --bin waste
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time

PER_CRATE_BYTES = 40_000  # rustc's start-up and codegen floor, in source-byte units
SOURCE_CAP = 4_000_000  # generated or vendored sources compile faster per byte


def source_bytes(root):
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".rs"):
                try:
                    total += os.path.getsize(os.path.join(folder, name))
                except OSError:
                    pass
    return min(total, SOURCE_CAP)


def package_weights(cargo_args):
    """Weight of every package the requested build can compile, by id."""
    selected = []
    for flag, value in zip(cargo_args, cargo_args[1:]):
        if flag in ("-p", "--package"):
            selected.append(value)
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--filter-platform", host_triple()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    meta = json.loads(out)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    roots = [i for i in meta["workspace_members"] if not selected or packages[i]["name"] in selected]
    seen, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    weights = {}
    for pid in seen:
        folders = {os.path.dirname(t["src_path"]) for t in packages[pid]["targets"]
                   if not set(t["kind"]) & {"test", "bench", "example"}}
        weights[pid] = PER_CRATE_BYTES + sum(source_bytes(f) for f in folders)
    return weights


def host_triple():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("host: "):
            return line[len("host: "):]
    raise RuntimeError("rustc -vV names no host triple")


def pump(stream, out):
    for line in stream:
        out.put(line)
    out.put(None)


def clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def main():
    cargo_args = sys.argv[1:]
    try:
        weights = package_weights(cargo_args)
    except (OSError, subprocess.CalledProcessError, RuntimeError, ValueError, KeyError) as err:
        print(f"   (no progress estimate: {err})", file=sys.stderr)
        return subprocess.call(["cargo", *cargo_args])
    total = sum(weights.values())
    tty = sys.stderr.isatty()
    proc = subprocess.Popen(
        ["cargo", *cargo_args, "--message-format=json-render-diagnostics", "--quiet"],
        stdout=subprocess.PIPE,
        text=True,
    )
    # A large crate can compile for minutes without a message: a reader
    # thread feeds a queue so the line keeps ticking in between.
    messages = queue.Queue()
    threading.Thread(target=pump, args=(proc.stdout, messages), daemon=True).start()
    start = time.monotonic()
    done, fresh_weight, built_weight, last_print = set(), 0, 0, 0.0
    interval = 1.0 if tty else 15.0
    while True:
        try:
            line = messages.get(timeout=interval)
        except queue.Empty:
            line = ""
        if line is None:
            break
        try:
            msg = json.loads(line) if line else {}
        except ValueError:
            msg = {}
        if msg.get("reason") == "compiler-artifact":
            pid = msg["package_id"]
            if "custom-build" not in msg["target"]["kind"] and pid not in done:
                done.add(pid)
                # Crates already built arrive at once and say nothing of the rate.
                if msg.get("fresh", False):
                    fresh_weight += weights.get(pid, PER_CRATE_BYTES)
                else:
                    built_weight += weights.get(pid, PER_CRATE_BYTES)
        now = time.monotonic()
        if now - last_print < interval or built_weight == 0:
            continue
        last_print = now
        elapsed = now - start
        share = min((fresh_weight + built_weight) / total, 0.99)
        to_build = max(total - fresh_weight, 1)
        left = ""
        if built_weight / to_build >= 0.02:
            remaining = max(to_build - built_weight, 0)
            left = f" · about {clock(elapsed * remaining / built_weight)} left"
        text = f"   building: {len(done)}/{len(weights)} crates · {share:.0%} of the source · {clock(elapsed)}{left}"
        if tty:
            sys.stderr.write("\r\033[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
    code = proc.wait()
    if tty:
        sys.stderr.write("\r\033[K")
    return code


if __name__ == "__main__":
    sys.exit(main())
