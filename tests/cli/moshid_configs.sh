#!/usr/bin/env bash
# moshid_configs.sh - bad configuration files are refused (exit 1) with a
# message naming the file, the key path and the reason.
. "$(dirname "$0")/lib.sh"

# case NAME 'JSON' NEEDLE...: write the file, --check-config must refuse it
case_bad() {
    local name=$1 json=$2; shift 2
    printf '%s' "$json" > "$TMP/$name.json"
    run "$name" "$MOSHID" --config "$TMP/$name.json" --check-config
    expect_rc 1 "$name"
    expect_in "$err" "$TMP/$name.json: " "$name names the file"
    local n; for n in "$@"; do expect_in "$err" "$n" "$name"; done
    # the same file without --check-config is refused the same way
    run "$name.serve" "$MOSHID" --config "$TMP/$name.json"
    expect_rc 1 "$name (serve)"
}

case_bad unknown_key '{"server": {"prot": 8998}}' "server.prot: unknown option" "did you mean server.port?"
case_bad unknown_section '{"engines": {}}' "engines: unknown section"
case_bad bad_type '{"server": {"port": "8998"}}' "server.port: expected an integer, got a string"
case_bad bad_enum '{"engine": {"backend": "gpu"}}' 'engine.backend: "gpu" is not one of auto, cpu, cuda'
case_bad out_of_range '{"server": {"port": 70000}}' "server.port: 70000 is out of range [0, 65535]"
case_bad out_of_range_dbl '{"limits": {"output_queue_s": 0}}' "limits.output_queue_s: 0 is out of range"
case_bad bad_list_item '{"server": {"allowed_origins": ["https://ok.example", "nope"]}}' \
    "server.allowed_origins[1]" "is not \"*\" or an origin"
case_bad duplicate '{"log": {"level": "info", "level": "debug"}}' "log.level: duplicate key"
case_bad bad_json $'{\n  "server": {"port": 8998,}\n}' "2:" "malformed JSON"
case_bad not_object '[]' "expected a JSON object at the top"
case_bad tls_half '{"server": {"tls_cert": "/etc/ssl/c.pem"}}' "set both or neither"
case_bad persona_key '{"personas": {"list": [{"name": "ada", "voise": "ada.wav"}]}}' \
    "personas.list[0].voise: unknown key" "did you mean voice?"
case_bad persona_name '{"personas": {"list": [{"name": "../ada"}]}}' "personas.list[0].name" "not a persona name"
case_bad persona_twice '{"personas": {"list": [{"name": "a"}, {"name": "a"}]}}' "personas.list[1].name" \
    "already the name of personas.list[0]"
case_bad persona_option '{"personas": {"voice_dir": "v"}}' "personas.voice_dir: unknown option" \
    "did you mean personas.voices_dir?"
case_bad missing_model '{"model": {"lm_dir": "/nonexistent/lm", "mimi": "/x", "tokenizer": "/y"}}' \
    "model.lm_dir: /nonexistent/lm: No such file or directory"

# Missing, unreadable-as-file and oversize files.
run missing "$MOSHID" --config "$TMP/nope.json" --check-config
expect_rc 1 "missing file"
expect_in "$err" "$TMP/nope.json: No such file or directory" "missing file"
run isdir "$MOSHID" --config "$TMP" --check-config
expect_rc 1 "directory as config"
expect_in "$err" "not a regular file" "directory as config"
head -c 1048577 /dev/zero | tr '\0' ' ' > "$TMP/big.json"
run big "$MOSHID" --config "$TMP/big.json" --check-config
expect_rc 1 "oversize file"
expect_in "$err" "larger than the limit of 1048576" "oversize file"
# --dump-config refuses a bad file too (exit 1, nothing on stdout).
run dumpbad "$MOSHID" --config "$TMP/bad_type.json" --dump-config
expect_rc 1 "--dump-config of a bad file"
[ -z "$out" ] || fail "--dump-config of a bad file printed: $out"
finish
