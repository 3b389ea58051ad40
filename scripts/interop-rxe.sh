#!/usr/bin/env bash
# interop-rxe.sh - softib against a real Linux Soft-RoCE (rdma_rxe) peer in a qemu guest.
#
# Boots one guest of ../shared/interop/rxe-vm (building the image first if it is missing) with its
# RoCEv2 NIC on a tap device inside a network namespace; softib runs in that namespace on an
# ordinary UDP socket bound to 10.99.0.1:4791, the guest's rxe1 is 10.99.0.2 (GID index 1 =
# ::ffff:10.99.0.2). For each of rc, uc and ud:
#   - softib pingpong (client) -> guest ibv_<svc>_pingpong (server)   (exchange: hostfwd 18515)
#   - guest ibv_<svc>_pingpong (client) -> softib pingpong (server)   (exchange: guestfwd
#     10.0.2.100:18515 -> 127.0.0.1:18516 in the namespace)
#   - the capture of each run taken on the tap (what the kernels really put on the wire, rxe's
#     packets included): every packet's ICRC checks out (`softib pcap check`) and tshark decodes
#     every packet as InfiniBand with no malformed packet
# Then for each of write, read, send and atomic, softib bench (speaking perftest's exchange)
# against the guest's ib_<op>_bw, both as client and as server, with the same checks; the side
# that prints the client's report must print the iteration count.
# Then Debian's own binaries on softib's libibverbs.so.1 (LD_LIBRARY_PATH, SOFTIB_BIND) against
# the same binaries on rxe, both roles: ibv_rc/uc/ud/srq_pingpong with -c, and perftest's
# ib_{write,read,send,atomic}_{bw,lat} (RC) and ib_send_bw -c UC/UD, ib_write_bw -c UC; wire
# capture checked the same way, retransmissions reported.
# Then the IB Communication Manager against the guest kernel's CM, both roles: `softib cm probe
# --establish` (REQ, REP, RTU, DREQ, DREP) to the guest's `rping -s`, and the guest's `rping -c`
# to `softib cm listen --accept`; each side must see the connection established and then
# disconnected, and the capture is checked the same way.
# Then rdma_cm programs on softib's librdmacm.so.1 against the same programs on rxe, both
# roles: rping (-V), udaddy (UD through SIDR), ucmatose, rdma_server / rdma_client (the
# endpoint API), rstream (-T v) and riostream over rsockets; and the guest's ib_send_bw -R /
# ib_write_bw -R against softib's.
# A run passes when both programs exit 0 and neither side retransmitted (the tap loses nothing,
# so a retransmission means the peer silently dropped a packet, e.g. for a bad ICRC).
#
# Prints "N passed, M failed"; exits non-zero on failure. Prints "SKIPPED: why" and exits 0 when
# root, /dev/net/tun, network namespaces, qemu or the guest image are unavailable.
#
# Environment:
#   SOFTIB_BIN            softib binary [built: cargo build --release -p softib --bin softib]
#   RXE_VM_DIR            the rig [<repo>/../shared/interop/rxe-vm]
#   RXE_VM_CACHE          where the rig keeps the guest image [~/.cache/softib-rxe-vm]
#   SOFTIB_INTEROP_OUT    logs and captures [<target dir>/interop-rxe]
#   SOFTIB_INTEROP_ITERS  pingpong iterations [10]; SOFTIB_INTEROP_SIZE message size [64]
#   SOFTIB_INTEROP_BENCH_ITERS, SOFTIB_INTEROP_BENCH_SIZE  perftest runs [100, 65536]
#   SOFTIB_INTEROP_NO_INSTALL=1  do not apt-get qemu / tcpdump (skip instead)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RIG=${RXE_VM_DIR:-$REPO/../shared/interop/rxe-vm}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
OUT=${SOFTIB_INTEROP_OUT:-$TARGET/interop-rxe}
ITERS=${SOFTIB_INTEROP_ITERS:-10}
SIZE=${SOFTIB_INTEROP_SIZE:-64}
BENCH_ITERS=${SOFTIB_INTEROP_BENCH_ITERS:-100}
BENCH_SIZE=${SOFTIB_INTEROP_BENCH_SIZE:-65536}
NS=softib-rxe          # network namespace (qemu, the tap and softib live in it)
TAP=sibtap0
VM=softib-interop      # run-vm.sh instance name
HOST_IP=10.99.0.1
GUEST_IP=10.99.0.2
GUEST_DEV=rxe1
GUEST_GID=1            # ::ffff:10.99.0.2
PP_PORT=18515          # guest as TCP server: hostfwd 127.0.0.1:18515 -> guest :18515
SRV_PORT=18516         # softib as TCP server: guest 10.0.2.100:18515 -> 127.0.0.1:18516
T0=$SECONDS

log() { echo "[interop-rxe +$((SECONDS - T0))s] $*"; }
skip() { echo "SKIPPED: $*"; exit 0; }

