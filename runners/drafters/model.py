"""``ModelDrafter``: a draft model sharing the target's vocabulary, with its own KV cache."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy, policy_needs
from methods.rules import take_drafts
from runners.engine.base import Draft, Drafter
from runners.engine.features import draft_features
from runners.engine.graphs import forward_logits
from runners.engine.kv import crop_to, new_cache
from runners.engine.verify import Sampling, greedy_token, probs, sample
from specbench.drafter_kinds import drafter
from specbench.models import model_device


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@drafter("model", loads_model=True, asks_policy=True, method="draft_model", plain_model=True, trace="model",
         draft_cost="forward", batched="runners.drafters.batched_model:BatchedModelDrafter")
class ModelDrafter(Drafter):
    """A draft model sharing the target's vocabulary.

    Its KV cache holds the states of ``self.seq``. Each round feeds the tokens of
    the sequence the cache has not seen (at least the target's last token), then
    drafts one token per forward. After verification the cache is cropped to the
    longest common prefix of what it holds and the accepted sequence.

    Greedy drafting computes a softmax only when the policy needs a draft feature
    (``policy.needs``; ``runners.engine.features``); sampling always has the distribution.
    """

    name = "model"

    def __init__(self, model: Any, eos_token_ids: Iterable[int]) -> None:
        self.model = model
        self.device = model_device(model)
        self.eos = set(eos_token_ids)
        self.cache = None
        self.seq: list[int] = []

    def begin(self, prompt_ids: list[int]) -> None:
        self.cache = new_cache(self.model)
        self.seq = []

    @torch.inference_mode()
    def propose(
        self,
        ids: list[int],
        max_tokens: int,
        policy: GammaPolicy,
        sampling: Sampling,
        generator: torch.Generator | None,
    ) -> Draft:
        if self.cache is None:
            self.begin(ids)
        n = min(common_prefix_len(self.seq, ids), len(ids) - 1)
        if n < len(self.seq):
            crop_to(self.cache, n)
            self.seq = self.seq[:n]
        needs = policy_needs(policy)
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        confidences: list[float] = []
        steps: list[DraftStep] = []

        def proposals(feed: list[int]) -> Iterator[DraftStep]:
            """One forward per drafted token, run when ``methods.rules.take_drafts`` draws the next step."""
            for i in range(max_tokens):
                logits = forward_logits(self.model, self.cache, feed, 1, self.device)[0, -1]  # captured: a graph
                self.seq.extend(feed)
                if sampling.greedy:
                    tok = greedy_token(logits)
                    feats = draft_features(logits, tok, needs)
                else:
                    q = probs(logits, sampling)
                    tok = sample(q, generator)
                    qs.append(q)
                    feats = draft_features(logits, tok, needs | {"confidence"}, probs=q)
                tokens.append(tok)
                if "confidence" in feats:
                    confidences.append(feats["confidence"])
                if "confidence" not in needs:
                    feats.pop("confidence", None)
                feed = [tok]
                steps.append(DraftStep(i + 1, tok, budget=max_tokens, **feats))
                yield steps[-1]

        take_drafts(proposals(ids[n:]), policy, self.eos, max_tokens)  # methods.rules: when the round stops
        return Draft(tokens, torch.stack(qs) if qs else None, confidences, steps, forwards=len(tokens))

    def commit(self, ids: list[int]) -> None:
        n = min(common_prefix_len(self.seq, ids), len(ids) - 1)
        if n < len(self.seq):
            crop_to(self.cache, n)
            self.seq = self.seq[:n]

    @classmethod
    def from_context(cls, ctx: Any) -> ModelDrafter:
        return cls(ctx.draft_model, ctx.eos_token_ids)
