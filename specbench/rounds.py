"""One record of rounds: what every draft-and-verify round of one decoding did.

The loops (``runners.engine.speculative``, ``runners.engine.batched``), transformers' loop as a peer
(``runners.engine.hf_assisted``) and the replay (``runners.replay.replay``) all keep their rounds in a
``Rounds``; the loops and the replay fill it from the very outcome their policy observes
(``Rounds.observe(outcome)``, the ``methods.base.RoundOutcome`` handed to ``policy.observe``), and a job's
record and a replayed row serialise it the same way (``Rounds.fields``: the field names and definitions
of ``specbench.records``: ``gamma_trace`` … ``accepted_per_pos``). ``Rounds.of`` reads it back from a
record or a row, so a real run and its replay compare round by round (``schedule``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: the record fields ``Rounds.fields`` writes (``specbench.records.Record`` declares them for the schema)
TRACE_FIELDS = ("gamma_trace", "drafted_trace", "accepted_trace", "confidence_trace", "discarded_trace")
SUMMARY_FIELDS = ("rounds", "drafted", "accepted", "acceptance_rate", "mean_accepted_per_round",
                  "drafted_per_pos", "compared_per_pos", "accepted_per_pos")


def advance(t: int, accepted: int, n: int) -> int:
    """The position after a round at position ``t`` (``t`` new tokens emitted) that accepted ``accepted`` draft
    tokens: those and the target's own token, at most to ``n``, the end of the trace or generation (its last
    token: an EOS, or the length limit). The one place a replay, an oracle, an importer or the latency model moves
    a trace's position (a fused first round starts at ``t = 0``)."""
    return min(t + accepted + 1, n)


class Outcome(Protocol):
    """What ``Rounds.observe`` reads of a round's outcome (``methods.base.RoundOutcome`` has it)."""

    gamma: int
    drafted: int
    accepted: int
    confidences: Sequence[float]
    discarded: int


def per_position(drafted: Sequence[int], accepted: Sequence[int]) -> dict[str, list[int]]:
    """``drafted_per_pos``, ``compared_per_pos``, ``accepted_per_pos`` of rounds that drafted ``drafted[i]``
    and accepted ``accepted[i]`` tokens (definitions: ``specbench.records``)."""
    width = max(drafted, default=0)
    drafted_pp, compared_pp, accepted_pp = [0] * width, [0] * width, [0] * width
    for d, a in zip(drafted, accepted):
        for j in range(d):
            drafted_pp[j] += 1
        for j in range(min(d, a + 1)):
            compared_pp[j] += 1
        for j in range(a):
            accepted_pp[j] += 1
    return {"drafted_per_pos": drafted_pp, "compared_per_pos": compared_pp, "accepted_per_pos": accepted_pp}


@dataclass
class Rounds:
    """Per round ``i``: the γ the policy chose (``gamma[i]``, before any cap by the token budget), the tokens
    verified (``drafted[i]``), the accepted ones among them (``accepted[i]``), the draft's confidence in
    each verified token (``confidences[i]``, rounded to 6 digits; empty when the drafter has none or the
    policy did not ask), the tokens drafted but not verified (``discarded[i]``, a policy's
    ``verify_count``). Built empty and filled by ``observe``, or from whole traces (``confidences`` and
    ``discarded`` may then be left out: none, nothing discarded)."""

    gamma: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    confidences: list[list[float]] = field(default_factory=list)
    discarded: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.accepted)
        if not self.confidences and n:
            self.confidences = [[] for _ in range(n)]
        if not self.discarded and n:
            self.discarded = [0] * n
        lengths = {k: len(v) for k, v in vars(self).items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"a round record's traces must have one length per round, got {lengths}")
        for i, (d, a) in enumerate(zip(self.drafted, self.accepted)):
            if not 0 <= a <= d:
                raise ValueError(f"round {i}: need 0 <= accepted <= drafted, got accepted {a}, drafted {d}")

    def observe(self, outcome: Outcome) -> None:
        """One more round: the outcome the policy is told (``methods.base.RoundOutcome``)."""
        self.gamma.append(int(outcome.gamma))
        self.drafted.append(int(outcome.drafted))
        self.accepted.append(int(outcome.accepted))
        self.confidences.append([round(float(c), 6) for c in outcome.confidences])
        self.discarded.append(int(outcome.discarded))

    def __len__(self) -> int:
        return len(self.accepted)

    @property
    def schedule(self) -> list[tuple[int, int, int]]:
        """``(γ, drafted, accepted)`` per round: what a replay must match of a real run, round by round."""
        return list(zip(self.gamma, self.drafted, self.accepted))

    def fields(self) -> dict[str, Any]:
        """The record's round fields (``specbench.records``): the traces, their sums and rates, acceptance per
        position; ``discarded_trace`` empty when no round discarded anything."""
        rounds, drafted, accepted = len(self), sum(self.drafted), sum(self.accepted)
        return {
            **per_position(self.drafted, self.accepted),
            "rounds": rounds,
            "drafted": drafted,
            "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_accepted_per_round": accepted / rounds if rounds else None,
            "gamma_trace": list(self.gamma),
            "drafted_trace": list(self.drafted),
            "accepted_trace": list(self.accepted),
            "confidence_trace": [list(c) for c in self.confidences],
            "discarded_trace": list(self.discarded) if any(self.discarded) else [],
        }

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Rounds:
        """The rounds of a record or a replayed row (``fields`` read back; no ``confidence_trace`` /
        ``discarded_trace``: none, nothing discarded). ``ValueError`` when its traces are not one per round
        (an old record without ``gamma_trace``, a grid cell keeping only its full rounds)."""
        accepted = list(row.get("accepted_trace") or [])
        return cls(list(row.get("gamma_trace") or []), list(row.get("drafted_trace") or []), accepted,
                   [list(c) for c in row.get("confidence_trace") or []], list(row.get("discarded_trace") or []))


def pooled_acceptance(rounds: Iterable[Rounds]) -> float:
    """Σ accepted / Σ drafted over several decodings' rounds (0 when nothing was drafted)."""
    rounds = list(rounds)
    return sum(sum(r.accepted) for r in rounds) / max(1, sum(sum(r.drafted) for r in rounds))