# --- can this machine run the stage? ----------------------------------------------------------
[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(id -u)" = 0 ] || skip "needs root (network namespace, tap device, qemu networking)"
[ -x "$RIG/run-vm.sh" ] || skip "the rxe-vm rig is not at $RIG (set RXE_VM_DIR)"
[ -c /dev/net/tun ] || skip "/dev/net/tun is missing (no tap devices)"
command -v ip >/dev/null || skip "iproute2 (ip) is missing"
probe=softib-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then skip "cannot create network namespaces (ip netns add)"; fi
ip netns del "$probe"

apt_install() {
    [ "${SOFTIB_INTEROP_NO_INSTALL:-0}" = 1 ] && return 1
    command -v apt-get >/dev/null || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
        >"$OUT/apt.log" 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$OUT/apt.log" 2>&1 \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
            >>"$OUT/apt.log" 2>&1; }
}

mkdir -p "$OUT"
rm -f "$OUT"/*.pcap "$OUT"/*.log "$OUT"/*.txt
CACHE=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/softib-rxe-vm}
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -e "$CACHE/rootfs.img" ]; then
    [ "${SOFTIB_INTEROP_NO_INSTALL:-0}" = 1 ] && ! command -v qemu-system-x86_64 >/dev/null \
        && skip "qemu-system-x86_64 is missing (SOFTIB_INTEROP_NO_INSTALL=1)"
    log "building the guest image (build-vm.sh --install-host-deps; log $OUT/build-vm.log)"
    if ! timeout 600 "$RIG/build-vm.sh" --install-host-deps >"$OUT/build-vm.log" 2>&1; then
        tail -n 15 "$OUT/build-vm.log"
        command -v qemu-system-x86_64 >/dev/null || skip "qemu is unavailable (install failed, see above)"
        skip "cannot build the guest image (no Debian mirror? see above)"
    fi
fi
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is missing"
command -v tcpdump >/dev/null || apt_install tcpdump || true
command -v tshark >/dev/null || apt_install tshark || true
HAVE_TCPDUMP=0; command -v tcpdump >/dev/null && HAVE_TCPDUMP=1
HAVE_TSHARK=0; command -v tshark >/dev/null && HAVE_TSHARK=1

# --- softib -----------------------------------------------------------------------------------
if [ -z "${SOFTIB_BIN:-}" ]; then
    log "building softib and its libibverbs.so.1 (cargo build --release -p softib -p softib-verbs)"
    (cd "$REPO" && cargo build --release -q -p softib --bin softib -p softib-verbs) || { echo "FAIL: cargo build"; echo "0 passed, 1 failed"; exit 1; }
    SOFTIB_BIN=$TARGET/release/softib
fi
[ -x "$SOFTIB_BIN" ] || { echo "FAIL: no softib binary at $SOFTIB_BIN"; echo "0 passed, 1 failed"; exit 1; }

# --- guest ------------------------------------------------------------------------------------
R=$RIG/run-vm.sh
pass=0 fail=0
ok()  { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    "$R" stop --name "$VM" >/dev/null 2>&1
    ip netns del "$NS" 2>/dev/null
    true
}
finish() {
    cleanup
    trap - EXIT
    log "done"
    echo "$pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit
}
trap cleanup EXIT
trap 'echo "interrupted"; bad "interrupted"; finish' INT TERM

# A namespace or guest left by an earlier, killed run.
"$R" stop --name "$VM" >/dev/null 2>&1
ip netns del "$NS" 2>/dev/null

gssh() { timeout 60 "$R" ssh --name "$VM" "$@"; }
nsx() { ip netns exec "$NS" "$@"; }

log "booting the guest (TCG; $NS / $TAP; guest $GUEST_IP)"
t=$SECONDS
if ! timeout 300 "$R" start --name "$VM" --netns "$NS" --tap "$TAP" --tap-ip "$HOST_IP/24" \
    --ip1 "$GUEST_IP/24" --fwd-tcp "$PP_PORT:$PP_PORT" --guestfwd "10.0.2.100:$PP_PORT:$SRV_PORT" \
    >"$OUT/boot.log" 2>&1; then
    tail -n 20 "$OUT/boot.log"
    bad "guest boot"
    finish
fi
ok "guest boot ($((SECONDS - t)) s)"
if gssh "rdma link show | grep -q \"^link $GUEST_DEV/1 state ACTIVE\""; then ok "guest $GUEST_DEV active"; else
    bad "guest $GUEST_DEV active"; finish; fi
gssh "uname -r; ibv_devinfo -d $GUEST_DEV | grep -E 'active_mtu|link_layer'" >"$OUT/guest.txt" 2>&1

# rxe's retransmission counters, summed (requester retries + duplicate requests seen).
rxe_retries() {
    gssh "cd /sys/class/infiniband/$GUEST_DEV/ports/1/hw_counters && echo \$((\$(cat completer_retry_err) + \$(cat duplicate_request) + \$(cat rcvd_seq_err)))" 2>/dev/null || echo -1
}
# Polls CMD for up to $1 seconds.
wait_for() {
    local n=$1; shift
    local i
    for i in $(seq 1 $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}
start_capture() { # file
    CAP_PID=
    [ "$HAVE_TCPDUMP" = 1 ] || return 0
    # Not through nsx (a function): $! must be tcpdump itself (ip netns exec execs it).
    ip netns exec "$NS" tcpdump -i "$TAP" -U --immediate-mode -B 65536 -Z root -w "$1" udp port 4791 >"$1.tcpdump.log" 2>&1 &
    CAP_PID=$!
    BG_PIDS+=("$CAP_PID")
    wait_for 5 grep -q listening "$1.tcpdump.log"
}
stop_capture() {
    [ -n "$CAP_PID" ] || return 0
    sleep 1
    kill -INT "$CAP_PID" 2>/dev/null
    wait_for 5 sh -c "! kill -0 $CAP_PID" || kill -KILL "$CAP_PID" 2>/dev/null
    wait "$CAP_PID" 2>/dev/null
}
# The softib side's flags towards rxe: see docs/interop.md.
# GSO on and every ICRC verified (IPv4 Identifications solved from the ICRC).
SOFTIB_FLAGS=(--bind "$HOST_IP" --stats --timeout 60 -s "$SIZE" -n "$ITERS")
BENCH_FLAGS=(--bind "$HOST_IP" --stats --timeout 60 -n "$BENCH_ITERS")
softib_retries() { # log: retransmitted_pkts + duplicate_request from --stats (every process's)
    # No counters: the process did not close its device (it was killed).
    grep -oE '(retransmitted_pkts|duplicate_request): [0-9]+' "$1" |
        awk '{ n += $2; seen = 1 } END { if (seen) print n; else print "unknown (no counters printed)" }'
}
check_wire() { # name pcap
    local name=$1 pcap=$2
    [ "$HAVE_TCPDUMP" = 1 ] || { echo "note: no tcpdump, wire capture not checked"; return; }
    local out n lost
    lost=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$pcap.tcpdump.log")
    [ "${lost:-0}" = 0 ] || echo "note: $name: the capture missed $lost packets (tcpdump fell behind)"
    out=$("$SOFTIB_BIN" pcap check "$pcap" 2>&1)
    n=$(echo "$out" | sed -n 's/.*: \([0-9]*\) packets, \([0-9]*\) icrc ok, 0 bad.*/\1 \2/p')
    if [ -n "$n" ] && [ "${n% *}" = "${n#* }" ] && [ "${n% *}" -gt 0 ]; then
        ok "$name: wire capture, ICRC of all ${n% *} packets (both sides) ok"
    else
        bad "$name: wire capture ICRC: $out"
    fi
    [ "$HAVE_TSHARK" = 1 ] || { echo "note: no tshark, decode not checked"; return; }
    # One tshark run: a line per frame with its BTH opcode (empty when no BTH was dissected)
    # and the malformed marker (empty unless tshark flagged the frame).
    local fields total ib malformed
    fields=$(tshark -r "$pcap" --disable-protocol rpcordma -T fields -E separator=/t \
        -e frame.number -e infiniband.bth.opcode -e _ws.malformed 2>/dev/null)
    total=$(printf '%s\n' "$fields" | awk -F'\t' 'NF && $1 != "" {n++} END {print n+0}')
    ib=$(printf '%s\n' "$fields" | awk -F'\t' '$2 != "" {n++} END {print n+0}')
    malformed=$(printf '%s\n' "$fields" | awk -F'\t' '$3 != "" {n++} END {print n+0}')
    if [ "$total" -gt 0 ] && [ "$ib" = "$total" ] && [ "$malformed" = 0 ]; then
        ok "$name: tshark decodes all $total packets as InfiniBand BTH, none malformed"
    else
        bad "$name: tshark: $total packets, $ib with a BTH, $malformed malformed"
    fi
}

