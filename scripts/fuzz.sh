#!/usr/bin/env bash
# Builds softib's fuzz targets (fuzz/, cargo-fuzz + libFuzzer) and runs each for a bounded time.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 10
#   TARGET              default: every target `cargo fuzz list` shows
#
# Runs on the stable toolchain: coverage instrumentation (-Cpasses=sancov-module and the
# sanitizer-coverage LLVM options) is stable, and the parsers are `forbid(unsafe_code)`, so no
# sanitizer is used by default. SOFTIB_FUZZ_SANITIZER=address turns AddressSanitizer on, which
# needs -Zsanitizer and so RUSTC_BOOTSTRAP=1 on a stable compiler (set here for cargo-fuzz only).
#
# Each target starts from fuzz/corpus/<target> (kept between runs, not committed) and from seeds
# cut out of ../shared/testvectors/rxe. A crash, panic, timeout (10 s per input) or
# out-of-memory is a failure; so is a target that does not build. Crashing inputs are saved in
# fuzz/artifacts/<target>/ and the reproduce command is printed. Exit status: 0 when every
# target built and ran clean.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-10}"
[ "$#" -gt 0 ] && shift
case "$secs" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET must be a number, got '$secs'" >&2; exit 2 ;; esac

sanitizer="${SOFTIB_FUZZ_SANITIZER:-none}"
cargo_fuzz=(cargo fuzz)
if [ "$sanitizer" != none ]; then
    cargo_fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed; run scripts/install-deps.sh" >&2
    exit 1
fi

cd "$repo/fuzz"
target_dir="${CARGO_TARGET_DIR:-$repo/fuzz/target}"
export CARGO_TARGET_DIR="$target_dir"
logs="$target_dir/fuzz-logs"
seeds="$target_dir/fuzz-seeds"
mkdir -p "$logs"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# Seeds from the test vectors (regenerated each run; cheap).
vectors="$repo/../shared/testvectors/rxe"
rm -rf "$seeds"
mkdir -p "$seeds"
if compgen -G "$vectors/*.pcap" >/dev/null; then
    python3 "$repo/scripts/fuzz-seeds.py" "$vectors" "$seeds" >"$logs/seeds.log"
else
    echo "fuzz.sh: no test vectors in $vectors; starting from empty corpora"
fi

build() { "${cargo_fuzz[@]}" build --sanitizer "$sanitizer" "$@"; }

declare -A state
start=$(date +%s)
echo "fuzz.sh: building ${#targets[@]} targets (sanitizer: $sanitizer)"
if [ "$#" -eq 0 ] && build >"$logs/build.log" 2>&1; then
    for t in "${targets[@]}"; do state[$t]=built; done
else
    # Find which targets build: a module that is not there yet breaks only its own target.
    for t in "${targets[@]}"; do
        if build "$t" >"$logs/build-$t.log" 2>&1; then
            state[$t]=built
        else
            state[$t]="BUILD FAILED"
            echo "fuzz.sh: $t does not build:"
            grep -E '^(error|warning: unused)' -A 3 "$logs/build-$t.log" | head -n 12 | sed 's/^/    /'
        fi
    done
fi
echo "fuzz.sh: build took $(( $(date +%s) - start )) s"

failed=0
passed=0
printf '%-16s %-14s %12s %8s %8s\n' target result runs cov corpus
for t in "${targets[@]}"; do
    if [ "${state[$t]}" != built ]; then
        printf '%-16s %-14s\n' "$t" "${state[$t]}"
        failed=$((failed + 1))
        continue
    fi
    corpus="$repo/fuzz/corpus/$t"
    mkdir -p "$corpus" "$seeds/$t"
    log="$logs/run-$t.log"
    if "${cargo_fuzz[@]}" run --sanitizer "$sanitizer" "$t" "$corpus" "$seeds/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        result=ok
        passed=$((passed + 1))
    else
        result=FAILED
        failed=$((failed + 1))
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)"
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1 || true)"
    cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")"
    corp="$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$done_line")"
    printf '%-16s %-14s %12s %8s %8s\n' "$t" "$result" "${runs:--}" "${cov:--}" "${corp:--}"
    if [ "$result" != ok ]; then
        echo "---- $t: end of $log"
        grep -vE '^(#[0-9]+|INFO:|MS:|[[:space:]]*$)' "$log" | tail -n 40 | sed 's/^/    /'
        echo "----"
    fi
done
echo "fuzz.sh: ${#targets[@]} targets, ${secs} s each, $(( $(date +%s) - start )) s in all"
echo "fuzz: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
    echo "fuzz.sh: FAILED (logs in $logs)"
    exit 1
fi
