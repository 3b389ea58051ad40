#!/usr/bin/env bash
# UCX's tag latency on softib against UCX's own shared memory, measured in the same run:
# `ucx_perftest -t tag_lat -s 64` between two processes of one host, its median (the 50th
# percentile column of the Final line, one way, in microseconds) over
#   1. softib's shared-memory path: UCX_TLS=rc_verbs,ud_verbs under `softib run` (softib takes
#      shared memory between processes of one host by itself);
#   2. softib's UDP path: the same with SOFTIB_TRANSPORT=udp (the kernel's loopback);
#   3. UCX's own shared-memory transport, without softib: UCX_TLS=posix.
# Prints each figure and the ratios softib/UCX posix. Not a test: nothing is asserted.
#
#   bench/ucx-ratios.sh [ROUNDS] [ITERS]        (defaults 3 and 50000)
#
# Each of the three runs ROUNDS times, interleaved; the median of each one's medians is used.
# As root the pairs run in a network namespace of their own (softib-ucxr), else in this one.
# Environment: SOFTIB (the softib binary, default target/release/softib), SOFTIB_LIB_DIR as for
# softib run, PINS="A B" to pin the server to CPU A and the client to CPU B.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds="${1:-3}"
iters="${2:-50000}"
softib="${SOFTIB:-$PWD/target/release/softib}"
[ -x "$softib" ] || { echo "no $softib (cargo build --release)"; exit 1; }
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest (Debian: ucx-utils)"; exit 1; }

ns=()
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
    ip netns del softib-ucxr 2>/dev/null || true
    if ip netns add softib-ucxr && ip -n softib-ucxr link set lo up; then
        ns=(ip netns exec softib-ucxr)
        trap 'ip netns pids softib-ucxr | xargs -r kill -9; ip netns del softib-ucxr' EXIT
    fi
fi
read -r spin cpin <<<"${PINS:-- -}"
pin() { if [ "$1" = - ]; then echo ""; else echo "taskset -c $1"; fi; }
unset SOFTIB_BIND SOFTIB_TRANSPORT SOFTIB_STATS UCX_TLS
export SOFTIB_CONFIG=/nonexistent

# One pair of configuration $1: prints the client's median one-way latency (us).
pair() {
    local env=() wrap=()
    case "$1" in
    softib-shm) env=(UCX_TLS=rc_verbs,ud_verbs) wrap=("$softib" run --) ;;
    softib-udp) env=(UCX_TLS=rc_verbs,ud_verbs SOFTIB_TRANSPORT=udp) wrap=("$softib" run --) ;;
    ucx-posix) env=(UCX_TLS=posix) ;;
    esac
    local port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2046
    "${ns[@]}" env "${env[@]}" timeout 120 $(pin "$spin") "${wrap[@]}" ucx_perftest -p "$port" \
        >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    local out
    # shellcheck disable=SC2046
    out=$("${ns[@]}" env "${env[@]}" timeout 120 $(pin "$cpin") "${wrap[@]}" ucx_perftest \
        -p "$port" 127.0.0.1 -t tag_lat -s 64 -n "$iters" 2>&1) || true
    wait "$server" || true
    echo "$out" | awk '/^Final:/ { print $3; found = 1 } END { if (!found) print "nan" }'
}

median() { tr ' ' '\n' | grep -v '^$' | grep -v nan | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "ucx_perftest -t tag_lat -s 64 -n $iters, $rounds rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A runs
for r in $(seq 1 "$rounds"); do
    for c in softib-shm softib-udp ucx-posix; do
        v=$(pair "$c")
        runs[$c]+="$v "
        echo "round $r: $c: $v us"
    done
done
shm=$(median <<<"${runs[softib-shm]}")
udp=$(median <<<"${runs[softib-udp]}")
posix=$(median <<<"${runs[ucx-posix]}")
printf 'median one-way latency: softib shared memory %s us, softib UDP %s us, UCX posix %s us\n' \
    "$shm" "$udp" "$posix"
awk -v s="$shm" -v u="$udp" -v p="$posix" 'BEGIN {
    if (p > 0 && s == s + 0 && u == u + 0)
        printf "ratios: softib shared memory / UCX posix %.2fx, softib UDP / UCX posix %.2fx, softib UDP / softib shared memory %.2fx\n", s / p, u / p, u / s
    else print "ratios: n/a (a run failed)" }'
