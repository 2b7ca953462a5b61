#!/usr/bin/env bash
# Converts a downloaded release (a Hugging Face folder or cache snapshot, or
# a .gguf file) into a waste store, end to end:
#
#   1. `waste convert --dry-run` prices the conversion (output bytes, RAM the
#      backbone takes to run); the script refuses when the disk at OUT cannot
#      hold the output or this machine's RAM cannot hold the backbone;
#   2. `waste convert SRC OUT [flags]`, logged whole to OUT.convert.log while
#      the per-layer lines (and a line of bytes written every 30 s) show;
#      rerun with the same arguments, a killed conversion resumes;
#   3. `waste inspect OUT --verify`: every expert record's checksum and every
#      backbone tensor;
#   4. prints the commands that serve the store: `waste store`, `waste node`
#      and a `waste generate` call.
#
# Usage: scripts/convert.sh SRC OUT [waste convert flags...]
#   e.g. scripts/convert.sh ~/models/Qwen3-30B-A3B /nvme/qwen3-30b --experts q3
#   A `--dry-run` among the flags runs the checks and stops.
#
# Environment:
#   WASTE_BIN                  the waste binary (default: target/release/waste,
#                              built first with `cargo build --release -p waste`)
#   WASTE_CONVERT_LOG          the log file (default: OUT.convert.log)
#   WASTE_CONVERT_PROGRESS_SECS  seconds between "written" lines (default 30; 0: none)
#   WASTE_CONVERT_SKIP_RAM_CHECK=1  convert even when the backbone does not fit
#                              in this machine's RAM (the node will run elsewhere)
#   Testing knobs (they replace a measurement; leave them unset otherwise):
#   WASTE_CONVERT_FREE_BYTES   free bytes to assume at OUT instead of df's figure
#   WASTE_MEMINFO              a file to read instead of /proc/meminfo
#
# Exit status: 0 converted and verified (or a --dry-run passed its checks);
# 64 bad arguments; 73 not enough disk space, or OUT already holds a
# finished store; 69 not enough RAM; 70 the estimate could not be read;
# otherwise the status of the waste command that failed.
set -euo pipefail

usage() {
    cat >&2 <<'EOF'
usage: scripts/convert.sh SRC OUT [waste convert flags...]
  SRC  a Hugging Face release folder (or hub cache snapshot) or a .gguf file
  OUT  the store folder to create (must not exist, be empty, or hold an
       unfinished conversion of the same arguments)
  flags are passed to `waste convert` (see `waste convert --help`), e.g.
  --experts q3|q3-q4down|q4|q8|native  --backbone native|bf16|q8  --jobs N
EOF
    exit 64
}

case "${1:-}" in
-h | --help) usage ;;
esac
[ "$#" -ge 2 ] || usage
src="$1"
out="$2"
shift 2
case "$src$out" in
-*) usage ;;
esac
if [ -z "$src" ] || [ -z "$out" ]; then usage; fi
if [ ! -e "$src" ]; then
    echo "error: $src does not exist" >&2
    usage
