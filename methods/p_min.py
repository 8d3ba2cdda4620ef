"""llama.cpp's p-min stop: a draft model drafts while its top-1 probability is at least ``p_min``; the token
that falls below is drafted (its forward is spent) but not verified, and a round with fewer than ``n_min`` tokens
verifies none (llama.cpp b11434, ``common/speculative.cpp``, the draft-simple state's ``draft``: ``if
(cur_p->data[0].p < params.p_min) { drafting = false; continue; }`` before ``result.push_back``, then ``if
(result.size() < n_min) result.clear()``).

The same rule on both backends (``backend=torch`` and ``backend=llamacpp``, where it is the server's
``--spec-draft-p-min``). Two differences stay: llama.cpp reads ``p`` from its draft sampler's top-10 candidates
renormalised, ours from the whole softmax (never larger, so ours stops no later); and llama.cpp asks about an EOS
too, ours never does (``methods.rules.stop_drafting_after``).
"""

from __future__ import annotations

from methods.base import DraftStep, policy
from methods.stoppers import StopRule
from specbench.config import check_int, check_number


@policy("p_min")
class PMin(StopRule):
    """Stop below ``p_min``; the token below it is not verified; fewer than ``n_min`` verify none."""

    name = "p_min"
    needs = frozenset({"confidence"})

    def __init__(self, gamma_init: int, p_min: float = 0.75, n_min: int = 0) -> None:
        super().__init__(gamma_init)
        self.p_min = check_number("p_min", p_min, 0.0, 1.0)
        self.n_min = check_int("n_min", n_min, 0)
        self._below = False  # the round's last drafted token fell below p_min

    def next_gamma(self) -> int:
        self._below = False  # a round starts: nothing of the last one's draft carries over
        return super().next_gamma()

    def stop(self, step: DraftStep) -> bool:
        self._below = step.confidence is not None and step.confidence < self.p_min
        return self._below

    def verify_count(self, proposed: int) -> int:
        kept = proposed - 1 if self._below and proposed > 0 else proposed
        self._below = False
        return kept if kept >= self.n_min else 0

    def reset(self) -> None:
        super().reset()
        self._below = False

    def state(self) -> dict:
        return {"gamma": self.gamma_init, "p_min": self.p_min, "n_min": self.n_min}
