#!/usr/bin/env python3
"""moshid-voice-convert - PersonaPlex voice files (.pt) to safetensors.

PersonaPlex saves a voice prompt (LMGen's save of the voice phase) as a
PyTorch pickle holding a dict:
  "embeddings"  the summed input embeddings of each model call of the voice
                phase, stacked: (T, B, 1, dim) with B = 1 (one row per call)
  "cache"       the token ring after the phase: (B, 17, max_delay + 3)
moshid reads neither pickles nor batches. This writes the same two tensors
as safetensors, "embeddings" (T, dim) and "cache" (17, max_delay + 3), the
dtypes kept (embeddings are usually bfloat16, the cache int64), which
moshid's persona loader (engine/persona/prime_io.h, "voice saved") checks
against the model.

Needs torch and safetensors (not needed by moshid itself):
  python3 -m venv /tmp/v && /tmp/v/bin/pip install torch safetensors
Usage:
  moshid-voice-convert.py NATF0.pt [more.pt ...] [--out-dir DIR]
writes NATF0.safetensors beside each input (or into DIR). A voice named
NATF0.pt by a client (`voice_prompt=NATF0.pt`) is then served from the
converted NATF0.safetensors in the configured voice directory.

The pickle is loaded with weights_only=True: a .pt holding anything but
tensors and plain containers is refused rather than executed.
"""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file

MAX_ROWS = 1 << 16  # far above any voice prompt (12.5 rows per second)


def squeeze_leading(t, keep, name):
    """Drop leading axes of size 1 until `keep` axes remain."""
    while t.dim() > keep and t.shape[0] == 1:
        t = t[0]
    if t.dim() != keep:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {keep} axes after dropping the batch")
    return t


def convert(src, dst):
    state = torch.load(src, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "embeddings" not in state or "cache" not in state:
        raise ValueError("not a PersonaPlex voice: a dict with 'embeddings' and 'cache' expected")
    emb, cache = state["embeddings"], state["cache"]
    if not torch.is_tensor(emb) or not torch.is_tensor(cache):
        raise ValueError("'embeddings' and 'cache' must be tensors")
    # (T, 1, 1, dim) -> (T, dim): keep T even when it is 1
    if emb.dim() < 2:
        raise ValueError(f"embeddings: shape {tuple(emb.shape)}")
    emb = emb.reshape(emb.shape[0], -1, emb.shape[-1])
    if emb.shape[1] != 1:
        raise ValueError(f"embeddings: batch of {emb.shape[1]}, expected 1")
    emb = emb[:, 0, :]
    cache = squeeze_leading(cache, 2, "cache")
    if not (0 < emb.shape[0] <= MAX_ROWS):
        raise ValueError(f"embeddings: {emb.shape[0]} rows")
    if cache.shape[0] != 17:
        raise ValueError(f"cache: {cache.shape[0]} streams, expected 17")
    if not torch.isfinite(emb.float()).all():
        raise ValueError("embeddings: not finite")
    if cache.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cache: dtype {cache.dtype}, expected an integer type")
    if emb.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        emb = emb.float()
    save_file({"embeddings": emb.contiguous(), "cache": cache.contiguous()}, dst,
              metadata={"source": os.path.basename(src), "format": "moshid-voice-1"})
    return emb.shape, cache.shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="PersonaPlex voice files (.pt)")
    ap.add_argument("--out-dir", help="write the .safetensors files here (default: beside each input)")
    a = ap.parse_args()
    rc = 0
    for src in a.inputs:
        stem = os.path.splitext(os.path.basename(src))[0]
        dst = os.path.join(a.out_dir or os.path.dirname(os.path.abspath(src)), stem + ".safetensors")
        try:
            es, cs = convert(src, dst)
            print(f"{src} -> {dst}: embeddings {tuple(es)}, cache {tuple(cs)}")
        except Exception as e:  # report every file, go on with the next
            print(f"{src}: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