# A host program still running when its guest peer timed out: every thread's stack (gdb, when
# the machine has it) into FILE, and the innermost frames of each thread printed.
stacks() { # program file
    local pid
    pid=$(pgrep -n -x "$1") || return 0
    command -v gdb >/dev/null || { echo "note: $1 ($pid) still running; no gdb for its stacks"; return 0; }
    timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt 12" >"$2" 2>&1
    echo "--- $1 ($pid) still running after its peer timed out; its threads (all frames: $2):"
    grep -E '^(Thread|#[0-5] )' "$2" | cut -c1-160
}
# After a failed run: the last packets on the wire and rxe's counters (a stall shows who
# waits for whom; the CI machine keeps no files).
wire_tail() { # pcap
    [ -s "$1" ] || return 0
    echo "--- the last 30 packets of $1 (of $("$SOFTIB_BIN" pcap decode "$1" 2>/dev/null | wc -l)):"
    "$SOFTIB_BIN" pcap decode "$1" 2>/dev/null | tail -n 30
    echo "--- rxe's non-zero counters:"
    gssh "cd /sys/class/infiniband/$GUEST_DEV/ports/1/hw_counters && grep -v ':0$' * | grep . | tr '\n' ' '" 2>/dev/null
    echo
}
# One run with the guest as server: starts GUEST_CMD in the guest, then HOST_CMD (given
# 127.0.0.1, the exchange through hostfwd) against it. Sets src, grc, before, after, sr, t.
client_run_once() { # base tool guest_cmd host_cmd...
    local base=$1 tool=$2 gcmd=$3
    shift 3
    guest_server_once "$base" "$tool" "$gcmd" 10 "ss -Hltn 'sport = :$PP_PORT' | grep -q LISTEN" \
        "$@" 127.0.0.1
}
# GUEST_CMD started in the guest, then, once READY holds there (up to WAIT s), HOST_CMD.
# Sets src, grc, before, after, sr, t.
guest_server_once() { # base tool guest_cmd wait ready host_cmd...
    local base=$1 tool=$2 gcmd=$3 wait=$4 ready=$5
    shift 5
    gssh "pkill -x $tool; rm -f /tmp/run.rc; (timeout 60 $gcmd >/tmp/run.log 2>&1; echo \$? >/tmp/run.rc) >/dev/null 2>&1 &"
    wait_for "$wait" gssh "$ready"
    before=$(rxe_retries)
    start_capture "$base.wire.pcap"
    t=$SECONDS
    "$@" >"$base.log" 2>&1
    src=$?
    wait_for 20 gssh "test -s /tmp/run.rc"
    grc=$(gssh "cat /tmp/run.rc" 2>/dev/null)
    gssh "cat /tmp/run.log" >"$base.guest.log" 2>&1
    stop_capture
    after=$(rxe_retries)
    sr=$(softib_retries "$base.log")
}
# One run with HOST_CMD as server (given -p SRV_PORT) and GUEST_CMD as client towards
# 10.0.2.100 (guestfwd). Sets src, grc, before, after, sr, t.
server_run_once() { # base guest_cmd host_cmd...
    local base=$1 gcmd=$2
    shift 2
    before=$(rxe_retries)
    start_capture "$base.wire.pcap"
    t=$SECONDS
    "$@" -p "$SRV_PORT" >"$base.log" 2>&1 &
    local spid=$!
    BG_PIDS+=("$spid")
    wait_for 10 nsx sh -c "ss -Hltn 'sport = :$SRV_PORT' | grep -q LISTEN"
    gssh "timeout 60 $gcmd 10.0.2.100" >"$base.guest.log" 2>&1
    grc=$?
    wait "$spid"
    src=$?
    stop_capture
    after=$(rxe_retries)
    sr=$(softib_retries "$base.log")
}
# perftest measures the CPU clock before it reports. In the TCG guest on a loaded 2-core host
# that measurement can fail perftest's own check (r^2 < 0.9: "Can't produce a report", exit 1)
# whatever the transport did, so such a run is repeated once, and the note says so. Every
# check still applies to the repeated run.
clock_unmeasured() { # base
    grep -q "Can't produce a report" "$1.log" "$1.guest.log" 2>/dev/null
}
client_run() { # base tool guest_cmd host_cmd...
    client_run_once "$@"
    if clock_unmeasured "$1"; then
        echo "note: $1: perftest could not measure its CPU clock (r^2 < 0.9); running it again"
        client_run_once "$@"
    fi
}
server_run() { # base guest_cmd host_cmd...
    server_run_once "$@"
    if clock_unmeasured "$1"; then
        echo "note: $1: perftest could not measure its CPU clock (r^2 < 0.9); running it again"
        server_run_once "$@"
    fi
}

