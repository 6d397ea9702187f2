#!/usr/bin/env bash
# systemd_unit.sh - systemd/moshid.service and systemd/moshid@.service
# (instance 0), each with the CUDA drop-in systemd/moshid-cuda.conf, parse
# without warnings (systemd-analyze verify; unknown keys only warn, so any
# output fails; the man page of Documentation= is docs/moshid.8, which verify
# looks up by running `man 8 moshid`: found through MANPATH, so man-db must be
# installed, tests/deps.txt), and their command lines use flags moshid has.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
units="$root/systemd/moshid.service $root/systemd/moshid@.service"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: unit not verified"; exit 77; }
command -v man >/dev/null || { echo "FAIL: man not installed (Debian: man-db, in tests/deps.txt): systemd-analyze verify cannot look up Documentation=man:moshid(8)"; exit 1; }
bindir=$(cd "$(dirname "$MOSHID")" && pwd)
mkdir -p "$TMP/u/moshid.service.d" "$TMP/u/moshid@.service.d" "$TMP/man/man8"
for u in $units; do
    sed "s#/usr/local/bin/moshid#$bindir/moshid#g" "$u" > "$TMP/u/$(basename "$u")"
done
cp "$root/systemd/moshid-cuda.conf" "$TMP/u/moshid.service.d/cuda.conf"
cp "$root/systemd/moshid-cuda.conf" "$TMP/u/moshid@.service.d/cuda.conf"
cp "$root/docs/moshid.8" "$TMP/man/man8/"
# the page verify will find is this one
run manw env MANPATH="$TMP/man" man -w 8 moshid
[ "$rc" -eq 0 ] && [ "$out" = "$TMP/man/man8/moshid.8" ] || fail "man -w 8 moshid with MANPATH=$TMP/man: '$out' $err (exit $rc)"
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
