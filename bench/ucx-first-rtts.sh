#!/usr/bin/env bash
# The first round trips of new UCX connections on softib, against the later ones.
#
#   bench/ucx-first-rtts.sh [RUNS] [ITERS]        (defaults 10 and 3000)
#
# Builds bench/ucp-pingpong.c (libucx-dev), then RUNS times starts a pair of them under
# `softib run` (server, then a client towards 127.0.0.1), each pair a new connection, and
# prints per run: the first round trip (the connection's wire-up), round trips 1..9, the median
# of those after the tenth, the worst of 1..9 against that median, and how many after the
# tenth took more than 10x the median. Environment: UCX_TLS (default rc_verbs,ud_verbs),
# SOFTIB (the softib binary, default target/release/softib), SOFTIB_LIB_DIR as for softib run,
# PINS="A B" to pin the server to CPU A and the client to CPU B (taskset), NICE=N to run both
# at that nice value (negative values need root), VERBOSE=1 to keep each run's round trips in
# /tmp/ucx-first-rtts.<run>.txt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs="${1:-10}"
iters="${2:-3000}"
softib="${SOFTIB:-$PWD/target/release/softib}"
export UCX_TLS="${UCX_TLS:-rc_verbs,ud_verbs}"
[ -x "$softib" ] || { echo "no $softib (cargo build --release)"; exit 1; }
[ -f /usr/include/ucp/api/ucp.h ] || { echo "no <ucp/api/ucp.h> (Debian: libucx-dev)"; exit 1; }
exe="$(mktemp -d)/ucp-pingpong"
cc -O2 -o "$exe" bench/ucp-pingpong.c -lucp -lucs

read -r spin cpin <<<"${PINS:-- -}"
pin() { if [ "$1" = - ]; then echo ""; else echo "taskset -c $1"; fi; }
nice_cmd=""
[ -n "${NICE:-}" ] && nice_cmd="nice -n $NICE"

echo "UCX_TLS=$UCX_TLS, $iters round trips a run, load: $(cut -d' ' -f1-3 /proc/loadavg)"
slow=0
for r in $(seq 1 "$runs"); do
    port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2046
    timeout 120 $nice_cmd $(pin "$spin") "$softib" run -- "$exe" -p "$port" -n "$iters" \
        >/dev/null 2>&1 &
    server=$!
    sleep 0.3
    # shellcheck disable=SC2046
    out="$(timeout 120 $nice_cmd $(pin "$cpin") "$softib" run -- "$exe" -p "$port" \
        -n "$iters" ${VERBOSE:+-v} 127.0.0.1 2>&1)" || true
    wait "$server" || true
    [ -n "${VERBOSE:-}" ] && echo "$out" >"/tmp/ucx-first-rtts.$r.txt"
    line="$(echo "$out" | grep '^iters' || true)"
    if [ -z "$line" ]; then
        echo "run $r: failed: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
        slow=$((slow + 1))
        continue
    fi
    echo "$line" | awk -v r="$r" '{
        worst = 0; for (i = 5; i <= 13; i++) if ($i > worst) worst = $i;
        for (i = 1; i <= NF; i++) { if ($i == "median_after10") m = $(i + 1); if ($i == "over10x") o = $(i + 1) }
        printf "run %d: first %.0f us, 1..9: %s %s %s %s %s %s %s %s %s us, median %.2f us, worst 1..9 %.1fx, after the tenth over 10x: %d %s\n",
            r, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, m, worst / m, o, (worst <= 10 * m) ? "" : "SLOW START"
    }'
    echo "$line" | awk '{ worst = 0; for (i = 5; i <= 13; i++) if ($i > worst) worst = $i;
        for (i = 1; i <= NF; i++) if ($i == "median_after10") m = $(i + 1); exit !(worst > 10 * m) }' \
        && slow=$((slow + 1))
done
echo "runs: $runs, with a round trip of 1..9 over 10x the median: $slow"
