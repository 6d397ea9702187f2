#!/usr/bin/env bash
# backend_test_emu.sh - `make test`'s run of backend-test on the CUDA
# emulator: the CUDA backend table (cuda/cu_backend.c and every kernel)
# against the CPU backend on tiny models, no device needed. The emulator is
# a device to backend-test, so it must run every case (no skip; the codec
# case needs $BUILD/moshid-mkmodel, the frame step the fixture Mimi under
# tests/fixtures/mimi, read from the repository root), with the write-race
# check on (EMU_RACE=1: two blocks of one launch storing to one address
# fail). Then once
# with EMU_NO_DEVICE=1: the program must say "skipped: no CUDA device" and
# exit 77 (the path a host without a GPU takes). Skips (77) in sanitizer
# builds.
BUILD=${BUILD:-build}
bin=$BUILD/backend-test-emu
if [ ! -x "$bin" ]; then
    echo "backend-test-emu not built (sanitizer build): skipped"
    exit 77
fi
t0=$(date +%s.%N)
# MOSHID_CU_MIMI=cpu: backend-test's codec case asks for the host codec's
# bit-identical codes and PCM, which is the MOSHID_CU_MIMI=cpu path; the
# device codec (within float rounding of the CPU's) is mimi-test's, through
# cu_mimi and through this backend table (tests/gpu/mimi_test.c).
out=$(EMU_RACE=1 MOSHID_CU_MIMI=cpu MKMODEL=$BUILD/moshid-mkmodel timeout -k 10 600 "$bin" 2>&1); rc=$?
t1=$(date +%s.%N)
printf '%s\n' "$out"
sum=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
if [ $rc -ne 0 ] || ! grep -qE '^[1-9][0-9]* passed, 0 failed' <<<"$sum"; then
    echo "backend-test on the emulator failed (exit $rc): $sum"
    echo "(streams asynchronous, their order from EMU_SEED=${EMU_SEED:-1}: the same seed repeats it;" \
        "EMU_STREAMS=sync runs work in call order)"
    exit 1
fi
if ! grep -q '^ok   codec ' <<<"$out"; then
    echo "backend-test on the emulator: the codec case did not run (is $BUILD/moshid-mkmodel built?)"
    exit 1
fi
# the emulator-only cases (they skip on a GPU) must run here
for c in snapshot_steady device1_thread open_oom padding_rows device_error dep_chain/bf16 dep_chain/int8; do
    if ! grep -q "^ok   $c " <<<"$out"; then
        echo "backend-test on the emulator: the emulator-only case $c did not pass"
        exit 1
    fi
done
# the frame step needs tests/fixtures/mimi (run from the repository root)
if ! grep -q '^ok   frame_step/host ' <<<"$out"; then
    echo "backend-test on the emulator: the frame_step case did not run (tests/fixtures/mimi/tiny.* from $(pwd))"
    exit 1
fi
nodev=$(EMU_NO_DEVICE=1 timeout -k 10 60 "$bin" 2>&1); nrc=$?
if [ $nrc -ne 77 ] || ! grep -q '^skipped: no CUDA device' <<<"$nodev"; then
    printf '%s\n' "$nodev"
    echo "backend-test without a device: exit $nrc, expected 77 with 'skipped: no CUDA device'"
    exit 1
fi
printf 'backend-test on the emulator: %s (%.1f s); without a device: skipped as it should\n' "$sum" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
exit 0
