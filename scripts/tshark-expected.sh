#!/usr/bin/env bash
# Writes Wireshark's view of every RoCEv2 test vector to crates/softib-cli/tests/data/tshark/,
# one <vector>.tsv per ../shared/testvectors/rxe/<vector>.pcap, for tests/tshark_agreement.rs.
#
# Each file is tshark's own `-T fields` output (header line = tshark field names), one line
# per frame that has a BTH. Also checks that tshark finds no malformed packet in any vector and
# that every BTH frame ends in the InfiniBand dissector or its plain data payload (so data.len
# is the BTH payload length, and an absent data.len means no payload).
#
# Usage: scripts/tshark-expected.sh [--check]
#   --check  compare with the committed files instead of writing them (exit 1 on a difference).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
vectors="$repo/../shared/testvectors/rxe"
out="$repo/crates/softib-cli/tests/data/tshark"
mode="${1:-write}"

command -v tshark >/dev/null || { echo "tshark-expected: tshark not installed (scripts/install-deps.sh)" >&2; exit 1; }
compgen -G "$vectors/*.pcap" >/dev/null || { echo "tshark-expected: no vectors in $vectors" >&2; exit 1; }

# RPC-over-RDMA's heuristic claims small RC SEND payloads; the vectors carry none.
tshark_r() { tshark --disable-protocol rpcordma -r "$@" 2>/dev/null; }

fields=(
    frame.number
    infiniband.bth.opcode infiniband.bth.destqp infiniband.bth.psn infiniband.bth.a
    infiniband.bth.se infiniband.bth.padcnt infiniband.bth.p_key
    infiniband.aeth.syndrome infiniband.aeth.msn
    infiniband.reth.va infiniband.reth.r_key infiniband.reth.dmalen
    infiniband.atomiceth.swapdt infiniband.atomiceth.cmpdt
    infiniband.deth.q_key infiniband.deth.srcqp
    data.len frame.protocols
)
eargs=()
for f in "${fields[@]}"; do eargs+=(-e "$f"); done

mkdir -p "$out"
status=0
for pcap in "$vectors"/*.pcap; do
    name="$(basename "$pcap" .pcap)"
    malformed="$(tshark_r "$pcap" -Y _ws.malformed | wc -l)"
    if [ "$malformed" -ne 0 ]; then
        echo "tshark-expected: $name: $malformed malformed packet(s)" >&2
        status=1
    fi
    tsv="$(tshark_r "$pcap" -Y infiniband.bth -T fields -E separator=/t -E header=y \
        -E occurrence=a -E aggregator=, "${eargs[@]}")"
    # The last column is frame.protocols: the InfiniBand dissector must be the last layer but
    # for a plain `data` payload.
    bad="$(printf '%s\n' "$tsv" | awk -F'\t' 'NR > 1 && $NF !~ /:infiniband(:data)?$/ { print $1 }')"
    if [ -n "$bad" ]; then
        echo "tshark-expected: $name: frames dissected past InfiniBand: $(echo $bad)" >&2
        status=1
    fi
    frames="$(( $(printf '%s\n' "$tsv" | wc -l) - 1 ))"
    if [ "$mode" = --check ]; then
        if ! diff -q <(printf '%s\n' "$tsv") "$out/$name.tsv" >/dev/null; then
            echo "tshark-expected: $name.tsv differs from tshark's output" >&2
            status=1
        fi
    else
        printf '%s\n' "$tsv" >"$out/$name.tsv"
    fi
    printf 'tshark-expected: %-32s %4d BTH frames, %d malformed\n' "$name" "$frames" "$malformed"
done
exit "$status"
