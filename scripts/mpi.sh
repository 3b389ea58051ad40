#!/usr/bin/env bash
# mpi.sh - MPI programs of the project's own on softib, through Debian's Open MPI 4.1 (pml ucx)
# and MPICH 4.0 (ch4:ucx) on Debian's UCX 1.13, every rank on softib's libibverbs.so.1:
#   - scripts/mpi/pt2pt.c (point-to-point latency and bandwidth), allreduce.c, alltoall.c and
#     the mpi4py script scripts/mpi/check.py (Open MPI's: python3-mpi4py is built on it), each
#     checking every value it receives and exiting non-zero otherwise;
#   - with 2 and 4 ranks on one host (more ranks than the machine's CPUs), and 2 ranks on each
#     of two hosts: two network namespaces joined by veth (10.82.0.1, 10.82.0.2), each rank's
#     device bound to its namespace's address, the ranks of the other host started through
#     scripts/mpi/netns-rsh in ssh's place (the environment of a login there: what the ranks
#     need is passed by the launcher, Open MPI's -x, MPICH's -genvlist);
#   - softib's transport, not UCX's shared memory or TCP: UCX_TLS=rc_verbs,ud_verbs, and every
#     rank must have printed a UCX lane on softib0 (UCX_LOG_LEVEL=info: "ep_cfg[..]:
#     tag(rc_verbs/softib0:1)..."), no lane on any other transport, and softib's counters at
#     exit (SOFTIB_STATS=1) with datagrams received and sent (at least 2000 each for pt2pt's
#     2000 round trips, 100 for the others);
#   - the checks bite: each C program with -c (one received value flipped) must fail;
#   - a rank killed (SIGKILL) mid-run: mpirun must exit non-zero within 30 s, and nothing of
#     softib's may be left in /dev/shm of the namespaces (on the other host: Open MPI's daemon
#     runs under softib run, --launch-agent; after MPICH's, a softib process runs there).
# Prints PASS/FAIL per case and "N passed, M failed"; exits non-zero on any failure. Prints
# "SKIPPED: why" and exits 0 when neither MPI (or UCX) is installed; without root (network
# namespaces) runs the one-host cases in the current namespace and prints
# "SKIPPED: two hosts: why".
#
# Environment: SOFTIB_LIB_DIR (softib's libraries and binary) [<target dir>/release],
# MPI_OUT (logs and the built programs) [<target dir>/mpi], MPI_UCX_TLS [rc_verbs,ud_verbs],
# MPI_KEEP=1 keeps the namespaces.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
LIBDIR=${SOFTIB_LIB_DIR:-$TARGET/release}
OUT=${MPI_OUT:-$TARGET/mpi}
SOFTIB=$LIBDIR/softib
RSH=$REPO/scripts/mpi/netns-rsh
TLS=${MPI_UCX_TLS:-rc_verbs,ud_verbs}
T0=$SECONDS

skip() { echo "SKIPPED: $*"; exit 0; }

# An MPI is there when its launcher, its compiler and its mpi.h are.
mpis=()
declare -A pkgs=([openmpi]="openmpi-bin libopenmpi-dev" [mpich]="mpich libmpich-dev")
for m in openmpi mpich; do
    if command -v "mpirun.$m" >/dev/null && command -v "mpicc.$m" >/dev/null &&
        echo '#include <mpi.h>' | "mpicc.$m" -E -x c - >/dev/null 2>&1; then
        mpis+=("$m")
    fi
done
[ "${#mpis[@]}" -gt 0 ] ||
    skip "no MPI: neither Open MPI (${pkgs[openmpi]}) nor MPICH (${pkgs[mpich]}) with mpirun, mpicc and mpi.h"
command -v ucx_info >/dev/null || skip "no UCX tools (Debian: ucx-utils)"
for m in openmpi mpich; do
    [[ " ${mpis[*]} " == *" $m "* ]] ||
        echo "SKIPPED: $m: mpirun.$m, mpicc.$m or its mpi.h is missing (Debian: ${pkgs[$m]})"
done

if [ -z "${SOFTIB_LIB_DIR:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p softib-verbs -p softib-rdmacm -p softib-preload \
        -p softib) || {
        echo "FAIL: cargo build --release"
        echo "0 passed, 1 failed"
        exit 1
    }
