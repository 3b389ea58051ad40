#!/usr/bin/env bash
# Instructions per operation for softib-wire's benchmark subjects and their baselines, counted
# by valgrind's callgrind. Unlike wall time, instruction counts do not depend on what else the
# machine is doing, so their ratios are stable from run to run (they ignore cache misses and
# instruction-level parallelism: they rank work, not time).
#
# Usage: scripts/callgrind.sh [N] [FILTER...]
#   N       iterations of each subject and baseline (default 20000)
#   FILTER  only results whose name contains one of these strings
#
# Builds the bench binary (bench profile: release + line debug info), lists its results with
# `wire --callgrind 0`, then for each operation runs `wire --callgrind N --op NAME` under
# callgrind collecting only inside that operation's #[inline(never)] loop function
# (--collect-atstart=no --toggle-collect), so the count holds N operations and nothing else.
# Prints, per result: subject Ir/op, baseline Ir/op and ratio = baseline Ir / subject Ir (the
# orientation of scripts/bench.sh: 1.0 = as much work as the baseline). Each operation's
# profile is kept as $CARGO_TARGET_DIR/callgrind/callgrind.out.<op> (or under target/) for
# callgrind_annotate. Note: valgrind reports its own CPU model, so crc32fast may take a
# different SIMD path under callgrind than natively. Honours CARGO_TARGET_DIR.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

n="${1:-20000}"
[ $# -gt 0 ] && shift
case "$n" in
    ''|*[!0-9]*|0) echo "usage: $0 [N>0] [FILTER...]" >&2; exit 2 ;;
esac

# softib's ICRC passes take the CRC-32 way a CPU with PCLMULQDQ takes (icrc.rs, `Engine`).
export SOFTIB_CRC="${SOFTIB_CRC:-clmul}"

if ! command -v valgrind >/dev/null; then
    echo "$0: valgrind not found (apt-get install -y valgrind)" >&2
    exit 1
fi

bin="$(cargo bench -p softib-wire --bench wire --no-run --message-format=json 2>/dev/null \
    | grep '"reason":"compiler-artifact"' \
    | grep '"kind":\["bench"\]' \
    | grep '"name":"wire"' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)"
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$0: could not build the wire bench (try: cargo bench -p softib-wire --bench wire --no-run)" >&2
    exit 1
fi

outdir="${CARGO_TARGET_DIR:-$repo/target}/callgrind"
mkdir -p "$outdir"
rows="$outdir/rows.txt"
"$bin" --callgrind 0 "$@" >"$rows"
if ! grep -q '^row ' "$rows"; then
    echo "$0: no results match: $*" >&2
    exit 2
fi

# Instructions per operation of one operation (cached per name).
declare -A per_op
count() {
    local op="$1" loop_fn="$2" out="$outdir/callgrind.out.$1"
    if [ -z "${per_op[$op]:-}" ]; then
        valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no \
            --collect-atstart=no "--toggle-collect=wire::$loop_fn" \
            "$bin" --callgrind "$n" --op "$op" >/dev/null 2>"$out.log" || {
            echo "$0: valgrind failed for $op; see $out.log" >&2
            exit 1
        }
        local total
        total="$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out" | head -n 1)"
        if [ -z "$total" ] || [ "$total" -lt "$n" ]; then
            echo "$0: nothing collected in wire::$loop_fn (inlined or renamed?); see $out" >&2
            exit 1
        fi
        per_op[$op]="$total"
    fi
}

echo "callgrind: $n iterations per operation ($(basename "$bin")); ratio = baseline Ir / subject Ir"
printf '%-28s %11s %-28s %12s %8s  %s\n' name "subject Ir" baseline "baseline Ir" ratio target
while read -r tag name sop sfn bop bfn _ target; do
    [ "$tag" = row ] || continue
    count "$sop" "$sfn"
    count "$bop" "$bfn"
    awk -v name="$name" -v s="${per_op[$sop]}" -v b="${per_op[$bop]}" -v n="$n" \
        -v bn="$bop" -v t="$target" 'BEGIN {
        printf "%-28s %11.1f %-28s %12.1f %8.3f  %s\n", name, s / n, bn, b / n, b / s, t
    }'
done <"$rows"
echo "(per-operation profiles: callgrind_annotate $outdir/callgrind.out.<operation>)"
