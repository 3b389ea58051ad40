#!/usr/bin/env bash
# softib against Linux rxe on rxe's own benchmarks, on the same CPU: inside the rxe guest of
# ../shared/interop/rxe-vm, Debian's perftest binaries run twice, on the guest kernel's rxe
# (device rxe1, loopback: both ends in the guest) and on softib's drop-in libibverbs.so.1
# copied into the guest (LD_LIBRARY_PATH; two processes on one host, so softib's same-host
# path). Both under the guest's emulated CPU, so the ratio, not the absolute figure, is the
# result. Prints ratios:
#
#   1. message rate  ib_send_bw -s 64 (MsgRate), softib / rxe            target >= 1.5x
#   2. bandwidth     ib_write_bw -s 65536 (BW average), softib / rxe     target >= 1.0x
#   3. latency       ib_write_lat -s 64 (t_typical, the median), softib / rxe   target <= 1.0x
#
# Each pair runs ROUNDS times (default 9), rxe and softib back to back, the one going first
# alternating between rounds. The verdict is the median of the rounds' ratios (each softib run
# against the rxe run beside it): the guest switches, minutes apart, between a fast and a slow
# state that both stacks feel (ib_write_lat 10-11 or 17-21 us), and a ratio of two runs taken
# seconds apart compares like with like where a ratio of the two medians mixes the states.
# The medians of the figures are printed too. perftest's defaults otherwise (RC, 128 WRs in
# flight for bandwidth).
#
# Boots its own guest (instance "bench", TCG, no tap: rxe1 sits on a dgram NIC and only talks
# to itself) and stops it at the end; builds the image first if it is missing.
#
# Usage: bench/rxe-guest.sh [ROUNDS]
#   env: SOFTIB=path/to/softib (its libibverbs.so / librdmacm.so beside it) skips the build;
#        ITERS_RATE [20000], ITERS_BW [2000], ITERS_LAT [2000]; RXE_VM_DIR; VERBOSE=1
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
RIG=${RXE_VM_DIR:-../shared/interop/rxe-vm}
R=$RIG/run-vm.sh
VM=bench
ITERS_RATE=${ITERS_RATE:-20000}
ITERS_BW=${ITERS_BW:-2000}
ITERS_LAT=${ITERS_LAT:-2000}
[[ -x $R ]] || { echo "SKIPPED: the rxe-vm rig is not at $RIG (set RXE_VM_DIR)"; exit 0; }
command -v qemu-system-x86_64 >/dev/null || { echo "SKIPPED: qemu-system-x86_64 is missing"; exit 0; }
if [[ -z "${SOFTIB:-}" ]]; then
    cargo build --release -q -p softib -p softib-verbs -p softib-rdmacm || exit 1
    SOFTIB="${CARGO_TARGET_DIR:-target}/release/softib"
fi
LIBDIR=$(dirname "$SOFTIB")
for l in libibverbs.so librdmacm.so; do
    [[ -f $LIBDIR/$l ]] || { echo "no $LIBDIR/$l"; exit 1; }
done
CACHE=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softib-rxe-vm}
if [[ ! -e $CACHE/rootfs.img ]]; then
    echo "building the guest image (build-vm.sh, several minutes)"
    "$RIG/build-vm.sh" --install-host-deps >/tmp/softib-build-vm.log 2>&1 ||
        { tail -n 15 /tmp/softib-build-vm.log; echo "SKIPPED: cannot build the guest image"; exit 0; }
