"""Where moshid listens, read from the kernel: the listening sockets of the
daemon's own process (its descriptors' inodes, matched in /proc/net/tcp and
tcp6) must be exactly what server.listen says, for IPv4 and IPv6 loopback,
every interface, a host name, several addresses, and the TLS listener.
Addresses that cannot be bound stop the start with the reason. The printed
URL and the log line are what is bound, and a daemon bound beyond loopback
without tokens says so (log, /healthz, /metrics).

The PROXY protocol (server.proxy_protocol_from): headers of versions 1 and 2
from a trusted address name the client for the logs and the per-address
limits; a trusted connection without a valid header is closed; a header
from anyone else is refused (400).

Traffic goes to loopback addresses only (127.0.0.0/8, ::1); the one
non-local address used (192.0.2.1, TEST-NET-1) is only offered to bind(2),
which fails before anything is sent."""
import os
import re
import socket
import ssl
import struct
import subprocess
import time
import urllib.request

import pytest

import helpers
from helpers import log_text, metric, start_daemon, stop_daemon
from test_srv_defects import WAIT_S, read_http

STATE_LISTEN = "0A"


def socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", t)
        if m:
            out.add(m.group(1))
    return out


def hex_to_addr(h, v6):
    """/proc/net/tcp{,6} addresses: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(h)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, words)


def listening(pid):
    """{(address, port)} of the process's listening TCP sockets, from
    /proc/net/tcp and /proc/net/tcp6 (no command needed)."""
    inodes = socket_inodes(pid)
    out = set()
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = open(f"/proc/net/{name}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != STATE_LISTEN or f[9] not in inodes:
                continue
            a, p = f[1].split(":")
            out.add((hex_to_addr(a, v6), int(p, 16)))
    return out


def have_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_v6 = pytest.mark.skipif(not have_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")


def url_of(p):
    return p.url_line.split("serving on ")[1].split()[0]


@pytest.fixture
def daemons(build_dir, tmp_path):
    """daemons(**over) -> (process, port, log); all stopped at the end."""
    started = []

    def go(**over):
        d = tmp_path / f"d{len(started)}"
        d.mkdir()
        r = start_daemon(build_dir, d, sessions=2, **over)
        started.append(r)
        return r

    yield go
    for p, port, log in started:
        stop_daemon(p, log)


def get(host, port, path, ctx=None):
    scheme = "https" if ctx else "http"
    h = f"[{host}]" if ":" in host else host
    with urllib.request.urlopen(f"{scheme}://{h}:{port}{path}", timeout=WAIT_S, context=ctx) as r:
        return r.status, r.read().decode()


def refused(host, port):
    """True when a TCP connect to host:port is refused (nothing listens)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.settimeout(WAIT_S)
        try:
            s.connect((host, port))
        except ConnectionRefusedError:
            return True
    return False


# ---- binding exactly ----

def test_ipv4_loopback_only(daemons):
    p, port, log = daemons(server__listen="127.0.0.1")
    assert listening(p.pid) == {("127.0.0.1", port)}
    assert url_of(p) == f"http://127.0.0.1:{port}/"
    assert f"event=listen addr=127.0.0.1:{port} " in log_text(log)
    st, body = get("127.0.0.1", port, "/healthz")
    assert st == 200 and '"loopback_only":true' in body and '"exposed_without_auth":false' in body
    assert "event=exposed" not in log_text(log)


@needs_v6
def test_ipv6_loopback_only(daemons):
    p, port, log = daemons(server__listen="::1")
    assert listening(p.pid) == {("::1", port)}
    assert url_of(p) == f"http://[::1]:{port}/"
    assert get("::1", port, "/healthz")[0] == 200
    assert refused("127.0.0.1", port)  # IPv6-only: no IPv4 behind it


