"""The one baseline (issue 51, item 2): every decode of the target alone, on every path (the cached and the paired
reference at batch 1, the interleaved round's warm-up, the paired AR batch and the row alone at B > 1, an ``ar``
job's own decodes), runs inside ``runners.jobs.target_alone``; every timed one inside its one measurement bracket,
right after its warm-ups from the one warm-up loop. Tiny seeded models, in-process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from runners.engine.batched import BatchedAutoregressiveRunner
from runners.engine.speculative import AutoregressiveRunner
from runners.jobs import ar_cache
from runners.jobs.interleave import InterleavedSweep
from runners.jobs.job import run_job
from runners.jobs.target_alone import measured, warm_ups
from specbench.record_io import read_records

from helpers import compose

MODULE = str(Path("runners") / "jobs" / "target_alone.py")


def _tiny(tiny_conf: Path, *overrides: str) -> dict:
    cfg = OmegaConf.to_container(compose("task.n_prompts=3", "max_new_tokens=6", "warmup=1", *overrides), resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    return cfg


def _where() -> tuple[bool, bool, bool]:
    """Whether the caller's stack passes through the module, its bracket (``measured``), its warm-up loop."""
    frames, f = [], sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.endswith(MODULE):
            frames.append(f.f_code.co_name)
        f = f.f_back
    return bool(frames), "measured" in frames, "warm_ups" in frames


@pytest.fixture
def decodes(monkeypatch):
    """Every decode of a target-alone runner (batch 1 or batched): its kind, prompts and where it ran from."""
    seen: list[dict] = []
    for cls, kind in ((AutoregressiveRunner, "row"), (BatchedAutoregressiveRunner, "batch")):
        real = cls.generate

        def spy(self, prompts, max_new_tokens, generator=None, _real=real, _kind=kind):
            inside, bracket, warm = _where()
            key = tuple(prompts) if _kind == "row" else tuple(map(tuple, prompts))
            seen.append({"kind": _kind, "prompts": key, "inside": inside, "timed": bracket, "warm_up": warm})
            return _real(self, prompts, max_new_tokens, generator)

        monkeypatch.setattr(cls, "generate", spy)
    monkeypatch.setattr(ar_cache, "_AR_REFERENCE", {})  # another test of this process may have decoded these keys
    return seen


def test_every_decode_of_the_target_alone_runs_inside_its_one_module(tiny_conf, tmp_path, decodes):
    """Sequential jobs at batch 1 (the cached reference) and at B = 2 (the paired AR batch, the row alone), an
    interleaved sweep (the paired reference, the round's warm-up, an ``ar`` job's own decodes): no decode of the
    target alone comes from anywhere but ``runners.jobs.target_alone``."""
    every = ("warmup_per_prompt=1",)
    run_job(_tiny(tiny_conf, "method=specdecode", *every), tmp_path / "b1", progress=False)
    cached = len(decodes)
    run_job(_tiny(tiny_conf, "method=specdecode", "batch_size=2", "engine.fast_linear=false",  # a sweep folder of
                  "engine.verify_buckets=false", *every), tmp_path / "own" / "b2", progress=False)  # its own: the
    batched = len(decodes) - cached  # row alone is decoded, not read from the AR cache
    sweep = tmp_path / "sweep"
    jobs = [(_tiny(tiny_conf, *cell, *every, f"results_dir={sweep}"), sweep / ",".join(cell))
            for cell in (("method=specdecode", "gamma=2"), ("method=ar",))]
    assert [o.status for o in InterleavedSweep(jobs, sweep, progress=False, costs=False).run()] == ["complete"] * 2
    assert cached and batched and len(decodes) > cached + batched  # every path decoded the target alone
    assert {d["kind"] for d in decodes} == {"row", "batch"}
    assert [d for d in decodes if not d["inside"]] == []
    assert all(d["timed"] != d["warm_up"] for d in decodes if d["timed"] or d["warm_up"])
    assert any(d["kind"] == "row" and not d["timed"] and not d["warm_up"] for d in decodes[cached:cached + batched])
    for folder in (tmp_path / "b1", tmp_path / "own" / "b2", *(d for _, d in jobs)):
        assert all(r["lossless"] for r in read_records(folder / "records.jsonl"))


