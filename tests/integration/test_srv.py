"""The HTTP/WebSocket front end (daemon/net/srv.c) driven over real sockets
through tests/tools/srv_echo.c: routing, query decoding, message
reassembly, the size limit, asynchronous close, a clean shutdown."""
import asyncio
import signal
import subprocess
import urllib.error
import urllib.request

import aiohttp
import pytest


@pytest.fixture
def echo(build_dir):
    p = subprocess.Popen([str(build_dir / "tests" / "srv_echo"), "65536"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("port="), line
    port = int(line.strip().split("=")[1])
    yield p, port
    if p.poll() is None:
        p.kill()
        p.wait()


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_http_routes(echo):
    _, port = echo
    st, body = http_status(f"http://127.0.0.1:{port}/healthz")
    assert st == 200 and b'"ready":true' in body
    assert http_status(f"http://127.0.0.1:{port}/nope")[0] == 404
    assert http_status(f"http://127.0.0.1:{port}/metrics")[0] == 404  # not claimed by the echo handler


async def _session(port):
    async with aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{port}/api/chat?text_prompt=a%26b%3Dc+d&seed=-1&x=%25"
        async with s.ws_connect(url) as ws:
            m = await ws.receive(timeout=5)
            # one decoded "name=value" per argument; %26 stays inside its value
            assert m.data == b"text_prompt=a&b=c d\nseed=-1\nx=%\n"
            for size in (1, 1000, 65536):
                payload = bytes([1]) + bytes(i % 251 for i in range(size - 1))
                await ws.send_bytes(payload)
                m = await ws.receive(timeout=5)
                assert m.data == payload
            await ws.send_bytes(b"x" * 65537)
            m = await ws.receive(timeout=5)
            assert m.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
            assert ws.close_code == 1009
        with pytest.raises(aiohttp.ClientError):
            async with s.ws_connect(f"http://127.0.0.1:{port}/other"):
                pass
        async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat") as ws:
            await ws.receive(timeout=5)
            await ws.send_bytes(b"close")
            await ws.receive(timeout=5)
            assert ws.close_code == 4000


def test_websocket(echo):
    _, port = echo
    asyncio.run(_session(port))


def test_clean_shutdown_with_open_session(echo):
    p, port = echo

    async def hold_and_stop():
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat") as ws:
                await ws.receive(timeout=5)
                p.send_signal(signal.SIGTERM)
                m = await ws.receive(timeout=10)
                assert m.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)

    asyncio.run(hold_and_stop())
    assert p.wait(timeout=10) == 0, p.stderr.read()
