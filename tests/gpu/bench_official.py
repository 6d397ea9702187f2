#!/usr/bin/env python3
"""bench_official.py - the anchor of the device check's LM benchmark: the
official `moshi` package's own LMGen.step at the same shape as lm-bench,
with random bf16 weights on the device (no checkpoint), CUDA graphs on as
moshi.server runs it (LMGen wraps LMModel.forward_text and its depformer
step in moshi.utils.compile.CUDAGraphed whenever the model is on a CUDA
device; NO_CUDA_GRAPH unset).

  bench_official.py --config FILE | --shape 7b|tiny  [--out FILE]
                    [--batches 1,8,32,64] [--positions 16,3000]
                    [--warmup N] [--steps N] [--device cuda|cpu]
                    [--wheels DIR] [--hide MOD,...] [--deadline-s S]

--config: the config.json lm-bench writes (`lm-bench --shape 7b
--write-config FILE`), so both sides run one shape; --shape: the same
shapes built in (kept equal to lm_bench.c's by tests/cli/device_check_dry.sh).

The model: LMModel(**config, device, dtype=bfloat16), its weights as its
own constructor initialises them (LMModel._init_weights: truncated normal
of std 1/sqrt(fan_in) for the embeddings, the text head and the temporal
layers; torch's default init for the depformer): finite, checked. Batch B
is LMGen's streaming batch size (LMGen.streaming(B); the server runs
streaming_forever(1)), one LMGen per batch size, freed before the next.

Position: the step's attention runs over the whole K/V ring (capacity =
context) at every position, the mask keeping the rows not yet written out,
so the step costs the same at any position. Position p is still set
exactly, not by stepping: every streaming state of the temporal
transformer holds its position as a device tensor (the transformer's
`offsets` for RoPE, each attention layer's `offset`, its RingKVCache's
`end_offset`) which is written in place (fill_), so the captured graphs
keep reading it; the K/V rows then hold zeros, not a conversation, which
changes no cost. LMGen's own token-ring offset is left alone (it only picks
ring slots).

Timing: per step, wall time from the call to LMGen.step to
torch.cuda.synchronize() after it (the tokens are then ready, as for
lm-bench's step, which returns them on the host); warm-up steps first (the
first call runs eagerly, the second captures the graphs); the median of
--steps timed steps. Each result row is appended to --out (flushed) the
moment it is measured and printed, as markdown:
  | official | step | B | position | ms | result |

Imports on a machine with torch and nothing else (no package registry):
--wheels DIR holds moshi's wheel and the pure-Python wheels it needs at run
time (tests/gpu/fetch_wheels.sh), unpacked into a temporary directory put
first on sys.path; any other module moshi imports but this benchmark never
calls (sphn, sounddevice, sentencepiece, huggingface_hub, safetensors,
numpy, aiohttp, tqdm, bitsandbytes) is replaced, with everything under it,
by a stub when it cannot be imported (as tests/fixtures/gen_wire.py stands
in for moshi.server's tail): a module whose every attribute is a function
that raises if it is ever called. --hide MOD,...
makes those modules unimportable first (the dry run proves the stubbing
on a machine that has them).

Exit: 0 measured, 77 skipped (torch or moshi not importable: the row says
so), 1 failure.
"""
import argparse
import atexit
import contextlib
import gc
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
import zipfile

# The modules moshi imports that this benchmark never uses (see above).
STUBBABLE = ("sphn", "sounddevice", "sentencepiece", "huggingface_hub", "safetensors", "safetensors.torch",
             "numpy", "aiohttp", "tqdm", "bitsandbytes")
# Bounds on the wheels unpacked (a hostile or broken file must not fill the disk).
WHEEL_MAX_FILES = 5000
WHEEL_MAX_BYTES = 200 << 20

# The shapes of lm_bench.c (lmb_shapes), as LMModel keyword arguments
# (Kyutai's dep_q; tests/cli/device_check_dry.sh checks they are lm-bench's).
COMMON = dict(hidden_scale=4.125, max_period=10000, gating="silu", norm="rms_norm_f32",
              positional_embedding="rope", causal=True, existing_text_padding_id=3,
              depformer_multi_linear=True, depformer_weights_per_step=True, depformer_pos_emb="none")
