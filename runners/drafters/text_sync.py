"""The text sync shared by the drafters whose model has another tokenizer than the target
(SLEM, ``runners.drafters.slem``; TLI, ``runners.drafters.tli``; Timor et al.).

Both keep the draft model's own token sequence and KV cache in sync with the *text* of
the target's sequence, then propose **target** ids to the ordinary loop
(``runners.engine.speculative``), which verifies them as any draft. The draft model is never
modified (TLI restricts its logits with an index tensor; no head pruning), so a loaded
model can be shared with later jobs.

Text sync (both drafters; ``commit`` after every round):

* the sequence's text = ``decode(prompt)`` + ``decode(generated)`` with the target
  tokenizer (special tokens skipped; generated text decoded after an anchor token so a
  SentencePiece decoder keeps its first space, see ``methods.hetero.vocab``);
* the draft sequence = the draft tokens already there, up to ``lookbehind`` tokens before
  the end of the text they covered, + the draft tokenizer's re-encoding of the text from
  there on (a token before the new text may merge with it, hence the look-behind); a
  draft tokenizer that does not round-trip that text (non-injective) re-encodes it all;
  a piece of text encoded in the middle of a sequence loses the space a Llama-style
  tokenizer prepends to whatever it encodes (``Detokenizer.encode_piece``);
* the draft cache is cropped to the longest common prefix of what it holds and the new
  draft sequence; the next ``propose`` feeds the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from methods.hetero.vocab import anchor_id, token_strings
from runners.drafters.model import common_prefix_len
from runners.engine.base import Drafter
from runners.engine.graphs import forward_logits
from runners.engine.kv import crop_to, new_cache
from specbench.models import eos_ids, model_device
from specbench.registry import ConfigError

DEFAULT_LOOKBEHIND = 10  # tokens; transformers' target_lookbehind / assistant_lookbehind default


class Detokenizer:
    """Decodes id sequences to the text they add after an anchor token (keeps leading spaces)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.anchor = anchor_id(tokenizer)
        self.head = self._raw([]) if self.anchor is not None else ""
        self._strings: dict[str, int] | None = None  # token string -> smallest id, built on first need

    def _raw(self, ids: list[int]) -> str:
        pre = [self.anchor] if self.anchor is not None else []
        return self.tok.decode(pre + list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _cut(self, s: str, ids: list[int]) -> str:
        if s.startswith(self.head):
            return s[len(self.head):]
        return self.tok.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def text(self, ids: list[int]) -> str:
        return self._cut(self._raw(ids), ids) if ids else ""

    def prefix_lengths(self, ids: list[int]) -> list[int]:
        """``len(text(ids[:k]))`` for ``k = 0..len(ids)``, in one batch."""
        pre = [self.anchor] if self.anchor is not None else []
        batch = [pre + list(ids[:k]) for k in range(1, len(ids) + 1)]
        texts = self.tok.batch_decode(batch, skip_special_tokens=True, clean_up_tokenization_spaces=False) if batch else []
        return [0] + [len(self._cut(s, ids[:k + 1])) for k, s in enumerate(texts)]

    def encode(self, text: str, special: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=special).input_ids)

    def encode_piece(self, text: str) -> list[int]:
        """Ids for ``text`` *continuing* a sequence. A Llama-style tokenizer prepends a space to
        whatever it encodes (``'ick'`` -> ``'▁ick'``); when that is all that differs, the spurious
        space is removed: a lone space token is dropped, a merged first token is replaced by the
        token with its string minus the space (if there is one)."""
        ids = self.encode(text)
        if not ids or not text:
            return ids
        got = self.text(ids)
        if got == text or got != " " + text:
            return ids
        first = self.text(ids[:1])
        if first == " ":
            return ids[1:]
        if self._strings is None:
            self._strings = {s: i for i, s in reversed(list(enumerate(token_strings(self.tok)))) if s is not None}
        tid = self._strings.get(first[1:])
        return [tid, *ids[1:]] if tid is not None else ids


