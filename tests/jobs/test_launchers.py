"""Every launcher runs the same small sweep: Hydra's basic launcher (one process), the interleaved one
(one process, the jobs' prompt turns interleaved), submitit's local executor (a process per job, all at
once) and a local Ray instance (2 CPU workers).

Each must give the same generated token ids, resume on a re-run without running a complete job
twice, record a failing job as failed without stopping the others, and decode each AR reference
once per sweep (the second job on the same target reads it from the on-disk cache). The SLURM path
is checked without a cluster by rendering the sbatch script it would submit."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, offline_env, run_sweep, write_tiny_pairs

SWEEP = ["-m", "pair=tiny_a,broken", "method=specdecode,gammatune", "gamma=2", "task.n_prompts=2",
         "max_new_tokens=8", "warmup=0", "threads=1"]
LAUNCHERS = {
    "basic": [],
    "interleaved": ["hydra/launcher=interleaved"],  # one process, prompt turn by prompt turn (runners.jobs.interleave)
    "submitit_local": ["hydra/launcher=local"],
    "ray": ["hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2"],  # threads=1: 2 jobs at once
}


@pytest.fixture(scope="module")
def conf(tmp_path_factory) -> Path:
    return write_tiny_pairs(tmp_path_factory.mktemp("pairs"), ("a",))


def _jobs(results: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in results.glob("*/summary.json")}


def _records(results: Path) -> dict[str, list[dict]]:
    return {p.parent.name: [json.loads(line) for line in p.read_text().splitlines()]
            for p in results.glob("*/records.jsonl")}


def _launch(name: str, conf: Path, results: Path) -> subprocess.CompletedProcess:
    if name == "submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    if name == "ray":
        pytest.importorskip("ray")
        pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    # the one-process launchers run in this process (helpers.run_in_process); submitit's and Ray's start their own
    return run_sweep([SWEEP[0], *LAUNCHERS[name], *SWEEP[1:]], conf, results, timeout=900,
                     in_process=name in ("basic", "interleaved"))


@pytest.fixture(scope="module")
def basic_run(conf, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The basic launcher's sweep, run once: the reference, and the basic launcher's own first run."""
    results = tmp_path_factory.mktemp("basic")
    proc = _launch("basic", conf, results)
    assert proc.returncode == 1, proc.stderr[-3000:]
    return results, proc


@pytest.fixture(scope="module")
def reference(basic_run) -> dict[str, list[dict]]:
    """The basic launcher's records: what every launcher must reproduce."""
    return _records(basic_run[0])


@pytest.mark.slow  # a run.py sweep
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_every_launcher_runs_the_same_sweep_resumes_and_isolates_failures(launcher, conf, reference, basic_run,
                                                                          tmp_path):
    if launcher == "basic":  # its first run is the reference's (the same sweep: no need to run it twice)
        tmp_path, proc = basic_run
    else:
        proc = _launch(launcher, conf, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]  # the sweep reports its failed jobs
    assert "2 complete, 2 failed" in out
    jobs = _jobs(tmp_path)
    assert len(jobs) == 4
    for name, summary in jobs.items():
        assert summary["status"] == ("failed" if "pair=broken" in name else "complete"), (name, summary.get("error"))
        if summary["status"] == "failed":
            assert summary["error"], name
    records = _records(tmp_path)
    complete = sorted(n for n, s in jobs.items() if s["status"] == "complete")
    assert complete == sorted(reference)
    for name in complete:  # same generated token ids, turn by turn
        got = {(r["prompt_id"], r["turn"]): r["output_ids"] for r in records[name]}
        want = {(r["prompt_id"], r["turn"]): r["output_ids"] for r in reference[name]}
        assert got == want and all(got.values()), name
        for r in records[name]:
            assert r["lossless"] is True
            assert r["device_id"].startswith("cpu@") and r["device_jobs"] >= 1
            if launcher in ("basic", "interleaved"):
                assert r["device_jobs"] == 1 and r["device_neighbours"] == []
    if launcher == "interleaved":  # the AR reference: decoded in each prompt turn's round, for both jobs
        decodes = {(r["prompt_id"], r["turn"]): set() for name in complete for r in records[name]}
        for name in complete:
            for r in records[name]:
                assert r["ar_source"] == "paired" and r["interleave"]["size"] == 3  # 2 jobs + the AR decode
                decodes[(r["prompt_id"], r["turn"])].add(r["ar_decode"])
        assert all(len(ids) == 1 for ids in decodes.values()), decodes
    else:  # the AR reference: decoded once per prompt turn for the whole sweep, read by the other job
        sources = Counter((r["prompt_id"], r["turn"], r["ar_source"]) for name in complete for r in records[name])
        for prompt, turn in {(r["prompt_id"], r["turn"]) for name in complete for r in records[name]}:
            assert sources[(prompt, turn, "decoded")] == 1, sources
            assert sources[(prompt, turn, "cache")] == 1, sources
    # a re-run resumes: complete jobs are not run again (their files are untouched), failed ones are retried
    before = {n: ((tmp_path / n / "records.jsonl").read_bytes(), (tmp_path / n / "summary.json").stat().st_mtime_ns)
              for n in complete}
    again = _launch(launcher, conf, tmp_path)
    assert again.returncode == 1, (again.stdout + again.stderr)[-3000:]
    for name, (data, mtime) in before.items():
        assert (tmp_path / name / "records.jsonl").read_bytes() == data
        assert (tmp_path / name / "summary.json").stat().st_mtime_ns == mtime
    assert {n: s["status"] for n, s in _jobs(tmp_path).items()} == {n: s["status"] for n, s in jobs.items()}


