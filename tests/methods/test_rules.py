"""The rules of one round (``methods.rules``), one function at a time, on hand-written lists: the cuts of
``verified_block`` in their order and its one error, the EOS cut of ``emitted_tokens``, what
``round_outcome`` keeps, and the order of ``stop_drafting_after``'s questions. Whole rounds (draft → verify →
emit → outcome) are the golden rows of ``tests/replay/test_batched_replay.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from methods.base import DraftStep, GammaPolicy
from methods.rules import (
    cut_proposal,
    emitted_tokens,
    round_outcome,
    stop_drafting_after,
    take_drafts,
    verified_block,
)

ROOT = Path(__file__).resolve().parents[2]
EOS = {0}
VOCAB = 50


class _Asked(GammaPolicy):
    """Answers ``verify_count`` with ``keep`` (None: all) and ``stop_drafting`` with ``stop``; records every call."""

    name = "asked"

    def __init__(self, keep: int | None = None, stop: bool = False) -> None:
        super().__init__(1)
        self.keep, self.stop = keep, stop
        self.calls: list[tuple] = []

    def next_gamma(self) -> int:
        return 1

    def verify_count(self, proposed: int) -> int:
        self.calls.append(("verify_count", proposed))
        return proposed if self.keep is None else self.keep

    def stop_drafting(self, step: DraftStep) -> bool:
        self.calls.append(("stop_drafting", step.position))
        return self.stop


# ----------------------------------------------------------------------------- verified_block


@pytest.mark.parametrize(("tokens", "budget", "keep", "verified", "fed", "proposed", "asked"), [
    ([5, 6, 7, 8], 2, None, [5, 6], [5, 6], 2, [2]),  # the budget first
    ([5, 60, 7], 3, None, [5, 60], [5], 2, [2]),  # cut after the outside id, which is verified, never fed
    ([60, 5], 2, None, [60], [], 1, [1]),  # an outside first token: nothing fed
    ([50, 5], 2, None, [50], [], 1, [1]),  # the vocabulary's width itself is outside
    ([49, 5], 2, None, [49, 5], [49, 5], 2, [2]),  # its last id is inside
    ([5, 6, 60], 2, None, [5, 6], [5, 6], 2, [2]),  # an outside id past the budget is not looked at
    ([5, 6, 60], 3, 1, [5], [5], 3, [3]),  # verify_count after the cuts: the outside id discarded
    ([5, 6, 60], 3, 3, [5, 6, 60], [5, 6], 3, [3]),
    ([5], 3, 0, [], [], 1, [1]),  # a peek
    ([], 3, None, [], [], 0, []),  # nothing proposed: verify_count is not asked
    ([5, 6], 0, None, [], [], 0, []),  # no budget
])
def test_verified_block_cuts_in_order(tokens, budget, keep, verified, fed, proposed, asked):
    policy = _Asked(keep)
    before = list(tokens)
    assert verified_block(tokens, budget, VOCAB, policy) == (verified, fed, proposed)
    assert policy.calls == [("verify_count", n) for n in asked]
    assert tokens == before  # the drafter's list is not touched


def test_verified_block_without_a_vocabulary_feeds_every_verified_token():
    """``vocab=None`` (a replayed trace): no id is outside."""
    assert verified_block([10**9, 5, 6], 2, None, _Asked()) == ([10**9, 5], [10**9, 5], 2)
    assert verified_block([10**9, 5, 6], 3, None, _Asked(keep=1)) == ([10**9], [10**9], 3)


@pytest.mark.parametrize(("keep", "proposed"), [(-1, 2), (3, 2), (2, 1)])
def test_a_verify_count_outside_the_proposal_is_refused_in_one_line(keep, proposed):
    with pytest.raises(ValueError, match=rf"^verify_count returned {keep} for {proposed} proposed tokens$"):
        verified_block([5, 6, 7][:proposed], 3, VOCAB, _Asked(keep))


def test_the_verify_count_error_is_written_once():
    """The rule lives in ``methods.rules`` alone: no loop, drafter or replay raises its own copy."""
    holders = sorted(str(p.relative_to(ROOT)) for folder in ("methods", "runners") for p in (ROOT / folder).rglob("*.py")
                     if "proposed tokens\")" in p.read_text(encoding="utf-8"))
    assert holders == ["methods/rules.py"]


# ----------------------------------------------------------------------------- emitted_tokens


@pytest.mark.parametrize(("verified", "accepted", "next_token", "emitted"), [
    ([5, 6, 7], 3, 8, [5, 6, 7, 8]),  # all accepted and the target's bonus token
    ([5, 6, 7], 1, 9, [5, 9]),  # the target's correction after the first rejection
    ([], 0, 9, [9]),  # a plain target step
    ([5, 0, 7], 3, 8, [5, 0]),  # an accepted EOS ends the round: what follows it is dropped
    ([5, 0], 2, 8, [5, 0]),
    ([5, 0], 1, 8, [5, 8]),  # a rejected EOS is no end
    ([5, 6], 1, 0, [5, 0]),  # the target's own EOS
    ([0, 0], 2, 0, [0]),  # the first EOS
])
def test_emitted_tokens_cut_after_the_first_eos(verified, accepted, next_token, emitted):
    assert emitted_tokens(verified, accepted, next_token, EOS) == emitted


def test_emitted_tokens_use_the_eos_ids_given():
    assert emitted_tokens([5, 0, 7], 3, 8, {7}) == [5, 0, 7]
    assert emitted_tokens([5, 0, 7], 3, 8, set()) == [5, 0, 7, 8]


# ----------------------------------------------------------------------------- round_outcome


def test_round_outcome_keeps_the_verified_tokens_features_only():
    steps = [DraftStep(i + 1, tok) for i, tok in enumerate([5, 0, 7, 8])]
    out = round_outcome(4, [5, 0, 7], 2, 4, EOS, [0.9, 0.8, 0.7, 0.6], steps)
    assert (out.gamma, out.drafted, out.accepted, out.discarded) == (4, 3, 2, 1)
    assert out.confidences == (0.9, 0.8, 0.7) and out.steps == tuple(steps[:3])
    assert out.eos_accepted  # the EOS at position 2 was accepted
    assert (out.draft_ms, out.verify_ms, out.round_ms) == (None, None, None)


def test_round_outcome_eos_accepted_only_among_the_accepted():
    assert not round_outcome(2, [5, 0], 1, 2, EOS).eos_accepted
    assert not round_outcome(2, [5, 6], 2, 2, EOS).eos_accepted
    assert round_outcome(2, [0], 1, 1, EOS).eos_accepted


def test_round_outcome_of_a_peek_and_of_a_plain_step():
    peek = round_outcome(3, [], 0, 1, EOS, [0.4])
    assert (peek.drafted, peek.accepted, peek.discarded, peek.confidences, peek.steps) == (0, 0, 1, (), ())
    plain = round_outcome(0, [], 0, 0, EOS)
    assert (plain.gamma, plain.drafted, plain.discarded, plain.all_accepted) == (0, 0, 0, False)


def test_round_outcome_carries_the_costs_and_refuses_more_accepted_than_verified():
    out = round_outcome(2, [5, 6], 2, 2, EOS, draft_ms=1.5, verify_ms=2.5, round_ms=4.25)
    assert (out.draft_ms, out.verify_ms, out.round_ms) == (1.5, 2.5, 4.25) and out.all_accepted
    with pytest.raises(ValueError, match="accepted <= drafted"):
        round_outcome(2, [5], 2, 2, EOS)


# ----------------------------------------------------------------------------- stop_drafting_after


def test_an_eos_stops_drafting_without_asking_the_policy():
    policy = _Asked()
    assert stop_drafting_after(0, DraftStep(1, 0), policy, EOS, 1, 4)
    assert policy.calls == []


@pytest.mark.parametrize(("stop", "drafted", "limit", "stops"), [
    (False, 1, 4, False),
    (True, 1, 4, True),  # the policy's stop
    (False, 4, 4, True),  # the budget
    (True, 4, 4, True),
])
def test_the_policy_is_asked_after_every_other_token_the_last_included(stop, drafted, limit, stops):
    policy = _Asked(stop=stop)
    assert stop_drafting_after(5, DraftStep(drafted, 5), policy, EOS, drafted, limit) is stops
    assert policy.calls == [("stop_drafting", drafted)]


def test_a_token_outside_the_vocabulary_stops_drafting_without_asking_the_policy():
    policy = _Asked()
    assert stop_drafting_after(VOCAB, DraftStep(1, VOCAB), policy, EOS, 1, 4, vocab=VOCAB)
    assert not stop_drafting_after(VOCAB - 1, DraftStep(1, VOCAB - 1), policy, EOS, 1, 4, vocab=VOCAB)
    assert policy.calls == [("stop_drafting", 1)]  # asked about the token inside the vocabulary only


def test_a_deterministic_proposer_is_never_asked():
    assert stop_drafting_after(5, DraftStep(1, 5), None, EOS, 4, 4) and not stop_drafting_after(5, DraftStep(1, 5),
                                                                                                None, EOS, 1, 4)


# ----------------------------------------------------------------------------- take_drafts, cut_proposal


def _proposals(tokens: list[int], drawn: list[int]):
    """A drafter's generator: records each token as it is drawn (a draft model's forward runs then)."""
    for i, tok in enumerate(tokens):
        drawn.append(tok)
        yield DraftStep(i + 1, tok)


@pytest.mark.parametrize(("tokens", "stop", "limit", "vocab", "taken", "asked"), [
    ([5, 6, 7, 8], False, 3, None, 3, 3),  # the budget: a fourth token is never computed
    ([5, 0, 7], False, 5, None, 2, 1),  # after an EOS, not asked about it
    ([5, VOCAB + 1, 7], False, 5, VOCAB, 2, 1),  # after a token outside the vocabulary
    ([5, 6, 7], True, 5, None, 1, 1),  # the policy's stop
    ([5, 6], False, 5, None, 2, 2),  # the drafter has nothing more to propose
    ([5, 6], False, 0, None, 0, 0),  # no budget: nothing drawn
])
def test_take_drafts_draws_until_the_round_stops(tokens, stop, limit, vocab, taken, asked):
    policy, drawn = _Asked(stop=stop), []
    assert take_drafts(_proposals(tokens, drawn), policy, EOS, limit, vocab) == taken
    assert drawn == tokens[:taken] and len(policy.calls) == asked


def test_cut_proposal_keeps_the_eos_and_cuts_to_the_budget():
    assert cut_proposal([5, 6, 0, 7], EOS, 10) == [5, 6, 0]
    assert cut_proposal([5, 6, 7], EOS, 2) == [5, 6]
    assert cut_proposal([5, 6], EOS, 0) == []