SHAPES = {
    "7b": dict(COMMON, n_q=16, dep_q=8, delays=[0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
               context=3000, dim=4096, num_heads=32, num_layers=32, card=2048, text_card=32000,
               depformer_dim=1024, depformer_num_heads=16, depformer_num_layers=6,
               depformer_dim_feedforward=4224),
    "tiny": dict(COMMON, n_q=4, dep_q=2, delays=[0, 0, 1, 0, 1],
                 context=32, dim=64, num_heads=4, num_layers=1, card=32, text_card=48,
                 depformer_dim=32, depformer_num_heads=2, depformer_num_layers=1,
                 depformer_dim_feedforward=132),
}
DEFAULTS = {"7b": dict(batches=[1, 8, 32, 64], positions=[16, 3000], warmup=4, steps=15),
            "tiny": dict(batches=[1, 2], positions=[4, 32], warmup=2, steps=2)}
# Config keys that are not LMModel arguments (loader keys; lm_config.c ignores them too).
LOADER_KEYS = {"moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name", "tts_config", "stt_config",
               "model_id", "model_type", "lm_gen_config", "lora_name", "lora_rank", "lora_scaling"}
CONFIG_MAX_BYTES = 1 << 20

OUT = None


def emit(line):
    print(line, flush=True)
    if OUT is not None:
        OUT.write(line + "\n")
        OUT.flush()


def row(measure, batch, pos, ms, result):
    ms_s = "-" if ms is None else "%.3f" % ms
    result = str(result).replace("|", "/").replace("\n", " ")
    emit("| official | %s | %s | %s | %s | %s |" % (measure, batch, pos, ms_s, result))


def int_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("not a list of integers: %r" % s)
    if not v or len(v) > 16 or any(x < 1 or x > 1 << 20 for x in v):
        raise argparse.ArgumentTypeError("out of range: %r" % s)
    return v


class Hider(importlib.abc.MetaPathFinder):
    """Makes the named top-level modules unimportable (--hide) except from
    the unpacked wheels (roots): the environment a machine with torch alone
    gives, on one that has them all."""

    def __init__(self, names):
        self.names = set(names)
        self.roots = []
        # what torch imported already (numpy) is forgotten too, so that
        # moshi's own import of it takes the path a machine without it takes
        # (torch keeps its references)
        for k in [k for k in sys.modules if k.split(".")[0] in self.names]:
            del sys.modules[k]

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.names:
            return None
        spec = None
        if self.roots:
            spec = importlib.machinery.PathFinder.find_spec(name, path if path is not None else self.roots)
        if spec is not None and spec.origin and any(spec.origin.startswith(r + os.sep) for r in self.roots):
            return spec
        raise ImportError("hidden by --hide: %s" % name)


HIDER = None


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of the stubbed modules and anything under them (moshi does
    `from huggingface_hub.utils import ...`) give stubs: modules whose
    every attribute is a function that raises when called. Importing works,
    using fails loudly; this benchmark uses none of them."""

    def __init__(self):
        self.names = set()

    def _match(self, name):
        return any(name == n or name.startswith(n + ".") for n in self.names)

    def find_spec(self, name, path=None, target=None):
        if not self._match(name):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__file__ = "<stub of bench_official.py>"
        mod.__path__ = []

        def _missing(attr, _name=spec.name):
            if attr.startswith("__"):
                raise AttributeError(attr)

            def _unusable(*args, **kwargs):
                raise RuntimeError("%s.%s is a stub (bench_official.py): not installed here" % (_name, attr))
            return _unusable
        mod.__getattr__ = _missing
        return mod

    def exec_module(self, module):
        pass


def unpack_wheels(wheel_dir):
    """Unpack every *.whl of wheel_dir into a temporary directory (checked:
    no absolute or parent paths, bounded count and size); returns it and
    the wheel names."""
    dest = tempfile.mkdtemp(prefix="bench-official-wheels.")
    atexit.register(shutil.rmtree, dest, True)
    names, files, total = [], 0, 0
    for w in sorted(os.listdir(wheel_dir)):
        if not w.endswith(".whl"):
            continue
        with zipfile.ZipFile(os.path.join(wheel_dir, w)) as z:
            for info in z.infolist():
                parts = info.filename.replace("\\", "/").split("/")
                if info.filename.startswith("/") or ".." in parts or ":" in parts[0]:
                    raise ValueError("%s: unsafe member %r" % (w, info.filename))
                files += 1
                total += info.file_size
                if files > WHEEL_MAX_FILES or total > WHEEL_MAX_BYTES:
                    raise ValueError("%s: more than %d files or %d bytes in the wheels" %
                                     (w, WHEEL_MAX_FILES, WHEEL_MAX_BYTES))
            z.extractall(dest)
        names.append(w)
    return dest, names


def import_moshi(args):
    """moshi's LMModel and LMGen, from the environment or the wheels, with
    stubs for what cannot be imported; (LMModel, LMGen, version, note)."""
    notes = []
    if args.wheels and os.path.isdir(args.wheels):
        dest, names = unpack_wheels(args.wheels)
        if names:
            sys.path.insert(0, dest)
            if HIDER is not None:
                HIDER.roots.append(dest)
            notes.append("wheels: " + " ".join(names))
    stubbed = []
    finder = StubFinder()
    sys.meta_path.insert(0, finder)
    for name in STUBBABLE:
        if name in sys.modules or finder._match(name):
            continue
        try:
            importlib.import_module(name)
        except Exception:   # ImportError, or a broken install
            for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[k]   # a half-imported package
            finder.names.add(name)
            stubbed.append(name)
    if stubbed:
        notes.append("stubbed: " + " ".join(stubbed))
    import moshi
    from moshi.models.lm import LMModel, LMGen
    notes.insert(0, "moshi %s from %s" % (moshi.__version__, os.path.dirname(moshi.__file__)))
    return LMModel, LMGen, moshi.__version__, "; ".join(notes)


def load_config(args):
    if args.config:
        with open(args.config, "rb") as f:
            raw = f.read(CONFIG_MAX_BYTES + 1)
        if len(raw) > CONFIG_MAX_BYTES:
            raise ValueError("%s: over %d bytes" % (args.config, CONFIG_MAX_BYTES))
        cfg = json.loads(raw)
        if not isinstance(cfg, dict):
            raise ValueError("%s: not a JSON object" % args.config)
        return {k: v for k, v in cfg.items() if k not in LOADER_KEYS}
    return dict(SHAPES[args.shape])


def set_position(lm, pos):
    """Every position counter of the temporal transformer's streaming
    state to pos, in place (see the module's comment)."""
    n = 0
    for m in lm.transformer.modules():
        st = getattr(m, "_streaming_state", None)
        if st is None:
            continue
        for attr in ("offset", "offsets"):
            t = getattr(st, attr, None)
            if t is not None and hasattr(t, "fill_"):
                t.fill_(pos)
                n += 1
        if hasattr(st, "offset_cpu"):
            st.offset_cpu = pos
        kv = getattr(st, "kv_cache", None)
        if kv is not None:
            kv.end_offset.fill_(pos)
            n += 1
    if n == 0:
        raise RuntimeError("no position counter found in the transformer's streaming state")


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", help="config.json (lm-bench --write-config)")
    g.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--out")
    ap.add_argument("--batches", type=int_list)
    ap.add_argument("--positions", type=int_list)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--wheels", help="folder of wheels to put on sys.path (tests/gpu/fetch_wheels.sh)")
    ap.add_argument("--hide", default="", help="modules to make unimportable first (tests)")
    ap.add_argument("--deadline-s", type=float, default=0.0)
    ap.add_argument("--compile", choices=("on", "off"), default="on",
                    help="moshi's torch.compile of its gating, RoPE and norm (on: as the server runs)")
    ap.add_argument("--print-config", action="store_true", help="print the shape's config as JSON and exit")
    args = ap.parse_args()
    t_start = time.monotonic()
    if args.print_config:
        print(json.dumps(load_config(args), sort_keys=True))
        return 0
    if args.out:
        OUT = open(args.out, "a")
    if args.compile == "off":
        os.environ["NO_TORCH_COMPILE"] = "1"   # read when moshi is imported
    try:
        import torch
    except Exception as e:   # ImportError, or a torch that cannot load its libraries
        row("bench", "-", "-", None, "skipped: torch not importable (%s)" % str(e).splitlines()[0])
        return 77
    if args.hide:
        # after torch, which needs what it finds (numpy) for itself
        global HIDER
        HIDER = Hider([h for h in args.hide.split(",") if h])
        sys.meta_path.insert(0, HIDER)
    try:
        LMModel, LMGen, version, note = import_moshi(args)
    except Exception as e:
        row("bench", "-", "-", None, "skipped: moshi not importable (%s: %s)" % (type(e).__name__, e))
        return 77
    cfg = load_config(args)
    shape = args.shape or ("7b" if cfg.get("dim") == 4096 else "tiny")
    d = DEFAULTS[shape]
    batches = args.batches or d["batches"]
    context = int(cfg["context"])
    positions = args.positions or [p for p in d["positions"] if p <= context]
    warmup = d["warmup"] if args.warmup is None else args.warmup
    steps = d["steps"] if args.steps is None else args.steps
    if warmup < 2:
        warmup = 2   # call 1 eager, call 2 captures the graphs: neither is timed
    if not 1 <= steps <= 1000 or any(p > context for p in positions):
        print("bench_official.py: --steps 1..1000, positions <= context %d" % context, file=sys.stderr)
        return 2

    dev = torch.device(args.device)
    if dev.type == "cpu":
        # the CPU run only proves the code path (the dry run): one thread,
        # so that a loaded CI machine is not oversubscribed
        torch.set_num_threads(1)
    if dev.type == "cuda" and not torch.cuda.is_available():
        row("bench", "-", "-", None, "skipped: torch %s sees no CUDA device" % torch.__version__)
        return 77
    graphs = dev.type == "cuda" and not os.environ.get("NO_CUDA_GRAPH")
    compiled = not os.environ.get("NO_TORCH_COMPILE")
    emit("bench_official: %s; torch %s; device %s%s; CUDA graphs %s; torch.compile %s" %
         (note, torch.__version__, dev, " (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
          "on" if graphs else "off (not a CUDA device)" if dev.type != "cuda" else "off (NO_CUDA_GRAPH)",
          "on" if compiled else "off"))
    torch.manual_seed(20261201)
    t0 = time.monotonic()
    with torch.no_grad():
        lm = LMModel(device=dev, dtype=torch.bfloat16, **cfg)
        lm.eval()
        nparams = sum(p.numel() for p in lm.parameters())
        finite = all(bool(torch.isfinite(p).all()) for p in lm.parameters())
    if dev.type == "cuda":
        torch.cuda.synchronize()
    row("setup", "-", "-", (time.monotonic() - t0) * 1e3,
        "LMModel %s, %d parameters, bf16, random (its own init)%s" %
        (shape, nparams, "" if finite else "; NON-FINITE WEIGHTS"))
    if not finite:
        return 1

    n_user = lm.n_q - lm.dep_q
    rc = 0
    from moshi.utils.compile import no_compile
    queue = list(batches)
    while queue:
        B = queue.pop(0)
        if args.deadline_s > 0 and time.monotonic() - t_start > args.deadline_s:
            row("step", B, "-", None, "cut short by --deadline-s")
            continue
        gen = None
        nocomp = no_compile() if not compiled else contextlib.nullcontext()
        try:
            nocomp.__enter__()
            gen = LMGen(lm, temp=0.8, temp_text=0.7, top_k=250, top_k_text=25)   # the server's defaults
            # streaming(B) as a context (the server's streaming_forever(1) never
            # ends): leaving it frees the K/V before the next batch size
            with gen.streaming(B):
                codes = torch.randint(0, lm.card, (B, n_user, 1), device=dev)
                ms_warm = []
                for _ in range(warmup):
                    s = time.monotonic()
                    gen.step(codes)
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    ms_warm.append((time.monotonic() - s) * 1e3)
                for pos in positions:
                    if args.deadline_s > 0 and time.monotonic() - t_start > args.deadline_s:
                        row("step", B, pos, None, "cut short by --deadline-s")
                        continue
                    with torch.no_grad():
                        set_position(lm, pos)
                    ms = []
                    out = None
                    for i in range(steps + 1):   # one more warm-up step at the new position
                        s = time.monotonic()
                        out = gen.step(codes)
                        if dev.type == "cuda":
                            torch.cuda.synchronize()
                        if i:
                            ms.append((time.monotonic() - s) * 1e3)
                    if out is None or out.shape[0] != B or int(out[:, 1:].max()) > lm.card:
                        row("step", B, pos, None, "FAILED: unexpected output %r" % (None if out is None else out.shape,))
                        rc = 1
                        continue
                    med = statistics.median(ms)
                    row("step", B, pos, med, "moshi %s LMGen.step, CUDA graphs %s, torch.compile %s; %.3f ms per slot; "
                        "min %.3f; warm-up (eager, capture) %s ms" %
                        (version, "on" if graphs else "off", "on" if compiled else "off", med / B, min(ms),
                         "/".join("%.0f" % w for w in ms_warm[:2])))
        except torch.cuda.OutOfMemoryError as e:
            row("step", B, "-", None, "not run: out of memory (%s)" % str(e).splitlines()[0][:200])
        except Exception as e:
            msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
            if compiled:
                # torch.compile needs a working inductor (triton, a C
                # compiler): without one, say so and measure uncompiled
                row("step", B, "-", None, "failed with torch.compile on (%s): torch.compile off from here, "
                    "this batch again" % msg)
                compiled = False
                queue.insert(0, B)
            else:
                row("step", B, "-", None, "FAILED: " + msg)
                rc = 1
        finally:
            nocomp.__exit__(None, None, None)
            del gen
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    emit("(bench_official: %.1f s)" % (time.monotonic() - t_start))
    return rc


if __name__ == "__main__":
    sys.exit(main())
