#!/usr/bin/env bash
# stability.sh - the integration tests N times in a row (default 10) while a
# `make -j2` build of another clone of this repository runs beside them,
# over and over (clean, build), to load the machine as CI's neighbours do.
# Prints one line per run and a closing "N passed, N failed" line. Outside
# `make test` (it takes N times the suite's time under load).
#   bash tests/tools/stability.sh [N]
set -u
cd "$(dirname "$0")/../.."
n=${1:-10}
root=$(pwd)
other=$(mktemp -d /tmp/moshid-stab.XXXXXX)
git clone -q "$root" "$other/p" || { echo "stability: cannot clone"; exit 2; }
# its own process group (setsid), so that the whole build stops at the end
setsid bash -c 'cd "$1" && while :; do make -s clean >/dev/null 2>&1; make -j2 -s MOSHID_DEPS_OK=1 all >/dev/null 2>&1; done' \
    _ "$other/p" &
builder=$!
trap 'kill -- -$builder 2>/dev/null; wait $builder 2>/dev/null; rm -rf "$other"' EXIT
pass=0; fail=0
for i in $(seq 1 "$n"); do
    t0=$(date +%s)
    out=$(build/venv/bin/python -m pytest -q -p no:cacheprovider tests/integration 2>&1)
    rc=$?
    summary=$(tail -n 1 <<<"$out")
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); else
        fail=$((fail + 1)); grep -E "^(FAILED|ERROR)" <<<"$out" | head -5
        keep=$(mktemp /tmp/moshid-stab-fail.XXXXXX) && printf '%s\n' "$out" >"$keep" && echo "  (whole output: $keep)"
    fi
    echo "run $i: rc=$rc $(( $(date +%s) - t0 )) s: $summary"
done
echo "stability: $pass passed, $fail failed"
[ $fail -eq 0 ]
