#!/usr/bin/env bash
# device_check.sh - the one script to run on a machine with a GPU (for
# example a lent H200 with nvcc, a C compiler, Python with torch and no
# package registry). Builds `make engine-only`, runs engine-test (every
# kernel against its C twin: the same cases `make test` runs on the
# emulator), then engine-test --small under compute-sanitizer's memcheck,
# racecheck and synccheck when it is installed, then engine-bench, and
# prints a markdown block to paste into docs/benchmarks.md.
#
#   bash tests/gpu/device_check.sh            # from anywhere in the checkout
#   DEVICE_CHECK_BUDGET_S=540 (default)       # whole-script budget, seconds
# Every stage runs under `timeout -k`, capped by what is left of the budget
# (a stage that no longer fits is skipped and reported). The toolkit that
# nvcc really belongs to is put first on PATH; the driver's CUDA version is
# printed beside the toolkit's requirement (a toolkit newer than the driver
# otherwise reads as "no device"). Each engine-test case's name is printed
# before it runs, so a crash or a hang names its kernel.
# Exit: 0 pass, 1 fail, 2 no usable device. Output also goes to $OUT
# (device_check.md and the logs) when $OUT is set.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD_DIR=build/engine-only
BUDGET=${DEVICE_CHECK_BUDGET_S:-540}
T0=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 4)
[ "$jobs" -gt 16 ] && jobs=16
tmp=$(mktemp -d)
log=$tmp/device_check.md
say() { printf '%s\n' "$*" | tee -a "$log"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }

# run_stage NAME MAX_S LOGFILE CMD...: run CMD with output to LOGFILE under
# timeout -k, at most MAX_S seconds and what is left of the budget; sets
# stage_rc (124/137: timed out; 200: skipped, no time left) and stage_s.
run_stage() {
    local name=$1 max=$2 out=$3
    shift 3
    local l
    l=$(left)
    [ "$l" -lt "$max" ] && max=$((l - 5))
    if [ "$max" -lt 10 ]; then
        say "- $name: SKIPPED (the ${BUDGET}-s budget is spent)"
        stage_rc=200
        stage_s=0
        return
    fi
    local s
    s=$(date +%s)
    timeout -k 10 "$max" "$@" > "$out" 2>&1
    stage_rc=$?
    stage_s=$(($(date +%s) - s))
    if [ $stage_rc -eq 124 ] || [ $stage_rc -eq 137 ]; then
        say "- $name: TIMED OUT after ${max} s"
    fi
}

# The last test engine-test started but did not finish (its "--" line).
last_started() {
    awk '/^-- /{n=substr($0, 6)} /^(ok|FAIL|skip) /{n=""} END{print n}' "$1"
}

# ---- toolkit first on PATH ---------------------------------------------------
nv=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
if [ -x "$nv" ] || command -v "$nv" > /dev/null 2>&1; then
    nvreal=$(readlink -f "$(command -v "$nv")")
    export CUDA_HOME
    CUDA_HOME=$(dirname "$(dirname "$nvreal")")
    export PATH="$CUDA_HOME/bin:$PATH"
fi

say "## Device check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
if command -v nvidia-smi > /dev/null 2>&1; then
    gpu=$(timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
          --format=csv,noheader 2>&1 | head -n 1)
else
    gpu="none (no nvidia-smi)"
fi
say "- GPU (nvidia-smi): ${gpu:-none}"
toolkit=$(timeout -k 5 30 nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say "- nvcc: ${toolkit:-not found} (${CUDA_HOME:-no toolkit}), host $(${CC:-cc} --version 2>/dev/null | head -n 1)"

# ---- the driver against the toolkit's requirement ------------------------------
drv=$(timeout -k 5 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
drv_cuda=$(timeout -k 5 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
tk_major=${toolkit%%.*}
# The oldest Linux driver branch for each toolkit major version (12.x runs
# on 525 and later by minor-version compatibility; 13.x needs 580).
case "$tk_major" in
    13) need=580 ;;
    12) need=525 ;;
    11) need=450 ;;
    *) need="?" ;;
esac
driver_ok=1
if [ -n "$drv_cuda" ] && [ -n "$toolkit" ]; then
    if [ "${drv_cuda%%.*}" -lt "$tk_major" ] 2>/dev/null; then driver_ok=0; fi
