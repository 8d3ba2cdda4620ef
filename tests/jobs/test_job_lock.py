"""One writer per job folder (``runners.jobs.lock``): a second process skips a held job and writes
nothing, two processes started at once write one set of records, a ``kill -9``-ed holder's lock is
taken over by the next run, and ``analysis`` refuses a folder whose records hold a turn twice."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.jobs.lock import HOLDER_FILE, JobLock, JobLocked, JobLockLost

from helpers import ROOT, offline_env, run_sweep

ARGS = ["pair=tiny", "max_new_tokens=40", "warmup=0", "verify_lossless=false", "threads=1"]
JOB = "max_new_tokens=40,pair=tiny,verify_lossless=false"  # the folder Hydra names these overrides


def _start(conf: Path, tmp: Path, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), "--config-dir", str(conf), *args, f"results_dir={tmp}"],
        cwd=ROOT, env=offline_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def _rows(job: Path) -> list[tuple[str, int]]:
    return [(r["prompt_id"], r["turn"]) for r in map(json.loads, (job / "records.jsonl").read_text().splitlines())]


# ---------------------------------------------------------------- the lock itself (in process)


def test_a_held_lock_is_refused_with_the_holder_named_and_freed_on_release(tmp_path):
    first = JobLock(tmp_path / "job").acquire()
    with pytest.raises(JobLocked) as info:
        JobLock(tmp_path / "job").acquire()
    assert f"pid {os.getpid()}" in str(info.value) and socket.gethostname() in str(info.value)
    first.release()
    assert not (tmp_path / "job" / HOLDER_FILE).exists()
    JobLock(tmp_path / "job").acquire().release()


def test_another_hosts_holder_file_is_respected_while_fresh_and_taken_over_when_stale(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    holder = {"host": "node-17", "pid": 4242, "token": "node-17:4242:1", "started": time.time(), "heartbeat": time.time()}
    (job / HOLDER_FILE).write_text(json.dumps(holder))
    with pytest.raises(JobLocked) as info:  # the OS lock is free (another node's flock is not seen), the file is fresh
        JobLock(job, heartbeat_s=1.0).acquire()
    assert "host node-17 pid 4242" in str(info.value)
    (job / HOLDER_FILE).write_text(json.dumps({**holder, "heartbeat": time.time() - 60}))
    lock = JobLock(job, heartbeat_s=1.0).acquire()  # silent for 60 s > 5 heartbeats: stale
    assert json.loads((job / HOLDER_FILE).read_text())["pid"] == os.getpid()
    lock.release()


@pytest.mark.slow
def test_a_dead_pid_on_this_host_is_taken_over_at_once(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    job = tmp_path / "job"
    job.mkdir()
    (job / HOLDER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "token": "x",
                                               "started": time.time(), "heartbeat": time.time()}))
    JobLock(job).acquire().release()


def test_a_holder_whose_lock_was_taken_over_stops_before_writing(tmp_path):
    lock = JobLock(tmp_path / "job", heartbeat_s=0.05).acquire()
    (tmp_path / "job" / HOLDER_FILE).write_text(json.dumps({"host": "node-3", "pid": 1, "token": "node-3:1:1",
                                                            "started": time.time(), "heartbeat": time.time()}))
    deadline = time.time() + 10
    while not lock.lost and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(JobLockLost, match="node-3"):
        lock.check()
    lock.release()
    assert json.loads((tmp_path / "job" / HOLDER_FILE).read_text())["host"] == "node-3"  # not removed


# ---------------------------------------------------------------- run.py processes


@pytest.mark.slow  # a run.py subprocess sweep
def test_a_second_process_skips_a_held_job_naming_the_holder_and_writes_nothing(tiny_conf, tmp_path):
    job = tmp_path / JOB
    lock = JobLock(job).acquire()  # this test process is "the first run"
    try:
        proc = run_sweep(ARGS, tiny_conf, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = proc.stdout + proc.stderr
        assert f"locked by host {socket.gethostname()} pid {os.getpid()}" in out
        assert "[skipped]" in out
        assert not (job / "records.jsonl").exists() and not (job / "summary.json").exists()
    finally:
        lock.release()
    done = run_sweep(ARGS, tiny_conf, tmp_path, in_process=True)  # the next run, after the holder
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_rows(job)) == 10


@pytest.mark.slow  # a run.py subprocess sweep
def test_two_processes_started_at_once_write_one_set_of_records(tiny_conf, tmp_path):
    procs = [_start(tiny_conf, tmp_path, ARGS) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    rows = _rows(tmp_path / JOB)
    assert len(rows) == len(set(rows)) == 10
    summary = json.loads((tmp_path / JOB / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["aggregates"]["n_records"] == 10
    said = "".join(o[0] + o[1] for o in outs)
    assert "locked by" in said or "complete; skipped" in said  # the other one did not run it


@pytest.mark.slow  # a run.py subprocess sweep
def test_kill_9_the_holder_and_the_next_run_takes_the_lock_and_resumes(tiny_conf, tmp_path):
    proc = _start(tiny_conf, tmp_path, ARGS)
    records = tmp_path / JOB / "records.jsonl"
    deadline = time.time() + 300
    while not (records.exists() and len(records.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline, "the job ended before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = records.read_text().splitlines()
    holder = json.loads((tmp_path / JOB / HOLDER_FILE).read_text())
    assert holder["pid"] == proc.pid  # left behind by the dead holder
    done = run_sweep(ARGS, tiny_conf, tmp_path, in_process=True)  # the next run, after the holder
    assert done.returncode == 0, done.stderr[-2000:]
    assert "locked by" not in done.stdout + done.stderr
    rows = _rows(tmp_path / JOB)
    assert len(rows) == len(set(rows)) == 10
    assert records.read_text().splitlines()[: len(kept)] == kept  # resumed, not redone
    assert not (tmp_path / JOB / HOLDER_FILE).exists()


# ---------------------------------------------------------------- analysis


def test_analysis_refuses_a_folder_with_a_turn_recorded_twice(tmp_path):
    from analysis.frame import DuplicateRecords, load_records
    from analysis.make_artefacts import main

    job = tmp_path / "gamma=2,method=specdecode"
    job.mkdir()
    fixture = next((ROOT / "tests" / "fixtures" / "analysis" / "sweeps" / "sweep1").glob("*method=specdecode,gamma=2"))
    line = (fixture / "records.jsonl").read_text().splitlines()[0]
    (job / "records.jsonl").write_text(f"{line}\n{line}\n")
    with pytest.raises(DuplicateRecords, match="gamma=2,method=specdecode"):
        load_records(tmp_path)
    assert main([str(tmp_path), "--print-only"]) == 2
