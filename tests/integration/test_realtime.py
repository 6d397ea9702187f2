"""/v1/realtime (docs/realtime.md): the official `openai` package's
realtime client (pinned in tests/requirements.txt) drives sessions on the
demo model, in pcm16 and in G.711, GA and beta; raw WebSocket clients
send what a hostile or broken client sends. Every wait is for an event
(with a deadline that fails the test), never a sleep: input is paced by
the model's output (one 80 ms frame in per audio delta out, after a
first second's burst, which limits.input_buffer_s admits)."""
import asyncio
import base64
import json
import math
import os
import socket
import struct

import pytest
import websockets
from openai import AsyncOpenAI

from helpers import get, metric, start_daemon, stop_daemon

FRAME = 1920                 # 24 kHz samples per 80 ms
BURST = 12                   # frames sent before waiting for output (~1 s)
WAIT_S = 60                  # deadline of any one wait (a loaded CI machine)
G711_FRAME = 640             # 8 kHz bytes per 80 ms


@pytest.fixture(scope="module")
def rtd(build_dir, tmp_path_factory):
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("rt"), sessions=4,
                                realtime__max_append_bytes=65536, realtime__max_events_per_s=100)
    yield port, log
    stop_daemon(p, log)


def tone(n, start=0, rate=24000, hz=220.0, amp=0.3):
    """n float samples of a tone with a slow tremolo (speech-like level)."""
    return [amp * (0.6 + 0.4 * math.sin(2 * math.pi * 3 * (start + i) / rate)) *
            math.sin(2 * math.pi * hz * (start + i) / rate) for i in range(n)]


def pcm16(samples):
    return struct.pack(f"<{len(samples)}h", *[max(-32768, min(32767, int(v * 32767))) for v in samples])


def ulaw(v):
    """G.711 mu-law of one sample (the textbook formula, independent of
    the daemon's tables)."""
    x = max(-32635, min(32635, int(v * 32767)))
    sign = 0x80 if x < 0 else 0
    x = abs(x) + 0x84
    seg = max(0, min(7, x.bit_length() - 8))
    return ~(sign | (seg << 4) | ((x >> (seg + 3)) & 0x0F)) & 0xFF


def alaw(v):
    x = max(-32768, min(32767, int(v * 32767))) >> 3
    sign = 0x80 if x >= 0 else 0
    x = x if x >= 0 else -x - 1
    x = min(x, 0xFFF)
    seg = max(0, (x >> 5).bit_length())
    mant = (x >> seg) & 0x0F if seg else (x >> 1) & 0x0F
    return (sign | (seg << 4) | mant) ^ 0x55


def frames(fmt, n):
    """n frames of 80 ms of client audio in fmt, base64."""
    out = []
    for k in range(n):
        if fmt == "pcm16":
            b = pcm16(tone(FRAME, k * FRAME))
        else:
            enc = ulaw if fmt == "g711_ulaw" else alaw
            b = bytes(enc(v) for v in tone(G711_FRAME, k * G711_FRAME, rate=8000))
        out.append(base64.b64encode(b).decode())
    return out


GA_FORMAT = {"pcm16": {"type": "audio/pcm", "rate": 24000}, "g711_ulaw": {"type": "audio/pcmu"},
             "g711_alaw": {"type": "audio/pcma"}}


async def recv_until(recv, pred, got, deadline_s=WAIT_S):
    """Read events (recv: a coroutine function returning a dict) into got
    until pred(event) is true; returns that event. An error event fails."""
    async def loop():
        while True:
            ev = await recv()
            got.append(ev)
            assert ev["type"] != "error", ev
            if pred(ev):
                return ev
    return await asyncio.wait_for(loop(), deadline_s)


