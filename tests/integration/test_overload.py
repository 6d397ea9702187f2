"""Who is behind when a session's input buffer fills: an engine slower than
real time on purpose (debug.step_delay_ms) with clients that send in real
time gets "server overloaded" and close 1013, never "faster than real
time"; a client that pauses and then sends more than the buffer at once gets
"audio burst" and 1008. The close frame's reason carries the error text
(cut to 123 bytes at a character boundary) for clients that do not know
kind 5. Policy: docs/operations.md, "Capacity and overload".

Every wait is for an event (the daemon closing the session, a metric, the
health check) with a generous deadline, for a loaded 2-core machine."""
import asyncio
import json
import time

import aiohttp
import pytest

import moshi_client as mc
from helpers import get, metric, start_daemon, stop_daemon, wait_for

FRAME = mc.FRAME
# The engine sleeps this long per step: one step costs about two frames
# (80 ms each), so even one session falls behind real time.
STEP_DELAY_MS = 150
INPUT_BUFFER_S = 3
# Longest a test streams before the daemon must have decided, s.
STREAM_S = 40
CLOSE_REASON_MAX = 123


class Result(mc.Result):
    def __init__(self):
        super().__init__()
        self.close_reason = None


async def receive(ws, res):
    """What moshi_client._receiver keeps, and the close frame's status and
    reason (an `async for` over the socket drops them)."""
    while True:
        m = await ws.receive()
        if m.type == aiohttp.WSMsgType.BINARY:
            kind, payload = m.data[0], m.data[1:]
            if kind == mc.K_META:
                res.meta = payload.decode()
            elif kind == mc.K_HANDSHAKE:
                res.handshake = payload
            elif kind == mc.K_AUDIO:
                res.audio.append(payload)
            elif kind == mc.K_TEXT:
                res.text.append(payload.decode())
            elif kind == mc.K_ERROR:
                res.errors.append(payload.decode())
        elif m.type == aiohttp.WSMsgType.CLOSE:
            res.close_code, res.close_reason = m.data, m.extra
            return
        elif m.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            return


async def stream(port, msgs, query="", realtime_until=None, pause_s=0.0, tail_s=10.0):
    """One session: waits for the handshake, sends the prepared kind-1
    messages (one per 80 ms frame, mc.sphn_messages) in real time up to
    index realtime_until (all when None), pauses pause_s, sends the rest at
    once; stops sending as soon as the daemon closes. Returns a Result with
    the close reason."""
    res = Result()
    url = f"http://127.0.0.1:{port}/api/chat" + (f"?{query}" if query else "")
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url, max_msg_size=0, autoclose=True) as ws:
            recv = asyncio.ensure_future(receive(ws, res))
            deadline = time.monotonic() + 30
            while res.handshake is None and not recv.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            period = FRAME / mc.SR
            n_rt = len(msgs) if realtime_until is None else realtime_until
            t0 = time.monotonic()
            for i, msg in enumerate(msgs):
                if recv.done():
                    break
                if i == n_rt and pause_s:
                    await asyncio.sleep(pause_s)  # the client's own pause (the scenario), not a wait
                if msg:
                    await ws.send_bytes(msg)
                if i < n_rt:
                    delay = t0 + (i + 1) * period - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
            try:
                await asyncio.wait_for(asyncio.shield(recv), timeout=tail_s)
            except asyncio.TimeoutError:
                pass
            if not ws.closed:
                await ws.close()
            recv.cancel()
            if res.close_code is None:
                res.close_code = ws.close_code
    return res


def assert_reason_is_error_text(res):
    """The close reason is the kind-5 text, cut to at most 123 bytes at a
    character boundary (aiohttp hands a str: it was valid UTF-8)."""
    assert res.errors, "no error message"
    text, reason = res.errors[0].encode(), (res.close_reason or "").encode()
    assert len(reason) <= CLOSE_REASON_MAX, reason
    assert text.startswith(reason), (text, reason)
    if len(text) <= CLOSE_REASON_MAX:
        assert reason == text
    else:  # cut: nothing more would have fitted (a character is at most 4 bytes)
        assert len(reason) > CLOSE_REASON_MAX - 4, (text, reason)