@dataclass(frozen=True)
class CrossVocab:
    """What every cross-vocabulary drafter (SLEM, TLI, union, SLRS) is built from, written once: the draft model and
    its tokenizer; the target's tokenizer, EOS ids and logits width (``target_vocab_size``: the string-mapping
    drafters need it, SLEM does not); the draft's EOS ids (None: the draft model's own); the look-behind window
    (``hetero.lookbehind``); a string mapping already built (None: ``runners.drafters.vocab_map`` builds it once
    per pair of tokenizers). A rule's own knobs (``slem_gamma``, ``tli_processors``, SLRS's bounds) are its
    constructor's keywords."""

    draft_model: Any
    draft_tokenizer: Any
    target_tokenizer: Any
    eos_token_ids: Iterable[int]
    target_vocab_size: int | None = None
    draft_eos_token_ids: Iterable[int] | None = None
    lookbehind: int = DEFAULT_LOOKBEHIND
    mapping: Any = None

    @classmethod
    def of(cls, name: str, ctx: Any) -> CrossVocab:
        """From a job's ``runners.drafters.DrafterContext``, for the drafter ``name`` (which needs the draft model)."""
        need_model(name, ctx)
        return cls(ctx.draft_model, ctx.draft_tokenizer, ctx.target_tokenizer, ctx.eos_token_ids,
                   ctx.target_vocab_size, lookbehind=ctx.hetero.lookbehind)


