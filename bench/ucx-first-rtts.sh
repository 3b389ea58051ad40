#!/usr/bin/env bash
# The first round trips of new UCX connections on softib, against the later ones, and the
# same measured over UCX's own shared-memory transport in the same run.
#
#   bench/ucx-first-rtts.sh [RUNS] [ITERS]        (defaults 10 and 3000)
#
# Builds bench/ucp-pingpong.c (libucx-dev), then RUNS times starts a pair of them under
# `softib run` (server, then a client towards 127.0.0.1), each pair a new connection, and
# prints per run: the first round trip (the connection's wire-up), round trips 1..9, the median
# of those after the tenth, the worst of 1..9 against that median, and how many after the
# tenth took more than 10x the median. Each softib run is followed by a run of the same pair
# with UCX_TLS=posix (UCX's shared memory, no softib) as the baseline; the last lines give,
# for each, the runs with a round trip of 1..9 over 10x its median and the quartiles of round
# trip 1. Environment: UCX_TLS for softib's runs (default rc_verbs,ud_verbs), BASELINE=0 to
# skip the posix runs, SOFTIB (the softib binary, default target/release/softib),
# SOFTIB_LIB_DIR as for softib run, PINS="A B" to pin the server to CPU A and the client to
# CPU B (taskset), NICE=N to run both at that nice value (negative values need root),
# VERBOSE=1 to keep each run's round trips in /tmp/ucx-first-rtts.<softib|posix>.<run>.txt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs="${1:-10}"
iters="${2:-3000}"
softib="${SOFTIB:-$PWD/target/release/softib}"
tls="${UCX_TLS:-rc_verbs,ud_verbs}"
[ -x "$softib" ] || { echo "no $softib (cargo build --release)"; exit 1; }
[ -f /usr/include/ucp/api/ucp.h ] || { echo "no <ucp/api/ucp.h> (Debian: libucx-dev)"; exit 1; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
exe="$dir/ucp-pingpong"
cc -O2 -o "$exe" bench/ucp-pingpong.c -lucp -lucs

read -r spin cpin <<<"${PINS:-- -}"
pin() { if [ "$1" = - ]; then echo ""; else echo "taskset -c $1"; fi; }
nice_cmd=""
[ -n "${NICE:-}" ] && nice_cmd="nice -n $NICE"

# One pair over transports $2 ("softib" under softib run, "posix" without), run number $1;
# prints the run's line and appends "slow first" (slow: 1 if a round trip of 1..9 is over 10x
# the median; first: round trip 1) to $dir/$2.
one_pair() {
    local r="$1" kind="$2" wrap="" port server out line
    if [ "$kind" = softib ]; then
        wrap="$softib run --"
        export UCX_TLS="$tls"
    else
        export UCX_TLS=posix
    fi
    port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2046,SC2086
    timeout 120 $nice_cmd $(pin "$spin") $wrap "$exe" -p "$port" -n "$iters" >/dev/null 2>&1 &
    server=$!
    sleep 0.3
    # shellcheck disable=SC2046,SC2086
    out="$(timeout 120 $nice_cmd $(pin "$cpin") $wrap "$exe" -p "$port" -n "$iters" \
        ${VERBOSE:+-v} 127.0.0.1 2>&1)" || true
    wait "$server" || true
    [ -n "${VERBOSE:-}" ] && echo "$out" >"/tmp/ucx-first-rtts.$kind.$r.txt"
    line="$(echo "$out" | grep '^iters' || true)"
    if [ -z "$line" ]; then
        echo "$kind run $r: failed: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
        echo "1 -1" >>"$dir/$kind"
        return
    fi
    echo "$line" | awk -v r="$r" -v k="$kind" '{
        worst = 0; for (i = 5; i <= 13; i++) if ($i > worst) worst = $i;
        for (i = 1; i <= NF; i++) { if ($i == "median_after10") m = $(i + 1); if ($i == "over10x") o = $(i + 1) }
        printf "%s run %d: first %.0f us, 1..9: %s %s %s %s %s %s %s %s %s us, median %.2f us, worst 1..9 %.1fx, after the tenth over 10x: %d %s\n",
            k, r, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, m, worst / m, o, (worst <= 10 * m) ? "" : "SLOW START"
        printf "%d %s\n", (worst > 10 * m), $5 >> "'"$dir/$kind"'"
    }'
}

# The summary of one kind's runs; leaves round trip 1's median in $dir/$kind.median.
summary() {
    local kind="$1" label="$2"
    sort -k2 -g "$dir/$kind" | awk -v l="$label" -v med="$dir/$kind.median" '
        { slow += $1; if ($2 >= 0) first[++n] = $2 }
        END {
            printf "%s: runs %d, with a round trip of 1..9 over 10x the median: %d; round trip 1 quartiles %s / %s / %s us, worst %s us\n",
                l, NR, slow, first[int((n + 3) / 4)], first[int((n + 1) / 2)], first[int((3 * n + 3) / 4)], first[n]
            print first[int((n + 1) / 2)] > med
        }'
}

baseline="${BASELINE:-1}"
echo "softib: UCX_TLS=$tls; baseline: UCX_TLS=posix; $iters round trips a run, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
    one_pair "$r" softib
    [ "$baseline" = 0 ] || one_pair "$r" posix
done
summary softib "softib ($tls)"
if [ "$baseline" != 0 ]; then
    summary posix "UCX posix"
    awk -v s="$(cat "$dir/softib.median")" -v p="$(cat "$dir/posix.median")" 'BEGIN {
        if (s > 0 && p > 0) printf "round trip 1, median of the runs: softib %s us, UCX posix %s us: %.2fx\n", s, p, s / p }'
fi