# softib's own tools in the namespace, with a capture of their own frames.
softib_client_run() { # base tool guest_cmd softib-args...
    local base=$1 tool=$2 gcmd=$3
    shift 3
    client_run "$base" "$tool" "$gcmd" nsx timeout 90 "$SOFTIB_BIN" "$@" --pcap "$base.softib.pcap"
}
softib_server_run() { # base guest_cmd softib-args...
    local base=$1 gcmd=$2
    shift 2
    server_run "$base" "$gcmd" nsx timeout 90 "$SOFTIB_BIN" "$@" --pcap "$base.softib.pcap"
}

for svc in rc uc ud; do
    tool=ibv_${svc}_pingpong
    gcmd="$tool -d $GUEST_DEV -g $GUEST_GID -s $SIZE -n $ITERS"
    for role in client server; do
        if [ "$role" = client ]; then
            name="softib $svc client -> $tool server"
            base=$OUT/$svc-softib-client
            softib_client_run "$base" "$tool" "$gcmd" pingpong --service "$svc" "${SOFTIB_FLAGS[@]}"
        else
            name="$tool client -> softib $svc server"
            base=$OUT/$svc-softib-server
            softib_server_run "$base" "$gcmd" pingpong --service "$svc" "${SOFTIB_FLAGS[@]}"
        fi
        if [ "$src" = 0 ] && [ "$grc" = 0 ] && [ "$before" -ge 0 ] && [ "$after" = "$before" ] && [ "$sr" = 0 ]; then
            ok "$name ($((SECONDS - t)) s; $(grep -o '[0-9.]* usec/iter' "$base.log"))"
        else
            bad "$name (softib exit $src, guest exit ${grc:-none}, rxe retries $((after - before)), softib retries $sr; logs $base.*)"
            tail -n 5 "$base.log" "$base.guest.log"
            wire_tail "$base.wire.pcap"
        fi
        check_wire "$name" "$base.wire.pcap"
    done