@pytest.mark.slow
def test_the_slurm_batch_script_follows_the_launcher_config(tmp_path):
    """``hydra/launcher=slurm`` rendered without a cluster (``scripts/render_slurm.py``): its GPU,
    array-parallelism, time and setup lines come from ``conf/hydra/launcher/slurm.yaml`` and the pairs."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    launcher = yaml.safe_load((ROOT / "conf" / "hydra" / "launcher" / "slurm.yaml").read_text())

    def render(*overrides: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "render_slurm.py"), *overrides, f"results_dir={tmp_path}"],
            capture_output=True, text=True, timeout=300, cwd=ROOT, env=offline_env(),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.splitlines()

    setup = "source /shared/specbench/.venv/bin/activate"
    lines = render("pair=vicuna-7b_vicuna-68m", "method=specdecode", "gamma=1,2,3",
                   "hydra.launcher.partition=gpu", f"hydra.launcher.setup=[{setup!r}]".replace("'", '"'))
    assert f"#SBATCH --gpus-per-node={1}" in lines  # pair.gpus defaults to 1: one job per GPU
    assert f"#SBATCH --array=0-2%{min(3, launcher['array_parallelism'])}" in lines
    assert f"#SBATCH --time={launcher['timeout_min']}" in lines
    assert f"#SBATCH --cpus-per-task={launcher['cpus_per_task']}" in lines
    assert "#SBATCH --partition=gpu" in lines
    assert lines.index(setup) < next(i for i, line in enumerate(lines) if line.startswith("srun "))
    # a pair that needs two GPUs says so (pair.gpus) and the launcher takes it from there
    lines = render("pair=llama-3.1-70b-instruct_llama-3.1-8b-instruct", "method=specdecode", "gamma=1,2,3,4,5",
                   "hydra.launcher.array_parallelism=4")
    assert "#SBATCH --gpus-per-node=2" in lines
    assert "#SBATCH --array=0-4%4" in lines
    # a CPU pair asks for no GPU at all; moved to the GPU by the top-level device, for one per job
    lines = render("method=specdecode", "gamma=1,2")
    assert not [line for line in lines if "gpus" in line]
    lines = render("pair=gemma3-270m_prompt-lookup", "device=cuda", "method=specdecode", "gamma=1,2")
    assert "#SBATCH --gpus-per-node=1" in lines


def _sweep_config(sweep_dir: Path):
    from omegaconf import OmegaConf

    return OmegaConf.create({"hydra": {
        "mode": "MULTIRUN", "sweep": {"dir": str(sweep_dir)}, "launcher": {"_target_": "RayLauncher"},
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "overrides": {"task": ["pair=tiny", "method=ar,specdecode", "gamma=2"]},
        "job": {"config": {"override_dirname": {"kv_sep": "=", "item_sep": ",", "exclude_keys": ["results_dir"]}}},
    }, "pair": {"name": "tiny", "target": {"device": "cpu"}}})


def test_a_job_whose_worker_cannot_see_the_results_folder_is_reported_failed(tmp_path, capsys):
    """A worker without the shared results folder refuses to run (it would write where nobody reads),
    and the driver's report lists the job as failed because its summary never arrived."""
    from runners.jobs.report import (
        SWEEP_FILE,
        ResultsFolderNotShared,
        SweepReport,
        check_sweep_folder_visible,
    )

    report = SweepReport()
    config = _sweep_config(tmp_path)
    report.on_multirun_start(config)
    assert (tmp_path / SWEEP_FILE).exists()
    assert report.expected == ["gamma=2,method=ar,pair=tiny", "gamma=2,method=specdecode,pair=tiny"]
    (tmp_path / "elsewhere").mkdir()  # the worker's view: a folder at that path without the driver's file
    with pytest.raises(ResultsFolderNotShared, match="does not see the sweep's results folder"):
        check_sweep_folder_visible(tmp_path / "elsewhere", timeout_s=0)
    check_sweep_folder_visible(tmp_path, timeout_s=0)  # the driver's folder: fine
    (tmp_path / "gamma=2,method=ar,pair=tiny").mkdir()
    (tmp_path / "gamma=2,method=ar,pair=tiny" / "summary.json").write_text(json.dumps({"status": "complete"}))
    with pytest.raises(SystemExit) as exit_info:
        report.on_multirun_end(config)
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "1 complete, 1 failed" in out and "FAILED gamma=2,method=specdecode,pair=tiny: no summary.json" in out


