#!/usr/bin/env bash
# Enforces the forbidden dependency edges of STYLE.md 4.1 on the resolved
# normal-dependency tree of each crate. Prints every violation, exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
# crate : names that must not appear in its normal dependency tree
rules=(
    "waste-family:tokio tonic waste-kernels waste-proto waste-format waste-convert waste-model waste-store waste-node"
    "waste-kernels:tokio tonic waste-proto waste-format waste-convert waste-model waste-store waste-node memmap2"
    "waste-model:tokio tonic waste-proto waste-convert waste-format waste-store waste-node"
    "waste-proto:waste-kernels waste-model waste-convert waste-format waste-store waste-node"
    "waste-format:tokio tonic waste-model waste-convert waste-store waste-node"
    "waste-convert:tokio tonic waste-model waste-store waste-node"
    "waste-store:waste-node waste-model"
    "waste-node:waste-store"
)
# Benchmarks are a leaf: no production crate pulls them into its normal tree.
for crate in waste-kernels waste-family waste-format waste-convert waste-model waste-proto waste-store waste-node; do
    rules+=("$crate:waste-bench")
done
members=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
for rule in "${rules[@]}"; do
    crate=${rule%%:*}
    banned=${rule#*:}
    case " $members " in *" $crate "*) ;; *) continue ;; esac
    tree=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    for name in $banned; do
        if grep -qx "$name" <<<"$tree"; then
            echo "forbidden dependency: $crate -> $name" >&2
            fail=1
        fi
    done
done
# Nothing depends on the binary crate.
if cargo tree --workspace -e normal -i waste --prefix none 2>/dev/null | tail -n +2 | grep -q .; then
    echo "forbidden dependency: something depends on bin/waste" >&2
    fail=1
fi
# kernels does no IO (STYLE 4.1).
if grep -rn 'std::fs\|fs_err' crates/waste-kernels/src >/dev/null 2>&1; then
    echo "forbidden: crates/waste-kernels uses the file system" >&2
    grep -rn 'std::fs\|fs_err' crates/waste-kernels/src >&2
    fail=1
fi
[ "$fail" = 0 ] && echo "dependency rules hold"
exit "$fail"
