"""Access control end to end (daemon/net/access.h, docs/security.md): bearer
tokens from auth.tokens_file in each of the four places clients put them,
per-token session limits, SIGHUP reload of the tokens file, the origin
policy, and that no token ever reaches the daemon's log.

Upgrades are sent on plain sockets so that the HTTP status and the one-line
reason of a refusal can be read. Every wait is for an event (an HTTP
answer, a handshake message, a log line, a /healthz count) with a deadline
meant for a loaded 2-core machine; nothing sleeps a fixed time."""
import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import aiohttp
import numpy as np
import pytest

import moshi_client as mc
from helpers import get, metric, start_daemon, stop_daemon, wait_for

# Deadlines, s: an HTTP answer; a handshake (slot attach on a busy CI
# machine); a reload to be logged; streamed audio to come back.
ANSWER_S = 10
HANDSHAKE_S = 30
RELOAD_S = 20
AUDIO_S = 40

TOK_ALICE = "alice-" + "a1" * 16           # 38 bytes of [A-Za-z0-9._~-]
TOK_BOB = "bob-" + "b2" * 16
TOK_LIM = "lim-" + "c3" * 16                # the token with a session limit of 1
TOK_NEW = "new-" + "d4" * 16
ALL_TOKENS = (TOK_ALICE, TOK_BOB, TOK_LIM, TOK_NEW)


def write_tokens(path, lines):
    path.write_text("# test tokens\n" + "".join(l + "\n" for l in lines))
    os.chmod(path, 0o600)


def upgrade(port, query="", headers=None, host=None):
    """A WebSocket upgrade on a plain socket: (status, body) of the answer.
    The socket is closed after reading it (for a 101: a session that opens
    and ends at once)."""
    status, _, body = upgrade_h(port, query, headers, host)
    return status, body


