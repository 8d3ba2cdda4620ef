"""SLRS (Timor et al., Algorithm 3: string-level rejection sampling), a drafter with another tokenizer.

Each drafted position is one SLRS step (``methods.hetero.SLRS``, the same object the exact
evaluation enumerates): the draft model drafts draft tokens until the Sec. 3.3 lookahead says the
first target token of their text is determined (or after ``max_lookahead`` tokens, or a draft EOS);
that first target token (longest prefix) is the candidate, ⊥ when no target token prefixes the
text. The position is verified by standard speculative sampling with proposal ψ = the exact
distribution of the candidate, so SLRS is lossless (Theorem 3.2). A round chains up to γ steps: step
``j`` drafts from the text of the sequence plus candidates ``1..j-1`` (the text sync of
``runners.drafters.text_sync``), so ψ_j is the candidate's law given everything before it, which is
all standard speculative sampling needs. ⊥ is proposed as the id ``target_vocab_size`` (outside the
target's vocabulary: rejected by the loop without feeding it, the replacement sampled from
``normalize(max(0, p - ψ))``) and ends the round.

**Computing ψ** walks the Appendix C tree depth first on the draft model's KV cache: one draft
forward per internal node (``TextSyncedDrafter._forward_after``: each node after its parent feeds one
token). With a full softmax every draft token is possible and the tree is the worst case of
``methods.hetero.stats`` (thousands of nodes per position on real vocabularies), so the drafter
proposes from its ``draft_top_k`` most likely tokens (``methods.hetero.slrs.top_k_proposal``; any
drafter distribution is lossless when ψ is computed from it). The candidate is drawn from ψ itself
(the law of Algorithm 3's sampled candidate, computed exactly: sampling the path again would change
nothing but the cost).

**The expansion bound and the fallback.** ``max_nodes`` caps the draft forwards one position may
spend on ψ (``hetero.max_nodes``). A position whose tree is larger (detected while walking it, after
at most ``max_nodes`` forwards) and every later position of that round use TLI (Algorithm 4, from the
root distribution already computed: ``runners.drafters.tli``): each position is verified against the
distribution its token was drawn from, so the round stays lossless. Such rounds are counted
(``Draft.fallback`` -> ``Record.fallback_rounds``).

**Temperature 0**: the draft model drafts greedily (its argmax, full vocabulary) until the
lookahead stops; the candidate is proposed deterministically (``q=None``) and verified by exact
match, so no ψ is needed (``confidences``: the product of the draft tokens' probabilities).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from methods.base import DraftStep, GammaPolicy
from methods.hetero.slrs import SLRS, SLRSTooLarge, top_k_proposal
from methods.rules import take_drafts
from runners.drafters.text_sync import CrossVocab
from runners.drafters.tli import TLIDrafter
from runners.drafters.vocab_map import cached_strings
from runners.engine.base import Draft
from runners.engine.verify import Sampling, probs, sample
from specbench.drafter_kinds import drafter


@drafter("slrs", loads_model=True, asks_policy=True, method="cross_vocabulary_slrs", own_vocabulary=True,
         settings=("max_nodes", "max_lookahead", "draft_top_k"), fallback="tli")
class SLRSDrafter(TLIDrafter):
    """Algorithm 3 per position, TLI (its fallback) past the expansion bound (module docstring)."""

    name = "slrs"

    def __init__(self, pair: CrossVocab, max_nodes: int = 32, max_lookahead: int | None = None,
                 draft_top_k: int | None = 8) -> None:
        super().__init__(pair)
        self.draft_top_k = draft_top_k
        self.rule = SLRS(
            cached_strings(pair.draft_tokenizer, self.draft_width),
            cached_strings(pair.target_tokenizer, self.target_vocab_size),
            draft_eos_ids=self.draft_eos,
            target_eos_id=self.target_eos,
            max_lookahead=max_lookahead,
            max_nodes=max_nodes,
        )
        self.bottom = self.target_vocab_size  # ⊥: an id outside the target's vocabulary

    # ------------------------------------------------------------------ one position
    def _greedy_candidate(self, logits: torch.Tensor) -> tuple[int, float]:
        """Temperature 0: the draft model's argmax path until the lookahead stops; ``(candidate, confidence)``."""
        base = len(self.cached)
        path: list[int] = []
        text, conf = "", 1.0
        while True:
            d_tok = int(logits.argmax())
            conf *= float(probs(logits, 1.0)[d_tok])
            path.append(d_tok)
            text, stop, cand = self.rule.advance(text, len(path), d_tok)
            if stop:
                return (self.bottom if cand is None else cand), conf
            logits = self._forward_after(base, path)

    def _psi(self, logits: torch.Tensor, sampling: Sampling) -> tuple[torch.Tensor, float]:
        """ψ at the context whose draft logits are ``logits`` (the tree's root): ``(ψ on target ids,
        float64, mass of ⊥)``; raises ``SLRSTooLarge`` past ``max_nodes``."""
        base = len(self.cached)
        root = top_k_proposal(probs(logits, sampling), self.draft_top_k)

        def draft_next(seq: tuple[int, ...]) -> torch.Tensor:
            if not seq:
                return root
            return top_k_proposal(probs(self._forward_after(base, list(seq)), sampling), self.draft_top_k)

        psi, bottom, _ = self.rule.psi_sparse(draft_next)
        q = torch.zeros(self.target_vocab_size, dtype=torch.float64)
        if psi:
            q[torch.tensor(list(psi), dtype=torch.long)] = torch.tensor(list(psi.values()), dtype=torch.float64)
        return q, bottom

    @torch.inference_mode()
    def psi_after(self, ids: list[int], sampling: Sampling | float) -> tuple[torch.Tensor, float]:
        """ψ for the position after ``ids`` (target ids): ``(ψ on target ids, mass of ⊥)``; ``sampling``: a
        ``Sampling`` or a bare temperature, > 0."""
        return self._psi(self.next_logits(ids), Sampling.of(sampling))

    def _sampled_candidate(
        self, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
    ) -> tuple[int, torch.Tensor, float]:
        """Temperature > 0: ``(candidate or ⊥, ψ on target ids, ψ(candidate))``; raises ``SLRSTooLarge``."""
        psi, bottom = self._psi(logits, sampling)
        cand = sample(torch.cat([psi, psi.new_tensor([bottom])]), generator)
        conf = bottom if cand == self.bottom else float(psi[cand])
        return cand, psi.to(device=self.device, dtype=torch.float32), conf

    @torch.inference_mode()
    def propose(
        self, ids: list[int], max_tokens: int, policy: GammaPolicy, sampling: Sampling, generator: torch.Generator | None
    ) -> Draft:
        forwards0 = self.forwards
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        confs: list[float] = []
        fell_back = [False]

        def proposals() -> Iterator[DraftStep]:
            """A candidate (or ⊥) per position; ``methods.rules.take_drafts`` stops the round after ⊥ (an id
            outside the target's vocabulary), an EOS, or when the policy says so."""
            feed: list[int] = []
            for _ in range(max_tokens):
                if not fell_back[0]:
                    feed = self._first_feed(ids + tokens)  # the text of the sequence and the candidates so far
                logits = self._forward(feed)
                q: torch.Tensor | None = None
                if sampling.greedy:
                    tok, conf = self._greedy_candidate(logits)
                else:
                    if not fell_back[0]:
                        base = len(self.cached)
                        try:
                            tok, q, conf = self._sampled_candidate(logits, sampling, generator)
                        except SLRSTooLarge:
                            fell_back[0] = True
                            self._crop(base)  # back to the context: TLI continues from the root
                    if fell_back[0]:
                        picked = self.tli_pick(logits, sampling, generator)
                        if picked is None:  # the processors left no shared token: the draft ends here
                            return
                        d_tok, tok, q, conf = picked
                        feed = [d_tok]
                tokens.append(tok)
                confs.append(conf)
                if q is not None:
                    qs.append(q)
                yield DraftStep(len(tokens), tok, conf, budget=max_tokens)

        take_drafts(proposals(), policy, self.eos, max_tokens, vocab=self.target_vocab_size)
        return Draft(tokens, torch.stack(qs) if qs else None, confs, forwards=self.forwards - forwards0,
                     fallback=fell_back[0])

    @classmethod
    def from_context(cls, ctx: Any) -> SLRSDrafter:
        h = ctx.hetero
        return cls(CrossVocab.of("slrs", ctx), max_nodes=h.max_nodes, max_lookahead=h.max_lookahead,
                   draft_top_k=h.draft_top_k)
