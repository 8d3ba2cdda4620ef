"""Logit-Margin stop: end drafting once the draft hesitates between its two best tokens — one of the
parameter-free stoppers TapOut selects among (Sridhar et al. 2025, arXiv:2511.02017).

Rule (the margin measured in probabilities, so one threshold fits any vocabulary and temperature)::

    stop drafting after this token  ⇔  q(top-1) − q(top-2) < δ          (``threshold`` δ)

Default ``threshold = 0.3`` is our choice (the TapOut text was not available offline): the draft's
favourite leads the runner-up by less than 30 points of probability. A margin is informative where
a confidence is not: 0.45 vs 0.44 (a coin flip between two tokens) and 0.45 vs 0.01 (one clear
favourite in a long tail) have the same confidence.
"""

from __future__ import annotations

from methods.base import DraftStep, policy
from methods.stoppers import StopRule
from specbench.config import check_number


@policy("logit_margin")
class LogitMargin(StopRule):
    """Stop once ``q(top-1) − q(top-2) < threshold``."""

    name = "logit_margin"
    needs = frozenset({"margin"})

    def __init__(self, gamma_init: int, threshold: float = 0.3) -> None:
        super().__init__(gamma_init)
        self.threshold = check_number("threshold", threshold, 0.0, 1.0)

    def stop(self, step: DraftStep) -> bool:
        return step.margin is not None and step.margin < self.threshold

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "threshold": self.threshold}
