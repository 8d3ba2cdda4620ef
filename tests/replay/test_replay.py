"""Traces and replay (runners.replay: trace, replay, latency, cli; analysis.policy_lab).

* replayed rounds equal the rounds of real ``SpeculativeRunner`` runs, exactly, for every
  replayable method config and several initial γ, with one policy across prompts;
* the trace's rollouts are what ``ModelDrafter`` drafts; batched tails match sequential ones;
* the oracle is never beaten (random synthetic traces and latency models), equals a brute
  force, and equals the agreement oracle under the paper's cost model;
* the latency calibration recovers a known cost function from noisy timings;
* the grid CLI and the oracle table.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from methods.base import COSTS, FixedGamma, policy_needs
from methods.policies import POLICIES
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import SpeculativeRunner
from runners.engine.verify import Sampling
from runners.replay.commands import main
from runners.replay.grid import BEST_FIXED_TASK, MethodSpec, load_method, result_row
from runners.replay.oracle import AGREEMENT_ORACLE, ORACLE
from runners.replay.replay import replay, replay_job
from runners.replay.trace import (
    Trace,
    TraceTooShort,
    pack_conf,
    read_traces,
    unpack_conf,
    write_traces,
)
from runners.replay.trace_build import build_trace
from specbench.latency import ForwardCost, LatencyModel
from specbench.records import RECORD_FIELDS
from specbench.rounds import SUMMARY_FIELDS, TRACE_FIELDS, Rounds

from helpers import tiny

ROOT = Path(__file__).resolve().parents[2]
MAX_NEW = 40
GAMMAS = [1, 2, 5, 12]


def _replayable_methods() -> list[str]:
    """Every conf/method whose runner is our speculative loop (the others, AR and transformers' own loops, are
    not replayed); each must load: a broken YAML fails here instead of leaving the grid unnoticed."""
    from omegaconf import OmegaConf

    from specbench.config import MethodConfig

    out = []
    for path in sorted((ROOT / "conf" / "method").glob("*.yaml")):
        method = MethodConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
        if method.runner == "speculative":
            load_method(path.stem)
            out.append(path.stem)
    return out


METHODS = _replayable_methods()
# parameter variants that make the confidence stop, its ROC adaptation and persistence matter
VARIANTS = [
    "assistant_threshold:threshold=0.6",
    "assistant_threshold:adaptive_threshold=true",
    "assistant_threshold:adaptive_threshold=true,persist_threshold=true",
    "gammatune:transient=false",
    "gammatune:eta=0.6,delta=1,gamma_max=12",
    "gammatune_plus:threshold=0.55,transient=false",
    "gammatune_plus:expand_on=drafted",
    # the policy lab: persistence, the other bandit, other features, thresholds that fire on the tiny pair
    "banditspec:transient=false",
    "tapout:algorithm=exp3,transient=false",
    "smartspec:transient=false",
    "cost_aware:transient=false,feature=entropy",
    "adaedl:threshold=0.9",
    "logit_margin:threshold=0.6",
]


@pytest.fixture(scope="module")
def pair():
    """A sharpened tiny target and a noisy copy as draft: agreement runs of ~1-3 tokens, draft
    confidences spread over ~0.3-0.9, and an EOS that the target emits in one prompt."""
    tok = tiny.tiny_tokenizer()
    target, draft = tiny.sharp_pair(len(tok))
    texts = ("the quick brown fox", "def add(a, b):", "one two three", "a cat sat on", "translate the sentence")
    prompts = [tok.encode(t) for t in texts]
    from runners.engine.speculative import AutoregressiveRunner

    free = AutoregressiveRunner(target, []).generate(prompts[0], MAX_NEW).tokens
    k = next(i for i in range(12, MAX_NEW) if free[i] not in free[:i])
    eos = [free[k]]  # prompt 0 ends with this EOS at token k+1; other prompts may or may not
    return target, draft, prompts, eos


@pytest.fixture(scope="module")
def traces(pair):
    target, draft, prompts, eos = pair
    return [build_trace(target, draft, ids, MAX_NEW, eos, gamma_max=MAX_NEW, prompt_id=f"p{i}")
            for i, ids in enumerate(prompts)]


def test_the_fixture_exercises_what_matters(traces, pair):
    assert traces[0].stop_reason == "eos"
    assert any(tr.stop_reason == "max_new_tokens" for tr in traces)
    agree = [a for tr in traces for a in tr.agreements]
    assert 0.5 < sum(agree) / len(agree) < 6 and agree.count(0) > 10
    confs = [c for tr in traces for c in tr.draft_conf]
    assert min(confs) < 0.4 < max(confs)
    assert sum(tr.near_ties for tr in traces) == 0  # so the exact-equality test below is meaningful
    covered = {load_method(m).policy for m in METHODS + VARIANTS}
    assert covered >= set(POLICIES.names())  # every registered policy is checked against real runs
    assert {"fixed", "hf_heuristic", "assistant_threshold", "gammatune", "gammatune_plus"} <= covered
    assert {"specdecode", "hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune",
            "gammatune_plus"} <= set(METHODS)


@pytest.fixture(scope="module")
def latency_file(tmp_path_factory):
    """A latency model for the policies that read costs: given one, they decide from its predictions,
    so a real run and its replay make the same decisions (measured wall times would differ)."""
    path = tmp_path_factory.mktemp("latency") / "lat.json"
    lat = LatencyModel(ForwardCost({1: 10.0, 2: 14.0, 3: 19.0, 4: 13.0, 5: 13.5, 6: 16.0}, (9.0, 1.0), 0.0, 64,
                                   (5.0, 0.1)), ForwardCost.affine(2.0, 0.2), 0.3, 0.1)
    return str(lat.save(path))


def _with_latency(spec, latency_file):
    """``spec`` with ``latency=latency_file`` when its policy reads costs (``COSTS`` in ``needs``)."""
    if COSTS not in policy_needs(spec.build(1)):
        return spec
    return MethodSpec(spec.label, spec.policy, {**spec.params, "latency": latency_file})


def _real_job(pair, method, gamma, max_new):
    target, draft, prompts, eos = pair
    policy = method.build(gamma)
    outs = [SpeculativeRunner(target, ModelDrafter(draft, eos), policy, eos).generate(ids, max_new) for ids in prompts]
    return outs, policy


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("method", METHODS + VARIANTS)
def test_replay_equals_real_runs_exactly(pair, traces, method, gamma, latency_file):
    spec = _with_latency(load_method(method), latency_file)
    outs, real_policy = _real_job(pair, spec, gamma, MAX_NEW)
    policy = spec.build(gamma)
    replays = replay_job(traces, policy)
    for out, rep, tr in zip(outs, replays, traces):
        assert out.tokens == tr.tokens  # lossless, and the trace's target output
        assert rep.rounds.gamma == out.rounds.gamma, (tr.prompt_id, method, gamma)
        assert rep.rounds.drafted == out.rounds.drafted, (tr.prompt_id, method, gamma)
        assert rep.rounds.accepted == out.rounds.accepted, (tr.prompt_id, method, gamma)
        assert rep.new_tokens == len(out.tokens) and rep.stop_reason == out.stop_reason
        for a, b in zip(rep.rounds.confidences, out.rounds.confidences):
            assert len(a) == len(b) and all(abs(x - y) <= 1.5e-6 for x, y in zip(a, b))
    # the policies end in the same state (floats: the ROC-adapted τ is a draft confidence, equal up to rounding)
    assert _close(policy.state(), real_policy.state())


@pytest.mark.parametrize("method", METHODS + VARIANTS)
def test_a_record_and_a_replayed_row_serialise_their_rounds_alike(pair, traces, method, latency_file):
    """One record of rounds (specbench.rounds): the loop and the replay fill a ``Rounds`` from the outcome
    their policy observes, and a job's record (``runners.jobs.record``: ``gen.rounds.fields()``) and a
    replayed row (``result_row``) write it the same way: the same keys, the same values."""
    spec = _with_latency(load_method(method), latency_file)
    outs, _ = _real_job(pair, spec, 5, MAX_NEW)
    for out, rep in zip(outs, replay_job(traces, spec.build(5))):
        record, row = out.rounds.fields(), result_row(rep, method, 5, None)
        assert set(record) == set(TRACE_FIELDS + SUMMARY_FIELDS) <= set(row) and set(record) <= set(RECORD_FIELDS)
        for key in record:
            if key == "confidence_trace":  # the draft's probabilities, computed twice: equal up to float noise
                assert [len(c) for c in row[key]] == [len(c) for c in record[key]]
                assert all(abs(x - y) <= 1.5e-6 for a, b in zip(row[key], record[key]) for x, y in zip(a, b))
            else:
                assert row[key] == record[key], (method, key)
        assert Rounds.of(row).schedule == out.rounds.schedule == list(zip(*(record[k] for k in TRACE_FIELDS[:3])))


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    return a == b


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 13])
@pytest.mark.parametrize("method", ["specdecode", "hf_heuristic", "gammatune_plus"])
def test_replay_of_shorter_generations_equals_real_runs(pair, traces, method, max_new):
    spec = load_method(method)
    for gamma in (1, 4):
        outs, _ = _real_job(pair, spec, gamma, max_new)
        reps = replay_job(traces, spec.build(gamma), max_new_tokens=max_new)
        for out, rep in zip(outs, reps):
            assert (rep.rounds.gamma, rep.rounds.drafted, rep.rounds.accepted) == (
                out.rounds.gamma, out.rounds.drafted, out.rounds.accepted)
            assert rep.new_tokens == len(out.tokens)


class _NeverStop(FixedGamma):
    needs = frozenset({"confidence", "entropy", "margin"})


def test_trace_rollouts_are_what_the_drafter_drafts(pair, traces):
    """rollout(t, k) from the trace == ModelDrafter.propose from the prefix at t, for every t,
    with every feature a policy can ask for (confidence, entropy, margin)."""
    _, draft, prompts, eos = pair
    for ids, tr in list(zip(prompts, traces))[:2]:
        for t in range(1, tr.n):
            k = tr.available(t, MAX_NEW - 1 - t)
            if k == 0:
                continue
            drafter = ModelDrafter(draft, eos)
            drafter.begin(ids)
            got = drafter.propose(ids + tr.tokens[:t], k, _NeverStop(1), Sampling.of(0.0), None)
            toks, confs = tr.rollout(t, k)
            assert got.tokens == toks, (tr.prompt_id, t)
            assert len(got.confidences) == len(confs)
            assert all(abs(a - b) < 1e-5 for a, b in zip(got.confidences, confs)), (got.confidences, confs)  # fp32 noise of two forward shapes
            _, feats = tr.rollout_steps(t, k)
            assert len(got.steps) == len(feats)
            for step, f in zip(got.steps, feats):
                assert abs(step.entropy - f["entropy"]) < 1e-5 and abs(step.margin - f["margin"]) < 1e-5
            a = tr.agreement(t)
            assert toks[:a] == tr.tokens[t : t + a] and (len(toks) <= a or t + a >= tr.n or toks[a] != tr.tokens[t + a])


def test_batched_tails_match_sequential(pair, traces):
    target, draft, prompts, eos = pair
    for ids, seq in zip(prompts[:3], traces[:3]):
        bat = build_trace(target, draft, ids, MAX_NEW, eos, gamma_max=MAX_NEW, mode="batched", prompt_id=seq.prompt_id)
        assert bat.tokens == seq.tokens and bat.draft_next == seq.draft_next
        assert max(abs(a - b) for a, b in zip(bat.draft_conf, seq.draft_conf)) < 1e-5
        assert bat.tails.keys() == seq.tails.keys()
        for s, (toks, confs) in seq.tails.items():
            assert bat.tails[s][0] == toks
            assert max(abs(a - b) for a, b in zip(bat.tails[s][1], confs)) < 1e-5


def test_trace_files_round_trip_exactly(traces, tmp_path):
    path = tmp_path / "trace.jsonl"
    write_traces(path, traces)
    back = read_traces(path)
    for a, b in zip(traces, back):
        assert a.tokens == b.tokens and a.draft_next == b.draft_next and a.tails.keys() == b.tails.keys()
        assert a.draft_conf == b.draft_conf  # bit-exact through the float32 shortest repr
        assert all(a.tails[s] == b.tails[s] for s in a.tails)
    assert all(unpack_conf(pack_conf(c)) == c for tr in traces for c in tr.draft_conf)


def test_both_trace_kinds_write_and_read_one_head(traces):
    """A draft model's and prompt lookup's traces share their head (``trace_base.TraceViews``): the same
    fields, written in the same order around each kind's own, read back equal; an equal trace compares equal."""
    from runners.replay.trace_lookup import LookupTrace

    tr = dataclasses.replace(traces[0], category="coding", pair="p", task="t", near_ties=2, extra={"k": 1},
                             ar_wall_ms=12.5)
    look = LookupTrace(tr.prompt_id, tr.turn, tr.prompt_tokens, tr.max_new_tokens, tr.gamma_max, tr.eos, tr.tokens,
                       [[t] for t in tr.draft_next], category="coding", pair="p", task="t", near_ties=2,
                       extra={"k": 1}, ar_wall_ms=12.5, stop_reason=tr.stop_reason, ar_ttft_ms=tr.ar_ttft_ms,
                       target=tr.target, draft=tr.draft)
    a, b = tr.to_json(), look.to_json()
    head = [k for k in a if k in b]
    assert head == [k for k in b if k in a and k != "kind"] and b["kind"] == "prompt_lookup" and "kind" not in a
    assert {k: a[k] for k in head if k != "agreement"} == {k: b[k] for k in head if k != "agreement"}
    assert Trace.from_json(a) == tr and Trace.from_json(b) == look  # Trace.from_json reads either kind
    assert LookupTrace.from_json(b).proposals == look.proposals


