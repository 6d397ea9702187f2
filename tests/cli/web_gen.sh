#!/usr/bin/env bash
# web_gen.sh - daemon/web/wire_gen.js is what moshid-web-gen prints from the
# C headers (close statuses, the temperature bound, the token syntax), so
# that the page holds no copy of them. With --write, rewrite it (make web-gen).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
out=daemon/web/wire_gen.js
gen=$("$BUILD/moshid-web-gen") || { echo "moshid-web-gen failed"; exit 1; }
if [ "${1:-}" = --write ]; then
    printf '%s\n' "$gen" > "$out" && echo "$out written"
    exit 0
fi
[ -f "$out" ] || { echo "$out is missing; run: make web-gen"; exit 1; }
if [ "$(cat "$out")" != "$gen" ]; then
    echo "$out is out of date with the C headers; run: make web-gen"
    diff "$out" <(printf '%s\n' "$gen") | head -n 20
    exit 1
fi
echo "$out matches the C headers"
