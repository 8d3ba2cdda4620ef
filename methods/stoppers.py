"""Shared shape of the training-free draft stoppers (AdaEDL, SVIP, Max-Confidence, Logit-Margin).

Each is a fixed γ (the initial γ: the most tokens a round drafts, as in TapOut's and AdaEDL's
experiments, where the stopper runs under a maximum draft length) plus a rule that ends the
round's drafting after a token whose draft distribution looks risky. The token that triggered
the stop is still verified (the loop's contract, as transformers' ``ConfidenceCriteria``).
A drafter without probabilities (prompt lookup) never asks, so the rule never fires there.
"""

from __future__ import annotations

import math

from methods.base import DraftStep, GammaPolicy


class StopRule(GammaPolicy):
    """A fixed γ and a per-token stop rule ``stop(step)`` (subclasses)."""

    def next_gamma(self) -> int:
        return self.gamma_init

    def stop(self, step: DraftStep) -> bool:  # pragma: no cover - abstract in spirit
        raise NotImplementedError

    def stop_drafting(self, step: DraftStep) -> bool:
        return self.stop(step)

    def state(self) -> dict:
        return {"gamma": self.gamma_init}


def sqrt_entropy(step: DraftStep) -> float:
    """``√H`` of the step's draft distribution (nats); 0 when the drafter gave no entropy."""
    return math.sqrt(max(0.0, step.entropy)) if step.entropy is not None else 0.0
