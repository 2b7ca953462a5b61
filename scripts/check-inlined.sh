#!/usr/bin/env bash
# Fails if waste's release binary calls a SIMD intrinsic (core::arch) or
# libm's fmaf out of line from waste's own code, or keeps one of its
# closures of a few vector instructions out of line. An intrinsic inlines only
# into code compiled with its target feature; a closure or helper that
# inherits none and that LLVM does not inline becomes a function calling each
# intrinsic: results stay exact, so no equivalence test notices, but such a
# kernel ran 50x slower than its scalar reference (docs/BENCH.md, "Zen 3
# (AVX2 only): ... kernel closures out of line"). Needs objdump and nm
# (binutils, with gcc).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-target/release/waste}
if [ ! -x "$bin" ]; then
    echo "error: $bin is missing; build it first (cargo build --release -p waste)" >&2
    exit 1
fi
if ! command -v objdump >/dev/null 2>&1; then
    echo "error: objdump (binutils) is needed to check $bin" >&2
    exit 1
fi
# Prints an error and the symbols at fault (demangled where c++filt is
# installed), and fails.
fail() {
    printf '%s\n' "$2" >&2
    if command -v c++filt >/dev/null 2>&1; then
        echo "$1" | c++filt >&2
    else
        echo "$1" >&2
    fi
    exit 1
}
asm=$(objdump -d --no-show-raw-insn "$bin")
# Callers (the enclosing function's symbol) of an out-of-line intrinsic,
# where the caller is waste's code.
bad=$(echo "$asm" |
    awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 }
         /call/ && /core_arch[0-9]*x86/ { print fn " calls " $NF }' |
    grep -E '^<_(ZN|R)[A-Za-z0-9]*waste' | sort -u || true)
[ -z "$bad" ] || fail "$bad" "error: waste's code calls SIMD intrinsics or fmaf out of line (a closure or helper
without the target feature of its caller): make it an #[inline(always)] fn."
# A closure in a kernel that LLVM left out of line but into which it inlined
# the intrinsics: no call to an intrinsic, but a call per vector operation
# (an `array::map` over vectors in a tile ran 5x slower, docs/BENCH.md, "Q3_K_M
# prefill at 512 tokens on Zen 3"). Flags waste's closures of at most 16
# instructions that touch a ymm or zmm register.
tiny=$(echo "$asm" |
    awk 'function check() { if (n <= 16 && vec && fn ~ /waste/ && fn ~ /closure/) print fn }
         /^[0-9a-f]+ <.*>:$/ { check(); fn = $2; n = 0; vec = 0; next }
         /^ +[0-9a-f]+:/ {
             if ($2 == "int3" || $2 ~ /^nop/ || $2 ~ /^data16/ || $2 == "cs" || $2 == "xchg") next
             n++
             if ($0 ~ /%[yz]mm/) vec = 1
         }
         END { check() }' | sort -u || true)
[ -z "$tiny" ] || fail "$tiny" "error: waste's code has closures of a few vector instructions out of line (a closure
or array::map inherits no target feature): write the loop out, or an #[inline(always)] fn."
# f32::mul_add compiled without FMA is a call to libm's fmaf, often through
# a register objdump cannot name: any fmaf in the binary is one.
if nm "$bin" 2>/dev/null | grep -qE ' fmaf$'; then
    echo "error: $bin links libm's fmaf: an f32::mul_add compiled without the fma target feature" >&2
    exit 1
fi
echo "no out-of-line intrinsics in $bin"
