#!/usr/bin/env bash
# verbs-tools.sh - Debian's own RDMA tools, unmodified, on softib's libibverbs.so.1.
#
# Every case runs a server and a client as two processes on this machine, both loading
# softib's library (LD_LIBRARY_PATH=<repo>/lib, no other configuration: each process's
# device takes the first free 127.0.0.x), and passes when both exit 0 and the client prints
# its result line:
#   ibv_devices, ibv_devinfo -v
#   ibv_rc/uc/ud/srq_pingpong, each polling and with -e (completion events), all with -c
#     (the receiver checks every buffer); ibv_rc_pingpong also with -N (the ibv_wr_* API)
#   perftest ib_{write,read,send,atomic}_{bw,lat} (RC), ib_send_bw -c UC / -c UD,
#     ib_write_bw -c UC
# (XRC, ibv_xsrq_pingpong and perftest -c XRC, runs in cargo test: crates/softib-verbs/tests/xrc_tools.rs)
# and, on softib's librdmacm.so.1 beside it (connections made by the IB CM over QP1, the
# server's device on 127.0.0.1 by rdma_bind_addr, or on the first free loopback address for a
# wildcard listen):
#   rping (-V: the data checked), udaddy (UD, SIDR), ucmatose (4 connections),
#   rdma_server / rdma_client (the endpoint API), cmtime, rping through `softib relay`
#   dropping 10 % of the datagrams (3 seeds)
#   rsockets: rstream and riostream (-T v: data verified) blocking, with rpoll, non-blocking
#   and through rdma_getaddrinfo, 1 B to 1 MiB; riostream's 64-byte ping-pong through one
#   buffer per side (20000 rounds); rstream through the relay dropping 2 % (2 seeds)
#   perftest with -R: ib_{send,write,read,atomic}_bw, ib_send_bw -c UD, ib_{write,send}_lat
# Prints PASS/FAIL per case and "N passed, M failed"; exits non-zero on any failure. Prints
# "SKIPPED: why" and exits 0 when the tools cannot be installed.
#
# Environment:
#   SOFTIB_LIB_DIR      directory of softib's libibverbs.so [<target dir>/release]
#   VERBS_TOOLS_ITERS   pingpong iterations [200]; VERBS_TOOLS_BENCH_ITERS perftest [500]
#   VERBS_TOOLS_OUT     logs [<target dir>/verbs-tools]
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
LIBDIR=${SOFTIB_LIB_DIR:-$TARGET/release}
OUT=${VERBS_TOOLS_OUT:-$TARGET/verbs-tools}
ITERS=${VERBS_TOOLS_ITERS:-200}
BENCH_ITERS=${VERBS_TOOLS_BENCH_ITERS:-500}
T0=$SECONDS

skip() { echo "SKIPPED: $*"; exit 0; }

