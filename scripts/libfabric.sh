#!/usr/bin/env bash
# libfabric.sh - Debian's libfabric 1.17 (libfabric-bin) unmodified on softib between two hosts:
# two network namespaces (A: 10.82.0.1, B: 10.82.0.2) joined by a veth pair, every process on
# its namespace's address (SOFTIB_BIND) through `softib run`:
#   - fi_info -p verbs in A lists softib0 for FI_EP_MSG (at A's address), FI_EP_DGRAM and,
#     through ofi_rxm, FI_EP_RDM;
#   - fi_pingpong -p verbs -e msg|rdm|dgram, every size checked (-c), with the server in A and
#     the client in B, then the other way round;
#   - MSG endpoints found through fi_getinfo's passive-side hints (crates/softib-cli/tests/c/
#     fi_msg.c: the server with a service and FI_SOURCE, the client with A's address), messages
#     of 1 B to 1 MiB checked both ways;
#   - Open MPI 4.1 (pml cm, mtl ofi, verbs;ofi_rxm), two ranks in A (tests/c/mpi_check.c), when
#     openmpi-bin is installed.
# Prints PASS/FAIL per case with the 64-byte latencies fi_pingpong reports, then "N passed,
# M failed"; exits non-zero on any failure. Prints "SKIPPED: why" and exits 0 without root,
# ip(8), libfabric's tools or a C compiler with libfabric's headers.
#
# Environment: SOFTIB_LIB_DIR (softib's libraries and binary) [<target dir>/release],
# LIBFABRIC_OUT (logs) [<target dir>/libfabric], LIBFABRIC_ITERS (fi_pingpong -I) [200],
# LIBFABRIC_KEEP=1 keeps the namespaces.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
LIBDIR=${SOFTIB_LIB_DIR:-$TARGET/release}
OUT=${LIBFABRIC_OUT:-$TARGET/libfabric}
ITERS=${LIBFABRIC_ITERS:-200}
SOFTIB=$LIBDIR/softib
CSRC=$REPO/crates/softib-cli/tests/c

