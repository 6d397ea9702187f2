"""The soak of `make soak` (and the streaming half of `make hostile`): N
clients stream speech to moshid on the demo model in real time for a given
time, sessions back to back; every minute the daemon's resident memory and
its metrics are sampled. At the end:

  - every session's audio is accounted for: the output frames a session got
    equal the 80 ms frames it fed its Opus encoder minus the variant's fixed
    lead (Kyutai's LMGen returns nothing on its first step: 1; PersonaPlex's
    step nothing on its first two calls: 2; tests/integration/test_daemon.py
    lag()), with no error message. sphn's writer emits the page of every
    frame as it is appended, so the daemon decodes all of them; frames are
    counted until the close handshake ends, so one too many shows too;
  - resident memory is flat after warm-up: under 1% growth over the last 30
    minutes (a run shorter than an hour uses its second half, said so in the
    summary). Warm-up includes the K/V rings: a slot's ring becomes resident
    as its first session fills it (on the demo model 6 MiB a slot, full after
    its context, 3000 steps = 4 min), so sessions.max is -n here and the run
    must outlast a context;
  - no session is refused (overloaded, ...), shed by the overload guard or
    fails; "server busy" at a hand-over (a client back before the server
    released its previous slot) is a retry, counted but not a failure. After
    any of them the client backs off (1 s, doubling to 8 s) instead of
    storming the server;
  - late frames (moshid_late_frames_total: stepped later than one 80 ms
    frame period) stay within the benchmark's rate: docs/benchmarks.md holds
    8 sessions on the demo model with 0 late frames in 60 s (about 6,000
    frames); 0 of 6,000 bounds the rate at 3/6,000 = 0.05% (the 95% upper
    bound of a rate with no event in n trials is about 3/n), the default
    --max-late-rate;
  - moshid exits 0 on SIGTERM.
A JSON summary (soak.json) and a Markdown one (soak.md) go to --out; the
exit status is 1 when a check failed.

    python tests/tools/soak.py --moshid build/moshid --demo build/demo -n 8 --seconds 3600 --out build/soak

With --hostile "ARGS", one session per client lasts the whole run and, once
every session has its handshake, tests/tools/hostile.py --url URL --duration
D ARGS --json OUT runs beside them (D: the run less a margin so it ends
first); its exit status (every /healthz answered) and JSON join the
summary, with one more check: /healthz p99 under --healthz-p99-ms (100 ms). The clients then connect from --client-addr (127.0.3.1 by
default in that mode: any 127/8 address is loopback on Linux; hostile.py
attacks from 127.0.0.2-127.0.0.21 and times /healthz from 127.0.0.1), so
that per-address limits aimed at the attackers are not what the streaming
sessions meet. sessions.max is then -n + 4 (room for a new session: /healthz
200), and memory is judged only when the window starts after the warm-up.
"""
import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import aiohttp  # noqa: E402
import moshi_client as mc  # noqa: E402
import sphn  # noqa: E402

PERIOD_S = mc.FRAME / mc.SR        # one frame: 80 ms
LEAD = {"kyutai": 1, "personaplex": 2}
RSS_GROWTH_MAX = 0.01              # flat: under 1% over the window
RSS_WINDOW_S = 1800                # the last 30 minutes (half the run when shorter)
HANDSHAKE_TIMEOUT_S = 30           # a loaded 2-core machine: wide
TAIL_S = 20                        # after the last frame sent, for the last outputs
BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 8.0   # a client's pause after a refused or shed session


