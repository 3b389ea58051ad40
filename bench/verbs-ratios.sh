#!/usr/bin/env bash
# The C boundary must not cost what the engine saved: Debian's perftest on softib's
# libibverbs.so.1 against softib's own tools on the same engine, measured in the same run on
# loopback, baseline and library back to back in each of ROUNDS rounds (default 7; the one
# going first alternates), each target decided on the median of the rounds' library / baseline
# ratios, the medians of the figures printed beside. Prints ratios, never bare times:
#
#   1. message rate: `ib_send_bw -s 64` (MsgRate) / `softib bench send -s 64`  target >= 0.9x
#   2. bandwidth:    `ib_write_bw -s 65536` (BW average MiB/s)
#                    / `softib bench write -s 65536` (bw_avg_mibps)           target >= 0.9x
#      beside it, without a target: `ib_send_bw -s 64 -t 1024 -Q 64` / the same baseline
#      (perftest's default pipeline, 128 WRs in flight and one completion per 100, makes the
#      rate a matter of round trips; with a deep one it shows what the library can carry)
#   3. latency:      `ib_write_lat -s 64` (t_typical, the median)
#                    / `softib bench write --lat --pingpong -s 64` (t_median) target <= 1.1x
#
# What each side does: both keep 128 WRs outstanding for bandwidth (perftest -t 128, softib
# bench --tx-depth 128); perftest asks a completion of every 100th WR (CQ moderation 100),
# softib bench of every 16th. Both latencies are half of a ping-pong round trip in which each
# side notices the peer's WRITE in memory and answers (perftest's method; softib bench
# --pingpong busy-polls its engine between looks). The engine is the same; on the library side
# its progress thread serves packets that arrive while perftest spins on memory. Before
# 2026-11-26 the baseline was `write --lat` without --pingpong: one WRITE's round trip to its
# ACK, about twice the one-way figure, which made the ratio look about half what it is.
#
# Beside the latency ratio it prints its floor: one blocking thread wake-up on this machine
# (bench/wakeup.c, eventfd ping-pong between two threads) against softib bench's round trip.
#
# Usage: bench/verbs-ratios.sh [ROUNDS]   (env: SOFTIB=path/to/softib skips the build;
#                                          ITERS_RATE, ITERS_BW, ITERS_LAT)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
if [[ -z "${SOFTIB:-}" ]]; then
    cargo build --release -q -p softib -p softib-verbs
    SOFTIB="${CARGO_TARGET_DIR:-target}/release/softib"
