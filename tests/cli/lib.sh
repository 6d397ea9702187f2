# lib.sh - helpers for the command-line test scripts (sourced).
# Each script runs build/moshid (or $BUILD/moshid) and exits 0 (pass),
# 77 (skip) or 1 (fail, after printing what went wrong).
set -u
BUILD=${BUILD:-build}
MOSHID=$BUILD/moshid
[ -x "$MOSHID" ] || { echo "no $MOSHID (build it first)"; exit 1; }
TMP=$(mktemp -d /tmp/moshid-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run NAME CMD...: run CMD, keep status in $rc, stdout in $out, stderr in $err
run() {
    local name=$1; shift
    "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
    out=$(cat "$TMP/$name.out"); err=$(cat "$TMP/$name.err")
}

# expect_rc WANT CONTEXT
expect_rc() { [ "$rc" -eq "$1" ] || fail "$2: exit $rc, want $1 (stderr: $err)"; }
# expect_in TEXT NEEDLE CONTEXT
expect_in() { grep -qF -- "$2" <<<"$1" || fail "$3: '$2' not in: $1"; }

finish() {
    if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
    exit 0
}
