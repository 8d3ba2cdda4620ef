"""The interface between the decoding loop and a speculation-length policy.

The loop (``runners.engine.speculative.SpeculativeRunner``) owns prefill, drafting,
verification and cache cropping. A policy only *decides*:

* ``begin_prompt()`` is called before every prompt (per-turn);
* ``next_gamma()`` returns the number of tokens to draft in the next round
  (γ, an int >= 1), *before* the loop caps it by the remaining token budget;
* ``stop_drafting(confidence)`` is asked after each drafted token with the
  draft's probability of the token it just drafted; ``True`` ends the round's
  drafting early (that token is still verified), as transformers'
  ``assistant_confidence_threshold`` does;
* ``observe(outcome)`` is told what happened in the round.

Definitions used by every policy (GammaTune paper, Sec. 3/4; issue #3):
``A`` = ``outcome.accepted`` = draft tokens the target accepted in the round,
*not* counting the target's own bonus/correction token; ``d`` =
``outcome.drafted`` = draft tokens actually proposed in the round (can be
below γ after a confidence stop, an EOS, or the token budget).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoundOutcome:
    """What one verification round did.

    ``confidences[i]`` is the draft's probability of drafted token ``i``
    (empty when the drafter has no probabilities, e.g. prompt lookup).
    The first ``accepted`` drafted tokens were accepted; when
    ``accepted < drafted`` token ``accepted`` was rejected and the rest were
    never compared.
    """

    gamma: int
    drafted: int
    accepted: int
    confidences: tuple[float, ...] = field(default_factory=tuple)
    eos_accepted: bool = False  # an accepted drafted token was an EOS (generation ends in this round)

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.drafted:
            raise ValueError(f"need 0 <= accepted <= drafted, got {self.accepted} > {self.drafted}")

    @property
    def all_accepted(self) -> bool:
        """``A == d`` with ``d >= 1``: every drafted token was accepted."""
        return self.drafted >= 1 and self.accepted == self.drafted


class GammaPolicy(ABC):
    """Base class of every speculation-length policy.

    Subclasses are registered in ``methods.registry.POLICIES`` under the same
    string as their ``name`` and the ``policy:`` field of ``conf/method/*.yaml``.
    ``gamma_init`` is the initial γ (the top-level ``gamma`` config key).
    """

    name: str = ""

    def __init__(self, gamma_init: int) -> None:
        if int(gamma_init) != gamma_init or gamma_init < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {gamma_init!r}")
        self.gamma_init = int(gamma_init)

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Back to the state right after construction (a job calls it once, after its warm-up,
        so that every timed prompt sees the policy the job configured)."""

    def begin_prompt(self) -> None:  # noqa: B027 - optional hook
        """Called before each prompt; per-prompt state is reset here."""

    @abstractmethod
    def next_gamma(self) -> int:
        """γ for the next round (>= 1)."""

    def stop_drafting(self, confidence: float) -> bool:
        """Whether to stop drafting after a token drafted with this probability."""
        return False

    def observe(self, outcome: RoundOutcome) -> None:  # noqa: B027 - optional hook
        """Told the outcome of the round just verified."""

    def state(self) -> dict:
        """Policy state worth recording in the job summary (JSON-serialisable)."""
        return {}


class FixedGamma(GammaPolicy):
    """SpecDecode: a constant γ every round (Leviathan et al. 2023; Chen et al. 2023)."""

    name = "fixed"

    def next_gamma(self) -> int:
        return self.gamma_init
