"""Two moshid instances (the demo model, sessions.max = 2) behind the real
HAProxy on loopback, configured by config/haproxy.cfg with the test's ports:
a session streams through it; sessions spread over both instances
(leastconn); an instance that is full (/healthz 503) gets no new session;
when both are full a new one gets moshid's own "server busy" (the backup
lines); an instance stopped with SIGTERM ends its sessions cleanly (1001 and
the error text, through the tunnel) and new sessions go to the other; an
instance drained through HAProxy's runtime API keeps its sessions and gets
no new one. HAProxy sends the PROXY protocol (v2, from 127.0.0.2): the
instances' per-address limits and logs see each client's own address.

Every wait polls (HAProxy's CSV status page, the instances' /healthz) with a
generous deadline; the health check runs every 200 ms."""
import asyncio
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time

import aiohttp
import pytest

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon, wait_for
from test_daemon import frames_in, lag

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "config" / "haproxy.cfg"
SLOTS = 2
# Bounds for a loaded 2-core machine: HAProxy start, a check verdict (200 ms
# checks), a session's handshake.
START_S = 20
VERDICT_S = 15
HANDSHAKE_S = 20
# config/haproxy.cfg: HAProxy connects to the instances from this address.
PROXY_SOURCE = "127.0.0.2"


def haproxy_bin():
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def await_for(cond, timeout, what):
    """wait_for inside a running event loop (the sessions keep running)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def render_config(tmp_path, front, stats, a, b):
    """config/haproxy.cfg with the test's ports, socket and check interval;
    every replaced line must be there (a changed template fails here)."""
    text = TEMPLATE.read_text()
    subs = [
        ("bind :8998", f"bind 127.0.0.1:{front}"),
        ("bind 127.0.0.1:8404", f"bind 127.0.0.1:{stats}"),
        ("127.0.0.1:9000", f"127.0.0.1:{a}"),
        ("127.0.0.1:9001", f"127.0.0.1:{b}"),
        ("/run/haproxy/admin.sock", str(tmp_path / "admin.sock")),
        ("inter 1s fall 1 rise 1", "inter 200ms fall 1 rise 1"),
    ]
    for old, new in subs:
        assert old in text, f"config/haproxy.cfg has no '{old}'"
        text = text.replace(old, new)
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    return path


class Cluster:
    """Instances a and b (moshid processes) and HAProxy in front of them."""

    def __init__(self, build_dir, tmp_path, **over):
        self.tmp = tmp_path
        self.procs = {}
        for name in ("gpu0", "gpu1"):
            d = tmp_path / name
            d.mkdir()
            p, port, log = start_daemon(build_dir, d, sessions=SLOTS, limits__idle_timeout_s=600,
                                        server__proxy_protocol_from=[PROXY_SOURCE], **over)
            self.procs[name] = (p, port, log)
        self.front, self.stats = free_port(), free_port()
        cfg = render_config(tmp_path, self.front, self.stats, self.port("gpu0"), self.port("gpu1"))
        self.hlog = open(tmp_path / "haproxy.log", "w")
        self.haproxy = subprocess.Popen([haproxy_bin(), "-f", str(cfg), "-db"], stdout=self.hlog,
                                        stderr=subprocess.STDOUT)
        wait_for(lambda: self.status("gpu0") == "UP" and self.status("gpu1") == "UP", START_S,
                 "HAProxy to see both instances UP" + self.haproxy_log_tail())

    def port(self, name):
        return self.procs[name][1]

    def haproxy_log_tail(self):
        try:
            return "\nhaproxy log:\n" + (self.tmp / "haproxy.log").read_text()[-2000:]
        except OSError:
            return ""

    def servers(self):
        """HAProxy's CSV status page: {server name: row dict} of backend moshid."""
        try:
            st, body = get(self.stats, "/stats;csv")
        except OSError:
            return {}
        if st != 200:
            return {}
        lines = body.splitlines()
        head = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(head, line.split(","))) for line in lines[1:] if line]
        return {r["svname"]: r for r in rows if r.get("pxname") == "moshid"}

    def status(self, name):
        """UP, DOWN, DRAIN, MAINT, ... ("UP 1/2" while rising: its first word)."""
        r = self.servers().get(name)
        return r["status"].split()[0] if r else None

    def sessions(self, name):
        """Open sessions of an instance, from its own /healthz."""
        return json.loads(get(self.port(name), "/healthz")[1])["sessions"]

    def admin(self, cmd):
        """One command on HAProxy's runtime API (the stats socket)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.tmp / "admin.sock"))
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while chunk := s.recv(4096):
                out += chunk
        return out.decode()

    def close(self):
        self.haproxy.terminate()
        try:
            self.haproxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.haproxy.kill()
        self.hlog.close()
        for p, port, log in self.procs.values():
            stop_daemon(p, log)


@pytest.fixture
def cluster(build_dir, tmp_path):
    if not haproxy_bin():
        pytest.skip("haproxy not installed (Debian: haproxy; tests/deps.txt)")
    c = Cluster(build_dir, tmp_path)
    yield c
    c.close()


@pytest.fixture
def cluster_one_per_client(build_dir, tmp_path):
    """The cluster with server.max_connections_per_ip = 1 on each instance."""
    if not haproxy_bin():
        pytest.skip("haproxy not installed (Debian: haproxy; tests/deps.txt)")
    c = Cluster(build_dir, tmp_path, server__max_connections_per_ip=1)
    yield c
    c.close()


def upgrade_from(port, src):
    """A WebSocket upgrade to port from source address src (a loopback
    address): (socket, HTTP status)."""
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(HANDSHAKE_S)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    return s, int(head.split()[1]) if head.startswith(b"HTTP/1.") else None


class Held:
    """A session opened through a port and held open without audio (so the
    engine does no work for it); it keeps its slot until closed."""

    def __init__(self, port):
        self.port = port
        self.res = mc.Result()

    async def open(self):
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(f"http://127.0.0.1:{self.port}/api/chat", max_msg_size=0)
        self.recv = asyncio.ensure_future(mc._receiver(self.ws, self.res))
        await await_for(lambda: self.res.handshake is not None or self.recv.done(), HANDSHAKE_S,
                        "the handshake or a close")
        return self

    @property
    def accepted(self):
        return self.res.handshake is not None

    async def ended(self, timeout=VERDICT_S):
        """Wait for the server to end the session; its close code."""
        await asyncio.wait_for(asyncio.shield(self.recv), timeout)
        self.res.close_code = self.ws.close_code
        return self.res.close_code

    async def close(self):
        if not self.ws.closed:
            await self.ws.close()
        self.recv.cancel()
        await self.http.close()


async def held(port, n=1):
    return [await Held(port).open() for _ in range(n)]


def test_session_streams_through_haproxy(cluster):
    """Audio in, audio and text out through HAProxy's tunnel, as direct."""
    pcm = mc.speech_pcm("Through the load balancer and back.", seconds=3.0)
    n = frames_in(pcm) - lag(cluster.front)
    res = asyncio.run(mc.session(cluster.front, pcm=pcm, realtime=False, expect_audio=n))
    assert res.errors == []
    assert res.handshake is not None and len(res.audio) == n


