#!/usr/bin/env python3
"""bench_handshake.py - time from WebSocket open to handshake on the demo
model (make bench-personas): sessions without a persona, restored from the
configured persona's snapshot (persona=demo), and primed on demand
(voice_prompt + a role text never seen before, so every one misses the
cache and primes), each over N connections one after another. Prints
p50 / p99 and the ratio on-demand / restored. "Ready at once":
restored p50 < 100 ms and p99 < 250 ms.

  build/venv/bin/python tests/bench/bench_handshake.py --moshid build/moshid --demo build/demo [-n 20]
"""
import argparse
import asyncio
import os
import subprocess
import sys
import time

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(moshid, demo):
    args = [moshid, "--config", os.path.join(ROOT, "config/demo/moshid-demo.json"),
            "--set", f"model.lm_dir={demo}/lm", "--set", f"model.mimi={demo}/mimi.safetensors",
            "--set", f"model.mimi_config={demo}/mimi.json", "--set", f"model.tokenizer={demo}/tokenizer.model",
            "--set", "server.port=0", "--set", "log.level=warn"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if "serving on" not in line:
        p.kill()
        sys.exit("moshid did not start: " + line)
    return p, int(line.split("://")[1].split(":")[1].split("/")[0])


async def handshake_ms(port, query):
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat?{query}") as ws:
            async for m in ws:
                if m.type != aiohttp.WSMsgType.BINARY:
                    continue
                if m.data[0] == 0:
                    return 1000.0 * (time.monotonic() - t0)
                if m.data[0] == 5:
                    raise RuntimeError(m.data[1:].decode())
    raise RuntimeError("closed before the handshake")


def role(i):
    """A role text of its own per connection (letters only: the demo
    tokenizer knows no digits, and texts that tokenize alike share a
    snapshot), URL-encoded."""
    word = "".join("abcdefghij"[int(c)] for c in str(i))
    return f"You%20are%20the%20assistant%20{word}%20of%20this%20benchmark."


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moshid", default=os.path.join(ROOT, "build/moshid"))
    ap.add_argument("--demo", default=os.path.join(ROOT, "build/demo"))
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    p, port = start(a.moshid, os.path.abspath(a.demo))
    try:
        cases = [("no persona", lambda i: "text_temperature=0"),
                 ("persona=demo (restore)", lambda i: "persona=demo"),
                 ("on demand (prime)", lambda i: "voice_prompt=demo.flac&text_prompt=" + role(i))]
        res = {}
        for name, q in cases:
            res[name] = [asyncio.run(handshake_ms(port, q(i))) for i in range(a.n)]
        print(f"handshake (WebSocket open -> handshake), {a.n} connections each, demo model, CPU, "
              f"load {os.getloadavg()[0]:.2f}")
        for name, xs in res.items():
            print(f"  {name:24s} p50 {pct(xs, 0.5):8.1f} ms  p99 {pct(xs, 0.99):8.1f} ms")
        r, d = res["persona=demo (restore)"], res["on demand (prime)"]
        print(f"  on demand / restore: {pct(d, 0.5) / pct(r, 0.5):.0f}x (p50)")
        ok = pct(r, 0.5) < 100 and pct(r, 0.99) < 250
        print(f"  ready at once (restore p50 < 100 ms, p99 < 250 ms): {'yes' if ok else 'NO'}")
    finally:
        p.terminate()
        p.wait(timeout=15)


if __name__ == "__main__":
    main()
