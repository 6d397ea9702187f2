"""config/nginx.conf with the test's ports: two moshid instances (demo model,
sessions.max = 2) behind the real nginx on loopback, where nginx is
installed (it is not in tests/deps.txt: Debian's package starts a web server
on port 80 when installed on a host with systemd; skipped without it).

What free nginx does and does not do (docs/operations.md): a session
streams through it; least_conn spreads sessions; it never reads /healthz, so
an instance that is full still gets a new session and answers it "server
busy" (1013); an instance stopped with SIGTERM ends its sessions (1001 and
the text) and, once its listener is closed, new sessions go to the other."""
import asyncio
import pathlib
import shutil
import signal
import subprocess

import pytest

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon, wait_for
from test_daemon import frames_in, lag
from test_haproxy import SLOTS, VERDICT_S, await_for, free_port, held

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "config" / "nginx.conf"
START_S = 20


def nginx_bin():
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if pathlib.Path(p).exists()), None)


def render_config(tmp, front, a, b):
    """A whole nginx.conf (foreground, files under tmp) around
    config/nginx.conf with the test's ports."""
    text = TEMPLATE.read_text()
    for old, new in (("listen 8998;", f"listen 127.0.0.1:{front};"), ("127.0.0.1:9000", f"127.0.0.1:{a}"),
                     ("127.0.0.1:9001", f"127.0.0.1:{b}")):
        assert old in text, f"config/nginx.conf has no '{old}'"
        text = text.replace(old, new)
    (tmp / "moshid.conf").write_text(text)
    temps = "\n".join(f"    {k}_temp_path {tmp}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = f"""daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
{temps}
    include {tmp}/moshid.conf;
}}
"""
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "0":
        main = "user root;\n" + main  # workers must reach the test's files
    path = tmp / "nginx.conf"
    path.write_text(main)
    return path


class NginxCluster:
    def __init__(self, build_dir, tmp_path):
        self.tmp = tmp_path
        self.procs = {}
        for name in ("gpu0", "gpu1"):
            d = tmp_path / name
            d.mkdir()
            self.procs[name] = start_daemon(build_dir, d, sessions=SLOTS, limits__idle_timeout_s=600)
        self.front = free_port()
        cfg = render_config(tmp_path, self.front, self.port("gpu0"), self.port("gpu1"))
        t = subprocess.run([nginx_bin(), "-t", "-p", str(tmp_path), "-c", str(cfg)], capture_output=True, text=True)
        assert t.returncode == 0, t.stderr
        self.nginx = subprocess.Popen([nginx_bin(), "-p", str(tmp_path), "-c", str(cfg)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                return get(self.front, "/healthz")[0] == 200
            except OSError:
                return False
        wait_for(up, START_S, "nginx to answer /healthz")

    def port(self, name):
        return self.procs[name][1]

    def sessions(self, name):
        import json
        return json.loads(get(self.port(name), "/healthz")[1])["sessions"]

    def close(self):
        self.nginx.send_signal(signal.SIGQUIT)
        try:
            self.nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.nginx.kill()
        for p, port, log in self.procs.values():
            stop_daemon(p, log)


@pytest.fixture
def ncluster(build_dir, tmp_path):
    if not nginx_bin():
        pytest.skip("nginx not installed (optional; Debian: nginx)")
    c = NginxCluster(build_dir, tmp_path)
    yield c
    c.close()


def test_session_streams_through_nginx(ncluster):
    pcm = mc.speech_pcm("Through nginx and back.", seconds=3.0)
    n = frames_in(pcm) - lag(ncluster.front)
    res = asyncio.run(mc.session(ncluster.front, pcm=pcm, realtime=False, expect_audio=n))
    assert res.errors == []
    assert res.handshake is not None and len(res.audio) == n


def test_full_instance_still_gets_sessions(ncluster):
    """least_conn spreads; but a full instance is not known as full."""
    async def go():
        s = await held(ncluster.front, 2)
        assert all(x.accepted for x in s)
        await await_for(lambda: ncluster.sessions("gpu0") == 1 and ncluster.sessions("gpu1") == 1, VERDICT_S,
                        "one session on each instance")
        # fill gpu0 directly: nginx counts one connection on each, so the
        # next session goes to either, and a session nginx sends to gpu0
        # is refused as busy
        direct = await held(ncluster.port("gpu0"), SLOTS - 1)
        assert ncluster.sessions("gpu0") == SLOTS
        outcomes = []
        for _ in range(4):
            x = (await held(ncluster.front))[0]
            if not x.accepted:
                assert await x.ended() == 1013 and any(e.startswith("server busy") for e in x.res.errors)
            outcomes.append(x.accepted)
            await x.close()
            await await_for(lambda: ncluster.sessions("gpu1") == 1, VERDICT_S, "gpu1 back to one session")
        assert False in outcomes, "nginx never sent a session to the full instance: round robin between ties expected"
        for x in s + direct:
            await x.close()

    asyncio.run(go())


def test_sigterm_then_the_other(ncluster):
    async def go():
        s = await held(ncluster.front, 2)
        await await_for(lambda: ncluster.sessions("gpu0") == 1 and ncluster.sessions("gpu1") == 1, VERDICT_S,
                        "one session on each instance")
        p0 = ncluster.procs["gpu0"][0]
        p0.send_signal(signal.SIGTERM)
        done, _ = await asyncio.wait([x.recv for x in s], timeout=VERDICT_S, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1
        gone = next(x for x in s if x.recv in done)
        assert await gone.ended() == 1001 and "server is shutting down" in gone.res.errors
        assert p0.wait(timeout=15) == 0
        # listener closed: a refused connection goes to the next instance
        new = (await held(ncluster.front))[0]
        assert new.accepted, new.res.errors
        assert ncluster.sessions("gpu1") == 2
        for x in s + [new]:
            await x.close()

    asyncio.run(go())