def test_a_timed_reference_follows_its_own_warm_ups_inside_the_bracket(tiny_conf, tmp_path, decodes):
    """At batch 1 each reference is ``warmup_per_prompt`` untimed decodes of its prompt turn from the warm-up loop,
    then the timed one in the bracket; at B = 2 the paired AR batch gets as many untimed decodes of its batch
    before its timed one, in the bracket."""
    run_job(_tiny(tiny_conf, "method=specdecode", "warmup=0", "warmup_per_prompt=2"), tmp_path / "b1",
            progress=False)
    timed = [i for i, d in enumerate(decodes) if d["timed"]]
    assert len(timed) == 3  # one reference per prompt
    for i in timed:
        assert [(d["prompts"], d["warm_up"]) for d in decodes[i - 2:i]] == [(decodes[i]["prompts"], True)] * 2
    decodes.clear()
    run_job(_tiny(tiny_conf, "method=specdecode", "warmup=0", "warmup_per_prompt=2", "batch_size=2",
                  "engine.fast_linear=false", "engine.verify_buckets=false"), tmp_path / "b2", progress=False)
    batches = [d for d in decodes if d["kind"] == "batch"]
    timed = [i for i, d in enumerate(batches) if d["timed"]]
    assert len(timed) == 2  # 3 prompts in batches of 2
    for i in timed:
        before = [d for d in batches[:i] if d["prompts"] == batches[i]["prompts"]]
        assert [d["warm_up"] for d in before] == [True, True]


class _Share:
    def __init__(self, samples):
        self.samples = iter(samples)

    def sample(self):
        return next(self.samples)


def test_the_bracket_counts_the_most_jobs_and_every_neighbour_seen_around_the_decode():
    order = []
    got = measured(_Share([(2, ["a"]), (3, ["b", "a"])]), lambda: order.append("decode") or "gen")
    assert (got.value, got.device_jobs, got.neighbours, order) == ("gen", 3, ["a", "b"], ["decode"])
    alone = measured(None, lambda: "gen")
    assert (alone.value, alone.device_jobs, alone.neighbours) == ("gen", None, None)


def test_the_warm_up_loop_alternates_the_decodes_it_is_given():
    order = []
    warm_ups(2, lambda k: order.append(("method", k)), lambda k: order.append(("baseline", k)))
    assert order == [("method", 0), ("baseline", 0), ("method", 1), ("baseline", 1)]
    warm_ups(0, lambda k: order.append("never"))
    assert order[-1] == ("baseline", 1)


def test_a_width_job_reports_its_speedup_over_the_fastest_target_alone_of_its_dtype(tiny_conf, tmp_path, decodes,
                                                                                     capsys):
    """A bf16 target at ``engine.width``: its reference steps at the width (the function the loop matches), so the
    plain 1-token step on a dynamic cache is timed beside every reference, in alternating order, inside the module's
    bracket; every record carries it, the summary's headline divides by it and the printed summary leads with it,
    the width's own speedup on the next line. Sequential and interleaved alike; an fp32 job has none of it."""
    from runners.jobs.report import print_summary

    def width_cfg(*extra: str) -> dict:
        cfg = _tiny(tiny_conf, "method=specdecode", "engine.width=auto", *extra)
        cfg["pair"]["target"]["dtype"] = "bfloat16"
        return cfg

    summary = run_job(width_cfg(), tmp_path / "seq", progress=False)
    sweep = tmp_path / "sweep"
    jobs = [(width_cfg(f"results_dir={sweep}"), sweep / "w")]
    assert [o.status for o in InterleavedSweep(jobs, sweep, progress=False, costs=False).run()] == ["complete"]
    for folder in (tmp_path / "seq", sweep / "w"):
        records = read_records(folder / "records.jsonl")
        assert records and all(r["lossless"] for r in records)
        for r in records:
            fastest = r["ar_fastest_tokens"] / (r["ar_fastest_wall_ms"] / 1000.0)
            assert r["speedup_fastest"] == pytest.approx(r["tokens_per_s"] / fastest)
            assert isinstance(r["ar_fastest_same"], bool)
    agg = summary["aggregates"]
    pooled = sum(r["new_tokens"] for r in records) and agg["tokens_per_s"] / agg["ar_fastest_tokens_per_s"]
    assert agg["speedup_fastest"] == pytest.approx(pooled) and agg["speedup_fastest_interval"] is not None
    assert summary["baseline"]["fastest"].get("width") is None and summary["baseline"]["kernels"]["width"] == 8
    assert [d for d in decodes if not d["inside"]] == []
    capsys.readouterr()
    print_summary(tmp_path / "seq", summary)
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("  speedup vs AR"))
    assert "over the fastest bfloat16 target alone" in lines[head] and f"{agg['speedup_fastest']:.3f}x" in lines[head]
    assert lines[head + 1].startswith("  at the width") and "over the target alone at width 8" in lines[head + 1]
    plain = run_job(_tiny(tiny_conf, "method=specdecode"), tmp_path / "fp32", progress=False)
    assert "speedup_fastest" not in plain["aggregates"]
    assert all(r.get("ar_fastest_wall_ms") is None for r in read_records(tmp_path / "fp32" / "records.jsonl"))