fi
LIBDIR=$(dirname "$SOFTIB")
[[ -f $LIBDIR/libibverbs.so ]] || { echo "no $LIBDIR/libibverbs.so"; exit 1; }
command -v ib_send_bw >/dev/null || { echo "SKIPPED: perftest is not installed"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ln -s "$(cd "$LIBDIR" && pwd)/libibverbs.so" "$TMP/libibverbs.so.1"
ITERS_RATE=${ITERS_RATE:-500000}
ITERS_BW=${ITERS_BW:-20000}
ITERS_LAT=${ITERS_LAT:-20000}
PORT=19700

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# softib bench: server on 127.0.0.1, client on 127.0.0.2; prints the client's JSON field.
softib_pair() { # field args...
    local field=$1
    shift
    PORT=$((PORT + 1))
    timeout 120 "$SOFTIB" bench "$@" -p "$PORT" --json --bind 127.0.0.1 >"$TMP/s.out" 2>&1 &
    local spid=$!
    sleep 0.3
    timeout 120 "$SOFTIB" bench "$@" -p "$PORT" --json --bind 127.0.0.2 127.0.0.1 >"$TMP/c.out" 2>&1 \
        || { echo "softib bench failed:"; cat "$TMP/c.out" "$TMP/s.out"; exit 1; }
    wait "$spid" || true
    grep -o "\"$field\":[0-9.e+-]*" "$TMP/c.out" | head -n 1 | cut -d: -f2
}

# perftest on softib's library (no configuration: each process binds its own 127.0.0.x);
# prints column COL of the client's result line.
perftest_pair() { # col tool args...
    local col=$1 tool=$2
    shift 2
    PORT=$((PORT + 1))
    LD_LIBRARY_PATH=$TMP SOFTIB_CONFIG=/nonexistent timeout 120 "$tool" "$@" -p "$PORT" >"$TMP/s.out" 2>&1 &
    local spid=$!
    for _ in $(seq 1 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.02; done
    LD_LIBRARY_PATH=$TMP SOFTIB_CONFIG=/nonexistent timeout 120 "$tool" "$@" -p "$PORT" 127.0.0.1 >"$TMP/c.out" 2>&1 \
        || { echo "$tool failed:"; cat "$TMP/c.out" "$TMP/s.out"; exit 1; }
    wait "$spid" || true
    awk -v c="$col" '/^ *[0-9]+ +[0-9]+ +[0-9.]+/ {print $c; exit}' "$TMP/c.out"
}

: >"$TMP/rate_b"; : >"$TMP/rate_l"; : >"$TMP/rate_d"; : >"$TMP/bw_b"; : >"$TMP/bw_l"; : >"$TMP/lat_b"; : >"$TMP/lat_l"
# Each measure's baseline and library runs.
base_rate() { softib_pair msg_rate_mpps send -s 64 -n "$ITERS_RATE" --tx-depth 128 >>"$TMP/rate_b"; }
lib_rate() {
    perftest_pair 5 ib_send_bw -s 64 -n "$ITERS_RATE" -t 128 >>"$TMP/rate_l"
    perftest_pair 5 ib_send_bw -s 64 -n "$ITERS_RATE" -t 1024 -Q 64 >>"$TMP/rate_d"
}
base_bw() { softib_pair bw_avg_mibps write -s 65536 -n "$ITERS_BW" --tx-depth 128 >>"$TMP/bw_b"; }
lib_bw() { perftest_pair 4 ib_write_bw -s 65536 -n "$ITERS_BW" -t 128 >>"$TMP/bw_l"; }
base_lat() { softib_pair t_median_us write --lat --pingpong -s 64 -n "$ITERS_LAT" >>"$TMP/lat_b"; }
lib_lat() { perftest_pair 5 ib_write_lat -s 64 -n "$ITERS_LAT" >>"$TMP/lat_l"; }
# A round: the baseline and the library runs of each measure back to back, the baseline first
# in even rounds and last in odd ones.
for ((i = 0; i < ROUNDS; i++)); do
    for m in rate bw lat; do
        if ((i % 2)); then "lib_$m"; "base_$m"; else "base_$m"; "lib_$m"; fi
    done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
# paired LIB BASE: the median of the rounds' LIB / BASE ratios.
paired() { printf '%.2f\n' "$(paste -d' ' "$TMP/$1" "$TMP/$2" | awk '{ print $1 / $2 }' | median)"; }
verdict() { # ratio op target
    awk -v r="$1" -v op="$2" -v t="$3" 'BEGIN {
        ok = (op == ">=") ? (r >= t) : (r <= t); print (ok ? "PASS" : "MISS") }'
}
rb=$(median <"$TMP/rate_b"); rl=$(median <"$TMP/rate_l"); rd=$(median <"$TMP/rate_d")
bb=$(median <"$TMP/bw_b"); bl=$(median <"$TMP/bw_l")
lb=$(median <"$TMP/lat_b"); ll=$(median <"$TMP/lat_l")
r1=$(paired rate_l rate_b); r2=$(paired bw_l bw_b); r3=$(paired lat_l lat_b)
echo "softib's libibverbs.so.1 under perftest vs softib bench, $ROUNDS rounds, median of the rounds' ratios (ratio of the medians in brackets)"
printf '  %-58s %6sx  target >= 0.9x  %s  (%sx)\n' "message rate  ib_send_bw -s 64 / softib bench send -s 64" "$r1" "$(verdict "$r1" ">=" 0.9)" "$(ratio "$rl" "$rb")"
printf '  %-58s %6sx  (no target: perftest with a deep pipeline; %sx)\n' "message rate  ib_send_bw -s 64 -t 1024 -Q 64 / softib bench" "$(paired rate_d rate_b)" "$(ratio "$rd" "$rb")"
printf '  %-58s %6sx  target >= 0.9x  %s  (%sx)\n' "bandwidth     ib_write_bw -s 65536 / softib bench write" "$r2" "$(verdict "$r2" ">=" 0.9)" "$(ratio "$bl" "$bb")"
printf '  %-58s %6sx  target <= 1.1x  %s  (%sx)\n' "latency       ib_write_lat -s 64 / bench write --lat --pingpong" "$r3" "$(verdict "$r3" "<=" 1.1)" "$(ratio "$ll" "$lb")"
# The floor under the latency ratio: one blocking thread wake-up, measured now.
if cc -O2 -pthread -o "$TMP/wakeup" bench/wakeup.c 2>/dev/null; then
    w=$("$TMP/wakeup" 20000)
    printf '  %-58s %6sx  (%s us per wake-up; %s us softib bench one-way)\n' \
        "one thread wake-up / bench write --lat --pingpong" "$(ratio "$w" "$lb")" "$w" "$lb"
fi
if [[ ${VERBOSE:-0} == 1 ]]; then
    echo "  samples, round by round (baseline | library; odd rounds ran the library first):"
    paste "$TMP/rate_b" "$TMP/rate_l" "$TMP/rate_d" | sed 's/^/    Mpps  /'
    paste "$TMP/bw_b" "$TMP/bw_l" | sed 's#^#    MiB/s #'
    paste "$TMP/lat_b" "$TMP/lat_l" | sed 's/^/    us    /'
fi
