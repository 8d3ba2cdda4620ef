"""A hybrid drafter: prompt lookup when the sequence repeats itself, a draft model otherwise.

``HybridDrafter(model_drafter, lookup)`` proposes, each round:

1. the prompt-lookup continuation of the sequence's last n-gram (``runners.drafters.prompt_lookup``:
   same match rule, n from ``max_ngram_size`` down to ``min_ngram_size``) when it has at least
   ``min_lookup_tokens`` tokens — free to propose, no model forward;
2. else the draft model's own tokens (``runners.drafters.model.ModelDrafter``), at most
   ``max_model_tokens`` of them when that is set (a model token costs a forward; a lookup token
   costs nothing, so a round may verify more looked-up tokens than model tokens).

The draft model's KV cache follows the sequence whatever proposed the round: ``commit`` crops
it to the accepted prefix, and the next model round feeds the tokens it has not seen (after a
lookup round: the accepted tokens and the target's own, in one forward). Lookup rounds are
deterministic (``q=None``, no confidences: ``policy.stop_drafting`` is not asked), model rounds
are the model's, so both verification rules stay lossless round by round.

Registered as the ``hybrid`` drafter (``DRAFTERS``; a pair's ``draft.kind: hybrid``). The pair's
``draft`` node composes the draft model (``conf/model/*.yaml``: its spec becomes
``DraftConfig.model``) and holds the options, checked before any model loads (``check_options``):
the lookup's ``max_ngram_size``, ``min_ngram_size``, ``match``, plus ``min_lookup_tokens``
(default 1) and ``max_model_tokens`` (default null: γ).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from methods.base import GammaPolicy
from runners.drafters.model import ModelDrafter
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.engine.base import Draft, Drafter
from runners.engine.verify import Sampling
from specbench.config import check_int
from specbench.drafter_kinds import drafter
from specbench.registry import ConfigError

OPTIONS = ("min_lookup_tokens", "max_model_tokens")


@drafter("hybrid", loads_model=True, asks_policy=True, method="hybrid_ngram_draft_model", trace="hybrid")
class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, model_drafter: ModelDrafter, lookup: PromptLookupDrafter, min_lookup_tokens: int = 1,
                 max_model_tokens: int | None = None) -> None:
        if isinstance(min_lookup_tokens, bool) or not isinstance(min_lookup_tokens, int) or min_lookup_tokens < 1:
            raise ValueError(f"min_lookup_tokens must be an integer >= 1, got {min_lookup_tokens!r}")
        if max_model_tokens is not None and (isinstance(max_model_tokens, bool) or not isinstance(max_model_tokens, int)
                                             or max_model_tokens < 1):
            raise ValueError(f"max_model_tokens must be an integer >= 1 or null, got {max_model_tokens!r}")
        self.model = model_drafter
        self.lookup = lookup
        self.min_lookup_tokens = int(min_lookup_tokens)
        self.max_model_tokens = None if max_model_tokens is None else int(max_model_tokens)
        self.lookup_rounds = 0
        self.model_rounds = 0

    def begin(self, prompt_ids: list[int]) -> None:
        self.model.begin(prompt_ids)

    def propose(
        self,
        ids: list[int],
        max_tokens: int,
        policy: GammaPolicy,
        sampling: Sampling,
        generator: torch.Generator | None,
    ) -> Draft:
        tokens = self.lookup.lookup(ids, max_tokens)
        if len(tokens) >= self.min_lookup_tokens:
            self.lookup_rounds += 1
            return Draft(tokens, None, [], forwards=0)  # no draft-model forward (records' draft_forwards)
        self.model_rounds += 1
        budget = max_tokens if self.max_model_tokens is None else min(max_tokens, self.max_model_tokens)
        return self.model.propose(ids, budget, policy, sampling, generator)

    def commit(self, ids: list[int]) -> None:
        self.model.commit(ids)

    # ------------------------------------------------------------------ built from a pair's draft node
    @staticmethod
    def _split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the lookup's options, the hybrid's own) of a pair's ``draft`` node."""
        own = {k: options[k] for k in OPTIONS if k in options}
        return {k: v for k, v in options.items() if k not in OPTIONS}, own

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        known = (*PromptLookupDrafter.OPTIONS, *OPTIONS)
        unknown = sorted(set(options) - set(known) - {"name"})
        if unknown:
            raise ConfigError(f"pair.draft: a hybrid draft has no setting {unknown[0]!r}; its settings: {', '.join(known)}")
        lookup, own = cls._split(options)
        PromptLookupDrafter.check_options(lookup)
        check_int("pair.draft.min_lookup_tokens", own.get("min_lookup_tokens", 1), 1)
        check_int("pair.draft.max_model_tokens", own.get("max_model_tokens"), 1, optional=True)

    @classmethod
    def trace_parts(cls, options: Mapping[str, Any], eos_token_ids: Any) -> tuple[PromptLookupDrafter, dict[str, Any]]:
        """``(its prompt lookup, its own settings)`` from a pair's ``draft`` options: what the replay lab's hybrid
        trace needs (``runners.replay.trace.hybrid_of``) besides the draft model's rollouts."""
        lookup, own = cls._split(options)
        return PromptLookupDrafter.from_options(lookup, eos_token_ids), own

    @classmethod
    def from_context(cls, ctx: Any) -> HybridDrafter:
        if ctx.draft_model is None:
            raise ConfigError("the hybrid drafter needs a draft model (pair.draft composes one from conf/model/)")
        lookup, own = cls._split(ctx.options)
        return cls(ModelDrafter(ctx.draft_model, ctx.eos_token_ids),
                   PromptLookupDrafter.from_options(lookup, ctx.eos_token_ids),
                   min_lookup_tokens=own.get("min_lookup_tokens") or 1,
                   max_model_tokens=own.get("max_model_tokens"))
