"""SVIP: a self-verification length policy — stop drafting on the draft's own entropy
(Zhang, Xu, Liang, Chen, He, Wang & Tu, "Draft Model Knows When to Stop: Self-Verification
Speculative Decoding for Long-Form Generation", arXiv:2411.18462, EMNLP 2025).

Rule. SVIP bounds the acceptance rate of a drafted token from below by a decreasing function of
the draft's prediction entropy — a high entropy means a likely rejection — and stops drafting at
the first token whose entropy is too high::

    stop drafting after this token  ⇔  √H(q) > h                  (``threshold`` h)

(``√H`` because the bound, like Pinsker's inequality, is in the square root of an information
quantity; the rule is equivalent to ``H(q) > h²``.)

Defaults. ``threshold = 0.5`` (stop once ``H(q) > 0.25`` nats) is our choice: the paper tunes h per
model pair and we could not read its values offline. γ (the initial γ) is the maximum draft
length of a round (the paper's SVIP drafts up to a large cap and lets entropy decide).
"""

from __future__ import annotations

from methods.base import DraftStep, policy
from methods.stoppers import StopRule, sqrt_entropy
from specbench.config import check_number


@policy("svip")
class SVIP(StopRule):
    """Stop once ``√H(q) > threshold``."""

    name = "svip"
    needs = frozenset({"entropy"})

    def __init__(self, gamma_init: int, threshold: float = 0.5) -> None:
        super().__init__(gamma_init)
        self.threshold = check_number("threshold", threshold, 0.0)

    def stop(self, step: DraftStep) -> bool:
        return step.entropy is not None and sqrt_entropy(step) > self.threshold

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "threshold": self.threshold}
