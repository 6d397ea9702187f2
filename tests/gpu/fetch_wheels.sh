#!/usr/bin/env bash
# fetch_wheels.sh - the wheels tests/gpu/bench_official.py needs on a GPU
# machine that has torch but no package registry: the official moshi
# package (0.2.13, the version moshid's parity fixtures were made with) and
# the one pure-Python package it calls at run time on the LM's path
# (einops, in its attention). Everything else moshi imports is stubbed by
# bench_official.py when absent (see its docstring); torch is the machine's.
#
#   bash tests/gpu/fetch_wheels.sh [DIR]     (make fetch-wheels; DIR
#                                             defaults to tests/gpu/wheels,
#                                             ignored by git)
#
# Run here, with network to PyPI; then carry DIR to the device machine with
# the working tree (the device tool's `carry`: tests/gpu/wheels, about
# 180 KB). Downloads are pinned by sha256 (pip --require-hashes): a changed
# file on the index is refused, not used. Exits non-zero when a download
# fails or the folder exceeds 64 MiB (the device tool's carry limit).
set -eu
cd "$(dirname "$0")/../.."
dest=${1:-tests/gpu/wheels}
if python3 -m pip --version > /dev/null 2>&1; then
    pip=(python3 -m pip)
elif [ -x build/venv/bin/pip ]; then
    pip=(build/venv/bin/pip)
else
    echo "fetch_wheels.sh: no pip (python3 -m pip, build/venv/bin/pip)" >&2
    exit 1
fi
req=$(mktemp)
trap 'rm -f "$req"' EXIT
# sha256 of the files on PyPI (checked 2026-12-01)
cat > "$req" <<'REQ'
moshi==0.2.13 --hash=sha256:beeb3ebc1d769a800e22b26bf4ec0d25f9525d54ae77979b37c86a2f782f4e64
einops==0.8.1 --hash=sha256:919387eb55330f5757c6bea9165c5ff5cfe63a642682ea788a6d472576d81737
REQ
mkdir -p "$dest"
"${pip[@]}" download --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
    -r "$req" -d "$dest"
kb=$(du -sk "$dest" | cut -f1)
if [ "$kb" -gt $((64 * 1024)) ]; then
    echo "fetch_wheels.sh: $dest is ${kb} KiB, over the 64 MiB the device tool carries" >&2
    exit 1
fi
echo "fetch_wheels.sh: $(ls "$dest" | paste -sd ' ' -) in $dest (${kb} KiB)"