async def stream(send_audio, recv, fmt, n_frames, want_deltas, audio_type):
    """Append n_frames of audio, paced by the model: a burst, then one frame
    per audio delta; returns every event read once want_deltas audio
    deltas came."""
    pending = frames(fmt, n_frames)
    got, deltas = [], 0
    for b in pending[:BURST]:
        await send_audio(b)
    sent = BURST
    while deltas < want_deltas:
        await recv_until(recv, lambda e: e["type"] == audio_type, got)
        deltas += 1
        if sent < n_frames:
            await send_audio(pending[sent])
            sent += 1
    return got


def check_lifecycle(got, audio_type, transcript_type, added_type):
    types = [e["type"] for e in got]
    # the response is announced before its first delta, in LiveKit's order
    first = types.index(audio_type)
    order = ["response.created", "response.output_item.added", added_type, "response.content_part.added"]
    idx = [types.index(t) for t in order]
    assert idx == sorted(idx) and idx[-1] < first, types[:first + 1]
    assert transcript_type in types, "no transcript delta: " + ", ".join(sorted(set(types)))
    resp = got[idx[0]]["response"]["id"]
    item = got[idx[1]]["item"]["id"]
    for e in got:
        if e["type"] in (audio_type, transcript_type):
            assert e["response_id"] and e["item_id"] and isinstance(e["delta"], str)
    d = next(e for e in got if e["type"] == audio_type)
    assert d["response_id"] == resp and d["item_id"] == item


@pytest.mark.parametrize("fmt", ["pcm16", "g711_ulaw", "g711_alaw"])
def test_openai_client_streams(rtd, fmt):
    """The openai package (GA client) on ws://127.0.0.1:PORT/v1: session.update
    with the format, seconds of audio, audio and transcript deltas back, no
    error event; then response.cancel ends the response (cancelled)."""
    port, _ = rtd
    before = metric(port, 'moshid_endpoint_sessions_total{endpoint="realtime"}')

    async def run():
        client = AsyncOpenAI(api_key="any-token", base_url=f"http://127.0.0.1:{port}/v1")
        async with client.realtime.connect(model="moshid-test") as conn:
            async def recv():
                return (await conn.recv()).model_dump()
            created = await recv()
            assert created["type"] == "session.created"
            assert created["session"]["model"] == "moshid-test"
            await conn.session.update(session={
                "type": "realtime", "output_modalities": ["audio"], "instructions": "",
                "audio": {"input": {"format": GA_FORMAT[fmt], "turn_detection": None},
                          "output": {"format": GA_FORMAT[fmt], "voice": "alloy"}}})
            got = []
            upd = await recv_until(recv, lambda e: e["type"] == "session.updated", got)
            a = upd["session"]["audio"]
            assert a["input"]["format"]["type"] == GA_FORMAT[fmt]["type"]
            assert a["output"]["format"]["type"] == GA_FORMAT[fmt]["type"]
            assert a["output"]["voice"] == "alloy"

            async def send(b):
                await conn.input_audio_buffer.append(audio=b)
            got = await stream(send, recv, fmt, 40, 20, "response.output_audio.delta")
            check_lifecycle(got, "response.output_audio.delta", "response.output_audio_transcript.delta",
                            "conversation.item.added")
            sizes = [len(base64.b64decode(e["delta"])) for e in got if e["type"] == "response.output_audio.delta"]
            if fmt == "pcm16":
                assert set(sizes) == {2 * FRAME}, sizes
            else:
                # 8 kHz, one byte a sample: 640 a frame on average; libsoxr
                # hands its output on in blocks (up to two frames' worth)
                # and holds back less than its delay
                assert all(n <= 2 * G711_FRAME + 64 for n in sizes), sizes
                assert sum(sizes) >= G711_FRAME * len(sizes) - 1000, sizes
                pcm = base64.b64decode(next(e["delta"] for e in reversed(got)
                                            if e["type"] == "response.output_audio.delta"))
                assert len(set(pcm)) > 8, "G.711 output is constant"
            resp = next(e for e in reversed(got) if e["type"] == "response.created")["response"]["id"]
            open_ = not any(e["type"] == "response.done" and e["response"]["id"] == resp for e in got)
            if open_:
                await conn.response.cancel()

                async def until_done():
                    while True:
                        e = await recv()
                        got.append(e)
                        if e["type"] == "response.done" and e["response"]["id"] == resp:
                            return e
                        assert e["type"] != "error", e
                done = await asyncio.wait_for(until_done(), WAIT_S)
                # cancelled, unless the model fell silent first (then the
                # cancel finds no response: an error event, after this done)
                if done["response"]["status"] != "completed":
                    assert done["response"]["status"] == "cancelled", done
                    assert done["response"]["status_details"]["reason"] == "client_cancelled"
                tr = [e for e in got if e["type"] == "response.output_audio_transcript.done"]
                assert tr and tr[-1]["response_id"] == resp
    asyncio.run(run())
    assert metric(port, 'moshid_endpoint_sessions_total{endpoint="realtime"}') >= before + 1


