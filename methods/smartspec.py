"""SmartSpec: the speculation length that maximises the predicted goodput, γ = 0 allowed
(Liu, Chen et al. 2024, "Optimizing Speculative Decoding for Serving Large Language Models Using
Goodput", arXiv:2406.14066).

SmartSpec chooses, before each round, the proposed length ``k ∈ {0, .., k_max}`` that maximises the
*goodput* — generated tokens per unit time — predicted from the token acceptance rate ``α``
estimated on the request's history and a cost model of one round (Sec. 4)::

    E[tokens | k] = (1 − α^(k+1)) / (1 − α)         (i.i.d. acceptance, Leviathan et al. 2023, eq. 1)
    goodput(k)    = E[tokens | k] / C(k),  C(k) = k·D + V(k + 1) + O    (``methods.costs``)
    γ = argmax_k goodput(k)                (k = 0: a plain target step, 1 token for C(0))

For one request (batch 1, our loop) the paper's batch-time model reduces to ``C(k)``: its linear
model in the batch's tokens becomes the measured ``V(k + 1)`` (a calibrate JSON as ``latency``, or
costs learned online from the rounds' measured ``verify_ms``; ``methods.costs``).

``α`` is the request's acceptance rate, accepted / drafted, over its last ``window`` drafting rounds
(SmartSpec's moving average), starting from ``alpha_prior`` (our choice, 0.6) before any round.
Choices where the paper is silent: the first round plays the initial γ (so the initial γ means
something; SmartSpec has none); a plain step teaches nothing about ``α``, so after ``probe``
consecutive plain steps one round drafts the best ``k >= 1`` (else γ = 0 could never be left);
``k_max = 8``; ``transient = true`` (``α`` and the window restart per generation call).
"""

from __future__ import annotations

from collections import deque

from methods.base import COSTS, GammaPolicy, RoundOutcome, policy
from methods.costs import CostModel
from specbench.config import check_bool, check_number


def expected_tokens(alpha: float, k: int) -> float:
    """``(1 − α^(k+1)) / (1 − α)`` (= ``k + 1`` at ``α = 1``)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@policy("smartspec")
class SmartSpec(GammaPolicy):
    """γ = argmax_k E[tokens | k] / C(k), k = 0 .. k_max."""

    name = "smartspec"
    needs = frozenset({COSTS})

    def __init__(self, gamma_init: int, k_max: int = 8, alpha_prior: float = 0.6, window: int = 8, probe: int = 4,
                 transient: bool = True, latency: str | None = None) -> None:
        super().__init__(gamma_init)
        self.k_max = int(check_number("k_max", k_max, 1.0))
        self.alpha_prior = check_number("alpha_prior", alpha_prior, 0.0, 1.0)
        self.window = int(check_number("window", window, 1.0))
        self.probe = int(check_number("probe", probe, 1.0))
        self.transient = check_bool("transient", transient)
        self.costs = CostModel.build(latency)
        self.history: deque[tuple[int, int]] = deque(maxlen=self.window)
        self.plain_streak = 0
        self.fresh = True
        self.rounds = 0
        self.gammas = [0] * (self.k_max + 1)

    def begin_prompt(self) -> None:
        if self.transient:
            self.history.clear()
            self.plain_streak = 0
            self.fresh = True

    @property
    def alpha(self) -> float:
        drafted = sum(d for _, d in self.history)
        return sum(a for a, _ in self.history) / drafted if drafted else self.alpha_prior

    def goodput(self, k: int) -> float:
        return expected_tokens(self.alpha, k) / max(self.costs.round(k), 1e-9)

    def next_gamma(self) -> int:
        if self.fresh:
            return self.gamma_init
        lo = 1 if self.plain_streak >= self.probe else 0
        return max(range(lo, self.k_max + 1), key=lambda k: (self.goodput(k), -k))

    def observe(self, outcome: RoundOutcome) -> None:
        self.fresh = False
        self.rounds += 1
        self.costs.observe(outcome)
        if outcome.drafted:
            self.history.append((outcome.accepted, outcome.drafted))
            self.plain_streak = 0
        else:
            self.plain_streak += 1
        self.gammas[min(outcome.gamma, self.k_max)] += 1

    def state(self) -> dict:
        return {"alpha": round(self.alpha, 4), "transient": self.transient, "rounds": self.rounds,
                "gamma_counts": list(self.gammas), **self.costs.state()}
