"""Drafters whose model has another tokenizer than the target: SLEM and TLI (Timor et al.).

Both keep the draft model's own token sequence and KV cache in sync with the *text* of
the target's sequence, then propose **target** ids to the ordinary loop
(``runners.speculative``), which verifies them as any draft. The draft model is never
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

SLEM (Algorithm 2, string-level exact match; greedy drafting, ``q=None``): draft up to
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
the draft tokens whose text overlaps target token ``j`` (``policy.stop_drafting`` is asked
after every *draft* token with that token's probability).

TLI (Algorithm 4, token-level intersection): the draft distribution restricted to the
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

from methods.base import GammaPolicy
from methods.hetero import check_supported  # noqa: F401 - re-exported for the job's validation
from methods.hetero.vocab import REPLACEMENT_CHAR, VocabMapping, anchor_id, build_vocab_mapping, token_strings
from runners.base import Draft, Drafter
from runners.drafters import DRAFTERS, common_prefix_len, logits_width
from runners.kv import crop_to, new_cache
from runners.verify import probs, sample
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


def eos_of(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    for value in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return sorted(ids)


class TextSyncedDrafter(Drafter):
    """A draft model with its own tokenizer, kept in sync with the target's text (module docstring)."""

    def __init__(
        self,
        draft_model: Any,
        draft_tokenizer: Any,
        target_tokenizer: Any,
        eos_token_ids: Iterable[int],
        draft_eos_token_ids: Iterable[int] | None = None,
        lookbehind: int = DEFAULT_LOOKBEHIND,
    ) -> None:
        if isinstance(lookbehind, bool) or not isinstance(lookbehind, int) or lookbehind < 1:
            raise ConfigError(f"lookbehind must be an integer >= 1, got {lookbehind!r}")
        self.model = draft_model
        self.device = next(draft_model.parameters()).device
        self.dtok = Detokenizer(draft_tokenizer)
        self.ttok = Detokenizer(target_tokenizer)
        self.eos = sorted(set(int(e) for e in eos_token_ids))
        if not self.eos:
            raise ValueError("eos_token_ids (the target's) must not be empty")
        self.target_eos = target_tokenizer.eos_token_id if target_tokenizer.eos_token_id in self.eos else self.eos[0]
        self.draft_eos = set(draft_eos_token_ids) if draft_eos_token_ids is not None else set(eos_of(draft_model, draft_tokenizer))
        self.lookbehind = lookbehind
        self.cache: Any = None
        self.t_ids: list[int] = []

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

    def _forward(self, feed: list[int]) -> torch.Tensor:
        """Feed tokens the cache has not seen; the logits after the last one."""
        inp = torch.tensor([feed], device=self.device)
        out = self.model(input_ids=inp, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.cached.extend(feed)
        return out.logits[0, -1]

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


class SLEMDrafter(TextSyncedDrafter):
    """Algorithm 2 (String-Level Exact Match): greedy draft tokens, re-tokenized into target ids."""

    name = "slem"

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, temperature: float, generator: torch.Generator | None
    ) -> Draft:
        feed = self._first_feed(ids)
        drafted: list[int] = []
        confs: list[float] = []
        for _ in range(max_tokens):
            logits = self._forward(feed)
            tok = int(logits.argmax())
            p = probs(logits, temperature) if temperature > 0 else torch.softmax(logits.float(), dim=-1)
            drafted.append(tok)
            confs.append(float(p[tok]))
            feed = [tok]
            if tok in self.draft_eos or policy.stop_drafting(confs[-1]):
                break
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
        return Draft(tokens[:max_tokens], None, confidences[:max_tokens])

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
            if d_tok in self.draft_eos or t_tok in self.eos or policy.stop_drafting(confs[-1]):
                break
        return Draft(tokens, torch.stack(qs) if qs else None, confs)


def _lookbehind(method_cfg: Any) -> int:
    value = method_cfg.get("lookbehind", DEFAULT_LOOKBEHIND) if method_cfg is not None else DEFAULT_LOOKBEHIND
    return DEFAULT_LOOKBEHIND if value is None else value


def _need_model(name: str, draft_model: Any, draft_tokenizer: Any) -> None:
    if draft_model is None or draft_tokenizer is None:
        raise ConfigError(f"drafter {name!r} needs a draft model with its tokenizer (pair.draft.kind: model)")


@DRAFTERS.register("slem")
def _slem(*, draft_model: Any, draft_tokenizer: Any, target_tokenizer: Any, eos_token_ids: Iterable[int],
          method_cfg: Any = None, **_: Any) -> Drafter:
    _need_model("slem", draft_model, draft_tokenizer)
    return SLEMDrafter(draft_model, draft_tokenizer, target_tokenizer, eos_token_ids, lookbehind=_lookbehind(method_cfg))


@DRAFTERS.register("tli")
def _tli(*, draft_model: Any, draft_tokenizer: Any, target_tokenizer: Any, eos_token_ids: Iterable[int],
         target_vocab_size: int, method_cfg: Any = None, **_: Any) -> Drafter:
    _need_model("tli", draft_model, draft_tokenizer)
    return TLIDrafter(draft_model, draft_tokenizer, target_tokenizer, eos_token_ids, target_vocab_size,
                      lookbehind=_lookbehind(method_cfg))


def _refused(name: str) -> Any:
    def factory(**_: Any) -> Drafter:
        check_supported({"drafter": name}, {"draft": {"kind": "model"}})
        raise ConfigError(f"drafter {name!r} is not available for real models")  # pragma: no cover

    return factory


for _name in ("slrs", "union"):
    DRAFTERS.add(_name, _refused(_name))
