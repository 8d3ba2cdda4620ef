"""The γ-policy lab (issue 14): the policy interface, the field's policies, ours, lookup traces,
per-position acceptance.

* the drafter computes only the features a policy asks for; steps are typed and positioned;
  γ = 0 is a plain target step;
* each stopper's formula at its boundary; the bandits' choices; SmartSpec's argmax; the cost-aware
  policy's optimal stopping against an exact enumeration, its use of the cost table, γ = 0;
* default traces never refuse a policy; version-1 traces are refused with a way out; prompt
  lookup traces replay real runs exactly.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from methods.adaedl import AdaEDL
from methods.bandits import EXP3, UCB1
from methods.banditspec import BanditSpec
from methods.base import COSTS, DraftStep, FixedGamma, RoundOutcome, policy_needs
from methods.cost_aware import GRID, CostAware
from methods.costs import CostModel
from methods.logit_margin import LogitMargin
from methods.max_confidence import MaxConfidence
from methods.registry import build_policy
from methods.smartspec import SmartSpec, expected_tokens
from methods.svip import SVIP
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.replay.grid import MethodSpec, load_method
from runners.replay.oracle import PEEK, ScriptedPolicy
from runners.replay.replay import replay, replay_job
from runners.replay.trace import Trace, read_traces, write_traces
from runners.replay.trace_build import build_trace
from runners.replay.trace_lookup import LookupTrace, build_lookup_trace
from specbench.latency import ForwardCost, LatencyModel
from specbench.rounds import per_position

LAB = ["adaedl", "svip", "max_confidence", "logit_margin", "tapout", "banditspec", "banditspec_exp3", "smartspec",
       "cost_aware"]


def step(**features) -> DraftStep:
    return DraftStep(1, **features)


def latency_json(tmp_path, table: dict[int, float], draft: float, overhead: float = 0.0) -> str:
    lat = LatencyModel(ForwardCost(table, (table[max(table)], 0.0), 0.0, 64, (5.0, 0.1)),
                       ForwardCost({1: draft}, (draft, 0.0), 0.0, 64, (1.0, 0.0)), overhead, 0.0)
    return str(lat.save(tmp_path / "lat.json"))


# --------------------------------------------------------------------------- the interface


class _Recorder(FixedGamma):
    def __init__(self, gamma, needs):
        super().__init__(gamma)
        self.needs = frozenset(needs)
        self.steps: list[DraftStep] = []
        self.outcomes: list[RoundOutcome] = []

    def stop_drafting(self, s):
        self.steps.append(s)
        return False

    def observe(self, outcome):
        self.outcomes.append(outcome)


def test_features_are_computed_only_when_asked(noisy_pair, monkeypatch):
    from runners.engine import features

    _, target, draft, prompts = noisy_pair
    with monkeypatch.context() as m:  # no feature asked: no softmax at all
        m.setattr(torch, "softmax", lambda *a, **k: (_ for _ in ()).throw(AssertionError("softmax computed")))
        assert features.draft_features(torch.zeros(5), 1, ()) == {}
    for needs in ((), ("entropy",), ("confidence", "margin"), ("confidence", "entropy", "margin", COSTS)):
        policy = _Recorder(4, needs)
        out = SpeculativeRunner(target, ModelDrafter(draft, []), policy, []).generate(prompts[0], 24)
        assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[0], 24).tokens
        assert policy.steps and all(s.budget >= s.position >= 1 for s in policy.steps)
        for name in ("confidence", "entropy", "margin"):
            assert all((getattr(s, name) is not None) == (name in needs) for s in policy.steps), (needs, name)
        assert bool(out.rounds.confidences[0]) == ("confidence" in needs)  # records hold what was computed
        timed = [o.round_ms is not None for o in policy.outcomes]
        assert all(timed) if COSTS in needs else not any(timed)
        for o in policy.outcomes:
            assert len(o.steps) == o.drafted and [s.position for s in o.steps] == list(range(1, o.drafted + 1))
            if COSTS in needs:
                assert 0 < o.draft_ms + o.verify_ms <= o.round_ms
    s = policy.steps[0]
    assert 0 < s.confidence <= 1 and s.entropy >= 0 and 0 <= s.margin <= s.confidence


def test_gamma_zero_is_a_plain_target_step(noisy_pair):
    _, target, draft, prompts = noisy_pair
    policy = ScriptedPolicy([0, 0, 3, 0, 5] + [2] * 40)
    out = SpeculativeRunner(target, ModelDrafter(draft, []), policy, []).generate(prompts[1], 30)
    assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[1], 30).tokens
    assert out.rounds.gamma[:5] == [0, 0, 3, 0, 5] and out.rounds.drafted[0] == out.rounds.drafted[1] == 0
    assert out.rounds.accepted[0] == 0


def test_a_peek_drafts_one_token_and_verifies_none_in_real_runs_and_replay(noisy_pair):
    _, target, draft, prompts = noisy_pair
    script = [PEEK, 3, PEEK, 0, 2, PEEK] * 10
    out = SpeculativeRunner(target, ModelDrafter(draft, []), ScriptedPolicy(script), []).generate(prompts[2], 30)
    assert out.tokens == AutoregressiveRunner(target, []).generate(prompts[2], 30).tokens
    assert out.rounds.drafted[:4] == [0, out.rounds.drafted[1], 0, 0] and out.rounds.discarded[:4] == [1, 0, 1, 0]
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.5), round_overhead_ms=0.25)
    tr = build_trace(target, draft, prompts[2], 30, [])
    rep = replay(tr, ScriptedPolicy(script), lat)
    assert (rep.rounds.drafted, rep.rounds.accepted, rep.rounds.discarded) == (
        out.rounds.drafted, out.rounds.accepted, out.rounds.discarded)
    # a peek costs its draft forward and a one-token verification
    assert rep.round_ms[0] == pytest.approx(lat.draft_ms(tr.prompt_tokens + 1, 0) + lat.verify_ms(1, tr.prompt_tokens)
                                            + 0.25)


def test_cost_aware_peeks_at_an_unlikely_first_token(tmp_path):
    table = {1: 70.0, 2: 130.0, 3: 187.0, 4: 123.0, 5: 120.0, 6: 134.0}
    rates = {0.97: 0.97, 0.98: 0.97, 0.995: 0.98, 0.3: 0.25}
    p = _trained(tmp_path, table, 12.0, rates, gamma_max=5)
    p.begin_prompt()  # a fresh regime: the first token's bucket follows the overall frequencies
    assert p.next_gamma() == 5  # the first token is worth a look (one draft forward)
    assert p.stop_drafting(DraftStep(1, confidence=0.3, budget=5)) and p.verify_count(1) == 0  # a peek
    assert p.next_gamma() == 5
    assert not p.stop_drafting(DraftStep(1, confidence=0.97, budget=5)) and p.verify_count(3) == 3
    off = _trained(tmp_path, table, 12.0, rates, gamma_max=5, peek=False)
    off.begin_prompt()
    off.next_gamma()
    off.stop_drafting(DraftStep(1, confidence=0.3, budget=5))
    assert off.verify_count(1) == 1


def test_per_position_counts_hand_checked():
    pp = per_position([3, 0, 2, 4], [1, 0, 2, 4])
    assert pp == {"drafted_per_pos": [3, 3, 2, 1], "compared_per_pos": [3, 3, 1, 1], "accepted_per_pos": [3, 2, 1, 1]}
    assert per_position([], []) == {"drafted_per_pos": [], "compared_per_pos": [], "accepted_per_pos": []}


# --------------------------------------------------------------------------- the field's stoppers


def test_stoppers_fire_exactly_at_their_boundaries():
    ada = AdaEDL(8)  # 1 - sqrt(0.2 H) < 0.7  <=>  H > 0.45
    assert not ada.stop_drafting(step(entropy=0.4499)) and ada.stop_drafting(step(entropy=0.4501))
    assert ada.lower_bound(step(entropy=0.45)) == pytest.approx(0.7)
    svip = SVIP(8)  # sqrt(H) > 0.5  <=>  H > 0.25
    assert not svip.stop_drafting(step(entropy=0.2499)) and svip.stop_drafting(step(entropy=0.2501))
    mc = MaxConfidence(8)
    assert mc.stop_drafting(step(confidence=0.4999)) and not mc.stop_drafting(step(confidence=0.5))
    lm = LogitMargin(8)
    assert lm.stop_drafting(step(margin=0.2999)) and not lm.stop_drafting(step(margin=0.3))
    for p in (ada, svip, mc, lm):  # a drafter without features (prompt lookup) never triggers a stop
        assert not p.stop_drafting(DraftStep(3)) and p.next_gamma() == 8 and p.needs


def test_ucb1_plays_each_arm_then_the_best_and_exp3_is_a_function_of_its_seed():
    ucb = UCB1(3, c=0.2)
    means = [0.2, 0.9, 0.5]
    order = []
    for _ in range(60):
        arm = ucb.choose()
        order.append(arm)
        ucb.update(arm, means[arm])
    assert order[:3] == [0, 1, 2] and order[-20:].count(1) == 20
    runs = []
    for _ in range(2):
        e = EXP3(4, horizon=50, seed=7)
        seq = []
        for i in range(30):
            arm = e.choose()
            seq.append(arm)
            e.update(arm, [0.1, 0.2, 0.9, 0.3][arm] * (i % 2 + 0.5) / 1.5)
        runs.append(seq)
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def _simulate(policy, rounds: int, accept, cost):
    """Drive a policy with ``accepted = accept(γ)`` and a cost per drafted length (no model)."""
    for _ in range(rounds):
        g = policy.next_gamma()
        a = accept(g)
        policy.observe(RoundOutcome(g, g, a, (), False, (), 0.0, cost(g), cost(g)))
    return policy


def test_banditspec_starts_at_the_initial_gamma_and_finds_the_best_arm(tmp_path):
    lat = latency_json(tmp_path, {k: 10.0 for k in range(1, 12)}, 1.0)
    p = BanditSpec(12, arms=[1, 2, 4, 8], c=0.3, latency=lat)
    assert p.arms == [12, 1, 2, 4, 8] and p.next_gamma() == 12
    # accepted = min(γ, 4): tokens/ms = (min(γ, 4) + 1) / (10 + γ) is best at γ = 4
    _simulate(p, 200, lambda g: min(g, 4), lambda g: 10.0 + g)
    counts = dict(zip(p.arms, p.bandit.counts))
    assert max(counts, key=counts.get) == 4
    assert build_policy("banditspec", 3, {"algorithm": "exp3"}).bandit.__class__ is EXP3


def test_smartspec_maximises_predicted_goodput_and_can_step_plainly(tmp_path):
    table = {1: 10.0, 2: 16.0, 3: 30.0, 4: 14.0, 5: 15.0, 6: 40.0, 7: 17.0, 8: 18.0, 9: 19.0}
    p = SmartSpec(3, latency=latency_json(tmp_path, table, 1.0, 0.5))
    assert p.next_gamma() == 3  # the first round plays the initial γ
    p.observe(RoundOutcome(3, 3, 2))
    alpha = 2 / 3
    want = max(range(9), key=lambda k: (expected_tokens(alpha, k) / (k + table[k + 1] + 0.5), -k))
    assert p.alpha == pytest.approx(alpha) and p.next_gamma() == want
    assert expected_tokens(1.0, 4) == 5 and expected_tokens(0.0, 4) == 1
    for _ in range(8):  # nothing is ever accepted: speculation does not pay, γ = 0 ...
        p.observe(RoundOutcome(4, 4, 0))
    assert p.next_gamma() == 0
    for _ in range(p.probe):
        p.observe(RoundOutcome(0, 0, 0))
    assert p.next_gamma() >= 1  # ... until a probe round after `probe` plain steps


# --------------------------------------------------------------------------- ours


def _trained(tmp_path, table, draft_ms, acc_by_conf, n=400, **kw) -> CostAware:
    """A cost-aware policy whose acceptance model has seen ``n`` rounds of 1-token drafts per bucket
    (carried over: ``transient=False``, so a new prompt keeps what it learnt)."""
    p = CostAware(4, latency=latency_json(tmp_path, table, draft_ms), **{"transient": False, **kw})
    for conf, rate in acc_by_conf.items():
        for i in range(n):
            acc = int(i < rate * n)
            p.observe(RoundOutcome(1, 1, acc, (conf,), False, (DraftStep(1, confidence=conf),)))
    return p


def _exact_value(model: dict, costs: CostModel, horizon: int, s: float, b: int, j: int, rho: float) -> float:
    """Optimal stopping value by enumerating every future bucket sequence (no grid)."""
    a, t = model["a"], model["T"]
    stop = -rho * costs.verify(j + 1)
    if j >= horizon:
        return stop
    cont = sum(t[b, b2] * (s * a[b2] - rho * costs.draft + _exact_value(model, costs, horizon, s * a[b2], b2, j + 1, rho))
               for b2 in range(len(a)))
    return max(stop, cont)


def test_cost_aware_stopping_matches_exact_enumeration(tmp_path):
    table = {1: 10.0, 2: 14.0, 3: 22.0, 4: 15.0, 5: 16.0}
    p = _trained(tmp_path, table, 2.0, {0.95: 0.9, 0.55: 0.5, 0.15: 0.1}, n=60)
    horizon, rho = 3, p.rho
    plan = p._plan_round(horizon)
    model = plan["model"]
    hi, mid, lo = (int(model["k_of"][p.bucket(DraftStep(1, confidence=c))]) for c in (0.95, 0.55, 0.15))
    assert hi > mid > lo
    a, t = model["a"], model["T"]
    for j, (b, s) in itertools.product(range(1, horizon), [(hi, 1.0), (mid, 0.5), (lo, 0.08), (hi, 0.3)]):
        exact = sum(t[b, b2] * (s * a[b2] - rho * p.costs.draft + _exact_value(model, p.costs, horizon, s * a[b2], b2,
                                                                                j + 1, rho)) for b2 in range(len(a)))
        got = float(np.interp(s, GRID, plan["cont"][j][:, b]))
        assert got == pytest.approx(exact, rel=0.01, abs=1e-3 * rho * table[1]), (j, b, s)


def test_cost_aware_drafts_through_a_dear_shape_to_a_cheap_one(tmp_path):
    # verifying 3 tokens costs 40 ms, 4 tokens 12: after 2 drafted tokens, one more is cheaper than stopping
    table = {1: 10.0, 2: 20.0, 3: 40.0, 4: 12.0, 5: 12.5, 6: 60.0, 7: 60.0}
    p = _trained(tmp_path, table, 1.0, {0.97: 0.97, 0.5: 0.5}, gamma_max=6)
    assert p.next_gamma() == 6
    stops = []
    for i in range(1, 7):
        stops.append(p.stop_drafting(DraftStep(i, confidence=0.97, budget=6)))
        if stops[-1]:
            break
    # stops after 4 tokens (verify 5: cheap), never after 2 (verify 3: dear) nor 5-6 (verify 6-7: dear)
    assert stops == [False, False, False, True]


def test_cost_aware_steps_plainly_when_drafting_cannot_pay(tmp_path):
    table = {1: 10.0, 2: 30.0, 3: 31.0, 4: 32.0}
    p = _trained(tmp_path, table, 5.0, {0.05: 0.02, 0.15: 0.05})
    assert p.next_gamma() == 0
    cheap = _trained(tmp_path, {1: 10.0, 2: 10.5, 3: 11.0, 4: 11.5}, 0.5, {0.97: 0.95})
    assert cheap.next_gamma() == cheap.gamma_max


@pytest.mark.parametrize("draft_ms", [0.0, 0.8])
def test_cost_aware_without_features_plans_by_position(tmp_path, draft_ms):
    table = {k: 10.0 + (0.5 * k if k != 3 else 20.0) for k in range(1, 34)}
    p = CostAware(2, latency=latency_json(tmp_path, table, draft_ms))
    assert p.next_gamma() == 2
    rng = np.random.default_rng(0)
    for _ in range(200):  # positions: 1st accepted 80 %, then 60 %
        d = 6
        acc = 0
        while acc < d and rng.random() < (0.8 if acc == 0 else 0.6):
            acc += 1
        p.observe(RoundOutcome(d, d, acc))
    assert p.featured is False
    surv = np.cumprod(p.position_acceptance(p.kind, p.gamma_max))

    def best(limit):
        return max(range(limit + 1), key=lambda d: np.sum(surv[:d]) - p.rho * (d * draft_ms + table[d + 1]))

    if draft_ms == 0:  # free proposals (prompt lookup): take the longest, verify the best prefix of it
        assert p.next_gamma() == p.gamma_max
        assert [p.verify_count(n) for n in (1, 2, 5, 9)] == [best(n) for n in (1, 2, 5, 9)]
        assert p.verify_count(2) != 2  # verifying 3 tokens is the dear shape
    else:
        assert p.next_gamma() == best(p.gamma_max) != 2 and p.verify_count(7) == 7


# --------------------------------------------------------------------------- configs


# --------------------------------------------------------------------------- traces


def test_default_traces_never_refuse_a_policy(noisy_pair):
    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 30, [], prompt_id=str(i)) for i, ids in enumerate(prompts)]
    assert all(tr.gamma_max == 29 for tr in traces)
    for gamma in (29, 100):  # any γ: a round drafts at most remaining − 1 tokens, and the trace holds them
        reps = replay_job(traces, FixedGamma(gamma))
        assert max(d for r in reps for d in r.rounds.drafted) > 20
    replay_job(traces, build_policy("hf_heuristic", 60, {"transient": False}))  # γ = 39 was refused with 32
    for name in ("banditspec", "smartspec", "cost_aware", "tapout"):
        replay_job(traces, build_policy(name, 24, {"transient": False}))


def test_old_traces_are_refused_with_the_command_that_rebuilds_them(noisy_pair, tmp_path):
    _, target, draft, prompts = noisy_pair
    tr = build_trace(target, draft, prompts[0], 8, [])
    assert tr.draft_entropy is not None and len(tr.draft_margin) == tr.n - 1
    obj = tr.to_json()
    obj["trace_version"] = 1
    (tmp_path / "trace.jsonl").write_text(json.dumps(obj) + "\n")
    with pytest.raises(ValueError, match=r"older than .*python -m runners.replay trace"):
        read_traces(tmp_path / "trace.jsonl")


@pytest.mark.slow
def test_lookup_traces_replay_real_runs_exactly(noisy_pair, tmp_path):
    _, target, _, prompts = noisy_pair
    drafter = PromptLookupDrafter(eos_token_ids=[])
    traces = [build_lookup_trace(target, drafter, ids, 36, [], prompt_id=str(i)) for i, ids in enumerate(prompts)]
    write_traces(tmp_path / "trace.jsonl", traces)
    back = read_traces(tmp_path / "trace.jsonl")
    assert all(isinstance(t, LookupTrace) and t.proposals == s.proposals for t, s in zip(back, traces))
    assert sum(t.agreements.count(0) < len(t.agreements) for t in traces) >= 2  # the lookups do match
    lat = latency_json(tmp_path, {k: 10.0 + k for k in range(1, 40)}, 0.0)
    methods = ["specdecode", "hf_heuristic", "gammatune", "smartspec", "cost_aware", "banditspec"]
    drafted = 0
    for name, gamma in itertools.product(methods, (1, 4, 12)):
        spec = load_method(name)
        if COSTS in policy_needs(spec.build(gamma)):
            spec = MethodSpec(name, spec.policy, {**spec.params, "latency": lat})
        real_policy, policy = spec.build(gamma), spec.build(gamma)
        reps = replay_job(back, policy)
        for ids, rep in zip(prompts, reps):
            out = SpeculativeRunner(target, drafter, real_policy, []).generate(ids, 36)
            assert (out.rounds.gamma, out.rounds.drafted, out.rounds.accepted) == (
                rep.rounds.gamma, rep.rounds.drafted, rep.rounds.accepted), (name, gamma)
            assert out.tokens == rep.trace.tokens
            drafted += sum(out.rounds.drafted)
    assert drafted > 0


def test_a_trace_can_reuse_another_pairs_target_output(noisy_pair):
    _, target, draft, prompts = noisy_pair
    model = build_trace(target, draft, prompts[0], 20, [])
    lookup = build_lookup_trace(None, PromptLookupDrafter(), prompts[0], 20, [], reuse=model)  # no target needed
    assert lookup.tokens == model.tokens and lookup.ar_wall_ms == model.ar_wall_ms
    again = build_trace(None, draft, prompts[0], 20, [], reuse=lookup)
    assert again.draft_next == model.draft_next and again.tails.keys() == model.tails.keys()
    with pytest.raises(ValueError, match="another prompt"):
        build_trace(None, draft, prompts[1], 20, [], reuse=model)


def test_lookup_trace_oracle_is_never_beaten(noisy_pair):
    from runners.replay.oracle import agreement_oracle, oracle

    _, target, _, prompts = noisy_pair
    tr = build_lookup_trace(target, PromptLookupDrafter(), prompts[2], 30, [])
    lat = LatencyModel(ForwardCost({k: 10.0 + (15.0 if k == 3 else k) for k in range(1, 31)}, (10.0, 1.0), 0.0, 64,
                                   (5.0, 0.1)), ForwardCost.affine(0.0, 0.0, prefill=(0.0, 0.0)), 0.5, 0.1)
    best = oracle(tr, lat).wall_ms
    assert best <= agreement_oracle(tr, lat).wall_ms + 1e-9
    for name, g in itertools.product(["specdecode", "hf_heuristic", "cost_aware", "smartspec"], (1, 3, 8)):
        assert best <= replay(tr, build_policy(load_method(name).policy, g), lat).wall_ms + 1e-9


def test_cost_model_reads_the_calibrate_json(tmp_path):
    lat = LatencyModel(ForwardCost({1: 70.0, 2: 130.0, 3: 187.0, 4: 123.0}, (100.0, 2.0), 0.01, 128, (40.0, 0.5)),
                       ForwardCost({1: 12.4, 2: 14.0}, (11.0, 1.5), 0.001, 128, (8.0, 0.1)), 2.4, 1.0)
    path = lat.save(tmp_path / "l.json")
    costs = CostModel.from_latency_file(path)
    for k in (1, 2, 3, 4, 9):
        assert costs.verify(k) == pytest.approx(lat.verify_ms(k, 128))
    assert costs.draft == pytest.approx(lat.draft_ms(1, 128)) and costs.overhead == 2.4
    assert costs.round(3) == pytest.approx(3 * 12.4 + 123.0 + 2.4)
    online = CostModel.online_model()
    online.observe(RoundOutcome(3, 3, 1, draft_ms=30.0, verify_ms=100.0, round_ms=133.0))
    assert online.verify(4) == 100.0 and online.verify(9) == 100.0 and online.draft == 10.0 and online.overhead == 3.0
    with pytest.raises(ValueError, match="calibrate"):
        CostModel.from_latency_file(tmp_path / "missing.json")
    assert math.isfinite(CostModel.paper().round(0))


def test_adapted_costs_learn_the_machines_clock_from_the_calibrated_shape(tmp_path):
    """``adapt``: the table corrected by measured ÷ table ratios — per verified length, shrunk to the
    global ratio (the host's drift), which also prices a length never verified; draft tokens alike."""
    lat = LatencyModel(ForwardCost({1: 100.0, 5: 300.0, 9: 400.0}, (100.0, 30.0), 0.0, 128, (40.0, 0.5)),
                       ForwardCost({1: 60.0}, (60.0, 0.0), 0.0, 128, (8.0, 0.1)), 2.0, 1.0)
    path = lat.save(tmp_path / "l.json")
    adapted = CostModel.build(str(path), adapt=True)
    assert adapted.verify(9) == 400.0 and adapted.draft_cost == 60.0  # nothing measured: the table
    for _ in range(20):  # the engine pays 0.75 of the table for 9 tokens, 0.6 of its draft forward
        adapted.observe(RoundOutcome(8, 8, 3, draft_ms=8 * 36.0, verify_ms=300.0, round_ms=590.0))
    assert adapted.verify(9) == pytest.approx(300.0, rel=0.01)
    assert adapted.verify(5) == pytest.approx(0.75 * 300.0, rel=0.01)  # never verified: the global ratio
    assert adapted.draft_cost == pytest.approx(36.0) and adapted.round(8) == pytest.approx(8 * 36 + 300 + 2, rel=0.01)
    for _ in range(3):  # 5 tokens measured at the table's cost: its own ratio, shrunk to the global one
        adapted.observe(RoundOutcome(4, 4, 4, draft_ms=4 * 36.0, verify_ms=300.0, round_ms=446.0))
    assert 0.75 * 300.0 < adapted.verify(5) < 300.0
    plain = CostModel.build(str(path))
    plain.observe(RoundOutcome(8, 8, 3, draft_ms=8 * 36.0, verify_ms=300.0, round_ms=590.0))
    assert plain.verify(9) == 400.0 and plain.state()["cost_source"] == "table"
    assert adapted.state()["cost_source"] == "table, adapted"
    with pytest.raises(ValueError, match="latency"):
        CostModel.build(None, adapt=True)
    with pytest.raises(ValueError, match="latency"):
        CostAware(4, adapt_costs=True)
    # a prompt's first round also feeds the prompt to the draft: its draft time teaches nothing per token
    policy = CostAware(4, transient=False, latency=str(path), adapt_costs=True)
    policy.begin_prompt()
    policy.observe(RoundOutcome(4, 4, 4, draft_ms=4 * 60.0 + 900.0, verify_ms=300.0, round_ms=1500.0))
    assert policy.costs.draft_cost == 60.0
    policy.observe(RoundOutcome(4, 3, 1, draft_ms=3 * 30.0 + 30.0, verify_ms=150.0, round_ms=300.0, discarded=1))
    assert policy.costs.draft_cost == pytest.approx(30.0)  # 4 proposed (3 verified, 1 discarded) at 30 ms


def test_adapted_cost_aware_replays_as_the_calibrated_one(noisy_pair, tmp_path):
    """In a replay the measured costs are the latency model's own (no per-context slope here): every
    ratio is 1, so ``adapt_costs=true`` makes the calibrated policy's decisions, round for round."""
    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 24, [], prompt_id=str(i)) for i, ids in enumerate(prompts)]
    lat = LatencyModel.affine(target=(40.0, 6.0), draft=(12.0, 0.0), round_overhead_ms=1.0)
    path = str(lat.save(tmp_path / "lat.json"))
    for g in (2, 6):
        rows = {}
        for adapt in (False, True):
            policy = CostAware(g, transient=False, latency=path, adapt_costs=adapt)
            reps = replay_job(traces, policy, lat)
            rows[adapt] = [(p.rounds.drafted, p.rounds.accepted) for p in reps]
        assert rows[True] == rows[False]


