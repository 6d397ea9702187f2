"""Choosing the backend (engine.backend, daemon/session/model.c) and a sticky device
error, with fake CUDA plugins instead of a GPU (tests/gpu/fake_plugin.c,
built by cuda/plan.mk): "fakecuda" carries a backend table that runs the
CPU backend and fails on request, "fakecuda-notable" carries none. Each test
points MOSHID_PLUGIN_DIR at one of them (the first place plugin_load looks),
so the real plugin beside the binary is not the one loaded."""
import asyncio
import json
import shutil
import subprocess

import moshi_client as mc
from helpers import get, start_daemon, stop_daemon

# A start-up refusal ends the process well within this (it happens while
# the model opens, before the port); generous for a loaded CI machine.
START_TIMEOUT_S = 60
# A fatal engine error ends the process: the sessions are told, then the
# normal shutdown (at most 2 s of grace for the sessions) runs.
EXIT_TIMEOUT_S = 60
ENGINE_FATAL_STATUS = 4   # daemon/app.h, docs/configuration.md


def plugin_env(build_dir, which, **extra):
    env = {"PATH": "/usr/bin:/bin", "MOSHID_PLUGIN_DIR": str(build_dir / "tests" / "plugins" / which)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def kyutai(build_dir):
    return str(build_dir / "demo" / "kyutai" / "lm")


def start_refused(build_dir, tmp_path, env, backend, moshid=None):
    """Run moshid with a configuration that must be refused at start-up;
    return (exit status, stderr)."""
    demo = build_dir / "demo"
    cfg = {
        "server": {"listen": "127.0.0.1", "port": 0},
        "model": {"lm_dir": kyutai(build_dir), "mimi": str(demo / "mimi.safetensors"),
                  "mimi_config": str(demo / "mimi.json"), "tokenizer": str(demo / "tokenizer.model")},
        "engine": {"backend": backend, "threads": 1},
        "sessions": {"max": 3},
    }
    path = tmp_path / f"refused-{backend}.json"
    path.write_text(json.dumps(cfg))
    r = subprocess.run([str(moshid or build_dir / "moshid"), "--config", str(path)], capture_output=True,
                       text=True, env=env, timeout=START_TIMEOUT_S)
    assert "serving on" not in r.stdout
    return r.returncode, r.stderr


def healthz(port):
    st, body = get(port, "/healthz")
    return json.loads(body)


def test_version_says_table_and_probe(build_dir):
    def version(**kw):
        r = subprocess.run([str(build_dir / "moshid"), "--version"], capture_output=True, text=True,
                           env=plugin_env(build_dir, **kw), timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = version(which="fakecuda")
    assert "  cuda  available (fake build with a backend table (CPU backend inside)): fake: 1 device(s)" in out
    assert "        backend table: yes (fakecuda)\n" in out
    out = version(which="fakecuda-notable")
    assert "  cuda  available (fake build without a backend table): fake: 1 device(s)" in out
    assert "        backend table: no (" in out
    out = version(which="fakecuda", MOSHID_FAKE_DEVICES=0)
    assert "no usable device: fake: no CUDA device (MOSHID_FAKE_DEVICES=0)" in out
    assert "backend table: yes (fakecuda); no usable device, so engine.backend = auto uses the CPU" in out


def test_auto_takes_the_plugin_backend(build_dir, tmp_path):
    """auto with a table and a device: the plugin's backend serves a real
    session (audio comes back through it)."""
    p, port, log = start_daemon(build_dir, tmp_path, env=plugin_env(build_dir, "fakecuda"),
                                engine__backend="auto", model__lm_dir=kyutai(build_dir), sessions=2)
    try:
        h = healthz(port)
        assert h["backend"] == "fakecuda"
        pcm = mc.speech_pcm("Hello, this goes through the plugin's backend.", seconds=2.0)
        res = asyncio.run(mc.session(port, pcm=pcm, expect_audio=5, tail_s=10))
        assert res.errors == []
        assert len(res.audio) >= 5
    finally:
        stop_daemon(p, log)
    text = open(log).read()
    assert 'backend_auto chosen=fakecuda devices=1 gpu=0 probe="fake: 1 device(s)' in text, text[-3000:]
    assert "cuda_plan slots=2 context=" in text


def test_cuda_options_reach_the_backend(build_dir, tmp_path):
    """The cuda.* options travel to the plugin's open (lm_backend_opts.gpu);
    the MOSHID_CU_* variables override them there."""
    set_all = {"cuda__codec": "host", "cuda__gemm_min_rows": 3, "cuda__graphs": False, "cuda__codec_graphs": False}
    for over, extra, want in [
        ({}, {}, "codec_host=0 gemm_min_rows=0 graphs_off=0 codec_graphs_off=0"),
        (set_all, {}, "codec_host=1 gemm_min_rows=3 graphs_off=1 codec_graphs_off=1"),
        (set_all, {"MOSHID_CU_MIMI": "gpu", "MOSHID_CU_GRAPHS": "1", "MOSHID_CU_GEMM_MIN_ROWS": "9"},
         "codec_host=0 gemm_min_rows=9 graphs_off=0 codec_graphs_off=1"),
    ]:
        p, port, log = start_daemon(build_dir, tmp_path, env=plugin_env(build_dir, "fakecuda", **extra),
                                    engine__backend="cuda", model__lm_dir=kyutai(build_dir), sessions=1, **over)
        try:
            assert healthz(port)["backend"] == "fakecuda"
        finally:
            stop_daemon(p, log)
        text = open(log).read()
        assert "fakecuda_open gpu: " + want + "\n" in text, (over, extra, text[-2000:])


def test_auto_falls_back_to_cpu_and_says_why(build_dir, tmp_path):
    for which, extra, why in [
        ("fakecuda-notable", {}, "the CUDA plugin (fake build without a backend table) carries no backend table yet"),
        ("fakecuda", {"MOSHID_FAKE_DEVICES": 0}, "no usable CUDA device: fake: no CUDA device (MOSHID_FAKE_DEVICES=0)"),
    ]:
        p, port, log = start_daemon(build_dir, tmp_path, env=plugin_env(build_dir, which, **extra),
                                    engine__backend="auto", model__lm_dir=kyutai(build_dir), sessions=1)
        try:
            assert healthz(port)["backend"] == "cpu"
        finally:
            stop_daemon(p, log)
        text = open(log).read()
        assert f'backend_auto chosen=cpu reason="{why}"' in text, text[-3000:]


def test_cuda_demands_it(build_dir, tmp_path):
    """engine.backend = cuda: a start-up refusal (status 1) naming why."""
    rc, err = start_refused(build_dir, tmp_path, plugin_env(build_dir, "fakecuda-notable"), "cuda")
    assert rc == 1
    assert "engine.backend = cuda: the CUDA plugin (fake build without a backend table) carries no backend table" in err

    rc, err = start_refused(build_dir, tmp_path, plugin_env(build_dir, "fakecuda", MOSHID_FAKE_DEVICES=0), "cuda")
    assert rc == 1
    assert "engine.backend = cuda: no usable CUDA device: fake: no CUDA device (MOSHID_FAKE_DEVICES=0)" in err

    # the backend's open fails (not enough memory): its message, the GPU,
    # and the plan of what was asked (3 sessions, no prime slots: Kyutai)
    rc, err = start_refused(build_dir, tmp_path, plugin_env(build_dir, "fakecuda", MOSHID_FAKE_OPEN_FAIL=1), "cuda")
    assert rc == 1
    assert "backend fakecuda on GPU 0: fakecuda: not enough device memory for 3 slots" in err, err
    assert "(the plan for 3 slots at context 3000 needs " in err, err

    # auto does not fall back once a device was chosen: the same refusal
    rc, err = start_refused(build_dir, tmp_path, plugin_env(build_dir, "fakecuda", MOSHID_FAKE_OPEN_FAIL=1), "auto")
    assert rc == 1
    assert "backend fakecuda on GPU 0: fakecuda: not enough device memory" in err

    # no plugin at all: a copy of the binary with none beside it
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shutil.copy(build_dir / "moshid", bindir / "moshid")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": "/usr/bin:/bin", "MOSHID_PLUGIN_DIR": str(empty)}
    rc, err = start_refused(build_dir, tmp_path, env, "cuda", moshid=bindir / "moshid")
    assert rc == 1
    assert "engine.backend = cuda: backend cuda unavailable: libmoshid-cuda.so not found" in err, err


def test_sticky_device_error_ends_the_process(build_dir, tmp_path):
    """The step fails with MS_ERR_DEVICE after 5 steps: the session is told
    (internal error, close 1011) and moshid exits with status 4."""
    p, port, log = start_daemon(build_dir, tmp_path,
                                env=plugin_env(build_dir, "fakecuda", MOSHID_FAKE_STEP_FAIL_AFTER=5),
                                engine__backend="cuda", model__lm_dir=kyutai(build_dir), sessions=2)
    pcm = mc.speech_pcm("This session outlives the device.", seconds=3.0)
    res = asyncio.run(mc.session(port, pcm=pcm, tail_s=10))
    try:
        rc = p.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("moshid did not exit after the device error:\n" + open(log).read()[-3000:])
    text = open(log).read()
    assert rc == ENGINE_FATAL_STATUS, text[-3000:]
    assert any("internal error: the engine failed" in e for e in res.errors), res.errors
    assert res.close_code == 1011
    assert len(res.audio) <= 5   # Kyutai's step: 5 steps give at most 4 frames, none after the failure
    assert "fatal code=MS_ERR_DEVICE exit_status=4" in text
    assert "cudaErrorIllegalAddress" in text


def test_device_error_at_a_session_start(build_dir, tmp_path):
    """A device error in a session's start (its slot reset) is as fatal as
    one in a step: the process exits 4 rather than refusing sessions on a
    dead device."""
    p, port, log = start_daemon(build_dir, tmp_path,
                                env=plugin_env(build_dir, "fakecuda", MOSHID_FAKE_RESET_FAIL=1),
                                engine__backend="cuda", model__lm_dir=kyutai(build_dir), sessions=2)
    asyncio.run(mc.session(port, msgs=[], tail_s=5))
    try:
        rc = p.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("moshid did not exit after the device error:\n" + open(log).read()[-3000:])
    text = open(log).read()
    assert rc == ENGINE_FATAL_STATUS, text[-3000:]
    assert "fatal code=MS_ERR_DEVICE" in text and "MOSHID_FAKE_RESET_FAIL" in text


def test_operations_table_is_the_planners(build_dir):
    """docs/operations.md "GPU sizing" quotes moshid-plan --table for both
    shapes, and --table-8bit: the figures there are what the planner
    computes now."""
    from conftest import ROOT

    def table(preset, which="--table"):
        r = subprocess.run([str(build_dir / "moshid-plan"), "--preset", preset, which], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        rows = {}
        for line in r.stdout.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| ") and cells[0].endswith(" GB"):
                rows[cells[0]] = cells[1:]
        assert len(rows) == 4, r.stdout
        return rows

    moshi, pp = table("7b"), table("personaplex")
    moshi8, pp8 = table("7b", "--table-8bit"), table("personaplex", "--table-8bit")
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("## GPU sizing"):doc.index("## Several instances")]
    # the bf16 table, then (after "8-bit weights and K/V") the 8-bit one:
    # Moshi's four schemes and PersonaPlex's int8 / int8 K/V
    bf16, eight = section.split("**8-bit weights and K/V**", 1)
    seen = 0
    for line in bf16.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in moshi:
            assert cells[2:6] == moshi[cells[0]] + pp[cells[0]], (line, moshi[cells[0]], pp[cells[0]])
            seen += 1
    assert seen == 4
    for line in eight.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in moshi8:
            assert cells[1:6] == moshi8[cells[0]] + pp8[cells[0]][3:4], (line, moshi8[cells[0]], pp8[cells[0]])
            seen += 1
    assert seen == 8