def test_a_short_trace_says_so(pair):
    target, draft, prompts, eos = pair
    tr = build_trace(target, draft, prompts[1], 30, [], gamma_max=2)
    assert all(len(toks) <= 2 for toks, _ in tr.tails.values())
    replay(tr, FixedGamma(2))  # γ <= gamma_max always replays
    with pytest.raises(TraceTooShort, match="gamma-max"):
        replay(tr, FixedGamma(20))


# ----------------------------------------------------------------- latency model and calibration


def test_predicted_wall_adds_up(traces):
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.5), round_overhead_ms=0.25)
    res = replay(traces[1], FixedGamma(3), lat)
    assert res.ttft_ms == lat.target_prefill_ms(traces[1].prompt_tokens)
    assert res.wall_ms == pytest.approx(res.ttft_ms + sum(res.round_ms))
    # every round: one target forward of d+1 tokens, d draft forwards, the overhead
    drafting = [d for d in res.rounds.drafted if d]
    lo = sum(10.0 + (d + 1) + 0.25 for d in res.rounds.drafted) + sum(2.0 + 0.5 * d for d in drafting)
    assert res.wall_ms - res.ttft_ms >= lo - 1e-9


# ----------------------------------------------------------------- CLI and the oracle table

def test_grid_cli_writes_rows_and_the_oracle_table(traces, tmp_path, capsys):
    from analysis.policy_lab import load_replay, oracle_fractions, replay_table

    folder = tmp_path / "results" / "traces" / "tiny__embedded__m40__x"
    for tr in traces:
        tr.pair, tr.task = "tiny", "embedded"
    write_traces(folder / "trace.jsonl", traces)
    lat = LatencyModel.affine(target=(10.0, 0.5), draft=(2.0, 0.1), round_overhead_ms=0.2)
    lat.save(tmp_path / "lat.json")
    rc = main(["grid", str(tmp_path / "results"), "--methods", "specdecode", "hf_heuristic", "gammatune_plus:threshold=0.5",
               "--gammas", "1,2,4", "--latency", str(tmp_path / "lat.json")])
    assert rc == 0
    out = tmp_path / "results" / "replay"
    rows = [json.loads(line) for line in (out / "replay.jsonl").read_text().splitlines()]
    n = len(traces)
    assert sum(r["method"] == "specdecode" for r in rows) == 3 * n
    assert sum(r["method"] == ORACLE for r in rows) == n and sum(r["method"] == AGREEMENT_ORACLE for r in rows) == n
    assert sum(r["method"] == BEST_FIXED_TASK for r in rows) == n
    assert {"pair", "method", "gamma_init", "prompt_id", "new_tokens", "rounds", "drafted", "accepted",
            "acceptance_rate", "gamma_trace", "tokens_per_s"} <= set(rows[0])
    assert (out / "replay.csv").exists()
    from analysis.make_artefacts import (
        main as analysis_main,  # the simulator writes rows; analysis renders them
    )

    assert analysis_main([str(out)]) == 0
    assert (out / "analysis" / "tables" / "replay_oracle.md").exists()
    assert "× oracle" in capsys.readouterr().out
    frac = oracle_fractions(load_replay(tmp_path / "results"))
    real = frac[~frac["method"].isin([ORACLE])]
    assert (real["x_oracle"] <= 1 + 1e-9).all()
    assert (frac.loc[frac["method"] == "specdecode", "x_best_fixed_prompt"] <= 1 + 1e-9).all()
    table = replay_table(tmp_path / "results")
    assert table is not None and "gammatune_plus:threshold=0.5" in set(table.display["method"])
    assert replay_table(tmp_path / "nothing") is None and replay_table(None) is None


