#!/usr/bin/env bash
# moshid_plugins.sh - moshid starts and reports its backends with no CUDA
# library anywhere, and explains why a CUDA plugin cannot be used: a library
# it needs is missing, an undefined symbol, a wrong ABI number, no entry
# point. Fake plugins are built here with cc.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

# moshid itself links no CUDA library.
if ldd "$MOSHID" | grep -qiE 'cuda|cublas|nvidia'; then fail "moshid links a CUDA library: $(ldd "$MOSHID")"; fi

# A bare environment: no library path, no plugin directory.
run bare env -i LD_LIBRARY_PATH= MOSHID_PLUGIN_DIR=/nonexistent "$MOSHID" --version
expect_rc 0 "--version in a bare environment"
expect_in "$out" "  cpu   built in" "bare --version"
grep -qE '^  cuda  ' <<<"$out" || fail "bare --version has no cuda line: $out"

# A private copy of the binary, so that no real plugin next to it is found.
mkdir -p "$TMP/bin" && cp "$MOSHID" "$TMP/bin/moshid"
run none env -i MOSHID_PLUGIN_DIR="$TMP/empty" "$TMP/bin/moshid" --version
expect_rc 0 "--version without a plugin"
expect_in "$out" "cuda  unavailable: libmoshid-cuda.so not found" "no plugin"

CC=${CC:-cc}
# plugin DIR CFLAGS... : compile the fake plugin source on stdin into DIR
plugin() {
    local dir=$1; shift
    mkdir -p "$dir"
    "$CC" -shared -fPIC -I"$root/engine/base" -I"$root/engine/lm" -x c - -o "$dir/libmoshid-cuda.so" "$@" || fail "cannot build fake plugin in $dir"
}
HEAD='#include "plugin.h"
#include <stdio.h>'

# 1. needs a shared library that is not there (like a missing libcudart)
echo 'int moshid_test_absent(void) { return 0; }' | "$CC" -shared -fPIC -x c - -o "$TMP/libabsent.so" \
    -Wl,-soname,libmoshid-test-absent.so.1
plugin "$TMP/p1" -L"$TMP" -labsent <<EOF2
$HEAD
int moshid_test_absent(void);
static moshid_plugin p = {MOSHID_PLUGIN_ABI, "cuda", "fake", 0, 0};
const moshid_plugin *moshid_plugin_entry(void) { moshid_test_absent(); return &p; }
EOF2
rm -f "$TMP/libabsent.so"
run p1 env -i MOSHID_PLUGIN_DIR="$TMP/p1" "$TMP/bin/moshid" --version
expect_rc 0 "plugin with a missing library"
expect_in "$out" "cuda  unavailable: " "plugin with a missing library"
expect_in "$out" "libmoshid-test-absent.so.1: cannot open shared object file" "plugin with a missing library"

# 2. an undefined symbol (RTLD_NOW refuses it at load time)
plugin "$TMP/p2" <<EOF2
$HEAD
void moshid_test_undefined(void);
static moshid_plugin p = {MOSHID_PLUGIN_ABI, "cuda", "fake", 0, 0};
const moshid_plugin *moshid_plugin_entry(void) { moshid_test_undefined(); return &p; }
EOF2
run p2 env -i MOSHID_PLUGIN_DIR="$TMP/p2" "$TMP/bin/moshid" --version
expect_rc 0 "plugin with an undefined symbol"
expect_in "$out" "undefined symbol: moshid_test_undefined" "plugin with an undefined symbol"

# 3. a plugin built for another ABI
plugin "$TMP/p3" <<EOF2
$HEAD
static moshid_plugin p = {MOSHID_PLUGIN_ABI + 998, "cuda", "fake", 0, 0};
const moshid_plugin *moshid_plugin_entry(void) { return &p; }
EOF2
run p3 env -i MOSHID_PLUGIN_DIR="$TMP/p3" "$TMP/bin/moshid" --version
expect_rc 0 "plugin with a wrong ABI"
expect_in "$out" "plugin ABI $(( $(sed -nE 's/^#define MOSHID_PLUGIN_ABI ([0-9]+).*/\1/p' "$root/engine/base/plugin.h") + 998 )), moshid expects" \
    "plugin with a wrong ABI"

# 4. no entry point
plugin "$TMP/p4" <<EOF2
int not_the_entry(void) { return 1; }
EOF2
run p4 env -i MOSHID_PLUGIN_DIR="$TMP/p4" "$TMP/bin/moshid" --version
expect_rc 0 "plugin without an entry point"
expect_in "$out" "no moshid_plugin_entry" "plugin without an entry point"

# 5. a good plugin without a device, then with one
plugin "$TMP/p5" <<EOF2
$HEAD
static int probe(char *what, size_t len) { snprintf(what, len, "fake: no device"); return 0; }
static moshid_plugin p = {MOSHID_PLUGIN_ABI, "cuda", "fake build", probe, 0};
const moshid_plugin *moshid_plugin_entry(void) { return &p; }
EOF2
run p5 env -i MOSHID_PLUGIN_DIR="$TMP/p5" "$TMP/bin/moshid" --version
expect_rc 0 "good plugin, no device"
expect_in "$out" "cuda  plugin loaded (fake build), no usable device: fake: no device" "good plugin, no device"
plugin "$TMP/p6" <<EOF2
$HEAD
static int probe(char *what, size_t len) { snprintf(what, len, "GPU 0: Fake 80GB"); return 1; }
static moshid_plugin p = {MOSHID_PLUGIN_ABI, "cuda", "fake build", probe, 0};
const moshid_plugin *moshid_plugin_entry(void) { return &p; }
EOF2
run p6 env -i MOSHID_PLUGIN_DIR="$TMP/p6" "$TMP/bin/moshid" --version
expect_rc 0 "good plugin with a device"
expect_in "$out" "cuda  available (fake build): GPU 0: Fake 80GB" "good plugin with a device"
finish
