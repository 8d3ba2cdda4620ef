"""TLI (Timor et al., Algorithm 4: token-level intersection), a drafter with another tokenizer.

Per drafted token: the draft model's distribution ``q = verify.probs(logits, T)`` restricted to the
draft ids whose string is a target token and renormalised (``methods.hetero.tli_restrict``), the
draft id sampled from it (its argmax at temperature 0), proposed as its target id; the row handed to
verification is that distribution on target ids (``methods.hetero.to_target``: the same two functions
the exact evaluator ``methods.hetero.tli_step`` uses). At temperature 0 ``q=None`` (a deterministic
draft); ``confidences`` = the restricted distribution's probability of the token (at temperature 1
when greedy). The draft model is never modified (no pruned head, unlike transformers).

**Where the sampling processors act** (``tli_processors``, ``hetero.tli_processors``; top-k / top-p /
typical-p of ``runners.engine.verify.Sampling``; the temperature commutes with the restriction):

* ``before_restrict`` (the default): ``q = verify.probs(logits, T)`` over the whole draft vocabulary,
  then restricted and renormalised (as above). If the processors keep no shared token (every one of
  the top-k is draft-only), nothing can be proposed: the draft ends there (a plain target step when
  it is the round's first token; lossless);
* ``after_restrict``: the logits restricted to the shared tokens first
  (``methods.hetero.restrict_logits``), then ``verify.probs`` (temperature and processors):
  transformers' order (``generation/utils.py``, ``GenerationMixin._get_candidate_generator``:
  sampling with another tokenizer builds ``UniversalSpeculativeDecodingGenerator`` with the
  assistant's LM head pruned to the shared tokens, ``candidate_generator.py``,
  ``AssistantToTargetTranslator`` / ``_PruneReindexingLMHead``, so the assistant's ``generate``
  applies the main call's processors to those logits only), hence hf-bench's.

Both are lossless: the drafted token is sampled from exactly the ``q`` handed to verification, and
verification applies the same processors to the target (``tests/drafters/test_hetero_tli_order.py`` computes
the output law exactly for both). Their acceptance differs when a processor truncates: under top-k,
``after_restrict`` keeps k shared tokens where ``before_restrict`` keeps the shared ones among the
drafter's k most likely.
"""

from __future__ import annotations

from typing import Any

import torch

from methods.base import GammaPolicy
from methods.hetero.token_level import restrict_logits, tli_restrict, to_target
from runners.drafters.text_sync import CrossVocab
from runners.drafters.vocab_map import MappedDrafter
from runners.engine.base import Draft
from runners.engine.verify import Sampling, probs, sample
from specbench.config import check_choice
from specbench.config.method import TLI_PROCESSORS
from specbench.drafter_kinds import drafter


@drafter("tli", loads_model=True, asks_policy=True, method="cross_vocabulary_tli", own_vocabulary=True,
         auto_at="sampled", settings=("tli_processors",))
class TLIDrafter(MappedDrafter):
    """Algorithm 4 (Token-Level Intersection): sample from the drafter restricted to shared tokens;
    ``tli_processors``: whether the sampling processors act before or after the restriction
    (module docstring)."""

    name = "tli"

    def __init__(self, pair: CrossVocab, tli_processors: str = TLI_PROCESSORS[0]) -> None:
        check_choice("tli_processors", tli_processors, TLI_PROCESSORS)
        super().__init__(pair)
        self.tli_processors = tli_processors

    def tli_distribution(self, logits: torch.Tensor, sampling: Sampling) -> torch.Tensor | None:
        """The distribution TLI samples its draft id from (on draft ids, zero off the shared tokens,
        rows sum to 1), with the processors before or after the restriction (module docstring); None
        when the processors left no shared token (``before_restrict`` only)."""
        if not sampling.greedy and self.tli_processors == "after_restrict":
            return probs(restrict_logits(logits, self.mapping), sampling)
        processed = probs(logits, 1.0 if sampling.greedy else sampling)
        try:
            return tli_restrict(processed, self.mapping)
        except ValueError:  # no mass on the shared tokens: nothing to propose
            return None

    def tli_pick(
        self, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
    ) -> tuple[int, int, torch.Tensor | None, float] | None:
        """One TLI token from the draft model's logits: ``(draft id, target id, q on target ids or
        None at temperature 0, confidence)``; None when there is nothing to propose."""
        restricted = self.tli_distribution(logits, sampling)
        if restricted is None:
            return None
        d_tok = int(restricted.argmax()) if sampling.greedy else sample(restricted, generator)
        t_tok = int(self.d2t[d_tok])
        q = to_target(restricted, self.mapping)
        return d_tok, t_tok, (None if sampling.greedy else q), float(q[t_tok])

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, sampling: Sampling, generator: torch.Generator | None
    ) -> Draft:
        return self._draft_tokens(ids, max_tokens, policy, lambda logits: self.tli_pick(logits, sampling, generator))

    @classmethod
    def from_context(cls, ctx: Any) -> TLIDrafter:
        return cls(CrossVocab.of("tli", ctx), tli_processors=ctx.hetero.tli_processors)
