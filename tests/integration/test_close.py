"""Closes the daemon decides (slow reader, idle timeout) against a client
that stops reading its socket but keeps it open: the session's engine slot
is released as soon as the close is decided (black box: /healthz "free"),
another session can take it at once, and the close has a hard deadline
(limits.close_timeout_s) after which the connection is dropped.

Every wait polls the daemon with a deadline (no fixed sleeps), with margins
meant for a loaded 2-core machine."""
import asyncio
import json
import socket
import threading
import time

import numpy as np
import pytest

import moshi_client as mc
from helpers import get, metric, start_daemon, stop_daemon, wait_for

FRAME = mc.FRAME
# Generous bounds for a loaded machine: attaching a slot, a slow reader
# filling the socket buffers (a few seconds of audio), a close.
ATTACH_S = 20
VERDICT_S = 40
MARGIN_S = 15


def health(port):
    return json.loads(get(port, "/healthz")[1])


def errors_total(port, kind):
    return metric(port, f'moshid_errors_total{{kind="{kind}"}}', default=0)


class StuckClient:
    """A WebSocket client that reads the upgrade answer, then never reads its
    socket again (a small receive buffer, so the daemon's output backs up
    within seconds) but keeps it open. With stream=True a thread sends
    audio in real time (80 ms frames) until stop() or until the daemon drops
    the connection (then `dropped` is set)."""

    def __init__(self, port, stream):
        self.sock = mc.raw_ws_connect(port, rcvbuf=2048)
        self.sock.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "connection closed during the upgrade"
            head += chunk
        assert head.split(b"\r\n")[0].split()[1] == b"101", head
        self.stopping = threading.Event()
        self.dropped = threading.Event()
        self.thread = None
        if stream:
            self.thread = threading.Thread(target=self._stream, daemon=True)
            self.thread.start()

    def _stream(self):
        wr = mc.sphn.OpusStreamWriter(mc.SR)
        rng = np.random.default_rng(7)
        t0 = time.monotonic()
        i = 0
        while not self.stopping.is_set():
            b = wr.append_pcm((0.1 * rng.standard_normal(FRAME)).astype(np.float32))
            try:
                if b:
                    self.sock.sendall(mc.ws_frame(b"\x01" + b))
            except OSError:  # reset, broken pipe, or a daemon that stopped reading: gone
                self.dropped.set()
                return
            i += 1
            self.stopping.wait(max(0.0, t0 + i * FRAME / mc.SR - time.monotonic()))

    def stop(self):
        self.stopping.set()
        if self.thread:
            self.thread.join(timeout=15)
            assert not self.thread.is_alive()

    def read_to_end(self, timeout):
        """Read until the daemon's side is closed (EOF or reset); the bytes
        read. Fails when the connection is still open after timeout s."""
        deadline = time.monotonic() + timeout
        got = 0
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return got
            except socket.timeout:
                break
            if not chunk:
                return got
            got += len(chunk)
        raise AssertionError(f"the connection is still open after {timeout} s ({got} bytes read)")

    def close(self):
        self.stop()
        self.sock.close()


def stuck_daemon(build_dir, tmp_path, **over):
    """One slot, a small kernel send buffer and a short output queue, so a
    client that does not read trips the slow-reader verdict in seconds (1 s
    of queue: a loop thread held up for a moment on a busy machine does not
    look like a slow reader)."""
    return start_daemon(build_dir, tmp_path, sessions=1, limits__output_queue_s=1.0,
                        limits__send_buffer_bytes=4096, **over)


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "silent"])
def test_stuck_client_frees_its_slot_at_once(build_dir, tmp_path, streaming):
    """A client that stops reading loses its slot as soon as the daemon
    decides to close it (slow reader while streaming, idle timeout while
    silent), not when TCP finally closes: /healthz "free" is back to the
    full count while that connection is still open ("sessions" 1; the
    close deadline is 60 s here), and another session attaches and gets its
    handshake."""
    p, port, log = stuck_daemon(build_dir, tmp_path, limits__idle_timeout_s=3, limits__close_timeout_s=60)
    stuck = None
    try:
        assert health(port)["free"] == 1
        stuck = StuckClient(port, stream=streaming)
        wait_for(lambda: health(port)["free"] == 0, ATTACH_S, "the stuck client to take the slot")
        def slot_back():
            h = health(port)
            return h if h["free"] == 1 else None

        h = wait_for(slot_back, VERDICT_S, "the slot to come back")
        kind = "slow_reader" if streaming else "idle_timeout"
        assert errors_total(port, kind) == 1
        # The stuck connection is still open: streaming, its socket buffers
        # are full, so the close cannot go through before the (60 s)
        # deadline; silent, the close frame goes out but the daemon waits
        # (2 s) for a reply that never comes.
        assert h["sessions"] == 1 and not stuck.dropped.is_set(), h
        res = asyncio.run(mc.session(port, tail_s=0.5))
        assert res.handshake is not None and res.errors == [], res.errors
        if streaming:
            assert not stuck.dropped.is_set()
    finally:
        if stuck:
            stuck.close()
        stop_daemon(p, log)


def test_close_deadline_drops_a_peer_that_never_reads(build_dir, tmp_path):
    """The close of a slow reader cannot flush (the peer reads nothing), so
    limits.close_timeout_s (2 s here) ends it: the daemon drops the
    connection (/healthz "sessions" back to 0 while the client still does
    not read) and the peer then finds its connection closed."""
    close_s = 2
    p, port, log = stuck_daemon(build_dir, tmp_path, limits__close_timeout_s=close_s)
    stuck = None
    try:
        stuck = StuckClient(port, stream=True)
        wait_for(lambda: health(port)["free"] == 0, ATTACH_S, "the stuck client to take the slot")
        wait_for(lambda: errors_total(port, "slow_reader") == 1, VERDICT_S, "the slow-reader verdict")
        wait_for(lambda: health(port)["sessions"] == 0, close_s + MARGIN_S, "the connection to be dropped")
        stuck.stop()
        stuck.read_to_end(MARGIN_S)
        assert health(port)["free"] == 1
    finally:
        if stuck:
            stuck.close()
        stop_daemon(p, log)


def test_fast_readers_of_bursts_are_not_slow(build_dir, tmp_path):
    """Clients that read everything, sent bursts of output (their input
    faster than real time, so the engine steps frame after frame for all of
    them), are not slow readers: the verdict is the age of the oldest audio
    the socket has not taken, not how many frames are queued at one moment,
    and each writable callback sends all the socket takes."""
    p, port, log = start_daemon(build_dir, tmp_path, limits__output_queue_s=1.0)
    try:
        pcm = mc.speech_pcm("A burst of frames for readers that keep up.", seconds=3.0)
        n = len(pcm) // FRAME - 1 - {"kyutai": 1, "personaplex": 2}[health(port)["variant"]]

        async def burst():
            # tail_s bounds the wait for the last audio (the session ends as
            # soon as all n came): 8 bursts take the engine a while on a
            # slow build (3 s was too short under ASan beside other work)
            return await asyncio.gather(*[mc.session(port, pcm=pcm, realtime=False, expect_audio=n, tail_s=60)
                                          for _ in range(8)])

        for res in asyncio.run(burst()):
            assert res.errors == [] and len(res.audio) == n, res.errors
        assert errors_total(port, "slow_reader") == 0
    finally:
        stop_daemon(p, log)
