#!/usr/bin/env bash
# The test command of the README: formatting, lints, the crate-dependency rules
# of STYLE.md 4.1 and the whole test suite (one release build, shared by the
# heavy numeric tests). Needs ../shared/fixtures beside the checkout, Rust
# and Python 3; installs the Python packages and fetches the model file the
# tests use on first run (scripts/test-env.sh), then works offline.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d ../shared/fixtures ]; then
    echo "error: ../shared/fixtures is missing; the tests read the reference fixtures from there" >&2
    exit 1
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: no Rust toolchain (cargo) on PATH; this project needs Rust >= 1.88" >&2
    exit 1
fi
# rustfmt and clippy come with rustup's default profile; add them where not.
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        rustup component add "$component"
    fi
done
# shellcheck source=scripts/test-env.sh
source scripts/test-env.sh
waste_test_env

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

echo "== kernels inlined"
scripts/check-inlined.sh
