# Sourced by the CI scripts that run cases and print one verdict line each
# (scripts/host-wide.sh, mpi.sh, libfabric.sh).
#
#   result NAME OK DETAIL   prints "PASS NAME DETAIL" (OK = 1) or "FAIL NAME DETAIL" and counts
#                           it in $passed / $failed; failed names collect in ${failures[@]}

passed=0 failed=0 failures=()

result() {
    if [ "$2" = 1 ]; then
        passed=$((passed + 1))
        printf 'PASS %-34s %s\n' "$1" "$3"
    else
        failed=$((failed + 1))
        failures+=("$1")
        printf 'FAIL %-34s %s\n' "$1" "$3"
    fi
}
