"""Real ``python run.py -m ...`` sweeps write one folder per job with valid records: the tiny pair's in this process
(``helpers.run_in_process``), the README's on the real pair in a subprocess."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from specbench.records import SCHEMA_VERSION, Record

from helpers import run_sweep

ROOT = Path(__file__).resolve().parents[2]
RECORD_FIELDS = {f.name for f in fields(Record)}


def check_job(folder: Path, n_records: int, method: str, gamma: int | None) -> list[dict]:
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["provenance"]["schema_version"] == SCHEMA_VERSION
    assert summary["provenance"]["packages"]["transformers"]
    lines = (folder / "records.jsonl").read_text().splitlines()
    assert len(lines) == n_records
    records = [json.loads(line) for line in lines]
    for r in records:
        assert set(r) == RECORD_FIELDS
        assert r["method"] == method and r["gamma_init"] == gamma
        assert r["new_tokens"] >= 1 and r["tokens_per_s"] > 0 and r["ttft_ms"] > 0
        if method != "ar":
            assert len(r["gamma_trace"]) == len(r["drafted_trace"]) == len(r["accepted_trace"]) == r["rounds"]
            assert r["lossless"] is True
    return records


@pytest.mark.slow  # a run.py sweep (in this process: helpers.run_in_process)
def test_multirun_sweep_writes_one_folder_per_job(tiny_conf, tmp_path):
    proc = run_sweep(
        ["-m", "method=specdecode", "gamma=1,2,4,8", "pair=tiny", "task.n_prompts=2", "max_new_tokens=12", "warmup=0"],
        tiny_conf, tmp_path, in_process=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    assert [j.name for j in jobs] == [
        f"gamma={g},max_new_tokens=12,method=specdecode,pair=tiny,task.n_prompts=2,warmup=0".replace(",warmup=0", "")
        for g in (1, 2, 4, 8)
    ]
    for job, gamma in zip(jobs, (1, 2, 4, 8)):
        check_job(job, 2, "specdecode", gamma)
    assert proc.stdout.count("[done]") == 4


@pytest.mark.slow  # a run.py sweep (in this process: helpers.run_in_process)
def test_sweep_over_all_methods(tiny_conf, tmp_path):
    methods = "ar,specdecode,hf_heuristic,assistant_threshold,gammatune,gammatune_plus"
    proc = run_sweep(
        ["-m", f"method={methods}", "gamma=1,4", "pair=tiny", "task.n_prompts=2", "max_new_tokens=10", "warmup=0"],
        tiny_conf, tmp_path, in_process=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    assert len(jobs) == 12
    for job in jobs:
        parts = dict(kv.split("=", 1) for kv in job.name.split(","))
        method = parts["method"]
        check_job(job, 2, method, None if method == "ar" else int(parts["gamma"]))


@pytest.mark.slow  # a run.py sweep (in this process: helpers.run_in_process)
def test_rerun_skips_complete_jobs(tiny_conf, tmp_path):
    args = ["pair=tiny", "task.n_prompts=1", "max_new_tokens=6", "warmup=0"]
    first = run_sweep(args, tiny_conf, tmp_path, in_process=True)
    assert first.returncode == 0, first.stderr[-3000:]
    job = next(tmp_path.rglob("records.jsonl")).parent
    before = (job / "records.jsonl").read_text()
    second = run_sweep(args, tiny_conf, tmp_path, in_process=True)
    assert second.returncode == 0
    assert "complete; skipped" in second.stderr + second.stdout
    assert (job / "records.jsonl").read_text() == before


@pytest.mark.slow
def test_the_readme_sweep_on_the_real_default_pair(tmp_path):
    """``python run.py -m method=specdecode gamma=1,2,4,8`` on the embedded default (trimmed)."""
    proc = run_sweep(
        ["-m", "method=specdecode", "gamma=1,2,4,8", "task.n_prompts=2", "max_new_tokens=16"], None, tmp_path,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    assert len(jobs) == 4
    for job in jobs:
        gamma = int(dict(kv.split("=", 1) for kv in job.name.split(","))["gamma"])
        records = check_job(job, 2, "specdecode", gamma)
        assert all(r["pair"] == "gemma3-270m_hybrid-lookup-int8" for r in records)
