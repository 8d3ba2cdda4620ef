"""TLI (Timor et al., Algorithm 4: token-level intersection), a drafter with another tokenizer.

The draft distribution restricted to the
draft ids whose string is a target token (``methods.hetero.vocab``), renormalised, moved
to target ids; the drafted token is sampled from it (argmax at temperature 0) and ``q``
is that distribution over the target vocabulary (float32, rows sum to 1; at temperature 0
``q=None``); ``confidences`` = its probability under the restricted distribution.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy
from methods.hetero.vocab import VocabMapping, build_vocab_mapping
from runners.drafters.text_sync import DEFAULT_LOOKBEHIND, TextSyncedDrafter, need_model
from runners.engine.base import Draft
from runners.engine.verify import probs, sample
from specbench.models import logits_width
from specbench.registry import ConfigError

_MAPPINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached_mapping(
    draft_tokenizer: Any, target_tokenizer: Any, draft_width: int, target_width: int, draft_eos: tuple[int, ...], target_eos: int
) -> VocabMapping:
    """``build_vocab_mapping``, once per pair of tokenizer objects (a few seconds for a 262k vocabulary)."""
    inner = _MAPPINGS.setdefault(target_tokenizer, weakref.WeakKeyDictionary())
    per_draft = inner.setdefault(draft_tokenizer, {})
    key = (draft_width, target_width, draft_eos, target_eos)
    if key not in per_draft:
        per_draft[key] = build_vocab_mapping(
            draft_tokenizer, target_tokenizer, draft_width, target_width, draft_eos, [target_eos]
        )
    return per_draft[key]


class TLIDrafter(TextSyncedDrafter):
    """Algorithm 4 (Token-Level Intersection): sample from the drafter restricted to shared tokens."""

    name = "tli"

    def __init__(
        self,
        draft_model: Any,
        draft_tokenizer: Any,
        target_tokenizer: Any,
        eos_token_ids: Iterable[int],
        target_vocab_size: int,
        draft_eos_token_ids: Iterable[int] | None = None,
        lookbehind: int = DEFAULT_LOOKBEHIND,
        mapping: VocabMapping | None = None,
    ) -> None:
        super().__init__(draft_model, draft_tokenizer, target_tokenizer, eos_token_ids, draft_eos_token_ids, lookbehind)
        self.target_vocab_size = int(target_vocab_size)
        self.mapping = mapping or cached_mapping(
            draft_tokenizer,
            target_tokenizer,
            logits_width(draft_model),
            self.target_vocab_size,
            tuple(sorted(self.draft_eos)),
            self.target_eos,
        )
        if self.mapping.target_vocab_size != self.target_vocab_size:
            raise ValueError("mapping.target_vocab_size != target_vocab_size")
        shared = self.mapping.shared_draft_ids
        if shared.numel() == 0:
            raise ConfigError("TLI: the draft and target vocabularies share no token string")
        self.shared_draft = shared.to(self.device)
        self.shared_target = self.mapping.draft_to_target[shared].to(self.device)

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, temperature: float, generator: torch.Generator | None
    ) -> Draft:
        feed = self._first_feed(ids)
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        confs: list[float] = []
        for _ in range(max_tokens):
            logits = self._forward(feed).float().index_select(-1, self.shared_draft)
            q_shared = probs(logits, temperature) if temperature > 0 else torch.softmax(logits, dim=-1)
            q = torch.zeros(self.target_vocab_size, dtype=torch.float32, device=q_shared.device)
            q.index_add_(0, self.shared_target, q_shared)
            j = sample(q_shared, generator) if temperature > 0 else int(q_shared.argmax())
            d_tok, t_tok = int(self.shared_draft[j]), int(self.shared_target[j])
            tokens.append(t_tok)
            confs.append(float(q[t_tok]))
            if temperature > 0:
                qs.append(q)
            feed = [d_tok]
            if d_tok in self.draft_eos or t_tok in self.eos or policy.stop_drafting(
                    DraftStep(len(tokens), t_tok, confs[-1], budget=max_tokens)):
                break
        return Draft(tokens, torch.stack(qs) if qs else None, confs)

    @classmethod
    def from_context(cls, ctx: Any) -> TLIDrafter:
        need_model("tli", ctx)
        return cls(ctx.draft_model, ctx.draft_tokenizer, ctx.target_tokenizer, ctx.eos_token_ids,
                   ctx.target_vocab_size, lookbehind=ctx.hetero.lookbehind)
