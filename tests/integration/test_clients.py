"""Clients nobody on this project wrote, unchanged, against the demo daemon
(pinned in tests/requirements.txt). moshid's own page is tested in
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
import logging
import time

import numpy as np
import pytest

import moshi_client as mc
from test_daemon import start_daemon, stop_daemon

fuj = pytest.importorskip("fujielab.moshi.moshi_client_lib", reason="fujielab-moshi-client not installed "
                          "(tests/requirements.txt)")

# Bounds for a loaded 2-core machine.
CONNECT_S = 30
AUDIO_S = 60
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