class TextSyncedDrafter(Drafter):
    """A draft model with its own tokenizer, kept in sync with the target's text (module docstring)."""

    def __init__(self, pair: CrossVocab) -> None:
        lookbehind = pair.lookbehind
        if isinstance(lookbehind, bool) or not isinstance(lookbehind, int) or lookbehind < 1:
            raise ConfigError(f"lookbehind must be an integer >= 1, got {lookbehind!r}")
        self.model = pair.draft_model
        self.device = model_device(pair.draft_model)
        self.dtok = Detokenizer(pair.draft_tokenizer)
        self.ttok = Detokenizer(pair.target_tokenizer)
        self.eos = sorted(set(int(e) for e in pair.eos_token_ids))
        if not self.eos:
            raise ValueError("eos_token_ids (the target's) must not be empty")
        target_eos = pair.target_tokenizer.eos_token_id
        self.target_eos = target_eos if target_eos in self.eos else self.eos[0]
        draft_eos = pair.draft_eos_token_ids
        self.draft_eos = set(draft_eos) if draft_eos is not None else set(eos_ids(pair.draft_model, pair.draft_tokenizer))
        self.lookbehind = lookbehind
        self.cache: Any = None
        self.t_ids: list[int] = []
        self.forwards = 0  # draft model forwards so far (``Draft.forwards`` reports a round's share)

    # ------------------------------------------------------------------ text sync
    def begin(self, prompt_ids: list[int]) -> None:
        self.cache = new_cache(self.model)
        self.cached: list[int] = []  # draft ids whose states the cache holds
        self.t_ids = list(prompt_ids)
        self.n_prompt = len(prompt_ids)
        self.prompt_text = self.ttok.tok.decode(prompt_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        self.gen_text = ""
        plain = self.dtok.encode(self.prompt_text)
        with_special = self.dtok.encode(self.prompt_text, special=True)
        n_extra = len(with_special) - len(plain)
        bos = getattr(self.dtok.tok, "bos_token_id", None)
        if n_extra >= 0 and with_special[n_extra:] == plain:
            prefix = with_special[:n_extra]  # BOS and friends; a tokenizer appending EOS gets none
        else:
            prefix = [bos] if bos is not None and with_special[:1] == [bos] else []
        if not prefix and not plain:  # an empty prompt text: start from a BOS or an EOS
            prefix = [bos if bos is not None else min(self.draft_eos or {0})]
        self.n_special = len(prefix)
        ids = prefix + plain
        self.d_ids = ids
        self.d_ends = self._ends(ids, self.prompt_text, 0)

    def _ends(self, ids: list[int], text: str, base: int) -> list[int]:
        """Character end (in the sequence text) of the last ``2 lookbehind + 2`` of ``ids``, whose
        text is ``text`` starting at ``base``; -1 where unknown (not needed, or no round trip).
        ``commit`` needs the end of the token ``lookbehind`` before the last; the margin covers
        a re-encoding that came out shorter than the one before."""
        m = min(len(ids), 2 * self.lookbehind + 2)
        tail = ids[len(ids) - m:]
        lengths = self.dtok.prefix_lengths(tail)
        tail_text = self.dtok.text(tail)
        out = [-1] * (len(ids) - m)
        if text.endswith(tail_text):
            start = base + len(text) - len(tail_text)
            out += [start + n for n in lengths[1:]]
        else:
            out += [-1] * m
        return out

    def commit(self, ids: list[int]) -> None:
        ids = list(ids)
        if self.cache is None or len(ids) < self.n_prompt or ids[: self.n_prompt] != self.t_ids[: self.n_prompt]:
            self.begin(ids)
            return
        self.t_ids = ids
        old_len = len(self.prompt_text) + len(self.gen_text)
        gen_text = self.ttok.text(ids[self.n_prompt:])
        common = len(self.prompt_text) + len(_common_prefix(self.gen_text, gen_text))
        self.gen_text = gen_text
        text = self.prompt_text + gen_text
        if common == old_len and len(text) == old_len:
            return
        # keep draft tokens up to `lookbehind` before the end of the still-valid text
        k0 = max(len(self.d_ids) - self.lookbehind, self.n_special)
        while k0 > self.n_special and not (0 <= self.d_ends[k0 - 1] <= common):
            if self.d_ends[k0 - 1] < 0:  # end unknown (no round trip): re-encode everything
                k0 = self.n_special
                break
            k0 -= 1
        start = self.d_ends[k0 - 1] if k0 > self.n_special else 0
        new = self.dtok.encode_piece(text[start:]) if start > 0 else self.dtok.encode(text)
        self.d_ids = self.d_ids[:k0] + new
        self.d_ends = self.d_ends[:k0] + self._ends(new, text[start:], start)
        n = common_prefix_len(self.cached, self.d_ids)
        if n < len(self.cached):
            crop_to(self.cache, n)
            self.cached = self.cached[:n]

    @torch.inference_mode()
    def next_logits(self, ids: list[int]) -> torch.Tensor:
        """The draft model's logits for the token after the text of ``ids`` (target ids; the drafter is
        synced on that text first, its cache reused), without drafting."""
        return self._forward(self._first_feed(list(ids)))

    def _forward(self, feed: list[int]) -> torch.Tensor:
        """Feed tokens the cache has not seen; the logits after the last one."""
        logits = forward_logits(self.model, self.cache, feed, 1, self.device)  # engine.draft_compile: compiled
        self.cached.extend(feed)
        self.forwards += 1
        return logits[0, -1]

    def _crop(self, n: int) -> None:
        """Keep the first ``n`` cached draft tokens."""
        if n < len(self.cached):
            crop_to(self.cache, n)
            self.cached = self.cached[:n]

    def _forward_after(self, base: int, path: list[int]) -> torch.Tensor:
        """The logits after ``cached[:base] + path`` (``path`` non-empty): the cache is cropped to
        what it shares with that sequence and the rest is fed (one token when ``path`` extends the
        last one by a token, as in a depth-first walk)."""
        want = self.cached[:base] + list(path)
        self._crop(min(common_prefix_len(self.cached, want), len(want) - 1))
        return self._forward(want[len(self.cached):])

    def _first_feed(self, ids: list[int]) -> list[int]:
        if self.cache is None:
            self.begin(ids)
        elif ids != self.t_ids:
            self.commit(ids)
        n = min(common_prefix_len(self.cached, self.d_ids), len(self.d_ids) - 1)
        if n < len(self.cached):
            crop_to(self.cache, n)
            self.cached = self.cached[:n]
        return self.d_ids[n:]


def _common_prefix(a: str, b: str) -> str:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]


def need_model(name: str, ctx: Any) -> None:
    """A cross-vocabulary drafter needs the draft model and its tokenizer."""
    if ctx.draft_model is None or ctx.draft_tokenizer is None:
        raise ConfigError(f"drafter {name!r} needs a draft model with its tokenizer (pair.draft.kind: model)")
