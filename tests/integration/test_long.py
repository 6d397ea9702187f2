"""Sessions longer than the model's context. As in the official Python
server, a session is not bounded by the LM's context (its K/V is a ring
that wraps): limits.max_steps = 0 (the default) means no limit, and the
metadata (kind 4) reports max_steps 0. limits.max_steps and the query's
max_steps remain caps.

A demo LM with a context of 40 steps (moshid-mkmodel --context 40: the
same weights as build/demo's, which do not depend on the context) runs a
greedy session of more than three times its context; the tokens the daemon
produced equal those of `moshi-run --greedy` on the input codes the daemon
recorded (as test_daemon.py::test_served_matches_offline does), so the ring
wraps the same way served and offline."""
import json
import subprocess

import pytest

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon
from test_daemon import frames_in, lag, run

CONTEXT = 40


def small_context_lm(build_dir, out, variant):
    """The demo LM (Kyutai-shaped with --dep-q 8, else PersonaPlex-shaped)
    with CONTEXT steps of context, made in out; the demo's tokenizer gives
    the text card (as daemon.mk makes build/demo)."""
    demo = build_dir / "demo"
    n = len((demo / "tokenizer.vocab").read_text(encoding="utf-8").splitlines())
    args = [str(build_dir / "moshid-mkmodel"), "--out", str(out), "--lm-only", "--text-card", str(n),
            "--context", str(CONTEXT)]
    if variant == "kyutai":
        args += ["--dep-q", "8"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "lm" / "config.json").read_text())["context"] == CONTEXT
    return out / "lm"


@pytest.mark.parametrize("variant", ["kyutai", "personaplex"])
def test_session_past_the_context_matches_offline(build_dir, tmp_path, variant):
    lm = small_context_lm(build_dir, tmp_path / "lm40", variant)
    rec = tmp_path / "rec"
    rec.mkdir()
    # The whole conversation is sent at once (no need to wait 10 s): the
    # input buffer takes it.
    p, port, log = start_daemon(build_dir, tmp_path, model__lm_dir=str(lm), debug__record_dir=str(rec),
                                limits__input_buffer_s=20, limits__idle_timeout_s=60)
    try:
        h = json.loads(get(port, "/healthz")[1])
        assert h["variant"] == variant
        pcm = mc.speech_pcm("A conversation longer than the model's context goes on, the ring wraps.",
                            seconds=(3 * CONTEXT + 8) * mc.FRAME / mc.SR)
        n = frames_in(pcm) - lag(port)
        assert n > 3 * CONTEXT
        res = run(mc.session(port, pcm=pcm, query="text_temperature=0&audio_temperature=0", realtime=False,
                             expect_audio=n, tail_s=60))
        assert res.errors == [], res.errors
        assert len(res.audio) == n
        meta = json.loads(res.meta)
        assert meta["max_steps"] == 0 and meta["model"]["context"] == CONTEXT
    finally:
        stop_daemon(p, log)
    codes = sorted(rec.glob("session-*.codes"))
    assert len(codes) == 1
    served = [json.loads(line) for line in codes[0].with_suffix(".jsonl").read_text().splitlines()]
    r = subprocess.run([str(build_dir / "moshi-run"), "--lm", str(lm), "--codes-in", str(codes[0]), "--greedy"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    offline = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(offline) == len(served) > 3 * CONTEXT
    for a, b in zip(served, offline):
        assert a["step"] == b["step"] and a["out"] == b["out"], (a, b)


@pytest.fixture(scope="module")
def capped(build_dir, tmp_path_factory):
    """The demo model with limits.max_steps = 8."""
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("cap"), limits__max_steps=8)
    yield port
    stop_daemon(p, log)


@pytest.mark.parametrize("query,steps", [("", 8), ("max_steps=100", 8), ("max_steps=5", 5)])
def test_max_steps_caps(capped, query, steps):
    """limits.max_steps caps every session; the query's max_steps may lower
    it, never raise it; the metadata reports the session's length; at the
    end: the error message saying so and a normal close (1000)."""
    pcm = mc.speech_pcm("Capped session.", seconds=2.0)
    res = run(mc.session(capped, pcm=pcm, query=query, realtime=False, tail_s=10))
    assert json.loads(res.meta)["max_steps"] == steps
    assert res.errors and res.errors[0].startswith(f"session reached its maximum length of {steps} frames"), \
        res.errors
    assert res.close_code == 1000
    assert len(res.audio) == steps - lag(capped)
