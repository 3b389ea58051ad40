#!/usr/bin/env bash
# host-wide.sh - many processes per host sharing one softib device, on two hosts: two network
# namespaces (A: 10.77.0.1, B: 10.77.0.2) joined by a veth pair, every process bound to its
# namespace's single address (SOFTIB_BIND), with Debian's unmodified tools on softib's
# libibverbs.so.1 / librdmacm.so.1 (`softib run`):
#   - four servers in A (ibv_rc_pingpong, ibv_ud_pingpong, ib_write_bw, ib_send_lat) and
#     their four clients in B, all at once;
#   - 8 processes in each namespace in an all-to-all mesh of RC connections, every message
#     checked (scripts/c/rc_mesh.c); `softib status` lists the 8 members of each device;
#   - the same mesh with one process killed (SIGKILL) mid-run: the others finish, its peers'
#     connections to it fail with IBV_WC_RETRY_EXC_ERR within the transport's time, and
#     nothing is left in /dev/shm of either namespace once the last process exits;
#   - perftest -c XRC: two client processes of one host at once;
#   - mckey: two receivers in A and a sender in B in one multicast group;
#   - both sides of a ping-pong pinned to one CPU (more processes than CPUs):
#     ibv_rc_pingpong -s 64 and ib_send_lat -s 64 within 100 us per round trip.
# Prints PASS/FAIL per case and "N passed, M failed"; exits non-zero on any failure. Prints
# "SKIPPED: why" and exits 0 without root, ip(8) or the tools.
#
# Environment: SOFTIB_LIB_DIR (softib's libraries and binary) [<target dir>/release],
# HOST_WIDE_OUT (logs) [<target dir>/host-wide], HOST_WIDE_KEEP=1 keeps the namespaces.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
LIBDIR=${SOFTIB_LIB_DIR:-$TARGET/release}
OUT=${HOST_WIDE_OUT:-$TARGET/host-wide}
SOFTIB=$LIBDIR/softib
T0=$SECONDS

skip() { echo "SKIPPED: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip(8) (iproute2)"
for t in ibv_rc_pingpong ib_write_bw mckey; do
    command -v "$t" >/dev/null || skip "no $t (ibverbs-utils, perftest, rdmacm-utils)"
done
command -v cc >/dev/null || skip "no C compiler for scripts/c/rc_mesh.c"

if [ -z "${SOFTIB_LIB_DIR:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p softib-verbs -p softib-rdmacm -p softib) || {
        echo "FAIL: cargo build --release"
        exit 1
    }
fi
[ -x "$SOFTIB" ] || { echo "FAIL: no $SOFTIB"; exit 1; }
mkdir -p "$OUT"
MESH=$OUT/rc_mesh
cc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$MESH" "$REPO/scripts/c/rc_mesh.c" -libverbs || {
    echo "FAIL: cc scripts/c/rc_mesh.c"
    exit 1
}

# --- the two hosts ---------------------------------------------------------------------------
NA=softib-hw-a NB=softib-hw-b
IPA=10.77.0.1 IPB=10.77.0.2
# shellcheck source=scripts/two-hosts.sh
. "$REPO/scripts/two-hosts.sh"
teardown() {
    [ "${HOST_WIDE_KEEP:-0}" = 1 ] && return
    hosts_down "$NA" "$NB"
}
two_hosts_up "$NA" "$NB" "$IPA" "$IPB" || skip "cannot make the network namespaces (ip netns add, veth)"
trap teardown EXIT
export SOFTIB_CONFIG=/nonexistent
unset SOFTIB_PCAP SOFTIB_TRANSPORT
# What a namespace has in /dev/shm of its own (softib's files carry the namespace's inode).
shm_left() {
    ip netns exec "$1" sh -c 'ls /dev/shm | grep "^softib-$(stat -L -c %i /proc/self/ns/net)-" || true'
}

# shellcheck source=scripts/tally.sh
. "$REPO/scripts/tally.sh"


# --- four pairs at once ----------------------------------------------------------------------
pairs=("ibv_rc_pingpong -g 0 -n 2000|bytes in"
    "ibv_ud_pingpong -g 0 -n 2000|bytes in"
    "ib_write_bw -n 2000|65536 +2000"
    "ib_send_lat -n 2000|^ 2 +2000")
port=18950
spids=() cpids=()
for i in "${!pairs[@]}"; do
    IFS='|' read -r cmd _ <<<"${pairs[$i]}"
    # shellcheck disable=SC2086
    timeout 120 ip netns exec "$NA" env SOFTIB_BIND=$IPA "$SOFTIB" run -- $cmd -p $((port + i)) \
        >"$OUT/pair$i.server.log" 2>&1 &
    spids+=($!)