def http_get(port, path, timeout=10):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(body, name):
    """A counter or gauge without labels (0 when absent)."""
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def hist(body, name):
    b = {}
    for line in body.splitlines():
        if line.startswith(f"moshid_{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            b[float("inf") if le == "+Inf" else float(le)] = int(line.split()[-1])
    return dict(sorted(b.items()))


def quantile(h0, h1, q):
    """q-quantile of the observations between two histogram snapshots
    (linear within a bucket; None when nothing was observed)."""
    les = list(h1.keys())
    d = [h1[k] - h0.get(k, 0) for k in les]
    if not d or d[-1] == 0:
        return None
    target, prev_le, prev_c = q * d[-1], 0.0, 0
    for le, c in zip(les, d):
        if c >= target:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (target - prev_c) / max(c - prev_c, 1)
        prev_le, prev_c = le, c
    return les[-2]


def proc_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        v = {k: int(rest.split()[0]) for k, rest in (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM")}
    return v["VmRSS"], v["VmHWM"]


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times():
    """(busy, steal, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    steal = v[7] if len(v) > 7 else 0
    total = sum(v[:8])
    return total - idle, steal, total


def encode_messages(pcm, frames):
    """The kind-1 messages of a client that feeds sphn's Opus writer
    `frames` 80 ms frames of pcm, repeated as needed (None where the
    encoder had no page yet). Encoded once, before any session: encoding
    while streaming would stall the client's event loop and send bursts."""
    wr = sphn.OpusStreamWriter(mc.SR)
    n = len(pcm) // mc.FRAME
    out = []
    for i in range(frames):
        j = i % n
        b = wr.append_pcm(pcm[j * mc.FRAME:(j + 1) * mc.FRAME])
        out.append(b"\x01" + b if b else None)
    return out


def expected_out(frames_fed, lead):
    """Output frames of a session fed frames_fed frames (module docstring)."""
    return frames_fed - lead


def start_daemon(a, out):
    demo = os.path.abspath(a.demo)
    args = [a.moshid, "--config", os.path.join(ROOT, "config", "demo", "moshid-demo.json"),
            "--set", "server.port=0", "--set", f"sessions.max={a.sessions_max}",
            "--set", f"model.lm_dir={demo}/lm", "--set", f"model.mimi={demo}/mimi.safetensors",
            "--set", f"model.mimi_config={demo}/mimi.json", "--set", f"model.tokenizer={demo}/tokenizer.model",
            "--set", f"log.level={a.log_level}"]
    for s in a.set:
        args += ["--set", s]
    log = open(os.path.join(out, "moshid.log"), "w")
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    line = p.stdout.readline()
    if "serving on" not in line:
        p.kill()
        log.close()
        sys.exit("soak: moshid did not start: " + line + open(log.name).read()[-2000:])
    port = int(line.split("://")[1].split(":")[1].split("/")[0])
    return p, port, args


class Session:
    """One streaming session's accounting."""

    def __init__(self, client, index):
        self.client, self.index = client, index
        self.fed = 0                 # frames fed to the encoder (messages sent or not)
        self.expected = None
        self.received = 0            # kind-1 messages back
        self.errors = []
        self.close_code = None
        self.handshake_s = None
        self.send_behind_max_ms = 0.0   # how far the sender fell behind its clock (client load)
        self.fail = None

    def status(self):
        """complete (streamed to its end: must be accounted for), busy
        (refused: every slot taken; with sessions.max = -n this is a client
        reconnecting before the server has released its previous session's
        slot, retried after the back-off), refused (no handshake otherwise:
        overloaded, ...), shed (closed by the server while streaming, e.g.
        overload), failed (anything else)."""
        if self.fail is None:
            return "complete"
        if self.fail == "refused" and self.errors and self.errors[0].startswith("server busy"):
            return "busy"   # every slot taken: the client's own previous slot not yet released
        if self.fail in ("refused", "no handshake"):
            return "refused"
        if self.fail.startswith("closed by the server"):
            return "shed"
        return "failed"

    def ok(self):
        return self.fail is None and not self.errors and self.received == self.expected

    def as_dict(self):
        return {"client": self.client, "index": self.index, "frames_fed": self.fed, "expected": self.expected,
                "received": self.received, "errors": self.errors[:5], "close_code": self.close_code,
                "handshake_s": self.handshake_s, "send_behind_max_ms": round(self.send_behind_max_ms, 1),
                "fail": self.fail, "status": self.status(), "ok": self.ok()}


async def run_session(port, msgs, frames, lead, st, client_addr, on_ready=None):
    """Stream msgs[:frames] in real time; count what comes back until the
    expected count arrives (or TAIL_S after the last frame sent). on_ready()
    is called once the handshake came (or did not)."""
    st.fed = 0
    st.expected = expected_out(frames, lead)   # as planned; the frames actually fed decide at the end
    hs, done = asyncio.Event(), asyncio.Event()

    async def receiver(ws):
        try:
            async for m in ws:
                if m.type != aiohttp.WSMsgType.BINARY or not m.data:
                    continue
                kind = m.data[0]
                if kind == mc.K_HANDSHAKE:
                    hs.set()
                elif kind == mc.K_AUDIO:
                    st.received += 1
                    if st.received >= st.expected:
                        done.set()
                elif kind == mc.K_ERROR:
                    st.errors.append(m.data[1:].decode(errors="replace")[:200])
        finally:
            hs.set()
            done.set()

    conn = aiohttp.TCPConnector(local_addr=(client_addr, 0)) if client_addr else None
    t_open = time.monotonic()
    try:
        async with aiohttp.ClientSession(connector=conn) as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/api/chat", max_msg_size=0) as ws:
                recv = asyncio.ensure_future(receiver(ws))
                try:
                    await asyncio.wait_for(hs.wait(), HANDSHAKE_TIMEOUT_S)
                except asyncio.TimeoutError:
                    st.fail = "no handshake"
                if st.handshake_s is None and recv.done():
                    st.fail = "refused"      # an error message (busy, overloaded) and a close, no handshake
                if on_ready:
                    on_ready()
                    on_ready = None
                if st.fail is None:
                    st.handshake_s = round(time.monotonic() - t_open, 3)
                    t0 = time.monotonic()
                    for i in range(frames):
                        if recv.done():
                            st.fail = "closed by the server while streaming"
                            break
                        if msgs[i]:
                            await ws.send_bytes(msgs[i])
                        st.fed = i + 1
                        now = time.monotonic()
                        st.send_behind_max_ms = max(st.send_behind_max_ms, 1000 * (now - (t0 + i * PERIOD_S)))
                        delay = t0 + (i + 1) * PERIOD_S - now
                        if delay > 0:
                            await asyncio.sleep(delay)
                    try:
                        await asyncio.wait_for(done.wait(), TAIL_S)
                    except asyncio.TimeoutError:
                        pass
                    st.expected = expected_out(st.fed, lead)
                    if st.fail is None and recv.done() and st.received < st.expected:
                        st.fail = "closed by the server"
                if not ws.closed:
                    await ws.close()
                recv.cancel()
                st.close_code = ws.close_code
    except (aiohttp.ClientError, OSError) as e:
        st.fail = f"connection: {e}"[:200]
    if on_ready:
        on_ready()


async def client(ci, port, msgs, lead, deadline, session_frames, sessions, client_addr, ready):
    """Sessions back to back until the deadline (the last one shorter, if
    at least 10 s are left); ready (a queue) gets one item when the first
    session has its handshake or has failed."""
    k, backoff = 0, BACKOFF_MIN_S
    while True:
        left = deadline - time.monotonic()
        frames = min(session_frames, int(left / PERIOD_S))
        if frames * PERIOD_S < 10:
            return
        st = Session(ci, k)
        sessions.append(st)
        await run_session(port, msgs, frames, lead, st, client_addr,
                          (lambda: ready.put_nowait(ci)) if k == 0 else None)
        k += 1
        if st.status() == "complete":
            backoff = BACKOFF_MIN_S
        else:
            # refused or shed: back off as a real client would, instead of
            # a reconnect storm against a server that said it is behind
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(2 * backoff, BACKOFF_MAX_S)


async def sampler(pid, port, period_s, stop, samples, loop, failed_samples):
    """Every period_s until stop: RSS, metrics, load, CPU. The HTTP fetch
    runs on an executor thread so that the senders never wait for it."""
    t_start = time.monotonic()
    prev = None
    while True:
        t = time.monotonic()
        try:
            st, body = await loop.run_in_executor(None, http_get, port, "/metrics")
            rss, hwm = proc_rss_kb(pid)
        except (OSError, ValueError) as e:   # URLError and timeouts are OSErrors; the daemon may have died
            print(f"soak: sample at {t - t_start:.0f} s failed: {e}", flush=True)
            failed_samples.append(round(t - t_start, 1))
            st = None
        if st != 200:
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, t + period_s - time.monotonic()))
                return
            except asyncio.TimeoutError:
                continue
        cur = {"t_s": round(t - t_start, 1), "rss_kb": rss, "hwm_kb": hwm,
               "late": metric(body, "moshid_late_frames_total"),
               "stepped": metric(body, "moshid_frames_stepped_total"),
               "sessions": metric(body, "moshid_sessions"),
               "hist": hist(body, "frame_latency_seconds"), "cpu_s": proc_cpu_s(pid),
               "machine": cpu_times(), "load1": float(open("/proc/loadavg").read().split()[0])}
        row = {k: cur[k] for k in ("t_s", "rss_kb", "hwm_kb", "sessions", "load1")}
        if prev is not None:
            dt = cur["t_s"] - prev["t_s"]
            busy = cur["machine"][0] - prev["machine"][0]
            tot = max(cur["machine"][2] - prev["machine"][2], 1)
            p99 = quantile(prev["hist"], cur["hist"], 0.99)
            row.update({"late": int(cur["late"] - prev["late"]), "stepped": int(cur["stepped"] - prev["stepped"]),
                        "p99_ms": round(1000 * p99, 1) if p99 is not None else None,
                        "daemon_cpu_pct": round(100 * (cur["cpu_s"] - prev["cpu_s"]) / dt, 1),
                        "machine_busy_pct": round(100 * busy / tot, 1),
                        "steal_pct": round(100 * (cur["machine"][1] - prev["machine"][1]) / tot, 1)})
        row["final"] = stop.is_set()   # taken after the clients ended (sessions closed)
        samples.append((row, cur))
        prev = cur
        print("soak: " + json.dumps(row), flush=True)
        if stop.is_set():
            return
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, t + period_s - time.monotonic()))
        except asyncio.TimeoutError:
            pass


