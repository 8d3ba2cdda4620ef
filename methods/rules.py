"""The rules of one draft → verify round, written once: plain lists in, plain lists and a ``RoundOutcome`` out.

Every loop that runs a round and the replay that re-enacts one call these functions, so the batch-1 loop,
the batched loop, the replay and the drafters cannot drift apart:

* ``stop_drafting_after``: when a drafter stops drafting; ``take_drafts`` applies it to the proposals a drafter
  yields, so no drafter writes it (every batch-1 drafter in ``runners.drafters``; the batched draft model
  (``runners.drafters.batched_model.BatchedModelDrafter.propose``) and the replay
  (``runners.replay.replay._Row.draft_step``) call ``stop_drafting_after`` per row and per token);
* ``verified_block``: which drafted tokens the target verifies, and which it is fed
  (``runners.engine.speculative.SpeculativeRunner.generate``,
  ``runners.engine.batched.BatchedSpeculativeRunner.generate``, ``runners.replay.replay._Row.verify``);
* ``emitted_tokens``: what a verified round adds to the sequence (both loops; the replay's trace holds it
  already: its ``t`` moves by ``accepted + 1``, at most to the trace's end, which is its EOS);
* ``round_outcome``: the ``methods.base.RoundOutcome`` the policy and the record of rounds are told (both
  loops, ``runners.replay.replay._Row.end_round``).

Verification itself (the accepted prefix and the target's own token) sits between ``verified_block`` and
``emitted_tokens``: ``runners.engine.verify`` in the loops, ``accepted = min(d, a_t)`` in the replay.
No torch, no numpy: a call costs the batch-1 loop one function call and the list work it did inline.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence

from methods.base import DraftStep, GammaPolicy, RoundOutcome


def stop_drafting_after(token: int, step: DraftStep, policy: GammaPolicy | None, eos: Container[int], drafted: int,
                        limit: int, vocab: int | None = None) -> bool:
    """Whether a drafter stops after ``token``, the ``drafted``-th token of its round (``step``: what the policy
    is shown of it). In this order: after an EOS (the policy is not asked about an EOS); after a token outside
    the target's vocabulary (an id ``>= vocab``: union's draft-only tokens, SLRS's ⊥; nothing after it can be
    accepted, and the policy is not asked about it); when ``policy.stop_drafting(step)`` says so (asked after
    every other token, the one that reaches ``limit`` included, so a policy that counts its questions is asked
    the same ones by every drafter and by the replay; ``policy=None``: a deterministic proposer, which has no
    probabilities to show, is never asked); once ``drafted`` reaches ``limit``, the most tokens the round may
    draft (its budget, or what the trace's rollout holds). The token it stops after is still proposed.

    Called by ``take_drafts``, ``runners.drafters.batched_model.BatchedModelDrafter.propose`` and
    ``runners.replay.replay._Row.draft_step``.
    """
    return (token in eos or (vocab is not None and token >= vocab)
            or (policy is not None and policy.stop_drafting(step)) or drafted >= limit)


def take_drafts(steps: Iterable[DraftStep], policy: GammaPolicy | None, eos: Container[int], limit: int,
                vocab: int | None = None) -> int:
    """How many of the proposals a drafter yields (``steps``, one ``DraftStep`` per drafted token, computed only
    when asked for: a draft model's next forward runs when the next step is drawn) its round drafts: drawn until
    ``stop_drafting_after`` says stop, or until the drafter has nothing more to propose. The drafter proposes the
    tokens of the steps drawn; every batch-1 drafter's round stops here (``policy=None`` for a deterministic
    proposer: cut after an EOS and at ``limit`` only)."""
    drawn = 0
    if limit < 1:
        return 0
    for step in steps:
        drawn += 1
        if stop_drafting_after(step.token, step, policy, eos, drawn, limit, vocab):
            break
    return drawn


def cut_proposal(tokens: Sequence[int], eos: Container[int], limit: int) -> list[int]:
    """A deterministic proposal (prompt lookup, suffix decoding: no probabilities, the policy never asked) as its
    round drafts it: ``take_drafts`` over its tokens, so cut after an EOS (kept: the target may accept it and end
    the sequence a round earlier) and to ``limit`` tokens."""
    n = take_drafts((DraftStep(i + 1, int(t), budget=limit) for i, t in enumerate(tokens)), None, eos, limit)
    return list(tokens[:n])


def verified_block(tokens: list[int], budget: int, vocab: int | None,
                   policy: GammaPolicy) -> tuple[list[int], list[int], int]:
    """``(verified, fed, proposed)`` of a round's drafted ``tokens`` (target-vocabulary ids):

    1. cut to ``budget`` (>= 0: the target tokens the round may propose, ``remaining − 1`` at most, from
       ``runners.engine.base.Drafter.limits``; a round always adds one target token of its own);
    2. cut after the first token outside the target's vocabulary (an id ``>= vocab``, the target's logits
       width: union's draft-only tokens, SLRS's ⊥; ``vocab=None``: no such id, as in a replayed trace): the
       target cannot accept it, so nothing after it is compared. What is left is ``proposed``;
    3. ``policy.verify_count(proposed)``, asked only when something is proposed, keeps a prefix: ``verified``
       (``0`` after a one-token draft is a peek: a plain target step). A count outside ``[0, proposed]`` is a
       ``ValueError``.

    ``fed``: the verified tokens the target reads after its own last token, every one but an outside token
    (verified as a certain rejection, the target's own token taken in its place, but never fed: it has no
    embedding row). ``proposed − len(verified)`` is the round's ``RoundOutcome.discarded``.

    Called by ``runners.engine.speculative.SpeculativeRunner.generate``,
    ``runners.engine.batched.BatchedSpeculativeRunner.generate`` (each row) and
    ``runners.replay.replay._Row.verify``.
    """
    tokens = tokens[:budget]
    outside = None
    if vocab is not None:
        outside = next((i for i, t in enumerate(tokens) if t >= vocab), None)
        if outside is not None:  # the target cannot accept it: nothing after it is verified
            tokens = tokens[: outside + 1]
    proposed = len(tokens)
    if proposed:  # the policy may verify only a prefix (a peek: none)
        keep = int(policy.verify_count(proposed))
        if not 0 <= keep <= proposed:
            raise ValueError(f"verify_count returned {keep} for {proposed} proposed tokens")
        tokens = tokens[:keep]
    fed = tokens if outside is None else tokens[:outside]  # an outside token is never fed
    return tokens, fed, proposed


def emitted_tokens(verified: list[int], accepted: int, next_token: int, eos: Container[int]) -> list[int]:
    """What a verified round adds to the sequence: the first ``accepted`` of the ``verified`` tokens and the
    target's own ``next_token`` (its correction, or its bonus token when all were accepted), cut after the
    first EOS among them: an accepted EOS ends the sequence exactly where the target would, and the target's
    token after it is dropped.

    Called by ``runners.engine.speculative.SpeculativeRunner.generate`` and
    ``runners.engine.batched.BatchedSpeculativeRunner.generate`` (each row).
    """
    emitted = verified[:accepted] + [next_token]
    for j, tok in enumerate(emitted):
        if tok in eos:
            return emitted[: j + 1]
    return emitted


def round_outcome(gamma: int, verified: Sequence[int], accepted: int, proposed: int, eos: Container[int],
                  confidences: Sequence[float] = (), steps: Sequence[DraftStep] = (), *,
                  draft_ms: float | None = None, verify_ms: float | None = None,
                  round_ms: float | None = None) -> RoundOutcome:
    """The ``RoundOutcome`` of a round that chose ``gamma``, verified ``verified`` (``verified_block``) out of
    ``proposed`` and accepted the first ``accepted`` of them: ``drafted = len(verified)``; the draft's
    ``confidences`` and ``steps`` of the verified tokens only (those of discarded tokens dropped; empty stays
    empty); ``eos_accepted`` when an accepted token is an EOS; ``discarded = proposed − drafted`` (the
    policy's ``verify_count``); the round's costs when the policy ``needs`` ``COSTS`` (``None`` otherwise).

    Called by ``runners.engine.speculative.SpeculativeRunner.generate``,
    ``runners.engine.batched.BatchedSpeculativeRunner.generate`` (each row; the batch's costs added once
    every row is verified) and ``runners.replay.replay._Row.end_round``.
    """
    d = len(verified)
    return RoundOutcome(gamma, d, accepted, tuple(confidences[:d]), any(t in eos for t in verified[:accepted]),
                        tuple(steps[:d]), draft_ms=draft_ms, verify_ms=verify_ms, round_ms=round_ms,
                        discarded=proposed - d)