done

# perftest: softib bench (perftest exchange) <-> ib_<op>_bw, both roles. Thousands of packets
# per run: on a loaded 2-core machine a side can be descheduled for longer than the 67 ms
# transport timer and the peer retransmits (seen: softib read nothing for 77 ms, then the
# originals and the copies). RC recovers; so here retransmissions are reported, not failed, and
# the ICRC of what went over the wire is checked in the capture (a rejected ICRC shows there).
retries_note() { # rxe softib
    if [ "$1" = 0 ] && [ "$2" = 0 ]; then echo "no retransmissions"; else
        echo "retransmissions: rxe $1, softib $2"; fi
}
for op in write read send atomic; do
    tool=ib_${op}_bw
    # perftest refuses a size for atomics (always 8 bytes).
    sz=(-s "$BENCH_SIZE"); [ "$op" = atomic ] && sz=()
    gcmd="$tool -d $GUEST_DEV -x $GUEST_GID -n $BENCH_ITERS ${sz[*]}"
    for role in client server; do
        if [ "$role" = client ]; then
            name="softib bench $op client -> $tool server"
            base=$OUT/bench-$op-softib-client
            softib_client_run "$base" "$tool" "$gcmd" bench "$op" --perftest "${BENCH_FLAGS[@]}" "${sz[@]}"
            # perftest's server prints the client's report (SEND: its own).
            report=$base.guest.log
        else
            name="$tool client -> softib bench $op server"
            base=$OUT/bench-$op-softib-server
            softib_server_run "$base" "$gcmd" bench "$op" "${BENCH_FLAGS[@]}" "${sz[@]}"
            report=$base.log
        fi
        # The report line: "<bytes> <iterations> ..." with the iteration count asked for.
        rep=$(grep -cE "^ *[0-9]+ +$BENCH_ITERS " "$report")
        if [ "$src" = 0 ] && [ "$grc" = 0 ] && [ "$rep" -ge 1 ] && [ "$before" -ge 0 ]; then
            ok "$name ($((SECONDS - t)) s; guest: $(grep -E "^ *[0-9]+ +$BENCH_ITERS " "$base.guest.log" | awk '{print $4 " MB/s"}'); $(retries_note "$((after - before))" "$sr"))"
        else
            bad "$name (softib exit $src, guest exit ${grc:-none}, report lines $rep, rxe retries $((after - before)), softib retries $sr; logs $base.*)"
            tail -n 5 "$base.log" "$base.guest.log"
            wire_tail "$base.wire.pcap"
        fi
        check_wire "$name" "$base.wire.pcap"
    done
done

# --- Debian's own tools on softib's libibverbs.so.1 against the same tools on rxe ----------
# The host side runs the unmodified binaries with softib's library first on the loader path
# and its device bound to the tap address (SOFTIB_BIND), GID index 0 on softib, 1 in the
# guest; SOFTIB_STATS=1 makes the library print its counters at close (retransmissions).
LIB_LD=$OUT/ld
mkdir -p "$LIB_LD"
if [ -f "$TARGET/release/libibverbs.so" ]; then
    ln -sf "$TARGET/release/libibverbs.so" "$LIB_LD/libibverbs.so.1"
    [ -f "$TARGET/release/librdmacm.so" ] && ln -sf "$TARGET/release/librdmacm.so" "$LIB_LD/librdmacm.so.1"
    HAVE_LIB=1
else
    HAVE_LIB=0
    bad "softib's libibverbs.so is not built ($TARGET/release/libibverbs.so; cargo build --release)"
