"""moshid end to end over real sockets, on the demo model (CPU backend):
the protocol as the Kyutai clients speak it, concurrency, and every hostile
input getting its defined answer while other sessions keep streaming."""
import asyncio
import json
import os
import re
import signal
import struct
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon  # noqa: F401  (also imported from here)

FRAME = mc.FRAME


@pytest.fixture(scope="module")
def daemon(build_dir, tmp_path_factory):
    """The demo model (PersonaPlex-shaped: its step returns nothing on the
    first two calls, so a session of N input frames gets N - 2 back)."""
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("d"))
    yield port
    stop_daemon(p, log)


@pytest.fixture(scope="module")
def daemon_kyutai(build_dir, tmp_path_factory):
    """The Kyutai-shaped demo LM (Kyutai's LMGen: N input frames give N - 1)."""
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("k"),
                                model__lm_dir=str(build_dir / "demo" / "kyutai" / "lm"))
    yield port
    stop_daemon(p, log)


def lag(port):
    """Input frames before the first output frame: 1 with Kyutai's LMGen
    (step 0 returns nothing), 2 with PersonaPlex's (no model call on the
    first call, no output on the second)."""
    return {"kyutai": 1, "personaplex": 2}[json.loads(get(port, "/healthz")[1])["variant"]]


def frames_in(pcm):
    """Full frames the daemon can decode from pcm sent through sphn's Opus
    writer: the client sends len(pcm) // 1920 whole frames, and the encoder
    keeps its look-ahead (a few ms) until more audio comes, so the last of
    them never completes at the server."""
    return len(pcm) // FRAME - 1


def opus_packets(stream):
    """The page bodies of an Ogg stream (serial numbers and CRCs differ
    between sessions; the packets do not)."""
    out = []
    for page in mc.ogg_pages(stream):
        nseg = page[26]
        out.append(page[27 + nseg:])
    return out


def healthy(port):
    st, body = get(port, "/healthz")
    return st == 200 and json.loads(body)["ready"]


def run(coro):
    return asyncio.run(coro)


def test_health_and_metrics(daemon):
    st, body = get(daemon, "/healthz")
    h = json.loads(body)
    assert st == 200 and h["ready"] and h["capacity"] == 8 and h["backend"] == "cpu"
    assert h["variant"] in ("kyutai", "personaplex")
    # the backend's memory (weights, K/V, codec) and the pipeline (default on)
    assert h["pipeline"] is True and h["memory"]["where"] == "host"
    assert h["memory"]["used_bytes"] > 1 << 20 and h["memory"]["free_bytes_at_start"] > 0
    st, body = get(daemon, "/metrics")
    assert st == 200 and "moshid_sessions " in body and "moshid_step_latency_seconds_bucket" in body
    # which engine runs: the CPU backend, the checkpoint's weights as stored, float32 K/V (the defaults)
    assert re.search(r'^moshid_engine_info\{backend="cpu",weights="(f32|bf16|f16)",kv="f32"\} 1$', body, re.M), body
    assert get(daemon, "/nothing-here")[0] == 404


@pytest.mark.parametrize("variant", ["kyutai", "personaplex"])
def test_stream_10s_real_time(request, variant):
    """10 s of speech in real time: the concatenated kind-1 payloads are one
    Ogg Opus stream that opusdec decodes to (frames_in - 1) x 1920 samples
    with Kyutai's step (frames_in - 2 with PersonaPlex's), +- 1920 (the
    OpusHead pre-skip of 80 ms), and text pieces arrive."""
    port = request.getfixturevalue("daemon_kyutai" if variant == "kyutai" else "daemon")
    L = lag(port)
    pcm = mc.speech_pcm("Hello there. This is a test of the moshid server, streaming ten seconds of speech "
                        "in real time, frame after frame, to see that everything comes back.", seconds=10.0)
    fin = frames_in(pcm)
    res = run(mc.session(port, pcm=pcm, expect_audio=fin - L, tail_s=5))
    assert res.errors == []
    meta = json.loads(res.meta)
    assert meta["server"] == "moshid" and meta["sample_rate"] == 24000
    assert len(res.handshake) == 8 and struct.unpack("<II", res.handshake)[0] == 0
    assert len(res.audio) == fin - L
    stream = b"".join(res.audio)
    assert stream[:4] == b"OggS" and b"OpusHead" in stream[:100]
    n = mc.opusdec_samples(stream)
    assert abs(n - (fin - L) * FRAME) <= FRAME, (n, fin)
    assert len(res.text) > 0
    assert all(isinstance(t, str) and t for t in res.text)


