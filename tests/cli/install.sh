#!/usr/bin/env bash
# install.sh - `make install DESTDIR=... PREFIX=/usr` lays out the tree
# systemd/systemd.mk documents; the installed moshid runs (--version finds
# the installed CUDA plugin by its own location, --check-config and
# --dump-config on the installed example configuration); the installed
# units and drop-ins pass `systemd-analyze verify` (skipped, with a line,
# where the tool is missing or cannot run); the man page renders without
# warnings and lists every flag of moshid --help; a second install keeps an
# existing /etc/moshid/moshid.json.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=$TMP/root
P=$dest/usr

# The variables of a `make test` or `make asan` this may run under (BUILD,
# SAN=1, ...: the same tree, so nothing is rebuilt), not its jobserver.
case "${MAKEFLAGS:-}" in *" -- "*) export MAKEFLAGS="-- ${MAKEFLAGS#* -- }" ;; *) unset MAKEFLAGS ;; esac
unset MFLAGS MAKELEVEL
run install make -C "$root" --no-print-directory install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr
expect_rc 0 "make install"
[ "$rc" -eq 0 ] || { echo "$out"; finish; }

# The tree.
for f in bin/moshid bin/moshi-run bin/mimi-codec bin/moshid-mkmodel bin/moshid-plan bin/moshid-voice-convert; do
    [ -x "$P/$f" ] || fail "not installed (executable): /usr/$f"
done
for f in lib/systemd/system/moshid.service lib/systemd/system/moshid@.service \
    lib/systemd/system/moshid.service.d/cuda.conf lib/systemd/system/moshid@.service.d/cuda.conf \
    share/man/man8/moshid.8 share/doc/moshid/README.md share/doc/moshid/operations.md \
    share/doc/moshid/configuration.md share/moshid/examples/moshid.json share/moshid/examples/haproxy.cfg \
    share/moshid/examples/nginx.conf; do
    [ -f "$P/$f" ] || fail "not installed: /usr/$f"
done
[ -d "$P/share/moshid/web" ] || fail "no /usr/share/moshid/web"
for f in $(cd "$root/daemon/web" 2>/dev/null && find . -type f ! -name '.*'); do
    cmp -s "$root/daemon/web/$f" "$P/share/moshid/web/$f" || fail "web file ${f#./} not installed as it is"
