"""The replay's oracle on synthetic traces (``runners.replay.oracle``): no policy beats it, the agreement oracle is
optimal under the paper's cost model and can be beaten when target calls are cheap."""

from __future__ import annotations

import math
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from methods.policies import build_policy
from runners.replay.oracle import agreement_oracle, oracle, oracle_schedule
from runners.replay.replay import replay
from runners.replay.trace import (
    Trace,
)
from specbench.latency import LatencyModel
from specbench.round_costs import round_ms, seen_after

from helpers.replay_strategies import EOS, affine_latency, policy_strategy, synthetic_traces

# ----------------------------------------------------------------- the oracle on synthetic traces

def _brute_force(trace: Trace, lat: LatencyModel, m: int) -> float:
    """Minimum predicted wall over every sequence of drafted lengths and peeks (memoised on the exact state)."""
    n, p = min(trace.n, m), trace.prompt_tokens

    @cache
    def best(t: int, seen: int) -> float:
        if t >= n:
            return 0.0
        budget = m - t - 1
        options = [0] + list(range(1, trace.available(t, budget) + 1)) if budget > 0 else [0]
        out = math.inf
        for d in options:
            acc = min(d, trace.agreement(t))
            new_t = min(t + acc + 1, n)
            cost = round_ms(lat, p, t, seen, d) + best(new_t, seen_after(p, t, seen, d, acc, new_t))
            out = min(out, cost)
        if len(options) > 1:  # a peek: draft one token, verify none
            out = min(out, round_ms(lat, p, t, seen, 0, 1) + best(t + 1, seen_after(p, t, seen, 1, 0, t + 1)))
        return out

    return lat.target_prefill_ms(p) + best(1, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=synthetic_traces(), lat=affine_latency(), policies=st.lists(policy_strategy(), min_size=1, max_size=4),
       cut=st.integers(0, 3))
def test_no_policy_beats_the_oracle(trace, lat, policies, cut):
    m = max(1, trace.max_new_tokens - cut)  # also shorter generations than the trace holds
    best = oracle(trace, lat, m)
    total, _ = oracle_schedule(trace, lat, m)
    assert math.isclose(best.wall_ms, total, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(total, _brute_force(trace, lat, m), rel_tol=1e-9, abs_tol=1e-9)
    assert best.new_tokens == min(trace.n, m)
    assert best.wall_ms <= agreement_oracle(trace, lat, m).wall_ms + 1e-9
    for name, gamma, params in policies:
        res = replay(trace, build_policy(name, gamma, params), lat, m)
        assert best.wall_ms <= res.wall_ms + 1e-9, (name, gamma, params)


@settings(max_examples=100, deadline=None)
@given(trace=synthetic_traces(), c=st.floats(1.0, 30.0))
def test_agreement_oracle_is_optimal_under_the_paper_cost_model(trace, c):
    lat = LatencyModel.paper(c)
    assert math.isclose(agreement_oracle(trace, lat).wall_ms, oracle(trace, lat).wall_ms, rel_tol=1e-12)


def test_cost_aware_replays_under_a_cost_table_where_every_round_is_free():
    """Hypothesis found it (2026-11-25): an all-zero affine table made ``CostAware.rho`` divide by zero.
    Every schedule then costs nothing, so the policy only has to run, and the oracle still bounds it."""
    tr = Trace("s", 1, 1, 3, 3, (0,), [1, 1, 1], [0, 0], [0.0, 0.0], {1: ([0], [0.0])})
    lat = LatencyModel.affine(target=(0.0, 0.0), draft=(0.0, 0.0), round_overhead_ms=0.0, ar_overhead_ms=0.0,
                              context=(0.0, 0.0), target_prefill=(0.0, 0.0), draft_prefill=(0.0, 0.0))
    res = replay(tr, build_policy("cost_aware", 1, {"transient": False, "prior_weight": 1.0}), lat)
    assert res.wall_ms == 0.0 and res.new_tokens == 3
    assert oracle(tr, lat).wall_ms <= res.wall_ms


def test_agreement_oracle_can_be_beaten_when_target_calls_are_cheap():
    """Run of 9 agreeing tokens; the target costs ~nothing, a draft token 10: two rounds beat one."""
    x = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]
    tr = Trace("c", 1, 3, 11, 11, (EOS,), x, x[1:], [0.9] * 10, {})
    lat = LatencyModel.affine(target=(0.0, 0.0), draft=(10.0, 0.0))
    assert oracle(tr, lat).wall_ms < agreement_oracle(tr, lat).wall_ms