def test_kyutai_web_client_trace(daemon):
    """What the Kyutai web client sends: no subprotocol, its query string,
    nothing before the handshake, 20 ms Opus frames two per page, one page
    per message (the first holding the header pages)."""
    pcm = mc.speech_pcm("The web client sends twenty millisecond frames.", seconds=3.0)
    pages = mc.opusenc_pages(pcm, framesize_ms=20, max_delay_ms=40)
    first = pages[0] + pages[1] + pages[2]
    pages = [first] + pages[3:]
    q = ("text_temperature=0.7&text_topk=25&audio_temperature=0.8&audio_topk=250&pad_mult=0"
         "&text_seed=123456&audio_seed=654321&repetition_penalty_context=64&repetition_penalty=1.0")
    res = run(mc.session(daemon, pages=pages, query=q, tail_s=3))
    assert res.errors == []
    assert res.handshake is not None
    assert len(res.audio) >= frames_in(pcm) - 3  # opusenc's own padding and delay


def test_python_client_trace_audio_before_handshake(daemon):
    """The Kyutai Python client streams at once, before the handshake: that
    audio is buffered, not lost."""
    pcm = mc.speech_pcm("Audio before the handshake.", seconds=2.0)
    n = frames_in(pcm) - lag(daemon)
    res = run(mc.session(daemon, pcm=pcm, before_handshake=True, realtime=False, expect_audio=n))
    assert res.errors == []
    assert len(res.audio) == n


def test_seeds_reproduce(daemon):
    """The same seeds and the same audio give the same output."""
    pcm = mc.speech_pcm("Same seed, same answer.", seconds=2.0)
    n = frames_in(pcm) - lag(daemon)
    q = "text_seed=42&audio_seed=43"
    a = run(mc.session(daemon, pcm=pcm, query=q, realtime=False, expect_audio=n))
    b = run(mc.session(daemon, pcm=pcm, query=q, realtime=False, expect_audio=n))
    assert len(a.audio) == n
    assert opus_packets(b"".join(a.audio)) == opus_packets(b"".join(b.audio)) and a.text == b.text


def test_eight_concurrent_sessions(daemon):
    pcm = mc.speech_pcm("Eight people talking at once.", seconds=3.0)
    n = frames_in(pcm) - lag(daemon)

    async def all8():
        return await asyncio.gather(*[mc.session(daemon, pcm=pcm, expect_audio=n) for _ in range(8)])

    for r in run(all8()):
        assert r.errors == [] and len(r.audio) == n


def test_max_steps_ends_session(daemon):
    """At max_steps the session gets an error message saying so, then a
    normal close (1000)."""
    pcm = mc.speech_pcm("Short session.", seconds=2.0)
    res = run(mc.session(daemon, pcm=pcm, query="max_steps=5", realtime=False, tail_s=5))
    assert json.loads(res.meta)["max_steps"] == 5  # the configuration sets no limit: the query's
    assert any("maximum length of 5 frames" in e for e in res.errors)
    assert res.close_code == 1000
    assert len(res.audio) == 5 - lag(daemon)  # the first steps return nothing


# ---- hostile inputs --------------------------------------------------------

def ogg_page(serial, seq, payload, flags=0, granule=0, bad_crc=False):
    hdr = b"OggS" + bytes([0, flags]) + struct.pack("<qII", granule, serial, seq) + b"\0\0\0\0"
    lace = []
    n = len(payload)
    while n >= 255:
        lace.append(255)
        n -= 255
    lace.append(n)
    page = bytearray(hdr + bytes([len(lace)]) + bytes(lace) + payload)
    crc = 0
    for b in page:
        crc ^= b << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    if bad_crc:
        crc ^= 1
    page[22:26] = struct.pack("<I", crc)
    return bytes(page)


def hostile_cases():
    good = mc.opusenc_pages(mc.speech_pcm("hostile", seconds=1.0))
    head = good[0]
    return {
        "random_bytes": [b"\x01" + os.urandom(500)],
        "not_ogg": [b"\x01" + b"RIFF....WAVEfmt " + bytes(64)],
        "truncated_page": [b"\x01" + head[:20], b"\x01" + good[1]],
        "bad_crc": [b"\x01" + ogg_page(7, 0, good[0][28:], flags=2, bad_crc=True)],
        "not_opus": [b"\x01" + ogg_page(7, 0, b"\x01vorbis" + bytes(23), flags=2)],
    }


