"""Honest timings under concurrency (``runners.jobs.device_share``): a job sees the other jobs running
on its device, warns once, forgets a killed neighbour; ``analysis`` flags speedups across jobs that
shared a device with different neighbours and leaves sequential ones alone."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pandas as pd

from analysis.gammatune.table2 import speedup_table
from analysis.metrics import SHARED_MARK, shared_device_mismatch
from runners.jobs.device_share import DeviceShare

from helpers import ROOT, offline_env

HOLD = """
import sys, time
from runners.jobs.device_share import DeviceShare
with DeviceShare(sys.argv[1], sys.argv[2], ["cpu"]):
    print("registered", flush=True)
    time.sleep(120)
"""


def _neighbour(results: Path, name: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(results), name], cwd=ROOT, env=offline_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "registered"
    return proc


def test_a_job_counts_its_neighbours_warns_once_and_forgets_a_killed_one(tmp_path, caplog):
    with DeviceShare(tmp_path, "job-a", ["cpu"]) as share:
        assert share.sample() == (1, [])
        other = _neighbour(tmp_path, "job-b")
        try:
            with caplog.at_level(logging.WARNING, logger="specbench"):
                assert share.sample() == (2, ["job-b"])
                assert share.sample() == (2, ["job-b"])
            warnings = [r for r in caplog.records if "share" in r.getMessage()]
            assert len(warnings) == 1 and "not comparable with sequential runs" in warnings[0].getMessage()
        finally:
            other.kill()  # SIGKILL: no clean-up, the registry must notice by itself
            other.wait()
        assert share.sample() == (1, [])
        assert share.device_id.startswith("cpu@")
    assert not [p for p in (tmp_path / ".specbench" / "devices").rglob("*") if p.is_file()]


def test_other_devices_are_not_neighbours(tmp_path):
    with DeviceShare(tmp_path, "job-a", ["cpu"]) as share:
        with DeviceShare(tmp_path / "elsewhere", "job-b", ["cpu"]):  # another results folder: another registry
            assert share.sample() == (1, [])


def _frame(shared: dict[str, tuple[int, list[str]]]) -> pd.DataFrame:
    """Two pairs of jobs (specdecode and gammatune at γ = 2 and 4) with records as ``analysis`` loads them."""
    rows = []
    for method in ("specdecode", "gammatune"):
        for gamma in (2, 4):
            job = f"gamma={gamma},method={method}"
            jobs, neighbours = shared.get(job, (1, []))
            for prompt in ("p1", "p2"):
                rows.append({"pair": "p", "method": method, "gamma_init": gamma, "prompt_id": prompt, "turn": 1,
                             "new_tokens": 10, "wall_ms": 100.0 * gamma / (2 if method == "gammatune" else 1),
                             "tokens_per_s": 0.0, "job_dir": job, "device_id": "cpu@host", "device_jobs": jobs,
                             "device_neighbours": neighbours, "task": "t", "temperature": 0.0})
    df = pd.DataFrame(rows)
    df["tokens_per_s"] = df["new_tokens"] / df["wall_ms"] * 1000
    return df


def test_sequential_records_are_never_flagged():
    table = speedup_table(_frame({}), paper=None)
    assert SHARED_MARK not in table.display.to_string() and "not comparable" not in table.caption


def test_speedups_across_jobs_with_different_neighbours_are_flagged():
    df = _frame({"gamma=2,method=gammatune": (2, ["gamma=4,method=gammatune"]),
                 "gamma=4,method=gammatune": (2, ["gamma=2,method=gammatune"])})
    table = speedup_table(df, paper=None)
    shown = table.display.set_index("Method")
    assert shown.loc["GammaTune", "p"].endswith(SHARED_MARK)  # shared, against a baseline that ran alone
    assert not shown.loc["SpecDecode", "p"].endswith(SHARED_MARK)
    assert "not comparable" in table.caption


def test_jobs_that_shared_the_device_with_the_same_neighbours_compare():
    together = {"gamma=2,method=specdecode": (2, ["gamma=2,method=gammatune"]),
                "gamma=2,method=gammatune": (2, ["gamma=2,method=specdecode"])}
    df = _frame(together)
    both = df[df["gamma_init"] == 2]
    assert not shared_device_mismatch(both)  # the same two jobs side by side the whole time
    assert shared_device_mismatch(df)  # against γ = 4 jobs that ran alone
