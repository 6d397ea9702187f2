"""PersonaPlex voice files (.pt) in the format NVIDIA's code writes them,
without torch: what `torch.save({"embeddings": ..., "cache": ...}, NAME.pt)`
produces for a voice saved by PersonaPlex's LMGen (NVIDIA/personaplex,
moshi/models/lm.py): a zip archive, stored, holding NAME/data.pkl (a
protocol 2 pickle calling torch._utils._rebuild_tensor_v2 on persistent
storage ids), NAME/byteorder, NAME/data/0 and NAME/data/1 (the storages),
NAME/version and torch's bookkeeping entries. The opcodes follow torch
2.9's output for that dict exactly (pickletools.dis of a real file; the
generator tests/fixtures/gen_voice_pt.py writes real ones with torch, and
tests/check_pt.c reads those). Checked once against torch.load (2.9.1):
it loads these files to the same tensors.

Also a hostile variant: the same archive whose pickle would run a command
if it were unpickled by Python (GLOBAL os.system + REDUCE)."""
import io
import struct
import zipfile

import numpy as np


def _bu(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(x):
    if 0 <= x < 256:
        return b"K" + bytes([x])
    if 0 <= x < 65536:
        return b"M" + struct.pack("<H", x)
    return b"J" + struct.pack("<i", x)


def _tuple(items):
    if len(items) == 1:
        return b"".join(items) + b"\x85"
    if len(items) == 2:
        return b"".join(items) + b"\x86"
    if len(items) == 3:
        return b"".join(items) + b"\x87"
    return b"(" + b"".join(items) + b"t"


class _Pickler:
    def __init__(self):
        self.memo = 0

    def put(self):
        b = b"q" + bytes([self.memo]) if self.memo < 256 else b"r" + struct.pack("<I", self.memo)
        self.memo += 1
        return b


def _strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return list(reversed(out))


def voice_pickle(tensors, location, evil=None):
    """tensors: [(key, storage_type, storage_key, numel, shape)]"""
    p = _Pickler()
    out = b"\x80\x02}" + p.put() + b"("
    for key, stype, skey, numel, shape in tensors:
        out += _bu(key) + p.put()
        if evil:
            out += b"c" + evil + p.put() + b"(" + _bu("touch /nonexistent") + b"tR" + p.put()
            continue
        out += b"ctorch._utils\n_rebuild_tensor_v2\n" + p.put()
        out += b"((" + _bu("storage") + p.put() + b"ctorch\n" + stype.encode() + b"\n" + p.put()
        out += _bu(skey) + p.put() + _bu(location) + p.put() + _int(numel) + b"t" + p.put() + b"Q"
        out += _int(0) + _tuple([_int(n) for n in shape]) + p.put()
        out += _tuple([_int(s) for s in _strides(shape)]) + p.put()
        out += b"\x89ccollections\nOrderedDict\n" + p.put() + b")R" + p.put() + b"t" + p.put() + b"R" + p.put()
    return out + b"u."


def bf16_bytes(x):
    """float32 -> bfloat16 bytes, rounded to nearest even (torch's rounding)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def bf16_round(x):
    """The float32 values a bf16 tensor of x holds."""
    b = np.frombuffer(bf16_bytes(x), dtype=np.uint16).astype(np.uint32) << 16
    return b.view(np.float32).reshape(np.shape(x))


def write_voice_pt(path, embeddings, cache, dtype="bf16", location="cuda:0", evil=None):
    """embeddings (T, dim) float32 -> (T, 1, 1, dim) bf16 or f32; cache
    (17, R) integers -> (1, 17, R) int64, as PersonaPlex saves them (the
    cache from the GPU: location cuda:0)."""
    T, dim = embeddings.shape
    R = cache.shape[1]
    if dtype == "bf16":
        emb_bytes, stype = bf16_bytes(embeddings), "BFloat16Storage"
    else:
        emb_bytes, stype = np.ascontiguousarray(embeddings, dtype=np.float32).tobytes(), "FloatStorage"
    cache_bytes = np.ascontiguousarray(cache, dtype=np.int64).tobytes()
    pk = voice_pickle([("embeddings", stype, "0", T * dim, (T, 1, 1, dim)),
                       ("cache", "LongStorage", "1", 17 * R, (1, 17, R))], location, evil)
    name = path.stem if hasattr(path, "stem") else str(path).rsplit("/", 1)[-1].rsplit(".", 1)[0]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for entry, data in ((f"{name}/data.pkl", pk), (f"{name}/.format_version", b"1"),
                            (f"{name}/.storage_alignment", b"64"), (f"{name}/byteorder", b"little"),
                            (f"{name}/data/0", emb_bytes), (f"{name}/data/1", cache_bytes),
                            (f"{name}/version", b"3\n"), (f"{name}/.data/serialization_id", b"0" * 40)):
            z.writestr(zipfile.ZipInfo(entry, date_time=(1980, 1, 1, 0, 0, 0)), data)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
