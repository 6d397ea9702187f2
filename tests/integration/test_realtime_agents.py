"""/v1/realtime with the agent frameworks' OpenAI Realtime clients, driven
directly (no LiveKit server, no Pipecat transport): LiveKit Agents'
RealtimeModel session and Pipecat's OpenAIRealtimeLLMService connect to
ws://127.0.0.1:PORT/v1 as their documented base URLs say, stream a tone
paced by the model, and get audio and transcript back with no error; the
LiveKit session then interrupts (response.cancel). They run in
build/venv-agents (tests/requirements-agents.txt), through rt_agents.py."""
import json
import os
import subprocess

import pytest

from helpers import start_daemon, stop_daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, "build", "venv-agents", "bin", "python")
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rt_agents.py")


@pytest.fixture(scope="module")
def rtd(build_dir, tmp_path_factory):
    p, port, log = start_daemon(build_dir, tmp_path_factory.mktemp("rta"), sessions=2)
    yield port, log
    stop_daemon(p, log)


@pytest.mark.parametrize("client", ["livekit", "pipecat"])
def test_agent_client_streams(rtd, client):
    port, log = rtd
    assert os.path.exists(PY), "build/venv-agents is missing: `make test` installs tests/requirements-agents.txt there"
    r = subprocess.run([PY, "-W", "ignore", DRIVER, client, str(port)], capture_output=True, text=True, timeout=180)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    assert r.returncode == 0 and lines, r.stdout[-2000:] + r.stderr[-4000:]
    out = json.loads(lines[-1])
    assert out["errors"] == [], out
    assert out["audio"] >= 20 and out["text"] > 0, out
    # no error event went to the client (the daemon logs each one), but
    # for the interrupt finding no response when the model fell silent
    # just before it
    errs = [l for l in open(log) if "event=realtime_error" in l and "code=response_cancel_not_active" not in l]
    assert not errs, errs
