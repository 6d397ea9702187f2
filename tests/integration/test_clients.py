"""Clients nobody on this project wrote, unchanged, against the demo daemon
(pinned in tests/requirements.txt): the official `moshi.client`,
fujielab-moshi-client and LiveKit Agents' PersonaPlex plugin. moshid's own page is tested in
tests/browser, the official `moshi.client`'s protocol in test_wire.py.

fujielab-moshi-client 0.1.2 (PyPI): a threaded client on the `websockets`
library that takes the first server message for the handshake (so it
needs the official order: test_client_compat.py checks it on the wire),
sends its Opus headers after it, then one Ogg page per 80 ms frame. Its
pages carry a single lacing value min(len, 255), so a packet of 255 bytes
or more is mis-framed: the official server's reader (sphn 0.2.1) fails on
such a stream ("unexpected ogg capture pattern"), and moshid answers it with
an error message and a close 1008; neither crashes. With its encoder at a
bitrate whose 80 ms packets stay under 255 bytes, it streams: audio and
text come back."""
import asyncio
import importlib.util
import logging
import pathlib
import socket
import time

import numpy as np
import pytest

import moshi_client as mc
from test_daemon import start_daemon, stop_daemon

try:
    import fujielab.moshi.moshi_client_lib as fuj
except ImportError:
    fuj = None


@pytest.fixture(autouse=True)
def _needs_fujielab(request):
    if request.node.name.startswith("test_fujielab") and fuj is None:
        pytest.skip("fujielab-moshi-client not installed (tests/requirements.txt)")

HERE = pathlib.Path(__file__).resolve().parent
# Bounds for a loaded 2-core machine.
CONNECT_S = 30
AUDIO_S = 60
# the bound for audio after a daemon restart (the plugin's retries
# come 1, 2, 4, 8 s apart)
RESTART_S = 15
# 80 ms packets at 16 kb/s are about 160 bytes: under the 255 of the
# client's one lacing value
SAFE_BITRATE = 16000


@pytest.fixture
def daemon(build_dir, tmp_path):
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2)
    yield port, log
    stop_daemon(p, log)


def stream(port, pcm, bitrate=None, want_samples=0, deadline_s=AUDIO_S):
    """Connect fujielab's MoshiClient, feed pcm, collect audio and text."""
    logging.getLogger().setLevel(logging.WARNING)  # the client logs every chunk at INFO
    c = fuj.MoshiClient(output_buffer_size=1920)
    c.connect(f"ws://127.0.0.1:{port}/api/chat")
    try:
        if bitrate:
            c._encoder.encoder.bitrate = bitrate  # created by connect(); opuslib's setter
        for i in range(0, len(pcm), 1920):
            c.add_audio_input(pcm[i:i + 1920])
        got, end = 0, time.monotonic() + deadline_s
        while got < want_samples and time.monotonic() < end:
            a = c.get_audio_output(timeout=2)
            if a is not None:
                got += len(a)
        texts = []
        while (x := c.get_text_output(timeout=0)) is not None:
            texts.append(x)
        return got, texts
    finally:
        c.disconnect()


def test_fujielab_streams(daemon):
    port, log = daemon
    pcm = mc.speech_pcm("A client written by somebody else, talking to moshid.", seconds=3.0)
    want = 24000  # a second of the model's audio
    got, texts = stream(port, pcm, bitrate=SAFE_BITRATE, want_samples=want)
    assert got >= want, f"{got} samples of audio back\n" + open(log).read()[-2000:]
    assert texts, "no text piece back"
    text = open(log).read()
    assert "event=session_ready" in text and "session_error" not in text, text[-2000:]