def test_a_slower_job_says_why_from_what_it_measured():
    """``slowdown_reason``: one line with the measured cost ratio c, the verification's cost and α, and
    Leviathan's best fixed γ at those costs; nothing for a job that paid or measured no draft."""
    from runners.jobs.report import slowdown_reason

    agg = {"speedup": 0.86, "ar_tokens_per_s": 10.0, "draft_forwards": 100, "draft_s": 5.0, "verify_s": 6.0,
           "accepted": 60, "mean_accepted_per_round": 2.0, "leviathan_alpha": 0.7}
    summary = {"aggregates": agg, "config": {"pair": {"name": "gemma3-270m_gemma3-270m-int8"},
                                             "engine": {"fast_linear": False}}}
    line = slowdown_reason(summary)
    # a target step 100 ms, a draft forward 50 ms (c = 2.0), 30 rounds verified in 200 ms (2 steps)
    assert "c = 2.0" in line and "verification 2.00 target steps" in line and "α = 0.70" in line
    tokens = [(1 - 0.7 ** (g + 1)) / 0.3 / (g / 2.0 + 2.0) for g in range(1, 17)]
    best = max(range(16), key=tokens.__getitem__)
    assert f"at most {tokens[best]:.2f}x (gamma={best + 1})" in line
    assert "engine.fast_linear=auto" in line and "hybrid-lookup-int8" in line
    hybrid = {**summary, "config": {"pair": {"name": "gemma3-270m_hybrid-lookup-int8"}, "engine": {"fast_linear": "all"}}}
    assert "engine.fast_linear" not in slowdown_reason(hybrid) and "pair=" not in slowdown_reason(hybrid)
    assert slowdown_reason({**summary, "aggregates": {**agg, "speedup": 1.2}}) is None
    assert slowdown_reason({**summary, "aggregates": {**agg, "draft_forwards": 0}}) is None  # AR / lookup only


def test_every_speculative_job_says_what_its_parts_cost_and_what_ran():
    """``cost_line`` (issue 52, item 4): a job that paid says its measured costs too (a draft forward and a
    verification in target steps, α), Leviathan's bound at those costs, and the engine options its summary says ran;
    a verification without a time breakdown is said to be unmeasured, not 1 measured."""
    from runners.jobs.report import cost_line
    from specbench.summary import measured_costs

    agg = {"speedup": 1.3, "ar_tokens_per_s": 10.0, "draft_forwards": 100, "draft_s": 1.0, "verify_s": 3.9,
           "accepted": 90, "mean_accepted_per_round": 3.0, "leviathan_alpha": 0.8}
    summary = {"aggregates": agg, "engine": {"fast_linear": "all", "buckets": {"2": [4, 4], "3": [4, 4]},
                                             "fused_prefill": True, "graphs": "eager"}}
    line = cost_line(summary)
    # a target step 100 ms, a draft forward 10 ms (0.10 steps), 30 rounds verified in 3.9 s (1.30 steps)
    assert "a draft forward 0.10 target steps, a verification 1.30 target steps, α = 0.80" in line
    costs = measured_costs(summary)
    bound = max((1 - 0.8 ** (g + 1)) / 0.2 / (g / 10.0 + 1.3) for g in range(1, 17))
    assert f"bound at these costs {bound:.2f}x" in line and costs.best()[1] == pytest.approx(bound)
    assert "fast_linear=all, 2 padded block length(s), fused_prefill=True, graphs=eager" in line
    unmeasured = cost_line({**summary, "aggregates": {**agg, "verify_s": None}})
    assert "not measured: taken as 1" in unmeasured
    assert cost_line({**summary, "aggregates": {**agg, "draft_forwards": 0}}) is None  # AR / lookup only
    width = cost_line({**summary, "engine": {**summary["engine"], "width": 8}})
    assert "graphs=eager, width=8 (block-invariant, static target cache)" in width
    assert "draft_compile" not in width
    compiled = cost_line({**summary, "engine": {**summary["engine"], "draft_compile": True}})
    assert compiled.endswith("graphs=eager, draft_compile (the draft's forwards compiled)")


