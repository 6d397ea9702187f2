#!/usr/bin/env bash
# device_check_dry.sh - `tests/gpu/device_check.sh --dry-run` in `make test`:
# the device check's every stage on the CPU (the emulator builds, tiny
# shapes), so the script a GPU machine runs once is itself tested. Checks:
#  - the script exits 0 and its stage table has a row for every stage, in
#    the order the device runs them (the target points right after the
#    build, the official side last); the preflight's lines, the line for
#    wheels not carried, the stated budget; the JSON summary parses and has
#    every figure; the real run without a device stops in the preflight
#    (exit 2) before building anything;
#  - lm-bench's rows: the full set (a step row per batch and position, the
#    prefill, the largest batch under the budget) or, while the plugin has
#    no backend table, the row that says so; the comparison table is there;
#  - the e2e stage's rows (lm-bench --e2e on the emulator, a random tiny
#    Mimi, position 32): the LM step alone, the synchronous and the
#    pipelined frame step for batches 1 and 2, every timed frame of every
#    slot with output (the restored bookkeeping produces frames), and the
#    report's end-to-end table;
#  - the official side: its step rows, or "skipped: torch not importable" /
#    "moshi not importable" where this machine has no torch
#    (DEVICE_CHECK_PYTHON picks the interpreter, default python3);
#  - lm-bench's measurement itself, on the CPU reference backend and a
#    moshid-mkmodel checkpoint (--backend cpu): every row, whatever the
#    CUDA backend's state; without a device it skips with its reason;
#  - --e2e on the CPU reference backend: with a random Mimi at the real
#    dimensions (mimi_rand.c's checkpoint loaded by the codec's own loader:
#    every official tensor name and shape it reads) and with a given one
#    (--mimi, moshid-mkmodel's), every row, every frame with output; its
#    argument checks;
#  - lm-bench and bench_official.py describe the same tiny and 7B shapes;
#  - the 8-bit stage (lm-bench --weights int8 --kv int8): the backend opened
#    with both schemes, batch 1's step row and the largest-batch row.
# Skips (77) where the emulator binaries are not built (sanitizer builds).
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
LB=$BUILD/lm-bench-emu
if [ ! -x "$LB" ] || [ ! -x "$BUILD/engine-test-emu" ]; then
    echo "the emulator binaries are not built (sanitizer build): skipped"
    exit 77
fi
PY=${DEVICE_CHECK_PYTHON:-python3}

