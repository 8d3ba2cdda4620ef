"""Interleaved execution (``runners.jobs.interleave``, ``hydra/launcher=interleaved``): rounds of one
prompt turn per job in a recorded order (positions balanced: tests/jobs/test_interleave_balance.py), the
round's untimed warm-up, paired AR references, repeats, the host probe, and
the point of it all: a slowdown injected halfway through a sweep reaches identical-work cells alike
when they are interleaved, and splits them when they run one after another. Tiny seeded models,
in-process (the Hydra path is in tests/jobs/test_launchers.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from runners.jobs import interleave
from runners.jobs import job as job_module
from runners.jobs.interleave import InterleavedSweep, read_order
from runners.jobs.job import run_job
from runners.jobs.round_order import golden_step, round_order, round_seed
from specbench.record_io import read_records
from specbench.summary import aggregate

from helpers import compose


def _tiny(tiny_conf: Path, *overrides: str) -> dict:
    cfg = OmegaConf.to_container(compose("task.n_prompts=3", "max_new_tokens=8", "warmup=0", *overrides), resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    return cfg


def _jobs(tiny_conf: Path, results: Path, cells: list[tuple[str, ...]], *common: str) -> list[tuple[dict, Path]]:
    return [(_tiny(tiny_conf, *cell, *common, f"results_dir={results}"), results / ",".join(cell)) for cell in cells]


CELLS = [("method=specdecode", "gamma=2"), ("method=gammatune", "gamma=4"), ("method=ar",)]


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_rounds_decode_every_job_once_per_turn_with_the_paired_reference(tiny_conf, tmp_path, monkeypatch):
    jobs = _jobs(tiny_conf, tmp_path, CELLS)
    warm_ups = []
    real_untimed = interleave.untimed_target

    def spy(job, ids):  # the warm-up leaves the folder and the job's policy as they were
        before, policies = _files(tmp_path), [repr(vars(p)) for p in job.policies]
        gen = real_untimed(job, ids)
        warm_ups.append((job.name, _files(tmp_path) == before, [repr(vars(p)) for p in job.policies] == policies))
        return gen

    monkeypatch.setattr(interleave, "untimed_target", spy)
    outcomes = InterleavedSweep(jobs, tmp_path, seed=3, progress=False).run()
    assert [o.status for o in outcomes] == ["complete"] * 3
    rounds = read_order(tmp_path)
    assert [r["round"] for r in rounds] == [0, 1, 2]  # 3 prompt turns
    first_spec = jobs[0][1].name
    assert warm_ups == [(first_spec, True, True)] * 3  # one per round, on the paired AR decode's job
    for r in rounds:  # every job once, plus one paired AR decode for the two speculative jobs
        names = r["order"]
        assert sorted(n for n in names if not n.startswith("ar:")) == sorted(d.name for _, d in jobs)
        assert len([n for n in names if n.startswith("ar:")]) == 1
        # a round of the balanced scheme over the round's slots (4 slots, 3 rounds: one block; rounds 0 and 1
        # a rotation and its mirror, round 2 the next rotation)
        plan = round_order(r["slots"], 3, "tiny", r["round"])
        assert r["slots"] == [r["slots"][i] for i in plan.order] and f"ar/{first_spec}" in r["slots"]
        assert (r["scheme"], r["seed"]) == ("balanced", round_seed(3, "tiny", 0))
        assert (r["shift"], r["reversed"]) == [(0, False), (0, True), (golden_step(4), False)][r["round"]]
        assert r["warmed"]["job"] == first_spec and r["warmed"]["new_tokens"] > 0 and "error" not in r["warmed"]
    assert rounds[1]["slots"] == rounds[0]["slots"][::-1]  # mirrored: every slot's positions sum to n - 1
    assert len({tuple(r["slots"]) for r in rounds}) == 3
    paired = [json.loads(line) for line in (tmp_path / ".specbench" / "ar_paired.jsonl").read_text().splitlines()]
    assert len(paired) == 3
    by_job = {d.name: read_records(d / "records.jsonl") for _, d in jobs}
    ar_ids = {(r["prompt_id"], r["turn"]): r["output_ids"] for r in by_job["method=ar"]}
    for name, records in by_job.items():
        assert len(records) == 3
        for r in records:
            order = rounds[r["interleave"]["round"]]["order"]
            assert order[r["interleave"]["position"]] == name  # the record says where it ran
            assert r["interleave"]["scheme"] == "balanced" and r["interleave"]["size"] == 4
            assert r["host_probe_ms"] > 0 and r["repeat"] == 0
            if name == "method=ar":
                assert r["ar_source"] == "self"
                continue
            assert r["ar_source"] == "paired" and r["lossless"] is True
            assert r["output_ids"] == ar_ids[(r["prompt_id"], r["turn"])]
            row = next(p for p in paired if p["ar_decode"] == r["ar_decode"])
            assert (row["prompt_id"], row["turn"]) == (r["prompt_id"], r["turn"])
            assert r["ar_wall_ms"] == pytest.approx(row["wall_ms"])
            assert row["interleave"]["round"] == r["interleave"]["round"]  # paired: the same round
    # both speculative jobs of a round divide by the same AR decode
    decodes = Counter(r["ar_decode"] for name in ("method=specdecode,gamma=2", "method=gammatune,gamma=4")
                      for r in by_job[name])
    assert set(decodes.values()) == {2}
    summary = json.loads((jobs[0][1] / "summary.json").read_text())
    assert summary["drift"]["n"] == 3 and summary["drift"]["max_over_min"] >= 1.0
    # 3 rounds, an odd count: the summary says the positions are not balanced (issue 50, item 5)
    assert summary["interleave"] == {"scheme": "balanced", "rounds": 3, "positions_balanced": False}


@pytest.mark.slow
def test_interleaved_outputs_equal_sequential_ones_and_policy_state_stays_per_job(tiny_conf, tmp_path):
    """GammaTune carrying γ over between prompts (transient=false) next to another GammaTune and a fixed γ:
    each job ends in exactly the state it reaches when run alone."""
    cells = [("method=gammatune", "gamma=1", "method.transient=false"),
             ("method=gammatune", "gamma=6", "method.transient=false"), ("method=specdecode", "gamma=3")]
    seq = tmp_path / "seq"
    for cfg, job_dir in _jobs(tiny_conf, seq, cells):
        run_job(cfg, job_dir, progress=False)
    inter = tmp_path / "inter"
    InterleavedSweep(_jobs(tiny_conf, inter, cells), inter, progress=False).run()
    for cell in cells:
        name = ",".join(cell)
        a, b = read_records(seq / name / "records.jsonl"), read_records(inter / name / "records.jsonl")
        assert [r["output_ids"] for r in a] == [r["output_ids"] for r in b]
        assert [r["gamma_trace"] for r in a] == [r["gamma_trace"] for r in b]
        sa = json.loads((seq / name / "summary.json").read_text())["policy_state"]
        sb = json.loads((inter / name / "summary.json").read_text())["policy_state"]
        assert sa == sb, name


def test_resume_bad_input_and_a_failing_job(tiny_conf, tmp_path, monkeypatch):
    jobs = _jobs(tiny_conf, tmp_path, CELLS[:2])
    bad = (_tiny(tiny_conf, "method=gammatune", "method.eta=7", f"results_dir={tmp_path}"), tmp_path / "bad")
    calls = {"n": 0}
    real = job_module.JobRun.generate

    def crash_second_round(self, inps, reference=True):  # the specdecode job dies on its second prompt turn
        if self.config.method.name == "specdecode" and len(self.done) == 1:
            calls["n"] += 1
            raise RuntimeError("injected failure")
        return real(self, inps, reference)

    monkeypatch.setattr(job_module.JobRun, "generate", crash_second_round)
    outcomes = InterleavedSweep([*jobs, bad], tmp_path, progress=False).run()
    assert [o.status for o in outcomes] == ["failed", "complete", "invalid"]
    assert not (tmp_path / "bad").exists()  # a refused config leaves no folder
    assert "bad" in (tmp_path / "invalid_jobs.jsonl").read_text()
    failed = json.loads((jobs[0][1] / "summary.json").read_text())
    assert failed["status"] == "failed" and "injected failure" in failed["error"]
    assert len(read_records(jobs[0][1] / "records.jsonl")) == 1  # its first turn is kept
    assert len(read_records(jobs[1][1] / "records.jsonl")) == 3  # the other job went on
    # a re-run resumes the failed job from its second turn and leaves the complete one alone
    monkeypatch.setattr(job_module.JobRun, "generate", real)
    done = jobs[1][1] / "records.jsonl"
    before = done.read_bytes()
    outcomes = InterleavedSweep(jobs, tmp_path, progress=False).run()
    assert [o.status for o in outcomes] == ["complete", "complete"]
    assert done.read_bytes() == before
    resumed = read_records(jobs[0][1] / "records.jsonl")
    assert [r["prompt_id"] for r in resumed] == [r["prompt_id"] for r in read_records(done)]
    assert resumed[0]["interleave"]["round"] == 0 and resumed[1]["interleave"]["round"] == 1
    from runners.jobs.lock import JobLock

    assert JobLock(jobs[0][1]).try_acquire() is None  # released


def test_repeats_reshuffle_and_extend_a_job(tiny_conf, tmp_path):
    jobs = _jobs(tiny_conf, tmp_path, CELLS[:2], "repeats=2", "task.n_prompts=2")
    InterleavedSweep(jobs, tmp_path, progress=False).run()
    for _, job_dir in jobs:
        records = read_records(job_dir / "records.jsonl")
        assert [(r["prompt_id"], r["repeat"]) for r in records] == [
            ("writing-1", 0), ("writing-1", 1), ("writing-2", 0), ("writing-2", 1)]
        assert records[0]["output_ids"] == records[1]["output_ids"]
        assert records[0]["ar_decode"] != records[1]["ar_decode"]  # each repeat its own paired AR decode
    assert len(read_order(tmp_path)) == 4
    summary = json.loads((jobs[0][1] / "summary.json").read_text())
    assert summary["interleave"] == {"scheme": "balanced", "rounds": 4, "positions_balanced": True}
    # more repeats later extend the same folders (repeats is not part of a job's identity)
    more = _jobs(tiny_conf, tmp_path, CELLS[:2], "repeats=3", "task.n_prompts=2")
    InterleavedSweep(more, tmp_path, progress=False).run()
    for _, job_dir in more:
        records = read_records(job_dir / "records.jsonl")
        assert sorted(r["repeat"] for r in records) == [0, 0, 1, 1, 2, 2]
        assert json.loads((job_dir / "summary.json").read_text())["status"] == "complete"


def test_the_sequential_launcher_times_repeats_too(tiny_conf, tmp_path):
    cfg = _tiny(tiny_conf, "method=specdecode", "repeats=2", "task.n_prompts=2", "host_probe=false")
    summary = run_job(cfg, tmp_path / "job", progress=False)
    records = read_records(tmp_path / "job" / "records.jsonl")
    assert [r["repeat"] for r in records] == [0, 1, 0, 1]
    assert all(r["host_probe_ms"] is None and r["interleave"] is None for r in records)
    assert {r["ar_source"] for r in records} <= {"decoded", "cache"}
    assert summary["drift"] is None and summary["repeats"] == 2


# ------------------------------------------------------------------- drift: the reason for all this


class _Slowdown:
    """A host that slows down halfway, on a virtual clock: every forward of the tiny models advances the clock
    the records are timed by (``specbench.timing``'s ``perf_counter``) by ``base`` seconds, and by ``slow`` from
    the moment the sweep has made ``switch_after`` timed generations on. The models' own compute time is not on
    that clock, so the cells' times are exactly what the slowdown makes them, whatever else the machine runs
    (the real clock made this test fail under a loaded CI host: no timed assertion on real time)."""

    def __init__(self, switch_after: int, base: float = 0.002, slow: float = 0.004) -> None:
        self.switch_after, self.base, self.slow, self.generations = switch_after, base, slow, 0
        self.clock = 0.0

    def install(self, monkeypatch) -> None:
        import types

        from transformers import LlamaForCausalLM

        import specbench.timing as timing

        real_forward = LlamaForCausalLM.forward
        real_generate = job_module.JobRun.generate
        probe = self
        monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: probe.clock))

        def forward(model, *args, **kwargs):
            probe.clock += probe.slow if probe.generations >= probe.switch_after else probe.base
            return real_forward(model, *args, **kwargs)

        def generate(run, inps, reference=True):
            out = real_generate(run, inps, reference)
            probe.generations += 1
            return out

        monkeypatch.setattr(LlamaForCausalLM, "forward", forward)
        monkeypatch.setattr(job_module.JobRun, "generate", generate)


def _tps(job_dir: Path) -> float:
    return aggregate(read_records(job_dir / "records.jsonl"))["tokens_per_s"]


@pytest.mark.slow
def test_a_slowdown_halfway_reaches_interleaved_cells_alike_and_splits_sequential_ones(tiny_conf, tmp_path,
                                                                                       monkeypatch):
    """Two cells doing identical work (SpecDecode and its A/A twin): interleaved they measure within
    ±3 % of each other through a slowdown that starts halfway; run one after the other, the second one
    runs wholly in the slow half and measures the gap."""
    torch.set_num_threads(1)
    cells = [("method=specdecode", "gamma=3"), ("method=specdecode_twin", "gamma=3")]
    common = ("task.n_prompts=8", "max_new_tokens=12", "verify_lossless=false", "host_probe=false")
    n_turns = 8
    slow = _Slowdown(switch_after=n_turns)  # half of the sweep's 2 x 8 timed generations
    slow.install(monkeypatch)
    seq = tmp_path / "seq"
    for cfg, job_dir in _jobs(tiny_conf, seq, cells, *common):
        run_job(cfg, job_dir, progress=False)
    gap_sequential = _tps(seq / ",".join(cells[1])) / _tps(seq / ",".join(cells[0]))
    slow.generations = 0
    inter = tmp_path / "inter"
    InterleavedSweep(_jobs(tiny_conf, inter, cells, *common), inter, progress=False).run()
    gap_interleaved = _tps(inter / ",".join(cells[1])) / _tps(inter / ",".join(cells[0]))
    assert gap_sequential < 0.8, gap_sequential  # the twin ran in the slow half: the injected gap shows
    assert abs(gap_interleaved - 1.0) <= 0.03, gap_interleaved
    outputs = {d.name: [r["output_ids"] for r in read_records(d / "records.jsonl")] for d in inter.iterdir()
               if d.is_dir() and not d.name.startswith(".")}
    assert len({json.dumps(v) for v in outputs.values()}) == 1  # identical work indeed


def test_the_ar_cache_key_names_the_kv_cache_so_an_offloaded_decoding_never_serves_as_a_reference(tmp_path):
    """Issue 28 (2): an ``ar_offloaded`` job stores its own decoding under ``cache: offloaded``; a reference
    lookup asks for ``dynamic``, so a record's speedup never divides by an offloaded decode."""
    from runners.jobs.ar_cache import ARCache, key_hash, reference_key
    from specbench.config import ModelSpec

    spec = ModelSpec(name="t", path="/models/t")
    dynamic = reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")
    offloaded = reference_key(spec, [1, 2, 3], 8, [0], "cpu:x", cache="offloaded")
    assert dynamic["cache"] == "dynamic" and key_hash(dynamic) != key_hash(offloaded)
    cache = ARCache(tmp_path)
    cache.put(offloaded, [5, 6], 1.0, 9.0, "max_new_tokens", {"job": "method=ar_offloaded"})
    assert cache.get(dynamic) is None and cache.get(offloaded)["tokens"] == [5, 6]


def test_the_ar_cache_key_names_the_thread_count_and_cpu_capability(monkeypatch):
    """A reference timed with other torch threads, or under ``ATEN_CPU_CAPABILITY=default`` (other
    kernels), is another reference: a job never divides by it."""
    import torch

    from runners.jobs.ar_cache import key_hash, reference_key
    from specbench.config import ModelSpec

    spec = ModelSpec(name="t", path="/models/t")
    here = reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")
    assert here["threads"] == torch.get_num_threads()
    assert here["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    monkeypatch.setattr(torch, "get_num_threads", lambda: here["threads"] + 1)
    assert key_hash(reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")) != key_hash(here)
    monkeypatch.undo()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    other = reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")
    assert other["cpu_capability"] == "DEFAULT" and key_hash(other) != key_hash(here)
    monkeypatch.undo()
    # MKL's and oneDNN's instruction sets narrowed by the environment (an emulated older host): another reference
    from specbench.provenance import KERNEL_ENV

    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    assert "kernel_env" not in reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")  # nothing set: the key as before
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    narrowed = reference_key(spec, [1, 2, 3], 8, [0], "cpu:x")
    assert narrowed["kernel_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"} and key_hash(narrowed) != key_hash(here)


def test_jobs_sharing_a_model_each_decode_on_their_own_cache_kind(tiny_conf, tmp_path, monkeypatch):
    """A cache kind is set per model object and one process holds every job of an interleaved sweep, built before
    the first round: a job on block-invariant forwards (``engine.width``, a static target cache) beside one on the
    dynamic cache and one on ``engine.graphs=static``, all of one tiny target. Each job's decodes — timed, and its
    target alone's — run on its own kind (``Job.activate``), and all are lossless."""
    from runners.engine import kv
    from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner

    seen: list[tuple[str, bool]] = []  # (the decode's policy or "alone", whether the target's cache is static)
    real_spec, real_ar = SpeculativeRunner.generate, AutoregressiveRunner.generate

    def spec(self, *args, **kwargs):
        seen.append((type(self.policy).__name__, kv.static_headroom(self.target) is not None))
        return real_spec(self, *args, **kwargs)

    def alone(self, *args, **kwargs):
        seen.append(("alone", kv.static_headroom(self.target) is not None))
        return real_ar(self, *args, **kwargs)

    monkeypatch.setattr(SpeculativeRunner, "generate", spec)
    monkeypatch.setattr(AutoregressiveRunner, "generate", alone)
    cells = [("method=specdecode", "gamma=3", "engine.width=4"), ("method=gammatune", "gamma=3"),
             ("method=hf_heuristic", "gamma=3", "engine.graphs=static")]
    InterleavedSweep(_jobs(tiny_conf, tmp_path, cells), tmp_path, progress=False).run()
    kinds = {policy: {static for p, static in seen if p == policy} for policy, _ in seen}
    assert kinds["FixedGamma"] == {True} and kinds["GammaTune"] == {False} and kinds["HFHeuristic"] == {True}
    assert kinds["alone"] == {True, False}  # each job's target alone on its job's kind
    for cell in cells:
        summary = json.loads((tmp_path / ",".join(cell) / "summary.json").read_text())
        assert summary["status"] == "complete", summary.get("error")
        assert all(r["lossless"] for r in read_records(tmp_path / ",".join(cell) / "records.jsonl"))
    width = json.loads((tmp_path / ",".join(cells[0]) / "summary.json").read_text())
    assert width["engine"]["width"] == 4 and width["baseline"]["kernels"]["width"] == 4