def expect_error_close(port, msgs, want_code=1008):
    async def go():
        res = mc.Result()
        import aiohttp
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat") as ws:
                recv = asyncio.ensure_future(mc._receiver(ws, res))
                t0 = time.monotonic()
                while res.handshake is None and time.monotonic() - t0 < 10:
                    await asyncio.sleep(0.01)
                for m in msgs:
                    await ws.send_bytes(m)
                await asyncio.wait_for(recv, timeout=10)
                res.close_code = ws.close_code
        return res

    return run(go())


@pytest.fixture
def background(daemon):
    """A session streaming in real time in another process of the test,
    checked after each hostile case."""
    import threading
    out = {}
    pcm = mc.speech_pcm("I keep talking while others misbehave.", seconds=8.0)
    n = frames_in(pcm) - lag(daemon)

    def bg():
        out["res"] = asyncio.run(mc.session(daemon, pcm=pcm, expect_audio=n))

    t = threading.Thread(target=bg)
    t.start()
    yield
    t.join(timeout=30)
    r = out["res"]
    assert r.errors == [] and len(r.audio) == n, "the background session was disturbed"


@pytest.mark.parametrize("case", ["random_bytes", "not_ogg", "truncated_page", "bad_crc", "not_opus"])
def test_bad_audio_gets_error_and_close(daemon, background, case):
    res = expect_error_close(daemon, hostile_cases()[case])
    assert res.errors and res.errors[0].startswith("bad audio"), res.errors
    assert res.close_code == 1008
    assert healthy(daemon)


def test_oversize_message(daemon, background):
    res = expect_error_close(daemon, [b"\x01" + bytes(300000)])
    assert res.close_code == 1009
    assert healthy(daemon)


def test_ignored_messages_keep_session(daemon, background):
    """Empty messages, unknown kinds, control, ping and text from the client
    are ignored and counted; the session goes on."""
    before = get(daemon, "/metrics")[1]
    pcm = mc.speech_pcm("Still here.", seconds=1.5)
    n = frames_in(pcm) - lag(daemon)

    async def junk(ws):
        for m in [b"", b"\x09abc", b"\x03\x00", b"\x06", b"\x02hello", b"\xff"]:
            await ws.send_bytes(m)

    res = run(mc.session(daemon, pcm=pcm, expect_audio=n, extra=junk, tail_s=4))
    assert res.errors == [] and len(res.audio) == n
    after = get(daemon, "/metrics")[1]

    def count(body, kind):
        for line in body.splitlines():
            if line.startswith(f'moshid_ignored_messages_total{{kind="{kind}"}}'):
                return int(line.split()[-1])
        return 0

    for kind, k in (("empty", 1), ("unknown", 2), ("control", 1), ("ping", 1), ("text", 1)):
        assert count(after, kind) - count(before, kind) >= k, kind


@pytest.mark.parametrize("query", ["text_temperature=abc", "text_topk=0", "audio_temperature=-1",
                                   "repetition_penalty=1.3", "max_steps=-4", "text_seed=1.5",
                                   "text_topk=1&text_topk=2", "&".join(f"p{i}=1" for i in range(70))])
def test_bad_query(daemon, query):
    """To a page: the error message after the upgrade and 1008; to a program
    (no Origin): 400 and the same message before it."""
    res = run(mc.session(daemon, query=query, tail_s=5, headers=mc.BROWSER))
    assert res.errors and "bad query" in res.errors[0], res.errors
    assert res.close_code == 1008 and res.handshake is None
    from test_srv_defects import read_http, upgrade
    s = upgrade(daemon, path="/api/chat?" + query)
    st, _, body = read_http(s)
    s.close()
    assert st == 400 and body.startswith(b"bad query: "), (st, body)


