"""Token-level verification across vocabularies: TLI (Algorithm 4) and the union baseline (Algorithm 1).

Timor et al., Sec. 2 and 4. With target ``p`` over ``T`` and drafter ``q`` over ``D``:

* **union** (Alg. 1) extends both distributions to ``T ∪ D`` by zeros and runs standard
  speculative sampling there: a drafted token outside ``T`` has ``p = 0`` and is always
  rejected; the residual ``max(0, p - q)`` is zero outside ``T``, so only target tokens
  are ever output. Acceptance: ``sum_{x in T∩D} min(p(x), q(x))``.
* **TLI** (Alg. 4) restricts ``q`` to ``T ∩ D`` and renormalises,
  ``q'(x) = q(x) / sum_{y in T∩D} q(y)``, then runs standard speculative sampling over ``T``.
  Acceptance ``sum min(p, q') >= `` union's because ``q' >= q`` on ``T∩D`` (Theorem 4.1).

Both are lossless because the verification is the standard one and the token is drawn
from exactly the distribution handed to it. Distributions here are torch tensors
(float64 in the exact tests, float32 in the drafters); the target side is indexed by
target ids, the draft side by draft ids, linked by ``VocabMapping.draft_to_target``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.hetero.sampling import Chooser, verify_token
from methods.hetero.vocab import VocabMapping


def tli_distribution(draft_probs: torch.Tensor, mapping: VocabMapping) -> torch.Tensor:
    """Algorithm 4's drafter distribution, moved onto target ids: ``[..., target_vocab]``.

    ``q'(t) = sum_{d -> t} q(d) / sum_{d shared} q(d)``; rows sum to 1. Raises ``ValueError``
    if a row puts no mass on the intersection (TLI cannot propose anything there).
    """
    d2t = mapping.draft_to_target
    if draft_probs.shape[-1] != d2t.numel():
        raise ValueError(f"draft distribution has {draft_probs.shape[-1]} entries, mapping {d2t.numel()}")
    shared = mapping.shared_draft_ids.to(draft_probs.device)
    kept = draft_probs.index_select(-1, shared)
    mass = kept.sum(dim=-1, keepdim=True)
    if bool((mass <= 0).any()):
        raise ValueError("the drafter puts no probability on the shared vocabulary")
    out = torch.zeros((*draft_probs.shape[:-1], mapping.target_vocab_size), dtype=draft_probs.dtype, device=draft_probs.device)
    out.index_add_(-1, d2t[shared].to(draft_probs.device), kept / mass)
    return out


def tli_logits_index(mapping: VocabMapping) -> tuple[torch.Tensor, torch.Tensor]:
    """``(shared_draft_ids, their target ids)``: restrict drafter logits with
    ``logits[..., shared_draft_ids]`` (no model surgery), softmax, and scatter into the
    target vocabulary at ``target ids`` - the same distribution as ``tli_distribution``."""
    shared = mapping.shared_draft_ids
    return shared, mapping.draft_to_target[shared]


def tli_step(p: torch.Tensor, draft_probs: torch.Tensor, mapping: VocabMapping, chooser: Chooser) -> tuple[bool, int]:
    """One TLI position: ``x ~ q'``, then standard verification against ``p`` (target ids)."""
    q = tli_distribution(draft_probs, mapping)
    x = chooser.choice(q.tolist())
    return verify_token(p.tolist(), q.tolist(), x, chooser)


@dataclass(frozen=True)
class UnionSpace:
    """``T ∪ D`` indexed as target ids ``0..|T|-1`` then the draft-only tokens, in draft-id order."""

    mapping: VocabMapping

    @property
    def draft_to_union(self) -> torch.Tensor:
        d2t = self.mapping.draft_to_target
        only = d2t < 0
        out = d2t.clone()
        out[only] = self.mapping.target_vocab_size + torch.arange(int(only.sum()), dtype=torch.long)
        return out

    @property
    def size(self) -> int:
        return self.mapping.target_vocab_size + int((self.mapping.draft_to_target < 0).sum())

    def extend_target(self, p: torch.Tensor) -> torch.Tensor:
        """``p`` over ``T ∪ D``: zero on draft-only tokens."""
        out = torch.zeros((*p.shape[:-1], self.size), dtype=p.dtype, device=p.device)
        out[..., : p.shape[-1]] = p
        return out

    def extend_draft(self, q: torch.Tensor) -> torch.Tensor:
        """``q`` over ``T ∪ D``: zero on target-only tokens (mass of duplicate strings adds up)."""
        out = torch.zeros((*q.shape[:-1], self.size), dtype=q.dtype, device=q.device)
        out.index_add_(-1, self.draft_to_union.to(q.device), q)
        return out


def union_step(p: torch.Tensor, draft_probs: torch.Tensor, mapping: VocabMapping, chooser: Chooser) -> tuple[bool, int]:
    """One position of Algorithm 1: standard speculative sampling over ``T ∪ D``.

    Returns a union index; it is a target id whenever the result can be output (always,
    since rejected draft-only tokens are replaced from a residual that is zero outside ``T``).
    """
    space = UnionSpace(mapping)
    pu, qu = space.extend_target(p), space.extend_draft(draft_probs)
    x = chooser.choice(qu.tolist())
    return verify_token(pu.tolist(), qu.tolist(), x, chooser)
