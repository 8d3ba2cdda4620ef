"""Cross-vocabulary jobs end to end on a tiny heterogeneous pair (byte-level BPE target, character draft):

* every γ policy runs over every cross-vocabulary algorithm through ``run.py -m`` (one sweep), greedy
  outputs equal the target's, records carry the rule, draft forwards and SLRS's fallback count, and
  every summary the vocabulary overlap beside the acceptance;
* the same at temperature 1 (runs, and the default algorithm there is TLI);
* Leviathan et al.'s α estimate and speedup formula, and the analysis table that sets them beside the
  measured speedups with a calibrated ``c``;
* calibration on a pair whose draft reads another vocabulary: per-model token pools, and the
  cross-vocabulary drafter's own overhead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from specbench.records import leviathan_alpha, leviathan_speedup

from helpers import run_sweep, write_tiny_hetero_pair

POLICY_METHODS = ["specdecode", "hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune", "gammatune_plus"]
RULES = ["slem", "tli", "slrs", "union"]


@pytest.fixture(scope="module")
def hetero_conf(tmp_path_factory) -> Path:
    return write_tiny_hetero_pair(tmp_path_factory.mktemp("tinyhetero"))


def _jobs(root: Path) -> dict[str, tuple[dict, list[dict]]]:
    out = {}
    for summary in root.rglob("summary.json"):
        records = [json.loads(line) for line in (summary.parent / "records.jsonl").read_text().splitlines()]
        out[summary.parent.name] = (json.loads(summary.read_text()), records)
    return out


@pytest.mark.slow
def test_every_policy_runs_over_every_cross_vocabulary_algorithm(hetero_conf, tmp_path):
    proc = run_sweep(["-m", f"method={','.join(POLICY_METHODS)}", f"hetero={','.join(RULES)}", "pair=tiny_hetero",
                      "task.n_prompts=1", "max_new_tokens=10", "warmup=0", "gamma=3", "threads=1"], hetero_conf, tmp_path,
                     in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path)
    assert len(jobs) == len(POLICY_METHODS) * len(RULES)
    for name, (summary, records) in jobs.items():
        parts = dict(kv.split("=", 1) for kv in name.split(","))
        assert summary["status"] == "complete", name
        (r,) = records
        assert r["hetero"] == parts["hetero"] and r["method"] == parts["method"]
        assert r["lossless"] is True, name  # greedy: equal to the target's own output
        assert r["draft_forwards"] > 0 and r["drafted"] > 0, name
        assert r["fallback_rounds"] == (0 if parts["hetero"] == "slrs" else None)
        hetero = summary["hetero"]
        assert hetero["rule"] == parts["hetero"]
        vocab = hetero["vocabulary"]
        assert 0 < vocab["shared"] <= min(vocab["target_vocab"], vocab["draft_vocab"])
        assert vocab["shared_over_target"] == pytest.approx(vocab["shared"] / vocab["target_vocab"])
        assert hetero["acceptance_rate"] == summary["aggregates"]["acceptance_rate"]
        assert 0 <= hetero["output_tokens_shared"] <= hetero["output_tokens"] == r["new_tokens"]
        assert ("fallback_rule" in hetero) == (parts["hetero"] == "slrs")


@pytest.mark.slow
def test_sampling_jobs_run_and_auto_picks_tli(hetero_conf, tmp_path):
    proc = run_sweep(["-m", "method=gammatune", "hetero=auto,union", "pair=tiny_hetero", "temperature=1",
                      "task.n_prompts=1", "max_new_tokens=10", "warmup=0", "threads=1", "baseline=none"],
                     hetero_conf, tmp_path / "a", in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_sweep(["method=gammatune", "hetero=slrs", "hetero.max_nodes=1", "pair=tiny_hetero", "temperature=1",
                      "task.n_prompts=1", "max_new_tokens=10", "warmup=0", "threads=1"], hetero_conf, tmp_path / "b",
                     in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {**_jobs(tmp_path / "a"), **_jobs(tmp_path / "b")}
    rules = sorted(records[0]["hetero"] for _, records in jobs.values())
    assert rules == ["slrs", "tli", "union"]
    for summary, records in jobs.values():
        assert summary["status"] == "complete" and records[0]["lossless"] is None
        if records[0]["hetero"] == "slrs":  # max_nodes=1: every drafting round fell back to TLI
            assert records[0]["fallback_rounds"] == sum(1 for d in records[0]["drafted_trace"] if d > 0) > 0
            assert summary["hetero"]["fallback_rule"] == "tli" and summary["hetero"]["max_nodes"] == 1


# ---------------------------------------------------------------- Leviathan's prediction


def test_leviathan_alpha_counts_only_verified_tokens():
    # rounds: 2 of 3 accepted (rejection), 3 of 3 (none), 0 of 2 (rejection), nothing drafted
    assert leviathan_alpha([2, 3, 0, 0], [3, 3, 2, 0]) == pytest.approx(5 / 7)
    assert leviathan_alpha([0], [0]) is None
    # an i.i.d. Bernoulli(α) acceptance: the estimate recovers α (acceptance_rate = accepted/drafted would not)
    gen = torch.Generator().manual_seed(0)
    acc, drafted = [], []
    for _ in range(4000):
        a = 0
        while a < 5 and float(torch.rand((), generator=gen)) < 0.6:
            a += 1
        acc.append(a)
        drafted.append(5)
    assert leviathan_alpha(acc, drafted) == pytest.approx(0.6, abs=0.02)
    assert sum(acc) / sum(drafted) < 0.5


def test_leviathan_speedup_formula():
    # Leviathan et al. 2023, Theorem 3.8 with their c = 1 / ours
    assert leviathan_speedup(0.8, 4, 20.0) == pytest.approx((1 - 0.8**5) / (0.2 * (4 / 20 + 1)))
    assert leviathan_speedup(0.0, 4, 5.0) == pytest.approx(1 / (4 / 5 + 1))
    assert leviathan_speedup(1.0, 3, 1e9) == pytest.approx(4.0)
    assert leviathan_speedup(0.5, 2, 4.0, forwards=4) == pytest.approx(1.75 / 2.0)  # SLEM: more draft forwards


def _record(**kw):
    base = {"pair": "p", "target": "t", "draft": "d", "task": "x", "category": "c", "prompt_id": "0", "turn": 1,
            "temperature": 1.0, "seed": 0, "prompt_tokens": 5, "output_text": "", "output_sha": "", "stop_reason": "eos",
            "chat_template": None, "ttft_ms": 1.0, "tpot_ms": 1.0, "gamma_init": None, "hetero": None}
    return {**base, **kw}


def test_prediction_table_sets_leviathan_beside_the_measured_speedup(tmp_path):
    from analysis.frame import load_records
    from analysis.leviathan import load_calibrations, prediction_table
    from specbench.record_io import RecordWriter

    jobs = {
        "ar": [_record(method="ar", new_tokens=100, wall_ms=10_000.0, tokens_per_s=10.0)],
        "tli": [_record(method="specdecode", hetero="tli", gamma_init=4, new_tokens=100, wall_ms=8_000.0, tokens_per_s=12.5,
                        rounds=2, drafted=8, accepted=5, draft_forwards=8, accepted_trace=[4, 1], drafted_trace=[4, 4],
                        gamma_trace=[4, 4])],
    }
    for name, records in jobs.items():
        with RecordWriter(tmp_path / name / "records.jsonl") as w:
            for r in records:
                w.write(r)
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": "complete", "config": {}}))
    (tmp_path / "latency").mkdir()
    (tmp_path / "latency" / "p.json").write_text(json.dumps({"latency_version": 1, "meta": {"pair": "p", "c": 4.0},
                                                             "target": {}, "draft": {}}))
    (tmp_path / "latency" / "other.json").write_text(json.dumps({"latency_version": 1, "meta": {"pair": "q"},
                                                                 "target": {"step_ms": {"1": 30.0}},
                                                                 "draft": {"step_ms": {"1": 10.0}}}))
    cal = load_calibrations(tmp_path / "latency")
    assert cal == {"p": 4.0, "q": 3.0}
    table = prediction_table(load_records(tmp_path), cal)
    (row,) = table.data.to_dict("records")
    alpha = 5 / 6  # 5 accepted, one round ended in a rejection
    assert row["alpha"] == pytest.approx(alpha)
    assert row["speedup"] == pytest.approx(1.25)
    assert row["predicted_speedup"] == pytest.approx(leviathan_speedup(alpha, 4.0, 4.0, 4.0))
    assert row["measured_over_predicted"] == pytest.approx(1.25 / row["predicted_speedup"])
    assert prediction_table(load_records(tmp_path), {}).data["predicted_speedup"].map(math.isnan).all()
    assert prediction_table(load_records(tmp_path / "ar"), cal) is None  # no cross-vocabulary job


# ---------------------------------------------------------------- calibration of a heterogeneous pair


def test_calibration_pools_and_overheads_of_a_cross_vocabulary_pair():
    from runners.drafters.slem import SLEMDrafter
    from runners.drafters.text_sync import CrossVocab
    from runners.replay.calibration import ModelTimer, measure_overheads

    from helpers.tiny import tiny_model, tiny_tokenizer

    bpe, char = tiny_tokenizer(300, "bpe"), tiny_tokenizer(kind="char")
    target, draft = tiny_model(len(bpe), seed=1), tiny_model(len(char), seed=2)
    text = "the quick brown fox jumps over the lazy dog"
    with pytest.raises(IndexError):  # the target's ids do not fit the draft's embedding
        ModelTimer({"target": target, "draft": draft}, bpe(text).input_ids)("draft", 1, 8)
    timer = ModelTimer({"target": target, "draft": draft}, {"target": bpe(text).input_ids, "draft": char(text).input_ids})
    assert timer("draft", 2, 8) > 0 and timer("target", 3, 8) > 0 and timer("draft", 4, 0) > 0
    built = []

    def make():
        built.append(SLEMDrafter(CrossVocab(draft, char, bpe, [0])))
        return built[-1]

    over = measure_overheads(target, draft, [0], bpe(text).input_ids, new_tokens=8, repeats=1, drafter=make)
    assert len(built) == 2 and over["round_overhead_ms"] >= 0.0 and over["ar_overhead_ms"] >= 0.0


# ---------------------------------------------------------------- the recipes


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mini_hetero_slem", "mini_hetero_tli", "mini_hetero_policies", "mini_hetero_union",
                                    "mini_hetero_slrs"])
def test_every_cell_of_the_hetero_recipes_is_a_valid_job(recipe):
    import itertools

    import yaml

    from runners.jobs.build import prepare

    from helpers import CONF, compose

    params = yaml.safe_load((CONF / "experiment" / f"{recipe}.yaml").read_text())["hydra"]["sweeper"]["params"]
    keys = sorted(params)
    rules = set()
    for values in itertools.product(*(str(params[k]).split(",") for k in keys)):
        job = prepare(compose(f"experiment={recipe}", *(f"{k}={v}" for k, v in zip(keys, values, strict=True))))
        assert job.prompts and job.config.pair.same_tokenizer is False
        rules.add((job.config.temperature, job.config.hetero_rule))
    assert any(rule is not None for _, rule in rules)
    if recipe == "mini_hetero_policies":  # hetero=auto: SLEM when greedy, TLI when sampling
        assert {(0.0, "slem"), (1.0, "tli")} <= rules
