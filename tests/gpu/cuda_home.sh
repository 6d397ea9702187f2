#!/usr/bin/env bash
# cuda_home.sh - the build finds the toolkit nvcc really belongs to: with
# nvcc reached through a symlink on PATH (NVCC=nvcc) or named by a symlink
# (NVCC=/tmp/x/nvcc), CU_HOME is the real toolkit directory, the one whose
# include/ holds cuda_runtime_api.h. Skips (77) without nvcc.
cd "$(dirname "$0")/../.." || exit 1
nv=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
if [ ! -x "$nv" ]; then
    echo "nvcc not found: skipped"
    exit 77
fi
real=$(readlink -f "$nv")
want=$(dirname "$(dirname "$real")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$real" "$tmp/nvcc"
cfg() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s --no-print-directory MOSHID_DEPS_OK=1 cu-config "$@"; }
rc=0
for how in "PATH" "NVCC=$tmp/nvcc"; do
    if [ "$how" = PATH ]; then out=$(PATH="$tmp:$PATH" cfg NVCC=nvcc 2>&1)
    else out=$(cfg "$how" 2>&1); fi
    got=$(sed -n 's/^CU_HOME=//p' <<<"$out")
    if [ "$got" = "$want" ] && [ -f "$got/include/cuda_runtime_api.h" ]; then
        echo "ok   symlinked nvcc via $how: CU_HOME=$got"
    else
        echo "FAIL symlinked nvcc via $how: CU_HOME='$got', want '$want'"
        printf '%s\n' "$out"
        rc=1
    fi
done
out=$(cfg NVCC="$tmp/missing-nvcc" 2>&1)
if grep -q '^CU_LINE=✗ CUDA backend plugin (nvcc not found' <<<"$out"; then
    echo "ok   missing nvcc: plugin off with the reason"
else
    echo "FAIL missing nvcc: $out"
    rc=1
fi
exit $rc
