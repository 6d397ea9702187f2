#!/usr/bin/env bash
# mimi_test_emu.sh - `make test`'s run of mimi-test on the CUDA emulator:
# the device Mimi (cuda/cu_mimi.c and its kernels) against the CPU codec on
# the committed tiny fixture, and through the CUDA backend table against
# the CPU backend (that case needs $BUILD/moshid-mkmodel), no device
# needed. The emulator is a device to mimi-test, so every case must run
# (no skip), with the write-race check on (EMU_RACE=1: two blocks of one
# launch storing to one address fail; the graphs' padding rows share a
# scratch slot, of which only the first may store). Then once with EMU_NO_DEVICE=1: the program must say
# "skipped: no CUDA device" and exit 77 (the path a host without a GPU
# takes). Skips (77) in sanitizer builds.
BUILD=${BUILD:-build}
bin=$BUILD/mimi-test-emu
if [ ! -x "$bin" ]; then
    echo "mimi-test-emu not built (sanitizer build): skipped"
    exit 77
fi
t0=$(date +%s.%N)
out=$(EMU_RACE=1 MKMODEL=$BUILD/moshid-mkmodel timeout -k 10 600 "$bin" 2>&1); rc=$?
t1=$(date +%s.%N)
printf '%s\n' "$out"
sum=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
if [ $rc -ne 0 ] || ! grep -qE '^[1-9][0-9]* passed, 0 failed' <<<"$sum"; then
    echo "mimi-test on the emulator failed (exit $rc): $sum"
    echo "(streams asynchronous, their order from EMU_SEED=${EMU_SEED:-1}: the same seed repeats it;" \
        "EMU_STREAMS=sync runs work in call order)"
    exit 1
fi
for c in warmup parity batch graphs refuse ticket oom backend pipeline; do
    if ! grep -q "^ok   $c " <<<"$out"; then
        echo "mimi-test on the emulator: case $c did not pass (is $BUILD/moshid-mkmodel built?)"
        exit 1
    fi
done
# the benchmark's code path, on the tiny fixture (its numbers mean nothing here)
bout=$(timeout -k 10 120 "$bin" --bench --shape tiny 2>&1); brc=$?
if [ $brc -ne 0 ] || [ "$(grep -cE '^\| mimi \| encode\+decode \| [12] \| [0-9.]+ \|' <<<"$bout")" -ne 2 ]; then
    printf '%s\n' "$bout"
    echo "mimi-test --bench --shape tiny: exit $brc, expected two rows (batches 1 and 2)"
    exit 1
fi
nodev=$(EMU_NO_DEVICE=1 timeout -k 10 60 "$bin" 2>&1); nrc=$?
if [ $nrc -ne 77 ] || ! grep -q '^skipped: no CUDA device' <<<"$nodev"; then
    printf '%s\n' "$nodev"
    echo "mimi-test without a device: exit $nrc, expected 77 with 'skipped: no CUDA device'"
    exit 1
fi
printf 'mimi-test on the emulator: %s (%.1f s); without a device: skipped as it should\n' "$sum" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
exit 0