def test_spread_full_and_busy(cluster):
    async def go():
        # leastconn: two sessions, one on each instance
        s = await held(cluster.front, 2)
        assert all(x.accepted for x in s)
        await await_for(lambda: cluster.sessions("gpu0") == 1 and cluster.sessions("gpu1") == 1, VERDICT_S,
                        "one session on each instance")
        for x in s:
            await x.close()
        await await_for(lambda: cluster.sessions("gpu0") == 0 and cluster.sessions("gpu1") == 0, VERDICT_S,
                        "both instances empty")

        # gpu0 filled directly (HAProxy does not count these): its /healthz
        # says 503, HAProxy takes it out, new sessions all go to gpu1
        direct = await held(cluster.port("gpu0"), SLOTS)
        assert all(x.accepted for x in direct)
        await await_for(lambda: cluster.status("gpu0") == "DOWN", VERDICT_S, "gpu0 (full) DOWN")
        assert cluster.status("gpu1") == "UP"
        via = await held(cluster.front, SLOTS)
        assert all(x.accepted for x in via), [x.res.errors for x in via]
        assert cluster.sessions("gpu0") == SLOTS and cluster.sessions("gpu1") == SLOTS

        # both full: both DOWN; a new session reaches one through the backup
        # lines and gets moshid's own answer
        await await_for(lambda: cluster.status("gpu1") == "DOWN", VERDICT_S, "gpu1 (full) DOWN")
        extra = (await held(cluster.front))[0]
        assert not extra.accepted
        assert await extra.ended() == 1013
        assert any(e.startswith("server busy") for e in extra.res.errors), extra.res.errors
        await extra.close()

        # a slot freed on gpu0: UP again at the next check, and it takes the next session
        await direct[0].close()
        await await_for(lambda: cluster.status("gpu0") == "UP", VERDICT_S, "gpu0 UP after a slot was freed")
        again = (await held(cluster.front))[0]
        assert again.accepted, again.res.errors
        assert cluster.sessions("gpu0") == SLOTS
        for x in direct[1:] + via + [again]:
            await x.close()

    asyncio.run(go())