fi
say "- driver: ${drv:-none} (supports CUDA ${drv_cuda:-?}); the CUDA ${toolkit:-?} toolkit needs a driver for CUDA ${tk_major:-?}.x (branch ${need} or newer)"
if [ $driver_ok -eq 0 ]; then
    say "- **the driver is older than the toolkit**: the kernels cannot run (cudaErrorInsufficientDriver), so"
    say "  engine-test reports no device. Build with a CUDA ${drv_cuda%%.*}.x toolkit, or update the driver."
fi

# ---- build ---------------------------------------------------------------------
rc=0
run_stage build 300 "$tmp/build.log" make -j"$jobs" engine-only
if [ $stage_rc -ne 0 ]; then
    tail -n 30 "$tmp/build.log"
    say "- build: FAILED (make engine-only, exit $stage_rc, log above)"
    rc=1
else
    say "- build: make -j$jobs engine-only, ${stage_s} s ($(grep -o '✓ CUDA.*\|✗ CUDA.*' "$tmp/build.log" | head -n 1))"
fi

# ---- engine-test -----------------------------------------------------------------
no_device=0
if [ $rc -eq 0 ]; then
    say ""
    say "### engine-test"
    say '```'
    run_stage engine-test 180 "$tmp/engine_test.log" "$BUILD_DIR/engine-test"
    trc=$stage_rc
    grep -vE '^(ok|--|skip) ' "$tmp/engine_test.log" | tee -a "$log"
    say '```'
    nskip=$(grep -c '^skip ' "$tmp/engine_test.log")
    [ "$nskip" -gt 0 ] && say "- $nskip case(s) skipped: $(grep '^skip ' "$tmp/engine_test.log" | sed 's/.*  //' | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
    if grep -q 'no CUDA device' "$tmp/engine_test.log"; then
        say "- no CUDA device: the kernels were NOT checked$([ $driver_ok -eq 0 ] && echo ' (the driver is older than the toolkit)')"
        no_device=1
        rc=2
    elif [ $trc -ne 0 ]; then
        say "- engine-test: FAILED (exit $trc) in ${stage_s} s; last test started: $(last_started "$tmp/engine_test.log")"
        rc=1
    else
        say "- engine-test: $(tail -n 1 "$tmp/engine_test.log") in ${stage_s} s"
    fi
fi

# ---- compute-sanitizer ------------------------------------------------------------
if [ $rc -ne 1 ] && [ $no_device -eq 0 ]; then
    cs=$(command -v compute-sanitizer 2>/dev/null || true)
    [ -z "$cs" ] && [ -x "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" ] && cs=$CUDA_HOME/bin/compute-sanitizer
    say ""
    say "### compute-sanitizer (engine-test --small)"
    if [ -z "$cs" ]; then
        say "- compute-sanitizer: not installed, skipped"
    else
        for tool in memcheck racecheck synccheck; do
            run_stage "compute-sanitizer $tool" 120 "$tmp/sanitizer_$tool.log" \
                "$cs" --tool "$tool" --error-exitcode 3 --print-limit 20 "$BUILD_DIR/engine-test" --small
            summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$tmp/sanitizer_$tool.log" | tail -n 1)
            if [ $stage_rc -eq 0 ]; then
                say "- $tool: clean (${summary:-no summary}) in ${stage_s} s"
            elif [ $stage_rc -ne 200 ]; then
                say "- $tool: FAILED (exit $stage_rc, ${summary:-no summary}) in ${stage_s} s; last test started: $(last_started "$tmp/sanitizer_$tool.log")"
                grep -E '^=========' "$tmp/sanitizer_$tool.log" | head -n 30 | tee -a "$log"
                rc=1
            fi
        done
    fi
fi

# ---- engine-bench -------------------------------------------------------------------
if [ $rc -ne 1 ] && [ $no_device -eq 0 ]; then
    say ""
    say "### engine-bench"
    run_stage engine-bench 150 "$tmp/engine_bench.log" "$BUILD_DIR/engine-bench"
    tee -a "$log" < "$tmp/engine_bench.log"
    [ $stage_rc -eq 0 ] || { say "- engine-bench: FAILED (exit $stage_rc)"; rc=1; }
fi

say ""
say "(total $(($(date +%s) - T0)) s of a ${BUDGET}-s budget; result $(case $rc in 0) echo PASS ;; 2) echo "NOT RUN (no device)" ;; *) echo FAIL ;; esac))"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$log" "$tmp"/*.log "$OUT"/ 2>/dev/null
fi
rm -rf "$tmp"
exit $rc