async def hostile_run(a, port, duration_s, out):
    cmd = [sys.executable, os.path.join(HERE, "hostile.py"), "--url", f"http://127.0.0.1:{port}",
           "--duration", str(duration_s)] + shlex.split(a.hostile) + ["--json", os.path.join(out, "hostile.json")]
    p = await asyncio.create_subprocess_exec(*cmd, stdout=open(os.path.join(out, "hostile.log"), "w"),
                                             stderr=subprocess.STDOUT)
    rc = await p.wait()
    try:
        res = json.load(open(os.path.join(out, "hostile.json")))
    except (OSError, ValueError) as e:
        res = {"error": f"no JSON from hostile.py: {e}"}
    return {"cmd": " ".join(shlex.quote(c) for c in cmd), "rc": rc, "result": res}


async def main_async(a, out, p, port, lead, msgs, session_frames):
    loop = asyncio.get_running_loop()
    sessions, samples, stop, failed_samples = [], [], asyncio.Event(), []
    samp = asyncio.ensure_future(sampler(p.pid, port, a.sample_s, stop, samples, loop, failed_samples))
    deadline = time.monotonic() + a.seconds
    ready = asyncio.Queue()
    clients = [asyncio.ensure_future(client(i, port, msgs, lead, deadline, session_frames, sessions, a.client_addr,
                                            ready)) for i in range(a.n)]
    hostile = None
    if a.hostile is not None:
        # once every session has its handshake (or failed to), so that the
        # hostile load meets established sessions, as item 1 describes
        for _ in range(a.n):
            await ready.get()
        hostile = await hostile_run(a, port, max(10, int(deadline - time.monotonic() - a.hostile_margin_s)), out)
    await asyncio.gather(*clients)
    stop.set()
    await samp
    return sessions, samples, hostile, failed_samples