fi
libx() { # the host tool under softib's library, in the namespace
    nsx env LD_LIBRARY_PATH="$LIB_LD" SOFTIB_BIND="$HOST_IP" SOFTIB_STATS=1 \
        SOFTIB_CONFIG=/nonexistent timeout 90 "$@"
}
lib_case() { # name base pattern: both exit 0 and either side printed the result line
    local name=$1 base=$2 pat=$3
    local report=$base.both.log
    cat "$base.log" "$base.guest.log" >"$report" 2>/dev/null
    if [ "$src" = 0 ] && [ "$grc" = 0 ] && [ "$before" -ge 0 ] && grep -qE "$pat" "$report"; then
        ok "$name ($((SECONDS - t)) s; $(grep -E "$pat" "$report" | tail -n 1 | tr -s ' ' | cut -c1-50); $(retries_note "$((after - before))" "$sr"))"
    else
        bad "$name (host exit $src, guest exit ${grc:-none}, rxe retries $((after - before)), softib retries $sr; logs $base.*)"
        tail -n 5 "$base.log" "$base.guest.log"
        wire_tail "$base.wire.pcap"
    fi
    check_wire "$name" "$base.wire.pcap"
}
if [ "$HAVE_LIB" = 1 ]; then
    PP_PAT='[0-9]+ iters in [0-9.]+ seconds'
    for svc in rc uc ud srq; do
        tool=ibv_${svc}_pingpong
        sz=$SIZE
        [ "$svc" = ud ] && [ "$sz" -lt 512 ] && sz=512
        gcmd="$tool -d $GUEST_DEV -g $GUEST_GID -s $sz -n $ITERS -c"
        name="$tool on softib's libibverbs (client) -> $tool on rxe"
        base=$OUT/lib-$svc-client
        client_run "$base" "$tool" "$gcmd" libx "$tool" -g 0 -s "$sz" -n "$ITERS" -c
        lib_case "$name" "$base" "$PP_PAT"
        name="$tool on rxe -> $tool on softib's libibverbs (server)"
        base=$OUT/lib-$svc-server
        server_run "$base" "$gcmd" libx "$tool" -g 0 -s "$sz" -n "$ITERS" -c
        lib_case "$name" "$base" "$PP_PAT"
    done
    PT_PAT="^ *[0-9]+ +$BENCH_ITERS +[0-9.]+"
    for spec in "ib_write_bw RC" "ib_read_bw RC" "ib_send_bw RC" "ib_atomic_bw RC" \
        "ib_write_lat RC" "ib_read_lat RC" "ib_send_lat RC" "ib_atomic_lat RC" \
        "ib_send_bw UC" "ib_send_bw UD" "ib_write_bw UC"; do
        set -- $spec
        tool=$1 conn=$2
        sz=(-s 4096)
        case $tool in ib_atomic_*) sz=() ;; *_lat) sz=(-s 64) ;; esac
        [ "$conn" = UD ] && sz=(-s 1024)
        gcmd="$tool -d $GUEST_DEV -x $GUEST_GID -c $conn -n $BENCH_ITERS ${sz[*]}"
        name="$tool -c $conn on softib's libibverbs (client) -> rxe"
        base=$OUT/lib-$tool-$conn-client
        client_run "$base" "$tool" "$gcmd" libx "$tool" -x 0 -c "$conn" -n "$BENCH_ITERS" "${sz[@]}" -p "$PP_PORT"
        lib_case "$name" "$base" "$PT_PAT"
        name="$tool -c $conn on rxe -> softib's libibverbs (server)"
        base=$OUT/lib-$tool-$conn-server
        server_run "$base" "$gcmd" libx "$tool" -x 0 -c "$conn" -n "$BENCH_ITERS" "${sz[@]}"
        lib_case "$name" "$base" "$PT_PAT"
    done
fi

# --- IB CM against the kernel's CM (rdma_cm under rping) ---------------------------------------
name="softib cm probe --establish -> rping -s (kernel CM passive)"
base=$OUT/cm-softib-active
gssh "pkill -x rping; rm -f /tmp/run.rc; (timeout 30 rping -s -a $GUEST_IP -v -C 1 >/tmp/run.log 2>&1; echo \$? >/tmp/run.rc) >/dev/null 2>&1 &"
wait_for 10 gssh "pgrep -x rping"
start_capture "$base.wire.pcap"
t=$SECONDS
nsx timeout 60 "$SOFTIB_BIN" cm probe --bind "$HOST_IP" --peer "$GUEST_IP" --establish \
    --pcap "$base.softib.pcap" >"$base.log" 2>&1
src=$?
gssh "pkill -x rping; sleep 0.5; cat /tmp/run.log" >"$base.guest.log" 2>&1
stop_capture
if [ "$src" = 0 ] && grep -q "established, then disconnected" "$base.log" \
    && grep -q "DISCONNECT EVENT" "$base.guest.log"; then
    ok "$name ($((SECONDS - t)) s)"
else
    bad "$name (softib exit $src; logs $base.*)"
    tail -n 5 "$base.log" "$base.guest.log"