def test_sigterm_drains_to_the_other(cluster):
    async def go():
        s = await held(cluster.front, 2)
        assert all(x.accepted for x in s)
        await await_for(lambda: cluster.sessions("gpu0") == 1 and cluster.sessions("gpu1") == 1, VERDICT_S,
                        "one session on each instance")
        # which held session is on gpu0: the one that ends when gpu0 stops
        p0 = cluster.procs["gpu0"][0]
        p0.send_signal(signal.SIGTERM)
        done, _ = await asyncio.wait([x.recv for x in s], timeout=VERDICT_S, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "exactly the session on the stopped instance ends"
        gone = next(x for x in s if x.recv in done)
        kept = next(x for x in s if x is not gone)
        assert await gone.ended() == 1001
        assert "server is shutting down" in gone.res.errors
        assert p0.wait(timeout=15) == 0
        await await_for(lambda: cluster.status("gpu0") == "DOWN", VERDICT_S, "gpu0 DOWN after SIGTERM")

        # new sessions go to gpu1 (one slot left there), the old one there goes on
        new = (await held(cluster.front))[0]
        assert new.accepted, new.res.errors
        assert cluster.sessions("gpu1") == 2
        assert not kept.recv.done() and kept.res.errors == []
        for x in (gone, kept, new):
            await x.close()

    asyncio.run(go())


def test_runtime_drain_keeps_sessions(cluster):
    """HAProxy's "set server ... state drain": the instance's session stays,
    new ones go to the other instance (the way to stop one without cutting
    conversations: drain, wait for sessions 0, then stop it)."""
    async def go():
        s = await held(cluster.front, 2)
        await await_for(lambda: cluster.sessions("gpu0") == 1 and cluster.sessions("gpu1") == 1, VERDICT_S,
                        "one session on each instance")
        assert cluster.admin("set server moshid/gpu0 state drain").strip() == ""
        await await_for(lambda: cluster.status("gpu0") == "DRAIN", VERDICT_S, "gpu0 DRAIN")
        new = (await held(cluster.front))[0]
        assert new.accepted, new.res.errors
        assert cluster.sessions("gpu0") == 1 and cluster.sessions("gpu1") == 2
        assert all(not x.recv.done() and x.res.errors == [] for x in s)
        cluster.admin("set server moshid/gpu0 state ready")
        await await_for(lambda: cluster.status("gpu0") == "UP", VERDICT_S, "gpu0 UP after ready")
        for x in s + [new]:
            await x.close()

    asyncio.run(go())


def test_limits_and_logs_see_each_client(cluster_one_per_client):
    """One connection per client address per instance, through HAProxy's
    PROXY header: client A (127.0.0.3) gets one session on each instance
    (leastconn) and a 429 for a third; client B (127.0.0.4) still gets one.
    Without the header every session would come from the proxy's address
    and B would be refused too. The instances log the clients, never the
    proxy."""
    c = cluster_one_per_client
    socks = []
    try:
        a1 = upgrade_from(c.front, "127.0.0.3")
        socks.append(a1[0])
        wait_for(lambda: c.sessions("gpu0") + c.sessions("gpu1") == 1, VERDICT_S, "A's first session")
        a2 = upgrade_from(c.front, "127.0.0.3")
        socks.append(a2[0])
        wait_for(lambda: c.sessions("gpu0") == 1 and c.sessions("gpu1") == 1, VERDICT_S, "one on each instance")
        a3 = upgrade_from(c.front, "127.0.0.3")
        socks.append(a3[0])
        b1 = upgrade_from(c.front, "127.0.0.4")
        socks.append(b1[0])
        assert (a1[1], a2[1], a3[1], b1[1]) == (101, 101, 429, 101)
    finally:
        for s in socks:
            s.close()
    def read_logs():
        return "".join(open(log).read() for _, _, log in c.procs.values())

    def opened_peers():
        return re.findall(r"event=session_open id=\d+ peer=(\S+)", read_logs())

    # a 101 can reach the client before its instance has written the
    # session_open line: wait for the three lines, then check them
    wait_for(lambda: len(opened_peers()) >= 3, VERDICT_S, "three session_open lines")
    logs = read_logs()
    opened = opened_peers()
    assert sorted(opened) == ["127.0.0.3", "127.0.0.3", "127.0.0.4"], opened
    assert re.search(r"event=http_refused peer=127\.0\.0\.3 status=429", logs), logs[-3000:]
    assert "peer=127.0.0.2" not in logs