@needs_v6
def test_several_addresses_one_port(daemons):
    """port 0 with two addresses: both on the one ephemeral port."""
    p, port, log = daemons(server__listen=["127.0.0.1", "::1"])
    assert listening(p.pid) == {("127.0.0.1", port), ("::1", port)}
    assert get("127.0.0.1", port, "/healthz")[0] == 200
    assert get("::1", port, "/healthz")[0] == 200


def test_every_interface_is_said_loudly(daemons):
    """"*": one socket on every address of both families (or IPv4 alone
    without IPv6); without tokens the daemon says so, and /healthz and
    /metrics show it."""
    p, port, log = daemons(server__listen="*")
    got = listening(p.pid)
    assert got in ({("::", port)}, {("0.0.0.0", port)}), got
    assert url_of(p) == f"http://127.0.0.1:{port}/"
    assert get("127.0.0.1", port, "/healthz")[0] == 200  # IPv4 through the dual-stack socket
    text = log_text(log)
    assert "level=warn event=exposed" in text and re.search(rf"listen=(\*|0\.0\.0\.0):{port} ", text), text
    st, body = get("127.0.0.1", port, "/healthz")
    assert '"loopback_only":false' in body and '"exposed_without_auth":true' in body
    assert "moshid_exposed_without_auth 1" in get("127.0.0.1", port, "/metrics")[1]


def test_ipv4_wildcard_is_ipv4_only(daemons):
    p, port, log = daemons(server__listen="0.0.0.0")
    assert listening(p.pid) == {("0.0.0.0", port)}
    assert get("127.0.0.1", port, "/healthz")[0] == 200
    if have_ipv6_loopback():
        assert refused("::1", port)


def test_tokens_quiet_the_warning(daemons, tmp_path):
    tok = tmp_path / "tokens"
    tok.write_text("ops:" + "k" * 32 + "\n")
    tok.chmod(0o600)
    p, port, log = daemons(server__listen="0.0.0.0", auth__tokens_file=str(tok))
    assert "event=exposed" not in log_text(log)
    body = get("127.0.0.1", port, "/healthz")[1]
    assert '"exposed_without_auth":false' in body and '"auth_required":true' in body


def test_host_name_binds_what_it_resolves_to(daemons):
    """"localhost": every address the resolver gives (127.0.0.1, and ::1
    where /etc/hosts lists it), each exactly."""
    try:
        found = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        pytest.skip('"localhost" does not resolve on this machine (no /etc/hosts?)')
    want = {ai[4][0] for ai in found if ai[0] in (socket.AF_INET, socket.AF_INET6)}
    p, port, log = daemons(server__listen="localhost")
    assert listening(p.pid) == {(a, port) for a in want}