# --- the tools ------------------------------------------------------------------------------
need=()
command -v ibv_rc_pingpong >/dev/null || need+=(ibverbs-utils)
command -v ib_write_bw >/dev/null || need+=(perftest)
command -v rping >/dev/null || need+=(rdmacm-utils)
if [ "${#need[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/tmp/softib-verbs-tools-apt.log 2>&1 \
        || skip "cannot install ${need[*]} (see /tmp/softib-verbs-tools-apt.log)"
fi

# --- softib's library -----------------------------------------------------------------------
# `cargo test` builds the cdylib into deps/ only; `cargo build` puts it where the loader path
# (and lib/libibverbs.so.1) points. Quick when it is up to date.
if [ -z "${SOFTIB_LIB_DIR:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p softib-verbs -p softib-rdmacm -p softib) || {
        echo "FAIL: cargo build --release -p softib-verbs -p softib-rdmacm -p softib"
        exit 1
    }
fi
[ -f "$LIBDIR/libibverbs.so" ] || {
    echo "FAIL: $LIBDIR/libibverbs.so is missing (cargo build --release)"
    exit 1
}
[ -f "$LIBDIR/librdmacm.so" ] || {
    echo "FAIL: $LIBDIR/librdmacm.so is missing (cargo build --release)"
    exit 1
}
mkdir -p "$OUT/ld"
ln -sf "$LIBDIR/libibverbs.so" "$OUT/ld/libibverbs.so.1"
ln -sf "$LIBDIR/librdmacm.so" "$OUT/ld/librdmacm.so.1"
export LD_LIBRARY_PATH="$OUT/ld"
unset SOFTIB_BIND SOFTIB_PCAP
export SOFTIB_CONFIG=/nonexistent

passed=0
failed=0
failures=()
port=19000

result() { # name ok reason
    if [ "$2" = 1 ]; then
        passed=$((passed + 1))
        printf 'PASS %-40s %s\n' "$1" "$3"
    else
        failed=$((failed + 1))
        failures+=("$1")
        printf 'FAIL %-40s %s\n' "$1" "$3"
    fi
}

# single NAME PATTERN CMD... : one process; passes on exit 0 with PATTERN in its output.
single() {
    local name=$1 pat=$2
    shift 2
    local log="$OUT/$name.log"
    if timeout 30 "$@" >"$log" 2>&1 && grep -qE "$pat" "$log"; then
        result "$name" 1 ""
    else
        result "$name" 0 "$(tail -n 3 "$log" | tr '\n' ' ')"
    fi
}

# pair NAME PATTERN SERVER_CMD... -- CLIENT_CMD... : the server in the background, then the
# client (both connect their TCP exchange to 127.0.0.1, which reaches the server whatever
# loopback address its softib device took for RoCE); passes when both exit 0 and the client
# printed PATTERN.
pair() {
    local name=$1 pat=$2
    shift 2
    local scmd=() ccmd=()
    while [ "$1" != "--" ]; do scmd+=("$1"); shift; done
    shift
    ccmd=("$@")
    local slog="$OUT/$name.server.log" clog="$OUT/$name.client.log"
    # Wait until the server listens: on its TCP port, or, for an rdma_cm server (-R, or a
    # tool with no TCP exchange), until softib's connection manager says so on its stderr
    # (SOFTIB_CM_DEBUG traces "softib cm: listen ...").
    local p cm=0
    p=$(printf '%s\n' "${scmd[@]}" | grep -A1 -x -- '-p' | tail -n 1)
    if [ -z "$p" ] || printf '%s\n' "${scmd[@]}" | grep -qx -- '-R'; then cm=1; fi
    if [ "$cm" = 1 ]; then
        SOFTIB_CM_DEBUG=1 timeout 60 "${scmd[@]}" >"$slog" 2>&1 &
    else
        timeout 60 "${scmd[@]}" >"$slog" 2>&1 &
    fi
    local spid=$!
    for _ in $(seq 1 200); do
        if [ "$cm" = 1 ]; then
            grep -q '^softib cm: listen' "$slog" && break
        else
            ss -ltn 2>/dev/null | grep -q ":$p " && break
        fi
        sleep 0.05
    done
    timeout 60 "${ccmd[@]}" >"$clog" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && grep -qE "$pat" "$clog"; then
        result "$name" 1 "$(grep -E "$pat" "$clog" | tail -n 1 | tr -s ' ' | cut -c1-60)"
    else
        result "$name" 0 "server rc=$src client rc=$crc: $(tail -n 2 "$slog" "$clog" | tr '\n' ' ' | cut -c1-300)"
    fi
}

next_port() { port=$((port + 1)); }

echo "=== softib's libibverbs.so.1: $LIBDIR/libibverbs.so"

single ibv_devices 'softib0' ibv_devices
single ibv_devinfo-v 'PORT_ACTIVE.*' ibv_devinfo -v
grep -q 'GID\[  0\]:.*::ffff:127\.0\.0\.[0-9]*, RoCE v2' "$OUT/ibv_devinfo-v.log" \
    && result ibv_devinfo-gid 1 "" || result ibv_devinfo-gid 0 "no RoCE v2 GID line"

# --- pingpongs --------------------------------------------------------------------------------
PP_PAT='[0-9]+ iters in [0-9.]+ seconds'
for svc in rc uc ud srq; do
    for mode in poll events; do
        next_port
        extra=(-c)
        [ "$mode" = events ] && extra+=(-e)
        size=()
        [ "$svc" = ud ] && size=(-s 1024)
        pair "ibv_${svc}_pingpong-$mode" "$PP_PAT" \
            "ibv_${svc}_pingpong" -g 0 -p "$port" -n "$ITERS" "${size[@]}" "${extra[@]}" -- \
            "ibv_${svc}_pingpong" -g 0 -p "$port" -n "$ITERS" "${size[@]}" "${extra[@]}" 127.0.0.1
    done
done
next_port
pair "ibv_rc_pingpong-new-send-api" "$PP_PAT" \
    ibv_rc_pingpong -g 0 -p "$port" -n "$ITERS" -c -N -- \
    ibv_rc_pingpong -g 0 -p "$port" -n "$ITERS" -c -N 127.0.0.1

# --- beside a kernel rxe ----------------------------------------------------------------------
# A loaded rdma_rxe holds UDP port 4791 on the wildcard address, so no loopback address has it
# free: "auto" devices take port 4792 and reach each other there. In a network namespace of
# its own (root), a socket holds 0.0.0.0:4791 as rxe's does, and ibv_rc_pingpong runs.
name=ibv_rc_pingpong-beside-rxe
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
    next_port
    if timeout 60 unshare -n bash -c '
        ip link set lo up || exit 1
        python3 -c "import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 4791)); time.sleep(55)" &
        holder=$!
        for _ in $(seq 1 100); do ss -Huan "sport = :4791" | grep -q . && break; sleep 0.05; done
        ibv_devinfo -v | grep -q PORT_ACTIVE || { echo "ibv_devinfo: no active port"; kill $holder; exit 1; }
        ibv_rc_pingpong -g 0 -p "$1" -n "$2" -c >"$3.server.log" 2>&1 &
        srv=$!
        for _ in $(seq 1 200); do ss -Hltn "sport = :$1" | grep -q . && break; sleep 0.05; done
        ibv_rc_pingpong -g 0 -p "$1" -n "$2" -c 127.0.0.1; c=$?
        wait $srv; s=$?
        kill $holder
        [ "$c" = 0 ] && [ "$s" = 0 ]' _ "$port" "$ITERS" "$OUT/$name" >"$OUT/$name.log" 2>&1 \
        && grep -qE "$PP_PAT" "$OUT/$name.log"; then
        result "$name" 1 "$(grep -E "$PP_PAT" "$OUT/$name.log" | tail -n 1)"
    else
        result "$name" 0 "$(tail -n 3 "$OUT/$name.log" "$OUT/$name.server.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
    fi
else
    echo "SKIP $name: needs root and unshare -n (a network namespace)"
fi

# --- perftest ---------------------------------------------------------------------------------
# The result line: "#bytes #iterations ..." followed by numbers.
PT_PAT='^ *[0-9]+ +[0-9]+ +[0-9.]+'
for tool in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
    next_port
    pair "$tool-RC" "$PT_PAT" \
        "$tool" -p "$port" -n "$BENCH_ITERS" -- \
        "$tool" -p "$port" -n "$BENCH_ITERS" 127.0.0.1
done
for spec in "ib_send_bw UC" "ib_send_bw UD" "ib_write_bw UC"; do
    set -- $spec
    next_port
    # UD messages fit one MTU; UC has no flow control, so a burst of 128 64 KiB messages can
    # overrun the receiver's socket buffer and lose a message (UC may), which perftest's UC
    # receiver waits for forever: 4 KiB messages keep a full send queue inside the buffer.
    size=(-s 4096)
    [ "$2" = UD ] && size=(-s 1024)
    pair "$1-$2" "$PT_PAT" \
        "$1" -c "$2" -p "$port" -n "$BENCH_ITERS" "${size[@]}" -- \
        "$1" -c "$2" -p "$port" -n "$BENCH_ITERS" "${size[@]}" 127.0.0.1
done

# --- rdma_cm ----------------------------------------------------------------------------------
echo "=== softib's librdmacm.so.1: $LIBDIR/librdmacm.so"
pair rping "ping data: rdma-ping-$((ITERS / 10 - 1)):" \
    rping -s -a 127.0.0.1 -C $((ITERS / 10)) -V -- \
    rping -c -a 127.0.0.1 -C $((ITERS / 10)) -V -v
pair udaddy 'return status 0' udaddy -C 50 -- udaddy -s 127.0.0.1 -C 50
pair ucmatose 'return status 0' ucmatose -c 4 -C 50 -- ucmatose -s 127.0.0.1 -c 4 -C 50
pair rdma_server-client 'rdma_client: end 0' rdma_server -- rdma_client -s 127.0.0.1
# cmtime's server serves until killed: the client's timing table (every step of 20
# connections, disconnect and destroy included) and its exit status decide.
cmtime -c 20 >"$OUT/cmtime.server.log" 2>&1 &
cm_server=$!
sleep 1
if timeout 60 cmtime -s 127.0.0.1 -c 20 >"$OUT/cmtime.client.log" 2>&1 \
    && grep -qE '^disconnect +: +[0-9.]+' "$OUT/cmtime.client.log"; then
    result cmtime 1 "$(grep -E '^connect ' "$OUT/cmtime.client.log" | tr -s ' ')"
else
    result cmtime 0 "$(tail -n 3 "$OUT/cmtime.client.log" | tr '\n' ' ')"
fi
kill "$cm_server" 2>/dev/null
wait "$cm_server" 2>/dev/null
# rsockets (rdma-core's protocol: RDMA WRITE WITH IMMEDIATE into the peer's receive buffer,
# credits written into its SGL): rstream and riostream in their modes (-T v: data verified;
# b: blocking MSG_WAITALL; a: rpoll; n: MSG_DONTWAIT; r: rdma_getaddrinfo), small messages
# and 1 MiB transfers that wrap the 128 KiB receive buffer.
RS_PAT='^custom +[0-9]+[kmg]? +[0-9]+[kmg]? +1 '
for spec in "rstream 1048576 50 v b" "rstream 100 2000 v a" "rstream 65536 200 v n" \
    "rstream 1 1000 v r" "riostream 1048576 50 v b" "riostream 64 1000 v a" \
    "riostream 4096 500 v n"; do
    read -r tool size count m1 m2 <<<"$spec"
    pair "$tool-$size-$m1$m2" "$RS_PAT" \
        "$tool" -b 127.0.0.1 -S "$size" -C "$count" -T "$m1" -T "$m2" -- \
        "$tool" -s 127.0.0.1 -S "$size" -C "$count" -T "$m1" -T "$m2"
done
# A 64-byte ping-pong through one buffer per side: each side polls the last byte of its
# buffer, then writes its answer there and riowrite()s it back. The responder must store
# every byte of an RDMA WRITE once, the last byte last (glibc's memcpy stores 64 bytes
# twice), or an answer is overwritten and both sides wait forever. Non-blocking (-T n), the
# sides answer within a microsecond of each other: without that ordering 3000 rounds hung in
# one run of three, 5000 in three of three.
pair riostream-64-pingpong '^custom +64 +1 +20k ' \
    riostream -b 127.0.0.1 -S 64 -C 1 -I 20000 -T n -- \
    riostream -s 127.0.0.1 -S 64 -C 1 -I 20000 -T n
# Through `softib relay` dropping a share of the datagrams each way (CM MADs and data alike):
# the CM's retries and the transport's bring everything through. The server on 127.0.0.201
# and the client on .202 reach each other via .203 / .204 (SOFTIB_PEER_VIA); short CM
# timeouts (t = 14: 67 ms).
# lossy_pair NAME LOSS SEED PATTERN SERVER_CMD... -- CLIENT_CMD...
lossy_pair() {
    local name=$1 loss=$2 seed=$3 pat=$4
    shift 4
    local scmd=() ccmd=()
    while [ "$1" != "--" ]; do scmd+=("$1"); shift; done
    shift
    ccmd=("$@")
    "$SOFTIB_BIN" relay --loss "$loss" --seed "$seed" --duration 8 \
        127.0.0.203:4791=127.0.0.201:4791 127.0.0.204:4791=127.0.0.202:4791 \
        >"$OUT/$name.relay.log" 2>&1 &
    local relay=$!
    sleep 0.3
    SOFTIB_PEER_VIA=127.0.0.202=127.0.0.203:4791 SOFTIB_CM_RESPONSE_TIMEOUT=14 \
        timeout 30 "${scmd[@]}" >"$OUT/$name.server.log" 2>&1 &
    local spid=$!
    sleep 0.5
    SOFTIB_PEER_VIA=127.0.0.201=127.0.0.204:4791 SOFTIB_CM_RESPONSE_TIMEOUT=14 \
        SOFTIB_BIND=127.0.0.202 timeout 30 "${ccmd[@]}" >"$OUT/$name.client.log" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    wait "$relay"
    local dropped
    dropped=$(grep -o 'dropped: [0-9]*' "$OUT/$name.relay.log" | grep -o '[0-9]*$')
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && grep -qE "$pat" "$OUT/$name.client.log" \
        && [ "${dropped:-0}" -gt 0 ]; then
        result "$name" 1 "$(grep -E "$pat" "$OUT/$name.client.log" | tail -n 1 | tr -s ' ' | cut -c1-40); the relay dropped $dropped datagrams"
    else
        result "$name" 0 "server rc=$src client rc=$crc relay: $(cat "$OUT/$name.relay.log")"
    fi
}
SOFTIB_BIN=${SOFTIB_BIN:-$LIBDIR/softib}
if [ -x "$SOFTIB_BIN" ]; then
    # 20 pings verified (-V), 10 % loss.
    for seed in 1 2 3; do
        lossy_pair "rping-lossy-relay-seed$seed" 0.1 "$seed" "rdma-ping-19:" \
            rping -s -a 127.0.0.201 -C 20 -V -- \
            rping -c -I 127.0.0.202 -a 127.0.0.201 -C 20 -V -v
    done
    # 3 MiB of rstream data verified, 2 % loss.
    for seed in 1 2; do
        lossy_pair "rstream-lossy-relay-seed$seed" 0.02 "$seed" "$RS_PAT" \
            rstream -b 127.0.0.201 -S 65536 -C 48 -T v -- \
            rstream -s 127.0.0.201 -S 65536 -C 48 -T v
    done
else
    result lossy-relay 0 "no softib binary at $SOFTIB_BIN"
fi
for spec in "ib_send_bw RC" "ib_write_bw RC" "ib_read_bw RC" "ib_atomic_bw RC" "ib_send_bw UD" \
    "ib_write_lat RC" "ib_send_lat RC"; do
    set -- $spec
    next_port
    size=()
    [ "$2" = UD ] && size=(-s 1024)
    pair "$1-R-$2" "$PT_PAT" \
        "$1" -R -c "$2" -p "$port" -n "$BENCH_ITERS" "${size[@]}" -- \
        "$1" -R -c "$2" -p "$port" -n "$BENCH_ITERS" "${size[@]}" 127.0.0.1
done

echo "=== verbs-tools: $passed passed, $failed failed in $((SECONDS - T0)) s (logs: $OUT)"
[ "$failed" = 0 ] || { printf '  failed: %s\n' "${failures[@]}"; exit 1; }
