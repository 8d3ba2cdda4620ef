"""Prompt lookup decoding: draft by copying what followed an earlier occurrence of
the sequence's last n-gram (Saxena 2023, github.com/apoorvumang/prompt-lookup-decoding;
transformers' ``generate(prompt_lookup_num_tokens=...)``).

Match rule (the same as transformers' ``PromptLookupCandidateGenerator``):

* try n = ``max_ngram_size`` down to ``min_ngram_size`` (and never more than
  ``len(ids) - 1``); the first n with a match wins, so longer n-grams take priority;
* a match is an earlier occurrence of the last n tokens, *including the prompt and
  the output so far*; the trailing n-gram itself does not count (it has nothing
  after it);
* with ``match="first"`` (the default, as transformers) the *earliest* occurrence
  in the sequence is used; ``match="last"`` uses the most recent one instead;
* the proposal is up to ``max_tokens`` tokens that follow the match, cut at the
  end of the sequence (a match near the end proposes fewer tokens);
* no match: an empty draft (the loop then does a plain target step).

Where it differs from transformers: transformers drops an EOS and everything after
it from the candidates; here the draft *keeps* the EOS as its last token (the
``Drafter`` contract: stop after drafting an EOS), so the target can accept it and
end the sequence one round earlier. transformers also only searches down to n = 1;
``min_ngram_size`` > 1 refuses shorter matches.

Registered as the ``prompt_lookup`` drafter (``DRAFTERS``; a pair's ``draft.kind``), built
from the options of the pair's ``draft`` node: ``max_ngram_size``, ``min_ngram_size``, ``match``.

The draft is deterministic: ``q=None`` (one-hot for speculative sampling, which
keeps it lossless) and no confidences, so ``policy.stop_drafting`` is never asked.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from methods.base import GammaPolicy
from methods.rules import cut_proposal
from runners.engine.base import Draft, OptionsDrafter
from runners.engine.verify import Sampling
from specbench.drafter_kinds import drafter

MATCH_RULES = ("first", "last")


@drafter("prompt_lookup", loads_model=False, asks_policy=False, method="ngram", trace="prompt_lookup",
         draft_cost="free")
class PromptLookupDrafter(OptionsDrafter):
    name = "prompt_lookup"

    def __init__(
        self,
        max_ngram_size: int = 2,
        min_ngram_size: int = 1,
        eos_token_ids: Iterable[int] | int | None = (),
        match: str = "first",
    ) -> None:
        for key, value in (("max_ngram_size", max_ngram_size), ("min_ngram_size", min_ngram_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
        if min_ngram_size > max_ngram_size:
            raise ValueError(f"min_ngram_size ({min_ngram_size}) > max_ngram_size ({max_ngram_size})")
        if match not in MATCH_RULES:
            raise ValueError(f"match must be one of {MATCH_RULES}, got {match!r}")
        self.max_ngram_size = max_ngram_size
        self.min_ngram_size = min_ngram_size
        self.match = match
        if eos_token_ids is None:
            eos_token_ids = ()
        elif isinstance(eos_token_ids, int):
            eos_token_ids = (eos_token_ids,)
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)

    OPTIONS = ("max_ngram_size", "min_ngram_size", "match")
    LABEL = "prompt lookup"

    def lookup(self, ids: list[int], max_tokens: int) -> list[int]:
        """The tokens to propose after ``ids`` (empty when nothing matches)."""
        if hasattr(ids, "tolist"):  # a tensor or an array
            ids = ids.tolist()
        length = len(ids)
        if max_tokens < 1 or length < 2:
            return []
        seq = np.fromiter(ids, dtype=np.int64, count=length)
        for n in range(min(self.max_ngram_size, length - 1), self.min_ngram_size - 1, -1):
            # hit[i]: seq[i:i+n] equals the last n tokens, for the starts i < length - n
            # that have at least one token after them (i = length - n is the n-gram itself).
            hit = np.ones(length - n, dtype=bool)
            for k in range(n):
                hit &= seq[k : k + length - n] == seq[length - n + k]
            starts = np.flatnonzero(hit)
            if starts.size:
                i = int(starts[0] if self.match == "first" else starts[-1])
                # the round's stop rule (methods.rules): cut after an EOS, kept, and to max_tokens
                return cut_proposal(seq[i + n : min(i + n + max_tokens, length)].tolist(), self.eos_token_ids,
                                    max_tokens)
        return []

    def propose(
        self,
        ids: list[int],
        max_tokens: int,
        policy: GammaPolicy,
        sampling: Sampling,
        generator: torch.Generator | None,
    ) -> Draft:
        return Draft(tokens=self.lookup(ids, max_tokens), q=None, confidences=[])