def test_fujielab_mis_framed_pages_end_cleanly(daemon):
    """Its default bitrate gives packets over 255 bytes: the stream is
    refused with a reason (as sphn refuses it), the daemon stays up."""
    port, log = daemon
    pcm = mc.speech_pcm("Loud and long packets.", seconds=2.0)
    stream(port, pcm, want_samples=1, deadline_s=10)
    deadline = time.monotonic() + CONNECT_S
    while "event=session_error" not in open(log).read():
        assert time.monotonic() < deadline, open(log).read()[-2000:]
        time.sleep(0.05)
    assert 'msg="bad audio: ogg page' in open(log).read()
    res = asyncio.run(mc.session(port, tail_s=0.5))
    assert res.errors == [] and res.handshake is not None


# ---- LiveKit Agents' PersonaPlex plugin --------------------------------------

def _livekit():
    try:
        from livekit import rtc
        from livekit.plugins.nvidia.experimental.realtime import RealtimeModel
        return rtc, RealtimeModel
    except ImportError:
        pytest.skip("livekit-plugins-nvidia[personaplex] not installed (tests/requirements.txt)")


class Plugin:
    """The plugin's RealtimeModel and session as an agent would hold them
    (without a LiveKit server: audio frames pushed in, the generations'
    audio and text streams read, its error events kept)."""

    def __init__(self, port, **kw):
        import aiohttp
        self.rtc, RealtimeModel = _livekit()
        self.http = aiohttp.ClientSession()
        self.model = RealtimeModel(base_url=f"127.0.0.1:{port}", http_session=self.http, **kw)
        self.session = self.model.session()
        self.audio = 0           # samples received
        self.text = ""
        self.errors = []         # (recoverable, message)
        self.session.on("generation_created", self._generation)
        self.session.on("error", lambda e: self.errors.append((e.recoverable, str(e.error))))

    def _generation(self, ev):
        async def read():
            async for msg in ev.message_stream:
                async def audio():
                    async for fr in msg.audio_stream:
                        self.audio += fr.samples_per_channel

                async def text():
                    async for piece in msg.text_stream:
                        self.text += piece
                await asyncio.gather(audio(), text())
        asyncio.ensure_future(read())

    async def speak(self, pcm, until, timeout_s):
        """Push pcm (float, 24 kHz) in 20 ms frames at real time, looping,
        until until() or timeout_s; True when until() held."""
        data = (np.clip(pcm, -1, 1) * 32767).astype(np.int16)
        end, i = time.monotonic() + timeout_s, 0
        while time.monotonic() < end:
            if until():
                return True
            fr = data[i:i + 480]
            if len(fr) < 480:
                i = 0
                continue
            self.session.push_audio(self.rtc.AudioFrame(data=fr.tobytes(), sample_rate=24000, num_channels=1,
                                                        samples_per_channel=480))
            i += 480
            await asyncio.sleep(0.02)
        return until()

    async def close(self):
        await self.session.aclose()
        await self.model.aclose()
        await self.http.close()


def nvidia_voices(tmp_path):
    """A voice directory with NATF2.pt (the plugin's default voice) in the
    format NVIDIA publishes, for the demo model (dim 128, max_delay 1)."""
    from voice_pt import write_voice_pt
    d = tmp_path / "voices"
    d.mkdir(exist_ok=True)
    emb = (np.random.default_rng(5).standard_normal((20, 128)) * 0.1).astype(np.float32)
    cache = np.full((17, 4), 2048, dtype=np.int64)
    cache[0, :] = 3
    write_voice_pt(d / "NATF2.pt", emb, cache)
    return d


