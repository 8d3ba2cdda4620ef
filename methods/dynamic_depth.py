"""Dynamic Depth Decoding's stop: end a round's drafting once the draft's own estimate that the whole draft so far is
accepted falls below a floor (Brown, Wang, Do, Mathew & Yu 2024, "Dynamic Depth Decoding: Faster Speculative
Decoding for LLMs", arXiv:2409.00142), on EAGLE-2's acceptance estimate (Li, Wei, Zhang & Zhang 2024, "EAGLE-2:
Faster Inference of Language Models with Dynamic Draft Trees", arXiv:2406.16858, Sec. 4.1: a draft token's value
is the product of the draft's confidences along its path from the root, its estimated probability of acceptance).

Rule. DDD keeps EAGLE-2's beam of ``w`` paths and, at a check step, continues drafting while its heuristic
``H = log Σ_{i ≤ w} exp(logprobsum[i])`` (the log of the beams' summed path probabilities) is at least a threshold.
Our loop drafts one path (a chain, ``w = 1``), so ``H`` is the path's summed log-confidence, and we check it after
every drafted token::

    H_k = Σ_{j ≤ k} log q_j(x_j)                 (q_j(x_j): the draft's probability of its j-th token, ``confidence``)
    stop drafting after token k  ⇔  H_k < log τ  ⇔  Π_{j ≤ k} q_j(x_j) < τ          (``threshold`` τ)

Unlike the per-token stops (``max_confidence``, ``adaedl``, ``svip``, ``logit_margin``), which judge each token
alone, this one judges the prefix: three tokens at 0.8 each pass a per-token 0.6 floor, but their product (0.512)
does not. The token that crossed the floor is still verified (the loop's contract, ``methods.stoppers``); γ (the
initial γ) is the longest round; the sum restarts at each round's first token. A drafter without probabilities
(prompt lookup) never asks, so the rule never fires there.

Defaults. ``threshold = 0.3``: our choice (DDD's threshold is set for a beam of ten over EAGLE's head and its
sparse check steps, not for a chain checked at every step), stated here and swept with ``method.threshold``.
Greedy: every policy only decides how many tokens to draft; the target verifies them, so the output is the
target's own (lossless), and the lab replays it exactly from the traces' confidences.
"""

from __future__ import annotations

import math

from methods.base import DraftStep, policy
from methods.stoppers import StopRule
from specbench.config import check_number


@policy("dynamic_depth")
class DynamicDepth(StopRule):
    """Stop once the product of the round's draft confidences so far is below ``threshold``."""

    name = "dynamic_depth"
    needs = frozenset({"confidence"})

    def __init__(self, gamma_init: int, threshold: float = 0.3) -> None:
        super().__init__(gamma_init)
        self.threshold = check_number("threshold", threshold, 0.0, 1.0)
        if self.threshold <= 0.0:
            raise ValueError(f"threshold must be > 0 (a floor on a probability), got {threshold!r}")
        self.log_path = 0.0  # H_k of the round so far

    def stop(self, step: DraftStep) -> bool:
        if step.position == 1:
            self.log_path = 0.0
        if step.confidence is None:
            return False
        self.log_path += math.log(step.confidence) if step.confidence > 0.0 else -math.inf
        return self.log_path < math.log(self.threshold)

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "threshold": self.threshold}
