#!/usr/bin/env bash
# systemd_unit.sh - systemd/moshid.service parses without warnings
# (systemd-analyze verify; unknown keys only warn, so any output fails) and
# its command lines use flags moshid has.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
unit=$root/systemd/moshid.service
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: unit not verified"; exit 77; }
mkdir -p "$TMP/u"
sed "s#/usr/local/bin/moshid#$(cd "$(dirname "$MOSHID")" && pwd)/moshid#g" "$unit" > "$TMP/u/moshid.service"
run verify systemd-analyze verify "$TMP/u/moshid.service"
[ -z "$out$err" ] || fail "systemd-analyze verify: $out $err"
for flag in $(grep -E '^Exec(Start|StartPre)=' "$unit" | grep -oE -- '--[a-z-]+' | sort -u); do
    "$MOSHID" --help | grep -qF -- "$flag" || fail "the unit uses $flag, which moshid --help does not list"
done
finish
