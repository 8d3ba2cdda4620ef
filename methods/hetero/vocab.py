"""Vocabulary mapping between two tokenizers by token *string* (Timor et al., Sec. 4).

The rule (used by TLI, the union baseline, SLRS and ``methods.hetero.stats``):

* The string of token ``i`` is the text it adds when decoded **after** a fixed anchor token:
  ``decode([anchor, i])`` minus ``decode([anchor])`` (``skip_special_tokens=False``,
  ``clean_up_tokenization_spaces=False``). Decoding after an anchor keeps the leading
  space of ``'Ġthe'`` (byte-level BPE) and ``'▁the'`` (SentencePiece) even where a
  decoder strips the first token's space, so ``'Ġthe'`` of one tokenizer and ``'▁the'``
  of another both read ``' the'`` and match. Raw vocabulary entries are never compared.
  The anchor is the single token that encodes ``"a"``; without one, tokens are decoded alone.
* Not mapped (string ``None``): special tokens (BOS/EOS/PAD/chat markers: they are paired
  explicitly, e.g. EOS to EOS, never by their text), tokens that decode to ``''``, and
  byte-fallback / partial UTF-8 byte tokens that decode to the replacement character
  ``'\\ufffd'`` (different bytes would otherwise collide on ``'\\ufffd'``), and ids past
  ``len(tokenizer)`` (padding rows of an embedding matrix).
* Two ids of one vocabulary with the same string: on the target side the id the target
  tokenizer itself produces for that string wins (``encode(s) == [id]``), else the
  smallest id. Several draft ids may map to one target id; probabilities then add up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

REPLACEMENT_CHAR = "\ufffd"


def anchor_id(tokenizer: Any) -> int | None:
    try:
        ids = tokenizer.encode("a", add_special_tokens=False)
    except Exception:  # pragma: no cover - exotic tokenizers
        return None
    return int(ids[0]) if len(ids) == 1 else None


def token_strings(tokenizer: Any, size: int | None = None) -> list[str | None]:
    """The string of every id ``0..size-1`` (default ``len(tokenizer)``) by the module's rule."""
    n_tok = len(tokenizer)
    size = n_tok if size is None else int(size)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special.update(i for i, t in added.items() if getattr(t, "special", False))
    ids = list(range(min(size, n_tok)))
    kw = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    anchor = anchor_id(tokenizer)
    if anchor is not None:
        head = tokenizer.decode([anchor], **kw)
        pairs = tokenizer.batch_decode([[anchor, i] for i in ids], **kw)
        alone = None
    else:
        head, pairs = "", None
        alone = tokenizer.batch_decode([[i] for i in ids], **kw)
    raw = tokenizer.convert_ids_to_tokens(ids)
    out: list[str | None] = []
    for i in ids:
        if pairs is not None and pairs[i].startswith(head):
            s = pairs[i][len(head):]
        else:
            s = alone[i] if alone is not None else tokenizer.decode([i], **kw)
        if i in special or s == "" or (REPLACEMENT_CHAR in s and REPLACEMENT_CHAR not in str(raw[i])):
            out.append(None)
        else:
            out.append(s)
    out.extend([None] * (size - len(out)))
    return out


def string_to_id(strings: Sequence[str | None], canonical: dict[str, int] | None = None) -> dict[str, int]:
    """``string -> id``; on duplicates ``canonical[s]`` wins if given, else the smallest id."""
    table: dict[str, int] = {}
    for i, s in enumerate(strings):
        if s is not None and s not in table:
            table[s] = i
    for s, i in (canonical or {}).items():
        if s in table and strings[i] == s:
            table[s] = i
    return table


def _canonical_ids(tokenizer: Any, strings: Sequence[str | None]) -> dict[str, int]:
    """For strings shared by several ids: the id ``tokenizer.encode(s)`` returns, if a single one."""
    seen: dict[str, int] = {}
    dup: set[str] = set()
    for s in strings:
        if s is not None:
            if s in seen:
                dup.add(s)
            seen[s] = 1
    out: dict[str, int] = {}
    for s in dup:
        ids = tokenizer.encode(s, add_special_tokens=False)
        if len(ids) == 1:
            out[s] = int(ids[0])
    return out


@dataclass(frozen=True)
class VocabTensors:
    """A mapping's index tensors on one device (what the drafters and the exact evaluators index with).

    ``shared_draft``: draft ids whose string is a target token (ascending); ``shared_target``: their
    target ids (same order); ``shared_mask``: ``[draft_vocab]`` bool; ``draft_only``: the other draft
    ids (ascending)."""

    shared_draft: torch.Tensor
    shared_target: torch.Tensor
    shared_mask: torch.Tensor
    draft_only: torch.Tensor
    target_vocab_size: int


