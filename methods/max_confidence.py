"""Max-Confidence stop: end drafting once the draft's top-1 probability falls below τ — one of the
parameter-free dynamic speculation stoppers TapOut selects among (Sridhar et al. 2025,
"TapOut: A Bandit-Based Approach to Dynamic Speculative Decoding", arXiv:2511.02017), and the rule
of transformers' ``assistant_confidence_threshold`` (Mamou et al. 2024; ``methods.threshold``).

Rule::

    stop drafting after this token  ⇔  max_v q(v) < τ          (``threshold`` τ)

For a greedy draft ``max_v q(v)`` is the probability of the drafted token (the ``confidence``
feature); at temperature > 0 we use the probability of the sampled token, as transformers does.
It differs from ``assistant_threshold`` only in its default: ``threshold = 0.5`` — "stop when the
draft gives its own choice less than even odds", our reading of a parameter-free stopper (the
TapOut text was not available offline to check its value).
"""

from __future__ import annotations

from methods.base import DraftStep, policy
from methods.stoppers import StopRule
from specbench.config import check_number


@policy("max_confidence")
class MaxConfidence(StopRule):
    """Stop once the draft's confidence in its token is below ``threshold``."""

    name = "max_confidence"
    needs = frozenset({"confidence"})

    def __init__(self, gamma_init: int, threshold: float = 0.5) -> None:
        super().__init__(gamma_init)
        self.threshold = check_number("threshold", threshold, 0.0, 1.0)

    def stop(self, step: DraftStep) -> bool:
        return step.confidence is not None and step.confidence < self.threshold

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "threshold": self.threshold}
