"""`moshid --self-signed DIR`: the certificate and key it writes (names,
validity, key type, permissions), the daemon serving https and wss with
them to a client that trusts that certificate alone, and the refusal to
overwrite an existing pair."""
import asyncio
import datetime
import fcntl
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import stat
import struct
import subprocess
import time
import urllib.request

import pytest

import moshi_client as mc
from helpers import start_daemon, stop_daemon
from test_daemon import frames_in

DAYS = 365  # SELFSIGN_DAYS in daemon/net/selfsign.h


def self_signed(build_dir, d):
    return subprocess.run([str(build_dir / "moshid"), "--self-signed", str(d)], capture_output=True, text=True)


def x509_text(cert):
    r = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cert_dates(cert):
    r = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-startdate", "-enddate"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines())

    def parse(s):  # "Dec  1 12:13:26 2026 GMT"
        return datetime.datetime.strptime(" ".join(s.split()), "%b %d %H:%M:%S %Y %Z").replace(
            tzinfo=datetime.timezone.utc)
    return parse(out["notBefore"]), parse(out["notAfter"])


def sans(text):
    """The subjectAltName entries of `openssl x509 -text` as (kind, value),
    IP addresses normalised (OpenSSL writes IPv6 uncompressed)."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if "Subject Alternative Name" in line)
    out = set()
    for item in lines[i + 1].split(","):
        kind, _, value = item.strip().partition(":")
        if kind == "IP Address":
            out.add(("IP", str(ipaddress.ip_address(value))))
        else:
            out.add((kind, value))
    return out


def host_addresses():
    """This host's addresses on interfaces that are up, but loopback and
    IPv6 link-local ones (what the certificate must name): every address of
    an RTM_GETADDR dump over rtnetlink (what `ip addr` and getifaddrs() read;
    no command needed), the interface's flags by SIOCGIFFLAGS."""
    out = set()
    for index, family, raw in netlink_addresses():
        try:
            flags = if_flags(socket.if_indextoname(index))
        except OSError:  # the interface went away since the dump
            continue
        if not flags & IFF_UP or flags & IFF_LOOPBACK:
            continue
        ip = ipaddress.ip_address(raw)
        if ip.is_loopback or (ip.version == 6 and ip.is_link_local):
            continue
        out.add(str(ip))
    return out


IFF_UP, IFF_LOOPBACK = 0x1, 0x8  # <net/if.h>
SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>
RTM_GETADDR, RTM_NEWADDR = 22, 20  # <linux/rtnetlink.h>
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300  # <linux/netlink.h>
NLMSG_ERROR, NLMSG_DONE = 2, 3
IFA_ADDRESS, IFA_LOCAL = 1, 2  # <linux/if_addr.h>