def test_openai_beta_client(rtd):
    """The beta client (OpenAI-Beta: realtime=v1; websocket_base_url, as
    the beta path still makes wss:// of http://): the beta session shape
    and event names."""
    port, _ = rtd

    async def run():
        client = AsyncOpenAI(api_key="x", base_url=f"http://127.0.0.1:{port}/v1",
                             websocket_base_url=f"ws://127.0.0.1:{port}/v1")
        async with client.beta.realtime.connect(model="gpt-4o-realtime-preview") as conn:
            async def recv():
                return (await conn.recv()).model_dump()
            created = await recv()
            assert created["type"] == "session.created"
            assert created["session"]["input_audio_format"] == "pcm16"
            await conn.session.update(session={"modalities": ["audio", "text"], "input_audio_format": "g711_ulaw",
                                               "output_audio_format": "g711_ulaw", "turn_detection": None})
            got = []
            upd = await recv_until(recv, lambda e: e["type"] == "session.updated", got)
            assert upd["session"]["output_audio_format"] == "g711_ulaw"

            async def send(b):
                await conn.input_audio_buffer.append(audio=b)
            got = await stream(send, recv, "g711_ulaw", 30, 10, "response.audio.delta")
            check_lifecycle(got, "response.audio.delta", "response.audio_transcript.delta",
                            "conversation.item.created")
    asyncio.run(run())


# ---- raw clients: what a broken or hostile client sends ----------------------

class Raw:
    def __init__(self, ws):
        self.ws = ws

    async def send(self, obj):
        await self.ws.send(obj if isinstance(obj, str) else json.dumps(obj))

    async def recv(self):
        m = await self.ws.recv()
        assert isinstance(m, str), "a server event in a binary message"
        return json.loads(m)

    async def error(self):
        """The next error event (others skipped)."""
        async def loop():
            while True:
                ev = await self.recv()
                if ev["type"] == "error":
                    return ev
        return await asyncio.wait_for(loop(), WAIT_S)


def raw_connect(port, **kw):
    return websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?model=m", max_size=None,
                              additional_headers={"Authorization": "Bearer whatever"}, **kw)


