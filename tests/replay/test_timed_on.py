"""Calibrations that say what they measured (issue 40, item 5).

A latency file's ``meta`` says what its forwards were timed on (``specbench.timed_on.TimedOn``: torch threads, the
target's device type and dtype, the kernels at batch 1 and above); ``check_timed_on`` / ``refusal`` is the one
comparison, used by a job's prediction (``runners.jobs.predict.find_latency``), ``lab compare`` (job folders and
``--live``) and ``lab confirm``; ``calibrate`` times at a job's threads (the config's ``threads``, else torch's own
choice) instead of a fixed 2. Files written before the keys read as ``TimedOn.of_meta`` says.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runners.jobs.predict import find_latency, job_timed_on
from runners.replay.trace import Trace, write_traces
from specbench.config import JobConfig, compose
from specbench.latency import ForwardCost, LatencyModel
from specbench.registry import ConfigError
from specbench.timed_on import TimedOn, check_timed_on, refusal

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "committed"
PAIR = "gemma3-270m_gemma3-270m-int8"


def _latency(**meta) -> LatencyModel:
    return LatencyModel(ForwardCost.affine(10.0, 1.0), ForwardCost.affine(2.0, 0.3), 0.2, 0.1,
                        {"kind": "calibrated", "pair": PAIR, **meta})


def _job(tmp_path: Path, *overrides: str) -> JobConfig:
    return JobConfig.from_mapping(compose([f"pair={PAIR}", "method=specdecode", f"results_dir={tmp_path}",
                                           *overrides]))


# ----------------------------------------------------------------------------- the comparison


def test_the_committed_files_read_as_what_they_were_timed_on():
    """Files written before the keys: threads as written, the device from their provenance, no dtype (not
    compared), the plain forward at batch 1, the plain kernels above it where they have batch tables."""
    cpu = LatencyModel.load(COMMITTED / "policy_lab" / "replay" / "latency" / f"{PAIR}.json").timed_on
    assert cpu == TimedOn(threads=2, device="cpu", fast_linear=False)
    batched = LatencyModel.load(COMMITTED / "policy_lab_batch" / "replay" / "latency" / f"{PAIR}.json").timed_on
    assert batched == TimedOn(threads=2, device="cpu", fast_linear=False, batch_fast_linear=False)
    h100 = LatencyModel.load(COMMITTED / "gpu_checks" / "latency_gemma3-270m-cuda_smollm2-135m-cuda.json").timed_on
    assert (h100.threads, h100.device, h100.dtype) == (2, "cuda", None)
    paper = LatencyModel.load(COMMITTED / "gpu_paper_costs" / "latency_llama-3.1-8b_eagle-like-8b.json").timed_on
    assert (paper.threads, paper.device, paper.dtype, paper.batch_fast_linear) == (16, "cuda", "bfloat16", False)
    # the committed H100 calibration at 2 threads against the 16 its recipes ran at: refused
    lat = LatencyModel.load(COMMITTED / "gpu_checks" / "latency_gemma3-270m-cuda_smollm2-135m-cuda.json")
    assert "threads=16" in refusal(lat, TimedOn(threads=16, device="cuda:0", dtype="float32"), "a recipe")
    # a hand-made or paper model states nothing: never refused
    assert LatencyModel.paper(5.0).timed_on == TimedOn()
    assert refusal(LatencyModel.paper(5.0), TimedOn(threads=3, device="cuda", dtype="float16",
                                                    batch_fast_linear="all"), "a job") is None


def test_a_mismatch_is_one_line_naming_both_values_and_the_calibrate_command():
    lat = _latency(threads=2, device="cpu", dtype="float32")
    lat.batches = {2: lat.costs_at(1)}
    run = TimedOn(threads=16, device="cpu", dtype="bfloat16", batch_fast_linear="all")
    message = refusal(lat, run, "job j", "results/latency/p.json")
    assert "\n" not in message
    assert message == (
        "job j runs at threads=16, dtype=bfloat16, batch_fast_linear=all, but the latency file results/latency/p.json "
        "was timed at threads=2, dtype=float32, batch_fast_linear=False: recalibrate with python -m runners.replay "
        f"calibrate --pair {PAIR} --threads 16 pair.target.dtype=bfloat16 --fast-linear all --batch-sizes 1 2 "
        "--out results/latency/p.json")
    with pytest.raises(ConfigError, match="threads=16.*threads=2"):
        check_timed_on(lat, run, "job j")
    # what either side does not state is not compared; a device index is its type
    assert refusal(lat, TimedOn(threads=2, device="cpu", dtype="float32"), "j") is None
    assert refusal(_latency(threads=2), TimedOn(threads=2, device="cuda", dtype="float16"), "j") is None
    assert refusal(_latency(device="cuda"), TimedOn(device="cuda:1"), "j") is None
    assert "device=cpu" in refusal(_latency(device="cuda"), TimedOn(device="cpu"), "j")
    # calibrate times batch 1 on the plain forward: no calibration fixes another batch-1 kernel, the run must
    assert "engine.fast_linear=false" in refusal(_latency(), TimedOn(fast_linear="all"), "j")
    # the command reproduces the file's batch sizes, so a recalibration keeps its batch tables
    assert refusal(lat, TimedOn(threads=3), "j").endswith("--threads 3 --batch-sizes 1 2")


def test_timed_on_round_trips_through_the_files_meta(tmp_path):
    timed = TimedOn(threads=4, device="cuda:0", dtype="torch.bfloat16", fast_linear=False, batch_fast_linear="all")
    assert timed.to_meta() == {"threads": 4, "device": "cuda", "dtype": "bfloat16", "fast_linear": False,
                               "batch_fast_linear": "all"}
    lat = _latency(**timed.to_meta())
    lat.save(tmp_path / "l.json")
    assert LatencyModel.load(tmp_path / "l.json").timed_on == timed
    with pytest.raises(ValueError, match="threads"):
        TimedOn(threads=0)


# ----------------------------------------------------------------------------- a job's prediction


def test_a_job_uses_only_a_file_timed_on_its_threads_device_and_dtype(tmp_path, monkeypatch, caplog):
    job = _job(tmp_path, "threads=3")
    assert job_timed_on(job) == TimedOn(threads=3, device="cpu", dtype="float32")
    found = tmp_path / "latency" / f"{PAIR}.json"
    _latency(threads=2, device="cpu").save(found)
    monkeypatch.chdir(tmp_path)  # results/latency/<pair>.json, the second default place, is under tmp_path
    with caplog.at_level(logging.WARNING, logger="specbench"):
        assert find_latency(job) == (None, None)  # found in the default places: refused with a warning
    assert f"calibrate --pair {PAIR} --threads 3 --out {found}" in caplog.text and "threads=2" in caplog.text
    # the search goes on to the next default place
    second = tmp_path / "results" / "latency" / f"{PAIR}.json"
    _latency(threads=3, device="cpu", dtype="float32").save(second)
    latency, path = find_latency(job)
    assert path == str(Path("results") / "latency" / f"{PAIR}.json") and latency.timed_on.threads == 3
    # the file latency= names: a one-line ConfigError
    with pytest.raises(ConfigError, match=f"^latency={found}: this job .*threads=3.*threads=2.*--threads 3"):
        find_latency(_job(tmp_path, "threads=3", f"latency={found}"))
    assert find_latency(_job(tmp_path, "threads=2", f"latency={found}"))[1] == str(found)
    # another dtype than the job's target: refused too
    with pytest.raises(ConfigError, match="dtype=bfloat16.*dtype=float32.*pair.target.dtype=bfloat16"):
        find_latency(_job(tmp_path, "threads=3", "pair.target.dtype=bfloat16", f"latency={second}"))


def test_a_job_without_threads_runs_at_torchs_own_choice(tmp_path):
    torch = pytest.importorskip("torch")
    assert job_timed_on(_job(tmp_path)).threads == torch.get_num_threads()


# ----------------------------------------------------------------------------- lab compare and confirm


def _compare_folders(tmp_path: Path, latency: LatencyModel, summary_extra: dict) -> None:
    from runners.replay.grid import load_method
    from runners.replay.replay import replay_job

    trace = Trace(prompt_id="a", turn=1, prompt_tokens=4, max_new_tokens=3, gamma_max=3, eos=(0,), tokens=[1, 2, 3],
                  draft_next=[2, 3], draft_conf=[0.9, 0.9], tails={}, pair="tiny", task="t")
    write_traces(tmp_path / "traces" / "tiny__t" / "trace.jsonl", [trace])
    latency.save(tmp_path / "latency" / "tiny.json")
    config = OmegaConf.to_container(compose([f"pair={PAIR}", "method=specdecode", "gamma=2", "max_new_tokens=3",
                                             "threads=2"]), resolve=True)
    config["pair"]["name"], config["task"]["name"] = "tiny", "t"
    rep = replay_job([trace], load_method("specdecode").build(2), latency)[0]
    record = {"prompt_id": "a", "turn": 1, "prompt_tokens": 4, "new_tokens": rep.new_tokens, "wall_ms": rep.wall_ms,
              "gamma_trace": rep.rounds.gamma, "drafted_trace": rep.rounds.drafted,
              "accepted_trace": rep.rounds.accepted, "accepted": sum(rep.rounds.accepted),
              "drafted": sum(rep.rounds.drafted), "lossless": True}
    job = tmp_path / "real" / "job"
    job.mkdir(parents=True, exist_ok=True)
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config, **summary_extra}))
    (job / "records.jsonl").write_text(json.dumps(record) + "\n")


def test_compare_refuses_a_job_run_on_other_threads_than_its_calibration(tmp_path):
    from runners.replay.compare import compare_rows

    _compare_folders(tmp_path, _latency(threads=4, device="cpu"), {})
    with pytest.raises(ConfigError, match=r"^job job runs at threads=2, .*threads=4: .*--pair tiny --threads 2 --out"):
        compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")
    _compare_folders(tmp_path, _latency(threads=2, device="cpu", dtype="float32"), {})
    assert len(compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")) == 1
    # a job of torch's own choice: the threads its summary's provenance recorded
    config = json.loads((tmp_path / "real" / "job" / "summary.json").read_text())["config"]
    config["threads"] = None
    (tmp_path / "real" / "job" / "summary.json").write_text(json.dumps(
        {"status": "complete", "config": config, "provenance": {"torch_threads": 8}}))
    with pytest.raises(ConfigError, match="threads=8.*threads=2"):
        compare_rows(tmp_path / "real", tmp_path / "traces", tmp_path / "latency")


def test_confirm_checks_the_latency_files_before_its_real_runs(tmp_path, monkeypatch, capsys):
    from runners.replay import lab

    runs: list[list[str]] = []
    monkeypatch.setattr(lab, "_run", lambda cmd: runs.append(cmd) or 0)
    monkeypatch.setattr(lab, "compare_main", lambda args: 0)
    _latency(threads=2, device="cpu").save(tmp_path / "lat" / f"{PAIR}.json")
    args = ["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"), "--pairs", PAIR,
            "--methods", "specdecode", "--tasks", "humaneval"]
    assert lab.main([*args, "--threads", "4"]) == 2 and not runs
    assert f"lab confirm (pair {PAIR}) runs at threads=4" in capsys.readouterr().err
    assert lab.main([*args, "--threads", "2"]) == 0 and runs


# ----------------------------------------------------------------------------- calibrate


@pytest.mark.slow
def test_calibrate_times_at_a_jobs_threads_and_says_what_it_timed(tiny_conf, tmp_path, monkeypatch):
    """``calibrate`` without ``--threads`` leaves torch's own choice alone (what a job with ``threads=null`` runs
    at; it used to force 2), takes ``threads=N`` as a job does, and writes threads, device, dtype and the batch-1
    kernels into ``meta``; a job of the same settings then uses the file."""
    torch = pytest.importorskip("torch")
    from runners.replay import calibrate_pair
    from runners.replay import commands as cli

    real_compose = calibrate_pair.compose

    def tiny_compose(overrides):  # the tiny pair of tests/helpers in place of conf/pair/<name>.yaml
        cfg = real_compose([o for o in overrides if not o.startswith("pair=")])
        cfg.pair = OmegaConf.load(tiny_conf / "pair" / "tiny.yaml")
        return cfg

    monkeypatch.setattr(calibrate_pair, "compose", tiny_compose)
    small = ["--k-max", "2", "--draft-k-max", "1", "--ref-context", "8", "--contexts", "4", "--prefill", "4",
             "--warmup", "0", "--repeats", "1", "--no-overheads"]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # this process's own choice
        assert cli.main(["calibrate", "--pair", "tiny", *small, "--out", str(tmp_path / "a.json")]) == 0
        meta = LatencyModel.load(tmp_path / "a.json").meta
        assert (meta["threads"], meta["device"], meta["dtype"], meta["fast_linear"]) == (1, "cpu", "float32", False)
        assert "batch_fast_linear" not in meta
        assert cli.main(["calibrate", "--pair", "tiny", "threads=2", *small, "--out", str(tmp_path / "b.json")]) == 0
        assert LatencyModel.load(tmp_path / "b.json").meta["threads"] == torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    job = JobConfig.from_mapping({**OmegaConf.to_container(tiny_compose(["threads=2", f"results_dir={tmp_path}",
                                                                         f"latency={tmp_path / 'b.json'}"])),
                                  "method": {"name": "ar", "runner": "ar"}})
    assert find_latency(job)[1] == str(tmp_path / "b.json")
