"""SLEM (Timor et al., Algorithm 2: string-level exact match), a drafter with another tokenizer.

Greedy drafting, ``q=None``: draft up to
``max_tokens`` draft tokens, decode them to new text ``X`` (a trailing incomplete UTF-8
character dropped), and re-tokenize with the **look-behind alignment**: re-encode the text
of the last ``lookbehind`` accepted target tokens followed by ``X``, find the token
boundary of that re-encoding where the accepted text ends (prefix decodes compared as
strings), and propose the tokens after it. If the re-encoding has no boundary there (the
last accepted token would merge with the new text, or the tokenizer normalises the
window), the proposal is the target tokenization of ``X`` alone (``encode_piece``). This
compares text, not token ids, so it also aligns when the accepted tokens are not the
target tokenizer's own encoding of their text (``['▁q', 'u']`` for ``'▁qu'``), which the
paper's token-level longest-overlap search would miss or misplace. A drafted EOS is
proposed as the target's EOS. ``confidences[j]`` = product of the draft probabilities of
the draft tokens whose text overlaps target token ``j`` (``policy.stop_drafting(step)`` is asked
after every *draft* token with that token's probability).

**What γ counts** (``slem_gamma``, ``hetero.slem_gamma``; ``Drafter.limits``):

* ``draft_tokens`` (the default): a round drafts γ *draft* tokens and proposes every target token
  their text re-tokenizes into; the loop verifies them all, cut only to the round's budget
  (``max_new_tokens`` − new tokens − 1, the loop adding one target token itself). This is
  transformers' rule (``generation/candidate_generator.py``,
  ``AssistedCandidateGeneratorDifferentTokenizers.get_candidates``: ``max_new_tokens =
  num_assistant_tokens`` for the assistant's ``generate``, the new target ids cut to the main
  model's ``max_length`` only, ``_process_assistant_outputs``), so hf-bench's and Timor et al.'s. A
  round may verify more than γ target tokens (a drafter whose tokens are longer than the
  target's) or fewer. transformers may verify one more candidate in the last round (up to the
  budget itself, its bonus token then cut: ``generation/utils.py``, ``_assisted_decoding``,
  ``tokens_budget``); here the budget's last token is always the target's own, which changes no
  output.
* ``target_tokens``: ``min(γ, budget)`` draft tokens, the proposal cut to as many target tokens
  (the earlier rule): the text past γ target tokens is drafted and thrown away.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy
from methods.hetero.vocab import REPLACEMENT_CHAR
from methods.rules import take_drafts
from runners.drafters.text_sync import CrossVocab, TextSyncedDrafter
from runners.engine.base import Draft
from runners.engine.verify import Sampling, probs
from specbench.config import check_choice
from specbench.config.method import SLEM_GAMMA
from specbench.drafter_kinds import drafter


@drafter("slem", loads_model=True, asks_policy=True, method="cross_vocabulary_slem", own_vocabulary=True,
         auto_at="greedy", settings=("slem_gamma",))
class SLEMDrafter(TextSyncedDrafter):
    """Algorithm 2 (String-Level Exact Match): greedy draft tokens, re-tokenized into target ids;
    ``slem_gamma``: what γ counts (module docstring)."""

    name = "slem"

    def __init__(self, pair: CrossVocab, slem_gamma: str = SLEM_GAMMA[0]) -> None:
        check_choice("slem_gamma", slem_gamma, SLEM_GAMMA)
        super().__init__(pair)
        self.slem_gamma = slem_gamma

    def limits(self, gamma: int, room: int) -> tuple[int, int]:
        """``draft_tokens``: γ draft tokens, every target token kept up to ``room``; ``target_tokens``:
        ``min(γ, room)`` of both (module docstring)."""
        if self.slem_gamma == "target_tokens":
            return super().limits(gamma, room)
        return max(0, int(gamma)), max(0, int(room))

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, sampling: Sampling, generator: torch.Generator | None
    ) -> Draft:
        feed = self._first_feed(ids)
        forwards0 = self.forwards
        drafted: list[int] = []
        confs: list[float] = []

        def proposals(feed: list[int]) -> Iterator[DraftStep]:
            """One greedy *draft* token per forward; the policy is asked about draft tokens (module docstring)."""
            for _ in range(max_tokens):
                logits = self._forward(feed)
                tok = int(logits.argmax())
                p = torch.softmax(logits.float(), dim=-1) if sampling.greedy else probs(logits, sampling)
                drafted.append(tok)
                confs.append(float(p[tok]))
                feed = [tok]
                yield DraftStep(len(drafted), tok, confs[-1], budget=max_tokens)

        take_drafts(proposals(feed), policy, self.draft_eos, max_tokens)  # methods.rules
        ended = bool(drafted) and drafted[-1] in self.draft_eos
        body = drafted[:-1] if ended else drafted
        tokens, spans = self.to_target(body)
        # confidence of target token j: product over the draft tokens whose text overlaps it
        ctx = self.d_ids[-self.lookbehind:]
        dl = self.dtok.prefix_lengths(ctx + body)[len(ctx):]
        d_spans = [(dl[i] - dl[0], dl[i + 1] - dl[0]) for i in range(len(body))]
        confidences = []
        for a, b in spans:
            c = 1.0
            for (x, y), pr in zip(d_spans, confs, strict=False):
                if x < b and y > a:
                    c *= pr
            confidences.append(c)
        if ended:
            tokens.append(self.target_eos)
            confidences.append(confs[-1])
        if self.slem_gamma == "target_tokens":  # γ counts target tokens: the rest of the text is thrown away
            tokens, confidences = tokens[:max_tokens], confidences[:max_tokens]
        return Draft(tokens, None, confidences, forwards=self.forwards - forwards0)

    def to_target(self, draft_tokens: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
        """Target ids for the text of ``draft_tokens`` after the accepted sequence (look-behind
        alignment, module docstring) and each one's character span in that new text."""
        if not draft_tokens:
            return [], []
        ctx = self.d_ids[-self.lookbehind:]
        full, head = self.dtok.text(ctx + draft_tokens), self.dtok.text(ctx)
        new_text = full[len(head):] if full.startswith(head) else self.dtok.text(draft_tokens)
        new_text = new_text.rstrip(REPLACEMENT_CHAR)  # an incomplete UTF-8 character at the end
        if not new_text:
            return [], []
        window_text = self.ttok.text(self.t_ids[-self.lookbehind:])
        w = self.ttok.encode_piece(window_text + new_text)
        lengths = self.ttok.prefix_lengths(w)
        n = len(window_text)
        for j in range(len(w)):
            if lengths[j] > n:
                break
            if lengths[j] == n and self.ttok.text(w[:j]) == window_text:
                return w[j:], [(lengths[i] - n, lengths[i + 1] - n) for i in range(j, len(w))]
        c = self.ttok.encode_piece(new_text)  # no boundary where the accepted text ends
        cl = self.ttok.prefix_lengths(c)
        return c, [(cl[i], cl[i + 1]) for i in range(len(c))]

    @classmethod
    def from_context(cls, ctx: Any) -> SLEMDrafter:
        return cls(CrossVocab.of("slem", ctx), slem_gamma=ctx.hetero.slem_gamma)