fi
TMP=$(mktemp -d)
cleanup() { "$R" stop --name "$VM" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
"$R" stop --name "$VM" >/dev/null 2>&1
"$R" start --name "$VM" --ssh-port 10031 --dgram 47930:47931 >"$TMP/boot.log" 2>&1 ||
    { tail -n 20 "$TMP/boot.log"; echo "FAIL: guest boot"; exit 1; }
g() { timeout 600 "$R" ssh --name "$VM" "$@"; }
g "mkdir -p /opt/softib" || { echo "FAIL: ssh into the guest"; exit 1; }
"$R" put --name "$VM" "$LIBDIR/libibverbs.so" /opt/softib/libibverbs.so.1 >/dev/null &&
    "$R" put --name "$VM" "$LIBDIR/librdmacm.so" /opt/softib/librdmacm.so.1 >/dev/null ||
    { echo "FAIL: copying softib's libraries into the guest"; exit 1; }
g "rdma link show | grep -q '^link rxe1/1 state ACTIVE'" || { echo "FAIL: guest rxe1 is not active"; exit 1; }
g "nproc; uname -r; dpkg-query -W perftest" >"$TMP/guest.txt" 2>&1

PORT=18600
# One perftest pair in the guest (server, then the client towards 127.0.0.1); prints column
# COL of the client's result line, or nothing. perftest may fail its own CPU-clock check
# under the emulated CPU ("Can't produce a report"): such a run is repeated (up to 3 times).
pair() { # which(rxe|softib) col tool args...
    local which=$1 col=$2 tool=$3
    shift 3
    local try out senv=$RXE cenv=$RXE
    [[ $which == softib ]] && senv=$SOFT_S cenv=$SOFT_C
    for try in 1 2 3; do
        PORT=$((PORT + 1))
        out=$(g "$senv timeout 300 $tool $* -p $PORT >/tmp/s.out 2>&1 & \
            for i in \$(seq 1 200); do ss -Hltn 'sport = :$PORT' | grep -q LISTEN && break; sleep 0.05; done; \
            $cenv timeout 300 $tool $* -p $PORT 127.0.0.1 >/tmp/c.out 2>&1; wait; cat /tmp/c.out /tmp/s.out")
        if echo "$out" | grep -q "Can't produce a report"; then continue; fi
        echo "$out" | awk -v c="$col" '/^ *[0-9]+ +[0-9]+ +[0-9.]+/ {print $c; exit}'
        [[ ${VERBOSE:-0} == 1 ]] && echo "$out" >>"$TMP/all.log"
        return
    done
}
RXE="env"
# No configuration: each softib process takes a loopback address of its own (on port 4792,
# since the guest kernel's rxe holds 4791 on every address) and, the two being on one host,
# they talk through softib's shared-memory path.
SOFT_S="env LD_LIBRARY_PATH=/opt/softib SOFTIB_CONFIG=/nonexistent"
SOFT_C=$SOFT_S
: >"$TMP/rate_r"; : >"$TMP/rate_s"; : >"$TMP/bw_r"; : >"$TMP/bw_s"; : >"$TMP/lat_r"; : >"$TMP/lat_s"
# both NAME col tool args...: the rxe run and the softib run of one round, the order
# alternating with the round; appends each figure (a blank line for none) to NAME_r / NAME_s.
both() {
    local name=$1 col=$2 tool=$3 args
    shift 3
    args=$*
    local first=rxe
    ((i % 2)) && first=softib
    for which in $first $([[ $first == rxe ]] && echo softib || echo rxe); do
        if [[ $which == rxe ]]; then
            echo "$(pair rxe "$col" "$tool" -d rxe1 -x 1 $args)" >>"$TMP/${name}_r"
        else
            echo "$(pair softib "$col" "$tool" -x 0 $args)" >>"$TMP/${name}_s"
        fi
    done
}
for ((i = 0; i < ROUNDS; i++)); do
    both rate 5 ib_send_bw -s 64 -n "$ITERS_RATE"
    both bw 4 ib_write_bw -s 65536 -n "$ITERS_BW"
    both lat 5 ib_write_lat -s 64 -n "$ITERS_LAT"
done

median() { sort -g | awk 'NF {a[++n]=$1} END {if (n) print a[int((n+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b}'; }
# paired NAME: the median of the rounds' softib / rxe ratios ("-" when a round gave no figure).
paired() {
    local r
    r=$(paste -d' ' "$TMP/${1}_s" "$TMP/${1}_r" | awk 'NF != 2 || $2 == 0 { print "-"; next } { print $1 / $2 }')
    if [[ -z $r ]] || grep -q -- '^-$' <<<"$r"; then echo "-"; else printf '%.2f\n' "$(median <<<"$r")"; fi
}
verdict() { # ratio op target
    awk -v r="$1" -v op="$2" -v t="$3" 'BEGIN {
        if (r == "-") { print "FAIL (a run gave no figure)"; exit }
        ok = (op == ">=") ? (r >= t) : (r <= t); print (ok ? "PASS" : "MISS") }'
}
rr=$(median <"$TMP/rate_r"); rs=$(median <"$TMP/rate_s")
br=$(median <"$TMP/bw_r"); bs=$(median <"$TMP/bw_s")
lr=$(median <"$TMP/lat_r"); ls=$(median <"$TMP/lat_s")
r1=$(paired rate); r2=$(paired bw); r3=$(paired lat)
echo "perftest in the rxe guest ($(tr '\n' ' ' <"$TMP/guest.txt")): softib's libibverbs.so.1 / kernel rxe, $ROUNDS rounds, median of the rounds' ratios (medians of the figures in brackets)"
printf '  %-44s %6sx  target >= 1.5x  %s   (rxe %s, softib %s Mpps: %sx)\n' "message rate  ib_send_bw -s 64" "$r1" "$(verdict "$r1" ">=" 1.5)" "$rr" "$rs" "$(ratio "$rs" "$rr")"
printf '  %-44s %6sx  target >= 1.0x  %s   (rxe %s, softib %s MB/s: %sx)\n' "bandwidth     ib_write_bw -s 65536" "$r2" "$(verdict "$r2" ">=" 1.0)" "$br" "$bs" "$(ratio "$bs" "$br")"
printf '  %-44s %6sx  target <= 1.0x  %s   (rxe %s, softib %s us: %sx)\n' "latency       ib_write_lat -s 64 (median)" "$r3" "$(verdict "$r3" "<=" 1.0)" "$lr" "$ls" "$(ratio "$ls" "$lr")"
# The floor under softib's latency: perftest's latency test spins on memory, so the peer's
# WRITE is placed by softib's progress thread, which sleeps; one blocking thread wake-up in
# the guest (bench/wakeup.c, eventfd ping-pong between two threads).
if cc -O2 -pthread -o "$TMP/wakeup" bench/wakeup.c 2>/dev/null &&
    "$R" put --name "$VM" "$TMP/wakeup" /tmp/wakeup >/dev/null; then
    w=$(g "/tmp/wakeup 2000")
    printf '  %-44s %6s us  (rxe places the WRITE in the sender'"'"'s system call: no wake-up)\n' \
        "one thread wake-up in the guest" "$w"
fi
if [[ ${VERBOSE:-0} == 1 ]]; then
    echo "  samples, round by round (rxe | softib; odd rounds ran softib first):"
    paste "$TMP/rate_r" "$TMP/rate_s" | sed 's/^/    Mpps  /'
    paste "$TMP/bw_r" "$TMP/bw_s" | sed 's#^#    MB/s  #'
    paste "$TMP/lat_r" "$TMP/lat_s" | sed 's/^/    us    /'
    cat "$TMP/all.log"
fi
