"""Sweeps that survive: resume after a kill, crash isolation, load once, Ctrl-C, clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.jobs.build import prepare
from specbench.registry import ConfigError

from helpers import compose as _compose
from helpers import run_sweep

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["pair=tiny", "max_new_tokens=40", "warmup=0", "verify_lossless=false"]


def _start(conf: Path, tmp: Path, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), "--config-dir", str(conf), *args, f"results_dir={tmp}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _wait_for_lines(path_glob, tmp: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in tmp.rglob(path_glob):
            if len(path.read_text().splitlines()) >= n:
                return path
        if proc.poll() is not None:
            raise AssertionError(f"finished before {n} records: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.slow  # a run.py subprocess sweep
def test_sigkill_mid_job_then_resume_keeps_whole_lines_and_no_duplicates(tiny_conf, tmp_path):
    proc = _start(tiny_conf, tmp_path, ARGS)
    records = _wait_for_lines("records.jsonl", tmp_path, 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = records.read_text().splitlines()
    assert all(json.loads(line) for line in kept)
    # a kill in the middle of a write leaves a torn line: simulate it
    with open(records, "a") as fh:
        fh.write('{"pair": "tiny", "prompt_id": "torn')
    summary = json.loads((records.parent / "summary.json").read_text())
    assert summary["status"] == "running"
    done = run_sweep(ARGS, tiny_conf, tmp_path, in_process=True)  # the resume
    assert done.returncode == 0, done.stderr[-2000:]
    lines = records.read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    ids = [(r["prompt_id"], r["turn"]) for r in rows]
    assert len(ids) == len(set(ids)) == 10
    assert lines[: len(kept)] == kept  # the prompts done before the kill were not redone
    assert json.loads((records.parent / "summary.json").read_text())["status"] == "complete"


@pytest.mark.slow  # a run.py subprocess sweep
def test_ctrl_c_stops_after_the_current_prompt_and_resumes(tiny_conf, tmp_path):
    proc = _start(tiny_conf, tmp_path, ARGS)
    records = _wait_for_lines("records.jsonl", tmp_path, 2, proc)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert 2 <= len(rows) < 10
    assert json.loads((records.parent / "summary.json").read_text())["status"] == "interrupted"
    done = run_sweep(ARGS, tiny_conf, tmp_path, in_process=True)  # the resume
    assert done.returncode == 0
    assert len(records.read_text().splitlines()) == 10


@pytest.mark.slow  # a run.py sweep (in this process: helpers.run_in_process)
def test_a_failing_job_does_not_stop_the_sweep(tiny_conf, tmp_path):
    broken = tiny_conf.parent / "conf_broken"
    (broken / "pair").mkdir(parents=True, exist_ok=True)
    empty = tiny_conf.parent / "empty_model"  # a folder that exists (valid) but holds no model: fails to load
    empty.mkdir(exist_ok=True)
    text = (tiny_conf / "pair" / "tiny.yaml").read_text()
    (broken / "pair" / "tiny.yaml").write_text(text)
    (broken / "pair" / "broken.yaml").write_text(
        text.replace("name: tiny\n", "name: broken\n", 1).replace(str(tiny_conf.parent / "target"), str(empty))
    )
    (broken / "pair" / "invalid.yaml").write_text(
        text.replace("name: tiny\n", "name: invalid\n", 1).replace(str(tiny_conf.parent / "target"), "/nonexistent/model")
    )
    proc = run_sweep(["-m", "pair=tiny,broken,invalid", "gamma=1,3", "task.n_prompts=2", "max_new_tokens=8",
                      "warmup=0"], broken, tmp_path, in_process=True)
    assert proc.returncode == 1  # the sweep reports its failures
    out = proc.stdout + proc.stderr
    assert "2 complete, 2 failed, 2 invalid" in out and "FAILED gamma=1" in out
    assert "INVALID gamma=1,max_new_tokens=8,pair=invalid,task.n_prompts=2 (not run, no folder): " \
        "pair.target.path: no local folder /nonexistent/model and not a valid Hub id" in out
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in tmp_path.rglob("summary.json")}
    assert sorted(statuses.values()) == ["complete", "complete", "failed", "failed"]
    assert not [p for p in tmp_path.iterdir() if "invalid" in p.name and p.is_dir()]  # refused jobs leave no folder
    failed = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")
              if json.loads(p.read_text())["status"] == "failed"]
    assert all("empty_model" in f["error"] or "config" in f["error"].lower() for f in failed)


@pytest.mark.slow  # a run.py sweep (in this process, from an empty model cache: helpers.run_in_process)
def test_models_are_loaded_once_per_sweep(tiny_conf, tmp_path):
    proc = run_sweep(["-m", "method=ar,specdecode,gammatune", "gamma=2,4", "task.n_prompts=1", "max_new_tokens=6",
                      "pair=tiny", "warmup=0"], tiny_conf, tmp_path, in_process=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    caches = [json.loads(p.read_text())["model_cache"] for p in tmp_path.rglob("summary.json")]
    assert len(caches) == 6
    assert max(c["loads"] for c in caches) == 2  # target + draft, whatever the number of jobs
    assert max(c["hits"] for c in caches) >= 8


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["pair=gemma3-270m_smollm2-135m", "hetero=none"], "hetero=slem"),
        (["task=custom", "task.data_files=/nonexistent/prompts.jsonl"], "/nonexistent/prompts.jsonl"),
        (["gamma=0"], "gamma must be an integer >= 1"),
    ],
)
def test_clear_errors_name_the_bad_value(overrides, message):
    with pytest.raises(ConfigError) as info:
        prepare(_compose(*overrides))
    assert message in str(info.value)


@pytest.mark.slow
def test_heterogeneous_pair_with_one_vocabulary_leaves_no_folder(tmp_path):
    proc = run_sweep(["pair=gemma3-270m_smollm2-135m", "hetero=none"], None, tmp_path, in_process=True)
    assert proc.returncode == 2
    assert "hetero=tli" in proc.stderr + proc.stdout
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