def test_bad_events_get_error_events(rtd):
    """Malformed JSON, unknown events, bad fields, non-base64 and oversized
    audio, events out of order: one error event each, in the documented
    shape, and the session goes on (a valid update is answered after)."""
    port, _ = rtd
    cases = [
        ("{not json", "invalid_json", None),
        ("[1,2,3]", "invalid_json", None),
        ("\"x\"" + " " * 10, "invalid_json", None),
        ({"type": "no.such.event", "event_id": "e1"}, "invalid_event", "e1"),
        ({"event_id": "e2"}, "missing_required_parameter", "e2"),
        ({"type": "input_audio_buffer.append", "event_id": "e3", "audio": "not base64!"}, "invalid_base64", "e3"),
        ({"type": "input_audio_buffer.append", "audio": "QUJD="}, "invalid_base64", None),
        ({"type": "input_audio_buffer.append", "audio": 5}, "missing_required_parameter", None),
        ({"type": "input_audio_buffer.append", "event_id": "e4",
          "audio": base64.b64encode(bytes(70000)).decode()}, "audio_too_large", "e4"),
        ({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/flac"}}}}},
         "invalid_value", None),
        ({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm",
                                                                               "rate": 16000}}}}},
         "invalid_value", None),
        ({"type": "session.update", "session": {"type": "transcription"}}, "invalid_value", None),
        ({"type": "session.update", "session": {"turn_detection": {"type": "server_vad", "threshold": 7}}},
         "invalid_value", None),
        ({"type": "session.update", "session": "x"}, "invalid_type", None),
        ({"type": "input_audio_buffer.commit", "event_id": "e5"}, "input_audio_buffer_commit_empty", "e5"),
        ({"type": "response.cancel"}, "response_cancel_not_active", None),
        ({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                       "content": [{"type": "input_text", "text": "hi"}]}},
         "text_input_unsupported", None),
        ({"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c",
                                                       "output": "{}"}}, "item_type_unsupported", None),
        ({"type": "conversation.item.retrieve", "item_id": "i"}, "item_retrieve_unsupported", None),
        ("[" * 100 + "]" * 100, "invalid_json", None),
        ("[" + "0," * 5000 + "0]", "invalid_json", None),
        (b"\xff\xfe binary garbage", "invalid_json", None),
    ]
    before = metric(port, 'moshid_errors_total{kind="bad_event"}')

    async def run():
        async with raw_connect(port) as ws:
            c = Raw(ws)
            assert (await c.recv())["type"] == "session.created"
            for msg, code, eid in cases:
                await c.send(msg) if not isinstance(msg, bytes) else await ws.send(msg)
                ev = await c.error()
                err = ev["error"]
                assert err["code"] == code, (msg if not isinstance(msg, str) else msg[:60], err)
                assert err["type"] == "invalid_request_error" and err["message"], err
                assert err.get("event_id") == eid, err
                assert isinstance(ev["event_id"], str) and ev["event_id"]
            await c.send({"type": "session.update", "session": {"type": "realtime"}})
            got = []
            await recv_until(c.recv, lambda e: e["type"] == "session.updated", got)
    asyncio.run(run())
    assert metric(port, 'moshid_errors_total{kind="bad_event"}') >= before + len(cases)


def test_refused_at_open_gets_an_error_event(rtd):
    """A session refused as it opens (here a bad query value, as on
    /api/chat) gets an error event, then a close with the reason."""
    port, _ = rtd

    async def run():
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?model=m&text_temperature=99") as ws:
            ev = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            assert ev["type"] == "error" and "text_temperature" in ev["error"]["message"], ev
            with pytest.raises(websockets.ConnectionClosed) as ex:
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ex.value.rcvd.code == 1008 and "text_temperature" in ex.value.rcvd.reason
    asyncio.run(run())


def test_update_after_start_and_oversize_message(rtd):
    """A voice change after the start is refused (error event); a message
    over limits.max_message_bytes closes with 1009 and a reason."""
    port, _ = rtd

    async def run():
        async with raw_connect(port) as ws:
            c = Raw(ws)
            await c.recv()
            await c.send({"type": "session.update", "session": {"audio": {"output": {"voice": "alloy"}}}})
            await recv_until(c.recv, lambda e: e["type"] == "session.updated", [])
            await c.send({"type": "session.update", "session": {"audio": {"output": {"voice": "verse"}}}})
            err = (await c.error())["error"]
            assert err["code"] == "session_update_unsupported" and err["param"] == "session.voice", err
            await c.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 300000}))
            err = (await c.error())["error"]
            assert err["code"] == "message_too_large", err
            with pytest.raises(websockets.ConnectionClosed) as ex:
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ex.value.rcvd.code == 1009 and "exceeds the limit" in ex.value.rcvd.reason
    asyncio.run(run())


