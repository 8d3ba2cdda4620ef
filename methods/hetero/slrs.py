"""String-Level Rejection Sampling, SLRS (Timor et al., Algorithm 3, Theorem 3.2, Sec. 3.3-3.4).

One SLRS step outputs one target token:

1. sample draft tokens ``d_1, d_2, ...`` autoregressively until the **lookahead rule**
   (Sec. 3.3) says stop: after ``max_lookahead`` draft tokens (the threshold ``K``;
   ``None`` = no threshold), or as soon as the first target token of the drafted string
   ``s = d_1 ... d_n`` is *determined*, or after a draft EOS;
2. the candidate ``t`` is the first target token of ``s`` under the paper's tokenization
   (the longest prefix of ``s`` that is a target token, Sec. 3 "Notation"); a draft EOS with
   nothing before it proposes the target EOS; no target token prefixes ``s`` -> no
   candidate (written ⊥ below; it is always rejected);
3. accept ``t`` with probability ``min(1, p(t) / ψ(t))`` where ``ψ(t)`` is the probability
   that steps 1-2 produce ``t``; on rejection sample from ``normalize(max(0, p - ψ))``.

This is standard speculative sampling with proposal ``ψ`` (plus the ⊥ outcome whose
``p`` is 0), hence lossless for any stopping rule, as long as ``ψ`` is computed by the
same rule that samples (Theorem 3.2).

*Determined*: the longest-prefix first token of ``s`` cannot change when more text is
appended iff no target token strictly longer than ``s`` starts with ``s``, i.e. ``s`` is
not a proper prefix of a target token. (Then a token longer than ``s`` cannot be a
prefix of ``s + x``, so the first token is the longest prefix of ``s`` already.) This is
the paper's "stop once the first target token has been determined"; with it the
threshold ``K`` is optional: the string grows with every non-empty draft token, so at
most ``max target token length`` draft tokens are ever needed.

Cost: ``ψ`` needs every draft sequence the rule can produce, i.e. one drafter evaluation
per internal node of the tree of Appendix C - exponential in the target token length
(Lemma 3.1: ``2^(n-1)`` segmentations of an ``n``-character token for a complete draft
vocabulary) and as many evaluations as there are target-token prefixes even for a
character-level drafter. ``max_nodes`` bounds that expansion: ``psi`` raises ``SLRSTooLarge``
(a ``ConfigError``) as soon as the nodes it has evaluated plus the nodes it has discovered and not
yet evaluated exceed it, i.e. before spending more than ``max_nodes`` drafter evaluations on a tree
that is larger than the bound; ``check_tree_size()`` refuses a vocabulary pair whose worst case
(every draft token possible) is larger, before any drafter call. A drafter with full support (a
softmax) reaches the worst case at every position; ``runners/drafters/slrs.py`` therefore proposes
from the drafter's ``draft_top_k`` most likely tokens (any drafter distribution is lossless, as long
as ``ψ`` is computed from the one that samples) and falls back to TLI for a round whose tree is
still too large (``methods.hetero.stats`` prints the Appendix C / Table 5 statistics of a pair).

The same class serves the exact evaluation on toy vocabularies (``step``, enumerated by
``methods.hetero.sampling``) and the real drafter (``psi_sparse`` with a ``draft_next`` that runs
the draft model on its KV cache): one implementation of ψ.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from methods.hetero.sampling import Chooser, bernoulli, normalize
from specbench.registry import ConfigError

DraftNext = Callable[[tuple[int, ...]], Any]
"""The drafter: draft ids drafted so far in this step -> distribution over draft ids (a sequence
of floats, or a 1-D tensor: only its non-zero entries are visited)."""


class SLRSTooLarge(ConfigError):
    """The ψ tree of one SLRS step has more internal nodes than ``max_nodes`` (the expansion bound)."""


def _support(q: Any) -> Iterator[tuple[int, float]]:
    """``(draft id, probability)`` of the entries of ``q`` with probability > 0."""
    if isinstance(q, torch.Tensor):
        idx = q.nonzero().flatten()
        yield from zip(idx.tolist(), q[idx].double().tolist(), strict=True)
        return
    for d, qd in enumerate(q):
        if qd > 0.0:
            yield d, float(qd)


BOTTOM = None  # no candidate: no target token is a prefix of the drafted string


class SLRS:
    """Algorithm 3 over explicit token strings.

    ``draft_strings[d]`` / ``target_strings[t]``: the string of each id (``None`` = a token
    with no text: a draft one ends the step with no candidate, a target one is never a
    candidate). ``draft_eos_ids`` end the step; ``target_eos_id`` is proposed for an
    immediate draft EOS. ``max_lookahead``: the threshold ``K`` (``None``: none).
    ``max_nodes``: the most drafter evaluations one step may need (the refusal limit).
    """

    def __init__(
        self,
        draft_strings: Sequence[str | None],
        target_strings: Sequence[str | None],
        draft_eos_ids: Iterable[int] = (),
        target_eos_id: int | None = None,
        max_lookahead: int | None = None,
        max_nodes: int = 10_000,
    ) -> None:
        if max_lookahead is not None and max_lookahead < 1:
            raise ConfigError(f"SLRS max_lookahead must be >= 1 or None, got {max_lookahead}")
        self.draft_strings = list(draft_strings)
        self.target_size = len(target_strings)
        self.draft_eos = set(draft_eos_ids)
        self.target_eos_id = target_eos_id
        self.max_lookahead = max_lookahead
        self.max_nodes = int(max_nodes)
        for d, s in enumerate(self.draft_strings):
            if s == "" and d not in self.draft_eos:
                raise ValueError(f"draft token {d} has an empty string: give it None (no text) instead")
        self.target_id: dict[str, int] = {}
        for t, s in enumerate(target_strings):
            if s:
                self.target_id.setdefault(s, t)
        self.max_target_len = max((len(s) for s in self.target_id), default=0)
        self._sorted = sorted(self.target_id)  # ``determined`` by bisection (no set of all prefixes)

    # ------------------------------------------------------------------ the rule
    def first_token(self, s: str) -> int | None:
        """The longest prefix of ``s`` that is a target token (the paper's tokenization), or ⊥."""
        for k in range(min(len(s), self.max_target_len), 0, -1):
            t = self.target_id.get(s[:k])
            if t is not None:
                return t
        return BOTTOM

    def determined(self, s: str) -> bool:
        """``s`` is not a proper prefix of a target token. (The first string after ``s`` in sorted
        order starts with ``s`` iff some longer string does: every ``s + x`` sorts before any other
        string greater than ``s``.)"""
        i = bisect.bisect_right(self._sorted, s)
        return not (i < len(self._sorted) and self._sorted[i].startswith(s))

    def advance(self, s: str, n: int, d: int) -> tuple[str, bool, int | None]:
        """Append draft token ``d`` (the ``n``-th of the step): ``(string, stop?, candidate)``."""
        if d in self.draft_eos:
            return s, True, (self.target_eos_id if s == "" else self.first_token(s))
        text = self.draft_strings[d]
        if text is None:
            return s, True, BOTTOM
        s = s + text
        if self.determined(s) or (self.max_lookahead is not None and n >= self.max_lookahead):
            return s, True, self.first_token(s)
        return s, False, None

    # ------------------------------------------------------------------ ψ and the step
    def _refuse_text(self, what: str) -> str:
        return (
            f"SLRS refused: {what} more than max_nodes={self.max_nodes} drafter evaluations for one target "
            f"token (target tokens up to {self.max_target_len} characters, lookahead K={self.max_lookahead}); "
            f"the enumeration of psi grows exponentially with token length (Timor et al., Lemma 3.1). "
            f"Use a drafter with shorter tokens, a smaller max_lookahead or draft_top_k, or hetero=slem / tli."
        )

    def psi_sparse(self, draft_next: DraftNext) -> tuple[dict[int, float], float, int]:
        """``({target id: ψ}, mass of ⊥, drafter evaluations)``, exactly, by walking the tree depth
        first (the order a drafter with a KV cache prefers: a child right after its parent). Raises
        ``SLRSTooLarge`` once evaluated + discovered nodes exceed ``max_nodes``."""
        psi: dict[int, float] = {}
        bottom = 0.0
        evaluations = 0
        stack: list[tuple[tuple[int, ...], str, float]] = [((), "", 1.0)]
        while stack:
            seq, s, prob = stack.pop()
            evaluations += 1
            for d, qd in _support(draft_next(seq)):
                s2, stop, cand = self.advance(s, len(seq) + 1, d)
                if not stop:
                    stack.append(((*seq, d), s2, prob * qd))
                elif cand is BOTTOM:
                    bottom += prob * qd
                else:
                    psi[cand] = psi.get(cand, 0.0) + prob * qd
            if evaluations + len(stack) > self.max_nodes:
                raise SLRSTooLarge(self._refuse_text("psi needs"))
        return psi, bottom, evaluations

    def psi(self, draft_next: DraftNext) -> tuple[list[float], float, int]:
        """``(ψ over target ids, mass of ⊥, drafter evaluations)`` (``psi_sparse``, dense)."""
        sparse, bottom, evaluations = self.psi_sparse(draft_next)
        dense = [0.0] * self.target_size
        for t, v in sparse.items():
            dense[t] = v
        return dense, bottom, evaluations

    def tree_size(self, limit: int | None = None) -> int:
        """Drafter evaluations ``psi`` needs when every draft token has positive probability
        (internal nodes of the tree), counted up to ``limit`` (default ``max_nodes``) + 1."""
        limit = self.max_nodes if limit is None else limit
        texts = [d for d, s in enumerate(self.draft_strings) if s is not None and d not in self.draft_eos]
        count = 0
        stack: list[tuple[str, int]] = [("", 0)]
        while stack:
            s, n = stack.pop()
            count += 1
            if count > limit:
                return count
            for d in texts:
                s2, stop, _ = self.advance(s, n + 1, d)
                if not stop:
                    stack.append((s2, n + 1))
        return count

    def check_tree_size(self) -> int:
        """Refuse (``ConfigError``) before any drafter call if the worst case exceeds ``max_nodes``."""
        n = self.tree_size()
        if n > self.max_nodes:
            raise SLRSTooLarge(self._refuse_text("the worst case needs"))
        return n

    def draft(self, draft_next: DraftNext, chooser: Chooser) -> tuple[tuple[int, ...], int | None]:
        """Steps 1-2: the drafted ids and the candidate target id (``None`` = ⊥)."""
        seq: tuple[int, ...] = ()
        s = ""
        while True:
            d = chooser.choice(list(draft_next(seq)))
            seq = (*seq, d)
            s, stop, cand = self.advance(s, len(seq), d)
            if stop:
                return seq, cand

    def step(self, p: Sequence[float], draft_next: DraftNext, chooser: Chooser) -> tuple[bool, int]:
        """One SLRS step against target distribution ``p``: ``(accepted, target token)``."""
        if len(p) != self.target_size:
            raise ValueError(f"target distribution has {len(p)} entries, vocabulary {self.target_size}")
        _, cand = self.draft(draft_next, chooser)
        psi, _, _ = self.psi(draft_next)
        if cand is not BOTTOM and psi[cand] <= 0.0:
            raise RuntimeError(f"candidate {cand} was sampled but psi gives it no mass: psi and sampling disagree")
        if cand is not BOTTOM and bernoulli(chooser, min(1.0, float(p[cand]) / psi[cand])):
            return True, cand
        return False, chooser.choice(normalize([max(0.0, float(a) - b) for a, b in zip(p, psi, strict=True)]))

    def acceptance_probability(self, p: Sequence[float], draft_next: DraftNext) -> float:
        """``sum_t min(p(t), ψ(t))``."""
        psi, _, _ = self.psi(draft_next)
        return float(sum(min(float(a), b) for a, b in zip(p, psi, strict=True)))


def top_k_proposal(q: torch.Tensor, k: int | None) -> torch.Tensor:
    """The drafter's proposal truncated to its ``k`` most likely tokens and renormalised (``None``:
    ``q`` itself). A drafter may propose from any distribution (SLRS stays lossless as long as ψ is
    computed from the one that samples); a small support keeps the ψ tree small."""
    if k is None or k >= q.shape[-1]:
        return q
    vals, idx = q.topk(int(k), dim=-1)
    out = torch.zeros_like(q)
    out.scatter_(-1, idx, vals / vals.sum(dim=-1, keepdim=True))
    return out