skip() { echo "SKIPPED: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip(8) (iproute2)"
for t in fi_info fi_pingpong; do
    command -v "$t" >/dev/null || skip "no $t (libfabric-bin)"
done
command -v cc >/dev/null || skip "no C compiler for $CSRC/fi_msg.c"
[ -f /usr/include/rdma/fabric.h ] || skip "no <rdma/fabric.h> (libfabric-dev)"

if [ -z "${SOFTIB_LIB_DIR:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p softib-verbs -p softib-rdmacm -p softib-preload \
        -p softib) || {
        echo "FAIL: cargo build --release"
        exit 1
    }
fi
[ -x "$SOFTIB" ] || { echo "FAIL: no $SOFTIB"; exit 1; }
mkdir -p "$OUT"
# The programs run in the log directory (a crashing one may leave a backtrace file there).
cd "$OUT" || exit 1
FI_MSG=$OUT/fi_msg
cc -O2 -Wall -Werror -o "$FI_MSG" "$CSRC/fi_msg.c" -lfabric || {
    echo "FAIL: cc $CSRC/fi_msg.c"
    exit 1
}

# --- the two hosts ---------------------------------------------------------------------------
NA=softib-lf-a NB=softib-lf-b
IPA=10.82.0.1 IPB=10.82.0.2
# shellcheck source=scripts/two-hosts.sh
. "$REPO/scripts/two-hosts.sh"
teardown() {
    [ "${LIBFABRIC_KEEP:-0}" = 1 ] && return
    hosts_down "$NA" "$NB"
}
two_hosts_up "$NA" "$NB" "$IPA" "$IPB" || skip "cannot make the network namespaces (ip netns add, veth)"
trap teardown EXIT
export SOFTIB_CONFIG=/nonexistent
unset SOFTIB_PCAP SOFTIB_TRANSPORT LD_PRELOAD
for v in $(compgen -e | grep '^FI_' || true); do unset "$v"; done

# Runs a command in namespace $1 on softib bound to $2, under a deadline.
in_ns() {
    local ns=$1 ip=$2
    shift 2
    timeout 120 ip netns exec "$ns" env SOFTIB_BIND="$ip" "$SOFTIB" run -- "$@"
}

# shellcheck source=scripts/tally.sh
. "$REPO/scripts/tally.sh"


# --- fi_info ---------------------------------------------------------------------------------
in_ns "$NA" "$IPA" fi_info -p verbs -v >"$OUT/fi_info.log" 2>&1
st=$?
entries=$(awk '/^---$/ { if (p) print p "|" d "|" t "|" s; p = d = t = s = "" }
    /^ *prov_name:/ { p = $2 } /^ *name:/ && /softib/ && d == "" { d = $2 } /^ *type:/ && /FI_EP_/ { t = $2 }
    /^ *src_addr:/ { s = $2 }
    END { if (p) print p "|" d "|" t "|" s }' "$OUT/fi_info.log")
ok=1
for want in "verbs|softib0|FI_EP_MSG|fi_sockaddr_in://$IPA:0" "verbs|softib0-dgram|FI_EP_DGRAM|" \
    "verbs;ofi_rxm|softib0|FI_EP_RDM|fi_sockaddr_in://$IPA:0"; do
    grep -qF "$want" <<<"$entries" || ok=0
done
[ "$st" = 0 ] || ok=0
result "fi_info -p verbs" "$ok" "$(grep -c . <<<"$entries") entries, MSG/DGRAM/RDM (ofi_rxm) on softib0"

# --- fi_pingpong -----------------------------------------------------------------------------
# The 64-byte usec/xfer of a fi_pingpong report.
lat64() { awk '$1 == "64" && NF == 8 { print $7 }' "$1"; }
port=47620
for dir in "A B" "B A"; do
    read -r sn cn <<<"$dir"
    if [ "$sn" = A ]; then sns=$NA sip=$IPA cns=$NB cip=$IPB; else sns=$NB sip=$IPB cns=$NA cip=$IPA; fi
    for ep in msg rdm dgram; do
        port=$((port + 1))
        log=$OUT/pingpong-$ep-server$sn
        in_ns "$sns" "$sip" fi_pingpong -p verbs -e "$ep" -I "$ITERS" -c -B "$port" >"$log.server.log" 2>&1 &
        spid=$!
        if wait_port "$sns" "$port"; then
            in_ns "$cns" "$cip" fi_pingpong -p verbs -e "$ep" -I "$ITERS" -c -P "$port" "$sip" \
                >"$log.client.log" 2>&1
            cst=$?
        else
            cst=99
        fi
        wait "$spid"
        sst=$?
        rows=$(awk 'NF == 8 && $3 == "='"$ITERS"'"' "$log.client.log" | wc -l)
        # Sizes from 64 B: up to 1 MiB, or for DGRAM up to the path MTU (1 KiB on the veth).
        want=4
        [ "$ep" = dgram ] && want=3
        ok=0
        [ "$cst" = 0 ] && [ "$sst" = 0 ] && [ "$rows" -ge "$want" ] && ok=1
        result "fi_pingpong -e $ep (server $sn)" "$ok" \
            "$rows sizes, 64 B: $(lat64 "$log.client.log") us/xfer (client), exit $sst/$cst"
    done
done

# --- MSG endpoints through fi_getinfo's passive-side hints -------------------------------------
service=7480
in_ns "$NA" "$IPA" "$FI_MSG" server "$service" >"$OUT/fi_msg.server.log" 2>&1 &
spid=$!
for _ in $(seq 1 200); do
    grep -q '^listening on' "$OUT/fi_msg.server.log" 2>/dev/null && break
    sleep 0.05
done
in_ns "$NB" "$IPB" "$FI_MSG" client "$IPA" "$service" >"$OUT/fi_msg.client.log" 2>&1
cst=$?
wait "$spid"
sst=$?
ok=0
[ "$cst" = 0 ] && [ "$sst" = 0 ] &&
    grep -q 'client: 12 messages sent, answers checked' "$OUT/fi_msg.client.log" &&
    grep -q 'server: 12 messages checked and answered' "$OUT/fi_msg.server.log" && ok=1
result "fi_msg (passive-side hints)" "$ok" "$(head -1 "$OUT/fi_msg.server.log"), exit $sst/$cst"

# --- Open MPI over verbs;ofi_rxm ----------------------------------------------------------------
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null &&
    mpicc.openmpi -O2 -o "$OUT/mpi_check" "$CSRC/mpi_check.c" 2>"$OUT/mpicc.log"; then
    in_ns "$NA" "$IPA" mpirun.openmpi --allow-run-as-root -np 2 --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include "verbs;ofi_rxm" "$OUT/mpi_check" >"$OUT/mpi.log" 2>&1
    st=$?
    ok=0
    [ "$st" = 0 ] && grep -q '^mpi_check: 48 messages checked each way, 0 bad' "$OUT/mpi.log" && ok=1
    result "Open MPI pml cm / mtl ofi" "$ok" "$(grep -o '8-byte round trip [0-9.]* us' "$OUT/mpi.log"), exit $st"
else
    echo "(Open MPI's mpicc.openmpi / mpirun.openmpi unusable: the MPI case is not run)"
fi

echo "$passed passed, $failed failed (logs in $OUT)"
[ "$failed" = 0 ] || { printf 'failed: %s\n' "${failures[@]}"; exit 1; }