def test_flood_closes_with_reason_others_unharmed(rtd):
    """A flood of appends past realtime.max_events_per_s closes that session
    (1008, with the reason); a session streaming meanwhile keeps getting
    audio."""
    port, _ = rtd

    async def run():
        good = AsyncOpenAI(api_key="x", base_url=f"http://127.0.0.1:{port}/v1")
        async with good.realtime.connect(model="m") as conn:
            async def recv():
                return (await conn.recv()).model_dump()
            await recv()

            async def send(b):
                await conn.input_audio_buffer.append(audio=b)
            await stream(send, recv, "pcm16", 20, 3, "response.output_audio.delta")
            async with raw_connect(port) as ws:
                await ws.recv()
                small = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(4)).decode()})
                with pytest.raises(websockets.ConnectionClosed) as ex:
                    for _ in range(2000):
                        await ws.send(small)
                    while True:
                        await asyncio.wait_for(ws.recv(), WAIT_S)
                assert ex.value.rcvd is not None and ex.value.rcvd.code == 1008, ex.value
                assert "event flood" in ex.value.rcvd.reason
            # the streaming session is unharmed: more audio comes back
            await stream(send, recv, "pcm16", 20, 10, "response.output_audio.delta")
    asyncio.run(run())


def raw_upgrade(port, path="/v1/realtime?model=m", headers=""):
    """A WebSocket upgrade on a plain socket: (status, body) of the answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"{headers}\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                body += chunk
        return status, body.decode(errors="replace")
    finally:
        s.close()


def test_same_defences_as_chat(rtd):
    """Same listener, same checks: a foreign Origin is refused (403), other
    paths are 404 (naming both endpoints), and /metrics counts sessions
    per endpoint."""
    port, _ = rtd
    st, body = raw_upgrade(port, headers="Origin: http://evil.example\r\nAuthorization: Bearer x\r\n")
    assert st == 403 and "origin" in body, (st, body)
    st, body = raw_upgrade(port, path="/v1/other")
    assert st == 404 and "/v1/realtime" in body and "/api/chat" in body, (st, body)
    assert raw_upgrade(port)[0] == 101
    m = get(port, "/metrics")[1]
    assert 'moshid_endpoint_sessions{endpoint="realtime"}' in m and 'moshid_endpoint_sessions_total{endpoint="chat"}' in m


def test_tokens_required(build_dir, tmp_path):
    """With auth.tokens_file, /v1/realtime takes the bearer token from the
    Authorization header as /api/chat does: a wrong one is refused (401),
    the right one opens a session."""
    tokens = tmp_path / "tokens"
    tok = "rt-" + "a1" * 16
    tokens.write_text(f"rt:{tok}\n")
    tokens.chmod(0o600)
    p, port, log = start_daemon(build_dir, tmp_path, auth__tokens_file=str(tokens), sessions=2)
    try:
        async def run():
            assert raw_upgrade(port, headers="Authorization: Bearer wrong-token-0123456789\r\n")[0] == 401
            assert raw_upgrade(port)[0] == 401
            client = AsyncOpenAI(api_key=tok, base_url=f"http://127.0.0.1:{port}/v1")
            async with client.realtime.connect(model="m") as conn:
                assert (await conn.recv()).type == "session.created"
        asyncio.run(run())
    finally:
        stop_daemon(p, log)


def test_server_vad_and_buffer_events(rtd):
    """turn_detection server_vad: reported as in force (create_response and
    interrupt_response false), speech_started / speech_stopped around a
    loud stretch of input, then a committed user item; commit, clear,
    truncate and a user audio item are answered."""
    port, _ = rtd
    loud = [pcm16(tone(FRAME, k * FRAME)) for k in range(10)]
    quiet = [bytes(2 * FRAME)] * 10

    async def run():
        async with raw_connect(port) as ws:
            c = Raw(ws)
            await c.recv()
            await c.send({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 400, "create_response": True}}}}})
            got = []
            upd = await recv_until(c.recv, lambda e: e["type"] == "session.updated", got)
            td = upd["session"]["audio"]["input"]["turn_detection"]
            assert td["type"] == "server_vad" and td["silence_duration_ms"] == 400, td
            assert td["create_response"] is False and td["interrupt_response"] is False, td
            for b in loud + quiet:
                await c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(b).decode()})
            st = await recv_until(c.recv, lambda e: e["type"] == "input_audio_buffer.speech_started", got)
            sp = await recv_until(c.recv, lambda e: e["type"] == "input_audio_buffer.speech_stopped", got)
            cm = await recv_until(c.recv, lambda e: e["type"] == "input_audio_buffer.committed", got)
            assert st["item_id"] == sp["item_id"] == cm["item_id"]
            assert 0 <= st["audio_start_ms"] < 100 and 800 <= sp["audio_end_ms"] <= 1300, (st, sp)
            # the client's own buffer events
            await c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(quiet[0]).decode()})
            await c.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
            await recv_until(c.recv, lambda e: e["type"] == "input_audio_buffer.committed", got)
            await c.send({"type": "input_audio_buffer.clear"})
            await recv_until(c.recv, lambda e: e["type"] == "input_audio_buffer.cleared", got)
            await c.send({"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0,
                          "audio_end_ms": 120})
            tr = await recv_until(c.recv, lambda e: e["type"] == "conversation.item.truncated", got)
            assert tr["item_id"] == "item_x" and tr["audio_end_ms"] == 120
            await c.send({"type": "conversation.item.create", "item": {"id": "u1", "type": "message", "role": "user",
                                                                     "content": [{"type": "input_audio",
                                                                                  "audio": base64.b64encode(quiet[0]).decode()}]}})
            # (the model's responses add their own assistant items meanwhile)
            it = await recv_until(c.recv, lambda e: e["type"] == "conversation.item.added" and
                                  e["item"]["role"] == "user", got)
            assert it["item"]["id"] == "u1"
    asyncio.run(run())


def test_system_text_becomes_instructions(rtd):
    """A system message before the start joins the instructions (the
    PersonaPlex text prompt, primed at the start); a user text item cannot
    be fed (error event) and neither can a system message after the start."""
    port, _ = rtd

    async def run():
        async with raw_connect(port) as ws:
            c = Raw(ws)
            await c.recv()
            await c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": [
                {"type": "input_text", "text": "You enjoy a good conversation."}]}})
            got = []
            await recv_until(c.recv, lambda e: e["type"] == "conversation.item.done", got)
            await c.send({"type": "session.update", "session": {"type": "realtime"}})
            upd = await recv_until(c.recv, lambda e: e["type"] == "session.updated", got)
            assert upd["session"]["instructions"] == "You enjoy a good conversation."

            async def send(b):
                await c.send({"type": "input_audio_buffer.append", "audio": b})
            # primed as a persona (on demand, then cached), then it speaks
            await stream(send, c.recv, "pcm16", 20, 3, "response.output_audio.delta")
            await c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": [
                {"type": "input_text", "text": "Now be a pirate."}]}})
            err = (await c.error())["error"]
            assert err["code"] == "session_update_unsupported", err
    asyncio.run(run())


def test_kyutai_model_ignores_instructions(build_dir, tmp_path):
    """A Kyutai checkpoint takes no text prompt: instructions are ignored
    (no error event: Pipecat ends its session on one), reported empty in
    session.updated, and the session streams on."""
    p, port, log = start_daemon(build_dir, tmp_path, model__lm_dir=str(build_dir / "demo" / "kyutai" / "lm"))
    try:
        async def run():
            async with raw_connect(port) as ws:
                c = Raw(ws)
                await c.recv()
                await c.send({"type": "session.update", "session": {"instructions": "Be a pirate."}})
                got = []
                upd = await recv_until(c.recv, lambda e: e["type"] == "session.updated", got)
                assert upd["session"]["instructions"] == ""

                async def send(b):
                    await c.send({"type": "input_audio_buffer.append", "audio": b})
                await stream(send, c.recv, "pcm16", 20, 5, "response.output_audio.delta")
        asyncio.run(run())
    finally:
        stop_daemon(p, log)


def test_client_that_does_not_read(build_dir, tmp_path):
    """A client that sends events and never reads the answers: its queue of
    unsent events is bounded (SESS_QUEUE_MAX_BYTES, 8 MiB): closed 1008 as a
    slow reader, with the reason, and the daemon stays up (no event rate
    limit here, so nothing else stops it)."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, realtime__max_events_per_s=0)
    try:
        text = ("You enjoy a good conversation about the weather and the sea. " * 32)[:2000]
        update = json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": text}})

        async def run():
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", port))
            async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", sock=sock, max_size=None,
                                          max_queue=1) as ws:
                for _ in range(6000):   # ~13 MB of session.updated answers, none read
                    await ws.send(update)
                closed = None
                async def drain():
                    nonlocal closed
                    try:
                        while True:
                            await ws.recv()
                    except websockets.ConnectionClosed as e:
                        closed = e
                await asyncio.wait_for(drain(), WAIT_S)
                assert closed.rcvd is not None and closed.rcvd.code == 1008, closed
                assert "reads too slowly" in closed.rcvd.reason, closed.rcvd.reason
        asyncio.run(run())
        assert get(port, "/healthz")[0] == 200
    finally:
        stop_daemon(p, log)


