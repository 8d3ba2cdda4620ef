"""Union (Algorithm 1) and SLRS (Algorithm 3) on model pairs, and the loop's tokens outside the target vocabulary.

* the loop: a drafted id past the target's logits is rejected with certainty, never fed to the
  target, and replaced from the union residual ``max(0, p - q)``: the emitted law is the target's
  (a single step with 20k samples, and whole sequences of a vocabulary-4 target against their exact
  law); anything drafted after it is dropped;
* the union drafter proposes draft-only tokens as such ids, and its ``q`` is ``to_target`` of the
  draft model's distribution (the exact evaluator's function); TLI's exact acceptance is at least
  union's at every context (Theorem 4.1);
* the SLRS drafter's ψ, computed on the draft model's KV cache, equals the exact evaluator's
  ``SLRS.psi`` fed by cache-free forwards; past ``max_nodes`` a round falls back to TLI (the same
  ``q``), counted per round;
* greedy union and SLRS decoding equal the target's own greedy decoding in both directions
  (byte-level BPE target / character draft and the reverse).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from methods.base import FixedGamma
from methods.hetero import SLRS, tli_distribution, to_target
from methods.hetero.slrs import top_k_proposal
from methods.hetero.vocab import token_strings
from runners.drafters.slrs import SLRSDrafter
from runners.drafters.text_sync import CrossVocab
from runners.drafters.tli import TLIDrafter
from runners.drafters.union import UnionDrafter
from runners.engine.base import Draft, Drafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import Sampling, probs, verify_sampling

from helpers.tiny import tiny_model, tiny_tokenizer

PROMPTS = ["the quick brown fox", "def add(a, b):\n"]


@pytest.fixture(scope="module")
def bpe():
    return tiny_tokenizer(300, "bpe")


@pytest.fixture(scope="module")
def char():
    return tiny_tokenizer(kind="char")


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# ---------------------------------------------------------------- the loop: tokens outside the target vocabulary


def test_an_outside_token_is_rejected_and_replaced_from_the_union_residual():
    """Target vocabulary 6, drafter over 6 shared + 2 draft-only tokens (ids 6, 7): the emitted token's
    law is p (10k samples, TV < 0.025; noise alone ~0.01); resampling from p instead of the residual
    after a draft-only token would be 0.064 away (computed exactly), so the test can fail."""
    gen = torch.Generator().manual_seed(0)
    p_logits = torch.tensor([[2.0, 0.5, -1.0, 1.0, 0.0, -0.5], [0.0] * 6])
    p = torch.softmax(p_logits[0], -1).double()
    union_q = torch.softmax(torch.tensor([-1.0, 2.0, 1.0, 0.0, -2.0, 0.5, 1.5, 0.8]), -1)
    q_target = union_q[:6]  # union's part on the target vocabulary (sums to < 1)
    n = 10000
    counts = torch.zeros(6, dtype=torch.float64)
    for _ in range(n):
        x = int(torch.multinomial(union_q, 1, generator=gen))
        accepted, nxt = verify_sampling([x], q_target[None], p_logits, 1.0, gen)
        assert not (accepted and x >= 6)
        counts[x if accepted else nxt] += 1
    assert 0.5 * float((counts / n - p).abs().sum()) < 0.025
    q = q_target.double()
    both, outside = torch.minimum(p, q), float(union_q[6:].sum())
    residual = torch.clamp(p - q, min=0.0) / float(torch.clamp(p - q, min=0.0).sum())
    mutant = both + float((q - both).sum()) * residual + outside * p
    assert 0.5 * float((mutant - p).abs().sum()) > 0.05


class UnionLike(Drafter):
    """A vocabulary-6 tiny model drafting for a vocabulary-4 target: ids 4 and 5 are draft-only,
    proposed as they are (outside the target's logits), with ``q`` = the first four probabilities."""

    def __init__(self, model, temperature: float) -> None:
        self.model, self.temperature, self.outside = model, temperature, 0

    def propose(self, ids, max_tokens, policy, sampling, generator):
        tokens, qs = [], []
        for _ in range(max_tokens):
            logits = self.model(input_ids=torch.tensor([ids + tokens])).logits[0, -1]
            q = torch.softmax(logits / self.temperature, -1)
            x = int(torch.multinomial(q, 1, generator=generator))
            tokens.append(x)
            qs.append(q[:4])
            if x >= 4:
                self.outside += 1
                break
        return Draft(tokens, torch.stack(qs), [])


def _exact_sequence_law(model, prompt, length, temperature):
    law = {}
    with torch.inference_mode():
        for seq in itertools.product(range(model.config.vocab_size), repeat=length):
            logits = model(torch.tensor([prompt + list(seq)])).logits[0, len(prompt) - 1 : len(prompt) - 1 + length]
            logp = torch.log_softmax(logits / temperature, -1)
            law[seq] = math.exp(sum(float(logp[i, s]) for i, s in enumerate(seq)))
    return law


@pytest.mark.slow
def test_the_loop_never_feeds_an_outside_token_and_keeps_the_target_law():
    """Vocabulary-4 target (it cannot embed ids 4, 5), 3 new tokens (64 sequences; the 2nd and 3rd are
    drafted in one round of γ = 2): the law of 2000 speculative samples is within TV 0.07 of the exact
    law (sampling noise alone ~0.03); the draft's own law (outside mass merged) is > 0.15 away."""
    target = tiny_model(4, seed=11, hidden=16, layers=1)
    draft = tiny_model(6, seed=12, hidden=16, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)
        draft.lm_head.weight.mul_(3.0)
    prompt, length = [1, 2], 3
    exact = _exact_sequence_law(target, prompt, length, 1.0)
    drafter = UnionLike(draft, 1.0)
    draft_law: dict = {}
    for seq, pr in _exact_sequence_law(draft, prompt, length, 1.0).items():
        key = tuple(min(t, 4) for t in seq)
        draft_law[key] = draft_law.get(key, 0.0) + pr
    assert _tv(exact, draft_law) > 0.15
    gen = torch.Generator().manual_seed(7)
    runner = SpeculativeRunner(target, drafter, FixedGamma(2), [], sampling=1.0)
    n, counts = 2000, {}
    with torch.inference_mode():
        for _ in range(n):
            seq = tuple(runner.generate(prompt, length + 1, gen).tokens[:length])
            counts[seq] = counts.get(seq, 0) + 1
    assert drafter.outside > 200  # draft-only tokens were drafted (and never reached the target's embedding)
    assert _tv({k: v / n for k, v in counts.items()}, exact) < 0.07


def test_tokens_after_an_outside_token_are_dropped():
    target = tiny_model(50, seed=3)
    ids = [1, 2, 3]
    want = AutoregressiveRunner(target, []).generate(ids, 6).tokens

    class Fixed(Drafter):
        def propose(self, ids, max_tokens, policy, sampling, generator):
            return Draft([want[len(ids) - 3], 57, want[0]], None, [])  # a good token, an outside one, junk

    out = SpeculativeRunner(target, Fixed(), FixedGamma(3), []).generate(ids, 6)
    assert out.tokens == want
    assert out.rounds.drafted[0] == 2 and out.rounds.accepted[0] == 1


# ---------------------------------------------------------------- union and TLI drafters


@torch.inference_mode()
def _context_logits(drafter, ids):
    """The draft model's logits after the drafter's synced draft ids, by a cache-free forward."""
    drafter.next_logits(ids)  # sync on the text of ids
    return drafter.model(input_ids=torch.tensor([drafter.d_ids])).logits[0, -1]


def test_union_drafter_proposes_draft_only_tokens_outside_the_target_vocabulary(bpe, char):
    """Target: the character vocabulary; draft: the byte-level BPE one (most of its tokens are draft-only)."""
    draft = tiny_model(len(bpe), seed=21)
    drafter = UnionDrafter(CrossVocab(draft, bpe, char, [0], len(char)))
    ids = char("the cat sat").input_ids
    outside_seen = 0
    for seed in range(12):
        drafter.begin(ids)
        want_q = to_target(probs(_context_logits(drafter, ids), 1.0), drafter.mapping)
        out = drafter.propose(ids, 4, FixedGamma(4), Sampling(1.0), torch.Generator().manual_seed(seed))
        assert torch.allclose(out.q[0], want_q, atol=1e-5)
        assert float(out.q[0].sum()) < 1.0  # the mass on draft-only tokens is not renormalised away
        assert all(t < len(char) for t in out.tokens[:-1])
        if out.tokens[-1] >= len(char):
            outside_seen += 1
            only = drafter.mapping.tensors().draft_only
            assert 0 <= out.tokens[-1] - len(char) < only.numel()
        assert out.forwards == len(out.tokens)
    assert outside_seen > 0


def test_theorem_4_1_tli_accepts_at_least_as_often_as_union_at_every_context(bpe, char):
    draft, target = tiny_model(len(bpe), seed=22), tiny_model(len(char), seed=23)
    tli = TLIDrafter(CrossVocab(draft, bpe, char, [0], len(char)))
    union = UnionDrafter(CrossVocab(draft, bpe, char, [0], len(char)))
    gaps = []
    for text in ("the cat", "a dog sat on the", "def add(a"):
        ids = char(text).input_ids
        with torch.inference_mode():
            p = probs(target(input_ids=torch.tensor([ids])).logits[0, -1], 1.0).double()
        q = probs(_context_logits(tli, ids), 1.0).double()
        assert torch.allclose(probs(_context_logits(union, ids), 1.0).double(), q)
        a_tli = float(torch.minimum(p, tli_distribution(q, tli.mapping)).sum())
        a_union = float(torch.minimum(p, to_target(q, union.mapping)).sum())
        gaps.append(a_tli - a_union)
    assert min(gaps) > 0.0  # strictly: this drafter puts mass on draft-only tokens


@pytest.mark.parametrize("direction", ["bpe-target", "char-target"])
@pytest.mark.parametrize("gamma", [1, 3])
def test_union_and_slrs_greedy_equal_target_greedy(bpe, char, direction, gamma):
    ttok, dtok = (bpe, char) if direction == "bpe-target" else (char, bpe)
    for seed, prompt in enumerate(PROMPTS):
        target, draft = tiny_model(len(ttok), seed=30 + seed), tiny_model(len(dtok), seed=40 + seed)
        ids = ttok(prompt).input_ids
        want = AutoregressiveRunner(target, [0]).generate(ids, 16).tokens
        for drafter in (UnionDrafter(CrossVocab(draft, dtok, ttok, [0], len(ttok))), SLRSDrafter(CrossVocab(draft, dtok, ttok, [0], len(ttok)))):
            out = SpeculativeRunner(target, drafter, FixedGamma(gamma), [0]).generate(ids, 16)
            assert out.tokens == want, (type(drafter).__name__, prompt)
            assert out.draft_forwards >= sum(out.rounds.drafted) > 0


# ---------------------------------------------------------------- SLRS drafter


@pytest.mark.parametrize("top_k, lookahead", [(3, None), (4, 2), (None, 1)])
def test_slrs_drafter_psi_equals_the_exact_evaluator(bpe, char, top_k, lookahead):
    draft = tiny_model(len(char), seed=51)
    drafter = SLRSDrafter(CrossVocab(draft, char, bpe, [0], len(bpe)), max_nodes=10_000, max_lookahead=lookahead, draft_top_k=top_k)
    rule = SLRS(token_strings(char), token_strings(bpe), draft_eos_ids=[0], target_eos_id=0,
                max_lookahead=lookahead, max_nodes=10_000)
    for text in ("the quick", "one two th"):
        ids = bpe(text).input_ids
        drafter.begin(ids)
        psi, bottom = drafter.psi_after(ids, 0.9)
        context = list(drafter.d_ids)

        def draft_next(seq, context=context):
            logits = draft(input_ids=torch.tensor([context + list(seq)])).logits[0, -1]
            return top_k_proposal(probs(logits, 0.9), top_k)

        want, want_bottom, _ = rule.psi(draft_next)
        assert torch.allclose(psi, torch.tensor(want, dtype=torch.float64), atol=1e-5)
        assert bottom == pytest.approx(want_bottom, abs=1e-5)
        assert float(psi.sum()) + bottom == pytest.approx(1.0, abs=1e-5)


def test_slrs_proposes_from_psi_and_chains_positions(bpe, char):
    drafter = SLRSDrafter(CrossVocab(tiny_model(len(char), seed=52), char, bpe, [0], len(bpe)), max_nodes=10_000, draft_top_k=3)
    ids = bpe("the dog").input_ids
    drafter.begin(ids)
    out = drafter.propose(ids, 3, FixedGamma(3), Sampling(1.0), torch.Generator().manual_seed(3))
    assert out.q.shape == (len(out.tokens), len(bpe)) and not out.fallback
    for i, t in enumerate(out.tokens):
        if t < len(bpe):
            assert float(out.q[i, t]) > 0 and out.confidences[i] == pytest.approx(float(out.q[i, t]), rel=1e-5)
        else:  # ⊥ ends the round
            assert t == len(bpe) and i == len(out.tokens) - 1
    # position 2's ψ is computed on the text of the sequence plus candidate 1
    if len(out.tokens) >= 2 and out.tokens[0] < len(bpe):
        fresh = SLRSDrafter(CrossVocab(drafter.model, char, bpe, [0], len(bpe)), max_nodes=10_000, draft_top_k=3)
        psi2, _ = fresh.psi_after(ids + out.tokens[:1], 1.0)
        assert torch.allclose(out.q[1].double(), psi2, atol=1e-5)


def test_slrs_falls_back_to_tli_past_the_expansion_bound_and_counts_it(bpe, char):
    draft = tiny_model(len(char), seed=53)
    target = tiny_model(len(bpe), seed=54)
    ids = bpe("the cat sat").input_ids
    slrs = SLRSDrafter(CrossVocab(draft, char, bpe, [0], len(bpe)), max_nodes=1)  # only the root fits: every position falls back
    tli = TLIDrafter(CrossVocab(draft, char, bpe, [0], len(bpe)))
    for d in (slrs, tli):
        d.begin(ids)
    a = slrs.propose(ids, 3, FixedGamma(3), Sampling(1.0), torch.Generator().manual_seed(5))
    b = tli.propose(ids, 3, FixedGamma(3), Sampling(1.0), torch.Generator().manual_seed(5))
    assert a.fallback and not b.fallback
    assert a.tokens == b.tokens and torch.allclose(a.q, b.q, atol=1e-6)
    gen = SpeculativeRunner(target, slrs, FixedGamma(2), [0], sampling=1.0).generate(ids, 12, torch.Generator().manual_seed(1))
    assert gen.fallback_rounds == sum(1 for d in gen.rounds.drafted if d > 0) > 0
    greedy = SpeculativeRunner(target, slrs, FixedGamma(2), [0]).generate(ids, 12)
    assert greedy.fallback_rounds == 0  # greedy SLRS needs no ψ
    assert greedy.tokens == AutoregressiveRunner(target, [0]).generate(ids, 12).tokens
