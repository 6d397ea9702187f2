"""What clients nobody on this project wrote need from moshid's wire, tested
on the demo daemon:

- the official servers' order: the handshake (kind 0) is the first message
  of a session and the metadata (kind 4) follows it (fujielab-moshi-client
  takes the first message for the handshake);
- the metadata carries the flat fields moshi-backend sends, every one of
  them, with the types the Kyutai web client's schema requires
  (client/src/pages/Conversation/hooks/useServerInfo.ts: a zod object, so a
  missing field and the client shows no server info);
- a refused upgrade is answered with an HTTP/1.1 status line (clients built
  on the `websockets` library cannot read "HTTP/1.0" and report "did not
  receive a valid HTTP response" instead of the status);
- NVIDIA's voice files as published (.pt, torch.save's format, written here
  by tests/integration/voice_pt.py) work from personas.voices_dir without a
  conversion: the same voice as a .pt and as a .safetensors primes to the
  same greedy output; a .pt whose pickle would run a command if unpickled by
  Python is refused, and nothing runs."""
import asyncio
import json
import os

import numpy as np

import moshi_client as mc
from test_daemon import frames_in, opus_packets, start_daemon, stop_daemon
from test_personas import GREEDY, LAG, refused, voices, write_safetensors
from test_srv_defects import read_http, upgrade
from voice_pt import bf16_round, write_voice_pt

# useServerInfo.ts's schema: name -> JSON type
KYUTAI_FLAT = {"text_temperature": float, "text_topk": int, "audio_temperature": float, "audio_topk": int,
               "pad_mult": int, "repetition_penalty_context": int, "repetition_penalty": int,
               "lm_model_file": str, "instance_name": str}
KYUTAI_BUILD = ["build_timestamp", "build_date", "git_branch", "git_timestamp", "git_date", "git_hash",
                "git_describe", "rustc_host_triple", "rustc_version", "cargo_target_triple"]


def test_handshake_first_then_metadata(build_dir, tmp_path):
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2)
    try:
        res = asyncio.run(mc.session(port, query="text_topk=7", tail_s=0.5))
        assert res.errors == [] and res.handshake is not None
        assert res.kinds[:2] == [mc.K_HANDSHAKE, mc.K_META], res.kinds[:5]
        meta = json.loads(res.meta)
        for k, t in KYUTAI_FLAT.items():
            assert k in meta and isinstance(meta[k], (int, float) if t in (int, float) else t), (k, meta.get(k))
        assert all(isinstance(meta["build_info"][k], str) for k in KYUTAI_BUILD), meta["build_info"]
        assert meta["text_topk"] == 7 == meta["sampling"]["text_topk"]  # the session's own values
        assert meta["lm_model_file"] == "lm" and meta["build_info"]["git_describe"] == meta["build"]
        assert meta["server"] == "moshid"  # moshid's own fields stay
    finally:
        stop_daemon(p, log)


def test_refused_upgrade_is_http_1_1(build_dir, tmp_path):
    p, port, log = start_daemon(build_dir, tmp_path, sessions=1)
    try:
        s = upgrade(port, version="8")
        s.settimeout(20)
        buf = b""
        while b"\r\n" not in buf:
            d = s.recv(1)
            if not d:
                break
            buf += d
        assert buf.startswith(b"HTTP/1.1 426 "), buf
        s.close()
        s = upgrade(port, path="/nothing")
        st, hdrs, body = read_http(s)
        assert st == 404 and body.startswith(b"not found"), (st, body)
        s.close()
    finally:
        stop_daemon(p, log)


def test_nvidia_voice_files_as_published(build_dir, tmp_path):
    vd = voices(tmp_path)
    rng = np.random.default_rng(3)
    emb = rng.standard_normal((20, 128)).astype(np.float32) * 0.1
    cache = np.full((17, 4), 2048, dtype=np.int64)
    cache[0, :] = 3
    write_voice_pt(vd / "NATF2.pt", emb, cache)  # bf16, cache from "cuda:0", as NVIDIA's are
    # the same voice converted (moshid-voice-convert.py's output: the bf16 values)
    write_safetensors(vd / "CONV2.safetensors", {"embeddings": bf16_round(emb), "cache": cache.astype(np.int32)})
    marker = tmp_path / "pwned"
    write_voice_pt(vd / "EVIL.pt", emb, cache, evil=b"os\nsystem\n")
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, personas__voices_dir=str(vd))
    try:
        pcm = mc.speech_pcm("The published voice, read as it is.", seconds=2.0)
        n = frames_in(pcm) - LAG
        outs = []
        for name in ("NATF2.pt", "CONV2.pt"):
            r = asyncio.run(mc.session(port, pcm=pcm, query=f"voice_prompt={name}&text_prompt=Hello.&{GREEDY}",
                                       realtime=False, expect_audio=n, tail_s=5))
            assert r.errors == [] and r.handshake is not None and len(r.audio) == n, (name, r.errors)
            outs.append((opus_packets(b"".join(r.audio)), r.text))
        # greedy: the same primed state gives the same text and the same Opus
        # packets (the Ogg pages around them carry per-session serials)
        assert outs[0] == outs[1]
        r = refused(port, "voice_prompt=EVIL.pt")
        assert r.errors and "cannot be primed" in r.errors[0] and r.close_code == 1011, r.errors
        assert "names os.system" in open(log).read()
        assert not marker.exists() and not os.path.exists("/nonexistent")
    finally:
        stop_daemon(p, log)


def test_ogg_as_tolerant_as_sphn(build_dir, tmp_path):
    """A client that re-creates its encoder mid-session (a second stream with
    its own BOS page and headers, as LiveKit's PersonaPlex plugin does after
    a reconnect) and one that continues a stream whose start went to an
    earlier connection (no BOS, no headers): sphn decodes both, so moshid
    does (before, both closed with 1008). Each streamed frame is stepped."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2)
    try:
        a = mc.speech_pcm("The first stream of this client.", seconds=2.0)
        b = mc.speech_pcm("And the same client again, after it began anew.", seconds=2.0)
        msgs = [m for m in mc.sphn_messages(a) + mc.sphn_messages(b) if m]
        res = asyncio.run(mc.session(port, msgs=msgs, realtime=False, tail_s=5))
        assert res.errors == [] and res.handshake is not None, res.errors
        # every complete frame of both streams (each keeps its encoder's look-ahead)
        want = frames_in(a) + frames_in(b) - LAG - 2
        assert len(res.audio) >= want, (len(res.audio), want)
        joined = [m for m in mc.sphn_messages(a) if m][3:]  # headers and first pages went elsewhere
        assert not any(m[1:].find(b"OpusHead") >= 0 for m in joined)
        res = asyncio.run(mc.session(port, msgs=joined, realtime=False, tail_s=5))
        assert res.errors == [] and res.handshake is not None and len(res.audio) > 0, res.errors
        assert "session_error" not in open(log).read()
    finally:
        stop_daemon(p, log)
