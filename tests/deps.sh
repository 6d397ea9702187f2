#!/usr/bin/env bash
# deps.sh - probe for the Debian packages in tests/deps.txt and install the
# missing ones with apt-get (as root; otherwise print the command to run).
#   deps.sh ensure build|run|test    probe the group (and the ones it includes), install
#   deps.sh list [GROUP]             the packages of a group
#   deps.sh missing GROUP            print missing packages, install nothing
set -u
here=$(cd "$(dirname "$0")" && pwd)
list=$here/deps.txt
cmd=${1:-ensure}; group=${2:-test}

groups_of() {
    case $1 in build) echo build ;; run) echo "build run" ;; *) echo "build run test" ;; esac
}

probe() { # KIND PROBE -> 0 when present
    case $1 in
    pc) pkg-config --exists "$2" 2>/dev/null ;;
    cmd) command -v "$2" >/dev/null 2>&1 ;;
    file) [ -e "$2" ] ;;
    py) python3 -c "import $2" >/dev/null 2>&1 ;;
    *) return 1 ;;
    esac
}

rows() { # GROUPS... -> "KIND PROBE PACKAGE" lines
    local g
    grep -vE '^\s*(#|$)' "$list" | while read -r grp kind probe pkg; do
        for g in "$@"; do [ "$grp" = "$g" ] && echo "$kind $probe $pkg"; done
    done
}

missing() {
    # shellcheck disable=SC2046
    rows $(groups_of "$1") | while read -r kind probe pkg; do
        probe "$kind" "$probe" || echo "$pkg"
    done | sort -u
}

case $cmd in
list)
    # shellcheck disable=SC2046
    rows $(groups_of "$group") | awk '{print $3}' | sort -u ;;
missing) missing "$group" ;;
ensure)
    pkgs=$(missing "$group" | tr '\n' ' ')
    [ -z "${pkgs// }" ] && exit 0
    echo "deps: missing Debian packages: $pkgs"
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: not root; install them with: sudo apt-get install -y $pkgs" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null || {
        echo "deps: apt-get install failed for: $pkgs" >&2; exit 1; }
    still=$(missing "$group" | tr '\n' ' ')
    if [ -n "${still// }" ]; then echo "deps: still missing after install: $still" >&2; exit 1; fi
    echo "deps: installed $pkgs" ;;
*) echo "usage: $0 ensure|list|missing [build|run|test]" >&2; exit 2 ;;
esac
