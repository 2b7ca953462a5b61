#!/usr/bin/env bash
# The test command of the README: formatting, lints, the crate-dependency rules
# of STYLE.md 4.1 and the whole test suite (one release build, shared by the
# heavy numeric tests). Needs ../shared/fixtures beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings

echo "== crate dependency rules"
scripts/check-deps.sh

echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --release --no-fail-fast
    # nextest does not run doctests
    cargo test --workspace --release --doc
else
    cargo test --workspace --release --no-fail-fast
fi