def if_flags(name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh14x", name.encode(), 0)  # struct ifreq: name, ifr_flags
        return struct.unpack("16sh14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1] & 0xffff


def netlink_addresses():
    """(interface index, family, address bytes) of every address: IFA_LOCAL
    where the kernel gives one (the local end of a point-to-point link),
    else IFA_ADDRESS, as getifaddrs() does."""
    out = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as s:
        # struct nlmsghdr (16 bytes) + struct ifaddrmsg (8 bytes), any family
        s.sendall(struct.pack("=IHHII", 24, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                  + struct.pack("=BBBBI", socket.AF_UNSPEC, 0, 0, 0, 0))
        while True:
            data = s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
                assert length >= 16, "malformed netlink message"
                if kind == NLMSG_DONE:
                    return out
                assert kind != NLMSG_ERROR, "RTM_GETADDR refused"
                if kind == RTM_NEWADDR:
                    family, _, _, _, index = struct.unpack_from("=BBBBI", data, off + 16)
                    attrs, a = {}, off + 24
                    while a + 4 <= off + length:
                        alen, atype = struct.unpack_from("=HH", data, a)
                        if alen < 4:
                            break
                        attrs[atype] = data[a + 4:a + alen]
                        a += (alen + 3) & ~3
                    raw = attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS))
                    if family in (socket.AF_INET, socket.AF_INET6) and raw:
                        out.append((index, family, raw))
                off += (length + 3) & ~3


@pytest.fixture(scope="module")
def pair(build_dir, tmp_path_factory):
    """One pair in a directory that did not exist (--self-signed makes it)."""
    d = tmp_path_factory.mktemp("ss") / "tls"
    r = self_signed(build_dir, d)
    assert r.returncode == 0, r.stderr
    return d, r.stdout


def test_files_and_permissions(pair):
    d, _ = pair
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "moshid.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / "moshid.crt").st_mode) == 0o644
    # written under temporary names, then linked: none left behind
    assert sorted(os.listdir(d)) == ["moshid.crt", "moshid.key"]
    key = (d / "moshid.key").read_text()
    assert key.startswith("-----BEGIN PRIVATE KEY-----")   # PKCS#8, unencrypted (the daemon reads it unattended)
    r = subprocess.run(["openssl", "pkey", "-in", str(d / "moshid.key"), "-noout", "-text"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "NIST CURVE: P-256" in r.stdout, r.stdout + r.stderr


def test_certificate_fields(pair):
    d, out = pair
    text = x509_text(d / "moshid.crt")
    assert "Version: 3 (0x2)" in text
    assert "Public Key Algorithm: id-ecPublicKey" in text and "NIST CURVE: P-256" in text
    assert "Signature Algorithm: ecdsa-with-SHA256" in text
    assert re.search(r"Basic Constraints: critical\s+CA:FALSE", text)
    assert "TLS Web Server Authentication" in text
    # self-signed: issuer = subject, and it verifies against itself, strictly
    assert re.search(r"Issuer: (.*)\n", text)[1] == re.search(r"Subject: (.*)\n", text)[1]
    r = subprocess.run(["openssl", "verify", "-x509_strict", "-purpose", "sslserver", "-CAfile",
                        str(d / "moshid.crt"), str(d / "moshid.crt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

    nb, na = cert_dates(d / "moshid.crt")
    now = datetime.datetime.now(datetime.timezone.utc)
    # valid now (backdated an hour for clients' clock skew), for a year;
    # the two ends are taken from two reads of the clock: a minute of slack
    assert nb <= now - datetime.timedelta(minutes=50)
    assert abs((na - nb) - datetime.timedelta(days=DAYS)) < datetime.timedelta(minutes=1)

    names = sans(text)
    assert {("DNS", "localhost"), ("IP", "127.0.0.1"), ("IP", "::1")} <= names
    host = socket.gethostname()
    if re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
                    host):
        assert ("DNS", host) in names
        if "." not in host:
            assert ("DNS", host + ".local") in names
    else:
        assert f'host name "{host}" left out' in out
    addrs = host_addresses()
    if "more addresses left out" not in out:
        assert {("IP", a) for a in addrs} <= names, (addrs, names)
    assert not any(k == "IP" and ipaddress.ip_address(v).is_link_local for k, v in names)

    # what it prints: the fingerprint (as openssl computes it), the names,
    # and configuration lines that name the two files
    r = subprocess.run(["openssl", "x509", "-in", str(d / "moshid.crt"), "-noout", "-fingerprint", "-sha256"],
                       capture_output=True, text=True)
    fp = r.stdout.strip().split("=", 1)[1]
    assert f"SHA-256 fingerprint: {fp}" in out
    line = next(x for x in out.splitlines() if '"server":' in x)
    conf = json.loads("{" + line.strip() + "}")
    assert conf == {"server": {"tls_cert": str(d / "moshid.crt"), "tls_key": str(d / "moshid.key")}}
    assert f"--set server.tls_cert={d / 'moshid.crt'} --set server.tls_key={d / 'moshid.key'}" in out


def test_refuses_to_overwrite(build_dir, pair, tmp_path):
    d, _ = pair
    before = {n: (d / n).read_bytes() for n in ("moshid.crt", "moshid.key")}
    r = self_signed(build_dir, d)
    assert r.returncode == 1 and "already exists: not overwritten" in r.stderr, r.stderr
    assert {n: (d / n).read_bytes() for n in before} == before
    # one of the two is enough to refuse, and the other is not made
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(d / "moshid.crt", half / "moshid.crt")
    r = self_signed(build_dir, half)
    assert r.returncode == 1 and "moshid.crt already exists" in r.stderr, r.stderr
    assert sorted(os.listdir(half)) == ["moshid.crt"]
    # a file where the directory should be
    f = tmp_path / "file"
    f.write_text("x")
    r = self_signed(build_dir, f)
    assert r.returncode == 1 and "is not a directory" in r.stderr, r.stderr
    # two runs make two different keys and serial numbers
    r = self_signed(build_dir, tmp_path / "other")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "other" / "moshid.key").read_bytes() != before["moshid.key"]


def test_daemon_serves_wss_with_it(build_dir, pair, tmp_path):
    """The daemon with the pair; clients that trust only that certificate and
    check the name: https by IP address (127.0.0.1), a TLS handshake for the
    name localhost, and a wss session that streams and gets every frame."""
    d, _ = pair
    p, port, log = start_daemon(build_dir, tmp_path, server__tls_cert=str(d / "moshid.crt"),
                                server__tls_key=str(d / "moshid.key"))
    try:
        ctx = ssl.create_default_context(cafile=str(d / "moshid.crt"))
        assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=10) as resp:
            assert resp.status == 200
            variant = json.loads(resp.read())["variant"]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")
        # a name the certificate does not carry is refused by the same client
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw, server_hostname="not-this-host.example")

        pcm = mc.speech_pcm("Secure audio over a self-signed certificate.", seconds=2.0)
        expect = frames_in(pcm) - {"kyutai": 1, "personaplex": 2}[variant]
        msgs = mc.sphn_messages(pcm)

        async def wss():
            import aiohttp
            res = mc.Result()
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(f"wss://127.0.0.1:{port}/api/chat", ssl=ctx, max_msg_size=0) as ws:
                    recv = asyncio.ensure_future(mc._receiver(ws, res, stop_after_audio=expect))
                    t0 = time.monotonic()
                    for i, m in enumerate(msgs):
                        if m:
                            await ws.send_bytes(m)
                        delay = t0 + (i + 1) * mc.FRAME / mc.SR - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                    # every frame comes back within the tail (wide: a loaded CI machine)
                    try:
                        await asyncio.wait_for(recv, timeout=30)
                    except asyncio.TimeoutError:
                        pass
            return res

        res = asyncio.run(wss())
        assert res.handshake is not None and res.errors == []
        assert len(res.audio) == expect
    finally:
        stop_daemon(p, log)