def test_tls_listener_binds_exactly(daemons, build_dir, tmp_path):
    cert_dir = tmp_path / "tls"
    r = subprocess.run([str(build_dir / "moshid"), "--self-signed", str(cert_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listen = ["127.0.0.1", "::1"] if have_ipv6_loopback() else ["127.0.0.1"]
    p, port, log = daemons(server__listen=listen, server__tls_cert=str(cert_dir / "moshid.crt"),
                           server__tls_key=str(cert_dir / "moshid.key"))
    assert listening(p.pid) == {(a, port) for a in listen}
    assert url_of(p) == f"https://127.0.0.1:{port}/"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for a in listen:
        assert get(a, port, "/healthz", ctx)[0] == 200


# ---- refusing what cannot be bound ----

def fails_to_start(build_dir, tmp_path, listen, port=0):
    import json
    demo = build_dir / "demo"
    cfg = {"server": {"listen": listen, "port": port},
           "model": {"lm_dir": str(demo / "lm"), "mimi": str(demo / "mimi.safetensors"),
                     "mimi_config": str(demo / "mimi.json"), "tokenizer": str(demo / "tokenizer.model")},
           "engine": {"backend": "cpu", "threads": 1}, "sessions": {"max": 1}}
    path = tmp_path / f"bad-{abs(hash(str(listen)))}.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([str(build_dir / "moshid"), "--config", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "serving on" not in r.stdout, r.stdout + r.stderr
    return r.stderr


def test_address_not_on_this_machine(build_dir, tmp_path):
    err = fails_to_start(build_dir, tmp_path, "192.0.2.1")
    assert "cannot bind 192.0.2.1:" in err and "not an address of this machine" in err, err


def test_unresolvable_name(build_dir, tmp_path):
    err = fails_to_start(build_dir, tmp_path, "no-such-host.invalid")
    assert 'server.listen "no-such-host.invalid": cannot resolve it' in err, err


def test_every_interface_with_others_refused(build_dir, tmp_path):
    err = fails_to_start(build_dir, tmp_path, ["*", "127.0.0.1"])
    assert "cannot be listed with other addresses" in err, err


def test_port_taken_on_one_address(build_dir, tmp_path):
    """The port free on 127.0.0.1 but taken on 127.0.0.2: no half start."""
    with socket.socket() as hold:
        hold.bind(("127.0.0.2", 0))
        hold.listen(1)
        port = hold.getsockname()[1]
        err = fails_to_start(build_dir, tmp_path, ["127.0.0.1", "127.0.0.2"], port=port)
    assert f"cannot bind 127.0.0.2:{port}" in err and "has the port" in err, err


# ---- the PROXY protocol ----

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2_header(src, sport, dst="127.0.0.1", dport=80, local=False):
    fam = socket.AF_INET6 if ":" in src else socket.AF_INET
    a = socket.inet_pton(fam, src) + socket.inet_pton(fam, dst) + struct.pack(">HH", sport, dport)
    famb = 0x21 if fam == socket.AF_INET6 else 0x11
    return V2_SIG + bytes([0x20 if local else 0x21, famb]) + struct.pack(">H", len(a)) + a


def via(port, header, request, src="127.0.0.1", split=False):
    """Connect from src, send header (in single bytes when split) then the
    request; the answer's status, or None when the server closed."""
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(WAIT_S)
    s.connect(("127.0.0.1", port))
    try:
        # the server may close (and reset) as soon as it has judged the header
        if split:
            for b in header:
                s.sendall(bytes([b]))
        else:
            s.sendall(header)
        s.sendall(request)
        return read_http(s)[0]
    except (AssertionError, ConnectionResetError, BrokenPipeError):
        return None
    finally:
        s.close()


def bad_version_upgrade():
    return (b"GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 12\r\n\r\n")


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def wait_log(log, pattern, what):
    return helpers.wait_log(log, pattern, WAIT_S, what)


def test_proxy_headers_name_the_client(daemons):
    p, port, log = daemons(server__listen="127.0.0.1", server__proxy_protocol_from=["127.0.0.1"])
    assert "proxy_protocol_from=1" in log_text(log)
    # v1, v2 (IPv4 and IPv6), split byte by byte: each request is served, and
    # a refusal's log line names the client from the header
    assert via(port, b"PROXY TCP4 203.0.113.5 127.0.0.1 40000 80\r\n", HEALTHZ) == 200
    assert via(port, b"PROXY TCP4 203.0.113.6 127.0.0.1 40000 80\r\n", bad_version_upgrade()) == 426
    wait_log(log, r"event=http_refused peer=203\.0\.113\.6 status=426", "the v1 client")
    assert via(port, v2_header("198.51.100.7", 5000), bad_version_upgrade(), split=True) == 426
    wait_log(log, r"event=http_refused peer=198\.51\.100\.7 status=426", "the v2 client")
    assert via(port, v2_header("2001:db8::9", 5000, dst="::1"), bad_version_upgrade()) == 426
    wait_log(log, r"event=http_refused peer=2001:db8::9 status=426", "the v2 IPv6 client")
    # LOCAL (a health check) and UNKNOWN: the proxy's own address stands
    assert via(port, v2_header("192.0.2.99", 1, local=True), HEALTHZ) == 200
    assert via(port, b"PROXY UNKNOWN\r\n", bad_version_upgrade()) == 426
    wait_log(log, r"event=http_refused peer=127\.0\.0\.1 status=426", "the proxy itself for UNKNOWN")
    assert "192.0.2.99" not in log_text(log)


def test_proxy_missing_or_malformed_is_closed(daemons):
    p, port, log = daemons(server__listen="127.0.0.1", server__proxy_protocol_from=["127.0.0.0/8"],
                           server__handshake_timeout_ms=500)
    assert via(port, b"", HEALTHZ) is None  # a trusted proxy must send a header
    assert via(port, b"PROXY TCP4 203.0.113.5 127.0.0.1 99999 80\r\n", HEALTHZ) is None
    assert via(port, V2_SIG + b"\x21\x11\xff\xff", HEALTHZ) is None  # longer than accepted
    wait_log(log, r"event=proxy_header_refused proxy=127\.0\.0\.1", "the refusal")
    # a partial header, then nothing: closed by the handshake timeout
    s = socket.socket()
    s.settimeout(WAIT_S)
    s.connect(("127.0.0.1", port))
    s.sendall(b"PROXY TCP4 ")
    assert s.recv(100) == b""
    s.close()
    wait_log(log, r"event=proxy_header_timeout", "the timeout")
    # metrics come through a proxy too (a direct connection would be refused)
    s = socket.socket()
    s.settimeout(WAIT_S)
    s.connect(("127.0.0.1", port))
    s.sendall(b"PROXY TCP4 203.0.113.5 127.0.0.1 1 80\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    st, _, body = read_http(s)
    s.close()
    assert st == 200
    assert int(re.search(rb"^moshid_proxy_header_refused_total (\d+)", body, re.M).group(1)) >= 3
    assert int(re.search(rb"^moshid_handshake_timeouts_total (\d+)", body, re.M).group(1)) >= 1


def test_proxy_header_from_untrusted_is_refused(daemons):
    """Only 127.0.0.2 is trusted: a v1 header from 127.0.0.1 gets 400 (not
    served as if it were not there; libwebsockets alone would skip the
    line), a v2 one is closed (no HTTP at all), both counted; one from
    127.0.0.2 is read, and plain requests from 127.0.0.1 are served."""
    p, port, log = daemons(server__listen="127.0.0.1", server__proxy_protocol_from=["127.0.0.2"])
    assert via(port, b"PROXY TCP4 203.0.113.5 127.0.0.1 40000 80\r\n", HEALTHZ) == 400
    wait_log(log, r"status=400 msg=\"bad request: a PROXY protocol header from an address not in", "the 400")
    assert via(port, v2_header("203.0.113.5", 1), HEALTHZ) is None
    wait_log(log, r"event=proxy_header_untrusted", "the v2 header's close")
    assert via(port, b"", HEALTHZ) == 200
    assert via(port, b"PROXY TCP4 203.0.113.5 127.0.0.1 40000 80\r\n", HEALTHZ, src="127.0.0.2") == 200
    assert metric(port, "moshid_proxy_header_refused_total") == 2


def test_per_address_limit_sees_the_client(daemons):
    """max_connections_per_ip = 1: two sessions through one proxy from two
    clients both open; a second one of the same client gets 429."""
    p, port, log = daemons(server__listen="127.0.0.1", server__proxy_protocol_from=["127.0.0.1"],
                           server__max_connections_per_ip=1, limits__idle_timeout_s=60)

    def ws(client):
        s = socket.socket()
        s.settimeout(WAIT_S)
        s.connect(("127.0.0.1", port))
        s.sendall(f"PROXY TCP4 {client} 127.0.0.1 40000 80\r\n".encode() +
                  b"GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        return s, read_http(s)[0]

    a, st_a = ws("203.0.113.10")
    b, st_b = ws("203.0.113.11")
    c, st_c = ws("203.0.113.10")
    try:
        assert (st_a, st_b, st_c) == (101, 101, 429)
        wait_log(log, r"event=session_open id=\d+ peer=203\.0\.113\.11", "the second client's session")
    finally:
        for s in (a, b, c):
            s.close()
