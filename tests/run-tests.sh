#!/usr/bin/env bash
# run-tests.sh - run the Check suites, test scripts and pytest suites; print
# one closing line "N passed, N failed, N skipped" and exit non-zero when
# anything failed.
#
#   run-tests.sh unit   CHECK_BIN... -- SCRIPT...
#   run-tests.sh pytest DIR...
#   run-tests.sh all    CHECK_BIN... -- SCRIPT... -- DIR...
# Test scripts exit 0 (pass), 77 (skip, with a reason on stdout) or other (fail);
# pytest prints the reason of each skip (-rs).
set -u
mode=$1; shift
bins=(); scripts=(); pydirs=()
case $mode in
unit|all)
    while [ $# -gt 0 ] && [ "$1" != -- ]; do bins+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do scripts+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    [ "$mode" = all ] && pydirs=("$@") ;;
pytest)
    pydirs=("$@")
    [ ${#pydirs[@]} -eq 0 ] && echo "pytest: no integration test directories declared (PYTEST_DIRS is empty)" ;;
*) echo "usage: $0 unit|pytest|all ..." >&2; exit 2 ;;
esac

BUILD=${BUILD:-build}
export BUILD CK_FORK=yes
passed=0; failed=0; skipped=0; failures=()
logdir=$BUILD/test-logs
mkdir -p "$logdir"

for b in "${bins[@]}"; do
    name=$(basename "$b")
    "$b" > "$logdir/$name.log" 2>&1
    rc=$?
    # Check's summary: "NN%: Checks: N, Failures: F, Errors: E"
    line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$logdir/$name.log" | tail -n 1)
    if [ -n "$line" ]; then
        n=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
        f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
        e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
        passed=$((passed + n - f - e)); failed=$((failed + f + e))
        [ $((f + e)) -gt 0 ] || [ $rc -ne 0 ] && failures+=("$name")
        [ $rc -ne 0 ] && [ $((f + e)) -eq 0 ] && failed=$((failed + 1))
        printf '%-32s %s\n' "$name" "$line"
    else
        failed=$((failed + 1)); failures+=("$name")
        printf '%-32s FAILED (exit %d, no summary)\n' "$name" "$rc"
    fi
    [ $rc -ne 0 ] && grep -vE '^[0-9]+%: Checks' "$logdir/$name.log" | grep -E ':[EF]:' | head -n 20
done

for s in "${scripts[@]}"; do
    name=$(basename "$s")
    out=$(bash "$s" 2>&1); rc=$?
    printf '%s\n' "$out" > "$logdir/$name.log"
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); printf '%-32s ok\n' "$name"
    elif [ $rc -eq 77 ]; then skipped=$((skipped + 1)); printf '%-32s skipped: %s\n' "$name" "$(tail -n 1 <<<"$out")"
    else failed=$((failed + 1)); failures+=("$name"); printf '%-32s FAILED\n%s\n' "$name" "$(tail -n 20 <<<"$out")"; fi
done

if [ ${#pydirs[@]} -gt 0 ]; then
    xml=$logdir/pytest.xml
    "${VENV:-build/venv}/bin/python" -m pytest -q -rs -p no:cacheprovider --junitxml="$xml" "${pydirs[@]}" 2>&1 | tee "$logdir/pytest.log" | tail -n 40
    if [ -f "$xml" ]; then
        read -r t f e s < <(python3 - "$xml" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
suites = [r] if r.tag == "testsuite" else list(r)
t = sum(int(x.get("tests", 0)) for x in suites)
f = sum(int(x.get("failures", 0)) for x in suites)
e = sum(int(x.get("errors", 0)) for x in suites)
s = sum(int(x.get("skipped", 0)) for x in suites)
print(t, f, e, s)
PY
)
        passed=$((passed + t - f - e - s)); failed=$((failed + f + e)); skipped=$((skipped + s))
        [ $((f + e)) -gt 0 ] && failures+=("pytest")
    else
        failed=$((failed + 1)); failures+=("pytest (no report)")
    fi
fi

[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]} (logs in $logdir)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
