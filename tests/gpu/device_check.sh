#!/usr/bin/env bash
# device_check.sh - the one script to run on a machine with a GPU (for
# example a lent H200 with nvcc, a C compiler and no package registry).
# Builds `make engine-only`, then runs engine-test (every kernel against
# its C twin) and engine-bench, and prints a markdown block to paste into
# docs/benchmarks.md. Budget: well under 8 minutes including the build;
# each step has its own timeout.
#
#   bash tests/gpu/device_check.sh            # from the repository root
# Output also goes to $OUT/device_check.md when $OUT is set.
set -u
cd "$(dirname "$0")/../.."
BUILD_DIR=build/engine-only
jobs=$(nproc 2>/dev/null || echo 4)
[ "$jobs" -gt 16 ] && jobs=16
log=$(mktemp)
say() { printf '%s\n' "$*" | tee -a "$log"; }

export PATH="$PATH:/usr/local/cuda/bin"
say "## Device check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -n 1)
say "- GPU (nvidia-smi): $gpu"
say "- nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), host $(${CC:-cc} --version | head -n 1)"

t0=$(date +%s)
if ! timeout 300 make -j"$jobs" engine-only > "$log.build" 2>&1; then
    tail -n 30 "$log.build"
    say "- build: FAILED (make engine-only, log above)"
    rc=1
else
    say "- build: make -j$jobs engine-only, $(( $(date +%s) - t0 )) s"
    rc=0
fi

if [ $rc -eq 0 ]; then
    say ""
    say "### engine-test"
    say '```'
    timeout 180 "$BUILD_DIR/engine-test" > "$log.test" 2>&1; trc=$?
    grep -vE '^ok ' "$log.test" | tee -a "$log"
    say '```'
    [ $trc -eq 0 ] || rc=1
    if grep -q 'no CUDA device' "$log.test"; then
        say "- no CUDA device: the kernels were NOT checked"
        rc=2
    fi
    say ""
    say "### engine-bench"
    timeout 180 "$BUILD_DIR/engine-bench" 2>&1 | tee -a "$log"; [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
say ""
say "(full test log: $(wc -l < "$log.test" 2>/dev/null || echo 0) lines; result $(case $rc in 0) echo PASS ;; 2) echo "NOT RUN (no device)" ;; *) echo FAIL ;; esac))"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$log" "$OUT/device_check.md"
    cp "$log.test" "$OUT/engine_test.log" 2>/dev/null
    cp "$log.build" "$OUT/build.log" 2>/dev/null
fi
rm -f "$log" "$log.test" "$log.build"
exit $rc
