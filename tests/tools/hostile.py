#!/usr/bin/env python3
"""hostile.py - connection-level hostile load against moshid (or srv_echo),
while /healthz is timed from another address.

  hostile.py --url http://127.0.0.1:PORT --duration S --idle N --slowloris N \\
             --flood-rate R --drop-rate R [--json OUT] [--sources A-B]

  idle       N connections that send nothing; each one the server closes is
             opened again (after --reconnect-delay)
  slowloris  N connections that send a request line, then one header byte a
             second, never finishing; reopened when closed
  flood      R WebSocket upgrades a second on /api/chat (read the answer, close)
  drop       R connections a second that connect and close at once (a reset)

The attack connections come from --sources (a range of local addresses;
against a loopback target the default is 127.0.0.2-127.0.0.21, i.e. other
"hosts" than the monitor, which connects from 127.0.0.1). Every
--healthz-every seconds a fresh connection asks for /healthz; the report
has its latency (connect to complete answer) p50 / p99 / max, failures,
what each loop did, and the server's refusal counters (/metrics, or
srv_echo's /healthz "refused"). Printed as JSON (and written to --json).
"""
import argparse
import asyncio
import base64
import ipaddress
import json
import multiprocessing
import os
import re
import socket
import struct
import sys
import time
import urllib.parse

REFUSAL_METRICS = ("moshid_connections_refused_rate_total", "moshid_connections_refused_ip_table_total",
                   "moshid_handshake_timeouts_total", "moshid_handshakes_evicted_total",
                   "moshid_connections_refused_busy_total", "moshid_connections_refused_per_ip_total",
                   "moshid_http_bad_requests_total")


def parse_sources(spec, host):
    """The attack source addresses: 'A-B' (IPv4 range), 'A,B,...', 'none'
    (the OS picks), or 'auto'."""
    if spec == "none":
        return [None]
    if spec == "auto":
        if ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
            spec = "127.0.0.2-127.0.0.21"
        else:
            return [None]
    if "-" in spec:
        a, b = (ipaddress.IPv4Address(x) for x in spec.split("-", 1))
        return [str(ipaddress.IPv4Address(i)) for i in range(int(a), int(b) + 1)]
    return spec.split(",")


class Attack:
    def __init__(self, host, port, sources, reconnect_delay):
        self.host, self.port, self.sources = host, port, sources
        self.delay = reconnect_delay
        self.stop = False
        self.n = 0
        self.stats = {"idle": {"opened": 0, "closed_by_server": 0, "connect_failed": 0},
                      "slowloris": {"opened": 0, "closed_by_server": 0, "connect_failed": 0, "bytes_sent": 0},
                      "flood": {"sent": 0, "status": {}, "no_answer": 0},
                      "drop": {"sent": 0, "connect_failed": 0}}

    def source(self):
        self.n += 1
        return self.sources[self.n % len(self.sources)]

    async def open(self):
        src = self.source()
        return await asyncio.wait_for(asyncio.open_connection(
            self.host, self.port, local_addr=(src, 0) if src else None), timeout=10)

    async def wait_closed(self, r):
        """Until the server closes the connection (or we stop)."""
        while not self.stop:
            try:
                d = await asyncio.wait_for(r.read(65536), timeout=0.5)
            except asyncio.TimeoutError:
                continue
            except (ConnectionError, OSError):
                return True
            if not d:
                return True
        return False

    async def idle_loop(self):
        st = self.stats["idle"]
        while not self.stop:
            try:
                r, w = await self.open()
            except (OSError, asyncio.TimeoutError):
                st["connect_failed"] += 1
                await asyncio.sleep(self.delay)
                continue
            st["opened"] += 1
            if await self.wait_closed(r):
                st["closed_by_server"] += 1
            w.close()
            await asyncio.sleep(self.delay)

    async def slowloris_loop(self):
        st = self.stats["slowloris"]
        while not self.stop:
            try:
                r, w = await self.open()
            except (OSError, asyncio.TimeoutError):
                st["connect_failed"] += 1
                await asyncio.sleep(self.delay)
                continue
            st["opened"] += 1
            closed = asyncio.ensure_future(self.wait_closed(r))
            try:
                w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not self.stop and not closed.done():
                    await asyncio.sleep(1.0)
                    w.write(b"a")
                    st["bytes_sent"] += 1
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            if await closed:
                st["closed_by_server"] += 1
            w.close()
            await asyncio.sleep(self.delay)

    async def one_upgrade(self):
        st = self.stats["flood"]
        st["sent"] += 1
        try:
            r, w = await self.open()
        except (OSError, asyncio.TimeoutError):
            st["no_answer"] += 1
            return
        key = base64.b64encode(os.urandom(16)).decode()
        try:
            w.write((f"GET /api/chat HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            line = await asyncio.wait_for(r.readline(), timeout=10)
            code = line.split()[1].decode() if line.startswith(b"HTTP/") else "none"
        except (ConnectionError, OSError, asyncio.TimeoutError, IndexError):
            code = "none"
        if code == "none":
            st["no_answer"] += 1
        else:
            st["status"][code] = st["status"].get(code, 0) + 1
        w.close()

    async def one_drop(self):
        st = self.stats["drop"]
        st["sent"] += 1
        try:
            r, w = await self.open()
        except (OSError, asyncio.TimeoutError):
            st["connect_failed"] += 1
            return
        sock = w.get_extra_info("socket")
        if sock is not None:  # a reset, not a FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.close()

    async def paced(self, rate, fn):
        if rate <= 0:
            return
        t0, i, tasks = time.monotonic(), 0, set()
        while not self.stop:
            i += 1
            t = asyncio.ensure_future(fn())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        if tasks:
            await asyncio.wait(tasks, timeout=10)


def http_get(host, port, path, timeout=10):
    """Status and body of GET path on a fresh connection from the default
    address, and the seconds from connect to the complete answer."""
    t0 = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                raise ConnectionError("closed before the answer")
            buf += d
        head, _, body = buf.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)content-length:\s*(\d+)", head)
        n = int(m.group(1)) if m else None
        while n is None or len(body) < n:
            d = s.recv(65536)
            if not d:
                if n is None:
                    break
                raise ConnectionError("closed in the body")
            body += d
        return int(head.split()[1]), body, time.monotonic() - t0


def server_refusals(host, port):
    """The server's refusal counters: moshid's /metrics, else srv_echo's
    /healthz "refused"; {} when neither answers."""
    try:
        st, body, _ = http_get(host, port, "/metrics")
        if st == 200:
            out = {}
            for line in body.decode().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] in REFUSAL_METRICS:
                    out[parts[0]] = int(float(parts[1]))
            return out
        st, body, _ = http_get(host, port, "/healthz")
        return json.loads(body).get("refused", {})
    except (OSError, ValueError):
        return {}


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _attack(conn, host, port, sources, reconnect_delay, duration, idle, slowloris, flood_rate, drop_rate):
    """The attack loops (a process of their own, so that their load does
    not delay the monitor's event handling); stats go back through conn."""
    async def go():
        a = Attack(host, port, sources, reconnect_delay)
        loops = [asyncio.ensure_future(a.idle_loop()) for _ in range(idle)]
        loops += [asyncio.ensure_future(a.slowloris_loop()) for _ in range(slowloris)]
        loops.append(asyncio.ensure_future(a.paced(flood_rate, a.one_upgrade)))
        loops.append(asyncio.ensure_future(a.paced(drop_rate, a.one_drop)))
        await asyncio.sleep(duration)
        a.stop = True
        await asyncio.wait(loops, timeout=15)
        return a.stats
    conn.send(asyncio.run(go()))
    conn.close()