def test_one_session_too_many(build_dir, tmp_path):
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2)
    try:
        async def three():
            import aiohttp
            async with aiohttp.ClientSession() as s:
                a = await s.ws_connect(f"http://127.0.0.1:{port}/api/chat")
                b = await s.ws_connect(f"http://127.0.0.1:{port}/api/chat")
                await asyncio.sleep(0.5)
                st, body = get(port, "/healthz")
                assert st == 503 and json.loads(body)["free"] == 0
                res = mc.Result()
                c = await s.ws_connect(f"http://127.0.0.1:{port}/api/chat")
                await asyncio.wait_for(mc._receiver(c, res), timeout=10)
                assert res.errors and "busy" in res.errors[0]
                assert c.close_code == 1013
                await a.close()
                await b.close()
        run(three())
        time.sleep(0.3)
        assert get(port, "/healthz")[0] == 200
    finally:
        stop_daemon(p, log)


def test_reconnect_at_once_gets_the_slot(build_dir, tmp_path):
    """With one slot, a client that closes while its frames are still being
    stepped and reconnects at once is not told "server busy": the new
    session waits for the slot being freed (sess.c, SESS_SLOT_WAIT_MS).
    Without that wait, 3 of 20 such reconnects were refused on a loaded
    2-core machine."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=1)
    try:
        pcm = mc.speech_pcm("Again and again.", seconds=1.0)
        for i in range(15):
            res = run(mc.session(port, pcm=pcm, realtime=False, tail_s=0.2))
            assert res.handshake is not None and res.errors == [], (i, res.errors)
            assert res.close_code != 1013, i
    finally:
        stop_daemon(p, log)


def test_client_that_never_reads(build_dir, tmp_path):
    """A client that streams but never reads (small receive buffer) is closed
    once its unsent audio passes limits.output_queue_s; the daemon keeps
    serving others."""
    p, port, log = start_daemon(build_dir, tmp_path, limits__output_queue_s=0.5)
    try:
        s = mc.raw_ws_connect(port, rcvbuf=2048)
        wr = mc.sphn.OpusStreamWriter(mc.SR)
        pcm = mc.speech_pcm("I never read anything you send me.", seconds=40.0)
        closed = False
        t0 = time.monotonic()
        for i in range(0, len(pcm) - FRAME, FRAME):
            b = wr.append_pcm(pcm[i:i + FRAME])
            try:
                if b:
                    s.sendall(mc.ws_frame(b"\x01" + b))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(max(0, t0 + (i // FRAME + 1) * 0.08 - time.monotonic()))
            if time.monotonic() - t0 > 30:
                break
        s.close()
        st, body = get(port, "/metrics")
        assert closed or 'moshid_errors_total{kind="slow_reader"} 1' in body
        assert 'moshid_errors_total{kind="slow_reader"} 1' in body
        assert healthy(port)
    finally:
        stop_daemon(p, log)


def test_shutdown_tells_sessions(build_dir, tmp_path):
    p, port, log = start_daemon(build_dir, tmp_path)

    async def go():
        import aiohttp
        res = mc.Result()
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat") as ws:
                recv = asyncio.ensure_future(mc._receiver(ws, res))
                while res.handshake is None:
                    await asyncio.sleep(0.01)
                p.send_signal(signal.SIGTERM)
                await asyncio.wait_for(recv, timeout=10)
                res.close_code = ws.close_code
        return res

    res = run(go())
    assert any("shutting down" in e for e in res.errors)
    assert res.close_code == 1001
    assert p.wait(timeout=15) == 0


@pytest.mark.parametrize("variant", ["kyutai", "personaplex"])
def test_served_matches_offline(build_dir, tmp_path, variant):
    """The daemon's greedy output tokens for a session equal what
    `moshi-run --greedy` computes from the same input codes (recorded by the
    daemon's debug option): the served path against the offline one."""
    demo = build_dir / "demo"
    lm = demo / "kyutai" / "lm" if variant == "kyutai" else demo / "lm"
    rec = tmp_path / "rec"
    rec.mkdir()
    p, port, log = start_daemon(build_dir, tmp_path, debug__record_dir=str(rec), model__lm_dir=str(lm))
    try:
        h = json.loads(get(port, "/healthz")[1])
        assert h["variant"] == variant
        pcm = mc.speech_pcm("Served and offline must agree.", seconds=3.0)
        n = frames_in(pcm) - lag(port)
        res = run(mc.session(port, pcm=pcm, query="text_temperature=0&audio_temperature=0", realtime=False,
                             expect_audio=n))
        assert res.errors == []
    finally:
        stop_daemon(p, log)
    codes = sorted(rec.glob("session-*.codes"))
    assert len(codes) == 1
    served = [json.loads(line) for line in codes[0].with_suffix(".jsonl").read_text().splitlines()]
    r = subprocess.run([str(build_dir / "moshi-run"), "--lm", str(lm), "--codes-in", str(codes[0]), "--greedy"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    offline = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(offline) == len(served) >= n
    for a, b in zip(served, offline):
        assert a["step"] == b["step"] and a["out"] == b["out"], (a, b)


def test_client_running_ahead(daemon):
    """A client that sends audio faster than real time by more than
    limits.input_buffer_s (4 s here) gets an error and a close."""
    pcm = mc.speech_pcm("I talk much faster than real time.", seconds=10.0)
    res = run(mc.session(daemon, pcm=pcm, realtime=False, tail_s=5))
    assert res.errors and "faster than real time" in res.errors[0], res.errors
    assert res.close_code == 1008
    assert healthy(daemon)


def test_idle_timeout(build_dir, tmp_path):
    """No message for limits.idle_timeout_s: an error naming the option and
    its configured value, then 1008."""
    p, port, log = start_daemon(build_dir, tmp_path, limits__idle_timeout_s=1)
    try:
        t0 = time.monotonic()
        res = run(mc.session(port, tail_s=10))
        assert res.errors and res.errors[0].startswith("no audio from the client for "), res.errors
        assert res.errors[0].endswith(" s (limits.idle_timeout_s = 1)"), res.errors
        assert res.close_code == 1008 and time.monotonic() - t0 < 8
    finally:
        stop_daemon(p, log)


def test_reload_on_sighup(build_dir, tmp_path):
    """SIGHUP re-reads the file: reloadable options apply to new sessions
    (the metadata shows them); options that need a restart are refused and
    the daemon keeps serving."""
    p, port, log = start_daemon(build_dir, tmp_path)
    try:
        meta = json.loads(run(mc.session(port, tail_s=0.5)).meta)
        assert meta["sampling"]["text_topk"] == 25
        cfg = p.cfg
        cfg["sampling"] = {"text_topk": 7, "audio_temperature": 0.5}
        cfg["sessions"]["max"] = 3  # needs a restart: refused
        with open(p.cfg_path, "w") as f:
            json.dump(cfg, f)
        p.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            meta = json.loads(run(mc.session(port, tail_s=0.2)).meta)
            if meta["sampling"]["text_topk"] == 7:
                break
            time.sleep(0.1)
        assert meta["sampling"]["text_topk"] == 7 and meta["sampling"]["audio_temperature"] == 0.5
        assert json.loads(get(port, "/healthz")[1])["capacity"] == 8
        logtext = open(log).read()
        assert "sessions.max" in logtext and "reload_refused" in logtext
    finally:
        stop_daemon(p, log)


def test_static_files_and_long_urls(build_dir, tmp_path):
    """Static files at / (index.html by default); request headers up to the
    16 KiB default (PersonaPlex clients put long prompts in the URL)."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<html>moshid test page</html>")
    p, port, log = start_daemon(build_dir, tmp_path, server__static_dir=str(www))
    try:
        st, body = get(port, "/")
        assert st == 200 and "moshid test page" in body
        assert get(port, "/missing.js")[0] == 404
        res = run(mc.session(port, query="note=" + "x" * 12000, tail_s=0.5))
        assert res.handshake is not None and res.errors == []
        assert healthy(port)
    finally:
        stop_daemon(p, log)


def test_tls(build_dir, tmp_path):
    """With a certificate and key the daemon serves https and wss only."""
    import ssl
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], capture_output=True)
    assert r.returncode == 0, r.stderr
    p, port, log = start_daemon(build_dir, tmp_path, server__tls_cert=str(cert), server__tls_key=str(key))
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as resp:
            assert resp.status == 200

        async def wss():
            import aiohttp
            res = mc.Result()
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(f"https://127.0.0.1:{port}/api/chat", ssl=ctx) as ws:
                    recv = asyncio.ensure_future(mc._receiver(ws, res))
                    t0 = time.monotonic()
                    while res.handshake is None and time.monotonic() - t0 < 10:
                        await asyncio.sleep(0.01)
                    recv.cancel()
            return res

        assert run(wss()).handshake is not None
    finally:
        stop_daemon(p, log)
