"""Synthetic rounds for the policies' tests: a ``RoundOutcome`` by hand (``rnd``), the draft step a policy's
``stop_drafting`` sees (``conf``), a policy fed ``(A, d)`` pairs (``run``), and hypothesis strategies of them."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from methods.base import DraftStep, RoundOutcome

FAST = settings(max_examples=150, deadline=None)


def rnd(accepted: int, drafted: int, gamma: int | None = None, conf: tuple[float, ...] = ()) -> RoundOutcome:
    return RoundOutcome(
        gamma=drafted if gamma is None else gamma, drafted=drafted, accepted=accepted, confidences=conf
    )


def conf(confidence: float) -> DraftStep:
    """What the drafter shows ``stop_drafting`` for a token drafted with this probability."""
    return DraftStep(1, confidence=confidence)


def run(policy, rounds):
    """Feed ``(A, d)`` pairs; return γ after each round (what next_gamma says)."""
    out = []
    for a, d in rounds:
        policy.observe(rnd(a, d, policy.next_gamma()))
        out.append(policy.next_gamma())
    return out


# (A, d) sequences: d drafted (0..30), A accepted (0..d)
ad_pair = st.integers(0, 30).flatmap(lambda d: st.tuples(st.integers(0, d), st.just(d)))
ad_seq = st.lists(ad_pair, max_size=60)
