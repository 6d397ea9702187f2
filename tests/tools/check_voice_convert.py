#!/usr/bin/env python3
"""Round trip of engine/cli/moshid-voice-convert.py (needs torch: run it in
the fixture venv, outside `make test`): a committed PersonaPlex-fixture
voice (tests/fixtures/pp/pp_d1/voice.safetensors) is written as
PersonaPlex's LMGen saves a voice (.pt: embeddings (T, 1, 1, dim) bfloat16
and float32, cache (1, 17, R) int64), converted back and compared.
  /tmp/fixvenv/bin/python tests/tools/check_voice_convert.py"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ref = load_file(os.path.join(ROOT, "tests/fixtures/pp/pp_d1/voice.safetensors"))
with tempfile.TemporaryDirectory() as d:
    for dt in (torch.float32, torch.bfloat16):
        emb = ref["embeddings"].to(dt)
        pt = os.path.join(d, "NATX0.pt")
        torch.save({"embeddings": emb[:, None, None, :].clone(), "cache": ref["cache"].long()[None].clone()}, pt)
        subprocess.run([sys.executable, os.path.join(ROOT, "engine/cli/moshid-voice-convert.py"), pt], check=True)
        out = load_file(os.path.join(d, "NATX0.safetensors"))
        assert out["embeddings"].dtype == dt and torch.equal(out["embeddings"], emb)
        assert torch.equal(out["cache"], ref["cache"].long())
    torch.save({"embeddings": "x"}, os.path.join(d, "bad.pt"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "engine/cli/moshid-voice-convert.py"),
                        os.path.join(d, "bad.pt")], capture_output=True, text=True)
    assert r.returncode == 1 and "not a PersonaPlex voice" in r.stderr, r.stderr
print("voice converter: round trip ok (float32, bfloat16), bad input refused")