def test_trace_json_keeps_every_feature_bit_exact(noisy_pair, tmp_path):
    _, target, draft, prompts = noisy_pair
    tr = build_trace(target, draft, prompts[3], 20, [])
    write_traces(tmp_path / "t.jsonl", [tr])
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert isinstance(back, Trace) and back.draft_entropy == tr.draft_entropy and back.draft_margin == tr.draft_margin
    assert back.tail_features == tr.tail_features and tr.tail_features.keys() == tr.tails.keys()


# --------------------------------------------------------------------------- analysis


def test_one_leviathan_prediction_with_the_gammatune_c(tmp_path):
    """The leaderboard's prediction is records' one definition with c = T_target / T_draft (GammaTune eq. 1)."""
    from analysis.leviathan import leviathan_frame, load_cost_ratios
    from specbench.records import leviathan_speedup

    assert leviathan_speedup(0.8, 4, 10.0) == pytest.approx((1 - 0.8**5) / 0.2 / 1.4)  # the primer's 3.36 / 1.4
    assert leviathan_speedup(1.0, 3, math.inf) == 4.0  # a drafter that costs nothing: tokens per round
    lat = tmp_path / "latency"
    lat.mkdir()
    model = {"latency_version": 1, "meta": {"pair": "p"},
             "target": {"step_ms": {"1": 50.0}}, "draft": {"step_ms": {"1": 5.0}}}
    (lat / "p.json").write_text(json.dumps(model))
    (lat / "lookup.json").write_text(json.dumps({**model, "meta": {"pair": "lookup"}, "draft": {"step_ms": {"1": 0.0}}}))
    costs = load_cost_ratios(tmp_path)
    assert costs == {"p": 10.0, "lookup": math.inf}
    df = pd.DataFrame([{"pair": pair, "task": "t", "method": "specdecode", "gamma_init": 4, "wall_ms": 10.0,
                        "ar_wall_ms": 20.0, "accepted": 7, "drafted": 12, "drafted_trace": [4, 4, 4, 2],
                        "accepted_trace": [4, 1, 2, 2]} for pair in ("p", "lookup")])
    frame = leviathan_frame(df, costs).set_index("pair")
    alpha = 7 / (7 + 2)  # full rounds only: 7 accepted, 2 rounds ending in a rejection
    assert frame.loc["p", "alpha"] == pytest.approx(alpha)
    assert frame.loc["p", "leviathan_speedup"] == pytest.approx((1 - alpha**5) / (1 - alpha) / (4 / 10 + 1))
    assert frame.loc["lookup", "leviathan_speedup"] == pytest.approx((1 - alpha**5) / (1 - alpha))


