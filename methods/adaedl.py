"""AdaEDL: early draft stopping from an entropy-based lower bound on the acceptance probability
(Agrawal, Jeon & Lee 2024, "AdaEDL: Early Draft Stopping for Speculative Decoding of Large
Language Models via an Entropy-based Lower Bound on Token Acceptance Probability", arXiv:2410.18351).

Rule. The probability that the target accepts the drafted token is ``β = Σ_v min(p(v), q(v))``
(Leviathan et al. 2023, Sec. 3), which the draft cannot compute without the target. AdaEDL bounds
it from below by the draft's own entropy ``H(q)``::

    β̂ = 1 − √(γ_H · H(q))            (the lower bound; γ_H: entropy scaling, ``entropy_scale``)
    stop drafting after this token  ⇔  β̂ < λ                 (``threshold`` λ)

Defaults. ``entropy_scale = 0.2`` and ``threshold = 0.7``. The scaling 0.2 is the value the
paper's summaries report as fixed in its experiments; we could not read the paper's text offline
to confirm either value, so both are our choices, stated here: with them drafting stops once
``H(q) > (1 − 0.7)² / 0.2 = 0.45`` nats. The paper also adapts λ online from the acceptance rate
observed at run time; we implement the stopping criterion with a fixed λ (sweep ``method.threshold``)
and do not guess the update rule. γ (the initial γ) is the maximum draft length of a round.
"""

from __future__ import annotations

import math

from methods.base import DraftStep, policy
from methods.stoppers import StopRule
from specbench.config import check_number


@policy("adaedl")
class AdaEDL(StopRule):
    """Stop once ``1 − √(entropy_scale · H(q)) < threshold``."""

    name = "adaedl"
    needs = frozenset({"entropy"})

    def __init__(self, gamma_init: int, entropy_scale: float = 0.2, threshold: float = 0.7) -> None:
        super().__init__(gamma_init)
        self.entropy_scale = check_number("entropy_scale", entropy_scale, 0.0)
        self.threshold = check_number("threshold", threshold, 0.0, 1.0)

    def lower_bound(self, step: DraftStep) -> float:
        """``β̂ = 1 − √(γ_H · H)`` (1 when the drafter gave no entropy)."""
        h = step.entropy if step.entropy is not None else 0.0
        return 1.0 - math.sqrt(self.entropy_scale * max(0.0, h))

    def stop(self, step: DraftStep) -> bool:
        return step.entropy is not None and self.lower_bound(step) < self.threshold

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "entropy_scale": self.entropy_scale, "threshold": self.threshold}
