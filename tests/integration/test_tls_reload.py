"""TLS certificate reload on SIGHUP: moshid starts with
certificate A; while a wss session streams, the files are replaced by
certificate B and the daemon gets SIGHUP: new connections see B, the open
session keeps streaming to its end. A pair that does not match keeps the
pair in use."""
import asyncio
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time

import aiohttp
import pytest

import moshi_client as mc
from helpers import start_daemon, stop_daemon
from test_daemon import frames_in

WAIT_S = 20


def make_pair(d, name):
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN=moshid-test-{name}"],
                   check=True, capture_output=True)
    return crt, key


def der(crt):
    return ssl.PEM_cert_to_DER_cert(open(crt).read())


def served_cert(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.getpeercert(binary_form=True)


def replace(src, dst):
    """Replace dst's contents atomically (as certbot-style renewals do)."""
    tmp = dst + ".new"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def wait_log(logname, text, after=0):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        data = open(logname).read()
        if text in data[after:]:
            return True
        time.sleep(0.05)
    return False


async def wss_session(port, pcm, started):
    """Stream pcm in real time over wss; the number of audio messages back."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    n_audio, errors = 0, []
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(f"https://127.0.0.1:{port}/api/chat", ssl=ctx, max_msg_size=0) as ws:
            while True:  # metadata, then the handshake
                m = await ws.receive(timeout=WAIT_S)
                assert m.type == aiohttp.WSMsgType.BINARY, m
                if m.data[0] == mc.K_HANDSHAKE:
                    break
            started.set()

            async def recv():
                nonlocal n_audio
                async for m in ws:
                    if m.type != aiohttp.WSMsgType.BINARY:
                        break
                    if m.data[0] == mc.K_AUDIO:
                        n_audio += 1
                    elif m.data[0] == mc.K_ERROR:
                        errors.append(m.data[1:].decode())

            rt = asyncio.ensure_future(recv())
            t0 = time.monotonic()
            for i, msg in enumerate(mc.sphn_messages(pcm)):
                if msg:
                    await ws.send_bytes(msg)
                delay = t0 + (i + 1) * mc.FRAME / mc.SR - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            try:
                await asyncio.wait_for(asyncio.shield(rt), timeout=5)
            except asyncio.TimeoutError:
                pass
            rt.cancel()
    return n_audio, errors


def test_sighup_reloads_the_pair_without_dropping_sessions(build_dir, tmp_path):
    d = str(tmp_path)
    a_crt, a_key = make_pair(d, "a")
    b_crt, b_key = make_pair(d, "b")
    crt, key = os.path.join(d, "server.crt"), os.path.join(d, "server.key")
    shutil.copyfile(a_crt, crt)
    shutil.copyfile(a_key, key)
    os.chmod(key, 0o600)
    p, port, log = start_daemon(build_dir, tmp_path, sessions=2, server__tls_cert=crt, server__tls_key=key)
    try:
        assert served_cert(port) == der(a_crt)
        pcm = mc.speech_pcm("A session that outlives a certificate change.", seconds=6.0)
        started, out = threading.Event(), {}
        t = threading.Thread(target=lambda: out.setdefault("r", asyncio.run(wss_session(port, pcm, started))))
        t.start()
        assert started.wait(WAIT_S)
        mark = len(open(log).read())
        replace(b_crt, crt)
        replace(b_key, key)
        p.send_signal(signal.SIGHUP)
        assert wait_log(log, "tls_reloaded", mark), open(log).read()[-2000:]
        assert served_cert(port) == der(b_crt)
        t.join(timeout=60)
        n_audio, errors = out["r"]
        assert errors == [] and n_audio >= frames_in(pcm) - 2  # the variant's lead
        # B's certificate with A's key: refused, B stays in use
        mark = len(open(log).read())
        replace(a_key, key)
        p.send_signal(signal.SIGHUP)
        assert wait_log(log, "is not the key of", mark), open(log).read()[-2000:]
        assert served_cert(port) == der(b_crt)
        # the pair in use again: nothing to reload (no tls_reloaded record)
        replace(b_key, key)
        mark = len(open(log).read())
        p.send_signal(signal.SIGHUP)
        assert wait_log(log, "reloaded log_level", mark)
        assert "tls_reloaded" not in open(log).read()[mark:]
        assert served_cert(port) == der(b_crt)
    finally:
        stop_daemon(p, log)