def test_the_cost_line_reads_leviathan_at_the_jobs_own_drafting_where_lookup_rounds_need_no_forward():
    """A hybrid job (lookup rounds draft with no forward, the model capped below γ) drafts more tokens a round than
    it runs draft forwards: the cost line adds Leviathan's model at its own drafting (``as_drafted``), which the
    best-fixed-γ bound, charging a forward per token, understates; a job drafting a forward per token adds nothing."""
    from runners.jobs.report import cost_line
    from specbench.summary import measured_costs

    # 30 rounds, 90 accepted, 150 drafted tokens for 45 draft forwards (lookup rounds free)
    agg = {"speedup": 1.8, "ar_tokens_per_s": 10.0, "draft_forwards": 45, "draft_s": 1.35, "verify_s": 3.9,
           "drafted": 150, "accepted": 90, "mean_accepted_per_round": 3.0, "leviathan_alpha": 0.8}
    summary = {"aggregates": agg, "engine": {"fast_linear": False}}
    costs = measured_costs(summary)
    assert costs.forwards == pytest.approx(1.5) and costs.drafted == pytest.approx(5.0)
    # a draft forward 30 ms = 0.3 steps; a round: 1.5 forwards × 0.3 + 1.3 steps of verification
    expected = (1 - 0.8 ** 6) / 0.2 / (1.5 * 0.3 + 1.3)
    assert costs.as_drafted() == pytest.approx(expected)
    line = cost_line(summary)
    assert f"({expected:.2f}x as it drafted: 5.00 tokens for 1.50 draft forwards a round)" in line
    assert costs.best()[1] < expected  # a forward per token: the bound a lookup job's speedup would seem to beat
    per_token = cost_line({**summary, "aggregates": {**agg, "draft_forwards": 150, "draft_s": 4.5}})
    assert "as it drafted" not in per_token


def test_a_width_jobs_summary_says_what_its_speedup_divides_by(capsys):
    """A job on block-invariant forwards divides by its target alone at the width (the function it matches), which
    is slower than a plain step: the printed summary says so; a job without a width says nothing more."""
    from runners.jobs.report import print_summary

    base = {"status": "complete", "config": {"method": {"name": "specdecode"}, "pair": {"name": "p"}},
            "aggregates": {"speedup": 2.0, "tokens_per_s": 40.0, "ar_tokens_per_s": 20.0}}
    print_summary("job", {**base, "baseline": {"kernels": {"fast_linear": False, "step": None, "width": 8}}})
    assert "(over the target alone at width 8, the function this loop matches token for token" in capsys.readouterr().out
    print_summary("job", {**base, "baseline": {"kernels": {"fast_linear": False, "step": None}}})
    assert "over the target alone at width" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_interleaved_launcher_registers_where_no_hydra_plugin_is_installed():
    """Issue 32: on a bare GPU image (no submitit / Ray launcher, so no ``hydra_plugins`` namespace) Hydra could
    not locate ``hydra_plugins.specbench.InterleavedLauncher``. Here the namespace is made unimportable
    (``sys.modules['hydra_plugins'] = None``) before ``register()``; Hydra's own locator then finds the class."""
    code = (
        "import sys; sys.modules['hydra_plugins'] = None\n"
        "from runners.jobs.launcher import register, InterleavedLauncher\n"
        "register()\n"
        "from hydra._internal.utils import _locate\n"
        "cls = _locate('hydra_plugins.specbench.InterleavedLauncher')\n"
        "assert issubclass(cls, InterleavedLauncher), cls\n"
        "print('located', cls.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "located hydra_plugins.specbench" in out.stdout, out.stderr[-2000:]