def test_livekit_plugin_default_options(build_dir, tmp_path):
    """Its defaults (voice NATF2.pt, a text prompt): audio and text back."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, personas__voices_dir=str(nvidia_voices(tmp_path)))
    pcm = mc.speech_pcm("An agent framework talking to moshid.", seconds=3.0)

    async def go():
        c = Plugin(port)
        try:
            ok = await c.speak(pcm, lambda: c.audio >= 24000 and c.text, AUDIO_S)
            return ok, c.audio, c.text, c.errors
        finally:
            await c.close()
    try:
        ok, audio, text, errors = asyncio.run(go())
        assert ok and errors == [], (audio, text, errors, open(log).read()[-2000:])
    finally:
        stop_daemon(p, log)


def test_livekit_plugin_across_a_restart(build_dir, tmp_path):
    """SIGTERM under a live session, the daemon started again on its port:
    the plugin reconnects by itself (1 s, then doubling) and audio flows
    again within 15 s of the new daemon being ready."""
    voices_dir = str(nvidia_voices(tmp_path))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        fixed = s.getsockname()[1]
    d1, d2 = tmp_path / "first", tmp_path / "second"
    d1.mkdir()
    d2.mkdir()
    p, port, log = start_daemon(build_dir, d1, sessions=2, server__port=fixed, personas__voices_dir=voices_dir)
    pcm = mc.speech_pcm("Still there after the restart?", seconds=3.0)
    state = {}

    async def go():
        c = Plugin(port)
        try:
            assert await c.speak(pcm, lambda: c.audio >= 24000, AUDIO_S), (c.audio, c.errors)
            stop_daemon(p, log)  # SIGTERM: its sessions are closed 1001
            q, port2, log2 = start_daemon(build_dir, d2, sessions=2, server__port=fixed,
                                          personas__voices_dir=voices_dir)
            state["second"] = (q, log2)
            ready, before = time.monotonic(), c.audio
            ok = await c.speak(pcm, lambda: c.audio >= before + 24000, RESTART_S)
            return ok, time.monotonic() - ready, c.errors
        finally:
            await c.close()
    try:
        ok, after_s, errors = asyncio.run(go())
        assert ok, f"no audio within {RESTART_S} s of the restart; errors {errors}"
        assert errors and all(rec for rec, _ in errors), errors  # the plugin saw the cut, and retried
        print(f"audio again {after_s:.1f} s after the restarted daemon was ready")
    finally:
        if p.poll() is None:
            stop_daemon(p, log)
        if "second" in state:
            stop_daemon(*state["second"])


def test_livekit_plugin_unknown_voice_reaches_its_caller(build_dir, tmp_path):
    """An unknown voice: 404 before the upgrade, which the plugin reports to
    its caller as a non-recoverable error and stops (after the upgrade it
    would only log the error message and reconnect every second)."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, personas__voices_dir=str(nvidia_voices(tmp_path)))

    async def go():
        c = Plugin(port, voice="VARM9")
        try:
            await c.speak(mc.speech_pcm("Hello?", seconds=1.0), lambda: bool(c.errors), CONNECT_S)
            return c.errors
        finally:
            await c.close()
    try:
        errors = asyncio.run(go())
        assert errors and errors[0][0] is False and "404" in errors[0][1], errors
        assert "msg=\"unknown voice_prompt 'VARM9.pt'" in open(log).read()
        assert open(log).read().count("event=ws_refused") == 1  # it did not retry
    finally:
        stop_daemon(p, log)


# ---- the official Kyutai client ---------------------------------------------

def test_official_moshi_client(build_dir, tmp_path):
    """`python -m moshi.client` (moshi 0.2.13) as it ships, headless
    (tests/integration/official_client.py): a few seconds of speech in,
    the model's voice out of its speaker and its text printed; the session
    ends when the server's limits.max_steps is reached (1000), which ends
    the client."""
    import subprocess
    import sys
    if importlib.util.find_spec("moshi") is None:
        pytest.skip("moshi not installed (tests/tests.mk installs it without dependencies)")
    steps = 50  # 4 s
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, limits__max_steps=steps)
    try:
        r = subprocess.run([sys.executable, str(HERE / "official_client.py"), str(port), "4"], capture_output=True,
                           text=True, timeout=AUDIO_S)
        out = r.stdout
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        heard = int(out.rsplit("speaker_blocks", 1)[1].split()[0])
        text = out.rsplit("speaker_blocks", 1)[0]
        assert heard >= 10, (heard, r.stderr[-2000:])  # most of 4 s of its voice (80 ms blocks)
        assert text.strip(), "no text printed"
        assert "Lost connection" not in r.stderr, r.stderr[-2000:]
        assert "close_status=1000" in open(log).read()
    finally:
        stop_daemon(p, log)