@pytest.fixture(scope="module")
def slow_daemon(build_dir, tmp_path_factory):
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("slow"), sessions=4,
                                debug__step_delay_ms=STEP_DELAY_MS, limits__input_buffer_s=INPUT_BUFFER_S,
                                limits__idle_timeout_s=60)
    yield port, log
    stop_daemon(p, log)


def errors(port, kind):
    return metric(port, f'moshid_errors_total{{kind="{kind}"}}')


def test_slow_engine_sheds_real_time_clients(slow_daemon):
    """Two clients in real time on an engine that cannot keep up even with
    one: each is closed with "server overloaded" and 1013 (shed, newest
    first, once the engine is half the input buffer behind; or refused at
    the start when the engine is already behind), never blamed for sending
    "faster than real time"; /metrics counts the overloads and shows the
    backlog; once they are gone the engine is idle and /healthz admits
    again."""
    port, log = slow_daemon
    over0, overrun0 = errors(port, "overload"), errors(port, "input_overrun")
    msgs = mc.sphn_messages(mc.speech_pcm("The engine is slower than real time on purpose.", seconds=STREAM_S))

    async def two():
        return await asyncio.gather(stream(port, msgs), stream(port, msgs))

    for res in asyncio.run(two()):
        assert res.errors and res.errors[0].startswith("server overloaded"), res.errors
        assert not any("faster than real time" in e or "burst" in e for e in res.errors), res.errors
        assert res.close_code == 1013, res.close_code
        assert_reason_is_error_text(res)
    assert errors(port, "overload") - over0 == 2
    assert errors(port, "input_overrun") == overrun0
    assert "moshid_input_backlog_frames" in get(port, "/metrics")[1]
    assert "action=shed" in open(log).read()
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "/healthz to admit again")
    assert json.loads(get(port, "/healthz")[1])["overloaded"] is False


def test_burst_after_pause_is_the_clients(slow_daemon):
    """A client that sends a little, pauses, then sends 5 s at once (more
    than the 3 s buffer, yet behind the wall clock since its first audio):
    the buffer fills with fresh frames, so it is the client's burst (1008,
    "audio burst"), not an overload, nor "faster than real time"."""
    port, _ = slow_daemon
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "an idle engine")
    over0 = errors(port, "overload")
    msgs = mc.sphn_messages(mc.speech_pcm("A pause, then everything at once.", seconds=6.0))
    # 1 s in real time, a 6 s pause, then 5 s at once: 6 s of audio within
    # 7 s of wall clock (never ahead of real time).
    res = asyncio.run(stream(port, msgs, realtime_until=12, pause_s=6.0))
    assert res.errors and res.errors[0].startswith("audio burst"), res.errors
    assert res.close_code == 1008
    assert_reason_is_error_text(res)
    assert errors(port, "overload") == over0


def test_running_ahead_is_still_the_clients(slow_daemon):
    """On the slow engine, a client that sends far faster than real time
    (8 s at once) is still told so (1008), not "server overloaded"."""
    port, _ = slow_daemon
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "an idle engine")
    msgs = mc.sphn_messages(mc.speech_pcm("Much faster than real time.", seconds=8.0))
    res = asyncio.run(stream(port, msgs, realtime_until=0))
    assert res.errors and res.errors[0].startswith("audio arrives faster than real time"), res.errors
    assert res.close_code == 1008
    assert_reason_is_error_text(res)


def test_stalled_engine_fills_the_buffer(build_dir, tmp_path):
    """An engine stalled in one long step (6 s here) while a client sends in
    real time: the 2 s input buffer fills before any step ends (so the
    engine has not yet reported itself overloaded); the frames waiting are
    as old as the buffer, so the verdict at the full buffer is the
    engine's: "server overloaded", 1013."""
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, debug__step_delay_ms=6000,
                                limits__input_buffer_s=2, limits__idle_timeout_s=60)
    try:
        msgs = mc.sphn_messages(mc.speech_pcm("The engine is stuck in one step.", seconds=20))
        res = asyncio.run(stream(port, msgs))
        assert res.errors and res.errors[0].startswith("server overloaded: the engine is"), res.errors
        assert "behind this session's audio" in res.errors[0], res.errors
        assert res.close_code == 1013
        assert_reason_is_error_text(res)
        assert errors(port, "overload") == 1 and errors(port, "input_overrun") == 0
        assert "why=input_full" in open(log).read()
    finally:
        stop_daemon(p, log)
