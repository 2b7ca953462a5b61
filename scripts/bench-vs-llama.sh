#!/usr/bin/env bash
# The side by side with llama.cpp from a clean checkout: builds waste
# (release), installs a pinned llama-cpp-python, built natively for this
# CPU, with numpy and gguf into the ignored `target/llama-venv` (once; the
# build of llama.cpp takes several minutes, with cmake from PyPI where the
# machine has none), then runs
# scripts/bench-vs-llama.py with that Python. Arguments go to the script;
# `--work` defaults to target/bench-vs-llama. A benchmark only: waste never
# depends on llama.cpp.
#
#   scripts/bench-vs-llama.sh --presets Q4_K_M,Q3_K_M --runs 5 --decode 64
#   scripts/bench-vs-llama.sh --cold --cold-only      # root: cgroup cap, page cache dropped
#
# Where llama.cpp's AMX path crashes (llama.cpp issue 20824) the warm runs
# are repeated with its extra buffer types off, and the table says so.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_PACKAGES=(llama-cpp-python==0.3.36 numpy==2.4.6 gguf==0.17.1)
venv=target/llama-venv
stamp="$venv/.waste-packages"
want="${LLAMA_PACKAGES[*]} native"

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: the benchmark needs Python 3 (python3 on PATH)" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python3" ]; then
    mkdir -p target
    python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "== building ${LLAMA_PACKAGES[*]} into $venv (llama.cpp for this CPU: several minutes, once)"
    CMAKE_ARGS="-DGGML_NATIVE=ON" FORCE_CMAKE=1 \
        "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
        --no-binary llama-cpp-python "${LLAMA_PACKAGES[@]}"
    echo "$want" >"$stamp"
fi

echo "== cargo build --release -p waste"
cargo build --release -p waste --quiet

args=("$@")
has_work=0
for a in "${args[@]}"; do
    [ "$a" = "--work" ] && has_work=1
done
[ "$has_work" = 1 ] || args+=(--work target/bench-vs-llama)

set +e
"$venv/bin/python3" scripts/bench-vs-llama.py --waste target/release/waste "${args[@]}"
rc=$?
set -e
# A crash (killed by a signal) on a CPU with AMX: llama.cpp's AMX buffers.
if [ "$rc" -gt 128 ] && grep -q -w amx_int8 /proc/cpuinfo; then
    echo "== llama.cpp crashed (signal $((rc - 128))) on this AMX CPU (llama.cpp issue 20824):" \
        "running again without its extra buffer types" >&2
    exec "$venv/bin/python3" scripts/bench-vs-llama.py --waste target/release/waste "${args[@]}" --no-extra-bufts
fi
exit "$rc"