done
for i in "${!pairs[@]}"; do wait_port "$NA" $((port + i)); done
for i in "${!pairs[@]}"; do
    IFS='|' read -r cmd _ <<<"${pairs[$i]}"
    # shellcheck disable=SC2086
    timeout 120 ip netns exec "$NB" env SOFTIB_BIND=$IPB "$SOFTIB" run -- $cmd -p $((port + i)) $IPA \
        >"$OUT/pair$i.client.log" 2>&1 &
    cpids+=($!)
done
for i in "${!pairs[@]}"; do
    IFS='|' read -r cmd pat <<<"${pairs[$i]}"
    wait "${cpids[$i]}"
    crc=$?
    wait "${spids[$i]}"
    src=$?
    name="four-pairs:${cmd%% *}"
    if [ $crc = 0 ] && [ $src = 0 ] && grep -qE "$pat" "$OUT/pair$i.client.log"; then
        result "$name" 1 "$(grep -E "$pat" "$OUT/pair$i.client.log" | tail -n 1 | tr -s ' ' | cut -c1-60)"
    else
        result "$name" 0 "server rc=$src client rc=$crc (logs in $OUT/pair$i.*)"
    fi
done

# --- the mesh: 8 processes per namespace, all to all -----------------------------------------
# Runs NRANKS ranks (the first half in A, the rest in B) with extra arguments; KILL=k kills
# rank k (SIGKILL) 1.5 s in. Sets mesh_rcs.
mesh() {
    local dir=$OUT/mesh.d nranks=$1
    shift
    rm -rf "$dir" && mkdir -p "$dir"
    local pids=()
    for r in $(seq 0 $((nranks - 1))); do
        local ns=$NA ip=$IPA
        [ "$r" -lt $((nranks / 2)) ] || { ns=$NB ip=$IPB; }
        # In a subshell: the rank killed on purpose is no job of this shell's to report.
        (timeout 120 ip netns exec "$ns" env SOFTIB_BIND=$ip "$SOFTIB" run -- \
            "$MESH" "$dir" "$r" "$nranks" "$@" >"$OUT/mesh.$r.log" 2>&1) &
        pids+=($!)
    done
    if [ -n "${KILL:-}" ]; then
        sleep 1.5
        pkill -9 -f "rc_mesh $dir $KILL $nranks( |$)"
    fi
    mesh_rcs=()
    for p in "${pids[@]}"; do
        wait "$p"
        mesh_rcs+=($?)
    done
}

mesh 16 -r 300 -p 3000 &
mesh_bg=$!
# `softib status` while it runs: the 8 processes of host A share its device.
members=0
while kill -0 $mesh_bg 2>/dev/null && [ "$members" -lt 8 ]; do
    ip netns exec "$NA" "$SOFTIB" status >"$OUT/mesh.status.a" 2>&1
    members=$(grep -c ' rc_mesh ' "$OUT/mesh.status.a")
    sleep 0.1
done
wait $mesh_bg
ok=1
for r in $(seq 0 15); do
    grep -q "^rc_mesh rank $r: 4500 messages of 256 bytes checked from 15 peers" "$OUT/mesh.$r.log" || ok=0
done
result "mesh-8+8" $ok "$(grep -h '^rc_mesh rank 0:' "$OUT/mesh.0.log" | cut -c1-70)"
[ "$members" -eq 8 ] && ok=1 || ok=0
result "status-lists-8-members" $ok "$(head -n 1 "$OUT/mesh.status.a")"

KILL=5 mesh 16 -r 400 -p 10000 -d 5
ok=1 why=""
for r in $(seq 0 15); do
    [ "$r" = 5 ] && continue
    if [ "${mesh_rcs[$r]}" != 0 ] ||
        ! grep -q "rank 5 failed with transport retry counter exceeded" "$OUT/mesh.$r.log"; then
        ok=0
        why="rank $r: rc ${mesh_rcs[$r]} $(tail -n 1 "$OUT/mesh.$r.log" | cut -c1-80)"
    fi
done
[ "${mesh_rcs[5]}" != 0 ] || { ok=0; why="rank 5 was not killed"; }
left="$(shm_left "$NA")$(shm_left "$NB")"
[ -z "$left" ] || { ok=0; why="left in /dev/shm: $left"; }
result "mesh-kill-9" $ok "${why:-$(grep -ho 'rank 5 failed.*' "$OUT/mesh.0.log")}"

# --- XRC: two client processes of one host at once ---------------------------------------------
spids=() cpids=()
for p in 18960 18961; do
    ip netns exec "$NA" env SOFTIB_BIND=$IPA timeout 60 "$SOFTIB" run -- \
        ib_send_bw -c XRC -n 1000 -p $p >"$OUT/xrc.$p.server.log" 2>&1 &
    spids+=($!)
