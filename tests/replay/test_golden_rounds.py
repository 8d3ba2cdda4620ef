"""The round's rules (``methods.rules``, the loops' and the replay's one copy) on golden rows written by hand, and
the replay playing each of them (issue 31, item 2)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from methods.base import GammaPolicy, RoundOutcome
from methods.rules import emitted_tokens, round_outcome, verified_block
from runners.engine.verify import verify_greedy
from runners.replay.replay import replay
from runners.replay.trace import Trace

# ----------------------------------------------------------------------------- the round's rules: golden rows

EOS, VOCAB, X1, FILLER, OTHER = 0, 50, 1, 2, 49


@dataclass(frozen=True)
class Golden:
    """One round written by hand. Given: the drafter's ``draft``, the round's ``budget``, what the policy's
    ``verify_count`` answers (``keep``; None: all), and the target's greedy token at each position it reads
    (``target[i]``: after its own last token and the first ``i`` tokens fed), with ``VOCAB`` and ``EOS``.
    Expected: the tokens verified and fed, the accepted count, what the round emits, and the outcome
    ``(drafted, accepted, eos_accepted, discarded)``."""

    name: str
    draft: list[int]
    budget: int
    keep: int | None
    target: list[int]
    verified: list[int]
    fed: list[int]
    accepted: int
    emitted: list[int]
    outcome: tuple[int, int, bool, int]


GOLDEN = [
    Golden("all accepted, the target's bonus token", [5, 6, 7], 3, None, [5, 6, 7, 8], [5, 6, 7], [5, 6, 7], 3,
           [5, 6, 7, 8], (3, 3, False, 0)),
    Golden("a rejection, the target's correction", [5, 6, 7], 3, None, [5, 9, 3, 3], [5, 6, 7], [5, 6, 7], 1,
           [5, 9], (3, 1, False, 0)),
    Golden("the budget cuts the draft", [5, 6, 7, 8], 2, None, [5, 6, 11], [5, 6], [5, 6], 2, [5, 6, 11],
           (2, 2, False, 0)),
    Golden("an accepted EOS ends the round", [5, 0], 3, None, [5, 0, 7], [5, 0], [5, 0], 2, [5, 0], (2, 2, True, 0)),
    Golden("a rejected EOS is no end", [5, 0], 3, None, [5, 8, 7], [5, 0], [5, 0], 1, [5, 8], (2, 1, False, 0)),
    Golden("the target's own EOS", [5, 6], 2, None, [5, 0, 7], [5, 6], [5, 6], 1, [5, 0], (2, 1, False, 0)),
    Golden("verify_count keeps a prefix", [5, 6, 7], 3, 1, [5, 6], [5], [5], 1, [5, 6], (1, 1, False, 2)),
    Golden("a peek verifies nothing", [5], 1, 0, [9], [], [], 0, [9], (0, 0, False, 1)),
    Golden("nothing drafted, a plain target step", [], 0, None, [9], [], [], 0, [9], (0, 0, False, 0)),
    Golden("an outside id is verified, rejected, never fed", [5, 60, 7], 3, None, [5, 9], [5, 60], [5], 1, [5, 9],
           (2, 1, False, 0)),
    Golden("an outside first id, nothing fed", [60, 5], 2, None, [9], [60], [], 0, [9], (1, 0, False, 0)),
    Golden("the vocabulary's width is outside", [50], 1, None, [4], [50], [], 0, [4], (1, 0, False, 0)),
    Golden("verify_count before the outside id", [5, 6, 60], 3, 2, [5, 6, 7], [5, 6], [5, 6], 2, [5, 6, 7],
           (2, 2, False, 1)),
    Golden("the budget before the outside id", [5, 6, 60], 2, None, [5, 6, 7], [5, 6], [5, 6], 2, [5, 6, 7],
           (2, 2, False, 0)),
]
REPLAYABLE = [row for row in GOLDEN if all(tok < VOCAB for tok in row.draft[: row.budget])]  # a trace has no outside id


class _GoldenPolicy(GammaPolicy):
    """γ = the row's budget in the first round, then 0 (plain target steps); ``verify_count`` answers the row's
    ``keep``; keeps every outcome it is told."""

    name = "golden"

    def __init__(self, row: Golden) -> None:
        super().__init__(1)
        self.row = row
        self.outcomes: list[RoundOutcome] = []

    def next_gamma(self) -> int:
        return 0 if self.outcomes else self.row.budget

    def verify_count(self, proposed: int) -> int:
        return proposed if self.row.keep is None else self.row.keep

    def observe(self, outcome: RoundOutcome) -> None:
        self.outcomes.append(outcome)


@pytest.mark.parametrize("row", GOLDEN, ids=lambda row: row.name)
def test_golden_rounds_by_the_rules(row):
    """``methods.rules`` on each golden row, verified as both loops verify (``verify_greedy`` on the target's
    logits at the positions it is fed)."""
    verified, fed, proposed = verified_block(row.draft, row.budget, VOCAB, _GoldenPolicy(row))
    assert (verified, fed) == (row.verified, row.fed)
    assert len(row.target) == len(fed) + 1  # (the row itself: one target token per position read)
    logits = torch.full((len(fed) + 1, VOCAB), -1.0)
    for i, tok in enumerate(row.target):
        logits[i, tok] = 1.0
    accepted, next_token = verify_greedy(verified, logits)
    assert accepted == row.accepted
    assert emitted_tokens(verified, accepted, next_token, {EOS}) == row.emitted
    out = round_outcome(row.budget, verified, accepted, proposed, {EOS})
    assert (out.drafted, out.accepted, out.eos_accepted, out.discarded) == row.outcome


def _golden_trace(row: Golden) -> Trace:
    """A trace whose first round (at t = 1, after the prefill's ``X1``) is ``row``: the draft's rollout there is
    ``row.draft[: row.budget]``, the target's output ``X1``, the row's emitted tokens, then (no EOS) ``FILLER``
    tokens, as many as ``max_new_tokens`` allows; the draft proposes ``OTHER`` (never the target's token)
    anywhere else."""
    rollout = row.draft[: row.budget]
    ends = row.emitted[-1] == EOS
    x = [X1, *row.emitted] + ([] if ends else [FILLER] * (row.budget + 2))
    draft_next, tails = [OTHER] * (len(x) - 1), {}
    for j, tok in enumerate(rollout):
        draft_next[j] = tok
        if tok != x[j + 1]:  # the first mismatch: the rest of the rollout is its tail
            tails[j + 1] = (rollout[j:], [0.5] * (len(rollout) - j))
            break
    m = max(len(x), row.budget + 2) if ends else len(x)
    return Trace(prompt_id=row.name, turn=1, prompt_tokens=3, max_new_tokens=m, gamma_max=m, eos=(EOS,), tokens=x,
                 draft_next=draft_next, draft_conf=[0.5] * (len(x) - 1), tails=tails)


@pytest.mark.parametrize("row", REPLAYABLE, ids=lambda row: row.name)
def test_the_replay_plays_each_golden_round(row):
    """The replay's first round on the row's trace is the row's outcome, and it emits the row's tokens: every
    later round (γ = 0) adds one token, so their count says where the first one left the sequence."""
    trace = _golden_trace(row)
    if row.budget:
        assert trace.rollout(1, row.budget)[0] == row.draft[: row.budget]  # (the trace itself)
    policy = _GoldenPolicy(row)
    res = replay(trace, policy)
    first = policy.outcomes[0]
    assert (first.gamma, first.drafted, first.accepted, first.eos_accepted, first.discarded) == (row.budget, *row.outcome)
    assert len(res.rounds) == 1 + (trace.n - 1 - len(row.emitted))
    assert res.rounds.drafted[1:] == [0] * (len(res.rounds) - 1)
