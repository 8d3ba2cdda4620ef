"""Drafting for a batch of rows: what the batched loop asks of a drafter, and any drafter run per row.

``BatchDrafter`` is what ``runners.engine.batched.BatchedSpeculativeRunner`` asks for a round's
drafts: ``propose(ids, budgets, policies, sampling, generator)`` returns one ``Draft`` per active
row (row ``i`` drafts at most ``budgets[i]`` tokens, asking ``policies[i].stop_drafting`` after each,
exactly as the drafter would alone); ``commit(ids)`` after verification; ``select(keep)`` when
rows leave the batch.

* ``runners.drafters.batched_model.BatchedModelDrafter``: the draft model runs **one forward per draft position for the whole
  batch** (``runners.engine.ragged.RaggedCache``): the first forward of a round feeds each row the
  tokens its cache has not seen (right-aligned; usually the target's last token, two after a fully
  accepted round, the prompt in the first round), the others one token per row; a row that has
  stopped drafting rides along with an empty (masked) block until every row has stopped. Each row
  drafts exactly what ``runners.drafters.model.ModelDrafter`` drafts for it alone (same features,
  same ``stop_drafting`` questions).
* ``PerRowDrafters``: one instance of any ``Drafter`` per row, each proposing alone, in row order
  (prompt lookup, the hybrid, the cross-vocabulary drafters): lossless like any proposal, but their
  model forwards (if any) are batch-1 forwards, one row after another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from methods.base import GammaPolicy
from runners.engine.base import Draft, Drafter


class BatchDrafter(ABC):
    """Proposes a round's drafts for every active row of a batch (module docstring)."""

    def begin(self, prompts: list[list[int]]) -> None:  # noqa: B027 - optional hook
        """A batch of these prompts starts (target vocabulary)."""

    @abstractmethod
    def propose(self, ids: list[list[int]], budgets: list[int], policies: list[GammaPolicy], sampling: Any,
                generator: Any) -> list[Draft]:
        """One ``Draft`` per active row: at most ``budgets[i]`` tokens continuing ``ids[i]`` (0: none)."""

    def commit(self, ids: list[list[int]]) -> None:  # noqa: B027 - optional hook
        """Every active row's sequence after verification."""

    @abstractmethod
    def select(self, keep: list[int]) -> None:
        """Only the active rows at these positions stay (in this order)."""

    def limits(self, gamma: int, room: int) -> tuple[int, int]:
        """``Drafter.limits`` of the drafter kind (what a row of γ drafts and keeps)."""
        return Drafter.limits(self, gamma, room)  # type: ignore[arg-type]


class PerRowDrafters(BatchDrafter):
    """One ``Drafter`` per row, made by ``make()``, each proposing alone (module docstring)."""

    def __init__(self, make: Callable[[], Drafter]) -> None:
        self.make = make
        self.drafters: list[Drafter] = []
        self._limits = make()

    def begin(self, prompts: list[list[int]]) -> None:
        while len(self.drafters) < len(prompts):
            self.drafters.append(self.make())
        self.active = self.drafters[: len(prompts)]
        for drafter, prompt in zip(self.active, prompts):
            drafter.begin(list(prompt))

    def propose(self, ids: list[list[int]], budgets: list[int], policies: list[GammaPolicy], sampling: Any,
                generator: Any) -> list[Draft]:
        return [d.propose(seq, n, pol, sampling, generator) if n > 0 else Draft([])
                for d, seq, n, pol in zip(self.active, ids, budgets, policies)]

    def commit(self, ids: list[list[int]]) -> None:
        for d, seq in zip(self.active, ids):
            d.commit(seq)

    def select(self, keep: list[int]) -> None:
        self.active = [self.active[i] for i in keep]

    def limits(self, gamma: int, room: int) -> tuple[int, int]:
        return self._limits.limits(gamma, room)
