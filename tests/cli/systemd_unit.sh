#!/usr/bin/env bash
# systemd_unit.sh - systemd/moshid.service and systemd/moshid@.service
# (instance 0), each with the CUDA drop-in systemd/moshid-cuda.conf, parse
# without warnings (systemd-analyze verify; unknown keys only warn, so any
# output fails; the man page of Documentation= is docs/moshid.8), and their
# command lines use flags moshid has.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
units="$root/systemd/moshid.service $root/systemd/moshid@.service"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: unit not verified"; exit 77; }
bindir=$(cd "$(dirname "$MOSHID")" && pwd)
mkdir -p "$TMP/u/moshid.service.d" "$TMP/u/moshid@.service.d" "$TMP/man/man8"
for u in $units; do
    sed "s#/usr/local/bin/moshid#$bindir/moshid#g" "$u" > "$TMP/u/$(basename "$u")"
done
cp "$root/systemd/moshid-cuda.conf" "$TMP/u/moshid.service.d/cuda.conf"
cp "$root/systemd/moshid-cuda.conf" "$TMP/u/moshid@.service.d/cuda.conf"
cp "$root/docs/moshid.8" "$TMP/man/man8/"
run verify env MANPATH="$TMP/man" systemd-analyze verify "$TMP/u/moshid.service" "$TMP/u/moshid@0.service"
[ -z "$out$err" ] || fail "systemd-analyze verify: $out $err"
# shellcheck disable=SC2086
for flag in $(grep -hE '^Exec(Start|StartPre)=' $units | grep -oE -- '--[a-z-]+' | sort -u); do
    "$MOSHID" --help | grep -qF -- "$flag" || fail "a unit uses $flag, which moshid --help does not list"
done
# the template's --set options are real options
for opt in $(grep -hoE -- '--set [a-z_]+\.[a-z_]+' "$root/systemd/moshid@.service" | awk '{print $2}' | sort -u); do
    "$MOSHID" --help-config | grep -qF -- "\`$opt\`" || fail "moshid@.service sets $opt, which is no option"
done
finish
