#!/usr/bin/env bash
# engine_test_emu.sh - `make test`'s run of engine-test's cases on the CUDA
# emulator: the same source as engine-test (tests/gpu/engine_test.c), the
# same list of cases, every kernel against its C twin, no device needed.
# The emulator is a device to engine-test, so nothing may be skipped; then
# the no-device path once (EMU_NO_DEVICE=1: kernel cases skipped, host checks
# pass). The cases run with the write-race check on (EMU_RACE=1: two blocks
# of one launch storing to one address fail). Prints the case counts and
# the time. Skips (77) in sanitizer builds.
BUILD=${BUILD:-build}
bin=$BUILD/engine-test-emu
if [ ! -x "$bin" ]; then
    echo "engine-test-emu not built (sanitizer build): skipped"
    exit 77
fi
t0=$(date +%s.%N)
out=$(EMU_STATS=1 EMU_RACE=1 timeout -k 10 600 "$bin" 2>&1); rc=$?
t1=$(date +%s.%N)
printf '%s\n' "$out"
sum=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' <<<"$out" | tail -n 1)
if [ $rc -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed, 0 skipped$' <<<"$sum"; then
    echo "engine-test on the emulator failed (exit $rc): $sum"
    echo "(streams asynchronous, their order from EMU_SEED=${EMU_SEED:-1}: the same seed repeats it;" \
        "EMU_STREAMS=sync runs work in call order)"
    exit 1
fi
nodev=$(EMU_NO_DEVICE=1 timeout -k 10 120 "$bin" 2>&1); nrc=$?
nsum=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' <<<"$nodev" | tail -n 1)
if [ $nrc -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed, [1-9][0-9]* skipped$' <<<"$nsum"; then
    printf '%s\n' "$nodev"
    echo "engine-test without a device failed (exit $nrc): $nsum"
    exit 1
fi
printf 'engine-test on the emulator: %s in %.1f s; without a device: %s\n' "$sum" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$nsum"
exit 0
