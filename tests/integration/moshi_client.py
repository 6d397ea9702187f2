"""A test client for moshid's /api/chat: Ogg Opus in (sphn or prepared pages),
collects what comes back. Used by the integration tests and the load
generator. Message kinds: docs/protocol.md."""
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import wave

import aiohttp
import numpy as np
import sphn

SR = 24000
FRAME = 1920
K_HANDSHAKE, K_AUDIO, K_TEXT, K_CONTROL, K_META, K_ERROR, K_PING = range(7)


def speech_pcm(text, seconds=None):
    """24 kHz mono float32 speech from espeak-ng (resampled with sox)."""
    d = tempfile.mkdtemp()
    try:
        raw, out = os.path.join(d, "a.wav"), os.path.join(d, "b.wav")
        subprocess.run(["espeak-ng", "-w", raw, text], check=True, capture_output=True)
        subprocess.run(["sox", raw, "-r", str(SR), "-c", "1", "-b", "16", out], check=True, capture_output=True)
        with wave.open(out) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    finally:
        shutil.rmtree(d)
    if seconds is not None:
        n = int(seconds * SR)
        pcm = np.resize(pcm, n) if len(pcm) < n else pcm[:n]
    return pcm


def ogg_pages(data):
    """Split an Ogg byte stream into its pages (trusting the test's own files)."""
    pages, i = [], 0
    while i + 27 <= len(data):
        assert data[i:i + 4] == b"OggS"
        nseg = data[i + 26]
        body = sum(data[i + 27:i + 27 + nseg])
        end = i + 27 + nseg + body
        pages.append(data[i:end])
        i = end
    return pages


def opusenc_pages(pcm, framesize_ms=20, max_delay_ms=40):
    """Encode with opusenc (Debian opus-tools) and return the Ogg pages."""
    d = tempfile.mkdtemp()
    try:
        w, o = os.path.join(d, "in.wav"), os.path.join(d, "out.opus")
        with wave.open(w, "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(SR)
            f.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
        subprocess.run(["opusenc", "--quiet", "--framesize", str(framesize_ms), "--max-delay", str(max_delay_ms),
                        w, o], check=True)
        return ogg_pages(open(o, "rb").read())
    finally:
        shutil.rmtree(d)


def opusdec_samples(ogg_bytes):
    """Decode an Ogg Opus stream with opusdec at 24 kHz; number of samples."""
    d = tempfile.mkdtemp()
    try:
        i, o = os.path.join(d, "in.opus"), os.path.join(d, "out.wav")
        open(i, "wb").write(ogg_bytes)
        r = subprocess.run(["opusdec", "--quiet", "--rate", str(SR), i, o], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with wave.open(o) as w:
            return w.getnframes()
    finally:
        shutil.rmtree(d)


class Result:
    def __init__(self):
        self.meta = None
        self.handshake = None
        self.audio = []        # kind-1 payloads
        self.text = []
        self.errors = []
        self.other = []
        self.close_code = None
        self.t_handshake = None
        self.kinds = []        # the kind byte of every message, in order


async def _receiver(ws, res, stop_after_audio=None):
    async for m in ws:
        if m.type != aiohttp.WSMsgType.BINARY:
            continue
        kind, payload = m.data[0], m.data[1:]
        res.kinds.append(kind)
        if kind == K_META:
            res.meta = payload.decode()
        elif kind == K_HANDSHAKE:
            res.handshake = payload
            res.t_handshake = time.monotonic()
        elif kind == K_AUDIO:
            res.audio.append(payload)
            if stop_after_audio is not None and len(res.audio) >= stop_after_audio:
                return
        elif kind == K_TEXT:
            res.text.append(payload.decode())
        elif kind == K_ERROR:
            res.errors.append(payload.decode())
        else:
            res.other.append(m.data)


def sphn_messages(pcm):
    """pcm as the kind-1 messages a sphn-based client sends, one per 80 ms
    frame (None where the encoder had no complete page yet)."""
    wr = sphn.OpusStreamWriter(SR)
    out = []
    for i in range(0, len(pcm) - FRAME + 1, FRAME):
        b = wr.append_pcm(pcm[i:i + FRAME])
        out.append(b"\x01" + b if b else None)
    return out


async def session(port, pcm=None, pages=None, msgs=None, query="", realtime=True, before_handshake=False,
                  expect_audio=None, tail_s=3.0, extra=None):
    """Run one session: stream pcm (through sphn), prepared Ogg pages (one
    per message, 40 ms apart) or prepared messages (sphn_messages, 80 ms
    apart). Returns a Result. extra(ws) runs after streaming."""
    res = Result()
    url = f"http://127.0.0.1:{port}/api/chat" + (f"?{query}" if query else "")
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url, max_msg_size=0) as ws:
            recv = asyncio.ensure_future(_receiver(ws, res, expect_audio))
            if not before_handshake:
                t0 = time.monotonic()
                while res.handshake is None and not recv.done() and time.monotonic() - t0 < 20:
                    await asyncio.sleep(0.01)
            period = FRAME / SR
            if pages is not None:
                msgs = [b"\x01" + p for p in pages]
                period = 0.04
            elif pcm is not None:
                msgs = sphn_messages(pcm)
            elif msgs is None:
                msgs = []
            t0 = time.monotonic()
            for i, msg in enumerate(msgs):
                if recv.done():
                    break
                if msg:
                    await ws.send_bytes(msg)
                if realtime:
                    delay = t0 + (i + 1) * period - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
            if extra is not None:
                await extra(ws)
            try:
                await asyncio.wait_for(asyncio.shield(recv), timeout=tail_s)
            except asyncio.TimeoutError:
                pass
            if not ws.closed:
                await ws.close()
            recv.cancel()
            res.close_code = ws.close_code
    return res


def raw_ws_connect(port, path="/api/chat", rcvbuf=None):
    """A WebSocket client on a plain socket (for clients that misbehave)."""
    import base64
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    return s


def ws_frame(payload, opcode=2):
    """A masked client frame."""
    m = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + m + bytes(b ^ m[i % 4] for i, b in enumerate(payload))