fi
[ -x "$SOFTIB" ] || { echo "FAIL: no $SOFTIB"; echo "0 passed, 1 failed"; exit 1; }
[ -f "$LIBDIR/libsoftib_preload.so" ] || { echo "FAIL: no $LIBDIR/libsoftib_preload.so"; echo "0 passed, 1 failed"; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT/bin"

# shellcheck source=scripts/tally.sh
. "$REPO/scripts/tally.sh"

# --- the programs, built once per MPI ---------------------------------------------------------
declare -A built
for m in "${mpis[@]}"; do
    built[$m]=1
    for p in pt2pt allreduce alltoall; do
        if ! "mpicc.$m" -std=gnu11 -O2 -Wall -Wextra -Werror -o "$OUT/bin/$p.$m" \
            "$REPO/scripts/mpi/$p.c" >"$OUT/build.$p.$m.log" 2>&1; then
            result "build:$m:$p" 0 "$(head -n 3 "$OUT/build.$p.$m.log" | tr '\n' ' ')"
            built[$m]=0
        fi
    done
done
PY=""
if [[ " ${mpis[*]} " == *" openmpi "* ]] && /usr/bin/python3 -c 'import mpi4py' 2>/dev/null; then
    PY=/usr/bin/python3
else
    echo "SKIPPED: mpi4py: no Open MPI or no python3-mpi4py for /usr/bin/python3"
fi

# --- where the ranks run: a namespace of our own for one host, two joined by veth ---------------
N1=softib-mpi-1 NA=softib-mpi-a NB=softib-mpi-b
IPA=10.82.0.1 IPB=10.82.0.2
export SOFTIB_NETNS_HOSTS="$IPA=$NA $IPB=$NB"
# shellcheck source=scripts/two-hosts.sh
. "$REPO/scripts/two-hosts.sh"
teardown() {
    [ "${MPI_KEEP:-0}" = 1 ] && return
    hosts_down "$N1" "$NA" "$NB"
}
ONE=()       # the prefix that runs a command on the one host
ONE_NS=""    # its namespace
two_hosts="" # why not, if not
if [ "$(id -u)" -ne 0 ]; then
    two_hosts="network namespaces need root"
elif ! command -v ip >/dev/null; then
    two_hosts="no ip(8) (iproute2)"
else
    teardown
    if ip netns add "$N1" && ip -n "$N1" link set lo up; then
        ONE=(ip netns exec "$N1")
        ONE_NS=$N1
    else
        echo "note: cannot make namespace $N1: the one-host cases run in this namespace"
    fi
    if ! two_hosts_up "$NA" "$NB" "$IPA" "$IPB"; then
        two_hosts="cannot make the network namespaces (ip netns add, veth)"
    fi
fi
trap teardown EXIT
[ -z "$two_hosts" ] || echo "SKIPPED: two hosts: $two_hosts"

export SOFTIB_CONFIG=/nonexistent
unset SOFTIB_BIND SOFTIB_PCAP SOFTIB_TRANSPORT SOFTIB_STATS UCX_TLS UCX_LOG_LEVEL LD_PRELOAD
# Open MPI refuses root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# softib's files in /dev/shm of namespace $1 (empty: this one).
shm_left() {
    local cmd='ls /dev/shm | grep "^softib-$(stat -L -c %i /proc/self/ns/net)-" || true'
    if [ -n "${1:-}" ]; then ip netns exec "$1" sh -c "$cmd"; else sh -c "$cmd"; fi
}

# The launcher command line of MPI $1 for layout $2 (np2, np4: one host; 2x2: two hosts) into
# the array LAUNCH; the program and its arguments follow it.
launch() {
    local m=$1 layout=$2
    LAUNCH=()
    local run=("$SOFTIB" run)
    [ "$layout" = 2x2 ] && run=(ip netns exec "$NA" "$SOFTIB" run --bind "$IPA")
    [ "$layout" != 2x2 ] && run=("${ONE[@]}" "$SOFTIB" run)
    case "$m:$layout" in
    openmpi:np*)
        LAUNCH=("${run[@]}" -- mpirun.openmpi -np "${layout#np}" --oversubscribe --tag-output
            --mca pml ucx --mca pml_ucx_devices rdma_rxe
            -x UCX_TLS="$TLS" -x UCX_LOG_LEVEL=info -x SOFTIB_STATS=1) ;;
    openmpi:2x2)
        # The ranks of 10.82.0.2 start from the login environment netns-rsh gives: -x passes
        # what they need (the local ranks inherit mpirun's environment).
        LAUNCH=("${run[@]}" -- mpirun.openmpi -np 4 -H "$IPA:2,$IPB:2" --tag-output
            --mca plm_rsh_agent "$RSH" --mca pml ucx --mca pml_ucx_devices rdma_rxe
            -x LD_PRELOAD -x LD_LIBRARY_PATH
            -x UCX_TLS="$TLS" -x UCX_LOG_LEVEL=info -x SOFTIB_STATS=1) ;;
    mpich:np*)
        LAUNCH=("${run[@]}" -- mpirun.mpich -np "${layout#np}" -l
            -genv UCX_TLS "$TLS" -genv UCX_LOG_LEVEL info -genv SOFTIB_STATS 1) ;;
    mpich:2x2)
        # hydra passes mpiexec's whole environment by default, SOFTIB_BIND of 10.82.0.1
        # included: -genvlist passes only what the ranks of the other host need.
        LAUNCH=("${run[@]}" -- mpirun.mpich -np 4 -hosts "$IPA:2,$IPB:2" -l
            -launcher ssh -launcher-exec "$RSH" -genvlist LD_PRELOAD,LD_LIBRARY_PATH
            -genv UCX_TLS "$TLS" -genv UCX_LOG_LEVEL info -genv SOFTIB_STATS 1) ;;
    esac
}

