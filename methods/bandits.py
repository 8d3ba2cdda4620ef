"""Bandit machinery shared by TapOut (a bandit over stoppers) and BanditSpec (a bandit over γ).

Reward of a round: **tokens per millisecond**, ``(accepted + 1) / cost``, the quantity both papers
want to maximise (BanditSpec's reference code rewards an arm with the round's tokens per second,
``sail-sg/BanditSpec``, ``generate_utils.py``, ``ucb_length_spec_generate``). ``cost``: with a
calibrate JSON (``latency``) the model's prediction for the drafted length, so the policy decides the
same in a real run and in its replay; without one, the round's measured ``round_ms`` (``RoundOutcome``,
the policy needs ``COSTS``; predicted in a replay with a latency model), else the paper's model
(verification = 5 draft tokens; ``methods.costs``). Rewards are
divided by the largest reward seen so far so they lie in ``[0, 1]`` whatever the hardware, as UCB1
and EXP3 assume (our choice; the papers leave the scale to the implementation).

``UCB1`` (Auer, Cesa-Bianchi & Fischer 2002): play every arm once (in the given order), then the
arm maximising ``mean_i + c · √(2 ln n / n_i)``. ``EXP3`` (Auer et al. 2002, "The nonstochastic
multiarmed bandit problem", Fig. 1): ``p_i = (1 − g)·w_i / Σw + g / K``, draw an arm from ``p``
with a seeded ``random.Random``, update ``w_i ← w_i · exp(g · (r / p_i) / K)``; ``g =
min(1, √(K ln K / ((e − 1) T)))`` for a horizon of ``T`` rounds. Ties go to the earlier arm, so
a run is a deterministic function of its seed and its outcomes (replay equals real runs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from methods.base import RoundOutcome
from methods.costs import CostModel


class RewardScale:
    """``(accepted + 1) / cost`` of a round, divided by the largest seen (module docstring)."""

    def __init__(self, costs: CostModel) -> None:
        self.costs = costs
        self.best = 0.0

    def raw(self, outcome: RoundOutcome) -> float:
        measured = self.costs.online and outcome.round_ms is not None
        cost = outcome.round_ms if measured else self.costs.round(outcome.drafted)
        return (outcome.accepted + 1) / max(cost, 1e-9)

    def __call__(self, outcome: RoundOutcome) -> float:
        r = self.raw(outcome)
        self.best = max(self.best, r)
        return r / self.best if self.best > 0 else 0.0


class UCB1:
    def __init__(self, n_arms: int, c: float = 1.0) -> None:
        self.k, self.c = n_arms, float(c)
        self.reset()

    def reset(self) -> None:
        self.counts = [0] * self.k
        self.sums = [0.0] * self.k
        self.t = 0

    def choose(self) -> int:
        for i, n in enumerate(self.counts):
            if n == 0:
                return i
        log_t = math.log(max(self.t, 1))
        scores = [s / n + self.c * math.sqrt(2.0 * log_t / n) for s, n in zip(self.sums, self.counts)]
        return max(range(self.k), key=lambda i: (scores[i], -i))

    def update(self, arm: int, reward: float) -> None:
        self.counts[arm] += 1
        self.sums[arm] += reward
        self.t += 1

    def state(self) -> dict:
        return {"counts": list(self.counts), "means": [s / n if n else None for s, n in zip(self.sums, self.counts)]}


class EXP3:
    def __init__(self, n_arms: int, horizon: int = 200, seed: int = 0) -> None:
        self.k = n_arms
        self.g = min(1.0, math.sqrt(n_arms * math.log(max(n_arms, 2)) / ((math.e - 1) * max(horizon, 1))))
        self.seed = int(seed)
        self.reset()

    def reset(self) -> None:
        self.rng = random.Random(self.seed)
        self.log_w = [0.0] * self.k
        self.counts = [0] * self.k

    def probs(self) -> list[float]:
        top = max(self.log_w)
        w = [math.exp(x - top) for x in self.log_w]
        total = sum(w)
        return [(1 - self.g) * x / total + self.g / self.k for x in w]

    def choose(self) -> int:
        u, acc = self.rng.random(), 0.0
        p = self.probs()
        for i, pi in enumerate(p):
            acc += pi
            if u < acc:
                return i
        return self.k - 1

    def update(self, arm: int, reward: float) -> None:
        p = self.probs()[arm]
        self.log_w[arm] += self.g * (reward / p) / self.k
        self.counts[arm] += 1

    def state(self) -> dict:
        return {"counts": list(self.counts), "probs": [round(p, 4) for p in self.probs()]}


def parse_arms(arms: Sequence[int] | str | None, default: Sequence[int]) -> list[int]:
    """Integers >= 0 from a list or a comma-separated string (a YAML list or a CLI override)."""
    if arms is None:
        return list(default)
    if isinstance(arms, str):
        arms = [a for a in arms.replace(" ", "").split(",") if a]
    out = []
    for a in arms:
        if isinstance(a, bool) or int(a) != float(a) or int(a) < 0:
            raise ValueError(f"arms must be integers >= 0, got {arms!r}")
        out.append(int(a))
    if not out or len(set(out)) != len(out):
        raise ValueError(f"arms must be distinct and not empty, got {arms!r}")
    return out