def _lab_script(root):
    from runners.replay import lab

    return lab


def test_leaderboard_from_cells_equals_leaderboard_from_rows(noisy_pair, tmp_path, root):
    from analysis.cli import main as analysis_main
    from analysis.leviathan import leviathan_frame
    from analysis.policy_lab import leaderboard, load_replay
    from runners.replay.grid import cells, replay_grid

    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 24, [], prompt_id=str(i), pair="tiny", task="t") for i, ids in
              enumerate(prompts)]
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.3), round_overhead_ms=0.2)
    lab = _lab_script(root)
    methods = [lab.method_spec(m, None) for m in ("specdecode", "hf_heuristic", "cost_aware")]
    rows = replay_grid(traces, methods, [1, 3, 6], lat)
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "replay.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells(rows)))
    by_rows, by_cells = leaderboard(load_replay(tmp_path / "rows")), leaderboard(load_replay(tmp_path / "cells"))
    cols = ["method", "x_oracle_mean", "x_best_fixed_mean", "x_best_fixed_prompt_mean", "worst_gamma", "x_oracle_spread"]
    pd_rows = by_rows.data[cols].sort_values("method").reset_index(drop=True)
    pd_cells = by_cells.data[cols].sort_values("method").reset_index(drop=True)
    assert list(pd_rows["method"]) == list(pd_cells["method"])
    assert np.allclose(pd_rows.iloc[:, 1:].astype(float), pd_cells.iloc[:, 1:].astype(float), equal_nan=True)
    board = by_cells.data
    assert list(board["method"][:4]) == ["oracle", "oracle_agreement", "best_fixed_task", "best_fixed_prompt"]
    assert (board["x_oracle_mean"] <= 1 + 1e-9).all()
    spec = board[board["method"] == "specdecode"].iloc[0]
    assert spec["worst_gamma"] in (1, 3, 6) and spec["x_oracle_spread"] > 0
    lev_rows = leviathan_frame(load_replay(tmp_path / "rows"), {"tiny": 5.0})
    lev_cells = leviathan_frame(load_replay(tmp_path / "cells"), {"tiny": 5.0})
    assert np.allclose(lev_rows["alpha"], lev_cells["alpha"]) and (lev_rows["gamma"] == [1, 3, 6]).all()
    assert analysis_main([str(tmp_path / "cells"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "tables" / "policy_leaderboard.md").exists()
    assert (tmp_path / "out" / "figures" / "policy_leaderboard.png").exists()


def test_real_runs_are_ranked_against_the_best_fixed_gamma_measured_for_real(root):
    from runners.replay.compare import real_vs_best_fixed
    df = pd.DataFrame([
        {"pair": "p", "task": "t", "method": m, "method_config": mc, "gamma_init": g, "real_tokens_per_s": tps,
         "real_over_replayed": 1.0}
        for m, mc, g, tps in (("specdecode", "specdecode", 2, 10.0), ("specdecode", "specdecode", 4, 12.0),
                              ("cost_aware", "cost_aware", 2, 13.0), ("cost_aware", "cost_aware", 4, 14.0),
                              ("cost_aware", "cost_aware:transient=false", 2, 15.0))])
    per = real_vs_best_fixed(df).set_index("method_config")
    assert per.loc["specdecode", "x_best_fixed_real"] == pytest.approx(11.0 / 12.0)
    assert per.loc["cost_aware", "x_best_fixed_real"] == pytest.approx(13.5 / 12.0)
    assert per.loc["cost_aware:transient=false", "gammas"] == "2"
    assert real_vs_best_fixed(df[df["method"] != "specdecode"]).empty


def test_lab_traces_and_confirm_compose_valid_jobs(root, tmp_path, monkeypatch):
    """``python -m runners.replay lab traces`` and ``confirm`` (the lead's quiet-machine commands) build command
    lines whose overrides compose into valid jobs: the cost-reading policy gets the pair's latency file,
    a ``:key=value`` label becomes ``method.key=value``, later pairs reuse the first pair's target pass."""
    from runners.replay.compare import method_label
    from specbench.config import JobConfig, compose

    lab = _lab_script(root)
    cmds: list[list[str]] = []
    monkeypatch.setattr(lab, "_run", lambda cmd: cmds.append(cmd) or 0)
    monkeypatch.setattr(lab, "compare_main", lambda args: 0)
    assert lab.main(["traces", "--out", str(tmp_path / "traces")]) == 0
    assert len(cmds) == len(lab.PAIRS) * len(lab.TASKS)
    assert all("--reuse-target" in c for c in cmds if f"pair={lab.PAIRS[0]}" not in c)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "cost_aware:transient=false", "--tasks", "humaneval"]) == 0
    assert len(cmds) == 2 * len(lab.PAIRS)
    # one results folder per pair × task: the AR reference is decoded once for all its methods
    assert len({a for c in cmds for a in c if a.startswith("results_dir=")}) == len(lab.PAIRS)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "--tasks", "humaneval", "--n-prompts", "5"]) == 0
    assert all([a for a in c if a.startswith("task.n_prompts=")] == ["task.n_prompts=5"] for c in cmds)
    assert JobConfig.from_mapping(compose([a for a in cmds[0][3:] if "=" in a and not a.startswith(
        ("results_dir=", "gamma="))])).task.n_prompts == 5
    cmds.clear()
    assert lab.main(["traces", "--out", str(tmp_path / "traces"), "--tasks", "specbench", "--per-category", "1",
                     "--threads", "2"]) == 0
    assert all("task.per_category=1" in c and "threads=2" in c and "task.per_category=2" not in c for c in cmds)
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "cost_aware:transient=false,latency=null", "--tasks", "humaneval"]) == 0
    online = JobConfig.from_mapping(compose([a for a in cmds[0][3:] if "=" in a and not a.startswith(
        ("results_dir=", "gamma="))])).method
    assert online.params["latency"] is None  # costs learnt online: no calibration file given
    assert method_label(online.name, dict(online.params)) == "cost_aware:transient=false,latency=none"
    assert method_label("specdecode", {}) == "specdecode"
    assert method_label("cost_aware", {"transient": False, "latency": "l.json", "adapt_costs": True}) == \
        "cost_aware:transient=false,adapt_costs=true"
    cmds.clear()
    assert lab.main(["confirm", "--real", str(tmp_path / "real"), "--latency", str(tmp_path / "lat"),
                     "--methods", "specdecode", "cost_aware:transient=false", "--tasks", "humaneval"]) == 0
    for cmd in cmds:
        overrides = [a for a in cmd[3:] if "=" in a and not a.startswith(("results_dir=", "gamma="))]
        config = JobConfig.from_mapping(compose(overrides))
        if config.method.name == "cost_aware":
            assert config.method.params["transient"] is False
            assert config.method.params["latency"].endswith(f"{config.pair.name}.json")
        assert config.max_new_tokens == lab.MAX_NEW_TOKENS and config.verify_lossless