# Checks the log $1 of an $2-rank run for softib's transport: every rank printed UCX lanes on
# softib0 only, and softib's counters with at least $3 datagrams received and sent. Sets why
# and appends each rank's counts to counts. Lines are tagged with their rank: Open MPI's
# "[1,R]<stderr>:...", MPICH's "[R] ...".
transport_ok() {
    local log=$1 n=$2 min=$3
    why=""
    local r lanes other rx tx
    for r in $(seq 0 $((n - 1))); do
        local mine
        mine=$(grep -E "^\[([0-9]+,)?$r\](<std(out|err)>:| )" "$log")
        lanes=$(grep -c 'ep_cfg\[' <<<"$mine")
        other=$(grep 'ep_cfg\[' <<<"$mine" | grep -oE '[a-z_]+\([^)]*\)' |
            grep -vE '\((rc_verbs|ud_verbs)/softib0:1\)$' | sort -u | tr '\n' ' ')
        read -r rx tx < <(grep 'runtime DeviceStats' <<<"$mine" |
            sed -E 's/.*rx_datagrams: ([0-9]+).* tx_datagrams: ([0-9]+).*/\1 \2/' |
            awk '{ rx += $1; tx += $2 } END { print rx + 0, tx + 0 }')
        if [ "$lanes" -eq 0 ]; then
            why="rank $r: no UCX lane on softib0"
        elif [ -n "$other" ]; then
            why="rank $r: UCX lanes off softib: $other"
        elif [ "$rx" -lt "$min" ] || [ "$tx" -lt "$min" ]; then
            why="rank $r: softib's datagrams rx $rx tx $tx (want >= $min each)"
        fi
        [ -n "$why" ] && return 1
        counts+="r$r $rx/$tx "
    done
    return 0
}

# Runs program $3 (pt2pt, allreduce, alltoall, mpi4py) of MPI $1 in layout $2.
case_run() {
    local m=$1 layout=$2 p=$3 n=4 min=100
    [ "$layout" = np2 ] && n=2
    [ "$p" = pt2pt ] && min=2000
    local name="$m:$layout:$p" log="$OUT/$m.$layout.$p.log" exe
    if [ "$p" = mpi4py ]; then exe=("$PY" "$REPO/scripts/mpi/check.py"); else exe=("$OUT/bin/$p.$m"); fi
    launch "$m" "$layout"
    echo "${LAUNCH[*]} ${exe[*]}" >"$log.cmd"
    local t=$SECONDS
    timeout -k 5 120 "${LAUNCH[@]}" "${exe[@]}" >"$log" 2>&1
    local rc=$? dt=$((SECONDS - t))
    local verdict
    # (Open MPI may forward a line in pieces, each tagged: the tags of the pieces go.)
    verdict=$(grep -ohE "(pt2pt|allreduce|alltoall|mpi4py): [0-9]+ ranks: .*" "$log" | head -n 1 |
        sed -E 's/\[[0-9]+,[0-9]+\]<std(out|err)>://g')
    local figures
    figures=$(grep -ohE "(pt2pt: [0-9]+ pairs|allreduce: sum|alltoall: 64-bit).*" "$log" | head -n 1 |
        sed -E 's/ \(slowest pair[^)]*\)//g; s/average per call by count: //' | cut -c1-110)
    counts=""
    if [ $rc -ne 0 ] || [[ "$verdict" != *"all right"* ]]; then
        result "$name" 0 "rc=$rc in ${dt}s: ${verdict:-$(grep -vE 'ep_cfg|DIAG|INFO|softib ' "$log" | tail -n 2 | tr '\n' ' ' | cut -c1-150)} (log $log)"
    elif ! transport_ok "$log" "$n" "$min"; then
        result "$name" 0 "$why (log $log)"
    else
        result "$name" 1 "${dt}s; ${figures:-$verdict}; rx/tx datagrams: $counts"
    fi
}

layouts=(np2 np4)
[ -z "$two_hosts" ] && layouts+=(2x2)
for m in "${mpis[@]}"; do
    [ "${built[$m]}" = 1 ] || continue
    for layout in "${layouts[@]}"; do
        for p in pt2pt allreduce alltoall; do
            case_run "$m" "$layout" "$p"
        done
    done
