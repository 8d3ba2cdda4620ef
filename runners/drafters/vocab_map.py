"""What the drafters that map token ids by string share (TLI, union, SLRS): the token strings and
the draft -> target mapping of ``methods.hetero.vocab`` (computed once per tokenizer / pair of
tokenizers: a few seconds for a 262k vocabulary) on the text sync of ``runners.drafters.text_sync``,
and the target's logits width (ids at or past it are outside the target's vocabulary:
``runners.engine.base``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy
from methods.hetero.vocab import VocabMapping, build_vocab_mapping, token_strings
from methods.rules import take_drafts
from runners.drafters.text_sync import CrossVocab, TextSyncedDrafter
from runners.engine.base import Draft
from specbench.models import logits_width
from specbench.registry import ConfigError

_STRINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAPPINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached_strings(tokenizer: Any, width: int) -> list[str | None]:
    """``token_strings(tokenizer, width)``, once per tokenizer object and width."""
    per_tok = _STRINGS.setdefault(tokenizer, {})
    if width not in per_tok:
        per_tok[width] = token_strings(tokenizer, width)
    return per_tok[width]


def cached_mapping(
    draft_tokenizer: Any, target_tokenizer: Any, draft_width: int, target_width: int, draft_eos: tuple[int, ...], target_eos: int
) -> VocabMapping:
    """``build_vocab_mapping``, once per pair of tokenizer objects (and widths, EOS ids)."""
    inner = _MAPPINGS.setdefault(target_tokenizer, weakref.WeakKeyDictionary())
    per_draft = inner.setdefault(draft_tokenizer, {})
    key = (draft_width, target_width, draft_eos, target_eos)
    if key not in per_draft:
        per_draft[key] = build_vocab_mapping(
            draft_tokenizer, target_tokenizer, draft_width, target_width, draft_eos, [target_eos],
            draft_strings=cached_strings(draft_tokenizer, draft_width),
            target_strings=cached_strings(target_tokenizer, target_width),
        )
    return per_draft[key]


def drafter_mapping(drafter: TextSyncedDrafter, target_vocab_size: int) -> VocabMapping:
    """The mapping of a text-synced drafter's pair (its draft EOS ids to the target's EOS), cached."""
    return cached_mapping(drafter.dtok.tok, drafter.ttok.tok, logits_width(drafter.model), int(target_vocab_size),
                          tuple(sorted(drafter.draft_eos)), drafter.target_eos)


def overlap_summary(mapping: VocabMapping, target_tokenizer: Any, draft_tokenizer: Any) -> dict[str, Any]:
    """The vocabulary overlap of a pair (Timor et al. Tables 8-9, by the mapping's string rule; the
    EOS pair counts as shared): sizes (``len(tokenizer)``), shared target ids, and the ratios."""
    shared = mapping.intersection_size
    target, draft = len(target_tokenizer), len(draft_tokenizer)
    return {
        "target_vocab": target,
        "draft_vocab": draft,
        "shared": shared,
        "shared_over_target": shared / target if target else None,
        "shared_over_draft": shared / draft if draft else None,
    }


class MappedDrafter(TextSyncedDrafter):
    """A text-synced drafter with the string mapping of its pair (``self.mapping``; its index tensors
    on the draft model's device: ``self.index``; ``self.d2t``) and the target's logits width
    (``self.target_vocab_size``)."""

    def __init__(self, pair: CrossVocab) -> None:
        super().__init__(pair)
        if pair.target_vocab_size is None:
            raise ValueError(f"{self.name}: CrossVocab.target_vocab_size (the target's logits width) is needed")
        self.target_vocab_size = int(pair.target_vocab_size)
        self.draft_width = logits_width(pair.draft_model)
        self.mapping: VocabMapping = pair.mapping or drafter_mapping(self, self.target_vocab_size)
        if self.mapping.target_vocab_size != self.target_vocab_size:
            raise ValueError("mapping.target_vocab_size != target_vocab_size")
        if self.mapping.tensors().shared_draft.numel() == 0:
            raise ConfigError(f"{self.name}: the draft and target vocabularies share no token string")
        self.index = self.mapping.tensors(self.device)
        self.d2t = self.mapping.draft_to_target.to(self.device)

    def _draft_tokens(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy,
        pick: Callable[[Any], tuple[int, int, Any, float] | None],
    ) -> Draft:
        """The token-level rules' draft loop (TLI, union): ``pick(logits)`` gives ``(draft id, proposed id,
        q on target ids or None, confidence)``, or None when it can propose nothing there (the draft ends
        before that position). ``methods.rules.take_drafts`` stops the round: after the target's EOS (the
        mapping sends the draft's EOS there), after an id outside the target's vocabulary (union's draft-only
        tokens), or when the policy says so."""
        feed = self._first_feed(ids)
        forwards0 = self.forwards
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        confs: list[float] = []

        def proposals(feed: list[int]) -> Iterator[DraftStep]:
            for _ in range(max_tokens):
                picked = pick(self._forward(feed))
                if picked is None:
                    return
                d_tok, tok, q, conf = picked
                tokens.append(tok)
                confs.append(conf)
                if q is not None:
                    qs.append(q)
                feed = [d_tok]
                yield DraftStep(len(tokens), tok, conf, budget=max_tokens)

        take_drafts(proposals(feed), policy, self.eos, max_tokens, vocab=self.target_vocab_size)
        return Draft(tokens, torch.stack(qs) if qs else None, confs, forwards=self.forwards - forwards0)
