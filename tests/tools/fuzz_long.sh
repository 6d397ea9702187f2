#!/usr/bin/env bash
# fuzz_long.sh - `make fuzz-long`: every fuzz target ($MOSHID_FUZZ_TARGETS,
# exported by tests/fuzz/fuzz.mk) for a share of FUZZ_LONG_S seconds.
#
#   FUZZ_LONG_S        total wall time, seconds, split evenly across the
#                      targets (default 3600: an hour in all; with 6 targets
#                      ten minutes each). One target after the other: the
#                      machine's second core stays for the rest of the work.
#   FUZZ_LONG_TARGETS  the targets to run (default: all of them)
#
# The corpus is kept between runs in $BUILD/fuzz-corpus/NAME (libFuzzer's
# output corpus, seeded from the committed tests/fuzz/corpus/NAME, which is
# only read); a crash, a timeout (-timeout: one input over 10 s) or an input
# over the memory limit fails the target, keeps the reproducer in
# $BUILD/fuzz-artifacts/ (crash-*, timeout-*, oom-*, leak-*) and makes the
# script exit 1 after the other targets had their turn. One summary line per
# target: executions, coverage (libFuzzer's edge counter "cov" and feature
# counter "ft" at the end), corpus files and bytes, peak RSS; also written
# to $BUILD/fuzz-long/summary.json. Merging what was found into the
# committed corpus is a separate, manual step (tests/fuzz/fuzz.mk).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
total=${FUZZ_LONG_S:-3600}
targets=${FUZZ_LONG_TARGETS:-${MOSHID_FUZZ_TARGETS:-}}
[ -n "$targets" ] || { echo "fuzz-long: no fuzz targets (run through make)"; exit 2; }
[ "${MOSHID_FUZZ_OK:-}" = 1 ] || { echo "fuzz-long: clang/libFuzzer not installed (Debian: clang libclang-rt-14-dev)"; exit 1; }
[[ $total =~ ^[0-9]+$ ]] || { echo "fuzz-long: FUZZ_LONG_S must be a whole number of seconds"; exit 2; }
n=$(wc -w <<<"$targets")
each=$(( total / n ))
[ "$each" -ge 10 ] || { echo "fuzz-long: FUZZ_LONG_S=$total gives under 10 s a target ($n targets)"; exit 2; }
out=$BUILD/fuzz-long art=$BUILD/fuzz-artifacts
mkdir -p "$out" "$art"
echo "fuzz-long: $n targets, $each s each ($total s in all), $(date -u '+%Y-%m-%d %H:%M UTC')"
fail=0 json="["
for t in $targets; do
    bin=$BUILD/fuzz/fuzz_$t corpus=$BUILD/fuzz-corpus/$t seeds=tests/fuzz/corpus/$t
    [ -x "$bin" ] || { echo "fuzz_$t: $bin not built"; fail=1; continue; }
    mkdir -p "$corpus"
    dict=; [ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
    seeddir=; [ -d "$seeds" ] && seeddir=$seeds
    before=$(find "$corpus" -type f | wc -l)
    log=$out/$t.log
    start=$(date +%s)
    # -timeout: a single input over 10 s is a hang; -rss_limit_mb: the
    # process over 2 GiB is a leak or an unbounded allocation; both are
    # failures with a reproducer, as a crash is.
    "$bin" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/$t-" $dict "$corpus" $seeddir > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -n 1)
    cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    files=$(find "$corpus" -type f | wc -l)
    bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    status=ok
    if [ $rc -ne 0 ]; then
        status=FAILED fail=1
    fi
    printf 'fuzz_%-8s %-6s %5d s  execs %-10s cov %-6s ft %-7s corpus %d files (%d new, %d bytes)  peak rss %s MB\n' \
        "$t" "$status" "$secs" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$files" $((files - before)) "$bytes" "${rss:-?}"
    if [ $rc -ne 0 ]; then
        grep -E '==[0-9]+==ERROR|SUMMARY|runtime error|Test unit written|ALARM|out-of-memory' "$log" | head -n 15
        echo "  reproducer(s) in $art/, whole log $log"
    fi
    json+=$(printf '%s{"target":"%s","status":"%s","seconds":%d,"execs":%s,"cov":%s,"ft":%s,"corpus_files":%d,"new_files":%d,"corpus_bytes":%d,"peak_rss_mb":%s}' \
        "$([ "$json" = "[" ] || echo ,)" "$t" "$status" "$secs" "${execs:-null}" "${cov:-null}" "${ft:-null}" \
        "$files" $((files - before)) "$bytes" "${rss:-null}")
done
json+="]"
printf '%s\n' "$json" > "$out/summary.json"
[ $fail -eq 0 ] && echo "fuzz-long: no crash in $n targets (summary $out/summary.json)" \
    || echo "fuzz-long: FAILED (summary $out/summary.json)"
exit $fail
