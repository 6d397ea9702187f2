#!/usr/bin/env bash
# emu_test.sh - `make test`'s run of emu-test: every detector of the CUDA
# emulator proven on a deliberately faulty kernel, the emulated semantics,
# graphs and the cuBLAS stand-in (tests/gpu/emu/emu_test.c). Skips (77) in
# sanitizer builds, where the emulator is not built.
BUILD=${BUILD:-build}
bin=$BUILD/emu-test
if [ ! -x "$bin" ]; then
    echo "emu-test not built (sanitizer build): skipped"
    exit 77
fi
t0=$(date +%s.%N)
out=$(timeout -k 10 300 "$bin" 2>&1); rc=$?
t1=$(date +%s.%N)
printf '%s\n' "$out"
sum=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' <<<"$out" | tail -n 1)
if [ $rc -ne 0 ] || ! grep -qE '^[0-9]+ passed, 0 failed' <<<"$sum"; then
    echo "emu-test failed (exit $rc)"
    echo "(streams asynchronous, their order from EMU_SEED=${EMU_SEED:-1}: the same seed repeats it;" \
        "EMU_STREAMS=sync runs work in call order)"
    exit 1
fi
printf 'emu-test: %s in %.1f s\n' "${sum%%,*}" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
exit 0