def summarise(a, sessions, samples, hostile, rc_daemon, lead, variant, t_wall, cmd, warmup_s):
    if not samples:
        sys.exit("soak: no sample of /metrics could be taken")
    rows = [r for r, _ in samples]
    first, last = samples[0][1], samples[-1][1]
    late = int(last["late"] - first["late"])
    stepped = int(last["stepped"] - first["stepped"])
    late_rate = late / stepped if stepped else None
    # The memory window ends at the last sample taken while the clients
    # streamed: the final one, after the sessions closed, would show their
    # memory freed and hide a growth.
    live = [r for r in rows if not r["final"]]
    window = min(RSS_WINDOW_S, (live[-1]["t_s"] - live[0]["t_s"]) / 2) if live else 0
    t_end = live[-1]["t_s"] if live else 0
    win = [r for r in live if r["t_s"] >= t_end - window - 1e-6]
    g = (win[-1]["rss_kb"] / win[0]["rss_kb"] - 1) if len(win) >= 2 else None
    # The window must start after the warm-up (the K/V rings filling: one
    # context of steps after the first sessions began); in a shorter run
    # the check cannot be made: a failure for the soak, left out (the
    # figures still reported) for the hostile run, which is about real time.
    after_warmup = bool(win) and win[0]["t_s"] >= warmup_s
    ok_sessions = sum(1 for s in sessions if s.ok())
    by_status = {k: sum(1 for s in sessions if s.status() == k)
                 for k in ("complete", "busy", "refused", "shed", "failed")}
    complete = [s for s in sessions if s.status() == "complete"]
    checks = {
        "every_session_accounted": bool(complete) and all(s.ok() for s in complete),
        "no_session_refused_shed_or_failed": by_status["complete"] + by_status["busy"] == len(sessions),
        "rss_flat": after_warmup and g is not None and g < RSS_GROWTH_MAX,
        "late_within_rate": late_rate is not None and late_rate <= a.max_late_rate,
        "daemon_exit_0": rc_daemon == 0,
    }
    if hostile is not None:
        if not after_warmup:
            del checks["rss_flat"]
        checks["hostile_tool_passed"] = hostile["rc"] == 0
        hz = hostile["result"].get("healthz", {}) if isinstance(hostile["result"], dict) else {}
        checks["healthz_p99_under_bound"] = hz.get("p99_ms") is not None and hz["p99_ms"] < a.healthz_p99_ms
    p99s = [r["p99_ms"] for r in rows if r.get("p99_ms") is not None]
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() - t_wall)),
        "machine": {"cpus": os.cpu_count(), "model": cpu_model(), "kernel": os.uname().release},
        "git": git_describe(), "daemon_build": daemon_build(a.moshid),
        "daemon_cmd": " ".join(shlex.quote(c) for c in cmd),
        "n": a.n, "seconds_asked": a.seconds, "wall_s": round(t_wall, 1), "variant": variant, "lead": lead,
        "session_s": a.session_s, "sample_s": a.sample_s,
        "sessions": len(sessions), "sessions_ok": ok_sessions, "sessions_by_status": by_status,
        "frames_out_expected": sum(s.expected or 0 for s in complete),
        "frames_out_received": sum(s.received for s in complete),
        "sessions_max": a.sessions_max,
        "late_frames": late, "frames_stepped": stepped,
        "late_rate": late_rate, "max_late_rate": a.max_late_rate,
        "p99_ms_per_sample_max": max(p99s) if p99s else None,
        "p99_ms_per_sample_median": sorted(p99s)[len(p99s) // 2] if p99s else None,
        "rss_first_kb": rows[0]["rss_kb"], "rss_last_kb": rows[-1]["rss_kb"], "rss_hwm_kb": rows[-1]["hwm_kb"],
        "rss_window_s": round(window, 1), "rss_window_scaled": window < RSS_WINDOW_S,
        "rss_growth_in_window": g, "rss_warmup_s": warmup_s, "rss_window_after_warmup": after_warmup,
        "load1_max": max(r["load1"] for r in rows), "steal_pct_max": max((r.get("steal_pct") or 0) for r in rows),
        "client_send_behind_max_ms": round(max((s.send_behind_max_ms for s in sessions), default=0), 1),
        "daemon_rc": rc_daemon, "healthz_p99_ms": a.healthz_p99_ms, "checks": checks, "passed": all(checks.values()),
        "hostile": hostile, "samples": rows, "session_list": [s.as_dict() for s in sessions],
    }


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def daemon_build(moshid):
    """The binary's own "build: git ..." line (what it was built from; the
    tree's git_describe is only where the run was started)."""
    r = subprocess.run([moshid, "--version"], capture_output=True, text=True)
    return next((line for line in r.stdout.splitlines() if line.startswith("build:")), "?")


