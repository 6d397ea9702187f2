#!/usr/bin/env bash
# moshid_flags.sh - each command-line flag of moshid does what --help says.
. "$(dirname "$0")/lib.sh"

run help "$MOSHID" --help
expect_rc 0 "--help"
for f in --config --set --check-config --dump-config --help-config --version; do expect_in "$out" "$f" "--help lists $f"; done

run version "$MOSHID" --version
expect_rc 0 "--version"
expect_in "$out" "moshid 0." "--version"
expect_in "$out" "build: git " "--version build line"
expect_in "$out" "  cpu   built in" "--version cpu backend"
grep -qE '^  cuda  (available|unavailable: .+|plugin loaded .+)$' <<<"$out" || fail "--version has no cuda line with a reason: $out"

run badflag "$MOSHID" --no-such-flag
expect_rc 2 "unknown flag"
run extra "$MOSHID" stray
expect_rc 2 "stray argument"
expect_in "$err" "unexpected argument 'stray'" "stray argument"

# No configuration and nothing to do: a usage error, not a silent default.
run noconf "$MOSHID"
expect_rc 2 "no --config"
expect_in "$err" "no configuration given" "no --config"

# --dump-config without a file: the defaults, as JSON that loads back.
run dump "$MOSHID" --dump-config
expect_rc 0 "--dump-config"
python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["server"]["port"]==8998 and d["log"]["level"]=="info", d' \
    <<<"$out" || fail "--dump-config is not the expected JSON"
printf '%s\n' "$out" > "$TMP/dump.json"
run dump2 "$MOSHID" --config "$TMP/dump.json" --dump-config
expect_rc 0 "dump -> load"
[ "$out" = "$(cat "$TMP/dump.json")" ] || fail "dump -> load -> dump differs"

# A complete configuration: model files that exist (relative to the file).
mkdir -p "$TMP/m/lm" && : > "$TMP/m/mimi.safetensors" && : > "$TMP/m/tok.model"
cat > "$TMP/m/ok.json" <<'J'
{ "server": {"port": 9100},
  "model": {"lm_dir": "lm", "mimi": "mimi.safetensors", "tokenizer": "tok.model"},
  "log": {"level": "warn"} }
J
run check "$MOSHID" --config "$TMP/m/ok.json" --check-config
expect_rc 0 "--check-config on a good file"
expect_in "$err" "configuration OK" "--check-config"
# --check-config reads the tokens file with the daemon's parser: a bad
# line fails the check with the file and line number, never the token.
tok_a=alice-0123456789abcdef0123 tok_b=bob-0123456789abcdef0123
printf '# tokens\nalice:%s\n\nbob:%s:many\n' "$tok_a" "$tok_b" > "$TMP/m/tokens"
chmod 600 "$TMP/m/tokens"
run tokbad "$MOSHID" -c "$TMP/m/ok.json" --set auth.tokens_file="$TMP/m/tokens" --check-config
expect_rc 1 "--check-config with a bad tokens file"
expect_in "$err" "$TMP/m/tokens:4: MAX_SESSIONS must be" "--check-config names the tokens file's line"
case "$err" in *"$tok_a"*|*"$tok_b"*) fail "--check-config echoed a token: $err" ;; esac
printf 'alice:%s\nbob:%s:2\n' "$tok_a" "$tok_b" > "$TMP/m/tokens"
run tokok "$MOSHID" -c "$TMP/m/ok.json" --set auth.tokens_file="$TMP/m/tokens" --check-config
expect_rc 0 "--check-config with a good tokens file"
expect_in "$err" "configuration OK" "--check-config with a good tokens file"
chmod 644 "$TMP/m/tokens"
run tokloose "$MOSHID" -c "$TMP/m/ok.json" --set auth.tokens_file="$TMP/m/tokens" --check-config
expect_rc 0 "--check-config with a tokens file others can read"
expect_in "$err" "readable by group or others" "--check-config warns about the tokens file's mode"
run dumpok "$MOSHID" -c "$TMP/m/ok.json" --dump-config
expect_rc 0 "--dump-config with a file"
expect_in "$out" "\"port\":	9100" "--dump-config shows the file's value"
expect_in "$out" "\"lm_dir\":	\"$(cd "$TMP/m" && pwd -P)/lm\"" "--dump-config resolves relative paths"

# --set overrides the file, in order; a bad one is refused with its path.
run set "$MOSHID" -c "$TMP/m/ok.json" --set server.port=9200 --set log.level=debug -s server.port=9300 --dump-config
expect_rc 0 "--set"
expect_in "$out" "\"port\":	9300" "--set: the last one wins"
expect_in "$out" "\"level\":	\"debug\"" "--set log.level"
run setbad "$MOSHID" -c "$TMP/m/ok.json" --set sessions.max=0 --dump-config
expect_rc 1 "--set out of range"
expect_in "$err" "--set: sessions.max: 0 is out of range [1, 1024]" "--set out of range"
run settls "$MOSHID" --set server.tls_cert=/c.pem --dump-config
expect_rc 1 "--set half of TLS"
expect_in "$err" "set both or neither" "--set half of TLS"

# --check-config on defaults: the model paths are required.
run checkdef "$MOSHID" --check-config
expect_rc 1 "--check-config without a file"
expect_in "$err" "model.lm_dir: required" "--check-config without a file"

# Serving with files that are not a model: exit 1 with a message naming the file.
run serve "$MOSHID" --config "$TMP/m/ok.json"
expect_rc 1 "serving with empty model files"
expect_in "$err" "model.safetensors" "serving with empty model files"

run helpcfg "$MOSHID" --help-config
expect_rc 0 "--help-config"
expect_in "$out" '| `server.port` | integer | `8998` |' "--help-config"
# The example configuration in config/ loads (its model files need not exist here).
run example "$MOSHID" --config "$(dirname "$0")/../../config/moshid.json" --dump-config
expect_rc 0 "config/moshid.json loads"
finish