fi
check_wire "$name" "$base.wire.pcap"

name="rping -c (kernel CM active) -> softib cm listen --accept"
base=$OUT/cm-softib-passive
start_capture "$base.wire.pcap"
t=$SECONDS
nsx timeout 60 "$SOFTIB_BIN" cm listen --bind "$HOST_IP" --accept --timeout-ms 20000 \
    --pcap "$base.softib.pcap" >"$base.log" 2>&1 &
spid=$!
BG_PIDS+=("$spid")
wait_for 10 grep -q listening "$base.log"
gssh "timeout 30 rping -c -a $HOST_IP -v -C 1" >"$base.guest.log" 2>&1
wait "$spid"
src=$?
stop_capture
if [ "$src" = 0 ] && grep -q "^disconnected" "$base.log" \
    && grep -q "ConnectRequest" "$base.log" && grep -q "DISCONNECT EVENT" "$base.guest.log"; then
    ok "$name ($((SECONDS - t)) s)"
else
    bad "$name (softib exit $src; logs $base.*)"
    tail -n 5 "$base.log" "$base.guest.log"
fi
check_wire "$name" "$base.wire.pcap"

# --- rdma_cm programs on softib's librdmacm.so.1 against the same programs on rxe -------------
# Connections made by the IB CM: softib's agent on QP1 against the guest kernel's CM, both
# roles. The guest's server listens before the host's client starts (the kernel lists its
# rdma_cm ids); the host's server shows nothing outside the process: it gets 1 s.
cm_client() { # name base tool guest_server_cmd pattern host_cmd...
    local name=$1 pat=$5
    local b=$2 tool=$3 gcmd=$4
    shift 5
    # The kernel lists rdma_cm ids: wait for the listener.
    guest_server_once "$b" "$tool" "$gcmd" 20 "rdma res show cm_id | grep -q LISTEN" libx "$@"
    lib_case "$name" "$b" "$pat"
}
cm_server() { # name base guest_client_cmd pattern host_cmd...
    local name=$1 pat=$4
    base=$2
    cm_server_once "$@"
    # The guest's perftest client may fail its CPU clock check and exit before the end of
    # the run (see clock_unmeasured), leaving the host's server waiting for it: once more.
    if clock_unmeasured "$base"; then
        echo "note: $base: perftest could not measure its CPU clock (r^2 < 0.9); running it again"
        cm_server_once "$@"
    fi
    lib_case "$name" "$base" "$pat"
}
cm_server_once() { # name base guest_client_cmd pattern host_cmd...
    local gcmd=$3
    base=$2
    shift 4
    before=$(rxe_retries)
    start_capture "$base.wire.pcap"
    t=$SECONDS
    libx "$@" >"$base.log" 2>&1 &
    local spid=$!
    BG_PIDS+=("$spid")
    sleep 1
    gssh "timeout 60 $gcmd" >"$base.guest.log" 2>&1
    grc=$?
    [ "$grc" = 124 ] && stacks "$1" "$base.stacks.txt"
    # A client that gave up on its clock leaves the server waiting for it: end the server.
    clock_unmeasured "$base" && pkill -TERM -x "$1"
    wait "$spid"
    src=$?
    stop_capture
    after=$(rxe_retries)
    sr=$(softib_retries "$base.log")
}
if [ "$HAVE_LIB" = 1 ] && [ -e "$LIB_LD/librdmacm.so.1" ]; then
    CM_COUNT=5
    RP_PAT="ping data: rdma-ping-$((CM_COUNT - 1)):"
    cm_client "rping -c on softib's librdmacm -> rping -s on rxe (kernel CM)" "$OUT/rdmacm-rping-client" \
        rping "rping -s -a $GUEST_IP -C $CM_COUNT -V" "$RP_PAT" \
        rping -c -a "$GUEST_IP" -C "$CM_COUNT" -V -v
    cm_server "rping -c on rxe (kernel CM) -> rping -s on softib's librdmacm" "$OUT/rdmacm-rping-server" \
        "rping -c -a $HOST_IP -C $CM_COUNT -V -v" "$RP_PAT" \
        rping -s -a "$HOST_IP" -C "$CM_COUNT" -V
    # Two softib processes on the host address at once (one host-wide device, one UDP port):
    # the guest's two rping clients reach each server by its own rdma_cm port.
    base=$OUT/rdmacm-rping-two-servers
    before=$(rxe_retries)
    start_capture "$base.wire.pcap"
    t=$SECONDS
    libx rping -s -a "$HOST_IP" -p 7174 -C "$CM_COUNT" -V >"$base.a.log" 2>&1 &
    spa=$!
    libx rping -s -a "$HOST_IP" -p 7175 -C "$CM_COUNT" -V >"$base.b.log" 2>&1 &
    spb=$!
    BG_PIDS+=("$spa" "$spb")
    sleep 1
    gssh "timeout 60 rping -c -a $HOST_IP -p 7174 -C $CM_COUNT -V -v & timeout 60 rping -c -a $HOST_IP -p 7175 -C $CM_COUNT -V -v; wait" \
        >"$base.guest.log" 2>&1
    grc=$?
    wait "$spa"
    sra=$?
    wait "$spb"
    srb=$?
    stop_capture
    after=$(rxe_retries)
    cat "$base.a.log" "$base.b.log" >"$base.log"
    sr=$(softib_retries "$base.log")
    src=$((sra | srb))
    name="two rping clients on rxe -> two rping -s on softib's librdmacm, one host address"
    [ "$(grep -c "$RP_PAT" "$base.guest.log")" -ge 2 ] || src=1
    lib_case "$name" "$base" "$RP_PAT"
    for tool in udaddy ucmatose; do
        cm_client "$tool on softib's librdmacm (client) -> $tool on rxe" "$OUT/rdmacm-$tool-client" \
            "$tool" "$tool -b $GUEST_IP -C 20" 'return status 0' \
            "$tool" -s "$GUEST_IP" -C 20
        cm_server "$tool on rxe (client) -> $tool on softib's librdmacm" "$OUT/rdmacm-$tool-server" \
            "$tool -s $HOST_IP -C 20" 'return status 0' \
            "$tool" -b "$HOST_IP" -C 20
    done
    cm_client "rdma_client on softib's librdmacm -> rdma_server on rxe" "$OUT/rdmacm-rdma_client" \
        rdma_server "rdma_server -s $GUEST_IP" 'rdma_client: end 0' \
        rdma_client -s "$GUEST_IP"
    cm_server "rdma_client on rxe -> rdma_server on softib's librdmacm" "$OUT/rdmacm-rdma_server" \
        "rdma_client -s $HOST_IP" 'rdma_client: end 0' \
        rdma_server -s "$HOST_IP"
    # rsockets: rdma-core's rsocket protocol (the connection's private data, RDMA WRITE WITH
    # IMMEDIATE data and credits, riomap / riowrite) against rdma-core's own librdmacm on
    # rxe, both roles: rstream -T v (data verified) and riostream, 1 MiB transfers (the
    # 128 KiB receive buffers wrap) and 64-byte ones through rpoll (-T a).
    RS_PAT='^custom +[0-9]+[kmg]? +[0-9]+[kmg]? +1 '
    for spec in "rstream 1048576 10 v" "rstream 64 200 a" "riostream 1048576 10 v" \
        "riostream 64 200 a"; do
        read -r tool size count mode <<<"$spec"
        cm_client "$tool -S $size -T $mode on softib's librdmacm (client) -> $tool on rxe" \
            "$OUT/rsocket-$tool-$size-client" "$tool" \
            "$tool -b $GUEST_IP -S $size -C $count -T $mode" "$RS_PAT" \
            "$tool" -s "$GUEST_IP" -S "$size" -C "$count" -T "$mode"
        # rdma-core's rpoll reports POLLHUP beside the last data when the server's DISCONNECT
        # comes in the same batch, and rstream then fails: the guest's client blocks in
        # rrecv (-T b) where softib's server polls (-T a).
        gmode=$mode
        [ "$mode" = a ] && gmode=b
        cm_server "$tool -S $size -T $gmode on rxe (client) -> $tool -T $mode on softib's librdmacm" \
            "$OUT/rsocket-$tool-$size-server" \
            "$tool -s $HOST_IP -S $size -C $count -T $gmode" "$RS_PAT" \
            "$tool" -b "$HOST_IP" -S "$size" -C "$count" -T "$mode"
    done
    # perftest -R with softib as the server only: Debian's perftest (4.5-0.17) connects a
    # second time for its data connection, and when the server has not listened again yet
    # (the TCG guest is that slow) its client's retry reuses the ids it just destroyed and
    # fails whatever the library (fixed upstream by reallocating them). The client role is
    # run between two softib processes (scripts/verbs-tools.sh).
    PT_PAT="^ *[0-9]+ +$BENCH_ITERS +[0-9.]+"
    for tool in ib_send_bw ib_write_bw; do
        cm_server "$tool -R on rxe -> softib's librdmacm (server)" "$OUT/rdmacm-$tool-server" \
            "$tool -R -d $GUEST_DEV -n $BENCH_ITERS -s 4096 $HOST_IP" "$PT_PAT" \
            "$tool" -R -n "$BENCH_ITERS" -s 4096
    done
else
    bad "softib's librdmacm.so is not built ($TARGET/release/librdmacm.so; cargo build --release)"
fi

gssh "cd /sys/class/infiniband/$GUEST_DEV/ports/1/hw_counters && grep . *" >"$OUT/rxe-hw-counters.txt" 2>&1
log "logs and captures in $OUT"
finish
