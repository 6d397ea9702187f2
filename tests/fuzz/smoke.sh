#!/usr/bin/env bash
# smoke.sh - run every fuzz target ($MOSHID_FUZZ_TARGETS, set by
# tests/fuzz/fuzz.mk, with MOSHID_FUZZ_OK=1 when clang and libFuzzer are
# there) over its committed corpus tests/fuzz/corpus/NAME, then
# 2000 mutations (FUZZ_SMOKE_RUNS) from a fixed seed. New inputs go
# to a temporary directory, never into the committed corpus.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
runs=${FUZZ_SMOKE_RUNS:-2000}
targets=${MOSHID_FUZZ_TARGETS:-}
[ -n "$targets" ] || { echo "no fuzz targets declared (run through make)"; exit 77; }
[ "${MOSHID_FUZZ_OK:-}" = 1 ] || { echo "clang/libFuzzer not installed: fuzz smoke skipped"; exit 77; }
tmp=$(mktemp -d /tmp/fuzz-smoke.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
for t in $targets; do
    bin=$BUILD/fuzz/fuzz_$t corpus=tests/fuzz/corpus/$t
    [ -x "$bin" ] || { echo "fuzz_$t: $bin not built"; fail=1; continue; }
    n=$(find "$corpus" -type f 2>/dev/null | wc -l)
    [ "$n" -gt 0 ] || { echo "fuzz_$t: no committed corpus in $corpus"; fail=1; continue; }
    dict=; [ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
    mkdir -p "$tmp/$t"
    start=$(date +%s%N)
    if "$bin" -runs="$runs" -seed=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$tmp/$t-crash-" $dict \
        "$tmp/$t" "$corpus" > "$tmp/$t.log" 2>&1; then
        printf 'fuzz_%s: %d corpus files + %d runs ok (%d ms)\n' "$t" "$n" "$runs" $(( ($(date +%s%N) - start) / 1000000 ))
    else
        echo "fuzz_$t: FAILED on the corpus or a mutation:"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written|Base64' "$tmp/$t.log" | head -n 15
        mkdir -p "$BUILD/fuzz/artifacts" && cp "$tmp/$t"-crash-* "$BUILD/fuzz/artifacts/" 2>/dev/null \
            && echo "(crash input copied to $BUILD/fuzz/artifacts/)"
        fail=1
    fi
done
exit $fail
