#!/usr/bin/env bash
# check_deps.sh - every pkg-config module the Makefile uses has a probe row
# in tests/deps.txt mapping it to a Debian package, and every row names a
# package Debian knows (when apt-cache has a package list).
set -u
cd "$(dirname "$0")/.."
fail=0
mods=$(sed -nE 's/^PKG_MODULES :=(.*)$/\1/p' Makefile)
[ -n "$mods" ] || { echo "no PKG_MODULES line in the Makefile"; exit 1; }
for m in $mods; do
    grep -qE "^\w+\s+pc\s+$m\s+\S+" tests/deps.txt || { echo "pkg-config module $m has no row in tests/deps.txt"; fail=1; }
done
# Every pkg-config call in the fragments must name a module of PKG_MODULES.
for m in $(grep -rhoE 'pc_(cflags|libs),[a-z0-9 _-]+\)' Makefile */*.mk */*/*.mk | sed -E 's/pc_(cflags|libs),//; s/\)//'); do
    grep -qw -- "$m" <<<"$mods" || { echo "pkg-config module $m used but not in PKG_MODULES"; fail=1; }
done
# One apt-cache call for all packages (each call loads the whole cache: ~2 s).
pkgs=$(grep -vE '^\s*(#|$)' tests/deps.txt | awk '{print $4}' | sort -u)
# shellcheck disable=SC2086
known=$(apt-cache show --no-all-versions $pkgs 2>/dev/null | sed -n 's/^Package: //p' | sort -u)
if [ -n "$known" ]; then # empty: apt has no package lists here
    for p in $pkgs; do
        grep -qxF "$p" <<<"$known" || { echo "package $p unknown to apt"; fail=1; }
    done
fi
exit $fail
