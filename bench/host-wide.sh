#!/usr/bin/env bash
# What sharing a device between processes (docs/host.md) costs: this build against a baseline
# build of another commit (by default the one before host-wide devices), in the same run,
# rounds interleaved, busy polling, medians. Prints ratios (this build / baseline):
#
#   1. same host, shared memory, the two processes on 127.0.0.1 and 127.0.0.2 (as before):
#      `softib pingpong -s 64` round trip, `softib bench send -s 64` message rate;
#   2. this build only: both processes on one address (127.0.0.1, one host-wide device):
#      the same two figures, against this build's two-address figures;
#   3. with root: two network namespaces joined by a veth pair (UDP over veth), the same two
#      figures, both builds;
#   4. with root: the hand-on step: two members of one address in one namespace over UDP only
#      (`--transport udp`), with the steering program and without it (SOFTIB_STEER=0: the
#      kernel's hash then sends one direction's datagrams to the wrong member, which hands them
#      on through the owner's inbox); the message rate either way, and the time one handed-on
#      datagram adds, from the two rates.
#
# Usage: bench/host-wide.sh [ROUNDS] [BASELINE_COMMIT]
#   env: SOFTIB=path/to/softib skips building this build; BASELINE=path/to/softib skips
#   building the baseline (otherwise built from a git worktree into <target>/baseline-*).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
TARGET=${CARGO_TARGET_DIR:-target}
if [[ -z "${SOFTIB:-}" ]]; then
    cargo build --release -q -p softib
    SOFTIB="$TARGET/release/softib"
fi
if [[ -z "${BASELINE:-}" ]]; then
    # The parent of the first commit of host-wide devices (the one that gave the core its
    # number ranges).
    first=$(git log -S'pub struct NumberRange' --format=%H -- crates/softib-core | tail -n 1)
    base=${2:-$first^}
    base=$(git rev-parse --short "$base")
    abs=$(realpath "$TARGET")
    src=$abs/baseline-src-$base
    if [[ ! -d $src ]]; then
        git worktree add --detach "$src" "$base" >/dev/null
    fi
    (cd "$src" && CARGO_TARGET_DIR=$abs/baseline-$base cargo build --release -q -p softib)
    BASELINE=$abs/baseline-$base/release/softib
