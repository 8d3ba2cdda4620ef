"""Token-level verification across vocabularies: TLI (Algorithm 4) and the union baseline (Algorithm 1).

Timor et al., Sec. 2 and 4 (Theorem 4.1). With target ``p`` over ``T`` and drafter ``q`` over ``D``:

* **union** (Alg. 1) extends both distributions to ``T ∪ D`` by zeros and runs standard
  speculative sampling there: a drafted token outside ``T`` has ``p = 0`` and is always
  rejected; the residual ``max(0, p - q)`` is zero outside ``T``, so only target tokens
  are ever output. Acceptance: ``sum_{x in T∩D} min(p(x), q(x))``.
* **TLI** (Alg. 4) restricts ``q`` to ``T ∩ D`` and renormalises,
  ``q'(x) = q(x) / sum_{y in T∩D} q(y)``, then runs standard speculative sampling over ``T``.
  Acceptance ``sum min(p, q') >= `` union's because ``q' >= q`` on ``T∩D`` (Theorem 4.1).

Both are lossless because the verification is the standard one and the token is drawn
from exactly the distribution handed to it.

**One implementation.** The three functions below are the whole mathematics, used both by the
exact evaluators here (``tli_step``, ``union_step``, enumerated by ``methods.hetero.sampling``) and
by the real drafters (``runners/drafters/tli.py``, ``union.py``, and ``slrs.py``'s fallback):

* ``tli_restrict(q)``: ``q'`` on draft ids (zero off the intersection, rows sum to 1): the drafter
  samples its draft id from it; ``restrict_logits`` is the same restriction on logits, for the
  drafter that applies the sampling processors after it (``hetero.tli_processors``);
* ``to_target(q)``: the mass of every draft id moved onto its target id (draft-only mass dropped,
  no renormalisation; several draft ids with one string add up): what verification compares ``p``
  with — ``to_target(tli_restrict(q))`` for TLI, ``to_target(q)`` (union's part on ``T``) for union;
* ``UnionSpace``: ``T ∪ D`` indexed as target ids, then the draft-only ids: a drafted draft-only
  token is the id ``|T| + k``, an id the target's logits do not have; the loop
  (``runners.engine.speculative``) rejects it without feeding it to the target.

Distributions are torch tensors (float64 in the exact tests, float32 in the drafters); the target
side is indexed by target ids, the draft side by draft ids, linked by ``VocabMapping``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.hetero.sampling import Chooser, verify_token
from methods.hetero.vocab import VocabMapping, VocabTensors


def _tensors(draft_probs: torch.Tensor, mapping: VocabMapping) -> VocabTensors:
    if draft_probs.shape[-1] != mapping.draft_vocab_size:
        raise ValueError(f"draft distribution has {draft_probs.shape[-1]} entries, mapping {mapping.draft_vocab_size}")
    return mapping.tensors(draft_probs.device)


def tli_restrict(draft_probs: torch.Tensor, mapping: VocabMapping) -> torch.Tensor:
    """Algorithm 4's drafter on draft ids: ``q`` zeroed outside ``T ∩ D`` and renormalised
    (``[..., draft_vocab]``, rows sum to 1). Raises ``ValueError`` if a row puts no mass on the
    intersection (TLI cannot propose anything there)."""
    t = _tensors(draft_probs, mapping)
    kept = draft_probs * t.shared_mask
    mass = kept.sum(dim=-1, keepdim=True)
    if bool((mass <= 0).any()):
        raise ValueError("the drafter puts no probability on the shared vocabulary")
    return kept / mass


def restrict_logits(draft_logits: torch.Tensor, mapping: VocabMapping) -> torch.Tensor:
    """The drafter's logits with every draft id outside ``T ∩ D`` set to ``-inf`` (float32): a softmax
    of them (after any processors) is zero off the intersection. The order transformers uses for TLI:
    restrict, then process (``generation/utils.py``, ``GenerationMixin._get_candidate_generator``
    prunes the assistant's LM head to the shared tokens, ``candidate_generator.py``,
    ``_PruneReindexingLMHead``, before its ``generate`` applies the processors); ``-inf`` entries
    leave the processors' choice among the shared tokens unchanged (top-k / top-p / typical-p
    never keep them over a finite logit)."""
    t = _tensors(draft_logits, mapping)
    scores = draft_logits.float()
    return scores.masked_fill(~t.shared_mask.bool(), float("-inf"))


def to_target(draft_probs: torch.Tensor, mapping: VocabMapping) -> torch.Tensor:
    """``out[..., t] = sum_{d -> t} draft_probs[..., d]`` over target ids ``[..., target_vocab]``
    (mass on draft-only ids is dropped, nothing is renormalised)."""
    t = _tensors(draft_probs, mapping)
    out = torch.zeros((*draft_probs.shape[:-1], t.target_vocab_size), dtype=draft_probs.dtype, device=draft_probs.device)
    out.index_add_(-1, t.shared_target, draft_probs.index_select(-1, t.shared_draft))
    return out


def tli_distribution(draft_probs: torch.Tensor, mapping: VocabMapping) -> torch.Tensor:
    """Algorithm 4's drafter distribution on target ids: ``q'(t) = sum_{d -> t} q(d) / sum_{d shared} q(d)``."""
    return to_target(tli_restrict(draft_probs, mapping), mapping)


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
        """The union index of every draft id: its target id, or ``|T| + k`` for the k-th draft-only id."""
        t = self.mapping.tensors()
        out = self.mapping.draft_to_target.clone()
        out[t.draft_only] = self.mapping.target_vocab_size + torch.arange(t.draft_only.numel(), dtype=torch.long)
        return out

    @property
    def size(self) -> int:
        return self.mapping.target_vocab_size + int(self.mapping.tensors().draft_only.numel())

    def extend_target(self, p: torch.Tensor) -> torch.Tensor:
        """``p`` over ``T ∪ D``: zero on draft-only tokens."""
        out = torch.zeros((*p.shape[:-1], self.size), dtype=p.dtype, device=p.device)
        out[..., : p.shape[-1]] = p
        return out

    def extend_draft(self, q: torch.Tensor) -> torch.Tensor:
        """``q`` over ``T ∪ D``: ``to_target(q)`` on ``T`` (zero on target-only tokens), then the draft-only mass."""
        only = self.mapping.tensors(q.device).draft_only
        return torch.cat([to_target(q, self.mapping), q.index_select(-1, only)], dim=-1)


def union_step(p: torch.Tensor, draft_probs: torch.Tensor, mapping: VocabMapping, chooser: Chooser) -> tuple[bool, int]:
    """One position of Algorithm 1: standard speculative sampling over ``T ∪ D``.

    Returns a union index; it is a target id whenever the result can be output (always,
    since rejected draft-only tokens are replaced from a residual that is zero outside ``T``).
    """
    space = UnionSpace(mapping)
    pu, qu = space.extend_target(p), space.extend_draft(draft_probs)
    x = chooser.choice(qu.tolist())
    return verify_token(pu.tolist(), qu.tolist(), x, chooser)
