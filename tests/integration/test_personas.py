"""Personas in sessions (docs/personaplex.md, "Personas in sessions"):
configured personas primed at start-up and restored into each session
that asks (persona=NAME), on-demand prompts (voice_prompt + text_prompt)
primed on a slot of their own and cached, the cache under its budget,
SIGHUP adding and removing personas under live sessions, refusals, a
Kyutai checkpoint refusing personas, and a prime that leaves the others'
frames on time.

Every wait is for an event (a handshake, a close, a metric, a log line)
with a generous deadline, for a loaded 2-core machine; no test depends on
how long something takes."""
import asyncio
import json
import shutil
import signal
import struct
import subprocess
import threading
import time
import wave

import numpy as np
import pytest

import moshi_client as mc
from conftest import ROOT
from helpers import get, metric, start_daemon, stop_daemon, wait_for
from test_daemon import frames_in

DEMO_VOICE = ROOT / "config" / "demo" / "voices" / "demo.flac"
ROLE = "You are a careful assistant. Keep your answers short and friendly."
GREEDY = "text_temperature=0&audio_temperature=0"
LAG = 2  # PersonaPlex's step: N input frames give N - 2 outputs


def write_wav(path, pcm, rate=mc.SR):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())


def write_safetensors(path, tensors):
    """A safetensors file from {name: numpy array} (float32 / int32)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {"float32": "F32", "int32": "I32"}[str(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def voices(tmp_path):
    """A voice directory with the bundled demo voice as ada.flac and a file
    outside it that traversal would reach."""
    d = tmp_path / "voices"
    d.mkdir(exist_ok=True)
    shutil.copy(DEMO_VOICE, d / "ada.flac")
    write_wav(tmp_path / "secret.wav", mc.speech_pcm("secret", seconds=1.0))
    return d


def persona(name, voice, text=ROLE, **kw):
    return dict(name=name, description=f"{name} for the tests", voice=str(voice), text=text, **kw)


def session(port, query, pcm=None, realtime=False, n=None, tail_s=5.0):
    if pcm is None:
        pcm = mc.speech_pcm("Hello, who are you today?", seconds=2.0)
    if n is None:
        n = frames_in(pcm) - LAG
    t0 = time.monotonic()
    res = asyncio.run(mc.session(port, pcm=pcm, query=query, realtime=realtime, expect_audio=n, tail_s=tail_s))
    res.handshake_s = (res.t_handshake - t0) if res.t_handshake else None
    return res


def refused(port, query):
    return asyncio.run(mc.session(port, query=query, tail_s=10))


def served_outputs(rec):
    files = sorted(rec.glob("session-*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line)["out"] for line in files[0].read_text().splitlines()], files[0].with_suffix(".codes")


@pytest.fixture(scope="module")
def pdaemon(build_dir, tmp_path_factory):
    """A daemon with one configured persona (ada: the demo voice, a role
    text, a text top-k override) and a voice directory for on-demand
    prompts."""
    tmp = tmp_path_factory.mktemp("pers")
    vd = voices(tmp)
    p, port, log = start_daemon(build_dir, tmp, sessions=8, personas__voices_dir=str(vd),
                                personas__list=[persona("ada", vd / "ada.flac", text_topk=5)])
    p.tmp, p.vd = tmp, vd
    yield p, port, log
    stop_daemon(p, log)


def test_configured_persona_is_restored(pdaemon):
    """persona=NAME: the snapshot primed at start-up is restored (no prime
    for the session), the session streams, the persona's sampling override
    applies unless the query sets its own; /api/personas lists it; the
    daemon listened only once the persona was primed."""
    p, port, log = pdaemon
    text = open(log).read()
    assert text.index("event=persona_primed") < text.index("event=listen"), "listened before priming"
    st, body = get(port, "/api/personas")
    assert st == 200
    api = json.loads(body)
    assert api["personas"] == [{"name": "ada", "description": "ada for the tests", "ready": True}]
    assert api["on_demand"] is True and api["voice_prompt"] is True
    primes0, restores0 = metric(port, "moshid_persona_primes_total"), metric(port, "moshid_persona_restores_total")
    res = session(port, "persona=ada")
    assert res.errors == [] and res.handshake is not None
    assert len(res.audio) == frames_in(mc.speech_pcm("Hello, who are you today?", seconds=2.0)) - LAG
    meta = json.loads(res.meta)
    assert meta["persona"]["name"] == "ada" and len(meta["persona"]["key"]) == 16
    assert meta["sampling"]["text_topk"] == 5  # the persona's override
    res = session(port, "persona=ada&text_topk=9")
    assert res.errors == [] and json.loads(res.meta)["sampling"]["text_topk"] == 9  # the query wins
    assert metric(port, "moshid_persona_primes_total") == primes0  # restores, no priming
    assert metric(port, "moshid_persona_restores_total") == restores0 + 2
    assert metric(port, "moshid_personas") == 1
    assert metric(port, "moshid_persona_cache_bytes") > 0


@pytest.mark.parametrize("query,status,needle", [
    ("persona=nobody", 1008, "unknown persona"),
    ("voice_prompt=nobody.pt&text_prompt=hi", 1008, "unknown voice_prompt"),
    ("voice_prompt=../secret.wav", 1008, "plain file name"),
    ("voice_prompt=..%2Fsecret.wav", 1008, "plain file name"),
    ("voice_prompt=%2Fetc%2Fpasswd", 1008, "plain file name"),
    ("voice_prompt=.ada.flac", 1008, "must not start with '.'"),
    ("voice_prompt=voices%5C..%5Csecret.wav", 1008, "plain file name"),
    ("persona=ada&voice_prompt=ada.pt", 1008, "not both"),
    ("persona=..%2Fada", 1008, "bad query"),
])
def test_refusals(pdaemon, query, status, needle):
    """Unknown personas and voices, traversal in any spelling: an error
    message naming the problem and 1008; the daemon keeps serving."""
    _, port, _ = pdaemon
    res = refused(port, query)
    assert res.errors and needle in res.errors[0], res.errors
    assert res.close_code == status and res.handshake is None
    assert session(port, "persona=ada").errors == []


def test_on_demand_primes_then_caches(pdaemon):
    """voice_prompt=STEM.pt + text_prompt: primed once on demand (the
    waiting client gets its handshake after the prime), cached; the same
    prompt again is a cache hit restored without priming; the same voice
    with another text is another prime."""
    _, port, _ = pdaemon
    q = "voice_prompt=ada.pt&text_prompt=" + "You+are+a+pirate.+Speak+like+one."
    primes0, hits0 = metric(port, "moshid_persona_primes_total"), metric(port, "moshid_persona_cache_hits_total")
    misses0 = metric(port, "moshid_persona_cache_misses_total")
    a = session(port, q)
    assert a.errors == [] and a.handshake is not None
    assert metric(port, "moshid_persona_primes_total") == primes0 + 1
    assert metric(port, "moshid_persona_cache_misses_total") == misses0 + 1
    b = session(port, q)
    assert b.errors == [] and b.handshake is not None
    assert metric(port, "moshid_persona_primes_total") == primes0 + 1
    assert metric(port, "moshid_persona_cache_hits_total") == hits0 + 1
    assert json.loads(a.meta)["persona"]["key"] == json.loads(b.meta)["persona"]["key"]
    assert json.loads(a.meta)["persona"]["name"] is None
    print(f"handshake: on-demand prime {a.handshake_s * 1000:.1f} ms, cached restore {b.handshake_s * 1000:.1f} ms")
    c = session(port, "voice_prompt=ada.wav&text_prompt=You+are+a+poet.")
    assert c.errors == [] and metric(port, "moshid_persona_primes_total") == primes0 + 2
    assert json.loads(c.meta)["persona"]["key"] != json.loads(a.meta)["persona"]["key"]


def test_restore_matches_on_demand_and_offline(build_dir, tmp_path):
    """Greedy, the same input: a session restoring the configured persona
    (primed at start-up) gives the same tokens as a session of another
    daemon that primes the same voice and text on demand, and both equal
    `moshi-run --greedy` primed offline by single steps from the prompt the
    daemon recorded (debug.record_dir: the voice codes, the wrapped role
    text's ids, the codec's SILENCE/SINE)."""
    vd = voices(tmp_path)
    pcm = mc.speech_pcm("Served, primed on demand, and offline must agree.", seconds=3.0)
    n = frames_in(pcm) - LAG
    outs = {}
    for name in ("configured", "on_demand"):
        rec = tmp_path / f"rec-{name}"
        rec.mkdir()
        over = dict(debug__record_dir=str(rec), personas__voices_dir=str(vd))
        if name == "configured":
            over["personas__list"] = [persona("ada", vd / "ada.flac")]
        p, port, log = start_daemon(build_dir, tmp_path, **over)
        try:
            q = "persona=ada" if name == "configured" else "voice_prompt=ada.pt&text_prompt=" + ROLE.replace(" ", "+")
            res = session(port, q + "&" + GREEDY, pcm=pcm, n=n)
            assert res.errors == [] and len(res.audio) == n
            key = json.loads(res.meta)["persona"]["key"]
        finally:
            stop_daemon(p, log)
        outs[name], codes = served_outputs(rec)
        outs[name + "_codes"] = codes.read_text()
        outs[name + "_rec"], outs[name + "_key"] = rec, key
    assert outs["configured_key"] == outs["on_demand_key"]
    # the client closes once it has n frames back: the frames the daemon
    # stepped after that differ between the runs, so compare what both did
    ca, cb = outs["configured_codes"].splitlines(), outs["on_demand_codes"].splitlines()
    m = min(len(ca), len(cb), len(outs["configured"]), len(outs["on_demand"]))
    assert m >= n, (len(ca), len(cb), n)
    assert ca[:m] == cb[:m]
    assert outs["configured"][:m] == outs["on_demand"][:m]
    rec, key = outs["configured_rec"], outs["configured_key"]
    pre = rec / f"prime-{key}"
    assert (rec / f"prime-{key}.voice-codes").exists()
    r = subprocess.run([str(build_dir / "moshi-run"), "--lm", str(build_dir / "demo" / "lm"), "--codes-in",
                        str(sorted(rec.glob("session-*.codes"))[0]), "--greedy", "--prime-mode", "steps",
                        "--voice-codes", f"{pre}.voice-codes", "--text-ids", f"{pre}.text-ids",
                        "--silence-tokens", f"{pre}.silence", "--sine-tokens", f"{pre}.sine"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    offline = [json.loads(line)["out"] for line in r.stdout.splitlines()]
    assert offline == outs["configured"]


def test_reload_adds_and_removes_personas(build_dir, tmp_path):
    """SIGHUP: a persona removed while a session streams with it leaves
    that session undisturbed; the persona added is primed and served; one
    whose text changed is primed again; the removed one is refused after."""
    vd = voices(tmp_path)
    p, port, log = start_daemon(build_dir, tmp_path, personas__voices_dir=str(vd),
                                personas__list=[persona("a", vd / "ada.flac"),
                                                persona("c", vd / "ada.flac", text="You are C.")])
    try:
        pcm = mc.speech_pcm("I keep talking while the personas change under me.", seconds=6.0)
        n = frames_in(pcm) - LAG
        out = {}

        def bg():
            out["res"] = asyncio.run(mc.session(port, pcm=pcm, query="persona=a", expect_audio=n))

        primes0 = metric(port, "moshid_persona_primes_total")
        t = threading.Thread(target=bg)
        t.start()
        wait_for(lambda: metric(port, "moshid_sessions_started_total") >= 1, 20, "the session's handshake")
        cfg = p.cfg
        cfg["personas"]["list"] = [persona("b", vd / "ada.flac", text="You are B."),
                                   persona("c", vd / "ada.flac", text="You are C, changed.")]
        p.cfg_path.write_text(json.dumps(cfg))
        p.send_signal(signal.SIGHUP)

        def reloaded():
            ps = {x["name"]: x["ready"] for x in json.loads(get(port, "/api/personas")[1])["personas"]}
            return ps == {"b": True, "c": True} and metric(port, "moshid_persona_primes_total") == primes0 + 2

        wait_for(reloaded, 30, "b primed and c primed again")
        t.join(timeout=60)
        r = out["res"]
        assert r.errors == [] and len(r.audio) == n, "the session of the removed persona was disturbed"
        res = refused(port, "persona=a")
        assert res.errors and "unknown persona" in res.errors[0] and res.close_code == 1008
        for name in ("b", "c"):
            res = session(port, f"persona={name}")
            assert res.errors == [] and res.handshake is not None
        text = open(log).read()
        assert "event=persona_removed name=a" in text and "event=personas_reloaded" in text
        assert "added=1 changed=1 removed=1" in text
    finally:
        stop_daemon(p, log)


def test_eviction_under_a_small_budget(build_dir, tmp_path):
    """personas.cache_bytes (reloadable) bounds the on-demand snapshots: with
    room for one, a second prompt evicts the first (least recently used);
    the first asked again is primed again; the configured persona is pinned
    and not counted."""
    vd = voices(tmp_path)
    p, port, log = start_daemon(build_dir, tmp_path, personas__voices_dir=str(vd),
                                personas__list=[persona("ada", vd / "ada.flac")])
    try:
        pinned = metric(port, "moshid_persona_cache_bytes")
        qa = "voice_prompt=ada.pt&text_prompt=You+are+Alice."
        qb = "voice_prompt=ada.pt&text_prompt=You+are+Bruno."
        assert session(port, qa).errors == []
        one = metric(port, "moshid_persona_cache_bytes") - pinned
        assert one > 0
        cfg = p.cfg
        cfg["personas"]["cache_bytes"] = int(one * 1.5)
        p.cfg_path.write_text(json.dumps(cfg))
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: "personas.cache_bytes" in open(log).read(), 20, "the reload")
        ev0, primes0 = metric(port, "moshid_persona_cache_evictions_total"), metric(port, "moshid_persona_primes_total")
        assert session(port, qb).errors == []
        assert metric(port, "moshid_persona_cache_evictions_total") == ev0 + 1
        assert metric(port, "moshid_persona_cache_entries") == 2  # ada (pinned) and Bruno
        assert metric(port, "moshid_persona_cache_bytes") - pinned <= int(one * 1.5)
        assert session(port, qa).errors == []  # Alice was evicted: primed again, Bruno goes
        assert metric(port, "moshid_persona_primes_total") == primes0 + 2
        assert metric(port, "moshid_persona_cache_evictions_total") == ev0 + 2
        assert session(port, "persona=ada").errors == []  # pinned: still there
        assert metric(port, "moshid_persona_primes_total") == primes0 + 2
    finally:
        stop_daemon(p, log)


def test_slow_prime_pings_joins_and_caps(build_dir, tmp_path):
    """A prime the engine makes slow on purpose (debug.step_delay_ms, each
    chunk of 4 positions): the waiting client gets a ping (kind 6) every
    ~2 s before its handshake; a second client asking for the same prompt
    joins the prime (one prime for both); a third asking for another
    prompt while the one prime slot is busy is told "server busy" (1013);
    a saved voice (.safetensors, as moshid-voice-convert.py writes) is
    primed too, and a broken one is refused with 1011."""
    vd = voices(tmp_path)
    rows = np.random.default_rng(1).standard_normal((20, 128)).astype(np.float32) * 0.1
    cache = np.full((17, 4), 2048, dtype=np.int32)
    cache[0, :] = 3
    write_safetensors(vd / "NATF9.safetensors", {"embeddings": rows, "cache": cache})
    (vd / "BROKEN.safetensors").write_bytes(b"not a safetensors file")
    p, port, log = start_daemon(build_dir, tmp_path, personas__voices_dir=str(vd), debug__step_delay_ms=200,
                                personas__prime_chunk_positions=4)
    try:
        q = "voice_prompt=ada.pt&text_prompt=" + "+".join(["You are slow to prime."] * 3).replace(" ", "+")
        out = {}

        def client(tag, query):
            out[tag] = asyncio.run(mc.session(port, query=query, tail_s=2))

        ta = threading.Thread(target=client, args=("a", q))
        ta.start()
        wait_for(lambda: metric(port, "moshid_persona_primes_running") == 1, 20, "the prime to start")
        tb = threading.Thread(target=client, args=("b", q))
        tb.start()
        wait_for(lambda: open(log).read().count("event=session_persona_wait") == 2, 20, "b to wait")
        c = refused(port, "voice_prompt=ada.pt&text_prompt=Another+prompt.")
        assert c.errors and c.errors[0].startswith("server busy: 1 persona prime is running"), c.errors
        assert c.close_code == 1013
        ta.join(timeout=120)
        tb.join(timeout=120)
        for tag in "ab":
            r = out[tag]
            assert r.errors == [] and r.handshake is not None, (tag, r.errors)
        pings = [m for m in out["a"].other if m == b"\x06"]
        assert pings, "no ping before the handshake"
        assert metric(port, "moshid_persona_primes_total") == 1
        # no audio from here on: the engine is slow on purpose, streaming would overload it
        r = asyncio.run(mc.session(port, query="voice_prompt=NATF9.pt&text_prompt=Saved+voice.", tail_s=1))
        assert r.errors == [] and r.handshake is not None
        r = refused(port, "voice_prompt=BROKEN.pt")
        assert r.errors and "cannot be primed" in r.errors[0] and r.close_code == 1011, r.errors
        assert metric(port, "moshid_persona_prime_failures_total") == 1
        r = asyncio.run(mc.session(port, tail_s=1))
        assert r.errors == [] and r.handshake is not None
    finally:
        stop_daemon(p, log)


def sanitized(build_dir):
    """A sanitizer build (make asan) is checked for correctness, not for pace."""
    r = subprocess.run([str(build_dir / "moshid"), "--version"], capture_output=True, text=True)
    return "-fsanitize" in r.stdout


def test_prime_keeps_others_on_time(build_dir, tmp_path):
    """Eight sessions stream in real time while a ninth asks for a long
    uncached prompt (a 20 s voice and a long role text, primed in chunks
    between their steps): their frames are not made late. Late frames
    (moshid_late_frames_total) are counted over the same eight sessions
    without a prime and with one; with the prime they stay within a margin
    of the run without (a loaded machine makes some late frames anyway)."""
    if sanitized(build_dir):
        pytest.skip("timing under a sanitizer build means nothing")
    vd = voices(tmp_path)
    write_wav(vd / "long.wav", mc.speech_pcm("This is a long voice prompt for the persona of the test. " * 4,
                                             seconds=20.0))
    p, port, log = start_daemon(build_dir, tmp_path, sessions=9, personas__voices_dir=str(vd),
                                limits__idle_timeout_s=60)
    try:
        pcm = mc.speech_pcm("Eight people talk while a persona is primed for a ninth.", seconds=8.0)
        n = frames_in(pcm) - LAG
        long_text = "+".join(["You are a patient teacher who explains everything step by step."] * 6).replace(" ", "+")

        async def run(with_prime):
            tasks = [mc.session(port, pcm=pcm, expect_audio=n) for _ in range(8)]

            async def ninth():
                await asyncio.sleep(2.0)  # the scenario: the ninth comes while the others talk
                t0 = time.monotonic()
                r = await mc.session(port, query="voice_prompt=long.pt&text_prompt=" + long_text, tail_s=1)
                r.wait_s = (r.t_handshake or t0) - t0
                return r

            if with_prime:
                tasks.append(ninth())
            return await asyncio.gather(*tasks)

        results = {}
        for with_prime in (False, True):
            late0, frames0 = metric(port, "moshid_late_frames_total"), metric(port, "moshid_frames_stepped_total")
            res = asyncio.run(run(with_prime))
            for r in res[:8]:
                assert r.errors == [] and len(r.audio) == n, r.errors
            results[with_prime] = (metric(port, "moshid_late_frames_total") - late0,
                                   metric(port, "moshid_frames_stepped_total") - frames0)
            if with_prime:
                assert res[8].errors == [] and res[8].handshake is not None, res[8].errors
        assert metric(port, "moshid_persona_primes_total") == 1
        primed = [line for line in open(log) if "event=persona_primed" in line][-1]
        (late_base, frames_base), (late_prime, frames_prime) = results[False], results[True]
        print(f"late frames: {late_base}/{frames_base} without a prime, {late_prime}/{frames_prime} with one; {primed}")
        assert late_prime <= late_base + max(16, 0.1 * frames_prime), (results, primed)
    finally:
        stop_daemon(p, log)


def test_startup_fails_on_a_bad_persona(build_dir, tmp_path):
    """A configured persona that cannot be primed (its voice is not audio)
    stops the start-up: exit status 1, the message names the persona."""
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really a wave file")
    demo = build_dir / "demo"
    cfg = {"model": {"lm_dir": str(demo / "lm"), "mimi": str(demo / "mimi.safetensors"),
                     "mimi_config": str(demo / "mimi.json"), "tokenizer": str(demo / "tokenizer.model")},
           "server": {"port": 0}, "engine": {"backend": "cpu", "threads": 1},
           "personas": {"list": [persona("broken", bad)]}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([str(build_dir / "moshid"), "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "serving on" not in r.stdout
    assert "persona broken cannot be primed" in r.stderr or "broken" in r.stderr, r.stderr[-2000:]


def test_kyutai_checkpoint_refuses_personas(build_dir, tmp_path):
    """A Kyutai checkpoint: persona parameters get an error saying personas
    need PersonaPlex (1008), /api/personas lists none, and a configuration
    with personas is refused by --check-config and at start."""
    demo = build_dir / "demo"
    p, port, log = start_daemon(build_dir, tmp_path, model__lm_dir=str(demo / "kyutai" / "lm"),
                                personas__voices_dir=str(voices(tmp_path)))
    try:
        for q in ("persona=ada", "voice_prompt=ada.pt&text_prompt=hi", "text_prompt=hi"):
            res = refused(port, q)
            assert res.errors and "need a PersonaPlex checkpoint" in res.errors[0], res.errors
            assert res.close_code == 1008
        api = json.loads(get(port, "/api/personas")[1])
        assert api == {"personas": [], "on_demand": False, "voice_prompt": False}
        assert session(port, "", n=frames_in(mc.speech_pcm("Hello, who are you today?", seconds=2.0)) - 1).errors == []
    finally:
        stop_daemon(p, log)
    cfg = dict(p.cfg)
    cfg["personas"] = {"list": [persona("ada", DEMO_VOICE)]}
    path = tmp_path / "kyutai-personas.json"
    path.write_text(json.dumps(cfg))
    for extra in (["--check-config"], []):
        r = subprocess.run([str(build_dir / "moshid"), "--config", str(path)] + extra, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1, (extra, r.stderr[-2000:])
        assert "Kyutai checkpoint" in r.stderr and "personas need a PersonaPlex checkpoint" in r.stderr, r.stderr