def git_describe():
    r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def fmt_ms(v):
    return "?" if v is None else f"{v:.1f} ms"


def pct(v):
    return "" if v is None else f"{v}%"


def markdown(s):
    yes = {True: "yes", False: "**no**"}
    c = s["checks"]
    g = s["rss_growth_in_window"]
    how = ("one session per client through the run" if s["hostile"] else
           f"sessions of up to {s['session_s']:.0f} s back to back")
    lines = [
        f"### {'Hostile' if s['hostile'] else 'Soak'}: {s['n']} sessions, {s['wall_s'] / 60:.1f} min "
        f"({s['date_utc']} UTC, tree {s['git']}; moshid {s.get('daemon_build', '?')})", "",
        f"Machine: {s['machine']['cpus']} CPUs ({s['machine']['model']}), kernel {s['machine']['kernel']}; "
        f"demo model ({s['variant']}, lead {s['lead']} frames), sessions.max {s.get('sessions_max')}, "
        f"{how}; "
        f"samples every {s['sample_s']} s.", "",
        "| check | figure | passed |", "|---|---|---|",
        f"| every complete session's audio accounted for (out = in - {s['lead']}) | {s['sessions_ok']} of "
        f"{s['sessions_by_status']['complete']} complete sessions, {s['frames_out_received']:,} of "
        f"{s['frames_out_expected']:,} frames | {yes[c['every_session_accounted']]} |",
        f"| no session refused (but busy retries), shed or failed | {s['sessions']} sessions: " +
        ", ".join(f"{v} {k}" for k, v in s["sessions_by_status"].items()) +
        f" | {yes[c['no_session_refused_shed_or_failed']]} |",
        f"| resident memory flat (< 1% growth over the last {s['rss_window_s'] / 60:.1f} min"
        f"{', scaled: the run is under an hour' if s['rss_window_scaled'] else ''}) | "
        f"{s['rss_first_kb'] / 1024:.1f} MiB first sample, {s['rss_last_kb'] / 1024:.1f} MiB last, "
        f"{100 * g:+.2f}% in the window{'' if s['rss_window_after_warmup'] else ' (the window starts inside the warm-up of ' + format(s['rss_warmup_s'], '.0f') + ' s: not judged)'} | "
        f"{yes[c['rss_flat']] if 'rss_flat' in c else 'n/a'} |" if g is not None else
        "| resident memory flat | too few samples | **no** |",
        f"| late frames within the benchmark's rate (<= {100 * s['max_late_rate']:.2f}%) | {s['late_frames']:,} of "
        f"{s['frames_stepped']:,} stepped ({100 * (s['late_rate'] or 0):.3f}%) | {yes[c['late_within_rate']]} |",
        f"| moshid exits 0 on SIGTERM | exit {s['daemon_rc']} | {yes[c['daemon_exit_0']]} |",
    ]
    if s["hostile"] is not None:
        hz = s["hostile"]["result"].get("healthz", {})
        lines.append(f"| hostile.py: every /healthz answered | exit {s['hostile']['rc']}, {hz.get('n')} asked, "
                     f"{hz.get('failed')} failed | {yes[c['hostile_tool_passed']]} |")
        lines.append(f"| /healthz p99 under {s['healthz_p99_ms']:.0f} ms | p50 {fmt_ms(hz.get('p50_ms'))}, "
                     f"p99 {fmt_ms(hz.get('p99_ms'))}, max {fmt_ms(hz.get('max_ms'))} | "
                     f"{yes[c['healthz_p99_under_bound']]} |")
    lines += ["", f"Frame latency p99 per sample: median {s['p99_ms_per_sample_median']} ms, "
                  f"worst {s['p99_ms_per_sample_max']} ms; load average up to {s['load1_max']}, host steal up to "
                  f"{s['steal_pct_max']}%; the client fell behind its clock by up to "
                  f"{s['client_send_behind_max_ms']} ms.", ""]
    lines += ["| t (min) | RSS (MiB) | sessions | late | stepped | p99 (ms) | daemon CPU | machine busy | load |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in s["samples"]:
        lines.append(f"| {r['t_s'] / 60:.1f} | {r['rss_kb'] / 1024:.1f} | {int(r['sessions'])} | {r.get('late', '')} | "
                     f"{r.get('stepped', '')} | {r.get('p99_ms', '')} | {pct(r.get('daemon_cpu_pct'))} | "
                     f"{pct(r.get('machine_busy_pct'))} | {r['load1']} |")
    if s["hostile"] is not None:
        res = dict(s["hostile"]["result"])
        if isinstance(res.get("sources"), list) and len(res["sources"]) > 2:
            res["sources"] = f"{res['sources'][0]} .. {res['sources'][-1]} ({len(res['sources'])} addresses)"
        if isinstance(res.get("healthz"), dict):
            res["healthz"] = {k: v for k, v in res["healthz"].items() if k != "all_ms"}
        lines += ["", "hostile.py: `" + s["hostile"]["cmd"] + "`", "", "```",
                  json.dumps(res, indent=1)[:6000], "```"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moshid", default="build/moshid")
    ap.add_argument("--demo", default="build/demo", help="the demo model's directory (make demo-model)")
    ap.add_argument("-n", type=int, default=8, help="streaming clients")
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--session-s", type=float, default=600, help="longest session; clients reconnect after each")
    ap.add_argument("--sample-s", type=float, default=60, help="sampling period of memory and metrics")
    ap.add_argument("--max-late-rate", type=float, default=0.0005)
    ap.add_argument("--out", default="build/soak")
    ap.add_argument("--set", action="append", default=[], help="extra moshid --set option (repeatable)")
    ap.add_argument("--log-level", default="info", help="moshid's (info: a line per session, with its slot)")
    ap.add_argument("--sessions-max", type=int, default=None,
                    help="moshid's sessions.max (default -n): each slot's K/V ring is touched, and becomes resident, "
                         "as its first session fills it, so more slots than clients would show as growth whenever "
                         "a spare slot is used for the first time")
    ap.add_argument("--hostile", default=None, help="run tests/tools/hostile.py beside, with these arguments")
    ap.add_argument("--hostile-margin-s", type=float, default=15)
    ap.add_argument("--healthz-p99-ms", type=float, default=100)
    ap.add_argument("--client-addr", default=None, help="source address of the streaming clients")
    a = ap.parse_args()
    if a.n < 1 or a.seconds < 20 or a.sample_s <= 0:
        ap.error("need -n >= 1, --seconds >= 20, --sample-s > 0")
    if a.sessions_max is None:
        # soak: -n (see --sessions-max); hostile: room for more, so that
        # /healthz says 200 (a new session would start) and the upgrade
        # flood meets free slots, as in test_hostile.py
        a.sessions_max = a.n + 4 if a.hostile is not None else a.n
    if a.hostile is not None:
        a.session_s = a.seconds            # one session each, through the whole hostile run
        if a.client_addr is None:
            a.client_addr = "127.0.3.1"
    os.makedirs(a.out, exist_ok=True)

    pcm = mc.speech_pcm("This is the soak test speaking to the server in real time, sentence after sentence, "
                        "for as long as it runs. " * 2, seconds=60.0)
    session_frames = int(min(a.session_s, a.seconds) / PERIOD_S)
    msgs = encode_messages(pcm, session_frames)
    p, port, cmd = start_daemon(a, a.out)
    t0 = time.monotonic()
    try:
        variant = json.loads(http_get(port, "/healthz")[1])["variant"]
        context = json.load(open(os.path.join(a.demo, "lm", "config.json")))["context"]
        warmup_s = context * PERIOD_S
        lead = LEAD[variant]
        print(f"soak: moshid pid {p.pid} port {port}, variant {variant}, {a.n} clients for {a.seconds:.0f} s"
              f"{' with hostile.py' if a.hostile is not None else ''}", flush=True)
        sessions, samples, hostile, failed_samples = asyncio.run(main_async(a, a.out, p, port, lead, msgs,
                                                                           session_frames))
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "killed (no exit 30 s after SIGTERM)"
    s = summarise(a, sessions, samples, hostile, rc, lead, variant, time.monotonic() - t0, cmd, warmup_s)
    s["failed_samples_t_s"] = failed_samples
    name = "hostile" if a.hostile is not None else "soak"
    json.dump(s, open(os.path.join(a.out, name + ".json"), "w"), indent=1)
    md = markdown(s)
    open(os.path.join(a.out, name + ".md"), "w").write(md)
    print(md)
    bad = [k for k, v in s["checks"].items() if not v]
    print(f"{name}: {'passed' if not bad else 'FAILED: ' + ', '.join(bad)} (summary in {a.out}/{name}.json, .md)")
    for st in sessions:
        if not st.ok():
            print("  session " + json.dumps(st.as_dict()))
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