done
for f in "$root"/docs/*.md; do
    [ -f "$P/share/doc/moshid/$(basename "$f")" ] || fail "doc $(basename "$f") not installed"
done
conf=$dest/etc/moshid/moshid.json
[ -f "$conf" ] || fail "no /etc/moshid/moshid.json"
if [ -e "$root/$BUILD/libmoshid-cuda.so" ]; then
    [ -f "$P/lib/moshid/libmoshid-cuda.so" ] || fail "the CUDA plugin is built but not installed in /usr/lib/moshid"
fi
# PREFIX written into what names paths; no /usr/local/ path left
for f in lib/systemd/system/moshid.service lib/systemd/system/moshid@.service share/man/man8/moshid.8 \
    share/moshid/examples/moshid.json; do
    grep -q /usr/local/ "$P/$f" && fail "/usr/$f still names /usr/local/: $(grep -n /usr/local/ "$P/$f" | head -3)"
done
grep -q '^ExecStart=/usr/bin/moshid ' "$P/lib/systemd/system/moshid.service" || fail "moshid.service does not run /usr/bin/moshid"
grep -q '"static_dir": "/usr/share/moshid/web"' "$conf" || fail "the example configuration does not serve /usr/share/moshid/web"
# nothing outside DESTDIR's /usr and /etc
extra=$(cd "$dest" && find . -mindepth 1 -maxdepth 1 ! -name usr ! -name etc)
[ -z "$extra" ] || fail "installed outside /usr and /etc: $extra"

# The installed binary.
run version env -i "$P/bin/moshid" --version
expect_rc 0 "installed moshid --version"
expect_in "$out" "moshid " "installed --version"
if [ -f "$P/lib/moshid/libmoshid-cuda.so" ]; then
    # found as PREFIX/lib/moshid beside PREFIX/bin, with no MOSHID_PLUGIN_DIR
    grep -q "libmoshid-cuda.so not found" <<<"$out" && fail "installed moshid does not find its plugin: $out"
    grep -qE '^  cuda  (available|plugin loaded)' <<<"$out" || fail "installed plugin not loaded: $out"
fi
run dump "$P/bin/moshid" --config "$conf" --dump-config
expect_rc 0 "installed example configuration loads"
# --check-config: the example requires a tokens file (it listens on all
# interfaces): missing, it is named; then, with one, the model files are not
# there (exit 1, named), then with the demo model's (when built) it passes
run check0 "$P/bin/moshid" --config "$conf" --set server.static_dir="$P/share/moshid/web" --check-config
expect_rc 1 "--check-config without the tokens file"
expect_in "$err" "auth.tokens_file" "--check-config names the missing tokens file"
tokens=$dest/etc/moshid/tokens
(umask 077 && printf 'ops:%s\n' "0123456789abcdef0123" > "$tokens")
run check "$P/bin/moshid" --config "$conf" --set server.static_dir="$P/share/moshid/web" \
    --set auth.tokens_file="$tokens" --check-config
expect_rc 1 "--check-config without the model files"
expect_in "$err" "model." "--check-config names the missing model file"
demo=$root/$BUILD/demo
if [ -f "$demo/.ok" ]; then
    run check2 "$P/bin/moshid" --config "$conf" --set model.lm_dir="$demo/lm" --set model.mimi="$demo/mimi.safetensors" \
        --set model.mimi_config="$demo/mimi.json" --set model.tokenizer="$demo/tokenizer.model" \
        --set server.static_dir="$P/share/moshid/web" --set auth.tokens_file="$tokens" --check-config
    expect_rc 0 "--check-config on the example with the demo model"
    expect_in "$err" "configuration OK" "--check-config with the demo model"
else
    echo "no demo model ($demo): --check-config with model files not run"
fi

# The man page: renders, no groff warnings, every flag of --help in it.
if command -v man >/dev/null; then
    run man env LC_ALL=C MANWIDTH=80 man --warnings -l "$P/share/man/man8/moshid.8"
    expect_rc 0 "man -l moshid.8"
    [ -z "$err" ] || fail "man -l moshid.8 warns: $err"
    expect_in "$out" "EXIT STATUS" "man page"
    for flag in $("$MOSHID" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
        grep -qF -- "$flag" <<<"$out" || fail "the man page does not document $flag"
    done
else
    echo "man not installed: man page not rendered"
fi

# The units as installed, with their drop-ins (the binary path pointed at
# the installed one, the man page path at the installed page).
if ! command -v systemd-analyze >/dev/null; then
    echo "systemd-analyze not installed: installed units not verified"
else
    u=$TMP/units
    mkdir -p "$u"
    cp -r "$P/lib/systemd/system/." "$u/"
    find "$u" -type f -exec sed -i "s#/usr/bin/moshid#$P/bin/moshid#g" {} +
    # verify runs `man 8 moshid` for Documentation=: the installed page
    if command -v man >/dev/null; then
        run manw env MANPATH="$P/share/man" man -w 8 moshid
        [ "$rc" -eq 0 ] && [ "$out" = "$P/share/man/man8/moshid.8" ] || fail "man -w 8 moshid with MANPATH=$P/share/man: '$out' $err (exit $rc)"
    else
        fail "man not installed (Debian: man-db, in tests/deps.txt): systemd-analyze verify cannot look up Documentation=man:moshid(8)"
    fi
    run verify env MANPATH="$P/share/man" systemd-analyze verify "$u/moshid.service" "$u/moshid@0.service"
    if [ "$rc" -ne 0 ] && grep -qiE 'no such file or directory.*(bus|private)|failed to (initialize|connect)|permission denied' <<<"$err"; then
        echo "systemd-analyze cannot run here: installed units not verified ($err)"
    else
        [ "$rc" -eq 0 ] && [ -z "$out$err" ] || fail "systemd-analyze verify (installed units): $out $err"
    fi
fi

# A second install keeps the administrator's configuration.
echo '{"server": {"port": 9999}}' > "$conf"
run install2 make -C "$root" --no-print-directory install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr
expect_rc 0 "second make install"
expect_in "$out" "kept" "second make install"
grep -q 9999 "$conf" || fail "a second install overwrote /etc/moshid/moshid.json"
finish
