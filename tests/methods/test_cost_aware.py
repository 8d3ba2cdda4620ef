"""Ours, the cost-aware policy (issue 14, the γ-policy lab; ``methods/cost_aware.py``): its optimal stopping
against an exact enumeration, its use of the cost table's shape, γ = 0 and peeks, positions when the drafter has
no features, and costs adapted in a replay making the calibrated policy's decisions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from methods.base import DraftStep, RoundOutcome
from methods.cost_aware import GRID, CostAware
from methods.costs import CostModel
from runners.replay.replay import replay_job
from runners.replay.trace_build import build_trace
from specbench.latency import LatencyModel

from helpers.policy_lab import latency_json


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
