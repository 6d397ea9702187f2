#!/usr/bin/env bash
# asan_run.sh - what `make asan` runs (the unit and integration tests on an
# AddressSanitizer + UBSan build), in a build directory of one's choice,
# with the whole output kept and one closing line to record:
#   asan_run.sh [BUILD_DIR]      (default build/asan, as `make asan`)
# The log is BUILD_DIR/asan-run.log; the summary (date, commit, durations,
# the two "N passed, N failed, N skipped" lines, sanitizer reports found in
# the test logs) BUILD_DIR/asan-summary.txt. Exit status: non-zero when
# either pass failed or a sanitizer report was found.
set -u
cd "$(dirname "$0")/../.."
dir=${1:-build/asan}
mkdir -p "$dir"
log=$dir/asan-run.log sum=$dir/asan-summary.txt
args=(MOSHID_DEPS_OK=1 "BUILD=$dir" SAN=1 OPT=-O1 MOSHID_ASAN=1)
: > "$log"
rc=0
declare -A secs
for goal in test-unit test-integration; do
    t0=$(date +%s)
    make --no-print-directory -j"${JOBS:-2}" "${args[@]}" "$goal" >> "$log" 2>&1 || rc=1
    secs[$goal]=$(( $(date +%s) - t0 ))
done
# A daemon that hits a report exits non-zero (its test fails); the reports
# themselves are in the test logs and the daemons' logs under /tmp/pytest-*.
reports=$(grep -rlE '(ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:)' "$log" "$dir/test-logs" 2>/dev/null | wc -l)
[ "$reports" -eq 0 ] || rc=1
{
    echo "asan run $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git describe --always --dirty --abbrev=12 2>/dev/null || echo "unknown (not a git tree)"), build $dir"
    echo "unit: ${secs[test-unit]} s; integration: ${secs[test-integration]} s"
    grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log"
    echo "files with a sanitizer report: $reports"
    echo "exit: $rc"
} > "$sum"
cat "$sum"
exit $rc