done
wait_port "$NA" 18960 && wait_port "$NA" 18961
for p in 18960 18961; do
    ip netns exec "$NB" env SOFTIB_BIND=$IPB timeout 60 "$SOFTIB" run -- \
        ib_send_bw -c XRC -n 1000 -p $p $IPA >"$OUT/xrc.$p.client.log" 2>&1 &
    cpids+=($!)
done
ok=1
for i in 0 1; do
    wait "${cpids[$i]}" || ok=0
    wait "${spids[$i]}" || ok=0
done
grep -qE '65536 +1000' "$OUT/xrc.18960.client.log" && grep -qE '65536 +1000' "$OUT/xrc.18961.client.log" || ok=0
result "perftest-xrc-2-clients" $ok "$(grep -hE '65536 +1000' "$OUT"/xrc.*.client.log | tr -s ' ' | cut -c1-40 | tr '\n' ';')"

# --- multicast: two receivers in A, the sender in B --------------------------------------------
for k in 1 2; do
    ip netns exec "$NA" env SOFTIB_BIND=$IPA timeout 30 "$SOFTIB" run -- \
        mckey -m 239.77.0.9 -b $IPA -C 20 >"$OUT/mckey.r$k.log" 2>&1 &
    eval "mr$k=\$!"
done
sleep 1
ip netns exec "$NB" env SOFTIB_BIND=$IPB timeout 30 "$SOFTIB" run -- \
    mckey -m 239.77.0.9 -b $IPB -s -C 20 >"$OUT/mckey.s.log" 2>&1
src=$?
ok=1
wait "$mr1" || ok=0
wait "$mr2" || ok=0
[ $src = 0 ] || ok=0
for f in r1 r2 s; do grep -q 'return status 0' "$OUT/mckey.$f.log" || ok=0; done
result "mckey-2-receivers" $ok "sender rc=$src"

# --- one CPU for both sides --------------------------------------------------------------------
pinned() {
    local name=$1 pat=$2 field=$3
    shift 3
    ip netns exec "$NA" env SOFTIB_BIND=$IPA timeout 60 taskset -c 0 "$SOFTIB" run -- "$@" \
        >"$OUT/$name.server.log" 2>&1 &
    local s=$!
    wait_port "$NA" "${*: -1}" 2>/dev/null || sleep 0.5
    ip netns exec "$NB" env SOFTIB_BIND=$IPB timeout 60 taskset -c 0 "$SOFTIB" run -- "$@" $IPA \
        >"$OUT/$name.client.log" 2>&1
    local c=$?
    wait $s
    local srv=$?
    local v
    v=$(grep -E "$pat" "$OUT/$name.client.log" | tail -n 1 | awk "{print \$$field}")
    if [ $c = 0 ] && [ $srv = 0 ] && [ -n "$v" ] && awk "BEGIN{exit !($v <= 100)}"; then
        result "$name" 1 "$v us per round trip"
    else
        result "$name" 0 "rc $c/$srv, ${v:-no} us per round trip (limit 100)"
    fi
}
pinned pinned-ibv_rc_pingpong 'usec/iter' 7 ibv_rc_pingpong -g 0 -s 64 -n 1000 -p 18970
# ib_send_lat reports half a round trip: t_typical (column 5) doubled must stay within 100.
ip netns exec "$NA" env SOFTIB_BIND=$IPA timeout 60 taskset -c 0 "$SOFTIB" run -- \
    ib_send_lat -s 64 -n 1000 -p 18971 >"$OUT/pinned-ib_send_lat.server.log" 2>&1 &
s=$!
wait_port "$NA" 18971
ip netns exec "$NB" env SOFTIB_BIND=$IPB timeout 60 taskset -c 0 "$SOFTIB" run -- \
    ib_send_lat -s 64 -n 1000 -p 18971 $IPA >"$OUT/pinned-ib_send_lat.client.log" 2>&1
c=$?
wait $s
srv=$?
typ=$(grep -E '^ 64 +1000' "$OUT/pinned-ib_send_lat.client.log" | awk '{print $5}')
if [ $c = 0 ] && [ $srv = 0 ] && [ -n "$typ" ] && awk "BEGIN{exit !(2 * $typ <= 100)}"; then
    result pinned-ib_send_lat 1 "t_typical $typ us (round trip $(awk "BEGIN{print 2 * $typ}") us)"
else
    result pinned-ib_send_lat 0 "rc $c/$srv, t_typical ${typ:-none} us (limit 50)"
fi

echo "=== host-wide: $passed passed, $failed failed in $((SECONDS - T0)) s (logs: $OUT)"
[ "$failed" = 0 ] || { printf '  failed: %s\n' "${failures[@]}"; exit 1; }
