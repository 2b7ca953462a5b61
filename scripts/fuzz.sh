#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ under libFuzzer (cargo-fuzz), one after the
# other, for SECONDS each (default 60) or at most RUNS executions each,
# whichever comes first. The stable toolchain is used with RUSTC_BOOTSTRAP=1
# (cargo-fuzz needs -Z flags; no nightly is installed). Builds with
# AddressSanitizer and debug assertions, so overflow is a crash too.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [RUNS_PER_TARGET]
#   FUZZ_TARGETS="gguf safetensors" scripts/fuzz.sh 180
#   FUZZ_FLAGS="-max_len=4096" FUZZ_TARGETS=gguf scripts/fuzz.sh 1800 1000000
#
# New inputs go to fuzz/work/<target>/ (not checked in); the checked-in seeds
# in fuzz/corpus/<target>/ are read, never written. Crashes land in
# fuzz/artifacts/<target>/: fix them, keep the file, and the replay test
# (tests/tests/fuzz_replay.rs) runs it in the normal test suite from then on.
# A summary line per target (executions, seconds, crash or not) is appended to
# fuzz/work/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-60}"
runs="${2:--1}"
export RUSTC_BOOTSTRAP=1
# The path-based readers get each input through a scratch file: on tmpfs that
# costs microseconds, on a disk file system rewriting it can cost milliseconds.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

targets="${FUZZ_TARGETS:-$(cargo fuzz list)}"
cargo fuzz build --debug-assertions
mkdir -p work
status=0
for t in $targets; do
    mkdir -p "work/$t" "artifacts/$t"
    log="work/$t.log"
    echo "== $t: ${seconds}s or $runs runs" >&2
    rc=0
    cargo fuzz run --debug-assertions "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -runs="$runs" -print_final_stats=1 ${FUZZ_FLAGS:-} \
        >"$log" 2>&1 || rc=$?
    done_line="$(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1 || true)"
    execs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -n 1)"
    if [ "$rc" -ne 0 ]; then
        status=1
        echo "$(date -u +%FT%TZ) $t: CRASH after ${execs:-?} executions (exit $rc), see $log and artifacts/$t/" | tee -a work/summary.txt
        grep -E 'panicked|ERROR: (libFuzzer|AddressSanitizer)|Test unit written' "$log" | head -n 5 >&2 || true
    else
        echo "$(date -u +%FT%TZ) $t: ${execs:-?} executions, no crash (${done_line:-no Done line})" | tee -a work/summary.txt
    fi
done
exit "$status"
