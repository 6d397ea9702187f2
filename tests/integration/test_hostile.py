"""Hostile load at the connection layer, short version: moshid on
the demo model while tests/tools/hostile.py holds 500 idle and 100
slowloris connections from other addresses (127.0.0.2-21; the monitor and
the session connect from 127.0.0.1). /healthz must answer within 100 ms
(the issue's bound) and a new session must start and stream. `make
hostile` (tests/long.mk) runs the long version with streaming sessions,
an upgrade flood and connect-drop."""
import asyncio
import json
import os
import sys
import threading

import pytest

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon
from test_daemon import frames_in, lag

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import hostile  # noqa: E402

# The bound for /healthz under this load. The monitor measures
# connect -> complete answer over loopback on a fresh connection; on a
# loaded 2-core CI machine a scheduling hiccup of the monitor itself can
# cost tens of ms, so the bound is held by the 90th percentile of ~40
# requests and the maximum gets a wide 1 s (a starved server took 25 s).
HEALTHZ_P90_MS = 100
HEALTHZ_MAX_MS = 1000
DURATION_S = 10


@pytest.fixture(scope="module")
def daemon(build_dir, tmp_path_factory):
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("h"), sessions=4)
    yield port, log
    stop_daemon(p, log)


def test_healthz_and_a_session_under_idle_and_slowloris(daemon):
    port, log = daemon
    out = {}
    # a session streams while the attack runs (started after the loops
    # have their connections open)
    pcm = mc.speech_pcm("Streaming while the connection layer is under attack.", seconds=3.0)
    n = frames_in(pcm) - lag(port)

    def session():
        import time
        time.sleep(3.0)
        out["res"] = asyncio.run(mc.session(port, pcm=pcm, expect_audio=n, tail_s=5))

    t = threading.Thread(target=session)
    t.start()
    rep = hostile.run(f"http://127.0.0.1:{port}", DURATION_S, idle=500, slowloris=100, healthz_every=0.2,
                      warmup=2.0)
    t.join(timeout=60)
    hz = rep["healthz"]
    print(json.dumps({k: v for k, v in rep.items() if k != "sources"}, indent=1))
    assert hz["failed"] == 0 and hz["n"] >= 10 and set(hz["status"]) == {"200"}, hz
    ms = sorted(hz["all_ms"])
    assert ms[int(0.9 * len(ms))] < HEALTHZ_P90_MS, hz
    assert hz["max_ms"] < HEALTHZ_MAX_MS, hz
    # the attack really was there: the server closed what it held
    assert rep["idle"]["opened"] >= 500 and rep["slowloris"]["opened"] >= 100
    refused = rep["server_refused"]
    assert refused.get("moshid_handshakes_evicted_total", 0) + refused.get("moshid_handshake_timeouts_total", 0) > 0
    res = out["res"]
    assert res.errors == [] and res.handshake is not None
    assert len(res.audio) == n
    assert get(port, "/healthz")[0] == 200


def test_unmasked_frame_closes_only_its_session(daemon):
    """On the daemon: a connection that sends an unmasked frame is closed
    with 1002 and counted in /metrics; a session streaming beside it gets
    all its audio."""
    from test_overload import metric
    from test_srv_defects import frame, read_close, read_http, upgrade
    port, log = daemon
    before = metric(port, "moshid_ws_unmasked_closed_total")
    pcm = mc.speech_pcm("A good session beside a bad one.", seconds=2.0)
    n = frames_in(pcm) - lag(port)
    out = {}

    def session():
        out["res"] = asyncio.run(mc.session(port, pcm=pcm, expect_audio=n, tail_s=5))

    t = threading.Thread(target=session)
    t.start()
    s = upgrade(port)
    st, _, _ = read_http(s)
    assert st == 101
    s.sendall(frame(b"\x01" + b"\x00" * 40, mask=False))
    code, reason = read_close(s)
    assert code == 1002 and b"masked" in reason
    t.join(timeout=60)
    res = out["res"]
    assert res.errors == [] and len(res.audio) == n
    assert metric(port, "moshid_ws_unmasked_closed_total") == before + 1