def run(url, duration, idle=0, slowloris=0, flood_rate=0.0, drop_rate=0.0, sources="auto",
        healthz_every=0.2, reconnect_delay=0.25, warmup=1.0):
    """Run the loops for duration seconds in a child process while this
    one times /healthz (after warmup seconds, once the loops have opened
    their connections); the report."""
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port or 80
    srcs = parse_sources(sources, host)
    before = server_refusals(host, port)
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_attack, args=(child, host, port, srcs, reconnect_delay, duration, idle, slowloris,
                                         flood_rate, drop_rate), daemon=True)
    p.start()
    child.close()
    lat, failed, statuses = [], 0, {}
    t0 = time.monotonic()
    time.sleep(min(warmup, duration))
    while time.monotonic() - t0 < duration:
        try:
            st, _, dt = http_get(host, port, "/healthz")
            statuses[str(st)] = statuses.get(str(st), 0) + 1
            lat.append(dt)
        except (OSError, ValueError):
            failed += 1
        time.sleep(healthz_every)
    stats = parent.recv() if parent.poll(duration + 30) else None
    p.join(timeout=10)
    if p.is_alive():
        p.kill()
    if stats is None:
        raise RuntimeError("the attack process sent no report")
    after = server_refusals(host, port)
    ms = [x * 1000 for x in lat]
    return {
        "url": url, "duration_s": duration, "sources": srcs if srcs != [None] else "default",
        "healthz": {"n": len(ms), "failed": failed, "status": statuses, "p50_ms": pct(ms, 0.5),
                    "p99_ms": pct(ms, 0.99), "max_ms": max(ms) if ms else None, "all_ms": [round(x, 2) for x in ms]},
        "idle": dict(stats["idle"], target=idle), "slowloris": dict(stats["slowloris"], target=slowloris),
        "flood": dict(stats["flood"], rate=flood_rate), "drop": dict(stats["drop"], rate=drop_rate),
        "server_refused": {k: after.get(k, 0) - before.get(k, 0) for k in after},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--idle", type=int, default=0)
    ap.add_argument("--slowloris", type=int, default=0)
    ap.add_argument("--flood-rate", type=float, default=0)
    ap.add_argument("--drop-rate", type=float, default=0)
    ap.add_argument("--sources", default="auto")
    ap.add_argument("--healthz-every", type=float, default=0.2)
    ap.add_argument("--reconnect-delay", type=float, default=0.25)
    ap.add_argument("--json")
    args = ap.parse_args()
    rep = run(args.url, args.duration, args.idle, args.slowloris, args.flood_rate, args.drop_rate,
              args.sources, args.healthz_every, args.reconnect_delay)
    text = json.dumps(rep, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if rep["healthz"]["n"] and not rep["healthz"]["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
