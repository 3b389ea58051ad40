#!/usr/bin/env bash
# pyverbs-suite.sh - rdma-core 44's own Python test suite, unmodified, on softib.
#
# Debian's python3-pyverbs ships rdma-core's tests/ under /usr/share/doc/rdma-core/tests (some
# files gzipped). This script copies them to a temporary directory, unzips them, and runs them
# module by module under `softib run` (softib's libibverbs.so.1 and librdmacm.so.1 first on
# the loader path, every context on its own auto device), each run under a timeout
# (PYVERBS_MODULE_TIMEOUT seconds): a test that does not return is killed, counted as an
# error (TIMEOUT), and the rest of its module runs again without it, so that one hang costs
# one timeout and hides no other result. scripts/pyverbs_runner.py runs a module and records
# each test's outcome.
#
# Prints per module the tests passed, failed, in error, skipped and failing as expected, the
# unexpected failures with their reasons, the skip reasons summed over the suite, and a total
# "pyverbs: N passed, N failed, N skipped" (failed: failures, errors and timeouts not in the
# list below). Exits 1 on any failure or error except the tests listed, each with its reason,
# in scripts/pyverbs-expected.txt; a listed test that passes is reported so that it can be
# taken off the list. Prints "SKIPPED: why" and exits 0 when /usr/bin/python3, pyverbs or the
# tests directory is missing.
#
#   scripts/pyverbs-suite.sh                 every module
#   scripts/pyverbs-suite.sh test_cq test_mr only these modules
#
# Environment:
#   PYVERBS_MODULE_TIMEOUT  seconds for one run of a module [90]
#   PYVERBS_TESTS           rdma-core's tests directory [/usr/share/doc/rdma-core/tests]
#   PYVERBS_EXPECTED        the expected-failure list [scripts/pyverbs-expected.txt]
#   PYVERBS_OUT             logs, one per module [<target dir>/pyverbs-suite]
#   SOFTIB_LIB_DIR          softib's libraries, not built then [<target dir>/release]
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
PY=/usr/bin/python3
SRC=${PYVERBS_TESTS:-/usr/share/doc/rdma-core/tests}
MODULE_TIMEOUT=${PYVERBS_MODULE_TIMEOUT:-90}
EXPECTED=${PYVERBS_EXPECTED:-$REPO/scripts/pyverbs-expected.txt}
OUT=${PYVERBS_OUT:-$TARGET/pyverbs-suite}
RUNNER=$REPO/scripts/pyverbs_runner.py
T0=$SECONDS

skip() {
    echo "SKIPPED: $*"
    exit 0
}

# --- what the suite needs ---------------------------------------------------------------------
# pyverbs is built for Debian's own interpreter; a python3 first on PATH may not see it.
[ -x "$PY" ] || skip "$PY is missing"
"$PY" -c 'import pyverbs' 2>/dev/null ||
    skip "pyverbs is not importable by $PY (Debian: python3-pyverbs)"
[ -e "$SRC/run_tests.py" ] || [ -e "$SRC/run_tests.py.gz" ] ||
    skip "rdma-core's tests are not at $SRC (Debian: python3-pyverbs)"
[ -f "$EXPECTED" ] || {
    echo "FAIL: the expected-failure list $EXPECTED is missing"
    exit 1
}

# --- softib ------------------------------------------------------------------------------------
if [ -z "${SOFTIB_LIB_DIR:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p softib-verbs -p softib-rdmacm -p softib) || {
        echo "FAIL: cargo build --release -p softib-verbs -p softib-rdmacm -p softib"
        exit 1
    }
fi
SOFTIB=$TARGET/release/softib
[ -x "$SOFTIB" ] || {
    echo "FAIL: $SOFTIB is missing (cargo build --release)"
    exit 1
}

# --- the tests, unzipped in a temporary copy ---------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/softib-pyverbs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp -r "$SRC" "$WORK/tests"
if compgen -G "$WORK/tests/*.gz" >/dev/null; then
    gunzip -f "$WORK"/tests/*.gz
fi
rm -rf "$OUT"
mkdir -p "$OUT"

if [ "$#" -gt 0 ]; then
    modules=("$@")
else
    modules=()
    for f in "$WORK"/tests/test_*.py; do
        m=$(basename "$f" .py)
        modules+=("$m")
    done
fi

# The listed test ids (first word of each line that is not a comment).
listed=$(sed -e 's/#.*//' "$EXPECTED" | awk 'NF { print $1 }' | sort -u)