def test_paper_cost_model_grid_needs_no_calibration(traces, tmp_path):
    write_traces(tmp_path / "t" / "trace.jsonl", traces[:2])
    assert main(["grid", str(tmp_path / "t"), "--methods", "gammatune", "--gammas", "1-3", "--cost-ratio", "4",
                 "--out", str(tmp_path / "o")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "o" / "replay.jsonl").read_text().splitlines()]
    assert {r["gamma_init"] for r in rows if r["method"] == "gammatune"} == {1, 2, 3}


def test_unreplayable_methods_are_refused():
    from specbench.registry import ConfigError

    for name in ("ar", "slem", "hf_native_heuristic", "nonexistent"):
        with pytest.raises(ConfigError):
            load_method(name)
    assert load_method("gammatune:eta=0.5").params["eta"] == 0.5


# ----------------------------------------------------------------- jobs → traces → replay, end to end

@pytest.mark.slow
def test_recorded_jobs_are_replayed_exactly(pair, tmp_path):
    """``run_job`` (warm-up, policy reset, prompt order, tokenisation) → ``python -m runners.replay trace
    --results`` → ``replay_job``: the replayed rounds are the recorded ones."""
    from omegaconf import OmegaConf

    from runners.jobs.job import run_job

    from helpers import compose, saved_pair_config

    target, draft, _, _ = pair
    tok = tiny.tiny_tokenizer()
    tiny_pair = saved_pair_config(tok, target, draft, tmp_path)
    results = tmp_path / "results"
    jobs = [("gammatune", 3), ("hf_heuristic", 2), ("assistant_threshold", 4), ("gammatune_plus", 1)]
    for method, gamma in jobs:
        cfg = compose(f"method={method}", f"gamma={gamma}", "task.n_prompts=4", "max_new_tokens=24",
                      "warmup=1", "logger=none")
        cfg.pair = OmegaConf.create(tiny_pair)
        run_job(cfg, results / f"{method}-{gamma}", progress=False)
    assert main(["trace", "--results", str(results), "--gamma-max", "24"]) == 0
    files = list((results / "traces").rglob("trace.jsonl"))
    assert len(files) == 1  # one pair × task × length, whatever the methods
    traces = read_traces(files[0])
    assert len(traces) == 4
    for method, gamma in jobs:
        records = [json.loads(line) for line in (results / f"{method}-{gamma}" / "records.jsonl").read_text().splitlines()]
        reps = replay_job(traces, load_method(method).build(gamma))
        assert [r["prompt_id"] for r in records] == [t.prompt_id for t in traces]
        for rec, rep in zip(records, reps):
            assert rec["new_tokens"] == rep.new_tokens
            assert (rec["gamma_trace"], rec["drafted_trace"], rec["accepted_trace"]) == (
                rep.rounds.gamma, rep.rounds.drafted, rep.rounds.accepted), (method, gamma, rec["prompt_id"])
    assert main(["grid", str(results), "--methods", "gammatune", "--gammas", "3", "--cost-ratio", "5"]) == 0
    rows = [json.loads(line) for line in (results / "replay" / "replay.jsonl").read_text().splitlines()]
    replayed = [r for r in rows if r["method"] == "gammatune"]
    recorded = [json.loads(line) for line in (results / "gammatune-3" / "records.jsonl").read_text().splitlines()]
    assert [r["accepted_trace"] for r in replayed] == [r["accepted_trace"] for r in recorded]
    assert {r["pair"] for r in rows} == {"tiny"}


def test_chunk_dependent_drafts_are_traced_sequentially(pair):
    """torch's dynamic int8 quantization scales a Linear's input per tensor: batching changes outputs."""
    from runners.replay.trace_build import chunk_invariant

    target, draft, prompts, eos = pair
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao deprecation notices
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(draft), {torch.nn.Linear}, dtype=torch.qint8)
    assert chunk_invariant(draft) and not chunk_invariant(q)
    tr = build_trace(target, q, prompts[2], 16, eos, gamma_max=8, mode="batched")
    assert tr.extra["mode"] == "sequential"