fi
# OUT/ and OUT name the same folder; the log must not land inside it.
while [ "${#out}" -gt 1 ] && [ "${out%/}" != "$out" ]; do out="${out%/}"; done
log="${WASTE_CONVERT_LOG:-$out.convert.log}"
case "$log" in
"$out"/*)
    echo "error: the log $log would be inside $out (the converter needs the folder empty)" >&2
    exit 64
    ;;
esac

dry_run=0
args=()
for a in "$@"; do
    if [ "$a" = "--dry-run" ]; then dry_run=1; else args+=("$a"); fi
done

root="$(cd "$(dirname "$0")/.." && pwd)"
margin=$((64 << 20)) # the converter's DISK_MARGIN, and the node's smallest overhead

say() { echo "== $*"; }

# "1.66" "MiB" -> bytes, rounded up by half a printed digit (the estimate
# prints two decimals).
to_bytes() {
    awk -v v="$1" -v u="$2" 'BEGIN {
        m["B"] = 1; m["KiB"] = 1024; m["MiB"] = 1048576
        m["GiB"] = 1073741824; m["TiB"] = 1099511627776
        if (!(u in m) || v !~ /^[0-9.]+$/) exit 1
        if (u == "B") printf "%.0f\n", v; else printf "%.0f\n", (v + 0.005) * m[u]
    }'
}

human() {
    awk -v b="$1" 'BEGIN {
        split("B KiB MiB GiB TiB", u, " ")
        i = 1
        while (b >= 1024 && i < 5) { b /= 1024; i++ }
        if (i == 1) printf "%d B\n", b; else printf "%.2f %s\n", b, u[i]
    }'
}

# The waste binary: $WASTE_BIN, else a release build brought up to date.
find_waste() {
    if [ -n "${WASTE_BIN:-}" ]; then
        waste="$WASTE_BIN"
    elif command -v cargo >/dev/null 2>&1; then
        say "building waste (release)"
        if command -v python3 >/dev/null 2>&1; then
            (cd "$root" && python3 scripts/cargo-progress.py build --release -p waste --bin waste)
        else
            (cd "$root" && cargo build --release -p waste --bin waste)
        fi
        waste="$root/target/release/waste"
    else
        waste="$root/target/release/waste"
        echo "warning: cargo not found; using $waste as it is" >&2
    fi
    if [ ! -x "$waste" ]; then
        echo "error: $waste is not an executable waste binary" >&2
        exit 64
    fi
}

# Sets `total` (output bytes) and `ram` (backbone RAM) from a dry run, and
# refuses what the disk or the RAM cannot take.
check() {
    local dry rc=0
    say "estimate: waste convert --dry-run"
    dry="$("$waste" convert "$src" "$out" "${args[@]}" --dry-run 2>&1)" || rc=$?
    printf '%s\n' "$dry"
    local t r
    t="$(printf '%s\n' "$dry" | awk '$1 == "output:" { print $2, $3; exit }')"
    r="$(printf '%s\n' "$dry" | awk '$1 == "to" && $2 == "run:" { print $3, $4; exit }')"
    if [ "$rc" -ne 0 ]; then
        if printf '%s\n' "$dry" | grep -q "free; free some space"; then
            echo "error: not enough disk space for $out: waste convert refused (above)" >&2
            exit 73
        fi
        echo "error: waste convert --dry-run failed (exit $rc)" >&2
        exit "$rc"
    fi
    # shellcheck disable=SC2086 # "VALUE UNIT" splits into two arguments on purpose
    if [ -z "$t" ] || [ -z "$r" ] || ! total="$(to_bytes $t)" || ! ram="$(to_bytes $r)"; then
        echo "error: could not read the output size and RAM from the estimate above" >&2
        exit 70
    fi

    local probe="$out" free have=0 need
    while [ ! -e "$probe" ]; do probe="$(dirname "$probe")"; done
    if [ -n "${WASTE_CONVERT_FREE_BYTES:-}" ]; then
        free="$WASTE_CONVERT_FREE_BYTES"
        echo "   free space at $probe: $(human "$free") (WASTE_CONVERT_FREE_BYTES, a testing knob)"
    else
        free="$(df -Pk "$probe" | awk 'NR == 2 { printf "%.0f\n", $4 * 1024 }')" || free=""
    fi
    if [ -z "$free" ]; then
        echo "warning: cannot read the free space at $probe; the converter checks it again" >&2
        free=$((1 << 62))
    fi
    if [ -d "$out" ]; then
        # Files a resumed conversion already wrote count as done (as the converter counts them).
        have="$(du -sb "$out" | cut -f1)"
    fi
    need=$((total > have ? total - have + margin : margin))
    if [ "$need" -gt "$free" ]; then
        echo "error: not enough disk space: $out needs $(human "$need") more (the store is $(human "$total"), $(human "$have") already written, 64 MiB margin) but $probe has $(human "$free") free; free some space or pick another folder" >&2
        exit 73
    fi
    say "disk: $(human "$need") needed, $(human "$free") free at $probe"

    local meminfo="${WASTE_MEMINFO:-/proc/meminfo}" mem_total mem_avail want budget msg
    if [ ! -r "$meminfo" ]; then
        echo "warning: cannot read $meminfo; skipping the RAM check" >&2
        return 0
    fi
    mem_total="$(awk '$1 == "MemTotal:" { printf "%.0f\n", $2 * 1024 }' "$meminfo")"
    mem_avail="$(awk '$1 == "MemAvailable:" { printf "%.0f\n", $2 * 1024 }' "$meminfo")"
    want=$((ram + margin))
    # The node's default RAM budget: 80 % of MemAvailable (waste node --ram-budget).
    budget=$((${mem_avail:-0} * 8 / 10))
    if [ -n "$mem_total" ] && [ "$want" -gt "$mem_total" ]; then
        msg="running this model needs at least $(human "$want") of RAM (the backbone's $(human "$ram") plus 64 MiB; KV cache and expert buffers come on top), more than this machine's $(human "$mem_total") (MemTotal)"
        if [ "${WASTE_CONVERT_SKIP_RAM_CHECK:-0}" != 1 ]; then
            echo "error: $msg; --backbone bf16 halves an f32, f16 or fp8 backbone (q8 saves disk, not RAM); or set WASTE_CONVERT_SKIP_RAM_CHECK=1 if the node runs on a bigger machine" >&2
            exit 69
        fi
        echo "warning: $msg (WASTE_CONVERT_SKIP_RAM_CHECK=1: converting anyway)" >&2
    elif [ -n "$mem_avail" ] && [ "$want" -gt "$budget" ]; then
        echo "warning: the backbone needs $(human "$ram") of RAM; the node's default budget (80 % of MemAvailable) is $(human "$budget") right now: free memory before starting it, or give it --ram-budget" >&2
    fi
    say "RAM: the backbone takes $(human "$ram") to run; this machine has $(human "${mem_total:-0}") (MemTotal), $(human "${mem_avail:-0}") available"
}

# Prints bytes written under OUT every $1 seconds, until killed. The sleep
# holds no copy of the log pipe, and dies with the loop, so stopping the
# monitor never keeps the log open.
monitor() {
    local every="$1" start=$SECONDS now pid=""
    trap 'kill "$pid" 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$every" >/dev/null 2>&1 &
        pid=$!
        wait "$pid"
        now="$(du -sb "$out" 2>/dev/null | cut -f1)" || now=0
        echo "   written $(human "${now:-0}") of about $(human "$total") after $((SECONDS - start)) s"
    done
}

main() {
    echo "== $(date -u '+%Y-%m-%dT%H:%M:%SZ') scripts/convert.sh $src $out ${args[*]}"
    find_waste
    if [ -f "$out/manifest.json" ]; then
        echo "error: $out already holds a finished store (manifest.json); check it with: $waste inspect $out --verify; or remove it" >&2
        exit 73
    fi
    check
    if [ "$dry_run" = 1 ]; then
        say "dry run: the checks passed; nothing written"
        return 0
    fi

    say "converting into $out (log: $log)"
    local every="${WASTE_CONVERT_PROGRESS_SECS:-30}" mon=""
    if [ "$every" -gt 0 ]; then
        monitor "$every" &
        mon=$!
        # shellcheck disable=SC2064 # expand $mon now
        trap "kill $mon 2>/dev/null || true" EXIT
    fi
    "$waste" convert "$src" "$out" "${args[@]}"
    if [ -n "$mon" ]; then
        kill "$mon" 2>/dev/null || true
        wait "$mon" 2>/dev/null || true
        trap - EXIT
    fi

    say "verifying: waste inspect --verify"
    "$waste" inspect "$out" --verify

    local dir bin q_bb q_ex example
    dir="$(cd "$out" && pwd -P)"
    bin="$(printf '%q' "$waste")"
    q_ex="$(printf '%q' "$dir/experts")"
    q_bb="$(printf '%q' "$dir/backbone")"
    example="$bin generate --node http://127.0.0.1:50052 --prompt 'What is the capital of France?' --max-tokens 64"
    if [ -f "$dir/backbone/chat_template.jinja" ] || [ -f "$dir/backbone/chat_template.json" ] ||
        grep -qs '"chat_template"' "$dir/backbone/tokenizer_config.json"; then
        example="$bin generate --node http://127.0.0.1:50052 --prompt 'What is the capital of France?' --chat --max-tokens 64"
    fi
    say "done: $dir is a verified store"
    cat <<EOF

Start the two daemons on this store (two terminals; or two machines: copy
experts/ to the one with the NVMe disk, backbone/ to the compute node and
point --store-addr at the first):

  $bin store --experts $q_ex --listen 127.0.0.1:50051
  $bin node --backbone $q_bb --store-addr http://127.0.0.1:50051 --listen 127.0.0.1:50052

(or one daemon that reads the experts itself:
  $bin node --backbone $q_bb --experts $q_ex --listen 127.0.0.1:50052)

Then ask it something:

  $example
EOF
    if [ ! -f "$dir/backbone/tokenizer.json" ]; then
        cat <<EOF

Note: this store has no tokenizer.json, so the node cannot tokenize a prompt;
copy the release's tokenizer files into $q_bb, or run token ids in process:
  $bin run --model $(printf '%q' "$dir") --tokens 1,2,3 --max-tokens 16
EOF
    fi
}

mkdir -p "$(dirname "$log")"
main 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