def upgrade_h(port, query="", headers=None, host=None):
    """upgrade(), with the answer's headers (lower-case names):
    (status, headers, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        h = {"Host": host or f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
        h.update(headers or {})
        req = f"GET /api/chat{'?' + query if query else ''} HTTP/1.1\r\n"
        req += "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        s.sendall(req.encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = s.recv(4096)
            if not b:
                raise AssertionError(f"connection closed without an answer: {buf!r}")
            buf += b
        head, body = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if status == 101:
            return status, hdrs, ""
        length = int(hdrs["content-length"]) if "content-length" in hdrs else None
        while length is None or len(body) < length:
            b = s.recv(4096)
            if not b:
                break
            body += b
        return status, hdrs, body.decode("utf-8", "replace").strip()
    finally:
        s.close()


def health(port):
    return json.loads(get(port, "/healthz")[1])


def refused_total(port, reason):
    return metric(port, f'moshid_auth_refused_total{{reason="{reason}"}}')


def log_count(logname, needle):
    with open(logname) as f:
        return f.read().count(needle)


def sighup_and_wait(p, logname, needle):
    """SIGHUP, then wait until one more log line holds needle."""
    n = log_count(logname, needle)
    p.send_signal(signal.SIGHUP)
    wait_for(lambda: log_count(logname, needle) > n, RELOAD_S, f"{needle!r} in the log after SIGHUP")


_MSGS = []


def audio_messages():
    """60 s of noise as sphn's kind-1 messages, encoded once: encoding while
    another session streams would stall the event loop, and the stalled
    session would then send a burst the daemon refuses."""
    if not _MSGS:
        rng = np.random.default_rng(1)
        _MSGS.extend(mc.sphn_messages((0.1 * rng.standard_normal(mc.SR * 60)).astype(np.float32)))
    return _MSGS


class Streamer:
    """One session held open, sending audio in real time (80 ms frames) and
    counting the audio messages that come back."""

    def __init__(self, port, query="", headers=None):
        self.url = f"http://127.0.0.1:{port}/api/chat" + (f"?{query}" if query else "")
        self.headers = headers or {}
        self.audio = 0
        self.handshake = asyncio.Event()
        self.errors = []
        self.close_code = None

    async def run(self, stop):
        msgs = audio_messages()
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(self.url, headers=self.headers, max_msg_size=0) as ws:
                recv = asyncio.ensure_future(self._recv(ws))
                await asyncio.wait_for(self.handshake.wait(), HANDSHAKE_S)
                t0 = time.monotonic()
                for i, m in enumerate(msgs):
                    if stop.is_set() or recv.done():
                        break
                    if m:
                        await ws.send_bytes(m)
                    delay = t0 + (i + 1) * mc.FRAME / mc.SR - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await ws.close()
                recv.cancel()
                self.close_code = ws.close_code

    async def _recv(self, ws):
        async for m in ws:
            if m.type != aiohttp.WSMsgType.BINARY:
                continue
            if m.data[0] == mc.K_HANDSHAKE:
                self.handshake.set()
            elif m.data[0] == mc.K_AUDIO:
                self.audio += 1
            elif m.data[0] == mc.K_ERROR:
                self.errors.append(m.data[1:].decode())

    async def wait_audio(self, n):
        """Wait until n more audio messages have come back."""
        target = self.audio + n
        deadline = time.monotonic() + AUDIO_S
        while self.audio < target:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"only {self.audio} of {target} audio messages came back"
            await asyncio.sleep(0.02)


async def in_thread(f, *a):
    """A blocking call (a raw upgrade) off the event loop, so that the
    streamers keep their real-time pace."""
    return await asyncio.get_running_loop().run_in_executor(None, f, *a)


@pytest.fixture
def authd(build_dir, tmp_path):
    """A daemon with a tokens file (alice, bob, lim:1)."""
    tokens = tmp_path / "tokens"
    write_tokens(tokens, [f"alice:{TOK_ALICE}", f"bob:{TOK_BOB}:8", f"lim:{TOK_LIM}:1"])
    p, port, log = start_daemon(build_dir, tmp_path, auth__tokens_file=str(tokens), sessions=4,
                                limits__idle_timeout_s=30)
    p.tokens = tokens
    try:
        yield p, port, log
    finally:
        stop_daemon(p, log)
        # whatever happened, no token reached the log
        text = open(log).read()
        for t in ALL_TOKENS:
            assert t not in text, f"a token appears in the daemon's log"


def test_refusals_and_the_four_ways_in(authd):
    p, port, log = authd
    assert health(port)["auth_required"] is True
    st, body = upgrade(port)
    assert st == 401 and body.startswith("authentication required"), (st, body)
    assert refused_total(port, "missing_token") == 1
    st, body = upgrade(port, query="auth=" + TOK_ALICE + "x")
    assert (st, body) == (401, "authentication failed: unknown token")
    st, body = upgrade(port, headers={"Authorization": "Bearer " + "w" * 40})
    assert st == 401 and "unknown token" in body
    assert refused_total(port, "unknown_token") == 2
    st, body = upgrade(port, headers={"Authorization": "Basic YWxpY2U6eA=="})
    assert st == 401 and "Bearer" in body
    # each place a client can put it
    assert upgrade(port, headers={"Authorization": "Bearer " + TOK_ALICE})[0] == 101
    assert upgrade(port, headers={"kyutai-api-key": TOK_BOB})[0] == 101
    assert upgrade(port, query="text_topk=5&auth=" + TOK_ALICE)[0] == 101
    assert upgrade(port, query="auth_id=" + TOK_BOB)[0] == 101
    # the log names the token, never shows it
    wait_for(lambda: log_count(log, "event=session_open") >= 4, ANSWER_S, "four sessions in the log")
    text = open(log).read()
    assert "token=alice" in text and "token=bob" in text
    assert "reason=missing_token" in text and "reason=unknown_token" in text
    # /healthz stays open without a token (503 only says "not accepting now": a loaded machine)
    st, body = get(port, "/healthz")
    assert st in (200, 503) and json.loads(body)["ready"] is True, (st, body)


def test_session_limit_per_token(authd):
    p, port, log = authd

    audio_messages()

    async def go():
        stop = asyncio.Event()
        first = Streamer(port, query="auth=" + TOK_LIM)
        t1 = asyncio.ensure_future(first.run(stop))
        await asyncio.wait_for(first.handshake.wait(), HANDSHAKE_S)
        st, body = await in_thread(upgrade, port, "auth=" + TOK_LIM)
        assert st == 429 and "session limit" in body, (st, body)
        assert await in_thread(refused_total, port, "token_limit") == 1
        # another token still gets in, and streams beside it
        other = Streamer(port, headers={"Authorization": "Bearer " + TOK_ALICE})
        t2 = asyncio.ensure_future(other.run(stop))
        await asyncio.wait_for(other.handshake.wait(), HANDSHAKE_S)
        await other.wait_audio(5)
        await first.wait_audio(5)
        stop.set()
        await asyncio.gather(t1, t2)

    asyncio.run(go())
    # closing freed the count: once the daemon counts no session, the
    # limited token gets in again (released in the same step as the count)
    wait_for(lambda: health(port)["sessions"] == 0, ANSWER_S, "the sessions to close")
    assert upgrade(port, query="auth=" + TOK_LIM)[0] == 101


def test_reload_tokens(authd):
    """SIGHUP re-reads the tokens file: a removed token is refused for new
    sessions while its open session keeps streaming; a new token is
    admitted; a bad file keeps the tokens in force."""
    p, port, log = authd

    audio_messages()

    async def go():
        stop = asyncio.Event()
        bob = Streamer(port, query="auth=" + TOK_BOB)
        t = asyncio.ensure_future(bob.run(stop))
        await asyncio.wait_for(bob.handshake.wait(), HANDSHAKE_S)
        await bob.wait_audio(3)
        write_tokens(p.tokens, [f"alice:{TOK_ALICE}", f"new:{TOK_NEW}"])
        await in_thread(sighup_and_wait, p, log, "event=reloaded")
        assert (await in_thread(upgrade, port, "auth=" + TOK_BOB))[0] == 401
        assert (await in_thread(upgrade, port, "auth=" + TOK_NEW))[0] == 101
        # bob's session, opened before, is not cut
        await bob.wait_audio(12)
        stop.set()
        await t
        assert bob.errors == [] and bob.close_code in (1000, None), (bob.errors, bob.close_code)

    asyncio.run(go())
    # a bad file (a token too short): logged, the old set stays
    p.tokens.write_text(f"alice:{TOK_ALICE}\nshort:abc\n")
    sighup_and_wait(p, log, "event=reload_tokens_refused")
    text = open(log).read()
    assert ":2: token of short" in text
    assert upgrade(port, query="auth=" + TOK_NEW)[0] == 101
    assert upgrade(port, query="auth=" + TOK_ALICE)[0] == 101


def origin_daemon(build_dir, tmp_path, **over):
    return start_daemon(build_dir, tmp_path, sessions=2, **over)


def test_default_origins(build_dir, tmp_path):
    p, port, log = origin_daemon(build_dir, tmp_path)
    try:
        assert health(port)["auth_required"] is False
        st, body = upgrade(port, headers={"Origin": "http://evil.example"})
        assert st == 403 and "origin refused" in body and "http://evil.example" in body, (st, body)
        assert refused_total(port, "origin") == 1
        # the page's own origin, localhost pages, and programs (no Origin)
        assert upgrade(port, headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 101
        assert upgrade(port, headers={"Origin": "http://localhost:5173"})[0] == 101
        assert upgrade(port)[0] == 101
        # an https page is not this plain-http listener's own (127.0.0.1 still passes as localhost)
        assert upgrade(port, headers={"Origin": f"https://10.1.2.3:{port}"}, host=f"10.1.2.3:{port}")[0] == 403
        assert upgrade(port, headers={"Origin": f"http://10.1.2.3:{port}"}, host=f"10.1.2.3:{port}")[0] == 101
        assert upgrade(port, headers={"Origin": f"https://127.0.0.1:{port}"})[0] == 101
        # a host name is not trusted as same-origin without tokens (DNS rebinding)
        st, body = upgrade(port, headers={"Origin": f"http://moshid.test:{port}"}, host=f"moshid.test:{port}")
        assert st == 403 and "DNS rebinding" in body
    finally:
        stop_daemon(p, log)


def test_origins_star_and_reload(build_dir, tmp_path):
    """"*" admits every page; the list is reloadable."""
    p, port, log = origin_daemon(build_dir, tmp_path, server__allowed_origins=["*"])
    try:
        assert upgrade(port, headers={"Origin": "http://evil.example"})[0] == 101
        cfg = p.cfg
        cfg["server"]["allowed_origins"] = ["https://voice.example"]
        p.cfg_path.write_text(json.dumps(cfg))
        sighup_and_wait(p, log, "event=reloaded")
        assert upgrade(port, headers={"Origin": "http://evil.example"})[0] == 403
        assert upgrade(port, headers={"Origin": "https://voice.example"})[0] == 101
        assert upgrade(port, headers={"Origin": "http://localhost:1"})[0] == 403  # the list replaces the default
    finally:
        stop_daemon(p, log)


def test_bad_tokens_file_at_start(build_dir, tmp_path):
    """A bad tokens file is a configuration error at start-up (exit 1, the
    line named, the token not shown)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice:{TOK_ALICE}\nalice:{TOK_BOB}\n")
    demo = build_dir / "demo"
    cfg = {"server": {"port": 0}, "auth": {"tokens_file": str(tokens)},
           "model": {"lm_dir": str(demo / "lm"), "mimi": str(demo / "mimi.safetensors"),
                     "mimi_config": str(demo / "mimi.json"), "tokenizer": str(demo / "tokenizer.model")},
           "engine": {"backend": "cpu", "threads": 1}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([str(build_dir / "moshid"), "--config", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r
    assert ":2: name alice given twice" in r.stderr, r.stderr
    assert TOK_ALICE not in r.stderr and TOK_BOB not in r.stderr


CHALLENGE = 'Bearer realm="moshid"'


def http(port, path, headers=None):
    """GET path: (status, headers with lower-case names, body)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=ANSWER_S) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def test_401_carries_the_bearer_challenge(authd):
    """RFC 6750 3 / RFC 7235 4.1: every 401 names the scheme and realm;
    other refusals do not carry it."""
    p, port, log = authd
    st, h, body = upgrade_h(port)
    assert st == 401 and h.get("www-authenticate") == CHALLENGE, (st, h, body)
    st, h, _ = upgrade_h(port, headers={"Authorization": "Bearer " + "w" * 40})
    assert st == 401 and h.get("www-authenticate") == CHALLENGE, (st, h)
    st, h, _ = upgrade_h(port, headers={"Origin": "http://evil.example"})
    assert st == 403 and "www-authenticate" not in h, (st, h)


@pytest.fixture
def protectd(build_dir, tmp_path):
    """A daemon with tokens and auth.protect_http on."""
    tokens = tmp_path / "tokens"
    write_tokens(tokens, [f"alice:{TOK_ALICE}", f"lim:{TOK_LIM}:1"])
    p, port, log = start_daemon(build_dir, tmp_path, auth__tokens_file=str(tokens), auth__protect_http=True,
                                sessions=2)
    try:
        yield p, port, log
    finally:
        stop_daemon(p, log)
        text = open(log).read()
        for t in ALL_TOKENS:
            assert t not in text, "a token appears in the daemon's log"


def test_protect_http(protectd):
    """auth.protect_http: /metrics and /api/personas need a token (each of
    the four places, as upgrades), /healthz stays open; refusals are 401
    with a one-line reason and the challenge, counted and logged."""
    p, port, log = protectd
    for path in ("/metrics", "/api/personas"):
        st, h, body = http(port, path)
        assert st == 401 and h.get("www-authenticate") == CHALLENGE, (path, st, h)
        assert body.startswith("authentication required") and body.count("\n") == 1, body
        assert h.get("content-type", "").startswith("text/plain")
    st, h, body = http(port, "/metrics", {"Authorization": "Bearer " + TOK_ALICE + "x"})
    assert (st, body) == (401, "authentication failed: unknown token\n"), (st, body)
    st, _, body = http(port, "/metrics", {"Authorization": "Basic YWxpY2U6eA=="})
    assert st == 401 and "Bearer" in body
    # /healthz: open (503 only says "not accepting now": a loaded machine)
    st, h, body = http(port, "/healthz")
    assert st in (200, 503) and json.loads(body)["ready"] is True and "www-authenticate" not in h
    # with a token, from each place; the token at its session limit still reads (a request is no session)
    ok = [({"Authorization": "Bearer " + TOK_ALICE}, ""), ({"kyutai-api-key": TOK_LIM}, ""),
          ({}, "?auth=" + TOK_ALICE), ({}, "?x=1&auth_id=" + TOK_LIM)]
    for hdrs, q in ok:
        st, _, body = http(port, "/metrics" + q, hdrs)
        assert st == 200 and "moshid_auth_refused_total" in body, (hdrs, q, st)
    st, _, body = http(port, "/api/personas", {"Authorization": "Bearer " + TOK_ALICE})
    assert st == 200, (st, body)
    json.loads(body)
    # the four refusals above were counted (missing x2, unknown, Basic = missing)
    _, _, m = http(port, "/metrics", {"Authorization": "Bearer " + TOK_ALICE})
    counts = {l.split('"')[1]: int(l.split()[-1]) for l in m.splitlines()
              if l.startswith("moshid_auth_refused_total{")}
    assert counts["missing_token"] == 3 and counts["unknown_token"] == 1, counts
    text = open(log).read()
    assert "event=http_auth_refused" in text and "path=/metrics" in text and "reason=unknown_token" in text
    # upgrades still need the token as before
    assert upgrade(port)[0] == 401
    assert upgrade(port, query="auth=" + TOK_ALICE)[0] == 101


def test_protect_http_reload(protectd):
    """auth.protect_http is reloadable (SIGHUP): turned off, /metrics is
    open again; the tokens stay required for upgrades."""
    p, port, log = protectd
    assert http(port, "/metrics")[0] == 401
    cfg = p.cfg
    cfg["auth"]["protect_http"] = False
    p.cfg_path.write_text(json.dumps(cfg))
    sighup_and_wait(p, log, "event=reloaded")
    assert http(port, "/metrics")[0] == 200
    assert http(port, "/api/personas")[0] == 200
    assert upgrade(port)[0] == 401


def test_protect_http_off_by_default(authd):
    """Without auth.protect_http, /metrics and /api/personas stay open
    (monitoring that cannot carry a token keeps working)."""
    p, port, log = authd
    assert http(port, "/metrics")[0] == 200
    assert http(port, "/api/personas")[0] == 200
