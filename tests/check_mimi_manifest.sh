#!/usr/bin/env bash
# check_mimi_manifest.sh - the Mimi fixtures match their manifest: every file
# listed with its sha256, nothing unlisted, generator versions recorded
# (pinned in tests/fixtures/requirements-fixtures.txt). Exit 0 pass, 1 fail.
set -u
exec python3 - tests/fixtures/mimi tests/fixtures/requirements-fixtures.txt <<'PY'
import hashlib, json, os, sys
d, req = sys.argv[1], sys.argv[2]
man = json.load(open(os.path.join(d, "manifest.json")))
bad = 0
listed = {"manifest.json"}
pins = dict(l.strip().split("==") for l in open(req) if "==" in l)
for pkg in ("moshi", "torch", "numpy", "safetensors"):
    have = man["versions"].get(pkg, "")
    if not have or not have.startswith(pins.get(pkg, "?")):
        print("version of %s: manifest %r, pinned %r" % (pkg, have, pins.get(pkg))); bad += 1
for name, model in man["models"].items():
    for key in ("seed", "frames", "config"):
        if key not in model:
            print("%s: no %s" % (name, key)); bad += 1
    for f, sha in model["files"].items():
        listed.add(f)
        p = os.path.join(d, f)
        if not os.path.exists(p):
            print("missing", f); bad += 1; continue
        got = hashlib.sha256(open(p, "rb").read()).hexdigest()
        if got != sha:
            print("sha256 mismatch", f); bad += 1
    cfg = json.load(open(os.path.join(d, name + ".json")))
    if cfg != model["config"]:
        print("%s.json differs from the manifest's config" % name); bad += 1
extra = set(os.listdir(d)) - listed
if extra:
    print("files not in the manifest:", sorted(extra)); bad += 1
print("%d model(s), %d file(s) checked, %d problem(s)" % (len(man["models"]), len(listed), bad))
sys.exit(1 if bad else 0)
PY
