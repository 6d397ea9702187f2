#!/usr/bin/env bash
# check_mimi_codec.sh - drive the real build/mimi-codec: parity through files
# (WAV and FLAC input give the reference codes; decoding the reference codes
# gives the reference audio within 1e-4 rms), resampling and channel mixing,
# WAV/f32 output, and hostile inputs (each must exit non-zero with a message).
# Uses only python3's standard library (the committed fixtures are read as
# safetensors by hand). Exit 0 pass, 1 fail.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/mimi-codec
FX=tests/fixtures/mimi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

[ -x "$BIN" ] || { echo "FAIL $BIN not built"; exit 1; }

# helper: tools on the reference safetensors
cat > "$T/ref.py" <<'PY'
import json, struct, sys, math, wave

def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        fmt = {"F32": "f", "I32": "i"}[v["dtype"]]
        out[k] = (v["shape"], struct.unpack("<%d%s" % (len(raw) // 4, fmt), raw))
    return out

cmd = sys.argv[1]
if cmd == "codes":                      # ref.safetensors name -> text
    shape, v = load(sys.argv[2])[sys.argv[3]]
    F, K = shape
    for f in range(F):
        print(" ".join(str(v[f * K + k]) for k in range(K)))
elif cmd == "cmp":                      # ref.safetensors out.f32
    _, want = load(sys.argv[2])["decoded"]
    raw = open(sys.argv[3], "rb").read()
    got = struct.unpack("<%df" % (len(raw) // 4), raw)
    if len(got) != len(want):
        sys.exit("sample count %d, reference %d" % (len(got), len(want)))
    rms = math.sqrt(sum(x * x for x in want) / len(want))
    mx = max(abs(a - b) for a, b in zip(got, want))
    print("max|delta| %.3g rms %.4g ratio %.3g" % (mx, rms, mx / rms))
    sys.exit(0 if mx <= 1e-4 * rms else 1)
elif cmd == "wavinfo":                  # file.wav -> "channels width rate frames"
    w = wave.open(sys.argv[2])
    print(w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes())
elif cmd == "stereo48k":                # in.wav out.wav: upsample x2 (repeat) to stereo
    w = wave.open(sys.argv[2])
    x = struct.unpack("<%dh" % w.getnframes(), w.readframes(w.getnframes()))
    o = wave.open(sys.argv[3], "wb")
    o.setnchannels(2); o.setsampwidth(2); o.setframerate(2 * w.getframerate())
    o.writeframes(b"".join(struct.pack("<hh", s, -s // 2) for s in x for _ in range(2)))
    o.close()
elif cmd == "drop":                     # in.safetensors out.safetensors name: remove a tensor from the header
    b = open(sys.argv[2], "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    del hdr[sys.argv[4]]
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(sys.argv[3], "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
py() { python3 "$T/ref.py" "$@"; }

for m in tiny dil sr16k; do
    W=(--mimi "$FX/$m.safetensors" --config "$FX/$m.json")
    py codes "$FX/${m}_ref.safetensors" codes > "$T/$m.want.txt"
    if "$BIN" encode "${W[@]}" "$FX/$m.wav" "$T/$m.txt" && cmp -s "$T/$m.txt" "$T/$m.want.txt"; then
        ok "$m: encode WAV gives the reference codes"
    else bad "$m: encode WAV codes differ from the reference"; fi
    if "$BIN" decode "${W[@]}" "$T/$m.want.txt" "$T/$m.f32" && out=$(py cmp "$FX/${m}_ref.safetensors" "$T/$m.f32"); then
        ok "$m: decode to .f32 within 1e-4 rms ($out)"
    else bad "$m: decode .f32 differs from the reference ($out)"; fi
done

m=tiny
W=(--mimi "$FX/$m.safetensors" --config "$FX/$m.json")
frames=$(wc -l < "$T/$m.want.txt")
if "$BIN" decode "${W[@]}" "$T/$m.want.txt" "$T/o.wav" && [ "$(py wavinfo "$T/o.wav")" = "1 2 24000 $((frames * 1920))" ]; then
    ok "decode to 16-bit mono 24 kHz WAV of the right length"
else bad "decode to WAV: $(py wavinfo "$T/o.wav" 2>&1)"; fi

if command -v sox > /dev/null; then
    sox "$FX/$m.wav" "$T/in.flac" && "$BIN" encode "${W[@]}" "$T/in.flac" "$T/flac.txt" && cmp -s "$T/flac.txt" "$T/$m.want.txt" \
        && ok "FLAC input gives the reference codes" || bad "FLAC input"
    sox "$FX/$m.wav" "$T/in.ogg" && "$BIN" encode "${W[@]}" "$T/in.ogg" "$T/ogg.txt" && [ "$(wc -l < "$T/ogg.txt")" = "$frames" ] \
        && ok "Ogg Vorbis input encodes" || bad "Ogg input"
else
    echo "skip FLAC/Ogg (no sox)"
fi

py stereo48k "$FX/$m.wav" "$T/st48.wav"
if "$BIN" encode "${W[@]}" "$T/st48.wav" "$T/st48.txt" && [ "$(wc -l < "$T/st48.txt")" = "$frames" ] \
    && [ "$(awk '{print NF}' "$T/st48.txt" | sort -u)" = 8 ]; then
    ok "48 kHz stereo input is mixed and resampled ($frames frames of 8 codes)"
else bad "48 kHz stereo input"; fi

# hostile inputs: exit status 1 and a message naming the problem
expect_fail() {  # description, pattern, command...
    local what=$1 pat=$2
    shift 2
    local out rc
    out=$("$@" 2>&1 > /dev/null); rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "$pat" <<< "$out"; then ok "refused: $what ($out)"
    else bad "$what: rc=$rc out=$out"; fi
}
head -c 30 "$FX/$m.wav" > "$T/hdr.wav"
head -c 50000 "$FX/$m.wav" > "$T/cut.wav"
echo "this is not audio" > "$T/text.wav"
head -c 3000 /dev/urandom > "$T/noise.wav"
: > "$T/empty.txt"
printf '1 2 3\n' > "$T/short.txt"
printf '1 2 3 4 5 6 7 8 9\n' > "$T/long.txt"
printf '1 2 3 4 5 6 7 x\n' > "$T/alpha.txt"
printf '1 2 3 4 5 6 7 64\n' > "$T/range.txt"
printf '1 2 3 4 5 6 7 -1\n' > "$T/neg.txt"
printf '1 2 3 4 5 6 7 99999999999999999999\n' > "$T/huge.txt"
printf '1 2 3 4 5 6 7 8\n\n' > "$T/blank.txt"
head -c 10000 /dev/zero | tr '\0' '1' > "$T/longline.txt"
py drop "$FX/$m.safetensors" "$T/missing.safetensors" "decoder.model.5.convtr.convtr.weight"
echo '{"seanet": {"n_filters": 4, "dimension": 32, "bogus": 1}}' > "$T/badkey.json"
expect_fail "WAV cut inside its header" "not a readable audio file" "$BIN" encode "${W[@]}" "$T/hdr.wav" "$T/x.txt"
expect_fail "WAV cut inside its data" "truncated" "$BIN" encode "${W[@]}" "$T/cut.wav" "$T/x.txt"
expect_fail "text file named .wav" "not a readable audio file" "$BIN" encode "${W[@]}" "$T/text.wav" "$T/x.txt"
expect_fail "random bytes" "not a readable audio file" "$BIN" encode "${W[@]}" "$T/noise.wav" "$T/x.txt"
expect_fail "missing input" "No such file\|not a readable" "$BIN" encode "${W[@]}" "$T/nonexistent.wav" "$T/x.txt"
expect_fail "empty code file" "no frames" "$BIN" decode "${W[@]}" "$T/empty.txt" "$T/x.wav"
expect_fail "too few codes" "expected 8 integer codes" "$BIN" decode "${W[@]}" "$T/short.txt" "$T/x.wav"
expect_fail "too many codes" "more than 8 codes" "$BIN" decode "${W[@]}" "$T/long.txt" "$T/x.wav"
expect_fail "non-integer code" "expected 8 integer codes" "$BIN" decode "${W[@]}" "$T/alpha.txt" "$T/x.wav"
expect_fail "code = cardinality" "outside \[0, 64)" "$BIN" decode "${W[@]}" "$T/range.txt" "$T/x.wav"
expect_fail "negative code" "outside" "$BIN" decode "${W[@]}" "$T/neg.txt" "$T/x.wav"
expect_fail "code beyond long" "not an integer" "$BIN" decode "${W[@]}" "$T/huge.txt" "$T/x.wav"
expect_fail "blank line" "expected 8 integer codes" "$BIN" decode "${W[@]}" "$T/blank.txt" "$T/x.wav"
expect_fail "overlong line" "longer than" "$BIN" decode "${W[@]}" "$T/longline.txt" "$T/x.wav"
expect_fail "unknown output type" "must end in .wav or .f32" "$BIN" decode "${W[@]}" "$T/$m.want.txt" "$T/x.mp3"
expect_fail "missing tensor" "decoder.model.5.convtr.convtr.weight" "$BIN" decode --mimi "$T/missing.safetensors" --config "$FX/$m.json" "$T/$m.want.txt" "$T/x.wav"
expect_fail "weights that are not safetensors" "$T/text.wav" "$BIN" decode --mimi "$T/text.wav" --config "$FX/$m.json" "$T/$m.want.txt" "$T/x.wav"
expect_fail "unknown config key" "unknown key seanet.bogus" "$BIN" decode --mimi "$FX/$m.safetensors" --config "$T/badkey.json" "$T/$m.want.txt" "$T/x.wav"
expect_fail "config of other shapes (defaults)" "encoder.model.0.conv.conv.weight" "$BIN" decode --mimi "$FX/$m.safetensors" "$T/$m.want.txt" "$T/x.wav"
"$BIN" > /dev/null 2>&1; [ $? -eq 2 ] && ok "usage error exits 2" || bad "usage error"
"$BIN" encode --mimi "$FX/$m.safetensors" "$FX/$m.wav" > /dev/null 2>&1; [ $? -eq 2 ] && ok "missing output exits 2" || bad "missing output"

echo "$fails failure(s)"
[ $fails -eq 0 ]