fi
PORT=${SOFTIB_BENCH_PORT:-18781}
TMP=$(mktemp -d)
NA=softib-hwb-a NB=softib-hwb-b
root=0
# shellcheck source=scripts/two-hosts.sh
. scripts/two-hosts.sh
cleanup() {
    rm -rf "$TMP"
    [[ $root = 1 ]] && hosts_down $NA $NB
    return 0
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# pair OUT BIN "server prefix" "client prefix" SERVER_BIND CLIENT_BIND DEST ARGS...: one
# pingpong (round trip, us) and one bench send (Mpps), appended to OUT.rtt and OUT.rate.
pair() {
    local out=$1 bin=$2 spre=$3 cpre=$4 sb=$5 cb=$6 dest=$7
    shift 7
    # shellcheck disable=SC2086
    $spre timeout 120 "$bin" pingpong --bind "$sb" -p $PORT -s 64 -n 20000 "$@" >"$TMP/s" 2>&1 &
    local s=$!
    sleep 0.3
    # shellcheck disable=SC2086
    $cpre timeout 120 "$bin" pingpong --bind "$cb" -p $PORT -s 64 -n 20000 "$@" "$dest" >"$TMP/c" 2>&1 ||
        { echo "pingpong failed ($out):"; cat "$TMP/c" "$TMP/s"; exit 1; }
    wait $s
    awk '/usec\/iter/ {print $(NF-1)}' "$TMP/c" >>"$out.rtt"
    # shellcheck disable=SC2086
    $spre timeout 120 "$bin" bench send --bind "$sb" -p $PORT --json "$@" >"$TMP/s" 2>&1 &
    s=$!
    sleep 0.3
    # shellcheck disable=SC2086
    $cpre timeout 120 "$bin" bench send --bind "$cb" -p $PORT -s 64 -n 1000000 --json "$@" "$dest" >"$TMP/c" 2>&1 ||
        { echo "bench failed ($out):"; cat "$TMP/c" "$TMP/s"; exit 1; }
    wait $s
    jq -r .msg_rate_mpps "$TMP/c" >>"$out.rate"
}

if [[ $(id -u) = 0 ]] && two_hosts_up $NA $NB 10.78.0.1 10.78.0.2 2>/dev/null; then
    root=1
fi

for ((i = 0; i < ROUNDS; i++)); do
    for b in new old; do
        bin=$SOFTIB
        [[ $b = old ]] && bin=$BASELINE
        pair "$TMP/shm2_$b" "$bin" "" "" 127.0.0.1 127.0.0.2 127.0.0.1
        if [[ $root = 1 ]]; then
            pair "$TMP/veth_$b" "$bin" "ip netns exec $NA" "ip netns exec $NB" 10.78.0.1 10.78.0.2 10.78.0.1
        fi
    done
    pair "$TMP/shm1_new" "$SOFTIB" "" "" 127.0.0.1 127.0.0.1 127.0.0.1
    if [[ $root = 1 ]]; then
        pair "$TMP/steer_on" "$SOFTIB" "ip netns exec $NA" "ip netns exec $NA" 10.78.0.1 10.78.0.1 10.78.0.1 --transport udp
        pair "$TMP/steer_off" "$SOFTIB" "ip netns exec $NA env SOFTIB_STEER=0" "ip netns exec $NA env SOFTIB_STEER=0" 10.78.0.1 10.78.0.1 10.78.0.1 --transport udp
    fi
done

m() { median <"$TMP/$1"; }
echo "== host-wide devices: this build ($("$SOFTIB" --version)) / baseline ($BASELINE), $ROUNDS rounds, medians; load $(cut -d' ' -f1-3 /proc/loadavg)"
ratio() { # label new old unit (lower|higher is better)
    awk -v n="$2" -v o="$3" -v l="$1" -v u="$4" 'BEGIN {printf "%-58s %.2fx  (%.2f / %.2f %s)\n", l, n / o, n, o, u}'
}
ratio "shm, two addresses: pingpong 64 B round trip new/old" "$(m shm2_new.rtt)" "$(m shm2_old.rtt)" us
ratio "shm, two addresses: send 64 B message rate new/old" "$(m shm2_new.rate)" "$(m shm2_old.rate)" Mpps
ratio "shm, one address (one device) / two addresses: round trip" "$(m shm1_new.rtt)" "$(m shm2_new.rtt)" us
ratio "shm, one address (one device) / two addresses: message rate" "$(m shm1_new.rate)" "$(m shm2_new.rate)" Mpps
if [[ $root = 1 ]]; then
    ratio "UDP over veth (two namespaces): round trip new/old" "$(m veth_new.rtt)" "$(m veth_old.rtt)" us
    ratio "UDP over veth (two namespaces): message rate new/old" "$(m veth_new.rate)" "$(m veth_old.rate)" Mpps
    ratio "one address over UDP, hand-on (no steering) / steered: round trip" "$(m steer_off.rtt)" "$(m steer_on.rtt)" us
    ratio "one address over UDP, hand-on (no steering) / steered: rate" "$(m steer_off.rate)" "$(m steer_on.rate)" Mpps
    awk -v on="$(m steer_on.rate)" -v off="$(m steer_off.rate)" 'BEGIN {printf "  a handed-on datagram adds %.0f ns to its message (one direction handed on, rates %.2f / %.2f Mpps)\n", 1000 / off - 1000 / on, off, on}'
else
    echo "(not root: the namespace and hand-on figures are left out)"
fi
