"""llama.cpp's p-min stop as our policy (``methods/p_min.py``): the token below ``p_min`` is drafted but not
verified, a round shorter than ``n_min`` verifies none, and on our loop the output stays the target's own."""

from __future__ import annotations

import torch

from methods.base import DraftStep
from methods.p_min import PMin
from methods.rules import take_drafts, verified_block
from runners.drafters.model import ModelDrafter
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner

from helpers import tiny


def rounds(policy: PMin, confidences: list[float]) -> tuple[int, int]:
    """``(drawn, verified)`` of one round whose drafted tokens have these confidences."""
    policy.next_gamma()
    steps = [DraftStep(i + 1, 10 + i, confidence=c, budget=len(confidences)) for i, c in enumerate(confidences)]
    drawn = take_drafts(iter(steps), policy, eos=(), limit=policy.gamma_init)
    tokens, _, _ = verified_block([s.token for s in steps[:drawn]], policy.gamma_init, None, policy)
    return drawn, len(tokens)


def test_the_token_below_p_min_is_drafted_but_not_verified():
    p = PMin(5, p_min=0.6)
    assert rounds(p, [0.9, 0.8, 0.5, 0.9, 0.9]) == (3, 2)  # the third falls below: drawn (its forward spent), dropped
    assert rounds(p, [0.9, 0.9, 0.9, 0.9, 0.9]) == (5, 5)  # none below: the whole γ, as specdecode
    assert rounds(p, [0.59, 0.9]) == (1, 0)  # the first below: a plain target step
    assert rounds(p, [0.6, 0.6, 0.6, 0.6, 0.6]) == (5, 5)  # at p_min exactly: kept (llama.cpp's test is p < p_min)


def test_a_round_shorter_than_n_min_verifies_none():
    p = PMin(5, p_min=0.6, n_min=2)
    assert rounds(p, [0.9, 0.1]) == (2, 0)
    assert rounds(p, [0.9, 0.9, 0.1]) == (3, 2)


def test_nothing_of_a_round_carries_into_the_next():
    p = PMin(5, p_min=0.6)
    p.next_gamma()
    assert p.stop_drafting(DraftStep(1, 3, confidence=0.1))  # a round that stopped below p_min ...
    p.next_gamma()  # ... then a deterministic proposal the policy is never asked about
    assert p.verify_count(4) == 4


def test_p_min_on_our_loop_is_lossless_and_discards_what_it_drops():
    pair = tiny.tiny_pair(draft="noisy")
    ids = pair.prompts[0]
    ref = AutoregressiveRunner(pair.target, eos_token_ids=[]).generate(ids, 24)
    with torch.inference_mode():
        out = SpeculativeRunner(pair.target, ModelDrafter(pair.draft, []), PMin(4, p_min=0.7), []).generate(ids, 24)
    assert out.tokens == ref.tokens
    drafted = sum(out.rounds.drafted) + sum(out.rounds.discarded)
    assert sum(out.rounds.discarded) > 0 and drafted < 4 * len(out.rounds)  # some rounds stopped and dropped a token
