"""moshid and its service manager (sd_notify, systemd Type=notify): the
datagrams it sends to $NOTIFY_SOCKET over a start, a reload and a stop,
and the watchdog pings, which stop while the engine is stuck in a step."""
import asyncio
import os
import signal
import socket
import tempfile
import time

import pytest

import moshi_client as mc
from helpers import start_daemon, stop_daemon

# $WATCHDOG_USEC given to the daemon, us: it pings every half of it or more
# often (notify.h: notify_watchdog_usec is half of it; the check runs twice
# per that period), so about every 0.25 s here.
WATCHDOG_USEC = 1000000
# A silence in the pings that proves they stopped, s: 12 ping periods.
STUCK_WINDOW_S = 3.0
# debug.step_delay_ms for the stuck engine: every step sleeps far longer
# than the window (the window fits inside the first step with seconds to
# spare, whatever the time the session took to start).
STEP_DELAY_MS = 8000


class Notify:
    """An AF_UNIX datagram socket standing in for systemd's notify socket;
    every datagram received is kept, with its arrival time, in msgs."""

    def __init__(self):
        # a short path: sun_path holds 108 bytes
        self.dir = tempfile.mkdtemp(prefix="mn", dir="/tmp")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.msgs = []

    def env(self):
        env = dict(os.environ, NOTIFY_SOCKET=self.path, WATCHDOG_USEC=str(WATCHDOG_USEC))
        env.pop("WATCHDOG_PID", None)   # set, it must be the daemon's pid (sd_watchdog_enabled)
        env.pop("JOURNAL_STREAM", None)
        return env

    def recv(self, timeout):
        """The next datagram as text, or None after timeout s of silence."""
        self.sock.settimeout(timeout)
        try:
            m = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        self.msgs.append((time.monotonic(), m))
        return m

    def wait_for(self, pred, timeout=20.0):
        """Receive until a datagram satisfies pred; returns it (fails after
        timeout s)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.recv(max(0.01, end - time.monotonic()))
            if m is not None and pred(m):
                return m
        raise AssertionError("no such datagram; got: %r" % [m for _, m in self.msgs][-20:])

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def notify():
    n = Notify()
    yield n
    n.close()


def fields(m):
    return dict(line.split("=", 1) for line in m.split("\n") if "=" in line)


def test_start_reload_stop(build_dir, tmp_path, notify):
    p, port, log = start_daemon(build_dir, tmp_path, env=notify.env())
    try:
        # start-up: the model load is announced and given time, then READY
        # with a status line (sent right after "serving on" was printed)
        ready = notify.wait_for(lambda m: "READY=1" in m)
        before = [m for _, m in notify.msgs[:-1]]
        assert any(m.startswith("STATUS=loading model") for m in before), before
        assert any(m.startswith("EXTEND_TIMEOUT_USEC=") for m in before), before
        st = fields(ready)["STATUS"]
        assert st.startswith(f"serving on http://127.0.0.1:{port}/") and "sessions 0 of 8" in st, st
        assert "backend cpu" in st, st
        # idle: watchdog pings, at least once per half period
        t0 = len(notify.msgs)
        notify.wait_for(lambda m: m.startswith("STATUS=serving on"), timeout=15)   # the ~10 s refresh
        pings = [t for t, m in notify.msgs[t0:] if m == "WATCHDOG=1"]
        assert len(pings) >= 10, pings
        assert max(b - a for a, b in zip(pings, pings[1:])) < WATCHDOG_USEC / 1e6, pings   # inside WatchdogSec
        # SIGHUP: RELOADING=1 (with the monotonic time), then READY=1 again
        p.send_signal(signal.SIGHUP)
        rel = notify.wait_for(lambda m: "RELOADING=1" in m)
        assert int(fields(rel)["MONOTONIC_USEC"]) > 0
        again = notify.wait_for(lambda m: "READY=1" in m)
        assert fields(again)["STATUS"].startswith("serving on"), again
        # SIGTERM: STOPPING=1
        p.send_signal(signal.SIGTERM)
        notify.wait_for(lambda m: m == "STOPPING=1")
        assert p.wait(timeout=15) == 0, open(log).read()[-3000:]
    finally:
        stop_daemon(p, log)


def test_watchdog_stops_while_engine_stuck(build_dir, tmp_path, notify):
    p, port, log = start_daemon(build_dir, tmp_path, env=notify.env(), debug__step_delay_ms=STEP_DELAY_MS,
                                limits__idle_timeout_s=60)
    try:
        notify.wait_for(lambda m: "READY=1" in m)
        # healthy and idle: pings come well inside the window
        for _ in range(4):
            assert notify.recv(STUCK_WINDOW_S) == "WATCHDOG=1"

        def observe():
            """After the session's first frames went in (the engine is in its
            first 8 s step): a window of STUCK_WINDOW_S without a ping."""
            end = time.monotonic() + 2 * STEP_DELAY_MS / 1000
            while time.monotonic() < end:
                m = notify.recv(STUCK_WINDOW_S)
                if m is None:
                    return True
                assert m == "WATCHDOG=1" or m.startswith("STATUS="), m
            return False

        got = {}

        async def extra(ws):
            got["silent"] = await asyncio.get_running_loop().run_in_executor(None, observe)

        pcm = mc.speech_pcm("hello there", seconds=1.0)
        res = asyncio.run(mc.session(port, pcm=pcm, extra=extra, tail_s=0.1))
        assert res.handshake is not None, res.errors
        assert got["silent"], "the watchdog pings went on while the engine was stuck in a step"
        p.send_signal(signal.SIGTERM)
        notify.wait_for(lambda m: m == "STOPPING=1")
        assert p.wait(timeout=20) == 0, open(log).read()[-3000:]
    finally:
        stop_daemon(p, log)
    text = open(log).read()
    assert "event=session_ready id=1 " in text and "event=session_closed id=1 " in text, text[-3000:]
    closed = [l for l in text.splitlines() if "event=session_closed" in l][0]
    for k in ("duration_s=", "frames_in=", "frames_out=", "frames_late=", "close_status=", "reason="):
        assert k in closed, closed
