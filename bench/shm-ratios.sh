#!/usr/bin/env bash
# softib's same-host shared-memory path against its UDP path, measured in the same run on
# loopback (127.0.0.1 <-> 127.0.0.2), busy polling (every tool's default). Prints ratios, and
# one absolute figure the target names:
#
#   1. 64-byte round trip: `softib pingpong -s 64`, shm / udp                  target <= 0.3x
#   2. 64-byte message rate: `softib bench send -s 64`, shm / udp              target >= 2x
#   3. `softib bench write --lat --pingpong -s 64` median one-way latency over shm
#      (perftest's ib_write_lat method: half of each WRITE ping-pong turn)     target < 1.84 us
#      (Linux rxe's loopback ib_write_lat, a published figure), and shm / udp
#   4. `softib bench write --lat -s 64` median post-to-completion time (a WRITE and its ACK,
#      a whole round trip: not what ib_write_lat reports), shm / udp
#
# and, beside the message rate, the sending client's CPU time per message (user and system,
# from /usr/bin/time; busy polling, so its whole time) on each path, and what moving one
# cache line from one CPU to the other costs (bench/line-transfer.c, when a C compiler is
# present): the same instructions per message take the UDP path's sender into the kernel
# for every send, the shared-memory path's sender into cache lines the receiver's CPU reads.
#
# Each pair runs ROUNDS times (default 3), interleaved, and the median of each side is used.
#
# PIN=1 runs the server on CPU 0 and the client on CPU 1 (both transports), as
# bench/udp-ratios.sh does: unpinned, the two processes often share one CPU for part of a run,
# and the shared-memory rate of one build swung between 2.9 and 6.0 Mpps from run to run.
#
# Usage: bench/shm-ratios.sh [ROUNDS]     (env: SOFTIB=path/to/softib skips the build,
#                                          PIN=1 pins the two sides to CPUs 0 and 1)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
if [[ -z "${SOFTIB:-}" ]]; then
    cargo build --release -q -p softib
    SOFTIB="${CARGO_TARGET_DIR:-target}/release/softib"
fi
A=127.0.0.1
B=127.0.0.2
PORT=${SOFTIB_BENCH_PORT:-18771}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=bench/pin.sh
. bench/pin.sh

# run_pair TRANSPORT -- server args -- client args (the client's last argument: the server)
run_pair() {
    local t=$1
    shift 2
    local sargs=() cargs=()
    while [[ $1 != -- ]]; do sargs+=("$1"); shift; done
    shift
    cargs=("$@")
    ${PIN_SERVER[@]+"${PIN_SERVER[@]}"} timeout 120 "$SOFTIB" "${sargs[@]}" --transport "$t" >"$TMP/s" 2>&1 &
    local spid=$!
    sleep 0.3
    ${PIN_CLIENT[@]+"${PIN_CLIENT[@]}"} ${TIME[@]+"${TIME[@]}"} timeout 120 "$SOFTIB" "${cargs[@]:0:${#cargs[@]}-1}" --transport "$t" "${cargs[-1]}" >"$TMP/c" 2>&1 ||
        { echo "client failed:"; cat "$TMP/c" "$TMP/s"; exit 1; }
    wait "$spid" || { echo "server failed:"; cat "$TMP/s"; exit 1; }
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The client's user and system seconds, for the message-rate runs.
TIME=()
if [[ -x /usr/bin/time ]]; then
    TIME=(/usr/bin/time -f "%U %S" -o "$TMP/cpu")
fi
RATE_N=1000000

for t in shm udp; do : >"$TMP/rtt_$t"; : >"$TMP/rate_$t"; : >"$TMP/lat_$t"; : >"$TMP/wrtt_$t"; : >"$TMP/user_$t"; : >"$TMP/sys_$t"; done
for ((i = 0; i < ROUNDS; i++)); do
    for t in shm udp; do
        run_pair $t -- pingpong --bind $A -p $PORT -s 64 -n 20000 -- \
            pingpong --bind $B -p $PORT -s 64 -n 20000 $A
        awk '/usec\/iter/ {print $(NF-1)}' "$TMP/c" >>"$TMP/rtt_$t"
        : >"$TMP/cpu"
        run_pair $t -- bench send --bind $A -p $PORT --json -- \
            bench send --bind $B -p $PORT -s 64 -n $RATE_N --json $A
        jq -r .msg_rate_mpps "$TMP/c" >>"$TMP/rate_$t"
        if [[ -s "$TMP/cpu" ]]; then
            awk -v n=$RATE_N '{print $1 * 1e9 / n}' "$TMP/cpu" >>"$TMP/user_$t"
            awk -v n=$RATE_N '{print $2 * 1e9 / n}' "$TMP/cpu" >>"$TMP/sys_$t"
        fi
        run_pair $t -- bench write --lat --pingpong --bind $A -p $PORT --json -- \
            bench write --lat --pingpong --bind $B -p $PORT -s 64 -n 20000 --json $A
        jq -r .t_median_us "$TMP/c" >>"$TMP/lat_$t"
        run_pair $t -- bench write --lat --bind $A -p $PORT --json -- \
            bench write --lat --bind $B -p $PORT -s 64 -n 20000 --json $A
        jq -r .t_median_us "$TMP/c" >>"$TMP/wrtt_$t"
    done
done
for k in rtt rate lat wrtt user sys; do
    for t in shm udp; do
        declare "${k}_${t}=$(median <"$TMP/${k}_$t")"
    done
done
echo "== shared memory vs UDP, busy polling ($ROUNDS rounds, medians; load $(cut -d' ' -f1-3 /proc/loadavg))"
awk -v s="$rtt_shm" -v u="$rtt_udp" 'BEGIN {printf "pingpong 64 B round trip  shm/udp = %.2fx  (%.2f / %.2f us; target <= 0.3x)\n", s / u, s, u}'
awk -v s="$rate_shm" -v u="$rate_udp" 'BEGIN {printf "send 64 B message rate    shm/udp = %.2fx  (%.2f / %.2f Mpps; target >= 2x)\n", s / u, s, u}'
awk -v s="$lat_shm" -v u="$lat_udp" 'BEGIN {printf "write --lat --pingpong 64 B median one-way  shm %.2f us (target < 1.84 us, rxe loopback ib_write_lat); shm/udp = %.2fx\n", s, s / u}'
awk -v s="$wrtt_shm" -v u="$wrtt_udp" 'BEGIN {printf "write --lat 64 B median post to completion (WRITE + ACK)  shm %.2f us; shm/udp = %.2fx\n", s, s / u}'
if [[ -n "$user_shm" && -n "$user_udp" ]]; then
    awk -v us="$user_shm" -v ss="$sys_shm" -v uu="$user_udp" -v su="$sys_udp" 'BEGIN {printf "  the sending client'"'"'s CPU per message (busy polling: its whole time): shm %.0f ns user + %.0f system; udp %.0f user + %.0f system\n", us, ss, uu, su}'
fi
if cc -O2 -pthread -o "$TMP/line-transfer" bench/line-transfer.c 2>/dev/null &&
    lt=$("$TMP/line-transfer" 2>/dev/null); then
    echo "  one cache line crossing from one CPU to the other (bench/line-transfer.c, half a ping-pong): $lt ns"
fi
