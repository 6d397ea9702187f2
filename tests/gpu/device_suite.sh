#!/usr/bin/env bash
# device_suite.sh NAME - `make test`'s view of a device test program
# (backend-test, mimi-test) built for a GPU: runs $BUILD/NAME; passes when
# its last line says "N passed, 0 failed". Skips (77) when it was not built
# (no nvcc, CUDA=0, a sanitizer build) or when there is no CUDA device (the
# program says "skipped: no CUDA device" and exits 77). The entry scripts
# (backend_test.sh, mimi_test.sh) name the program; the emulator runs of
# the same cases are tests/gpu/emu/*_emu.sh.
name=${1:?usage: device_suite.sh NAME}
BUILD=${BUILD:-build}
bin=$BUILD/$name
if [ ! -x "$bin" ]; then
    echo "$name not built (no nvcc, CUDA=0 or a sanitizer build): skipped"
    exit 77
fi
out=$(MKMODEL=$BUILD/moshid-mkmodel timeout -k 10 600 "$bin" 2>&1); rc=$?
printf '%s\n' "$out"
if [ $rc -eq 77 ] && grep -q '^skipped: no CUDA device' <<<"$out"; then
    exit 77
fi
if [ $rc -ne 0 ] || ! tail -n 1 <<<"$out" | grep -qE '^[0-9]+ passed, 0 failed'; then
    echo "$name failed (exit $rc)"
    exit 1
fi
exit 0
