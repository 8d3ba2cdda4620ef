"""``BatchedModelDrafter``: a same-vocabulary draft model drafting for every row of a batch at once
(``runners.engine.batch_drafters`` says what the batched loop asks of a drafter).

One forward per draft position for the whole batch (``runners.engine.ragged.RaggedCache``): the first
forward of a round feeds each row the tokens its cache has not seen (usually the target's last token,
two after a fully accepted round, the prompt in the first round), the others one token per row; a row
that has stopped drafting rides along with an empty (masked) block until every row has stopped. Each
row drafts exactly what ``runners.drafters.model.ModelDrafter`` drafts for it alone: the same tokens,
features and ``stop_drafting`` questions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy, policy_needs
from methods.rules import stop_drafting_after
from runners.drafters.model import common_prefix_len
from runners.engine.base import Draft
from runners.engine.batch_drafters import BatchDrafter
from runners.engine.features import draft_features
from runners.engine.ragged import RaggedCache, is_sampled
from runners.engine.verify import greedy_token, probs, sample


class BatchedModelDrafter(BatchDrafter):
    """A same-vocabulary draft model, one forward per draft position for the whole batch."""

    def __init__(self, model: Any, eos_token_ids: Iterable[int], pad_id: int = 0) -> None:
        self.model = model
        self.eos = set(eos_token_ids)
        self.pad_id = pad_id
        self.cache: RaggedCache | None = None
        self.seq: list[list[int]] = []

    def begin(self, prompts: list[list[int]]) -> None:
        self.cache = RaggedCache(self.model, len(prompts), self.pad_id)
        self.seq = [[] for _ in prompts]

    def _sync(self, ids: list[list[int]]) -> None:
        """Drop each row's cached states past its longest common prefix with ``ids`` (keeping at
        least one token to feed)."""
        assert self.cache is not None
        for i, seq in enumerate(ids):
            n = min(common_prefix_len(self.seq[i], seq), len(seq) - 1)
            if n < len(self.seq[i]):
                self.cache.truncate(i, n)
                self.seq[i] = self.seq[i][:n]

    @torch.inference_mode()
    def propose(self, ids: list[list[int]], budgets: list[int], policies: list[GammaPolicy], sampling: Any,
                generator: Any) -> list[Draft]:
        assert self.cache is not None, "begin() first"
        self._sync(ids)
        rows = len(ids)
        feeds = [seq[len(self.seq[i]):] for i, seq in enumerate(ids)]
        drafting = [budgets[i] > 0 for i in range(rows)]
        needs = [policy_needs(p) for p in policies]
        tokens: list[list[int]] = [[] for _ in range(rows)]
        qs: list[list[torch.Tensor]] = [[] for _ in range(rows)]
        confidences: list[list[float]] = [[] for _ in range(rows)]
        steps: list[list[DraftStep]] = [[] for _ in range(rows)]
        greedy = not is_sampled(sampling)
        while any(drafting):
            blocks = [feeds[i] if drafting[i] else [] for i in range(rows)]
            logits = self.cache.forward(blocks, keep=1)
            for i in range(rows):
                if not drafting[i]:
                    continue
                self.seq[i].extend(feeds[i])
                row = logits[i][-1]
                if greedy:
                    tok = greedy_token(row)
                    feats = draft_features(row, tok, needs[i])
                else:
                    q = probs(row, sampling)
                    tok = sample(q, generator)
                    qs[i].append(q)
                    feats = draft_features(row, tok, needs[i] | {"confidence"}, probs=q)
                tokens[i].append(tok)
                if "confidence" in feats:
                    confidences[i].append(feats["confidence"])
                if "confidence" not in needs[i]:
                    feats.pop("confidence", None)
                step = DraftStep(len(tokens[i]), tok, budget=budgets[i], **feats)
                steps[i].append(step)
                feeds[i] = [tok]
                if stop_drafting_after(tok, step, policies[i], self.eos, len(tokens[i]), budgets[i]):
                    drafting[i] = False
        return [Draft(tokens[i], torch.stack(qs[i]) if qs[i] else None, confidences[i], steps[i],
                      forwards=len(tokens[i])) for i in range(rows)]

    def commit(self, ids: list[list[int]]) -> None:
        assert self.cache is not None
        self._sync(ids)
        self.cache.compact()

    def select(self, keep: list[int]) -> None:
        assert self.cache is not None
        self.cache.select(keep)
        self.seq = [self.seq[i] for i in keep]

    @classmethod
    def from_context(cls, ctx: Any) -> BatchedModelDrafter:
        """The batched form of the ``model`` drafter (``specbench.drafter_kinds``: its ``batched``)."""
        return cls(ctx.draft_model, ctx.eos_token_ids)
