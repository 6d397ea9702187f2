"""Fixtures and helpers of the browser tests (tests/browser): Debian's
Chromium (/usr/bin/chromium) driven by Playwright (tests/requirements.txt;
never `playwright install`), a fake microphone fed from espeak-ng speech,
daemons on the demo model serving the page (daemon/web) with
server.static_dir, HTTP look-ups.

Not a conftest.py: tests/integration has one, and both would be the module
`conftest` when pytest runs the two directories together (make test). The
test module imports the fixtures from here.

Facts these rest on: ../shared/spec/browser-testing.md and docs/browser.md.
"""
import os
import pathlib
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from helpers import start_daemon, stop_daemon  # noqa: E402,F401  (the integration tests' daemon starter)

WEB_DIR = ROOT / "daemon" / "web"
CHROMIUM = os.environ.get("MOSHID_CHROMIUM", "/usr/bin/chromium")
OUT_DIR = BUILD / "browser"  # screenshots, the speech file

# Flags every launch uses (../shared/spec/browser-testing.md); the fake
# capture file and the permission flag come per launch.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--use-fake-device-for-media-stream",
                 "--autoplay-policy=no-user-gesture-required", "--headless=new"]

SPEECH_TEXT = ("Hello there. This is a test of the moshid browser client. The microphone sends speech, "
               "and the model answers. One, two, three, four.")


def web_daemon(build_dir, tmp_path, **over):
    """A daemon on the demo model serving daemon/web at / (the test sets
    server.static_dir; see docs/browser.md for the default), with a record
    directory for the Mimi input codes. Returns (process, port, log, record_dir)."""
    rec = tmp_path / "record"
    rec.mkdir(exist_ok=True)
    over.setdefault("limits__idle_timeout_s", 30)
    p, port, log = start_daemon(build_dir, tmp_path, server__static_dir=str(WEB_DIR),
                                debug__record_dir=str(rec), **over)
    return p, port, log, rec


def http_get(base, path, timeout=10):
    """(status, body text) of GET base + path; https without verification
    (the tests' self-signed certificate)."""
    ctx = ssl._create_unverified_context() if base.startswith("https:") else None
    try:
        with urllib.request.urlopen(base + path, timeout=timeout, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def metrics(base):
    """The counters of /metrics as {name: float} (unlabelled lines only)."""
    st, body = http_get(base, "/metrics")
    assert st == 200, body
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            out[k] = float(v)
    return out


# ---- fixtures ------------------------------------------------------------------

@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def out_dir():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    return OUT_DIR


@pytest.fixture(scope="session")
def speech_wav(out_dir):
    """The fake microphone's file: espeak-ng speech as 48 kHz 16-bit mono
    WAV (Chromium reads 8/16/32-float WAV only; anything else is silence
    without an error). Chromium loops it."""
    raw, wav = out_dir / "speech-raw.wav", out_dir / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), SPEECH_TEXT], check=True, capture_output=True)
    subprocess.run(["sox", str(raw), "-r", "48000", "-c", "1", "-b", "16", str(wav)], check=True, capture_output=True)
    return wav


@pytest.fixture(scope="session")
def pw():
    """Playwright's sync API over Debian's Chromium."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make test installs tests/deps.txt)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        yield p


@pytest.fixture()
def launch(pw, speech_wav):
    """launch(mic=True, extra=()) -> a Chromium browser whose microphone is
    the speech file; mic=False leaves the permission prompt to deny."""
    browsers = []

    def go(mic=True, extra=()):
        args = CHROMIUM_ARGS + [f"--use-file-for-fake-audio-capture={speech_wav}"]
        args += ["--use-fake-ui-for-media-stream"] if mic else ["--deny-permission-prompts"]
        b = pw.chromium.launch(executable_path=CHROMIUM, args=args + list(extra))
        browsers.append(b)
        return b

    yield go
    for b in browsers:
        b.close()


@pytest.fixture(scope="module")
def daemon_web(build_dir, tmp_path_factory):
    d = web_daemon(build_dir, tmp_path_factory.mktemp("web"))
    yield d
    stop_daemon(d[0], d[2])


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl req -x509)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key
