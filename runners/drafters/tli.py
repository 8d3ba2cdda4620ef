"""TLI (Timor et al., Algorithm 4: token-level intersection), a drafter with another tokenizer.

Per drafted token: the draft model's distribution ``q = verify.probs(logits, T)`` restricted to the
draft ids whose string is a target token and renormalised (``methods.hetero.tli_restrict``), the
draft id sampled from it (its argmax at temperature 0), proposed as its target id; the row handed to
verification is that distribution on target ids (``methods.hetero.to_target``: the same two functions
the exact evaluator ``methods.hetero.tli_step`` uses). At temperature 0 ``q=None`` (a deterministic
draft); ``confidences`` = the restricted distribution's probability of the token (at temperature 1
when greedy). The draft model is never modified (no pruned head, unlike transformers).
"""

from __future__ import annotations

from typing import Any

import torch

from methods.base import GammaPolicy
from methods.hetero.token_level import tli_restrict, to_target
from runners.drafters.text_sync import need_model
from runners.drafters.vocab_map import MappedDrafter
from runners.engine.base import Draft
from runners.engine.verify import probs, sample


class TLIDrafter(MappedDrafter):
    """Algorithm 4 (Token-Level Intersection): sample from the drafter restricted to shared tokens."""

    name = "tli"

    def tli_pick(
        self, logits: torch.Tensor, temperature: float, generator: torch.Generator | None
    ) -> tuple[int, int, torch.Tensor | None, float]:
        """One TLI token from the draft model's logits: ``(draft id, target id, q on target ids or
        None at temperature 0, confidence)``."""
        restricted = tli_restrict(probs(logits, temperature if temperature > 0 else 1.0), self.mapping)
        d_tok = sample(restricted, generator) if temperature > 0 else int(restricted.argmax())
        t_tok = int(self.d2t[d_tok])
        q = to_target(restricted, self.mapping)
        return d_tok, t_tok, (q if temperature > 0 else None), float(q[t_tok])

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, temperature: float, generator: torch.Generator | None
    ) -> Draft:
        return self._draft_tokens(ids, max_tokens, policy,
                                  lambda logits: (*self.tli_pick(logits, temperature, generator), False))

    @classmethod
    def from_context(cls, ctx: Any) -> TLIDrafter:
        need_model("tli", ctx)
        return cls(ctx.draft_model, ctx.draft_tokenizer, ctx.target_tokenizer, ctx.eos_token_ids,
                   ctx.target_vocab_size, lookbehind=ctx.hetero.lookbehind)
