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
character-level drafter. ``SLRS`` refuses (``ConfigError``) when that tree has more than
``max_nodes`` internal nodes - before any drafter call with ``check_tree_size()``, or
while enumerating. Practical only for toy vocabularies or a short-token drafter with a
small target vocabulary; ``methods.hetero.check_supported`` refuses it for real model
pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from methods.hetero.sampling import Chooser, bernoulli, normalize
from specbench.registry import ConfigError

DraftNext = Callable[[tuple[int, ...]], Sequence[float]]
"""The drafter: draft ids drafted so far in this step -> distribution over draft ids."""

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
        self.open_prefixes = {s[:k] for s in self.target_id for k in range(len(s))}  # proper prefixes, incl. ""

    # ------------------------------------------------------------------ the rule
    def first_token(self, s: str) -> int | None:
        """The longest prefix of ``s`` that is a target token (the paper's tokenization), or ⊥."""
        for k in range(min(len(s), self.max_target_len), 0, -1):
            t = self.target_id.get(s[:k])
            if t is not None:
                return t
        return BOTTOM

    def determined(self, s: str) -> bool:
        return s not in self.open_prefixes

    def _advance(self, s: str, n: int, d: int) -> tuple[str, bool, int | None]:
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
    def _refuse(self, what: str) -> ConfigError:
        return ConfigError(
            f"SLRS refused: {what} more than max_nodes={self.max_nodes} drafter evaluations for one target "
            f"token (target tokens up to {self.max_target_len} characters, lookahead K={self.max_lookahead}); "
            f"the enumeration of psi grows exponentially with token length (Timor et al., Lemma 3.1). "
            f"Use a drafter with shorter tokens, a smaller max_lookahead, or method=slem / tli."
        )

    def psi(self, draft_next: DraftNext) -> tuple[list[float], float, int]:
        """``(ψ over target ids, mass of ⊥, drafter evaluations)``, exactly, by walking the tree."""
        psi = [0.0] * self.target_size
        bottom = 0.0
        evaluations = 0
        stack: list[tuple[tuple[int, ...], str, float]] = [((), "", 1.0)]
        while stack:
            seq, s, prob = stack.pop()
            evaluations += 1
            if evaluations > self.max_nodes:
                raise self._refuse("psi needs")
            q = draft_next(seq)
            for d, qd in enumerate(q):
                if qd <= 0.0:
                    continue
                s2, stop, cand = self._advance(s, len(seq) + 1, d)
                if not stop:
                    stack.append(((*seq, d), s2, prob * float(qd)))
                elif cand is BOTTOM:
                    bottom += prob * float(qd)
                else:
                    psi[cand] += prob * float(qd)
        return psi, bottom, evaluations

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
                s2, stop, _ = self._advance(s, n + 1, d)
                if not stop:
                    stack.append((s2, n + 1))
        return count

    def check_tree_size(self) -> int:
        """Refuse (``ConfigError``) before any drafter call if the worst case exceeds ``max_nodes``."""
        n = self.tree_size()
        if n > self.max_nodes:
            raise self._refuse("the worst case needs")
        return n

    def draft(self, draft_next: DraftNext, chooser: Chooser) -> tuple[tuple[int, ...], int | None]:
        """Steps 1-2: the drafted ids and the candidate target id (``None`` = ⊥)."""
        seq: tuple[int, ...] = ()
        s = ""
        while True:
            d = chooser.choice(list(draft_next(seq)))
            seq = (*seq, d)
            s, stop, cand = self._advance(s, len(seq), d)
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
