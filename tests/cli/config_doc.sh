#!/usr/bin/env bash
# config_doc.sh - docs/configuration.md holds the option reference that
# `moshid --help-config` generates from the option table, between the
# markers below. With --write, put it there (make config-doc).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
doc=docs/configuration.md
begin='<!-- BEGIN GENERATED: moshid --help-config -->'
end='<!-- END GENERATED -->'
gen=$("$BUILD/moshid" --help-config) || { echo "moshid --help-config failed"; exit 1; }
[ -f "$doc" ] || { echo "$doc is missing"; exit 1; }
grep -qxF "$begin" "$doc" && grep -qxF "$end" "$doc" || { echo "$doc lacks the generated-section markers"; exit 1; }
current=$(awk -v b="$begin" -v e="$end" '$0==e{p=0} p{print} $0==b{p=1}' "$doc")
if [ "${1:-}" = --write ]; then
    [ "$current" = "$gen" ] && { echo "$doc is up to date"; exit 0; }
    tmp=$(mktemp)
    { awk -v b="$begin" '{print} $0==b{exit}' "$doc"; printf '%s\n' "$gen"; awk -v e="$end" '$0==e{p=1} p{print}' "$doc"; } > "$tmp"
    mv "$tmp" "$doc" && echo "$doc updated"
    exit 0
fi
if [ "$current" != "$gen" ]; then
    echo "$doc is out of date with the option table; run: make config-doc"
    diff <(printf '%s\n' "$current") <(printf '%s\n' "$gen") | head -n 20
    exit 1
fi
