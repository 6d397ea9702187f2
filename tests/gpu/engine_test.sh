#!/usr/bin/env bash
# engine_test.sh - `make test`'s view of engine-test: the CUDA kernels
# against their C twins. Passes when every test ran and passed; skips (77)
# when the plugin was not built (no nvcc) or when the kernels could not run
# (no CUDA device: the host-side checks still run and must pass).
BUILD=${BUILD:-build}
bin=$BUILD/engine-test
if [ ! -x "$bin" ]; then
    echo "engine-test not built (no nvcc, CUDA=0 or a sanitizer build): skipped"
    exit 77
fi
out=$("$bin" 2>&1); rc=$?
printf '%s\n' "$out"
last=$(tail -n 1 <<<"$out")
if [ $rc -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed, [0-9]+ skipped$' <<<"$last"; then
    echo "engine-test failed (exit $rc)"
    exit 1
fi
skipped=$(sed -E 's/.* ([0-9]+) skipped$/\1/' <<<"$last")
if [ "$skipped" -gt 0 ]; then
    echo "no CUDA device: $skipped kernel tests skipped ($(sed -E 's/ passed.*//' <<<"$last") host checks passed)"
    exit 77
fi
exit 0