def test_compare_separates_the_hosts_drift_from_the_cost_tables_shape(noisy_pair, tmp_path, root):
    """``compare`` on a job whose rounds are the replay's and whose every wall time is 1.25 × the latency
    model's (a host 25 % slower than at calibration): tokens/s real ÷ replayed 0.8, the target alone
    measured ÷ predicted 1.25, speedup real ÷ replayed 1 (the drift cancels), rounds identical."""
    from runners.replay.replay import replay_job
    from runners.replay.trace import write_traces
    from specbench.config import compose
    from specbench.latency import predict_parts_ms

    _, target, draft, prompts = noisy_pair
    traces = [build_trace(target, draft, ids, 24, [], prompt_id=str(i), pair="tiny", task="t") for i, ids in
              enumerate(prompts)]
    write_traces(tmp_path / "traces" / "tiny__t" / "trace.jsonl", traces)
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(2.0, 0.3), round_overhead_ms=0.2)
    lat.save(tmp_path / "latency" / "tiny.json")
    config = compose(["pair=gemma3-270m_gemma3-270m-int8", "method=specdecode", "gamma=3", "max_new_tokens=24"])

    config = OmegaConf.to_container(config, resolve=True)
    config["pair"]["name"], config["task"]["name"] = "tiny", "t"
    lab = _lab_script(root)
    reps = replay_job(traces, lab.method_spec("specdecode", None).build(3), lat)
    job = tmp_path / "real" / "job"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps({"status": "complete", "config": config}))
    (job / "records.jsonl").write_text("".join(json.dumps({
        "prompt_id": p.trace.prompt_id, "turn": p.trace.turn, "prompt_tokens": p.trace.prompt_tokens,
        "new_tokens": p.new_tokens, "wall_ms": 1.25 * p.wall_ms,
        "ar_wall_ms": 1.25 * lat.ar_wall_ms(p.trace.prompt_tokens, p.new_tokens),
        "gamma_trace": p.rounds.gamma, "drafted_trace": p.rounds.drafted, "accepted_trace": p.rounds.accepted,
        "accepted": sum(p.rounds.accepted), "drafted": sum(p.rounds.drafted), "lossless": True,
        **{k: 1.25 * v for k, v in predict_parts_ms(lat, p.trace.prompt_tokens, p.new_tokens, p.rounds.drafted,
                                                    p.rounds.accepted).items() if k in ("verify_ms", "draft_ms")}})
        + "\n" for p in reps))
    assert lab.main(["compare", "--real", str(tmp_path / "real"), "--traces", str(tmp_path / "traces"),
                     "--latency", str(tmp_path / "latency"), "--out", str(tmp_path / "cmp")]) == 0
    row = pd.read_csv(tmp_path / "cmp" / "real_vs_replay.csv").iloc[0]
    assert row["method_config"] == "specdecode" and row["identical_rounds_share"] == 1.0
    assert row["real_over_replayed"] == pytest.approx(0.8)
    assert row["ar_real_over_predicted"] == pytest.approx(1.25)
    assert row["speedup_real_over_replayed"] == pytest.approx(1.0)
    assert row["verify_real_over_predicted"] == pytest.approx(1.25)
    assert row["draft_real_over_predicted"] == pytest.approx(1.25)
