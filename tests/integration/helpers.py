"""What the integration tests share: a daemon on the demo model (start,
stop), HTTP GET, reading /metrics, and waiting for a condition or a log
line. Every wait polls a condition and fails with what it waited for; none
sleeps for a fixed time to let something happen."""
import json
import random
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

POLL_S = 0.05  # interval between two looks at a condition
_MISSING = object()


def start_daemon(build_dir, tmp_path, env=None, **over):
    """moshid on the demo model; over: section__key=value config overrides
    (sessions=N for sessions.max); env: the process environment (None: this
    one's). Returns (process, port, log path) once it serves."""
    demo = build_dir / "demo"
    cfg = {
        "server": {"listen": "127.0.0.1", "port": 0},
        "model": {"lm_dir": str(demo / "lm"), "mimi": str(demo / "mimi.safetensors"),
                  "mimi_config": str(demo / "mimi.json"), "tokenizer": str(demo / "tokenizer.model")},
        "engine": {"backend": "cpu", "threads": 1},
        "sessions": {"max": over.pop("sessions", 8)},
        "limits": {"idle_timeout_s": 5, "input_buffer_s": 4, "output_queue_s": 2,
                   "max_message_bytes": 262144},
        "log": {"level": "info"},
    }
    for k, v in over.items():
        sec, key = k.split("__")
        cfg.setdefault(sec, {})[key] = v
    path = tmp_path / f"moshid-{random.randrange(1 << 30)}.json"
    path.write_text(json.dumps(cfg))
    log = open(tmp_path / (path.stem + ".log"), "w")
    p = subprocess.Popen([str(build_dir / "moshid"), "--config", str(path)], stdout=subprocess.PIPE,
                         stderr=log, text=True, env=env)
    line = p.stdout.readline()
    if "serving on" not in line:
        p.kill()
        raise AssertionError("moshid did not start: " + line + open(log.name).read())
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    p.cfg_path, p.cfg, p.url_line = path, cfg, line
    return p, port, log.name


def stop_daemon(p, logname):
    """SIGTERM, then the exit status must be 0 within 15 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError("moshid did not stop on SIGTERM")
        assert rc == 0, f"moshid exited {rc} on SIGTERM:\n" + open(logname).read()[-3000:]


def get(port, path):
    """GET http://127.0.0.1:port/path: (status, body text)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(cond, timeout, what):
    """Poll cond() until it returns something true, and return that; fail
    naming `what` after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_S)


def parse_metrics(body):
    """The samples of a /metrics body as {series: number}; a series is the
    name with its labels as written (moshid_errors_total{kind="busy"})."""
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[series] = float(value) if any(c in value for c in ".eEn") else int(value)
    return out


def metric(port, series, default=_MISSING):
    """One sample of the daemon's /metrics (the series as parse_metrics
    names it); default when it is absent, else the test fails."""
    st, body = get(port, "/metrics")
    assert st == 200, f"/metrics answered {st}: {body[:200]}"
    v = parse_metrics(body).get(series, default)
    if v is _MISSING:
        raise AssertionError(f"{series} not in /metrics")
    return v


def log_text(path):
    with open(path) as f:
        return f.read()


def wait_log(path, pattern, timeout, what):
    """Wait until the log at path matches the regular expression pattern;
    returns the match."""
    try:
        return wait_for(lambda: re.search(pattern, log_text(path)), timeout, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; the log ends:\n" + log_text(path)[-2000:]) from None