@dataclass(frozen=True)
class VocabMapping:
    """``draft_to_target[d]`` = the target id with the same string as draft id ``d``, or -1.

    ``target_vocab_size`` is the width of the target's distribution (its logits).
    """

    draft_to_target: torch.Tensor  # int64 [draft_vocab]
    target_vocab_size: int
    _per_device: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        d2t = self.draft_to_target
        if d2t.dtype != torch.long or d2t.dim() != 1:
            raise ValueError("draft_to_target must be a 1-D int64 tensor")
        if d2t.numel() and int(d2t.max()) >= self.target_vocab_size:
            raise ValueError("draft_to_target has ids >= target_vocab_size")

    def tensors(self, device: Any = None) -> VocabTensors:
        """The index tensors on ``device`` (built once per device)."""
        key = str(torch.device(device) if device is not None else self.draft_to_target.device)
        out = self._per_device.get(key)
        if out is None:
            d2t = self.draft_to_target.to(key)
            mask = d2t >= 0
            shared = torch.nonzero(mask, as_tuple=False).flatten()
            out = VocabTensors(shared, d2t[shared], mask, torch.nonzero(~mask, as_tuple=False).flatten(),
                               self.target_vocab_size)
            self._per_device[key] = out
        return out

    @property
    def draft_vocab_size(self) -> int:
        return int(self.draft_to_target.numel())

    @property
    def shared_draft_ids(self) -> torch.Tensor:
        """Draft ids whose string is also a target token (index tensor for restricting logits)."""
        return self.tensors().shared_draft

    @property
    def shared_target_ids(self) -> torch.Tensor:
        return self.tensors().shared_target

    @property
    def intersection_size(self) -> int:
        """Distinct target ids with a string in the draft vocabulary (``|T ∩ D|``)."""
        return int(torch.unique(self.shared_target_ids).numel())

    def target_to_draft(self) -> dict[int, int]:
        """One draft id per mapped target id (the smallest)."""
        out: dict[int, int] = {}
        for d, t in enumerate(self.draft_to_target.tolist()):
            if t >= 0 and t not in out:
                out[t] = d
        return out


def mapping_from_strings(
    draft_strings: Sequence[str | None],
    target_strings: Sequence[str | None],
    target_vocab_size: int | None = None,
    eos_pairs: Iterable[tuple[int, int]] = (),
    target_canonical: dict[str, int] | None = None,
) -> VocabMapping:
    """The mapping for two lists of token strings (``None`` = not mappable).

    ``eos_pairs``: explicit ``(draft_id, target_id)`` pairs added on top (e.g. EOS to EOS).
    """
    table = string_to_id(target_strings, target_canonical)
    d2t = [table.get(s, -1) if s is not None else -1 for s in draft_strings]
    for d, t in eos_pairs:
        if 0 <= d < len(d2t):
            d2t[d] = int(t)
    size = len(target_strings) if target_vocab_size is None else int(target_vocab_size)
    return VocabMapping(torch.tensor(d2t, dtype=torch.long), size)


def build_vocab_mapping(
    draft_tokenizer: Any,
    target_tokenizer: Any,
    draft_vocab_size: int | None = None,
    target_vocab_size: int | None = None,
    draft_eos_ids: Iterable[int] = (),
    target_eos_ids: Iterable[int] = (),
    draft_strings: Sequence[str | None] | None = None,
    target_strings: Sequence[str | None] | None = None,
) -> VocabMapping:
    """The string mapping of two real tokenizers; every draft EOS maps to the first target EOS.

    ``*_vocab_size``: widths of the models' logits (may exceed ``len(tokenizer)``). ``*_strings``:
    the ``token_strings`` of each side when already computed (for those widths).
    """
    t_strings = list(target_strings) if target_strings is not None else token_strings(target_tokenizer, target_vocab_size)
    d_strings = list(draft_strings) if draft_strings is not None else token_strings(draft_tokenizer, draft_vocab_size)
    target_eos = sorted(set(target_eos_ids))
    pairs = [(int(d), target_eos[0]) for d in set(draft_eos_ids)] if target_eos else []
    return mapping_from_strings(
        d_strings,
        t_strings,
        target_vocab_size if target_vocab_size is not None else len(t_strings),
        pairs,
        _canonical_ids(target_tokenizer, t_strings),
    )