# 1. The dry run. BUILD must be absolute: the script runs from the root.
case "$BUILD" in /*) absb=$BUILD ;; *) absb=$root/$BUILD ;; esac
mkdir -p "$TMP/out"
t0=$(date +%s)
run dry env OUT="$TMP/out" BUILD="$absb" DEVICE_CHECK_PYTHON="$PY" DEVICE_CHECK_WHEELS="$TMP/no-wheels" \
    bash "$root/tests/gpu/device_check.sh" --dry-run
expect_rc 0 "device_check.sh --dry-run (report: $(cat "$TMP/out/device_check.md" 2>/dev/null | tail -n 40))"
dryout=$out
st=$TMP/out/stages.md
for s in build engine-test backend-test lm-bench e2e official engine-bench compute-sanitizer lm-bench-8bit; do
    grep -qE "^\| $s \|" "$st" || fail "no '$s' row in the stage table: $(cat "$st")"
done
# the order: the target points (lm-bench) right after the build, the official side after the
# others but the 8-bit stage, which comes last
order=$(awk -F'|' '{gsub(/ /, "", $2); print $2}' "$st" | paste -sd ' ' -)
case "$order" in
    "build lm-bench engine-test "*" official lm-bench-8bit") ;;
    *) fail "stage order: $order (want build, lm-bench, engine-test, ..., official, lm-bench-8bit)" ;;
esac
rep=$(cat "$TMP/out/device_check.md")
expect_in "$rep" "### Preflight" "the report's preflight"
expect_in "$rep" "code=sm_90" "the preflight's compiler flags"
expect_in "$rep" "- preflight: passed" "the preflight's verdict"
expect_in "$rep" "make fetch-wheels" "the line for wheels not carried"
expect_in "$rep" "of a 200-s budget" "the stated budget"
# the target points first: batch 2 (the tiny shape's largest) at its full context
first=$(grep -m1 '^| moshid | step |' "$TMP/out/lm_bench.md" | awk -F'|' '{gsub(/ /, ""); print $4 "@" $5}')
[ "$first" = "2@32" ] || fail "lm-bench measured $first first, not the target point 2@32"
# the JSON summary: parses, carries every figure docs/benchmarks.md takes
python3 - "$TMP/out/summary.json" <<'PYEOF' || fail "summary.json: $(cat "$TMP/out/summary.json")"
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["commit", "date", "gpu", "driver", "toolkit", "budget_s", "total_s", "result", "stages", "copy_d2d_gbps",
        "fits_slots", "prefill_300_ms", "max_batch_under_80ms", "lm_step", "official_step", "e2e", "mimi", "targets"]
missing = [k for k in keys if k not in d]
assert not missing, missing
assert d["result"] == "PASS" and d["budget_s"] == 200, d["result"]
assert {(r["batch"], r["position"]) for r in d["lm_step"]} == {(1, 4), (2, 4), (1, 32), (2, 32)}, d["lm_step"]
assert all(r["ms"] > 0 for r in d["lm_step"])
assert {(r["batch"], r["position"]) for r in d["e2e"]} == {(1, 32), (2, 32)}, d["e2e"]
assert all(r["pipelined_ms"] > 0 and r["pipelined_fresh_codec_ms"] > 0 for r in d["e2e"]), d["e2e"]
assert [s["stage"] for s in d["stages"]][-2:] == ["official", "lm-bench-8bit"], d["stages"]
PYEOF
# the real run's preflight on this machine (no device): one line, exit 2, nothing built
mkdir -p "$TMP/pre"
run pre env OUT="$TMP/pre" DEVICE_CHECK_BUILD="$TMP/pre-build" bash "$root/tests/gpu/device_check.sh"
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    echo "a device is present: the preflight's stop on no device is not exercised here"
else
    expect_rc 2 "device_check.sh without a device"
    expect_in "$out" "**preflight: STOP**" "the preflight's stop line"
    [ -e "$TMP/pre-build" ] && fail "the preflight stopped but something was built in $TMP/pre-build"
fi
out=$dryout
grep -qE '^\| [a-z-]+ \| FAILED' "$st" && fail "a stage failed: $(grep FAILED "$st")"
expect_in "$out" "### moshid / official per batch size" "the report"
expect_in "$out" "| batch | position | moshid ms | official ms | moshid / official |" "the comparison table"

lmb=$TMP/out/lm_bench.md
if grep -q 'skipped: plugin carries no backend table' "$lmb"; then
    grep -qE '^\| lm-bench \| no backend table' "$st" || fail "lm-bench skipped without the stage saying 'no backend table'"
    echo "lm-bench: the plugin carries no backend table (yet): reported as such"
else
    # tiny: batches 1, 2 at positions 4 and 32
    for p in 4 32; do
        for b in 1 2; do
            grep -qE "^\| moshid \| step \| $b \| $p \| [0-9.]+ \|" "$lmb" || fail "no lm-bench step row for batch $b at $p: $(cat "$lmb")"
        done
    done
    grep -qE '^\| moshid \| prefill \| 1 \| 0-7 \| [0-9.]+ \|' "$lmb" || fail "no prefill row: $(cat "$lmb")"
    grep -qE '^\| moshid \| max batch under budget \| [0-9]+ \| 32 \|' "$lmb" || fail "no max-batch row: $(cat "$lmb")"
    grep -qE '^\| moshid \| fits in memory \(plan\) \| [0-9-]+ \|' "$lmb" || fail "no plan row: $(cat "$lmb")"
    grep -qE '^\| 1 \| 4 \| [0-9.]+ \|' <<<"$out" || fail "the comparison table lacks moshid's batch 1 at 4"
fi
# the 8-bit stage: lm-bench with int8 weights and K/V, batch 1 at 32 and the bisection
lmb8=$TMP/out/lm_bench_8bit.md
if ! grep -q 'skipped: plugin carries no backend table' "$lmb8"; then
    grep -qE '^\| moshid \| open \| [0-9]+ \| - \| [0-9.]+ \| .*random int8 weights.*int8 K/V' "$lmb8" ||
        fail "the 8-bit stage did not open the backend with int8 weights and K/V: $(cat "$lmb8")"
    grep -qE '^\| moshid \| step \| 1 \| 32 \| [0-9.]+ \|' "$lmb8" || fail "no 8-bit step row for batch 1 at 32: $(cat "$lmb8")"
    grep -qE '^\| moshid \| max batch under budget \| [0-9]+ \| 32 \|' "$lmb8" || fail "no 8-bit max-batch row: $(cat "$lmb8")"
fi
e2e=$TMP/out/e2e.md
if grep -q 'skipped: plugin carries no backend table' "$e2e"; then
    grep -qE '^\| e2e \| skipped: plugin carries no backend table' "$st" || fail "e2e skipped without the stage saying so"
else
    # tiny: batches 1, 2 at position 32 (the dry run's --positions 32); one
    # timed frame per row (the tiny shape's --steps 1)
    for b in 1 2; do
        grep -qE "^\| moshid \| e2e lm step \| $b \| 32 \| [0-9.]+ \|" "$e2e" || fail "no e2e lm step row for batch $b: $(cat "$e2e")"
        for k in sync pipelined; do
            grep -qE "^\| moshid \| e2e $k \| $b \| 32 \| [0-9.]+ \| .*; $b of $b rows with output \|" "$e2e" ||
                fail "no e2e $k row for batch $b with every frame out: $(cat "$e2e")"
        done
        grep -qE "^\| $b \| 32 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|" <<<"$out" || fail "the report's e2e table lacks batch $b"
    done
    grep -qE '^\| moshid \| codec \| - \| - \| [0-9.]+ \| random Mimi written: tiny dimensions' "$e2e" || fail "no codec row: $(cat "$e2e")"
    grep -qE '^\| moshid \| open \| 2 \| .*frame steps pipelined' "$e2e" || fail "e2e: the backend did not open pipelined: $(cat "$e2e")"
    expect_in "$out" "### End-to-end frame step" "the report"
fi
off=$TMP/out/official.md
if grep -qE 'skipped: (torch|moshi) not importable' "$off"; then
    echo "official: $(grep -o 'skipped: [^|]*' "$off")"
else
    for p in 4 32; do
        for b in 1 2; do
            grep -qE "^\| official \| step \| $b \| $p \| [0-9.]+ \|" "$off" || fail "no official step row for batch $b at $p: $(cat "$off")"
            grep -qE "^\| $b \| $p \| [0-9.-]+ \| [0-9.]+ \|" <<<"$out" || fail "the comparison table lacks official's batch $b at $p"
        done
    done
fi
echo "dry run: $(($(date +%s) - t0)) s"

# 2. lm-bench's measurement on the CPU reference backend (a self-test that
# does not wait for the CUDA backend), and its no-device path.
run mk "$BUILD/moshid-mkmodel" --out "$TMP/mk" --text-card 48 --dep-q 8 --lm-only --context 32
expect_rc 0 "moshid-mkmodel"
run cpu "$LB" --shape tiny --backend cpu --model-dir "$TMP/mk/lm" --out "$TMP/cpu.md" --budget-ms 60000 \
    --batches 1,2,4 --max-slots 4 --warmup 1 --steps 3
expect_rc 0 "lm-bench --backend cpu"
for p in 4 32; do
    for b in 1 2 4; do
        grep -qE "^\| moshid \| step \| $b \| $p \| [0-9.]+ \| weights " "$TMP/cpu.md" || fail "cpu: no step row for batch $b at $p: $(cat "$TMP/cpu.md")"
    done
done
# four slots opened, a budget of 60 s per step (no timing in the test): the
# search must end at 4, every slot
grep -qE '^\| moshid \| max batch under budget \| 4 \| 32 \|' "$TMP/cpu.md" || fail "cpu: max batch row: $(cat "$TMP/cpu.md")"
nf=$(grep -c '^| moshid |' "$TMP/cpu.md" 2>/dev/null)
no=$(grep -c '^| moshid |' <<<"$out")
[ "${nf:-0}" -gt 0 ] && [ "${nf:-0}" -eq "$no" ] || fail "cpu: --out has ${nf:-no} rows, stdout $no"
run nodev env EMU_NO_DEVICE=1 "$LB" --shape tiny --out "$TMP/nodev.md"
expect_rc 77 "lm-bench without a device"
expect_in "$(cat "$TMP/nodev.md")" "skipped: no CUDA device" "lm-bench without a device"
run bad "$LB" --shape tiny --positions 33
expect_rc 2 "lm-bench with a position past the context"

# 2b. --e2e on the CPU reference backend: the random codec at the real
# dimensions (the checkpoint's LM has the 7B's card and user streams, so it
# is the official configuration: 8 codebooks of 2048), then a given codec.
run mk2 "$BUILD/moshid-mkmodel" --out "$TMP/mk2" --text-card 48 --dep-q 8 --context 32
expect_rc 0 "moshid-mkmodel (with Mimi)"
run e2ecpu "$LB" --shape tiny --backend cpu --model-dir "$TMP/mk2/lm" --e2e --mimi-dims real --out "$TMP/e2e_cpu.md" \
    --batches 1,2 --max-slots 2 --warmup 1 --steps 3 --codec-fill 2
expect_rc 0 "lm-bench --backend cpu --e2e --mimi-dims real"
grep -qE '^\| moshid \| codec \| - \| - \| [0-9.]+ \| random Mimi written: real dimensions \(SEANet 64 filters, d_model 512, 8 \+ 8 transformer layers\), 8 codebooks of 2048 \|' "$TMP/e2e_cpu.md" ||
    fail "cpu e2e: no real-dimension codec row: $(cat "$TMP/e2e_cpu.md")"
run e2ecpu2 "$LB" --shape tiny --backend cpu --model-dir "$TMP/mk2/lm" --e2e --mimi "$TMP/mk2/mimi.safetensors" \
    --mimi-config "$TMP/mk2/mimi.json" --out "$TMP/e2e_cpu2.md" --batches 1,2 --max-slots 2 --warmup 1 --steps 3
expect_rc 0 "lm-bench --backend cpu --e2e --mimi"
grep -q '| moshid | codec |' "$TMP/e2e_cpu2.md" && fail "cpu e2e --mimi: a codec was written: $(cat "$TMP/e2e_cpu2.md")"
grep -qE '^\| moshid \| e2e fill \| - \| - \| [0-9.]+ \| codec context filled: 2 frames of 2 slots' "$TMP/e2e_cpu.md" ||
    fail "cpu e2e: no fill row for --codec-fill 2: $(cat "$TMP/e2e_cpu.md")"
# the given codec (moshid-mkmodel's: context 250) is filled to its context
grep -qE '^\| moshid \| e2e fill \| - \| - \| [0-9.]+ \| codec context filled: 125 frames of 2 slots' "$TMP/e2e_cpu2.md" ||
    fail "cpu e2e --mimi: no fill row of 125 frames: $(cat "$TMP/e2e_cpu2.md")"
for f in "$TMP/e2e_cpu.md" "$TMP/e2e_cpu2.md"; do
    grep -qE '^\| moshid \| e2e pipelined \| 2 \| 32 \| [0-9.]+ \| .*codec context full; fresh codec state [0-9.]+ ms' "$f" ||
        fail "cpu e2e: the pipelined row lacks the fresh figure: $(cat "$f")"
    grep -qE '^\| moshid \| open \| 2 \| .*codec: 8 codebooks, .*frame steps pipelined \|' "$f" || fail "cpu e2e: open row: $(cat "$f")"
    for p in 4 32; do
        for b in 1 2; do
            grep -qE "^\| moshid \| e2e lm step \| $b \| $p \| [0-9.]+ \|" "$f" || fail "cpu e2e: no lm step row for batch $b at $p: $(cat "$f")"
            for k in sync pipelined; do
                grep -qE "^\| moshid \| e2e $k \| $b \| $p \| [0-9.]+ \| .*; $((3 * b)) of $((3 * b)) rows with output \|" "$f" ||
                    fail "cpu e2e: no $k row for batch $b at $p with every frame out: $(cat "$f")"
            done
        done
    done
done
run e2epp "$LB" --shape tiny --e2e --variant personaplex
expect_rc 2 "lm-bench --e2e --variant personaplex (Kyutai's bookkeeping only)"
run e2edims "$LB" --shape tiny --mimi-dims real
expect_rc 2 "lm-bench --mimi-dims without --e2e"
run e2eboth "$LB" --shape tiny --e2e --mimi x.safetensors --mimi-dims real
expect_rc 2 "lm-bench --e2e with --mimi and --mimi-dims"

# 3. One shape on both sides.
for s in tiny 7b; do
    run lc "$LB" --shape $s --write-config "$TMP/$s.json"
    expect_rc 0 "lm-bench --write-config $s"
    run pc python3 "$root/tests/gpu/bench_official.py" --config "$TMP/$s.json" --print-config
    expect_rc 0 "bench_official.py --config $s --print-config"
    printf '%s\n' "$out" > "$TMP/$s.lm.json"
    run ps python3 "$root/tests/gpu/bench_official.py" --shape $s --print-config
    expect_rc 0 "bench_official.py --shape $s --print-config"
    [ "$out" = "$(cat "$TMP/$s.lm.json")" ] || fail "shape $s: lm-bench's config and bench_official.py's differ: $(cat "$TMP/$s.lm.json") vs $out"
done
finish