done
if [ -n "$PY" ]; then
    for layout in np4 "${layouts[@]:2}"; do
        case_run openmpi "$layout" mpi4py
    done
fi

# --- the checks bite: one value flipped on the last rank --------------------------------------
m=${mpis[0]}
if [ "${built[$m]}" = 1 ]; then
    for p in pt2pt allreduce alltoall; do
        launch "$m" np2
        log="$OUT/$m.corrupt.$p.log"
        timeout -k 5 120 "${LAUNCH[@]}" "$OUT/bin/$p.$m" -c >"$log" 2>&1
        rc=$?
        if [ $rc -ne 0 ] && grep -qE "$p: 2 ranks: [1-9][0-9]* wrong values" "$log"; then
            result "checks-bite:$m:$p" 1 "rc=$rc: $(grep -ohE "$p: 2 ranks: .*" "$log")"
        else
            result "checks-bite:$m:$p" 0 "rc=$rc, no wrong value reported (log $log)"
        fi
    done
fi

# --- a rank killed mid-run ---------------------------------------------------------------------
# Runs pt2pt for long in layout $2 with MPI $1, kills rank $3 (SIGKILL) 2 s after every rank
# started; mpirun must exit non-zero within 30 s and leave nothing in /dev/shm.
kill_case() {
    local m=$1 layout=$2 victim=$3 n=4
    local name="kill-9:$m:$layout" log="$OUT/$m.$layout.kill.log" pids="$OUT/pids.$m.$layout"
    rm -rf "$pids" && mkdir -p "$pids"
    launch "$m" "$layout"
    local env=(-x MPI_CHECK_PIDS="$pids")
    [ "$m" = mpich ] && env=(-genv MPI_CHECK_PIDS "$pids")
    # Open MPI starts the other host's daemon under softib run: its exit cleans up there.
    [ "$m:$layout" = openmpi:2x2 ] && env+=(--launch-agent "$SOFTIB run -- orted")
    echo "${LAUNCH[*]} ${env[*]} $OUT/bin/pt2pt.$m -n 100000000" >"$log.cmd"
    # In a subshell: the job killed on purpose is no job of this shell's to report.
    (timeout -k 5 120 "${LAUNCH[@]}" "${env[@]}" "$OUT/bin/pt2pt.$m" -n 100000000 >"$log" 2>&1
        echo $? >"$log.rc") &
    local job=$! i
    for i in $(seq 1 400); do
        [ "$(ls "$pids" 2>/dev/null | grep -c '^rank\.[0-9]*$')" -eq $n ] && break
        sleep 0.05
    done
    sleep 2
    local vpid
    vpid=$(cat "$pids/rank.$victim" 2>/dev/null)
    if [ -z "$vpid" ] || ! kill -9 "$vpid" 2>/dev/null; then
        wait $job
        result "$name" 0 "rank $victim did not run (log $log)"
        return
    fi
    local t=$SECONDS
    wait $job
    local rc dt=$((SECONDS - t))
    rc=$(cat "$log.rc")
    local left=""
    local b_before=""
    if [ "$layout" = 2x2 ]; then
        left="$(shm_left "$NA")"
        # On the other host the ranks its daemon killed are the daemon's children, not
        # mpirun's. Open MPI's daemon ran under softib run (--launch-agent) and cleaned up as it
        # exited; MPICH's proxy did not: their files go when a softib process there exits
        # (here: softib run -- true).
        if [ "$m" = mpich ]; then
            b_before=$(shm_left "$NB" | wc -l)
            ip netns exec "$NB" "$SOFTIB" run -- true
        fi
        left+="$(shm_left "$NB")"
    else
        left="$(shm_left "$ONE_NS")"
    fi
    local said
    said=$(grep -ohE "noticed that process rank [0-9]+ .*exited on signal 9|PID [0-9]+ RUNNING AT [0-9.]+|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: [A-Za-z ]+\(signal 9\)" "$log" | head -n 1)
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
        result "$name" 0 "mpirun rc=$rc after ${dt}s (log $log)"
    elif [ "$dt" -gt 30 ]; then
        result "$name" 0 "mpirun took ${dt}s after the kill (rc=$rc)"
    elif [ -n "$left" ]; then
        result "$name" 0 "left in /dev/shm: $(echo "$left" | tr '\n' ' ')"
    else
        result "$name" 1 "rank $victim killed: mpirun rc=$rc within ${dt}s (${said:-no message}); /dev/shm clean${b_before:+ (10.82.0.2: $b_before file(s) until a softib process there exited)}"
    fi
}

for m in "${mpis[@]}"; do
    [ "${built[$m]}" = 1 ] || continue
    kill_case "$m" np4 3
    [ -z "$two_hosts" ] && kill_case "$m" 2x2 3
done

echo "total $((SECONDS - T0)) s"
[ "$failed" -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