# Runs module $1 until every test it has is accounted for; its outcomes in $OUT/$1.results.
run_module() {
    local m=$1 res=$OUT/$1.results excl=$OUT/$1.exclude log=$OUT/$1.log
    : >"$res"
    : >"$excl"
    local runs=0 rc started
    while :; do
        runs=$((runs + 1))
        local before
        before=$(wc -l <"$res")
        (
            cd "$WORK" &&
                env -u SOFTIB_BIND -u SOFTIB_PCAP SOFTIB_CONFIG=/nonexistent \
                    PYTHONDONTWRITEBYTECODE=1 \
                    timeout -k 10 "$MODULE_TIMEOUT" "$SOFTIB" run -- \
                    "$PY" "$RUNNER" "$WORK/tests" "$m" "$res" "$excl"
        ) >>"$log" 2>&1
        rc=$?
        # A test that started and has no outcome: killed by the timeout, or the process died.
        started=$(awk '$1 == "START" { s = $2 } $1 != "START" && $2 == s { s = "" }
                       END { print s }' "$res")
        if [ -n "$started" ]; then
            if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
                echo "TIMEOUT $started no outcome within ${MODULE_TIMEOUT} s" >>"$res"
            else
                echo "CRASH $started the process ended with status $rc" >>"$res"
            fi
            awk '$1 != "START" { print $2 }' "$res" | sort -u >"$excl"
            [ "$runs" -lt 50 ] && continue
        elif [ "$rc" -ne 0 ] && [ "$(wc -l <"$res")" -eq "$before" ]; then
            # Nothing ran: the module could not be loaded (see its log).
            echo "ERROR $m.load the module did not run (status $rc, see $log)" >>"$res"
        elif [ "$rc" -gt 1 ]; then
            echo "ERROR $m.exit the runner ended with status $rc (see $log)" >>"$res"
        fi
        break
    done
}

printf '%-26s %6s %6s %6s %7s %8s %6s\n' module passed failed errors skipped expected time
total_p=0 total_f=0 total_e=0 total_s=0 total_x=0
unexpected=()
for m in "${modules[@]}"; do
    t=$SECONDS
    run_module "$m"
    dt=$((SECONDS - t))
    # passed failed errors skipped expected (unexpected failures and errors; listed ones apart)
    read -r p f e s x < <(awk -v listed="$listed" '
        BEGIN { n = split(listed, a, "\n"); for (i = 1; i <= n; i++) if (a[i] != "") L[a[i]] = 1 }
        $1 == "ok" || $1 == "xfail" { p++ }
        $1 == "skip" { s++ }
        $1 == "FAIL" || $1 == "xpass" { if ($2 in L) x++; else f++ }
        $1 == "ERROR" || $1 == "TIMEOUT" || $1 == "CRASH" { if ($2 in L) x++; else e++ }
        END { print p + 0, f + 0, e + 0, s + 0, x + 0 }' "$OUT/$m.results")
    printf '%-26s %6d %6d %6d %7d %8d %5ds\n' "$m" "$p" "$f" "$e" "$s" "$x" "$dt"
    total_p=$((total_p + p)) total_f=$((total_f + f)) total_e=$((total_e + e))
    total_s=$((total_s + s)) total_x=$((total_x + x))
    while IFS= read -r line; do
        unexpected+=("$line")
    done < <(awk -v listed="$listed" '
        BEGIN { n = split(listed, a, "\n"); for (i = 1; i <= n; i++) if (a[i] != "") L[a[i]] = 1 }
        ($1 == "FAIL" || $1 == "xpass" || $1 == "ERROR" || $1 == "TIMEOUT" || $1 == "CRASH") &&
            !($2 in L)' \
        "$OUT/$m.results")
done

cat "$OUT"/*.results >"$OUT/all.txt"

echo
echo "=== skip reasons (tests)"
awk '$1 == "skip" { $1 = ""; $2 = ""; sub(/^ +/, ""); print }' "$OUT/all.txt" |
    sort | uniq -c | sort -rn | sed 's/^/  /'

echo
if [ "${#unexpected[@]}" -gt 0 ]; then
    echo "=== unexpected failures and errors (logs in $OUT)"
    printf '  %s\n' "${unexpected[@]}"
else
    echo "=== no unexpected failure or error"
fi

# Listed tests that ran and did not fail: the list can lose them.
passing_listed=$(awk -v listed="$listed" '
    BEGIN { n = split(listed, a, "\n"); for (i = 1; i <= n; i++) if (a[i] != "") L[a[i]] = 1 }
    ($1 == "ok" || $1 == "xfail" || $1 == "skip") && ($2 in L) { print "  " $1 " " $2 }' \
    "$OUT/all.txt")
if [ -n "$passing_listed" ]; then
    echo
    echo "=== listed in $(basename "$EXPECTED") but did not fail (take them off the list)"
    echo "$passing_listed"
fi

echo
echo "expected failures and errors (listed in $(basename "$EXPECTED")): $total_x"
echo "unexpected: $total_f failed, $total_e errors; $((SECONDS - T0)) s"
echo "pyverbs: $total_p passed, $((total_f + total_e)) failed, $total_s skipped"
[ $((total_f + total_e)) -eq 0 ]
