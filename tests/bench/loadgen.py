"""Load generator: N clients stream speech to moshid in real time; reports the
server-side frame latency (from /metrics: input frame complete -> output
ready) p50/p99, late frames, the CPU per session, and the largest N held in
real time (p99 under 80 ms and no late frame) on this machine.

    python tests/bench/loadgen.py --moshid build/moshid --config-args "--config CFG ..." [--seconds 60] [--max-n 32]

The daemon is started here (so its CPU time can be read) with the given
configuration; N doubles from 1 until a level fails, then the last passing
level is reported."""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import moshi_client as mc  # noqa: E402


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def hist(body, name):
    b = {}
    for line in body.splitlines():
        if line.startswith(f"moshid_{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            b[float("inf") if le == "+Inf" else float(le)] = int(line.split()[-1])
    return dict(sorted(b.items()))


def counter(body, name):
    for line in body.splitlines():
        if line.startswith(f"moshid_{name} "):
            return float(line.split()[-1])
    return 0.0


def quantile(h0, h1, q):
    """q-quantile of the observations between two histogram snapshots
    (linear within a bucket)."""
    les = list(h1.keys())
    d = [h1[k] - h0.get(k, 0) for k in les]
    total = d[-1]
    if total == 0:
        return float("nan")
    target, prev_le, prev_c = q * total, 0.0, 0
    for le, c in zip(les, d):
        if c >= target:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (target - prev_c) / max(c - prev_c, 1)
        prev_le, prev_c = le, c
    return les[-2]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def expected_frames(port, pcm):
    """Output frames a session of pcm gets: the frames the daemon decodes
    (the client's encoder keeps its look-ahead, so one fewer than sent), less
    the variant's lag (Kyutai 1, PersonaPlex 2)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            body = r.read()
    except urllib.error.HTTPError as e:   # 503 while the last level's overload decays
        body = e.read()
    variant = json.loads(body)["variant"]
    return len(pcm) // mc.FRAME - 1 - {"kyutai": 1, "personaplex": 2}[variant]


def level(port, pid, n, seconds, pcm):
    expect = expected_frames(port, pcm)
    msgs = mc.sphn_messages(pcm)  # encoded once, before any session starts:
    # encoding inside the sessions would stall the client's event loop and
    # send bursts, which the server would (rightly) count as queued frames
    m0, c0 = metrics(port), cpu_seconds(pid)

    async def all_n():
        return await asyncio.gather(*[mc.session(port, msgs=msgs, expect_audio=expect, tail_s=5)
                                      for _ in range(n)])

    t0 = time.monotonic()
    results = asyncio.run(all_n())
    wall = time.monotonic() - t0
    m1, c1 = metrics(port), cpu_seconds(pid)
    h0, h1 = hist(m0, "frame_latency_seconds"), hist(m1, "frame_latency_seconds")
    late = counter(m1, "late_frames_total") - counter(m0, "late_frames_total")
    ok_sessions = sum(1 for r in results if not r.errors and len(r.audio) == expect)
    return {
        "n": n, "seconds": seconds, "wall_s": round(wall, 1),
        "p50_ms": round(1000 * quantile(h0, h1, 0.5), 1), "p99_ms": round(1000 * quantile(h0, h1, 0.99), 1),
        "late_frames": int(late), "complete_sessions": ok_sessions,
        "cpu_per_session_pct": round(100 * (c1 - c0) / (seconds * n), 1),
    }


def held(r, n):
    return r["p99_ms"] < 80 and r["late_frames"] == 0 and r["complete_sessions"] == n


def search(moshid, config_args, seconds, start_n, max_n, pcm, label):
    """The largest N held in real time: N doubles from start_n until a level
    fails, then the gap is halved until it is at most max(1, best // 8)."""
    import shlex
    p = subprocess.Popen([moshid] + shlex.split(config_args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    line = p.stdout.readline()
    port = int(line.split("://")[1].split(":")[1].split("/")[0])
    best, fail, rows, n = None, None, [], start_n
    try:
        while True:
            r = level(port, p.pid, n, seconds, pcm)
            r["config"] = label
            rows.append(r)
            print(json.dumps(r), flush=True)
            if held(r, n):
                best = n
            else:
                fail = n
            if fail is None:
                if n * 2 > max_n:
                    break
                n *= 2
                continue
            lo = best or 0
            if fail - lo <= max(1, lo // 8):
                break
            n = (lo + fail) // 2
    finally:
        p.terminate()
        p.wait(timeout=20)
    return best, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moshid", default="build/moshid")
    ap.add_argument("--config-args", required=True, help="moshid's arguments (one string)")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--start-n", type=int, default=1)
    ap.add_argument("--max-n", type=int, default=32)
    ap.add_argument("--compare-pipeline", action="store_true",
                    help="run the search twice, engine.pipeline=false then true, and print the ratio")
    a = ap.parse_args()
    pcm = mc.speech_pcm("This is the load generator speaking to the server in real time, again and again. " * 3,
                        seconds=a.seconds)
    configs = [("pipeline=off", " --set engine.pipeline=false"), ("pipeline=on", " --set engine.pipeline=true")] \
        if a.compare_pipeline else [("as configured", "")]
    result = {}
    for label, extra in configs:
        best, rows = search(a.moshid, a.config_args + extra, a.seconds, a.start_n, a.max_n, pcm, label)
        result[label] = {"largest_n_held_in_real_time": best, "levels": len(rows)}
        print(json.dumps({"config": label, "largest_n_held_in_real_time": best, "levels": len(rows)}), flush=True)
    if a.compare_pipeline:
        off = result["pipeline=off"]["largest_n_held_in_real_time"] or 0
        on = result["pipeline=on"]["largest_n_held_in_real_time"] or 0
        print(json.dumps({"sessions_off": off, "sessions_on": on, "ratio": round(on / off, 2) if off else None}))


if __name__ == "__main__":
    main()
