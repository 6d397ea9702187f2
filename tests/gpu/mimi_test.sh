#!/usr/bin/env bash
# mimi_test.sh - `make test`'s view of mimi-test built for a device: the
# device Mimi (cuda/cu_mimi.c) against the CPU codec on the committed tiny
# fixture. Skips (77) when it was not built (no nvcc, CUDA=0, a sanitizer
# build) or when there is no CUDA device (the program says so and exits
# 77); the emulator run of the same cases is tests/gpu/emu/mimi_test_emu.sh.
BUILD=${BUILD:-build}
bin=$BUILD/mimi-test
if [ ! -x "$bin" ]; then
    echo "mimi-test not built (no nvcc, CUDA=0 or a sanitizer build): skipped"
    exit 77
fi
out=$(MKMODEL=$BUILD/moshid-mkmodel timeout -k 10 600 "$bin" 2>&1); rc=$?
printf '%s\n' "$out"
if [ $rc -eq 77 ] && grep -q '^skipped: no CUDA device' <<<"$out"; then
    exit 77
fi
if [ $rc -ne 0 ] || ! tail -n 1 <<<"$out" | grep -qE '^[0-9]+ passed, 0 failed'; then
    echo "mimi-test failed (exit $rc)"
    exit 1
fi
exit 0
