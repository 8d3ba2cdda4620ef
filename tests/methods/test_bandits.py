"""The bandits (issue 14, the γ-policy lab): UCB1 plays each arm then the best, EXP3 is a function of its seed
(``methods/bandits.py``); BanditSpec starts at the initial γ and finds the arm with the most tokens per ms
(``methods/banditspec.py``)."""

from __future__ import annotations

from methods.bandits import EXP3, UCB1
from methods.banditspec import BanditSpec
from methods.base import RoundOutcome
from methods.policies import build_policy

from helpers.policy_lab import latency_json


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
