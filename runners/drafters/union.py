"""Union (Timor et al., Algorithm 1), a drafter with another tokenizer: the baseline TLI improves on.

Both vocabularies are extended to ``T ∪ D`` (``methods.hetero.UnionSpace``). Per drafted token: the
draft id is sampled from the draft model's whole distribution ``q = verify.probs(logits, T)`` (its
argmax at temperature 0) and proposed as its union index: its target id when its string is a
target token, else ``|T| + k``, an id outside the target's vocabulary. The row handed to
verification is ``q``'s part on target ids (``methods.hetero.to_target``, not renormalised: the mass
on draft-only tokens is what union loses against TLI, Theorem 4.1).

A draft-only token has target probability 0: the loop (``runners.engine.speculative``) rejects it
with certainty without showing it to the target, and samples the replacement from
``normalize(max(0, p - q))`` over target ids - exactly Algorithm 1's residual, which is zero outside
``T``. Drafting stops after it (nothing after it could be accepted). ``confidences``: the draft's
probability of its token (its mass on the target id when shared).
"""

from __future__ import annotations

from typing import Any

import torch

from methods.base import GammaPolicy
from methods.hetero.token_level import UnionSpace, to_target
from runners.drafters.text_sync import CrossVocab
from runners.drafters.vocab_map import MappedDrafter
from runners.engine.base import Draft
from runners.engine.verify import Sampling, probs, sample
from specbench.drafter_kinds import drafter


@drafter("union", loads_model=True, asks_policy=True, method="cross_vocabulary_union", own_vocabulary=True)
class UnionDrafter(MappedDrafter):
    """Algorithm 1 (union of the vocabularies): sample from the whole drafter; draft-only tokens are
    proposed as ids outside the target's vocabulary and rejected by the loop."""

    name = "union"

    def __init__(self, pair: CrossVocab) -> None:
        super().__init__(pair)
        self.d2u = UnionSpace(self.mapping).draft_to_union.to(self.device)

    def _pick(self, logits: torch.Tensor, sampling: Sampling, generator: Any) -> tuple:
        """One union token: a draft-only token is proposed as an id past the target's logits (which ends the draft:
        ``methods.rules.stop_drafting_after``)."""
        q_draft = probs(logits, 1.0 if sampling.greedy else sampling)
        d_tok = int(q_draft.argmax()) if sampling.greedy else sample(q_draft, generator)
        u_tok = int(self.d2u[d_tok])
        q = to_target(q_draft, self.mapping)
        conf = float(q_draft[d_tok]) if u_tok >= self.target_vocab_size else float(q[u_tok])
        return d_tok, u_tok, (None if sampling.greedy else q), conf

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, sampling: Sampling, generator: torch.Generator | None
    ) -> Draft:
        return self._draft_tokens(ids, max_tokens, policy, lambda logits: self._pick(logits, sampling, generator))

    @classmethod
    def from_context(cls, ctx: Any) -> UnionDrafter:
        return cls(CrossVocab.of("union", ctx))
