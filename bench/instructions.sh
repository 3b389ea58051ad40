#!/usr/bin/env bash
# Instructions per 64-byte message on each side of softib's UDP NIC, counted by callgrind: the
# marginal cost between two run lengths of `softib bench OP -s 64 -e` over loopback (start-up,
# connection set-up and teardown cancel out), ICRC included. Instruction counts do not depend
# on what else the machine is doing, so they are the stable figures of docs/udp.md.
#
# Usage: bench/instructions.sh [--check FILE] [OP...]
#   OP        send, write, read, atomic (default: all four)
#   --check   compare with the committed figures in FILE (lines "OP SIDE IR"): exit 1 when any
#             figure grew by more than 10 %
# Env: SOFTIB (binary; default target/release/softib, built if missing), N1 / N2 (run lengths,
#      default 10000 / 30000), TRANSPORT (udp, the default, or shm: the path between the two
#      processes).
#
# Prints one line per operation and side: "OP requester|responder IR_PER_MESSAGE".
# For SEND and WRITE the requester is the client (it sends the data), for READ it receives it;
# for ATOMIC (a FETCH_ADD) it receives the original value.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=""
if [ "${1:-}" = "--check" ]; then
    check="$2"
    shift 2
fi
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(send write read atomic)
n1="${N1:-10000}"
n2="${N2:-30000}"
transport="${TRANSPORT:-udp}"
bin="${SOFTIB:-$repo/target/release/softib}"
if [ ! -x "$bin" ]; then
    (cd "$repo" && cargo build --release -q -p softib)
fi
# The CRC-32 way a CPU with PCLMULQDQ takes: valgrind emulates that instruction in a helper,
# so softib's own measurement (icrc.rs, `Engine`) would pick the table under it.
export SOFTIB_CRC="${SOFTIB_CRC:-clmul}"
command -v valgrind >/dev/null || { echo "SKIPPED instruction counts: valgrind is not installed (scripts/install-deps.sh)"; exit 0; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
port=19700

# total_ir OUTFILE: the instruction count callgrind wrote.
total_ir() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }

# run OP N: both sides under callgrind; sets SRV_IR and CLI_IR.
run() {
    local op="$1" n="$2"
    port=$((port + 1))
    local srv="$work/srv.$op.$n" cli="$work/cli.$op.$n"
    valgrind --tool=callgrind --callgrind-out-file="$srv.out" \
        "$bin" bench "$op" -s 64 -n "$n" -e -p "$port" --bind 127.0.0.61 --timeout 600 --transport "$transport" \
        >"$srv.log" 2>&1 &
    local spid=$!
    # The server listens once valgrind has started it.
    local i
    for i in $(seq 1 100); do
        if ss -ltn 2>/dev/null | grep -q ":$port "; then break; fi
        sleep 0.1
    done
    valgrind --tool=callgrind --callgrind-out-file="$cli.out" \
        "$bin" bench "$op" -s 64 -n "$n" -e -p "$port" --bind 127.0.0.62 --timeout 600 --transport "$transport" 127.0.0.61 \
        >"$cli.log" 2>&1 || { cat "$cli.log" >&2; echo "instructions: $op client failed" >&2; exit 1; }
    wait "$spid" || { cat "$srv.log" >&2; echo "instructions: $op server failed" >&2; exit 1; }
    SRV_IR="$(total_ir "$srv.out")"
    CLI_IR="$(total_ir "$cli.out")"
}

results="$work/results"
: >"$results"
for op in "${ops[@]}"; do
    run "$op" "$n1"
    s1="$SRV_IR" c1="$CLI_IR"
    run "$op" "$n2"
    s2="$SRV_IR" c2="$CLI_IR"
    req=$(( (c2 - c1) / (n2 - n1) ))
    resp=$(( (s2 - s1) / (n2 - n1) ))
    echo "$op requester $req" | tee -a "$results"
    echo "$op responder $resp" | tee -a "$results"
done

if [ -n "$check" ]; then
    status=0
    while read -r op side ir; do
        want="$(awk -v o="$op" -v s="$side" '$1 !~ /^#/ && $1 == o && $2 == s { print $3 }' "$check")"
        if [ -z "$want" ]; then
            echo "instructions: no committed figure for $op $side in $check" >&2
            status=1
            continue
        fi
        limit=$(( want + want / 10 ))
        if [ "$ir" -gt "$limit" ]; then
            echo "instructions: $op $side $ir per message, over 110 % of the committed $want" >&2
            status=1
        else
            echo "instructions: $op $side $ir per message (committed $want, limit $limit): ok"
        fi
    done <"$results"
    exit "$status"
fi