def test_voice_selects_persona_or_voice_file(build_dir, tmp_path):
    """voice names a configured persona (restored from its snapshot) or a
    file of personas.voices_dir (primed on demand with the instructions);
    an unknown persona is refused with an error event and a close."""
    from test_personas import persona, voices
    vd = voices(tmp_path)
    p, port, log = start_daemon(build_dir, tmp_path, sessions=4, personas__voices_dir=str(vd),
                                personas__list=[persona("ada", vd / "ada.flac")])
    try:
        async def one(voice, instructions=None):
            async with raw_connect(port) as ws:
                c = Raw(ws)
                await c.recv()
                sess = {"type": "realtime", "audio": {"output": {"voice": voice}}}
                if instructions:
                    sess["instructions"] = instructions
                await c.send({"type": "session.update", "session": sess})
                got = []
                upd = await recv_until(c.recv, lambda e: e["type"] == "session.updated", got)
                assert upd["session"]["audio"]["output"]["voice"] == voice

                async def send(b):
                    await c.send({"type": "input_audio_buffer.append", "audio": b})
                await stream(send, c.recv, "pcm16", 20, 3, "response.output_audio.delta")

        asyncio.run(one("ada"))
        asyncio.run(one("ada.flac", "You like boats."))
        ready = [l for l in open(log) if "event=session_ready" in l]
        assert len(ready) == 2 and all("persona=0000000000000000" not in l for l in ready), ready
        assert len({l.split("persona=")[1] for l in ready}) == 2, ready   # two different personas

        async def unknown():
            async with raw_connect(port) as ws:
                c = Raw(ws)
                await c.recv()
                await c.send({"type": "session.update", "session": {"audio": {"output": {"voice": "nobody"}}}})
                err = (await c.error())["error"]
                assert "nobody" in err["message"], err
                with pytest.raises(websockets.ConnectionClosed) as ex:
                    while True:
                        await asyncio.wait_for(ws.recv(), WAIT_S)
                assert ex.value.rcvd.code == 1008, ex.value
        asyncio.run(unknown())
    finally:
        stop_daemon(p, log)
